//! Reverse and forward mode derivatives of every differentiable op against central finite
//! differences in float64 (`common::derivatives::check`), on random inputs that include
//! broadcasting and strided views. Inputs are drawn away from the ops' kinks and poles.

#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` is an argument list; the clone is a refcount

mod common;

use common::derivatives::{check, Fun};
use common::{with_layout, Layout, Rng, LAYOUTS};
use kiln::ops::{self, SliceSpec};
use kiln::primitive::UnaryOp;
use kiln::{Array, Dtype};

fn rand(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Array {
    let n = shape.iter().product();
    Array::from_slice(&rng.vec(n, lo, hi), shape).unwrap()
}

/// Values in [lo, hi) with a random sign: away from zero, for ops with a kink or pole there.
fn away_from_zero(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Array {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.uniform(lo, hi) * if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 }).collect();
    Array::from_slice(&v, shape).unwrap()
}

/// Distinct values (a shuffled, jittered grid), so sorts and extremes have no ties.
fn distinct(rng: &mut Rng, shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n).map(|i| i as f64 * 0.37 - n as f64 * 0.15 + rng.uniform(0.0, 0.1)).collect();
    for i in (1..n).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    Array::from_slice(&v, shape).unwrap()
}

/// A named function of a list of arrays, for tables of cases.
type Case = (&'static str, Box<dyn Fn(&[Array]) -> kiln::Result<Array>>);
/// A binary op and the intervals its two inputs are drawn from.
type BinaryCase = (&'static str, fn(&Array, &Array) -> kiln::Result<Array>, (f64, f64), (f64, f64));

fn one(f: Fun, name: &str, x: Array, seed: u64) {
    check(name, f, &[x], seed);
}

#[test]
fn unary_ops_in_every_layout() {
    use UnaryOp::*;
    let mut rng = Rng::new(1);
    // Each op with the interval its inputs are drawn from.
    let table: &[(UnaryOp, f64, f64)] = &[
        (Abs, 0.2, 2.0), (Negative, -2.0, 2.0), (Exp, -2.0, 2.0), (Expm1, -2.0, 2.0),
        (Log, 0.2, 3.0), (Log1p, -0.5, 3.0), (Log2, 0.2, 3.0), (Log10, 0.2, 3.0), (Sqrt, 0.2, 3.0),
        (Rsqrt, 0.2, 3.0), (Square, -2.0, 2.0), (Reciprocal, 0.3, 2.0), (Sin, -3.0, 3.0),
        (Cos, -3.0, 3.0), (Tan, -1.2, 1.2), (ArcSin, -0.9, 0.9), (ArcCos, -0.9, 0.9),
        (ArcTan, -3.0, 3.0), (Sinh, -2.0, 2.0), (Cosh, -2.0, 2.0), (Tanh, -2.0, 2.0),
        (ArcSinh, -3.0, 3.0), (ArcCosh, 1.2, 3.0), (ArcTanh, -0.9, 0.9), (Erf, -2.0, 2.0),
        (ErfInv, -0.9, 0.9), (Sigmoid, -3.0, 3.0),
    ];
    for (k, &(op, lo, hi)) in table.iter().enumerate() {
        let values = if op == Abs {
            away_from_zero(&mut rng, &[3, 4], lo, hi).to_f64_vec().unwrap()
        } else {
            rng.vec(12, lo, hi)
        };
        for layout in LAYOUTS {
            let x = with_layout(&values, &[3, 4], Dtype::F64, layout);
            one(&|a: &[Array]| ops::unary(op, &a[0]), &format!("{} {layout:?}", op.name()), x, k as u64);
        }
    }
}

#[test]
fn piecewise_constant_ops_have_zero_derivative() {
    let mut rng = Rng::new(2);
    let x = away_from_zero(&mut rng, &[5], 0.1, 0.4);
    let x = ops::add(&x, 2.0).unwrap();
    for op in [UnaryOp::Sign, UnaryOp::Floor, UnaryOp::Ceil, UnaryOp::Round] {
        one(&|a: &[Array]| ops::unary(op, &a[0]), op.name(), x.clone(), 3);
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    let mut rng = Rng::new(3);
    let table: &[BinaryCase] = &[
        ("add", |a, b| ops::add(a, b), (-2.0, 2.0), (-2.0, 2.0)),
        ("subtract", |a, b| ops::subtract(a, b), (-2.0, 2.0), (-2.0, 2.0)),
        ("multiply", |a, b| ops::multiply(a, b), (-2.0, 2.0), (-2.0, 2.0)),
        ("divide", |a, b| ops::divide(a, b), (-2.0, 2.0), (0.5, 2.0)),
        ("power", |a, b| ops::power(a, b), (0.3, 2.0), (-1.5, 1.5)),
        ("arctan2", |a, b| ops::arctan2(a, b), (-2.0, 2.0), (0.3, 2.0)),
        ("logaddexp", |a, b| ops::logaddexp(a, b), (-2.0, 2.0), (-2.0, 2.0)),
        ("remainder", |a, b| ops::remainder(a, b), (0.1, 0.9), (1.0, 1.5)),
        ("floor_divide", |a, b| ops::floor_divide(a, b), (0.1, 0.9), (1.0, 1.5)),
    ];
    // Shape pairs: equal, broadcast on both sides, and against a scalar.
    let shapes: &[(&[usize], &[usize])] = &[(&[3, 4], &[3, 4]), (&[3, 1], &[4]), (&[2, 3, 4], &[]), (&[4], &[2, 1, 4])];
    for (k, (name, f, (alo, ahi), (blo, bhi))) in table.iter().enumerate() {
        for (sa, sb) in shapes {
            let a = rand(&mut rng, sa, *alo, *ahi);
            let b = rand(&mut rng, sb, *blo, *bhi);
            check(&format!("{name} {sa:?} {sb:?}"), &|x: &[Array]| f(&x[0], &x[1]), &[a, b], k as u64);
        }
    }
}

#[test]
fn maximum_and_minimum_route_to_the_larger_and_smaller() {
    let mut rng = Rng::new(4);
    let a = distinct(&mut rng, &[3, 4]);
    let b = ops::add(distinct(&mut rng, &[4]), 0.05).unwrap();
    check("maximum", &|x: &[Array]| ops::maximum(&x[0], &x[1]), &[a.clone(), b.clone()], 1);
    check("minimum", &|x: &[Array]| ops::minimum(&x[0], &x[1]), &[a.clone(), b.clone()], 2);
    check("clip", &|x: &[Array]| ops::clip(&x[0], Some(&-0.5), Some(&0.5)), &[a], 3);
    // Ties go to the first argument, as in mlx.
    let x = Array::from_vec(vec![1.0f64, 2.0]);
    let (_, g) = kiln::vjp(|v: &[Array]| Ok(vec![ops::maximum(&v[0], &v[1])?]), &[x.clone(), x.clone()], &[ops::ones_like(&x).unwrap()]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
    assert_eq!(g[1].to_vec::<f64>().unwrap(), vec![0.0, 0.0]);
}

#[test]
fn where_and_astype() {
    let mut rng = Rng::new(5);
    let cond = ops::greater(rand(&mut rng, &[3, 1], -1.0, 1.0), 0.0).unwrap();
    let (a, b) = (rand(&mut rng, &[3, 4], -1.0, 1.0), rand(&mut rng, &[4], -1.0, 1.0));
    check("where", &|x: &[Array]| ops::where_(&cond, &x[0], &x[1]), &[a.clone(), b], 1);
    // Through float32 and back: the derivative is 1 up to float32 rounding of the values.
    let f = |x: &[Array]| ops::astype(ops::multiply(ops::astype(&x[0], Dtype::F32)?, 3.0)?, Dtype::F64);
    let (_, g) = kiln::vjp(|x: &[Array]| Ok(vec![f(x)?]), std::slice::from_ref(&a), &[ops::ones_like(&a).unwrap()]).unwrap();
    assert!(g[0].to_f64_vec().unwrap().iter().all(|&v| v == 3.0));
    // An integer cast has no derivative.
    let g = kiln::grad(|x: &[Array]| Ok(vec![ops::sum(ops::astype(ops::astype(&x[0], Dtype::I32)?, Dtype::F64)?, None, false)?]), &[0]);
    assert!(g(&[a]).unwrap()[0].to_f64_vec().unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn views() {
    let mut rng = Rng::new(6);
    let x = rand(&mut rng, &[2, 3, 4], -1.0, 1.0);
    let fs: Vec<Case> = vec![
        ("reshape", Box::new(|a| ops::reshape(&a[0], &[4, -1]))),
        ("flatten", Box::new(|a| ops::flatten(&a[0], 1, 2))),
        ("transpose", Box::new(|a| ops::transpose(&a[0], Some(&[2, 0, 1])))),
        ("swapaxes", Box::new(|a| ops::swapaxes(&a[0], 0, 2))),
        ("broadcast_to", Box::new(|a| ops::broadcast_to(&a[0], &[3, 2, 3, 4]))),
        ("expand_squeeze", Box::new(|a| ops::squeeze(ops::expand_dims(&a[0], &[1, -1])?, Some(&[-1])))),
        ("slice", Box::new(|a| ops::slice(&a[0], &[SliceSpec::ALL, SliceSpec { start: Some(2), stop: None, step: -2 }, SliceSpec::range(1, 3)]))),
        ("flip", Box::new(|a| ops::flip(&a[0], Some(&[0, 2])))),
        ("roll", Box::new(|a| ops::roll(&a[0], 2, Some(2)))),
        ("diagonal", Box::new(|a| ops::diagonal(&a[0], 1, 1, 2))),
        ("moveaxis", Box::new(|a| ops::moveaxis(&a[0], 0, -1))),
    ];
    for (name, f) in &fs {
        for layout in [Layout::Contiguous, Layout::Transposed, Layout::Reversed] {
            let v = with_layout(&x.to_f64_vec().unwrap(), x.shape(), Dtype::F64, layout);
            check(&format!("{name} {layout:?}"), f.as_ref(), &[v], 7);
        }
    }
}

#[test]
fn joining_splitting_and_updates() {
    let mut rng = Rng::new(7);
    let (a, b) = (rand(&mut rng, &[2, 3], -1.0, 1.0), rand(&mut rng, &[2, 2], -1.0, 1.0));
    check("concatenate", &|x: &[Array]| ops::concatenate(&[x[0].clone(), x[1].clone(), x[0].clone()], 1), &[a.clone(), b.clone()], 1);
    check("stack", &|x: &[Array]| ops::stack(&[x[0].clone(), ops::sin(&x[0])?], 1), &[a.clone()], 2);
    check(
        "split",
        &|x: &[Array]| {
            let parts = ops::split(&x[0], ops::SplitSpec::Sections(3), 1)?;
            ops::add(ops::multiply(&parts[0], &parts[2])?, &parts[1])
        },
        &[a.clone()],
        3,
    );
    check("pad", &|x: &[Array]| ops::pad(&x[0], &[(1, 0), (2, 1)], 0.5), &[a.clone()], 4);
    check("tile", &|x: &[Array]| ops::tile(&x[0], &[2, 1, 2]), &[a.clone()], 5);
    check("repeat", &|x: &[Array]| ops::repeat(&x[0], 2, Some(1)), &[a.clone()], 6);
    check("tril", &|x: &[Array]| ops::tril(&x[0], 0), &[a.clone()], 7);
    let specs = [SliceSpec::ALL, SliceSpec { start: Some(2), stop: None, step: -2 }];
    check("slice_update", &|x: &[Array]| ops::slice_update(&x[0], &x[1], &specs), &[a.clone(), b.clone()], 8);
    check("slice_update broadcast", &|x: &[Array]| ops::slice_update(&x[0], &x[1], &specs), &[a, rand(&mut rng, &[2, 1], -1.0, 1.0)], 9);
}

#[test]
fn reductions_over_axis_sets() {
    let mut rng = Rng::new(8);
    let axis_sets: &[Option<&[i64]>] = &[None, Some(&[0]), Some(&[-1]), Some(&[0, 2])];
    for (k, axes) in axis_sets.iter().enumerate() {
        let x = rand(&mut rng, &[2, 3, 4], 0.5, 1.5);
        let d = distinct(&mut rng, &[2, 3, 4]);
        let s = *axes;
        check(&format!("sum {axes:?}"), &|a: &[Array]| ops::sum(&a[0], s, false), &[x.clone()], k as u64);
        check(&format!("prod {axes:?}"), &|a: &[Array]| ops::prod(&a[0], s, true), &[x.clone()], k as u64);
        check(&format!("mean {axes:?}"), &|a: &[Array]| ops::mean(&a[0], s, false), &[x.clone()], k as u64);
        check(&format!("var {axes:?}"), &|a: &[Array]| ops::var(&a[0], s, false, 1), &[x.clone()], k as u64);
        check(&format!("std {axes:?}"), &|a: &[Array]| ops::std(&a[0], s, false, 0), &[x.clone()], k as u64);
        check(&format!("logsumexp {axes:?}"), &|a: &[Array]| ops::logsumexp(&a[0], s, false), &[x.clone()], k as u64);
        check(&format!("softmax {axes:?}"), &|a: &[Array]| ops::softmax(&a[0], s, false), &[x.clone()], k as u64);
        check(&format!("max {axes:?}"), &|a: &[Array]| ops::max(&a[0], s, false), &[d.clone()], k as u64);
        check(&format!("min {axes:?}"), &|a: &[Array]| ops::min(&a[0], s, true), &[d], k as u64);
    }
}

#[test]
fn products_with_zeros_are_exact() {
    // Finite differences are exact for a product in one variable, so zeros are fair game.
    let x = Array::from_slice(&[0.0, 2.0, 3.0, 0.0, 0.0, 5.0, 1.5, -2.0, 0.5, 4.0, 0.0, 1.0], &[3, 4]).unwrap();
    check("prod with zeros", &|a: &[Array]| ops::prod(&a[0], Some(&[1]), false), &[x.clone()], 1);
    check("prod all with zeros", &|a: &[Array]| ops::prod(&a[0], None, false), &[x.clone()], 2);
    for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
        let name = format!("cumprod zeros r={reverse} i={inclusive}");
        check(&name, &|a: &[Array]| ops::cumprod(&a[0], Some(1), reverse, inclusive), &[x.clone()], 3);
    }
    let scatter_idx = Array::from_vec(vec![0i32, 2, 0]);
    let upd = Array::from_slice(&[0.0, 2.0, 3.0, 1.0, 0.5, 0.0, 1.5, 2.0, 3.0, 0.0, 4.0, 1.0], &[3, 1, 4]).unwrap();
    check(
        "scatter_prod with zeros",
        &|a: &[Array]| ops::scatter_prod(&a[0], &[scatter_idx.clone()], &a[1], &[0]),
        &[x, upd],
        4,
    );
}

#[test]
fn scans_in_every_direction() {
    let mut rng = Rng::new(9);
    for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
        let x = rand(&mut rng, &[3, 5], 0.5, 1.5);
        let d = distinct(&mut rng, &[3, 5]);
        let tag = format!("r={reverse} i={inclusive}");
        check(&format!("cumsum {tag}"), &|a: &[Array]| ops::cumsum(&a[0], Some(1), reverse, inclusive), &[x.clone()], 1);
        check(&format!("cumsum axis 0 {tag}"), &|a: &[Array]| ops::cumsum(&a[0], Some(0), reverse, inclusive), &[x.clone()], 1);
        check(&format!("cumprod {tag}"), &|a: &[Array]| ops::cumprod(&a[0], Some(1), reverse, inclusive), &[x.clone()], 2);
        // Exclusive running extremes start at -inf/+inf; clipping keeps the loss finite.
        let finite = |y: Array| ops::clip(&y, Some(&-100.0), Some(&100.0));
        check(&format!("cummax {tag}"), &|a: &[Array]| finite(ops::cummax(&a[0], Some(1), reverse, inclusive)?), &[d.clone()], 3);
        check(&format!("cummin {tag}"), &|a: &[Array]| finite(ops::cummin(&a[0], Some(0), reverse, inclusive)?), &[d], 4);
        // Values far apart (one term dominates a window) and a -inf input, which passes nothing.
        let wide = ops::multiply(distinct(&mut rng, &[3, 5]), 8.0).unwrap();
        let position = ops::reshape(ops::arange(0.0, 15.0, 1.0, Dtype::F32).unwrap(), &[3, 5]).unwrap();
        let with_neg_inf = ops::where_(ops::equal(&position, 7.0).unwrap(), f64::NEG_INFINITY, &x).unwrap();
        // A NaN cotangent makes every input it reaches NaN, as the product it stands for would.
        let (_, grads) = kiln::vjp(
            move |a: &[Array]| Ok(vec![ops::logcumsumexp(&a[0], Some(0), reverse, inclusive)?]),
            &[Array::from_vec(vec![1.0f64, 2.0, 3.0])],
            &[Array::from_vec(vec![1.0f64, f64::NAN, 1.0])],
        )
        .unwrap();
        let g = grads[0].to_vec::<f64>().unwrap();
        let reached: Vec<bool> = (0..3).map(|j| (0..3).any(|i| i == 1 && (if reverse { i <= j } else { i >= j }) && (inclusive || i != j))).collect();
        assert!(g.iter().zip(&reached).all(|(v, &r)| v.is_nan() == r), "r={reverse} i={inclusive}: {g:?}");
        for (what, v) in [("wide", wide), ("with -inf", with_neg_inf)] {
            let f = move |a: &[Array]| finite(ops::logcumsumexp(&a[0], Some(1), reverse, inclusive)?);
            check(&format!("logcumsumexp {what} {tag}"), &f, &[v], 5);
        }
    }
}

#[test]
fn sorting_and_selection() {
    let mut rng = Rng::new(10);
    let x = distinct(&mut rng, &[3, 6]);
    check("sort", &|a: &[Array]| ops::sort(&a[0], Some(1)), &[x.clone()], 1);
    check("sort axis 0", &|a: &[Array]| ops::sort(&a[0], Some(0)), &[x.clone()], 2);
    check("sort flat", &|a: &[Array]| ops::sort(&a[0], None), &[x.clone()], 3);
    check("partition", &|a: &[Array]| ops::partition(&a[0], 2, Some(1)), &[x.clone()], 4);
    check("topk", &|a: &[Array]| ops::topk(&a[0], 2, Some(-1)), &[x.clone()], 5);
    let t = ops::transpose(&x, None).unwrap();
    check("sort transposed", &|a: &[Array]| ops::sort(&a[0], Some(0)), &[t], 6);
}

#[test]
fn gathers_and_scatters() {
    let mut rng = Rng::new(11);
    let x = rand(&mut rng, &[4, 3], -1.0, 1.0);
    // Duplicate indices: their gradients accumulate.
    let idx = Array::from_slice(&[2i32, 0, 2, 3, 1, 2], &[2, 3]).unwrap();
    check("take", &|a: &[Array]| ops::take(&a[0], &idx, Some(0)), &[x.clone()], 1);
    check("take flat", &|a: &[Array]| ops::take(&a[0], &idx, None), &[x.clone()], 2);
    let along = Array::from_slice(&[2i32, 0, 1, 1, 2, 0, 0, 0, 2, 1, 1, 1], &[4, 3]).unwrap();
    check("take_along_axis", &|a: &[Array]| ops::take_along_axis(&a[0], &along, Some(1)), &[x.clone()], 3);
    let rows = Array::from_vec(vec![3i32, 0, 3]);
    let cols = Array::from_vec(vec![1i32, 2, 1]);
    check("gather", &|a: &[Array]| ops::gather(&a[0], &[rows.clone(), cols.clone()], &[0, 1], &[1, 2]), &[x.clone()], 4);
    let upd = rand(&mut rng, &[3, 1, 3], -1.0, 1.0);
    let unique = Array::from_vec(vec![3i32, 0, 1]);
    check("scatter", &|a: &[Array]| ops::scatter(&a[0], &[unique.clone()], &a[1], &[0]), &[x.clone(), upd.clone()], 5);
    check("scatter_add", &|a: &[Array]| ops::scatter_add(&a[0], &[rows.clone()], &a[1], &[0]), &[x.clone(), upd.clone()], 6);
    let d = distinct(&mut rng, &[4, 3]);
    let du = distinct(&mut rng, &[3, 1, 3]);
    check("scatter_max", &|a: &[Array]| ops::scatter_max(&a[0], &[rows.clone()], &a[1], &[0]), &[d.clone(), du.clone()], 7);
    check("scatter_min", &|a: &[Array]| ops::scatter_min(&a[0], &[rows.clone()], &a[1], &[0]), &[d, du], 8);
    check("scatter_prod", &|a: &[Array]| ops::scatter_prod(&a[0], &[rows.clone()], &a[1], &[0]), &[x.clone(), upd], 9);
    let vals = rand(&mut rng, &[4, 1], -1.0, 1.0);
    let put = Array::from_slice(&[2i32, 0, 1, 1], &[4, 1]).unwrap();
    check("put_along_axis", &|a: &[Array]| ops::put_along_axis(&a[0], &put, &a[1], Some(1)), &[x, vals], 10);
}

#[test]
fn matrix_products() {
    let mut rng = Rng::new(12);
    let cases: &[(&[usize], &[usize])] = &[(&[3, 4], &[4, 2]), (&[2, 3, 4], &[4, 5]), (&[4], &[4, 3]), (&[2, 1, 3, 4], &[3, 4, 2]), (&[4], &[4])];
    for (sa, sb) in cases {
        let (a, b) = (rand(&mut rng, sa, -1.0, 1.0), rand(&mut rng, sb, -1.0, 1.0));
        check(&format!("matmul {sa:?} {sb:?}"), &|x: &[Array]| ops::matmul(&x[0], &x[1]), &[a, b], 1);
    }
    let (a, b) = (rand(&mut rng, &[3, 4], -1.0, 1.0), rand(&mut rng, &[4, 2], -1.0, 1.0));
    let c = rand(&mut rng, &[2], -1.0, 1.0);
    check("addmm", &|x: &[Array]| ops::addmm(&x[2], &x[0], &x[1], 0.5, 2.0), &[a.clone(), b.clone(), c], 2);
    check("einsum", &|x: &[Array]| ops::einsum("ij,jk->ki", &[x[0].clone(), x[1].clone()]), &[a.clone(), b], 3);
    check("outer", &|x: &[Array]| ops::outer(&x[0], &x[0]), &[rand(&mut rng, &[3], -1.0, 1.0)], 4);
    let t = ops::transpose(&a, None).unwrap();
    check("matmul transposed view", &|x: &[Array]| ops::matmul(&x[0], &x[0]), &[ops::matmul(&t, &a).unwrap()], 5);
}

#[test]
fn random_ops_have_no_gradient() {
    let key = kiln::random::key(7);
    let mut rng = Rng::new(13);
    let x = rand(&mut rng, &[6], -1.0, 1.0);
    let u = kiln::random::uniform(0.0, 1.0, &[6], Dtype::F64, Some(&key)).unwrap();
    // The sample multiplies x: d/dx sum(x * u) = u, and nothing flows into the sampler.
    check("x * uniform", &|a: &[Array]| ops::multiply(&a[0], kiln::random::uniform(0.0, 1.0, &[6], Dtype::F64, Some(&key))?), &[x.clone()], 1);
    let g = kiln::grad(
        |a: &[Array]| Ok(vec![ops::sum(ops::multiply(&a[0], kiln::random::normal(&[6], Dtype::F64, 0.0, 1.0, Some(&key))?)?, None, false)?]),
        &[0],
    );
    let n = kiln::random::normal(&[6], Dtype::F64, 0.0, 1.0, Some(&key)).unwrap();
    assert_eq!(g(&[x.clone()]).unwrap()[0].to_f64_vec().unwrap(), n.to_f64_vec().unwrap());
    assert_eq!(u.shape(), &[6]);
    // bernoulli of a differentiable probability is boolean: no gradient flows back into p.
    let g = kiln::grad(
        |a: &[Array]| {
            let b = kiln::random::bernoulli(ops::sigmoid(&a[0])?, None, Some(&key))?;
            Ok(vec![ops::sum(ops::multiply(ops::astype(&b, Dtype::F64)?, 2.0)?, None, false)?])
        },
        &[0],
    );
    assert!(g(&[x]).unwrap()[0].to_f64_vec().unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn composites_of_many_ops() {
    let mut rng = Rng::new(14);
    let (w, x) = (rand(&mut rng, &[4, 3], -1.0, 1.0), rand(&mut rng, &[5, 4], -1.0, 1.0));
    let layer_norm_mlp = |a: &[Array]| -> kiln::Result<Array> {
        let h = ops::matmul(&a[1], &a[0])?;
        let mu = ops::mean(&h, Some(&[-1]), true)?;
        let sd = ops::sqrt(ops::add(ops::var(&h, Some(&[-1]), true, 0)?, 1e-5)?)?;
        let z = ops::divide(ops::subtract(&h, &mu)?, &sd)?;
        let gelu = ops::multiply(ops::multiply(&z, 0.5)?, ops::add(ops::erf(ops::divide(&z, 2f64.sqrt())?)?, 1.0)?)?;
        ops::logsumexp(&gelu, Some(&[1]), false)
    };
    check("layer-norm mlp", &layer_norm_mlp, &[w, x], 1);
}

#[test]
fn narrow_float_gradients_match_float64() {
    // Gradients keep the input's dtype and agree with the float64 gradient to its precision.
    let mut rng = Rng::new(15);
    let values = rng.vec(24, -1.0, 1.0);
    let weights = rng.vec(6, -1.0, 1.0);
    let loss = |a: &[Array]| -> kiln::Result<Vec<Array>> {
        let h = ops::tanh(ops::matmul(&a[0], &a[1])?)?;
        Ok(vec![ops::mean(ops::multiply(&h, ops::sigmoid(&h)?)?, None, false)?])
    };
    let grads = |dtype: Dtype| {
        let x = common::array(&values, &[4, 6], dtype);
        let w = common::array(&weights, &[6, 1], dtype);
        let g = kiln::grad(loss, &[0, 1])(&[x, w]).unwrap();
        assert!(g.iter().all(|g| g.dtype() == dtype), "{dtype}: gradient dtype");
        g.iter().map(|g| g.to_f64_vec().unwrap()).collect::<Vec<_>>()
    };
    let want = grads(Dtype::F64);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let tol = common::rtol_for(dtype) * 8.0;
        for (got, want) in grads(dtype).iter().zip(&want) {
            common::assert_close(got, want, tol, tol * 0.1, &format!("{dtype} gradient"));
        }
    }
}

#[test]
fn linear_algebra_composites() {
    let mut rng = Rng::new(16);
    let (a, b) = (rand(&mut rng, &[2, 3, 4], -1.0, 1.0), rand(&mut rng, &[4, 3, 2], -1.0, 1.0));
    check(
        "tensordot",
        &|x: &[Array]| ops::tensordot(&x[0], &x[1], ops::TensordotAxes::Pairs(vec![1, 2], vec![1, 0])),
        &[a, b],
        1,
    );
    let (u, v) = (rand(&mut rng, &[2, 3], -1.0, 1.0), rand(&mut rng, &[4, 3], -1.0, 1.0));
    check("inner", &|x: &[Array]| ops::inner(&x[0], &x[1]), &[u, v], 2);
    check("diag", &|x: &[Array]| ops::diag(&x[0], 1), &[rand(&mut rng, &[3], -1.0, 1.0)], 3);
    check("triu", &|x: &[Array]| ops::triu(&x[0], -1), &[rand(&mut rng, &[3, 4], -1.0, 1.0)], 4);
    check("roll_axes", &|x: &[Array]| ops::roll_axes(&x[0], &[1, -2], &[0, 1]), &[rand(&mut rng, &[3, 4], -1.0, 1.0)], 5);
}

#[test]
fn ties_follow_mlx() {
    // max/min reductions split the gradient equally among tied extremes; sums of one-hots check it.
    let x = Array::from_slice(&[1.0f64, 3.0, 3.0, 2.0, 5.0, 5.0, 5.0, 0.0], &[2, 4]).unwrap();
    let ones = |shape: &[usize]| ops::ones(shape, Dtype::F64).unwrap();
    let run = |f: &dyn Fn(&Array) -> kiln::Result<Array>| {
        let y = f(&x).unwrap();
        let (_, g) = kiln::vjp(|a: &[Array]| Ok(vec![f(&a[0])?]), std::slice::from_ref(&x), &[ones(y.shape())]).unwrap();
        g[0].to_f64_vec().unwrap()
    };
    let third = 1.0 / 3.0;
    assert_eq!(run(&|a| ops::max(a, Some(&[1]), false)), vec![0.0, 0.5, 0.5, 0.0, third, third, third, 0.0]);
    assert_eq!(run(&|a| ops::max(a, None, false)), vec![0.0, 0.0, 0.0, 0.0, third, third, third, 0.0]);
    assert_eq!(run(&|a| ops::min(a, Some(&[0]), false)), vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    // jvp agrees: the tangent of a tied max is the mean of the tied tangents.
    let t = Array::from_slice(&[0.0f64, 1.0, 2.0, 0.0, 3.0, 6.0, 9.0, 0.0], &[2, 4]).unwrap();
    let (_, tan) = kiln::jvp(|a: &[Array]| Ok(vec![ops::max(&a[0], Some(&[1]), false)?]), std::slice::from_ref(&x), &[t]).unwrap();
    assert_eq!(tan[0].to_f64_vec().unwrap(), vec![1.5, 6.0]);
}

#[test]
fn power_and_logaddexp_at_their_edges() {
    // d/dx x^0 = 0 everywhere (also at x = 0), d/dx x^2 = 0 at 0, d/dy 0^y = 0 for y > 0.
    let x = Array::from_vec(vec![0.0f64, 0.0, 0.0]);
    let y = Array::from_vec(vec![0.0f64, 2.0, 1.5]);
    let f = |a: &[Array]| Ok(vec![ops::sum(ops::power(&a[0], &a[1])?, None, false)?]);
    let g = kiln::grad(f, &[0, 1])(&[x, y]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0, 0.0, 0.0]);
    assert_eq!(g[1].to_vec::<f64>().unwrap(), vec![0.0, 0.0, 0.0]);
    // logaddexp of two -inf shares the gradient equally instead of giving NaN.
    let ninf = Array::from_vec(vec![f64::NEG_INFINITY, 0.0]);
    let h = |a: &[Array]| Ok(vec![ops::sum(ops::logaddexp(&a[0], &a[1])?, None, false)?]);
    let g = kiln::grad(h, &[0, 1])(&[ninf.clone(), ninf]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.5, 0.5]);
    assert_eq!(g[1].to_vec::<f64>().unwrap(), vec![0.5, 0.5]);
}

/// Integer tangents flow through integer ops (mlx's `test_reduce_jvp`): the products below are
/// worked out by hand from a = [0, 1, 2, 3] and tangent t = [3, 2, 1, 0].
#[test]
fn integer_inputs_carry_their_tangents_through_jvp() {
    let a = kiln::ops::arange(0.0, 4.0, 1.0, kiln::Dtype::I32).unwrap();
    let t = kiln::Array::from_slice(&[3i32, 2, 1, 0], &[4]).unwrap();
    type Body = fn(&[kiln::Array]) -> kiln::Result<Vec<kiln::Array>>;
    let cases: [(&str, Body, Vec<f64>); 5] = [
        ("sum", |x| Ok(vec![kiln::ops::sum(&x[0], None, false)?]), vec![6.0]), // 3 + 2 + 1 + 0
        ("prod", |x| Ok(vec![kiln::ops::prod(&x[0], None, false)?]), vec![18.0]), // t0 * 1 * 2 * 3
        ("min", |x| Ok(vec![kiln::ops::min(&x[0], None, false)?]), vec![3.0]), // t at a's minimum (index 0)
        ("max", |x| Ok(vec![kiln::ops::max(&x[0], None, false)?]), vec![0.0]), // t at a's maximum (index 3)
        ("twice", |x| Ok(vec![kiln::ops::multiply(&x[0], 2)?]), vec![6.0, 4.0, 2.0, 0.0]),
    ];
    for (what, f, want) in cases {
        let (_, tangents) = kiln::jvp(f, std::slice::from_ref(&a), std::slice::from_ref(&t)).unwrap();
        assert_eq!(tangents[0].dtype(), kiln::Dtype::I32, "{what}");
        assert_eq!(tangents[0].to_f64_vec().unwrap(), want, "{what}");
    }
}
