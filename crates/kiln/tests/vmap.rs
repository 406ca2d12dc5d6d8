//! `vmap` against a loop over the batch. For every op family, a function vmapped over batched
//! arguments must equal the same function applied eagerly to each example and stacked, and its
//! batched graph must not grow with the batch (a batching rule per op, never a loop over the
//! examples). Also: in and out axes, non-contiguous and lazy inputs, nesting with itself, grad,
//! jvp and vjp, custom functions (their derivatives and batching rules), and the errors.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` is an argument list; the clone is a refcount

mod common;

use common::{assert_close, check_err, random_values, with_layout, Rng, LAYOUTS};
use kiln::ops::{self, AsArray, SliceSpec, SplitSpec, TensordotAxes};
use kiln::{checkpoint, grad, jvp, random, vjp, vmap, Array, CustomFunction, Dtype, ErrorKind, Result};
use std::sync::{Arc, Mutex};

/// The batch size of most tests.
const B: usize = 4;
/// The smaller batch the graph-size check compares with.
const SUB: usize = 2;

// ---------------------------------------------------------------------------------------------
// The reference: a loop over the batch.
// ---------------------------------------------------------------------------------------------

/// One entry per item, where a single entry applies to all (vmap's convention, restated).
fn per_item(axes: &[Option<i64>], n: usize) -> Vec<Option<i64>> {
    if axes.len() == 1 {
        vec![axes[0]; n]
    } else {
        assert_eq!(axes.len(), n, "test bug: one axis per item");
        axes.to_vec()
    }
}

/// A possibly negative axis of an array of rank `ndim` as an index.
fn norm(ax: i64, ndim: usize) -> usize {
    let a = if ax < 0 { ax + ndim as i64 } else { ax };
    assert!((0..ndim as i64).contains(&a), "test bug: axis {ax} for rank {ndim}");
    a as usize
}

/// Example `i` of `x` along axis `ax`, as a fresh array (`take` of a scalar index).
fn example(x: &Array, ax: usize, i: usize) -> Array {
    ops::take(x, Array::scalar(i as i32), Some(ax as i64)).unwrap()
}

/// The arguments of example `i`: batched ones sliced, unbatched ones shared.
fn example_args(args: &[Array], axes: &[Option<usize>], i: usize) -> Vec<Array> {
    args.iter().zip(axes).map(|(a, ax)| ax.map_or_else(|| a.clone(), |ax| example(a, ax, i))).collect()
}

/// Tolerances for comparing a batched result with the loop: exact for integers and bools,
/// a few rounding errors for floats (a batched kernel may add in another order).
fn tolerances(dtype: Dtype) -> (f64, f64) {
    match dtype {
        Dtype::F64 => (1e-12, 1e-12),
        Dtype::F32 => (1e-5, 1e-6),
        Dtype::F16 | Dtype::BF16 => (2e-2, 1e-3),
        _ => (0.0, 0.0),
    }
}

/// Asserts `got` has `want`'s shape, dtype and values.
fn assert_same(got: &Array, want: &Array, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let (rtol, atol) = tolerances(want.dtype());
    assert_close(&g, &w, rtol, atol, what);
}

/// How many pending nodes lie between `outputs` and `stops` (data leaves and stops excluded).
fn graph_size(outputs: &[Array], stops: &[Array]) -> usize {
    let mut seen: Vec<Array> = Vec::new();
    let mut stack = outputs.to_vec();
    while let Some(a) = stack.pop() {
        if stops.iter().chain(&seen).any(|s| s.same_node(&a)) {
            continue;
        }
        let Some((_, inputs)) = a.op_and_inputs() else { continue };
        seen.push(a);
        stack.extend(inputs);
    }
    seen.len()
}

/// Checks `vmap(f, in_axes, out_axes)` on `args` against a loop: each example's arguments
/// sliced out, `f` run eagerly, the results stacked along the out axis (or, for out axis `None`,
/// required equal across examples). Also checks that vmap evaluates none of its arguments and
/// that its graph has as many nodes for a batch of `SUB` as for the full one (no loop).
fn check_vmap(
    name: &str,
    f: impl Fn(&[Array]) -> Result<Vec<Array>>,
    args: &[Array],
    in_axes: &[Option<i64>],
    out_axes: &[Option<i64>],
) {
    let what = format!("{name} (in_axes {in_axes:?}, out_axes {out_axes:?})");
    let evaluated: Vec<bool> = args.iter().map(Array::is_evaluated).collect();
    let got = vmap(&f, in_axes, out_axes)(args).unwrap_or_else(|e| panic!("{what}: vmap: {e}"));
    let now: Vec<bool> = args.iter().map(Array::is_evaluated).collect();
    assert_eq!(now, evaluated, "{what}: vmap evaluated an argument");
    let axes: Vec<Option<usize>> =
        per_item(in_axes, args.len()).iter().zip(args).map(|(ax, a)| ax.map(|ax| norm(ax, a.ndim()))).collect();
    let size = args.iter().zip(&axes).find_map(|(a, ax)| ax.map(|ax| a.shape()[ax])).expect("test bug: nothing batched");
    if size > SUB {
        let sub_args: Vec<Array> = args
            .iter()
            .zip(&axes)
            .map(|(a, ax)| match ax {
                Some(ax) => {
                    let s = ops::slice_axis(a, *ax as i64, 0, SUB as i64).unwrap();
                    s.eval().unwrap();
                    s
                }
                None => a.clone(),
            })
            .collect();
        let sub = vmap(&f, in_axes, out_axes)(&sub_args).unwrap_or_else(|e| panic!("{what}: vmap of {SUB}: {e}"));
        assert_eq!(
            graph_size(&got, args),
            graph_size(&sub, &sub_args),
            "{what}: the batched graph grows with the batch size (a loop over examples?)"
        );
    }
    let examples: Vec<Vec<Array>> = (0..size)
        .map(|i| f(&example_args(args, &axes, i)).unwrap_or_else(|e| panic!("{what}: example {i}: {e}")))
        .collect();
    assert_eq!(got.len(), examples[0].len(), "{what}: number of outputs");
    for (j, (g, oax)) in got.iter().zip(per_item(out_axes, got.len())).enumerate() {
        let outs: Vec<Array> = examples.iter().map(|e| e[j].clone()).collect();
        let want = match oax {
            Some(ax) => ops::stack(&outs, ax).unwrap(),
            None => {
                for (i, o) in outs.iter().enumerate() {
                    assert_same(o, &outs[0], &format!("{what}: output {j} of example {i} (unbatched)"));
                }
                outs[0].clone()
            }
        };
        assert_same(g, &want, &format!("{what}: output {j}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Cases and their arguments.
// ---------------------------------------------------------------------------------------------

/// A function of per-example arguments, as vmap takes it.
type Fun = Box<dyn Fn(&[Array]) -> Result<Vec<Array>>>;

/// A named function under test.
struct Case {
    name: String,
    f: Fun,
}

/// A case with any number of outputs.
fn case(name: impl Into<String>, f: impl Fn(&[Array]) -> Result<Vec<Array>> + 'static) -> Case {
    Case { name: name.into(), f: Box::new(f) }
}

/// A case with one output.
fn case1(name: impl Into<String>, f: impl Fn(&[Array]) -> Result<Array> + 'static) -> Case {
    case(name, move |a: &[Array]| Ok(vec![f(a)?]))
}

/// How one argument's values are drawn.
#[derive(Clone, Copy, Debug)]
enum Draw {
    /// Uniform in [lo, hi) (integers: floored; bools: 0/1).
    Uniform(f64, f64),
    /// Distinct integers in 0..n along the last axis (indices that never collide).
    Distinct(usize),
    /// Values picked from a list (specials such as NaN and infinities).
    Pick(&'static [f64]),
}

/// One argument's per-example shape, dtype and values.
#[derive(Clone, Debug)]
struct Arg {
    shape: Vec<usize>,
    dtype: Dtype,
    draw: Draw,
}

/// An argument of `shape` and `dtype` drawn as `draw` says.
fn arg(shape: &[usize], dtype: Dtype, draw: Draw) -> Arg {
    Arg { shape: shape.to_vec(), dtype, draw }
}

/// A float32 argument uniform in [lo, hi).
fn f32_arg(shape: &[usize], lo: f64, hi: f64) -> Arg {
    arg(shape, Dtype::F32, Draw::Uniform(lo, hi))
}

/// A float32 array of `shape`, uniform in [lo, hi).
fn rand_f32(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Array {
    common::array(&rng.vec(shape.iter().product(), lo, hi), shape, Dtype::F32)
}

/// Values for `shape` drawn as `draw` says.
fn draw_values(rng: &mut Rng, shape: &[usize], dtype: Dtype, draw: Draw) -> Vec<f64> {
    let n: usize = shape.iter().product();
    match draw {
        Draw::Uniform(lo, hi) => random_values(rng, n, dtype, lo, hi),
        Draw::Pick(list) => (0..n).map(|_| list[(rng.next_u64() % list.len() as u64) as usize]).collect(),
        Draw::Distinct(range) => {
            let k = shape.last().copied().unwrap_or(1);
            assert!(k <= range, "test bug: {k} distinct values from 0..{range}");
            let mut out = Vec::with_capacity(n);
            for _ in 0..n / k.max(1) {
                let mut pool: Vec<f64> = (0..range).map(|v| v as f64).collect();
                for j in 0..k {
                    let pick = j + (rng.next_u64() % (range - j) as u64) as usize;
                    pool.swap(j, pick);
                }
                out.extend_from_slice(&pool[..k]);
            }
            out
        }
    }
}

/// `x` (batch first) with its batch axis moved to `ax`, as a lazy contiguous copy.
fn batch_at(x: Array, ax: i64) -> Array {
    if norm(ax, x.ndim()) == 0 {
        return x;
    }
    ops::copy(ops::moveaxis(&x, 0, ax).unwrap()).unwrap()
}

/// Arguments drawn from `specs`: unbatched ones of their per-example shape, batched ones with a
/// batch of `size` at their axis.
fn make_args(rng: &mut Rng, specs: &[Arg], axes: &[Option<i64>], size: usize) -> Vec<Array> {
    specs
        .iter()
        .zip(per_item(axes, specs.len()))
        .map(|(s, ax)| match ax {
            None => common::array(&draw_values(rng, &s.shape, s.dtype, s.draw), &s.shape, s.dtype),
            Some(ax) => {
                let shape: Vec<usize> = [size].iter().chain(&s.shape).copied().collect();
                batch_at(common::array(&draw_values(rng, &shape, s.dtype, s.draw), &shape, s.dtype), ax)
            }
        })
        .collect()
}

/// in_axes for `n` arguments: every non-empty subset batched at axis 0, and all at the last axis.
fn combos(n: usize) -> Vec<Vec<Option<i64>>> {
    let mut out: Vec<Vec<Option<i64>>> =
        (1..1u32 << n).map(|m| (0..n).map(|i| ((m >> i) & 1 == 1).then_some(0)).collect()).collect();
    out.push(vec![Some(-1); n]);
    out
}

/// Checks every case under every in_axes of `in_axes` with fresh arguments from `specs`; the out
/// axis alternates between the first and the last.
fn check_cases(seed: u64, cases: &[Case], specs: &[Arg], in_axes: &[Vec<Option<i64>>]) {
    let mut rng = Rng::new(seed);
    for c in cases {
        for (k, axes) in in_axes.iter().enumerate() {
            let args = make_args(&mut rng, specs, axes, B);
            let out_axes = [Some(if k % 2 == 0 { 0 } else { -1 })];
            check_vmap(&c.name, &c.f, &args, axes, &out_axes);
        }
    }
}

/// Each case with its own argument specs, under every combination of batched arguments.
fn check_each(seed: u64, cases: Vec<(Case, Vec<Arg>)>) {
    for (i, (c, specs)) in cases.into_iter().enumerate() {
        let n = specs.len();
        check_cases(seed + i as u64, &[c], &specs, &combos(n));
    }
}

/// in_axes of one argument: its first, second and last axis.
fn one_arg_axes() -> Vec<Vec<Option<i64>>> {
    vec![vec![Some(0)], vec![Some(1)], vec![Some(-1)]]
}

// ---------------------------------------------------------------------------------------------
// Op families.
// ---------------------------------------------------------------------------------------------

/// Cases applying each named one-argument op to argument 0.
macro_rules! unary_cases {
    ($($op:ident),* $(,)?) => { vec![$(case1(stringify!($op), |a: &[Array]| ops::$op(&a[0]))),*] };
}

#[test]
fn unary_ops() {
    let mut cases = unary_cases![
        exp, expm1, log, log1p, log2, log10, sqrt, rsqrt, square, reciprocal, sin, cos, tan, arcsin, arccos,
        arctan, sinh, cosh, tanh, arcsinh, arctanh, erf, erfinv, sigmoid, abs, negative, sign, copy,
    ];
    cases.push(case1("arccosh(x + 1)", |a| ops::arccosh(ops::add(&a[0], 1.0)?)));
    cases.push(case1("floor(10 x)", |a| ops::floor(ops::multiply(&a[0], 10.0)?)));
    cases.push(case1("ceil(10 x)", |a| ops::ceil(ops::multiply(&a[0], 10.0)?)));
    cases.push(case1("round(10 x)", |a| ops::round(ops::multiply(&a[0], 10.0)?)));
    cases.push(case1("stop_gradient", |a| kiln::stop_gradient(&a[0])));
    cases.push(case1("clip", |a| {
        let (lo, hi): (&dyn AsArray, &dyn AsArray) = (&0.3, &0.6);
        ops::clip(&a[0], Some(lo), Some(hi))
    }));
    check_cases(1, &cases, &[f32_arg(&[2, 3], 0.05, 0.95)], &one_arg_axes());
}

#[test]
fn predicates_and_integer_unary_ops() {
    const SPECIALS: &[f64] = &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1.5, -2.0];
    let predicates = unary_cases![isnan, isinf, isposinf, isneginf, isfinite, logical_not, sign, abs];
    check_cases(2, &predicates, &[arg(&[3, 2], Dtype::F32, Draw::Pick(SPECIALS))], &one_arg_axes());
    let integer = unary_cases![bitwise_invert, negative, abs, sign, square, logical_not];
    check_cases(3, &integer, &[arg(&[3, 2], Dtype::I32, Draw::Uniform(-50.0, 50.0))], &one_arg_axes());
    let boolean = unary_cases![bitwise_invert, logical_not];
    check_cases(4, &boolean, &[arg(&[3, 2], Dtype::Bool, Draw::Uniform(0.0, 1.0))], &one_arg_axes());
}

#[test]
fn astype() {
    let to = [Dtype::I32, Dtype::U8, Dtype::Bool, Dtype::F64, Dtype::F16, Dtype::BF16, Dtype::I64];
    let cases: Vec<Case> = to.iter().map(|&d| case1(format!("astype {d:?}"), move |a| ops::astype(&a[0], d))).collect();
    check_cases(5, &cases, &[f32_arg(&[2, 3], -300.0, 300.0)], &one_arg_axes());
    let from_int: Vec<Case> = [Dtype::F32, Dtype::U16, Dtype::Bool]
        .iter()
        .map(|&d| case1(format!("int astype {d:?}"), move |a| ops::astype(&a[0], d)))
        .collect();
    check_cases(6, &from_int, &[arg(&[3], Dtype::I64, Draw::Uniform(-70000.0, 70000.0))], &one_arg_axes());
}

/// Cases applying each named two-argument op to arguments 0 and 1.
macro_rules! binary_cases {
    ($($op:ident),* $(,)?) => { vec![$(case1(stringify!($op), |a: &[Array]| ops::$op(&a[0], &a[1]))),*] };
}

/// Per-example shape pairs of binary ops: equal, broadcast either way (different ranks), a scalar.
const BROADCASTS: [(&[usize], &[usize]); 5] =
    [(&[3, 4], &[3, 4]), (&[3, 4], &[4]), (&[4], &[3, 4]), (&[], &[3, 4]), (&[3, 1], &[1, 4])];

#[test]
fn binary_ops_broadcast_batched_with_unbatched() {
    let float = binary_cases![
        add, subtract, multiply, divide, floor_divide, remainder, power, maximum, minimum, arctan2, logaddexp,
        equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or,
    ];
    let int = binary_cases![
        add, subtract, multiply, floor_divide, remainder, maximum, minimum, bitwise_and, bitwise_or, bitwise_xor,
        left_shift, right_shift, equal, less,
    ];
    let boolean = binary_cases![logical_and, logical_or, bitwise_xor, equal, not_equal, maximum];
    for (k, (sa, sb)) in BROADCASTS.iter().enumerate() {
        let seed = 10 * k as u64;
        check_cases(seed, &float, &[f32_arg(sa, 0.5, 2.0), f32_arg(sb, -2.0, 2.0)], &combos(2));
        let ints = [arg(sa, Dtype::I32, Draw::Uniform(-20.0, 20.0)), arg(sb, Dtype::I32, Draw::Uniform(0.0, 5.0))];
        check_cases(seed + 1, &int, &ints, &combos(2));
        let bools = [arg(sa, Dtype::Bool, Draw::Uniform(0.0, 1.0)), arg(sb, Dtype::Bool, Draw::Uniform(0.0, 1.0))];
        check_cases(seed + 2, &boolean, &bools, &combos(2));
    }
}

#[test]
fn binary_ops_with_scalars_and_promotion() {
    let cases = vec![
        case1("x * 2.5 (weak)", |a| ops::multiply(&a[0], 2.5)),
        case1("3 - x (weak)", |a| ops::subtract(3.0, &a[0])),
        case1("x ** 2", |a| ops::power(&a[0], 2)),
        case1("x + int array", |a| ops::add(&a[0], Array::from_vec(vec![1i32, 2, 3]))),
        case1("x < f64 scalar array", |a| ops::less(&a[0], Array::scalar(0.25f64))),
        case1("i32 + f32 (promotes)", |a| ops::add(&a[1], &a[0])),
    ];
    let specs = [f32_arg(&[2, 3], -1.0, 1.0), arg(&[3], Dtype::I32, Draw::Uniform(-9.0, 9.0))];
    check_cases(20, &cases, &specs, &combos(2));
}

#[test]
fn where_select() {
    let cases = vec![
        case1("where", |a| ops::where_(&a[0], &a[1], &a[2])),
        case1("where(x > 0, x, y)", |a| ops::where_(ops::greater(&a[1], 0.0)?, &a[1], &a[2])),
        case1("where with scalars", |a| ops::where_(&a[0], 1.5, -2.0)),
    ];
    for (k, shapes) in [[&[3, 4][..], &[4], &[3, 1]], [&[], &[3, 4], &[4]], [&[3, 4], &[3, 4], &[]]].iter().enumerate() {
        let specs = [
            arg(shapes[0], Dtype::Bool, Draw::Uniform(0.0, 1.0)),
            f32_arg(shapes[1], -1.0, 1.0),
            f32_arg(shapes[2], -1.0, 1.0),
        ];
        check_cases(30 + k as u64, &cases, &specs, &combos(3));
    }
}

/// `SliceSpec` shorthand.
fn sl(start: Option<i64>, stop: Option<i64>, step: i64) -> SliceSpec {
    SliceSpec { start, stop, step }
}

/// `::-1` on an axis.
fn rev_all() -> SliceSpec {
    sl(None, None, -1)
}

#[test]
fn shape_ops() {
    let cases = vec![
        case1("reshape (4, 6)", |a| ops::reshape(&a[0], &[4, 6])),
        case1("reshape (3, -1, 2)", |a| ops::reshape(&a[0], &[3, -1, 2])),
        case1("reshape (-1,)", |a| ops::reshape(&a[0], &[-1])),
        case1("flatten", |a| ops::flatten(&a[0], 0, -1)),
        case1("flatten 1..2", |a| ops::flatten(&a[0], 1, 2)),
        case1("unflatten", |a| ops::unflatten(&a[0], -1, &[2, -1])),
        case1("transpose", |a| ops::transpose(&a[0], None)),
        case1("transpose (2, 0, 1)", |a| ops::transpose(&a[0], Some(&[2, 0, 1]))),
        case1("swapaxes", |a| ops::swapaxes(&a[0], 0, -1)),
        case1("moveaxis", |a| ops::moveaxis(&a[0], 0, 2)),
        case1("broadcast_to", |a| ops::broadcast_to(&a[0], &[5, 2, 3, 4])),
        case1("broadcast_to size-1 axis", |a| ops::broadcast_to(ops::expand_dims(&a[0], &[1])?, &[2, 5, 3, 4])),
        case1("expand_dims", |a| ops::expand_dims(&a[0], &[0, -1])),
        case1("squeeze one", |a| ops::squeeze(ops::reshape(&a[0], &[2, 1, 3, 1, 4])?, Some(&[-2]))),
        case1("squeeze all", |a| ops::squeeze(ops::reshape(&a[0], &[1, 2, 1, 12, 1])?, None)),
        case1("slice negative steps", |a| ops::slice(&a[0], &[rev_all(), sl(Some(2), Some(0), -2), sl(Some(1), None, 2)])),
        case1("slice from the end", |a| ops::slice(&a[0], &[sl(Some(-1), None, 1), sl(Some(-2), Some(-4), -1)])),
        case1("slice_axis", |a| ops::slice_axis(&a[0], -1, 1, 3)),
        case1("flip", |a| ops::flip(&a[0], None)),
        case1("flip axes", |a| ops::flip(&a[0], Some(&[-1, 0]))),
        case1("roll", |a| ops::roll(&a[0], 2, Some(1))),
        case1("roll flat", |a| ops::roll(&a[0], -3, None)),
        case1("roll_axes", |a| ops::roll_axes(&a[0], &[1, 3], &[0, -1])),
        case1("tile", |a| ops::tile(&a[0], &[2, 1, 2])),
        case1("tile new axis", |a| ops::tile(&a[0], &[2, 1, 1, 1])),
        case1("repeat", |a| ops::repeat(&a[0], 2, Some(-1))),
        case1("repeat flat", |a| ops::repeat(&a[0], 3, None)),
        case1("pad", |a| ops::pad(&a[0], &[(1, 0), (0, 2), (1, 1)], 0.5)),
        case1("pad all", |a| ops::pad(&a[0], &[(1, 1)], -1.0)),
        case1("tril", |a| ops::tril(&a[0], 0)),
        case1("triu", |a| ops::triu(&a[0], 1)),
        case1("tril below", |a| ops::tril(&a[0], -1)),
        case1("diagonal", |a| ops::diagonal(&a[0], 0, 1, 2)),
        case1("diagonal offset", |a| ops::diagonal(&a[0], 1, -1, 0)),
        case1("diag of a matrix", |a| ops::diag(ops::reshape(&a[0], &[4, 6])?, -1)),
        case1("diag of a vector", |a| ops::diag(ops::reshape(ops::slice_axis(&a[0], 0, 0, 1)?, &[12])?, 1)),
        case("split sections", |a| ops::split(&a[0], SplitSpec::Sections(2), 0)),
        case("split indices", |a| ops::split(&a[0], SplitSpec::Indices(vec![1, -1]), 2)),
        case1("full_like", |a| ops::full_like(&a[0], 7.0)),
        case1("identity", |a| Ok(a[0].clone())),
    ];
    check_cases(40, &cases, &[f32_arg(&[2, 3, 4], -1.0, 1.0)], &one_arg_axes());
}

#[test]
fn joins_and_updates_of_batched_with_unbatched() {
    let region = [SliceSpec::ALL, sl(Some(1), Some(2), 1), sl(Some(3), None, -2)];
    let cases = vec![
        case1("concatenate", |a| ops::concatenate(&[a[0].clone(), a[1].clone()], 1)),
        case1("concatenate three", |a| ops::concatenate(&[a[1].clone(), a[0].clone(), a[1].clone()], -1)),
        case1("stack", |a| ops::stack(&[a[0].clone(), a[1].clone()], 0)),
        case1("stack last", |a| ops::stack(&[a[1].clone(), a[0].clone()], -1)),
        case1("slice_update", move |a| ops::slice_update(&a[0], ops::slice(&a[1], &region)?, &region)),
        case1("slice_update broadcast", move |a| {
            ops::slice_update(&a[0], ops::slice_axis(&a[1], 2, 0, 1)?, &[rev_all(), rev_all()])
        }),
        case1("pad with a value", |a| ops::pad(&a[0], &[(1, 0), (0, 2), (1, 1)], ops::sum(&a[1], None, false)?)),
        case1("full_like with a value", |a| ops::full_like(&a[0], ops::max(&a[1], None, false)?)),
    ];
    let specs = [f32_arg(&[2, 3, 4], -1.0, 1.0), f32_arg(&[2, 3, 4], -1.0, 1.0)];
    check_cases(50, &cases, &specs, &combos(2));
}

#[test]
fn reductions() {
    type Reduce = fn(Array, Option<&[i64]>, bool) -> Result<Array>;
    let families: [(&str, Reduce); 8] = [
        ("sum", |x, a, k| ops::sum(x, a, k)),
        ("prod", |x, a, k| ops::prod(x, a, k)),
        ("max", |x, a, k| ops::max(x, a, k)),
        ("min", |x, a, k| ops::min(x, a, k)),
        ("mean", |x, a, k| ops::mean(x, a, k)),
        ("var", |x, a, k| ops::var(x, a, k, 1)),
        ("std", |x, a, k| ops::std(x, a, k, 0)),
        ("logsumexp", |x, a, k| ops::logsumexp(x, a, k)),
    ];
    let bool_families: [(&str, Reduce); 3] = [
        ("all", |x, a, k| ops::all(x, a, k)),
        ("any", |x, a, k| ops::any(x, a, k)),
        ("sum of bools", |x, a, k| ops::sum(x, a, k)),
    ];
    let axes: [Option<&'static [i64]>; 5] = [None, Some(&[0]), Some(&[-1]), Some(&[0, 2]), Some(&[-2, -1])];
    let mut cases = Vec::new();
    let mut bool_cases = Vec::new();
    for ax in axes {
        for keep in [false, true] {
            for (name, r) in families {
                cases.push(case1(format!("{name} {ax:?} keepdims={keep}"), move |a| r(a[0].clone(), ax, keep)));
            }
            for (name, r) in bool_families {
                bool_cases.push(case1(format!("{name} {ax:?} keepdims={keep}"), move |a| r(ops::greater(&a[0], 0.3)?, ax, keep)));
            }
        }
        cases.push(case1(format!("softmax {ax:?}"), move |a| ops::softmax(&a[0], ax, false)));
    }
    for axis in [None, Some(0), Some(-1)] {
        for keep in [false, true] {
            cases.push(case1(format!("argmax {axis:?} keepdims={keep}"), move |a| ops::argmax(&a[0], axis, keep)));
            cases.push(case1(format!("argmin {axis:?} keepdims={keep}"), move |a| ops::argmin(&a[0], axis, keep)));
        }
    }
    check_cases(60, &cases, &[f32_arg(&[3, 4, 5], 0.5, 1.5)], &one_arg_axes());
    check_cases(61, &bool_cases, &[f32_arg(&[3, 4, 5], 0.0, 1.0)], &one_arg_axes());
    let int_sums = vec![
        case1("sum i32 axis 1", |a| ops::sum(&a[0], Some(&[1]), false)),
        case1("max i32 all", |a| ops::max(&a[0], None, false)),
        case1("argmax i32 -1", |a| ops::argmax(&a[0], Some(-1), false)),
    ];
    check_cases(62, &int_sums, &[arg(&[3, 4], Dtype::I32, Draw::Uniform(-5.0, 5.0))], &one_arg_axes());
}

#[test]
fn scans() {
    type Scan = fn(Array, Option<i64>, bool, bool) -> Result<Array>;
    let families: [(&str, Scan); 4] = [
        ("cumsum", |x, a, r, i| ops::cumsum(x, a, r, i)),
        ("cumprod", |x, a, r, i| ops::cumprod(x, a, r, i)),
        ("cummax", |x, a, r, i| ops::cummax(x, a, r, i)),
        ("cummin", |x, a, r, i| ops::cummin(x, a, r, i)),
    ];
    let mut cases = Vec::new();
    for (name, s) in families {
        for axis in [None, Some(0), Some(-1)] {
            for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
                let label = format!("{name} axis {axis:?} reverse={reverse} inclusive={inclusive}");
                cases.push(case1(label, move |a| s(a[0].clone(), axis, reverse, inclusive)));
            }
        }
    }
    check_cases(70, &cases, &[f32_arg(&[3, 4], 0.5, 1.5)], &one_arg_axes());
    let int_cases = vec![
        case1("cumsum i32", |a| ops::cumsum(&a[0], Some(1), false, true)),
        case1("cummax i32 reverse", |a| ops::cummax(&a[0], Some(0), true, true)),
    ];
    check_cases(71, &int_cases, &[arg(&[3, 4], Dtype::I32, Draw::Uniform(-9.0, 9.0))], &one_arg_axes());
}

/// A partition along `axis` made comparable: the element at `kth` and the sorted parts before
/// and after it (the order within the parts is unspecified).
fn canonical_partition(p: &Array, kth: i64, axis: i64) -> Result<Vec<Array>> {
    let n = p.dim(axis)? as i64;
    Ok(vec![
        ops::slice_axis(p, axis, kth, kth + 1)?,
        ops::sort(ops::slice_axis(p, axis, 0, kth)?, Some(axis))?,
        ops::sort(ops::slice_axis(p, axis, kth + 1, n)?, Some(axis))?,
    ])
}

#[test]
fn sort_argsort_partition_topk() {
    let mut cases = Vec::new();
    for axis in [None, Some(0), Some(-1)] {
        cases.push(case1(format!("sort {axis:?}"), move |a| ops::sort(&a[0], axis)));
        cases.push(case1(format!("argsort {axis:?}"), move |a| ops::argsort(&a[0], axis)));
        // The two largest elements in unspecified order: their min and max identify them.
        cases.push(case(format!("topk {axis:?}"), move |a| {
            let t = ops::topk(&a[0], 2, axis)?;
            let ax = [axis.unwrap_or(0)];
            Ok(vec![ops::min(&t, Some(&ax), false)?, ops::max(&t, Some(&ax), false)?])
        }));
    }
    for (kth, axis) in [(1, 0), (-2, -1), (0, 1), (3, 1)] {
        cases.push(case(format!("partition kth={kth} axis={axis}"), move |a| {
            let n = a[0].dim(axis)? as i64;
            canonical_partition(&ops::partition(&a[0], kth, Some(axis))?, kth.rem_euclid(n), axis)
        }));
        cases.push(case(format!("argpartition kth={kth} axis={axis}"), move |a| {
            let n = a[0].dim(axis)? as i64;
            let idx = ops::argpartition(&a[0], kth, Some(axis))?;
            let mut out = canonical_partition(&ops::take_along_axis(&a[0], &idx, Some(axis))?, kth.rem_euclid(n), axis)?;
            out.extend(canonical_partition(&idx, kth.rem_euclid(n), axis)?);
            Ok(out)
        }));
    }
    cases.push(case1("partition flat", |a| ops::sort(ops::slice_axis(ops::partition(&a[0], 5, None)?, 0, 0, 5)?, Some(0))));
    check_cases(80, &cases, &[f32_arg(&[3, 4], -1.0, 1.0)], &one_arg_axes());
}

#[test]
fn take_and_along_axis() {
    let x = || f32_arg(&[4, 5], -1.0, 1.0);
    let idx = |shape: &[usize], lo: f64, hi: f64| arg(shape, Dtype::I32, Draw::Uniform(lo, hi));
    check_each(90, vec![
        (case1("take axis 0", |a| ops::take(&a[0], &a[1], Some(0))), vec![x(), idx(&[3], -4.0, 4.0)]),
        (case1("take axis -1, 2-d indices", |a| ops::take(&a[0], &a[1], Some(-1))), vec![x(), idx(&[2, 3], -5.0, 5.0)]),
        (case1("take flat", |a| ops::take(&a[0], &a[1], None)), vec![x(), idx(&[3], -20.0, 20.0)]),
        (case1("take scalar index", |a| ops::take(&a[0], &a[1], Some(1))), vec![x(), idx(&[], 0.0, 5.0)]),
        (
            case1("take int64 indices", |a| ops::take(&a[0], &a[1], Some(0))),
            vec![x(), arg(&[2, 2], Dtype::I64, Draw::Uniform(0.0, 4.0))],
        ),
        (case1("take_along_axis 1", |a| ops::take_along_axis(&a[0], &a[1], Some(1))), vec![x(), idx(&[4, 2], -5.0, 5.0)]),
        (case1("take_along_axis 0", |a| ops::take_along_axis(&a[0], &a[1], Some(0))), vec![x(), idx(&[2, 5], -4.0, 4.0)]),
        (case1("take_along_axis broadcast", |a| ops::take_along_axis(&a[0], &a[1], Some(1))), vec![x(), idx(&[1, 3], 0.0, 5.0)]),
        (case1("take_along_axis flat", |a| ops::take_along_axis(&a[0], &a[1], None)), vec![x(), idx(&[6], 0.0, 20.0)]),
        (
            case1("put_along_axis", |a| ops::put_along_axis(&a[0], &a[1], &a[2], Some(1))),
            vec![x(), arg(&[4, 2], Dtype::I32, Draw::Distinct(5)), f32_arg(&[4, 2], 5.0, 9.0)],
        ),
        (
            case1("put_along_axis scalar value", |a| ops::put_along_axis(&a[0], &a[1], &a[2], Some(0))),
            vec![x(), arg(&[1, 5], Dtype::I32, Draw::Uniform(0.0, 4.0)), f32_arg(&[], 5.0, 9.0)],
        ),
    ]);
}

#[test]
fn gather_and_scatter() {
    let x = || f32_arg(&[4, 5], -1.0, 1.0);
    let idx = |shape: &[usize], lo: f64, hi: f64| arg(shape, Dtype::I32, Draw::Uniform(lo, hi));
    let distinct = |shape: &[usize], n: usize| arg(shape, Dtype::I32, Draw::Distinct(n));
    let upd = |shape: &[usize]| f32_arg(shape, 2.0, 3.0);
    check_each(100, vec![
        (case1("gather rows", |a| ops::gather(&a[0], &a[1..2], &[0], &[1, 5])), vec![x(), idx(&[2, 3], 0.0, 4.0)]),
        (
            case1("gather 2x2 blocks", |a| ops::gather(&a[0], &a[1..3], &[0, 1], &[2, 2])),
            vec![x(), idx(&[3], 0.0, 3.0), idx(&[3], 0.0, 4.0)],
        ),
        (
            case1("gather broadcast indices", |a| ops::gather(&a[0], &a[1..3], &[1, 0], &[1, 1])),
            vec![x(), idx(&[2, 1], -5.0, 5.0), idx(&[1, 3], -4.0, 4.0)],
        ),
        (
            case1("scatter rows", |a| ops::scatter(&a[0], &a[1..2], &a[2], &[0])),
            vec![x(), distinct(&[3], 4), upd(&[3, 1, 5])],
        ),
        (
            case1("scatter elements", |a| ops::scatter(&a[0], &a[1..3], &a[3], &[0, 1])),
            vec![x(), distinct(&[3], 4), idx(&[3], 0.0, 5.0), upd(&[3, 1, 1])],
        ),
        (
            case1("scatter_add duplicates", |a| ops::scatter_add(&a[0], &a[1..2], &a[2], &[0])),
            vec![x(), idx(&[5], -4.0, 4.0), upd(&[5, 1, 5])],
        ),
        (
            case1("scatter_max", |a| ops::scatter_max(&a[0], &a[1..3], &a[3], &[0, 1])),
            vec![x(), idx(&[5], 0.0, 4.0), idx(&[5], 0.0, 5.0), f32_arg(&[5, 1, 1], -1.0, 1.0)],
        ),
        (
            case1("scatter_min", |a| ops::scatter_min(&a[0], &a[1..3], &a[3], &[1, 0])),
            vec![x(), idx(&[2, 3], 0.0, 5.0), idx(&[2, 3], 0.0, 4.0), f32_arg(&[2, 3, 1, 1], -1.0, 1.0)],
        ),
        (
            case1("scatter_prod broadcast updates", |a| ops::scatter_prod(&a[0], &a[1..2], &a[2], &[1])),
            vec![x(), idx(&[3], 0.0, 5.0), upd(&[1, 4, 1])],
        ),
    ]);
}

#[test]
fn matmul_and_contractions() {
    let m = |shape: &[usize]| f32_arg(shape, -1.0, 1.0);
    check_each(110, vec![
        (case1("matmul", |a| ops::matmul(&a[0], &a[1])), vec![m(&[3, 4]), m(&[4, 2])]),
        (case1("matmul vector @ matrix", |a| ops::matmul(&a[0], &a[1])), vec![m(&[4]), m(&[4, 2])]),
        (case1("matmul matrix @ vector", |a| ops::matmul(&a[0], &a[1])), vec![m(&[3, 4]), m(&[4])]),
        (case1("matmul vector @ vector", |a| ops::matmul(&a[0], &a[1])), vec![m(&[4]), m(&[4])]),
        (case1("matmul broadcast batch", |a| ops::matmul(&a[0], &a[1])), vec![m(&[2, 3, 4]), m(&[4, 2])]),
        (case1("matmul batched both", |a| ops::matmul(&a[0], &a[1])), vec![m(&[2, 3, 4]), m(&[1, 4, 5])]),
        (case1("addmm", |a| ops::addmm(&a[0], &a[1], &a[2], 0.5, 2.0)), vec![m(&[3, 2]), m(&[3, 4]), m(&[4, 2])]),
        (case1("outer", |a| ops::outer(&a[0], &a[1])), vec![m(&[3]), m(&[2, 2])]),
        (case1("inner", |a| ops::inner(&a[0], &a[1])), vec![m(&[2, 4]), m(&[3, 4])]),
        (case1("tensordot 2", |a| ops::tensordot(&a[0], &a[1], TensordotAxes::Count(2))), vec![m(&[2, 3, 4]), m(&[3, 4, 2])]),
        (
            case1("tensordot pairs", |a| ops::tensordot(&a[0], &a[1], TensordotAxes::Pairs(vec![0], vec![-1]))),
            vec![m(&[3, 2]), m(&[2, 3])],
        ),
        (case1("einsum ij,jk->ik", |a| ops::einsum("ij,jk->ik", &a[..2])), vec![m(&[3, 4]), m(&[4, 2])]),
        (case1("einsum ij,kj->ki", |a| ops::einsum("ij,kj->ki", &a[..2])), vec![m(&[3, 4]), m(&[2, 4])]),
        (case1("einsum bij,bjk->bik", |a| ops::einsum("bij,bjk->bik", &a[..2])), vec![m(&[2, 3, 4]), m(&[2, 4, 2])]),
        (case1("einsum i,i->", |a| ops::einsum("i,i->", &a[..2])), vec![m(&[5]), m(&[5])]),
        (case1("einsum ij->j", |a| ops::einsum("ij->j", &a[..1])), vec![m(&[3, 4])]),
        (case1("einsum ij,jk,k->i", |a| ops::einsum("ij,jk,k->i", &a[..3])), vec![m(&[3, 4]), m(&[4, 2]), m(&[2])]),
    ]);
}

#[test]
fn random_ops_with_batched_keys() {
    let key = || arg(&[2], Dtype::U32, Draw::Uniform(0.0, 4.0e9));
    let samplers = vec![
        case1("uniform", |a| random::uniform(-1.0, 2.0, &[3, 2], Dtype::F32, Some(&a[0]))),
        case1("uniform f64", |a| random::uniform(0.0, 1.0, &[4], Dtype::F64, Some(&a[0]))),
        case1("normal", |a| random::normal(&[5], Dtype::F32, 1.0, 2.0, Some(&a[0]))),
        case1("truncated_normal", |a| random::truncated_normal(-1.0, 1.5, &[2, 2], Dtype::F32, Some(&a[0]))),
        case1("randint", |a| random::randint(-3, 9, &[4], Dtype::I32, Some(&a[0]))),
        case1("bits", |a| random::bits(&[2, 3], 2, Some(&a[0]))),
        case1("gumbel", |a| random::gumbel(&[3], Dtype::F32, Some(&a[0]))),
        case1("bernoulli", |a| random::bernoulli(0.3, Some(&[6]), Some(&a[0]))),
        case1("permutation", |a| random::permutation(6, Some(&a[0]))),
        case1("split", |a| random::split(&a[0], 3)),
        case("split, then draw with each subkey", |a| {
            let ks = random::split(&a[0], 2)?;
            let k = |i: i64| ops::reshape(ops::slice_axis(&ks, 0, i, i + 1)?, &[2]);
            let u = random::uniform(0.0, 1.0, &[3], Dtype::F32, Some(&k(0)?))?;
            Ok(vec![u, random::normal(&[2], Dtype::F32, 0.0, 1.0, Some(&k(1)?))?])
        }),
    ];
    check_cases(120, &samplers, &[key()], &[vec![Some(0)], vec![Some(-1)]]);
    // Keys made by split, batched along axis 1.
    let keys = random::split(&random::key(7), B).unwrap();
    let keys_t = ops::copy(ops::transpose(&keys, None).unwrap()).unwrap();
    for c in &samplers {
        check_vmap(&c.name, &c.f, &[keys.clone()], &[Some(0)], &[Some(0)]);
        check_vmap(&c.name, &c.f, &[keys_t.clone()], &[Some(1)], &[Some(1)]);
    }
    // Keys batched together with data, or shared by every example.
    check_each(121, vec![
        (case1("bernoulli of p", |a| random::bernoulli(&a[1], None, Some(&a[0]))), vec![key(), f32_arg(&[6], 0.0, 1.0)]),
        (
            case1("categorical", |a| random::categorical(&a[1], -1, Some(4), Some(&a[0]))),
            vec![key(), f32_arg(&[3, 5], -2.0, 2.0)],
        ),
        (case1("permutation_of", |a| random::permutation_of(&a[1], 0, Some(&a[0]))), vec![key(), f32_arg(&[5, 2], -1.0, 1.0)]),
        (
            case1("uniform + x", |a| ops::add(random::uniform(0.0, 1.0, a[1].shape(), Dtype::F32, Some(&a[0]))?, &a[1])),
            vec![key(), f32_arg(&[3], -1.0, 1.0)],
        ),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Axes, layouts, laziness.
// ---------------------------------------------------------------------------------------------

#[test]
fn unbatched_outputs_broadcast_or_pass_through() {
    let mut rng = Rng::new(130);
    let f = |a: &[Array]| {
        Ok(vec![
            ops::exp(&a[1])?,
            ops::multiply(&a[0], 2.0)?,
            ops::sum(&a[1], None, false)?,
            ops::arange(0.0, 3.0, 1.0, Dtype::I32)?,
            a[1].clone(),
        ])
    };
    for axes in [vec![Some(0), None], vec![Some(-1), None]] {
        let args = make_args(&mut rng, &[f32_arg(&[3], -1.0, 1.0), f32_arg(&[2, 3], -1.0, 1.0)], &axes, B);
        check_vmap("unbatched outputs, broadcast", f, &args, &axes, &[Some(0)]);
        check_vmap("unbatched outputs, last axis", f, &args, &axes, &[Some(-1)]);
        check_vmap("unbatched outputs, mixed", f, &args, &axes, &[None, Some(1), None, Some(1), None]);
        // Out axis None hands the unbatched output back unchanged, of its per-example shape.
        let out = vmap(f, &axes, &[None, Some(0), None, None, None])(&args).unwrap();
        assert_eq!(out[0].shape(), &[2, 3]);
        assert_eq!(out[3].to_vec::<i32>().unwrap(), vec![0, 1, 2]);
        assert!(out[4].same_node(&args[1]), "an unbatched argument returned as is");
        // Broadcast along the out axis: every example sees the same values.
        let out = vmap(f, &axes, &[Some(1), Some(1), Some(0), Some(1), Some(0)])(&args).unwrap();
        assert_eq!(out[0].shape(), &[2, B, 3]);
        assert_eq!(out[2].shape(), &[B]);
    }
}

#[test]
fn in_axes_and_out_axes_variants() {
    let mut rng = Rng::new(140);
    // x: (2, 3), y: (3, 4) per example; outputs of per-example ranks 2, 0 and 3.
    let f = |a: &[Array]| {
        let p = ops::matmul(&a[0], &a[1])?;
        Ok(vec![p.clone(), ops::sum(&p, None, false)?, ops::expand_dims(ops::tanh(&a[0])?, &[1])?])
    };
    let specs = [f32_arg(&[2, 3], -1.0, 1.0), f32_arg(&[3, 4], -1.0, 1.0)];
    let in_axes = [
        vec![Some(0)],
        vec![Some(1)],
        vec![Some(-1)],
        vec![Some(2), Some(-2)],
        vec![Some(-3), Some(0)],
        vec![None, Some(1)],
        vec![Some(2), None],
    ];
    let out_axes = [vec![Some(0)], vec![Some(1), Some(0), Some(2)], vec![Some(-1)], vec![Some(-2), Some(-1), Some(3)]];
    for ia in &in_axes {
        for oa in &out_axes {
            let args = make_args(&mut rng, &specs, ia, B);
            check_vmap("matmul, sum, expand_dims", f, &args, ia, oa);
        }
    }
    // One array passed twice, batched along different axes: example i pairs row i with column i.
    let sq = make_args(&mut rng, &[f32_arg(&[B], -1.0, 1.0)], &[None], B).remove(0);
    let sq = ops::outer(&sq, ops::arange(1.0, 1.0 + B as f64, 1.0, Dtype::F32).unwrap()).unwrap();
    let dot = |a: &[Array]| Ok(vec![ops::inner(&a[0], &a[1])?, ops::multiply(&a[0], &a[1])?]);
    check_vmap("same array, two axes", dot, &[sq.clone(), sq], &[Some(0), Some(1)], &[Some(0)]);
    // The out axis indexes the batched output: -1 is after the last per-example axis.
    let args = make_args(&mut rng, &specs, &[Some(0)], B);
    let out = vmap(f, &[Some(0)], &[Some(-1), Some(0), Some(1)])(&args).unwrap();
    assert_eq!(out[0].shape(), &[2, 4, B]);
    assert_eq!(out[1].shape(), &[B]);
    assert_eq!(out[2].shape(), &[2, B, 1, 3]);
}

#[test]
fn non_contiguous_inputs() {
    let mut rng = Rng::new(150);
    let cases = vec![
        case1("softmax(x) @ y", |a| ops::matmul(ops::softmax(&a[0], Some(&[-1]), false)?, &a[1])),
        case1("cumsum(x) * y.T[0]", |a| {
            ops::multiply(ops::cumsum(&a[0], Some(0), false, true)?, ops::slice_axis(ops::transpose(&a[1], None)?, 0, 0, 1)?)
        }),
        case1("take(x, argmax(y))", |a| ops::take(&a[0], ops::argmax(&a[1], Some(0), false)?, Some(1))),
        case("sort and reverse", |a| Ok(vec![ops::sort(&a[0], Some(-1))?, ops::flip(&a[1], None)?])),
    ];
    // Per example x: (3, 4) and y: (4, 5); batched x is (B, 3, 4) and y is (4, 5, B).
    for layout in LAYOUTS {
        let (sx, sy) = ([B, 3, 4], [4, 5, B]);
        let x = with_layout(&rng.vec(B * 12, -1.0, 1.0), &sx, Dtype::F32, layout);
        let y = with_layout(&rng.vec(B * 20, -1.0, 1.0), &sy, Dtype::F32, layout);
        for c in &cases {
            check_vmap(&format!("{} {layout:?}", c.name), &c.f, &[x.clone(), y.clone()], &[Some(0), Some(2)], &[Some(0)]);
        }
        // A batch axis of a broadcast (zero-stride) view.
        let bx = ops::broadcast_to(ops::slice_axis(&x, 0, 0, 1).unwrap(), &sx).unwrap();
        check_vmap(&format!("broadcast batch {layout:?}"), &cases[0].f, &[bx, y.clone()], &[Some(0), Some(2)], &[Some(1)]);
    }
}

#[test]
fn batch_of_an_offset_view() {
    // A contiguous view that starts inside its buffer (x[2:] of a bigger batch): kernels that
    // read their input row by row must start at the view's offset.
    let mut rng = Rng::new(155);
    let big = rand_f32(&mut rng, &[B + 2, 3, 4], -1.0, 1.0);
    big.eval().unwrap();
    let x = ops::slice_axis(&big, 0, 2, B as i64 + 2).unwrap();
    let cases = vec![
        case1("exp", |a| ops::exp(&a[0])),
        case1("sum -1", |a| ops::sum(&a[0], Some(&[-1]), false)),
        case1("sort -1", |a| ops::sort(&a[0], Some(-1))),
        case1("argsort -1", |a| ops::argsort(&a[0], Some(-1))),
        case1("argmax -1", |a| ops::argmax(&a[0], Some(-1), false)),
        case1("cumsum -1", |a| ops::cumsum(&a[0], Some(-1), false, true)),
        case1("cummax -1 reverse", |a| ops::cummax(&a[0], Some(-1), true, true)),
        case1("matmul", |a| ops::matmul(&a[0], ops::transpose(&a[0], None)?)),
    ];
    for c in &cases {
        check_vmap(&c.name, &c.f, &[x.clone()], &[Some(0)], &[Some(0)]);
    }
}

#[test]
fn lazy_inputs() {
    let mut rng = Rng::new(160);
    let base = rand_f32(&mut rng, &[B, 6], -1.0, 1.0);
    let x = ops::exp(ops::add(&base, 1.0).unwrap()).unwrap();
    let y = ops::transpose(ops::reshape(&base, &[B as i64, 2, 3]).unwrap(), Some(&[1, 2, 0])).unwrap(); // (2, 3, B)
    assert!(!x.is_evaluated() && !y.is_evaluated());
    let f = |a: &[Array]| Ok(vec![ops::add(ops::reshape(&a[0], &[2, 3])?, &a[1])?, ops::logsumexp(&a[0], None, false)?]);
    let out = vmap(f, &[Some(0), Some(-1)], &[Some(0)])(&[x.clone(), y.clone()]).unwrap();
    assert!(!out[0].is_evaluated() && !x.is_evaluated() && !y.is_evaluated(), "vmap builds a lazy graph");
    check_vmap("lazy inputs", f, &[x, y], &[Some(0), Some(-1)], &[Some(0)]);
}

#[test]
fn zero_and_one_sized_batches() {
    let f = |a: &[Array]| Ok(vec![ops::exp(&a[0])?, ops::sum(&a[0], None, false)?]);
    let empty = ops::zeros(&[0, 3], Dtype::F32).unwrap();
    let out = vmap(f, &[Some(0)], &[Some(0)])(&[empty]).unwrap();
    assert_eq!((out[0].shape(), out[1].shape()), (&[0, 3][..], &[0][..]));
    assert!(out[0].to_f64_vec().unwrap().is_empty() && out[1].to_f64_vec().unwrap().is_empty());
    let one = common::array(&[0.5, 1.0, 2.0], &[3, 1], Dtype::F32);
    check_vmap("batch of one", f, &[one], &[Some(1)], &[Some(-1)]);
}

// ---------------------------------------------------------------------------------------------
// Nesting with vmap, grad, jvp and vjp.
// ---------------------------------------------------------------------------------------------

/// A per-example function of x (n,) and y (n,): a scalar and a vector.
fn pair_fn(a: &[Array]) -> Result<Vec<Array>> {
    let s = ops::sum(ops::multiply(ops::sin(&a[0])?, &a[1])?, None, false)?;
    Ok(vec![s, ops::subtract(&a[0], ops::mean(&a[1], None, false)?)?])
}

#[test]
fn vmap_of_vmap() {
    let mut rng = Rng::new(170);
    let (ni, nj, n) = (3, 4, 5);
    let x = rand_f32(&mut rng, &[ni, nj, n], -1.0, 1.0);
    let y = rand_f32(&mut rng, &[ni, n], -1.0, 1.0);
    // Inner over j (y shared), outer over i: out[i][j] = f(x[i, j], y[i]).
    let inner = vmap(pair_fn, &[Some(0), None], &[Some(0)]);
    let outer = vmap(&inner, &[Some(0)], &[Some(0)]);
    let got = outer(&[x.clone(), y.clone()]).unwrap();
    let mut want: Vec<Vec<Array>> = vec![vec![]; 2];
    for i in 0..ni {
        for j in 0..nj {
            let e = pair_fn(&[example(&example(&x, 0, i), 0, j), example(&y, 0, i)]).unwrap();
            want[0].push(e[0].clone());
            want[1].push(e[1].clone());
        }
    }
    for (k, w) in want.iter().enumerate() {
        let mut shape = vec![ni, nj];
        shape.extend_from_slice(w[0].shape());
        let w = ops::reshape(ops::stack(w, 0).unwrap(), &shape.iter().map(|&d| d as i64).collect::<Vec<_>>()).unwrap();
        assert_same(&got[k], &w, &format!("vmap of vmap, output {k} against a double loop"));
    }
    check_vmap("vmap of vmap", &inner, &[x.clone(), y.clone()], &[Some(0)], &[Some(0)]);
    // Inner batch along axis 1 with out axis 1, outer along the last axis with out axis -1.
    let inner = vmap(pair_fn, &[Some(1), None], &[Some(0), Some(1)]);
    let xt = ops::copy(ops::transpose(&x, Some(&[2, 1, 0])).unwrap()).unwrap(); // (n, j, i)
    check_vmap("vmap of vmap, inner and outer axes", &inner, &[xt, y.clone()], &[Some(-1), Some(0)], &[Some(-1)]);
    // Outer product over examples: the inner batch is an argument the outer vmap shares.
    let inner = vmap(pair_fn, &[Some(0), None], &[Some(0)]);
    let xs = rand_f32(&mut rng, &[nj, n], -1.0, 1.0);
    check_vmap("vmap of vmap, outer product", &inner, &[xs, y], &[None, Some(0)], &[Some(1)]);
    // A matrix of keys: each (i, j) draws with its own key.
    let keys = ops::reshape(random::split(&random::key(3), ni * nj).unwrap(), &[ni as i64, nj as i64, 2]).unwrap();
    let draw = |a: &[Array]| Ok(vec![random::normal(&[2], Dtype::F32, 0.0, 1.0, Some(&a[0]))?]);
    let inner = vmap(draw, &[Some(0)], &[Some(0)]);
    check_vmap("vmap of vmap of random", &inner, &[keys], &[Some(0)], &[Some(0)]);
}

/// A scalar loss of weights w (4, 3) and one example x (4,).
fn loss(a: &[Array]) -> Result<Vec<Array>> {
    let h = ops::tanh(ops::matmul(&a[1], &a[0])?)?;
    Ok(vec![ops::sum(ops::multiply(ops::square(&h)?, ops::arange(1.0, 4.0, 1.0, Dtype::F32)?)?, None, false)?])
}

#[test]
fn vmap_of_grad() {
    let mut rng = Rng::new(180);
    let g = grad(loss, &[0, 1]);
    let specs = [f32_arg(&[4, 3], -1.0, 1.0), f32_arg(&[4], -1.0, 1.0)];
    for axes in [vec![None, Some(0)], vec![Some(2), Some(-1)], vec![Some(0), None]] {
        let args = make_args(&mut rng, &specs, &axes, B);
        check_vmap("per-example grads", &g, &args, &axes, &[Some(0)]);
        check_vmap("per-example grads, last out axis", &g, &args, &axes, &[Some(-1)]);
    }
    // Second order: vmap of grad of grad's norm.
    let gg = grad(|a: &[Array]| Ok(vec![ops::sum(ops::square(&grad(loss, &[0])(a)?[0])?, None, false)?]), &[1]);
    let args = make_args(&mut rng, &specs, &[None, Some(0)], B);
    check_vmap("vmap of grad of grad", &gg, &args, &[None, Some(0)], &[Some(0)]);
}

#[test]
fn grad_of_vmap_against_grad_of_a_loop() {
    let mut rng = Rng::new(190);
    let w = rand_f32(&mut rng, &[4, 3], -1.0, 1.0);
    let c = rand_f32(&mut rng, &[B], 0.5, 1.5);
    for ax in [0usize, 1] {
        let shape = if ax == 0 { [B, 4] } else { [4, B] };
        let x = rand_f32(&mut rng, &shape, -1.0, 1.0);
        let cv = c.clone();
        let batched = move |a: &[Array]| {
            let per = vmap(loss, &[None, Some(ax as i64)], &[Some(0)])(a)?;
            Ok(vec![ops::sum(ops::multiply(&per[0], &cv)?, None, false)?])
        };
        let cl = c.clone();
        let looped = move |a: &[Array]| {
            let per = (0..B).map(|i| Ok(loss(&[a[0].clone(), example(&a[1], ax, i)])?[0].clone())).collect::<Result<Vec<_>>>()?;
            Ok(vec![ops::sum(ops::multiply(ops::stack(&per, 0)?, &cl)?, None, false)?])
        };
        let args = [w.clone(), x.clone()];
        assert_same(&batched(&args).unwrap()[0], &looped(&args).unwrap()[0], "loss");
        let got = grad(&batched, &[0, 1])(&args).unwrap();
        let want = grad(&looped, &[0, 1])(&args).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_same(g, w, &format!("grad of vmap (axis {ax}), argument {k}"));
        }
        // Second order through vmap: the gradient of the per-example gradients' squared norm.
        let nb = {
            let b = batched.clone();
            move |a: &[Array]| Ok(vec![ops::sum(ops::square(&grad(&b, &[0])(a)?[0])?, None, false)?])
        };
        let nl = {
            let l = looped.clone();
            move |a: &[Array]| Ok(vec![ops::sum(ops::square(&grad(&l, &[0])(a)?[0])?, None, false)?])
        };
        let got = grad(nb, &[0, 1])(&args).unwrap();
        let want = grad(nl, &[0, 1])(&args).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_same(g, w, &format!("grad of grad of vmap (axis {ax}), argument {k}"));
        }
    }
}

/// A per-example function of x (3,): a vector and a scalar.
fn smooth(a: &[Array]) -> Result<Vec<Array>> {
    let v = ops::multiply(ops::sin(&a[0])?, ops::exp(ops::multiply(&a[0], 0.5)?)?)?;
    Ok(vec![v, ops::sum(ops::square(&a[0])?, None, false)?])
}

#[test]
fn vmap_of_jvp_and_vjp() {
    let mut rng = Rng::new(200);
    let f_jvp = |a: &[Array]| {
        let (outs, tans) = jvp(smooth, &a[..1], &a[1..2])?;
        Ok(outs.into_iter().chain(tans).collect())
    };
    let f_vjp = |a: &[Array]| {
        let first = |x: &[Array]| Ok(vec![smooth(x)?[0].clone()]);
        Ok(vjp(first, &a[..1], &a[1..2])?.1)
    };
    let specs = [f32_arg(&[3], -1.0, 1.0), f32_arg(&[3], -1.0, 1.0)];
    for axes in combos(2) {
        let args = make_args(&mut rng, &specs, &axes, B);
        check_vmap("vmap of jvp", f_jvp, &args, &axes, &[Some(0)]);
        check_vmap("vmap of vjp", f_vjp, &args, &axes, &[Some(-1)]);
    }
    // jvp of a vmapped function against jvp of the loop.
    let batched = |a: &[Array]| vmap(smooth, &[Some(1)], &[Some(0)])(a);
    let looped = |a: &[Array]| {
        let per: Vec<Vec<Array>> = (0..B).map(|i| smooth(&[example(&a[0], 1, i)])).collect::<Result<_>>()?;
        (0..2).map(|j| ops::stack(&per.iter().map(|e| e[j].clone()).collect::<Vec<_>>(), 0)).collect()
    };
    let args = make_args(&mut rng, &specs, &[Some(1)], B);
    let (got, want) = (jvp(batched, &args[..1], &args[1..]).unwrap(), jvp(looped, &args[..1], &args[1..]).unwrap());
    for (k, (g, w)) in got.0.iter().chain(&got.1).zip(want.0.iter().chain(&want.1)).enumerate() {
        assert_same(g, w, &format!("jvp of vmap, output {k}"));
    }
    // Batched tangents at a shared point: the Jacobian's columns, one per example.
    let x = common::array(&[0.3, -0.2, 0.9], &[3], Dtype::F32);
    let eye = ops::eye(3, None, 0, Dtype::F32).unwrap();
    let cols = vmap(f_jvp, &[None, Some(0)], &[Some(0), Some(0), Some(1), Some(0)])(&[x.clone(), eye]).unwrap();
    let xs = x.to_f64_vec().unwrap();
    let d: Vec<f64> = xs.iter().map(|&v| (v.cos() + 0.5 * v.sin()) * (0.5 * v).exp()).collect();
    let jac = [d[0], 0.0, 0.0, 0.0, d[1], 0.0, 0.0, 0.0, d[2]];
    assert_close(&cols[2].to_f64_vec().unwrap(), &jac, 1e-5, 1e-6, "Jacobian by vmap of jvp");
}

// ---------------------------------------------------------------------------------------------
// Custom functions.
// ---------------------------------------------------------------------------------------------

/// x * y with deliberately wrong, recognisable rules: vjp (2·y·ct, out·ct), jvp 3·tx + ty.
fn fake_mul() -> impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + 'static {
    CustomFunction::new("fake_mul", |a: &[Array]| Ok(vec![ops::multiply(&a[0], &a[1])?]))
        .vjp(|args, cts, outs| {
            Ok(vec![ops::multiply(ops::multiply(&cts[0], &args[1])?, 2.0)?, ops::multiply(&cts[0], &outs[0])?])
        })
        .jvp(|_args, t| Ok(vec![ops::add(ops::multiply(&t[0], 3.0)?, &t[1])?]))
        .into_fn()
}

#[test]
fn custom_vjp_and_jvp_survive_vmap() {
    let mut rng = Rng::new(210);
    let fm = fake_mul();
    let x = rand_f32(&mut rng, &[B, 3], -1.0, 1.0);
    let y = rand_f32(&mut rng, &[3], -1.0, 1.0);
    let c = rand_f32(&mut rng, &[B, 3], -1.0, 1.0);
    check_vmap("custom forward", &fm, &[x.clone(), y.clone()], &[Some(0), None], &[Some(0)]);
    // grad of a vmapped custom function against grad of the loop: both must use the custom vjp.
    let (f1, c1) = (fm.clone(), c.clone());
    let batched = move |a: &[Array]| {
        let out = vmap(&f1, &[Some(0), None], &[Some(0)])(a)?;
        Ok(vec![ops::sum(ops::multiply(&out[0], &c1)?, None, false)?])
    };
    let (f2, c2) = (fm.clone(), c.clone());
    let looped = move |a: &[Array]| {
        let per = (0..B).map(|i| Ok(f2(&[example(&a[0], 0, i), a[1].clone()])?[0].clone())).collect::<Result<Vec<_>>>()?;
        Ok(vec![ops::sum(ops::multiply(ops::stack(&per, 0)?, &c2)?, None, false)?])
    };
    let args = [x.clone(), y.clone()];
    let got = grad(&batched, &[0, 1])(&args).unwrap();
    let want = grad(&looped, &[0, 1])(&args).unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_same(g, w, &format!("grad of vmapped custom function, argument {k}"));
    }
    // The rule itself: d/dx = 2·y·c, d/dy = Σ_i c_i·x_i·y (the true derivatives would differ).
    let dx = ops::multiply(ops::multiply(&c, &y).unwrap(), 2.0).unwrap();
    let dy = ops::sum(ops::multiply(&c, ops::multiply(&x, &y).unwrap()).unwrap(), Some(&[0]), false).unwrap();
    assert_same(&got[0], &dx, "custom vjp used for x");
    assert_same(&got[1], &dy, "custom vjp used for y");
    // Twice vmapped, then differentiated: the rule is vmapped twice and still used.
    let f6 = fm.clone();
    let xx = rand_f32(&mut rng, &[2, B, 3], -1.0, 1.0);
    let twice = move |a: &[Array]| {
        let inner = vmap(&f6, &[Some(0), None], &[Some(0)]);
        let out = vmap(&inner, &[Some(0), None], &[Some(0)])(a)?;
        Ok(vec![ops::sum(ops::multiply(&out[0], &a[0])?, None, false)?])
    };
    let got = grad(twice, &[0, 1])(&[xx.clone(), y.clone()]).unwrap();
    // The rule gives d/dx = 2·y·x + (the direct term) x·y, and d/dy = Σ x·(x·y).
    let xy = ops::multiply(&xx, &y).unwrap();
    let dx = ops::add(ops::multiply(&xy, 2.0).unwrap(), &xy).unwrap();
    assert_same(&got[0], &dx, "twice vmapped rule, x");
    assert_same(&got[1], &ops::sum(ops::multiply(&xx, &xy).unwrap(), Some(&[0, 1]), false).unwrap(), "twice vmapped rule, y");
    // vmap of grad of the custom function.
    let f3 = fm.clone();
    let weighted = move |a: &[Array]| Ok(vec![ops::sum(ops::multiply(&f3(&a[..2])?[0], &a[2])?, None, false)?]);
    let (per_example, xyc) = (grad(weighted, &[0, 1]), [x.clone(), y.clone(), c.clone()]);
    check_vmap("vmap of grad of custom", &per_example, &xyc, &[Some(0), None, Some(0)], &[Some(0)]);
    // jvp of a vmapped custom function against a loop of jvps: both use the custom jvp.
    let (tx, ty) = (rand_f32(&mut rng, &[B, 3], -1.0, 1.0), rand_f32(&mut rng, &[3], -1.0, 1.0));
    let f4 = fm.clone();
    let vmapped = move |a: &[Array]| vmap(&f4, &[Some(0), None], &[Some(0)])(a);
    let (_, got) = jvp(vmapped, &args, &[tx.clone(), ty.clone()]).unwrap();
    let jvp_of = |i: usize| jvp(&fm, &[example(&x, 0, i), y.clone()], &[example(&tx, 0, i), ty.clone()]).unwrap().1.remove(0);
    let want: Vec<Array> = (0..B).map(jvp_of).collect();
    assert_same(&got[0], &ops::stack(&want, 0).unwrap(), "jvp of vmapped custom function");
    assert_same(&got[0], &ops::add(ops::multiply(&tx, 3.0).unwrap(), &ty).unwrap(), "custom jvp used");
    // vmap of jvp of the custom function.
    let f5 = fm.clone();
    let per_example = move |a: &[Array]| Ok(jvp(&f5, &a[..2], &a[2..])?.1);
    check_vmap("vmap of jvp of custom", per_example, &[x, y.clone(), tx, ty], &[Some(0), None, Some(0), None], &[Some(0)]);
}

#[test]
fn checkpoint_under_vmap() {
    let mut rng = Rng::new(220);
    let ck = checkpoint(|a: &[Array]| Ok(vec![ops::multiply(ops::sin(&a[0])?, &a[1])?]));
    let ck2 = ck.clone();
    let x = rand_f32(&mut rng, &[3, B], -1.0, 1.0);
    let y = rand_f32(&mut rng, &[3], -1.0, 1.0);
    check_vmap("checkpoint forward", &ck, &[x.clone(), y.clone()], &[Some(1), None], &[Some(0)]);
    let c1 = ck.clone();
    let batched = move |a: &[Array]| Ok(vec![ops::sum(&vmap(&c1, &[Some(1), None], &[Some(0)])(a)?[0], None, false)?]);
    let looped = move |a: &[Array]| {
        let per = (0..B).map(|i| Ok(ck(&[example(&a[0], 1, i), a[1].clone()])?[0].clone())).collect::<Result<Vec<_>>>()?;
        Ok(vec![ops::sum(ops::stack(&per, 0)?, None, false)?])
    };
    let args = [x, y];
    let got = grad(&batched, &[0, 1])(&args).unwrap();
    let want = grad(&looped, &[0, 1])(&args).unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_same(g, w, &format!("grad of vmapped checkpoint, argument {k}"));
    }
    let tangents = [ops::ones_like(&args[0]).unwrap(), ops::full_like(&args[1], 0.5).unwrap()];
    let (got, want) = (jvp(&batched, &args, &tangents).unwrap().1, jvp(&looped, &args, &tangents).unwrap().1);
    assert_same(&got[0], &want[0], "jvp of vmapped checkpoint");
    let c2 = ck2.clone();
    let per_example = grad(move |a: &[Array]| Ok(vec![ops::sum(&c2(a)?[0], None, false)?]), &[0, 1]);
    check_vmap("vmap of grad of checkpoint", &per_example, &args, &[Some(1), None], &[Some(0)]);
}

#[test]
fn custom_vmap_rule_is_used() {
    let mut rng = Rng::new(230);
    let seen: Arc<Mutex<Vec<Vec<Option<usize>>>>> = Arc::default();
    let log = seen.clone();
    // The function doubles; its batching rule doubles and adds 1000, so its use is visible.
    let f = CustomFunction::new("double", |a: &[Array]| Ok(vec![ops::multiply(&a[0], 2.0)?, a[1].clone()]))
        .vmap(move |args, axes| {
            log.lock().unwrap().push(axes.to_vec());
            Ok((vec![ops::add(ops::multiply(&args[0], 2.0)?, 1000.0)?, args[1].clone()], vec![axes[0], axes[1]]))
        })
        .into_fn();
    let x = rand_f32(&mut rng, &[3, B], -1.0, 1.0);
    let y = rand_f32(&mut rng, &[2], -1.0, 1.0);
    // Eagerly, the rule is not involved.
    let eager = f(&[example(&x, 1, 0), y.clone()]).unwrap();
    assert_same(&eager[0], &ops::multiply(example(&x, 1, 0), 2.0).unwrap(), "eager call");
    assert!(seen.lock().unwrap().is_empty());
    let out = vmap(&f, &[Some(1), None], &[Some(0), None])(&[x.clone(), y.clone()]).unwrap();
    let want = ops::transpose(ops::add(ops::multiply(&x, 2.0).unwrap(), 1000.0).unwrap(), None).unwrap();
    assert_same(&out[0], &want, "the custom batching rule's result");
    assert_same(&out[1], &y, "the rule's unbatched output");
    assert_eq!(*seen.lock().unwrap(), vec![vec![Some(1), None]], "the rule sees the batch axes");
    // A rule may hand its output back with the batch on another axis: vmap moves it as asked.
    let g = CustomFunction::new("moved", |a: &[Array]| Ok(vec![ops::exp(&a[0])?]))
        .vmap(|args, axes| {
            let front = ops::moveaxis(&args[0], axes[0].unwrap() as i64, 0)?;
            Ok((vec![ops::moveaxis(ops::add(&front, 1000.0)?, 0, -1)?], vec![Some(front.ndim() - 1)]))
        })
        .into_fn();
    let x = rand_f32(&mut rng, &[B, 3, 2], -1.0, 1.0);
    for out_ax in [0, 1, -1] {
        let out = vmap(&g, &[Some(0)], &[Some(out_ax)])(&[x.clone()]).unwrap();
        let want = ops::moveaxis(ops::add(&x, 1000.0).unwrap(), 0, out_ax).unwrap();
        assert_same(&out[0], &want, &format!("rule output moved to out axis {out_ax}"));
    }
    // A rule returning the wrong number of outputs is reported under the function's name.
    let bad = CustomFunction::new("bad_rule", |a: &[Array]| Ok(vec![ops::exp(&a[0])?]))
        .vmap(|args, axes| Ok((vec![args[0].clone(), args[0].clone()], vec![axes[0], axes[0]])))
        .into_fn();
    check_err(vmap(bad, &[Some(0)], &[Some(0)])(&[x.clone()]), ErrorKind::Value, "bad_rule");
    // Nested: the outer vmap batches what the inner rule built.
    let inner = vmap(&g, &[Some(0)], &[Some(0)]);
    let xx = rand_f32(&mut rng, &[2, B, 3, 2], -1.0, 1.0);
    let out = vmap(&inner, &[Some(1)], &[Some(0)])(&[xx.clone()]).unwrap();
    let want = ops::moveaxis(ops::add(&xx, 1000.0).unwrap(), 1, 0).unwrap();
    assert_same(&out[0], &want, "custom rule under nested vmap");
}

// ---------------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------------

/// Runs `vmap(f, in_axes, out_axes)` on `args`.
fn run(
    f: impl Fn(&[Array]) -> Result<Vec<Array>>,
    args: &[Array],
    in_axes: &[Option<i64>],
    out_axes: &[Option<i64>],
) -> Result<Vec<Array>> {
    vmap(f, in_axes, out_axes)(args)
}

#[test]
fn errors_in_axes_and_out_axes() {
    let x = ops::zeros(&[3, 4], Dtype::F32).unwrap();
    let y = ops::zeros(&[4, 4], Dtype::F32).unwrap();
    let add = |a: &[Array]| Ok(vec![ops::add(&a[0], &a[1])?]);
    let two = [x.clone(), x.clone()];
    check_err(run(add, &two, &[Some(0), Some(0), None], &[Some(0)]), ErrorKind::Value, "vmap");
    check_err(run(add, &two, &[], &[Some(0)]), ErrorKind::Value, "vmap");
    check_err(run(add, &two, &[Some(2), Some(0)], &[Some(0)]), ErrorKind::Axis, "vmap");
    check_err(run(add, &two, &[Some(0), Some(-3)], &[Some(0)]), ErrorKind::Axis, "vmap");
    check_err(run(add, &[x.clone(), y.clone()], &[Some(0)], &[Some(0)]), ErrorKind::Shape, "vmap");
    let scalar = Array::scalar(1.0f32);
    check_err(run(add, &[scalar.clone(), scalar], &[Some(0)], &[Some(0)]), ErrorKind::Axis, "vmap");
    check_err(run(add, &[x.clone(), y.clone()], &[Some(0), Some(1)], &[Some(0)]), ErrorKind::Shape, "vmap");
    check_err(run(add, &two, &[None], &[Some(0)]), ErrorKind::Value, "vmap");
    check_err(run(|_: &[Array]| Ok(vec![]), &[], &[Some(0)], &[Some(0)]), ErrorKind::Value, "vmap");
    check_err(run(add, &two, &[Some(0), None], &[None]), ErrorKind::Value, "vmap");
    check_err(run(add, &two, &[Some(0)], &[Some(2)]), ErrorKind::Axis, "vmap");
    check_err(run(add, &two, &[Some(0)], &[Some(-3)]), ErrorKind::Axis, "vmap");
    check_err(run(add, &two, &[Some(0)], &[Some(0), Some(0)]), ErrorKind::Value, "vmap");
    // A mistake inside the function is reported by its op, with per-example shapes.
    let bad = |a: &[Array]| Ok(vec![ops::matmul(&a[0], &a[1])?]);
    let z = ops::zeros(&[3, 5], Dtype::F32).unwrap();
    check_err(run(bad, &[x.clone(), z], &[Some(0), Some(0)], &[Some(0)]), ErrorKind::Shape, "matmul");
    // A batched output may not be declared unbatched even when another output may.
    let mixed = |a: &[Array]| Ok(vec![a[1].clone(), ops::exp(&a[0])?]);
    assert!(run(mixed, &two, &[Some(0), None], &[None, Some(0)]).is_ok());
    check_err(run(mixed, &two, &[Some(0), None], &[None, None]), ErrorKind::Value, "vmap");
}

#[test]
fn errors_reading_traced_values() {
    let x = common::array(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], Dtype::F32);
    type Reader = fn(&Array) -> Result<()>;
    let readers: [Reader; 5] = [
        |v| ops::sum(v, None, false)?.item::<f32>().map(drop),
        |v| v.to_vec::<f32>().map(drop),
        |v| v.to_f64_vec().map(drop),
        |v| v.eval(),
        |v| kiln::eval(&[v]),
    ];
    for read in readers {
        let f = move |a: &[Array]| {
            let derived = ops::exp(&a[0])?;
            read(&derived)?;
            Ok(vec![derived])
        };
        check_err(run(f, &[x.clone()], &[Some(0)], &[Some(0)]), ErrorKind::NoData, "vmap");
        // Also through a transform nested inside vmap, and through vmap nested in vmap.
        let g = grad(move |a: &[Array]| Ok(vec![ops::sum(&f(a)?[0], None, false)?]), &[0]);
        check_err(run(&g, &[x.clone()], &[Some(0)], &[Some(0)]), ErrorKind::NoData, "vmap");
        let inner = vmap(f, &[Some(0)], &[Some(0)]);
        let xx = ops::broadcast_to(&x, &[2, 3, 2]).unwrap();
        check_err(run(&inner, &[xx], &[Some(0)], &[Some(0)]), ErrorKind::NoData, "vmap");
    }
    // Printing a traced value does not panic: it says the value is unavailable, naming vmap.
    let printing = |a: &[Array]| {
        let d = ops::exp(&a[0])?;
        let text = format!("{d}");
        assert!(text.contains("unavailable") && text.contains("vmap"), "{text}");
        Ok(vec![d])
    };
    assert!(run(printing, &[x.clone()], &[Some(0)], &[Some(0)]).is_ok());
    // Reading an unbatched argument, or a constant, is fine: it has data.
    let scale = Array::scalar(3.0f32);
    let f = |a: &[Array]| {
        let s = a[1].item::<f32>()?;
        let k = ops::sum(ops::arange(0.0, 3.0, 1.0, Dtype::F32)?, None, false)?.item::<f32>()?;
        Ok(vec![ops::multiply(&a[0], (s + k) as f64)?])
    };
    check_vmap("reading an unbatched argument", f, &[x, scale], &[Some(0), None], &[Some(0)]);
}


/// `async_eval` computes like `eval` outside transforms; inside vmap, grad or a compile trace,
/// where arrays stand for values not computed yet, it is a value error (as in mlx).
#[test]
fn async_eval_computes_outside_transforms_and_fails_inside_them() {
    let x = ops::add(Array::from_slice(&[1f32, 2.0], &[2]).unwrap(), 1.0f32).unwrap();
    kiln::async_eval(&[&x]).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
    let body = |a: &[Array]| -> Result<Vec<Array>> {
        let y = ops::add(&a[0], 1.0f32)?;
        kiln::async_eval(&[&y])?;
        Ok(vec![ops::sum(ops::exp(&y)?, None, false)?])
    };
    let ones = Array::from_slice(&[1f32; 4], &[2, 2]).unwrap();
    let in_vmap = vmap(body, &[Some(0)], &[Some(0)])(std::slice::from_ref(&ones)).expect_err("async_eval inside vmap");
    let in_grad = grad(body, &[0])(std::slice::from_ref(&x)).expect_err("async_eval inside grad");
    let in_compile = kiln::compile(body).call(std::slice::from_ref(&x)).expect_err("async_eval inside a compile trace");
    for e in [in_vmap, in_grad, in_compile] {
        assert_eq!((e.op.as_str(), e.kind), ("async_eval", ErrorKind::Value), "{e}");
    }
    // Work that fails (inverting a singular matrix) is reported by the next synchronize, once,
    // as in mlx; reading the array raises the failure again.
    let singular = kiln::linalg::inv(Array::from_slice(&[1f32, 2.0, 2.0, 4.0], &[2, 2]).unwrap()).unwrap();
    kiln::async_eval(&[&singular]).unwrap();
    let cpu = kiln::Stream::default_for(kiln::Device::cpu());
    let e = kiln::synchronize(cpu).expect_err("the failed inversion");
    assert_eq!((e.op.as_str(), e.kind), ("synchronize", ErrorKind::Device), "{e}");
    assert!(e.message.contains("singular"), "{e}");
    kiln::synchronize(cpu).unwrap();
    assert!(singular.to_vec::<f32>().is_err());
}
