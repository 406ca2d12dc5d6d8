//! Differential tests of `compile` against eager evaluation.
//!
//! 1. A seeded generator builds random functions from fusible ops (unary and binary math,
//!    comparisons feeding `where`, astype round trips, integer (signed and unsigned) and bool ops,
//!    constants including NaN, ±inf and -0.0, reductions over the last axis, the last two axes,
//!    axis 0 and all axes with and without keepdims, softmax, var, logsumexp, and elementwise
//!    epilogues mixing reduction results with full arrays) over inputs of broadcast-compatible
//!    shapes (1 to 10 axes, sizes 0 and 1 included, now and then more than 24 inputs) laid out as
//!    non-contiguous views. Each function's compiled results (shapeless off and on, plus the
//!    no-fuse and no-simplify modes for some) must equal its eager results (and fail where eager
//!    fails); a second call must replay the trace; a call with other shapes must retrace
//!    (shapeless off) or re-plan without retracing (shapeless on). For some, `grad` and `vmap` of
//!    the compiled function must agree with the plain function's. `scripts/fuzz compile` runs
//!    long campaigns of the same generator.
//! 2. Targeted cases: special constants, float64 precision, half-precision chains (bit exact),
//!    integer wrapping, bool logic, negative and zero strides, a 10-D input, argmax-like masks,
//!    30 inputs in one fused kernel, softmax/layernorm/logsumexp over rows of many lengths
//!    (including rows long enough to be split across threads) and empty arrays.
//! 3. CSE at scale: 40,000 uses of one constant compile in linear time and merge.
//! 4. CSE correctness: ops that differ only in parameters or keys are not merged.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` is an argument list

mod common;

use common::Rng;
use kiln::ops::{self, SliceSpec};
use kiln::{compile, compile_with, grad, random, vmap, with_device, Array, CompileMode, CompileOptions, Compiled, Device, Dtype, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Outputs = Result<Vec<Array>>;
type Check = std::result::Result<(), String>;

// ---------------------------------------------------------------------------------------------
// Comparison helpers
// ---------------------------------------------------------------------------------------------

/// Whether a float result agrees with the eager one: NaN matches NaN, infinities must match,
/// otherwise within 1e-5 relative (plus a tiny absolute slack scaled by the output's magnitude,
/// for values that cancel to near zero).
fn float_close(g: f64, w: f64, scale: f64, dtype: Dtype) -> bool {
    let rtol = match dtype {
        Dtype::F16 => 2e-3,
        Dtype::BF16 => 1.6e-2,
        Dtype::F64 => 1e-9,
        _ => 1e-5,
    };
    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= rtol * (g.abs().max(w.abs()) + 0.1 * scale.max(1.0))
}

/// Compares compiled outputs with eager ones: shapes and dtypes equal, integer and bool values
/// exactly, floats within `float_close` (or bit for bit, NaN aside, with `bit_exact`).
fn compare_outputs(got: &[Array], want: &[Array], bit_exact: bool) -> Check {
    if got.len() != want.len() {
        return Err(format!("{} outputs compiled, {} eager", got.len(), want.len()));
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.shape() != w.shape() || g.dtype() != w.dtype() {
            return Err(format!(
                "output {k}: compiled {:?} {}, eager {:?} {}",
                g.shape(),
                g.dtype(),
                w.shape(),
                w.dtype()
            ));
        }
        let gv = g.to_f64_vec().map_err(|e| format!("output {k}: reading compiled: {e}"))?;
        let wv = w.to_f64_vec().map_err(|e| format!("output {k}: reading eager: {e}"))?;
        let float = w.dtype().is_float();
        let scale = wv.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in gv.iter().zip(&wv).enumerate() {
            let ok = if !float {
                a == b
            } else if bit_exact {
                (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
            } else {
                float_close(a, b, scale, w.dtype())
            };
            if !ok {
                return Err(format!(
                    "output {k} ({} {:?}) element {i}: compiled {a:e} ({:#x}), eager {b:e} ({:#x})",
                    w.dtype(),
                    w.shape(),
                    a.to_bits(),
                    b.to_bits()
                ));
            }
        }
    }
    Ok(())
}

/// Calls `c` and `f` eagerly on `args` and asserts equal results; returns the compiled ones.
fn assert_matches_eager(c: &Compiled, f: &dyn Fn(&[Array]) -> Outputs, args: &[Array], bit_exact: bool, what: &str) -> Vec<Array> {
    let want = f(args).unwrap_or_else(|e| panic!("{what}: eager failed: {e}"));
    let got = c.call(args).unwrap_or_else(|e| panic!("{what}: compiled failed: {e}"));
    if let Err(e) = compare_outputs(&got, &want, bit_exact) {
        panic!("{what}: {e}");
    }
    got
}

/// Compiles `f` (shapeless off and on) and checks both against eager on `args`, twice each (the
/// second call replays the trace).
fn check_both(f: fn(&[Array]) -> Outputs, args: &[Array], bit_exact: bool, what: &str) -> Vec<Array> {
    let mut last = Vec::new();
    for shapeless in [false, true] {
        let c = compile_with(f, CompileOptions::new().shapeless(shapeless));
        let what = format!("{what} (shapeless={shapeless})");
        assert_matches_eager(&c, &f, args, bit_exact, &what);
        last = assert_matches_eager(&c, &f, args, bit_exact, &format!("{what}, second call"));
        assert_eq!(c.trace_count(), 1, "{what}: the second call must replay the trace");
    }
    last
}

/// An array of `dtype` and `shape` from f64 values (converted as astype does).
fn arr(values: &[f64], shape: &[usize], dtype: Dtype) -> Array {
    common::array(values, shape, dtype)
}

fn f32s(a: &Array) -> Vec<f32> {
    ops::astype(a, Dtype::F32).unwrap().to_vec::<f32>().unwrap()
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

// ---------------------------------------------------------------------------------------------
// 1. Random graphs
// ---------------------------------------------------------------------------------------------

/// A symbolic dimension: 1, or the base shape's axis `i` (whose size varies between calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dim {
    One,
    Var(usize),
}

type Sym = Vec<Dim>;

/// The broadcast of two symbolic shapes, if they are compatible for every size of the variables.
fn broadcast_sym(a: &[Dim], b: &[Dim]) -> Option<Sym> {
    let n = a.len().max(b.len());
    let at = |s: &[Dim], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { Dim::One };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (Dim::One, d) | (d, Dim::One) => Some(d),
            (Dim::Var(x), Dim::Var(y)) if x == y => Some(Dim::Var(x)),
            _ => None,
        })
        .collect()
}

fn concrete(s: &[Dim], dims: &[usize]) -> Vec<usize> {
    s.iter()
        .map(|d| match d {
            Dim::One => 1,
            Dim::Var(i) => dims[*i],
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    F,
    I,
    B,
}

#[derive(Clone, Copy, Debug)]
enum Un {
    Exp,
    Log1Abs,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Erf,
    SqrtAbs,
    Square,
    Neg,
    Abs,
    Floor,
    Ceil,
    Round,
    Sign,
    RecipAbs1,
    Expm1,
    Log1pAbs,
    RsqrtAbs1,
    ArcTan,
    CoshTanh,
}

const UNS: [Un; 21] = [
    Un::Exp,
    Un::Log1Abs,
    Un::Sin,
    Un::Cos,
    Un::Tanh,
    Un::Sigmoid,
    Un::Erf,
    Un::SqrtAbs,
    Un::Square,
    Un::Neg,
    Un::Abs,
    Un::Floor,
    Un::Ceil,
    Un::Round,
    Un::Sign,
    Un::RecipAbs1,
    Un::Expm1,
    Un::Log1pAbs,
    Un::RsqrtAbs1,
    Un::ArcTan,
    Un::CoshTanh,
];

#[derive(Clone, Copy, Debug)]
enum Bin {
    Add,
    Sub,
    Mul,
    DivSafe,
    Max,
    Min,
    PowSafe,
    LogAddExp,
    ArcTan2,
}

const BINS: [Bin; 9] = [Bin::Add, Bin::Sub, Bin::Mul, Bin::DivSafe, Bin::Max, Bin::Min, Bin::PowSafe, Bin::LogAddExp, Bin::ArcTan2];

#[derive(Clone, Copy, Debug)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

const CMPS: [Cmp; 6] = [Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge, Cmp::Eq, Cmp::Ne];

#[derive(Clone, Copy, Debug)]
enum IOp {
    Add,
    Sub,
    Mul,
    Max,
    Min,
    FloorDivSafe,
    RemSafe,
    And,
    Xor,
}

const IOPS: [IOp; 9] = [IOp::Add, IOp::Sub, IOp::Mul, IOp::Max, IOp::Min, IOp::FloorDivSafe, IOp::RemSafe, IOp::And, IOp::Xor];

#[derive(Clone, Copy, Debug)]
enum IUn {
    Abs,
    Neg,
    Square,
}

#[derive(Clone, Copy, Debug)]
enum BOp {
    And,
    Or,
    Xor,
    Eq,
}

#[derive(Clone, Copy, Debug)]
enum Red {
    Sum,
    Max,
    Min,
    Mean,
    Prod,
    LogSumExp,
    Var,
    Std,
    Softmax,
}

const REDS: [Red; 9] = [Red::Sum, Red::Max, Red::Min, Red::Mean, Red::Prod, Red::LogSumExp, Red::Var, Red::Std, Red::Softmax];

#[derive(Clone, Copy, Debug)]
enum IRed {
    Sum,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug)]
enum BRed {
    Any,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axes {
    Last,
    LastTwo,
    First,
    All,
}

impl Axes {
    fn list(self) -> Option<&'static [i64]> {
        match self {
            Axes::Last => Some(&[-1]),
            Axes::LastTwo => Some(&[-2, -1]),
            Axes::First => Some(&[0]),
            Axes::All => None,
        }
    }
    fn reduced(self, ndim: usize) -> Vec<usize> {
        match self {
            Axes::Last => vec![ndim - 1],
            Axes::LastTwo => vec![ndim - 2, ndim - 1],
            Axes::First => vec![0],
            Axes::All => (0..ndim).collect(),
        }
    }
}

#[derive(Clone, Debug)]
enum Node {
    Input(usize),
    Un(Un, usize),
    Bin(Bin, usize, usize),
    /// The op with a weak scalar constant, on the right (false) or the left (true).
    BinConst(Bin, usize, f64, bool),
    Cmp(Cmp, usize, usize),
    CmpConst(Cmp, usize, f64),
    Where(usize, usize, usize),
    /// float -> dtype -> float.
    RoundTrip(Dtype, usize),
    /// astype(floor(3x), the program's integer dtype) (of |x| for an unsigned one).
    ToInt(usize),
    /// astype to the program's float dtype of an int or bool node.
    ToFloat(usize),
    IBin(IOp, usize, usize),
    IBinConst(IOp, usize, i64),
    IUn(IUn, usize),
    BBin(BOp, usize, usize),
    BNot(usize),
    Red(Red, Axes, bool, usize),
    IRed(IRed, Axes, bool, usize),
    BRed(BRed, Axes, bool, usize),
    /// Transpose (all axes reversed): a view inside the function.
    Transpose(usize),
    /// Flip along every axis: a negative-stride view inside the function (a fixed-shape slice).
    Flip(usize),
    /// broadcast_to the shape of input 0 (fixed shape).
    BroadcastFull(usize),
}

impl Node {
    /// The nodes this one reads.
    fn operands(&self) -> Vec<usize> {
        use Node::*;
        match *self {
            Input(_) => vec![],
            Un(_, x) | BinConst(_, x, ..) | CmpConst(_, x, _) | RoundTrip(_, x) | ToInt(x) | ToFloat(x) | IBinConst(_, x, _)
            | IUn(_, x) | BNot(x) | Red(.., x) | IRed(.., x) | BRed(.., x) | Transpose(x) | Flip(x) | BroadcastFull(x) => vec![x],
            Bin(_, a, b) | Cmp(_, a, b) | IBin(_, a, b) | BBin(_, a, b) => vec![a, b],
            Where(c, a, b) => vec![c, a, b],
        }
    }

    /// The node with every operand `x` replaced by `f(x)`.
    fn remapped(&self, f: impl Fn(usize) -> usize) -> Node {
        use Node::*;
        match *self {
            Input(k) => Input(k),
            Un(u, x) => Un(u, f(x)),
            Bin(b, x, y) => Bin(b, f(x), f(y)),
            BinConst(b, x, c, left) => BinConst(b, f(x), c, left),
            Cmp(c, x, y) => Cmp(c, f(x), f(y)),
            CmpConst(c, x, k) => CmpConst(c, f(x), k),
            Where(c, a, b) => Where(f(c), f(a), f(b)),
            RoundTrip(d, x) => RoundTrip(d, f(x)),
            ToInt(x) => ToInt(f(x)),
            ToFloat(x) => ToFloat(f(x)),
            IBin(op, x, y) => IBin(op, f(x), f(y)),
            IBinConst(op, x, k) => IBinConst(op, f(x), k),
            IUn(u, x) => IUn(u, f(x)),
            BBin(op, x, y) => BBin(op, f(x), f(y)),
            BNot(x) => BNot(f(x)),
            Red(r, a, kd, x) => Red(r, a, kd, f(x)),
            IRed(r, a, kd, x) => IRed(r, a, kd, f(x)),
            BRed(r, a, kd, x) => BRed(r, a, kd, f(x)),
            Transpose(x) => Transpose(f(x)),
            Flip(x) => Flip(f(x)),
            BroadcastFull(x) => BroadcastFull(f(x)),
        }
    }

    /// The node as Rust source (for a reproducer pasted into this file).
    fn to_rust(&self) -> String {
        use Node::*;
        let c = |v: f64| match v {
            v if v.is_nan() => "f64::NAN".to_string(),
            f64::INFINITY => "f64::INFINITY".to_string(),
            f64::NEG_INFINITY => "f64::NEG_INFINITY".to_string(),
            v => format!("{v:?}"),
        };
        match *self {
            Input(k) => format!("Node::Input({k})"),
            Un(u, x) => format!("Node::Un(Un::{u:?}, {x})"),
            Bin(b, x, y) => format!("Node::Bin(Bin::{b:?}, {x}, {y})"),
            BinConst(b, x, k, left) => format!("Node::BinConst(Bin::{b:?}, {x}, {}, {left})", c(k)),
            Cmp(op, x, y) => format!("Node::Cmp(Cmp::{op:?}, {x}, {y})"),
            CmpConst(op, x, k) => format!("Node::CmpConst(Cmp::{op:?}, {x}, {})", c(k)),
            Where(w, a, b) => format!("Node::Where({w}, {a}, {b})"),
            RoundTrip(d, x) => format!("Node::RoundTrip(Dtype::{d:?}, {x})"),
            ToInt(x) => format!("Node::ToInt({x})"),
            ToFloat(x) => format!("Node::ToFloat({x})"),
            IBin(op, x, y) => format!("Node::IBin(IOp::{op:?}, {x}, {y})"),
            IBinConst(op, x, k) => format!("Node::IBinConst(IOp::{op:?}, {x}, {k})"),
            IUn(u, x) => format!("Node::IUn(IUn::{u:?}, {x})"),
            BBin(op, x, y) => format!("Node::BBin(BOp::{op:?}, {x}, {y})"),
            BNot(x) => format!("Node::BNot({x})"),
            Red(r, a, kd, x) => format!("Node::Red(Red::{r:?}, Axes::{a:?}, {kd}, {x})"),
            IRed(r, a, kd, x) => format!("Node::IRed(IRed::{r:?}, Axes::{a:?}, {kd}, {x})"),
            BRed(r, a, kd, x) => format!("Node::BRed(BRed::{r:?}, Axes::{a:?}, {kd}, {x})"),
            Transpose(x) => format!("Node::Transpose({x})"),
            Flip(x) => format!("Node::Flip({x})"),
            BroadcastFull(x) => format!("Node::BroadcastFull({x})"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Lay {
    Contig,
    Transposed,
    /// Every other element along an axis.
    Step(usize),
    /// Every axis reversed (negative strides).
    Reversed,
    /// broadcast_to from a shape with some axes 1 (zero strides).
    Broadcast,
    /// A slice starting at 1 (non-zero offset) along axis 0.
    Offset,
    /// Transposed, then reversed.
    TransposedReversed,
}

#[derive(Clone, Debug)]
struct InputSpec {
    ty: Ty,
    shape: Sym,
    lay: Lay,
    /// Values on a coarse grid, so that maxima and comparisons tie.
    ties: bool,
}

#[derive(Clone, Debug)]
struct Program {
    ndim: usize,
    /// The float dtype of float nodes.
    fty: Dtype,
    /// The integer dtype of integer inputs and of float-to-integer casts (signed or unsigned).
    ity: Dtype,
    inputs: Vec<InputSpec>,
    nodes: Vec<Node>,
    ty: Vec<Ty>,
    shape: Vec<Sym>,
    outputs: Vec<usize>,
    /// Whether some op's parameters hold trace-time shapes (reshape after a keepdims=false
    /// reduction, slices, broadcast_to): a shapeless call with other shapes may then fail.
    fixed_shape: bool,
    /// Whether it broadcasts to input 0's shape: a shapeless replay then returns the traced shape
    /// when the broadcast operand's own shape did not change (see
    /// `shapeless_broadcast_to_a_shape_taken_from_another_input`), so such programs skip the
    /// shapeless check with other shapes.
    broadcasts_to_input_shape: bool,
}

fn chance(rng: &mut Rng, p: f64) -> bool {
    rng.uniform(0.0, 1.0) < p
}

fn pick<T: Copy>(rng: &mut Rng, items: &[T]) -> T {
    items[rng.below(items.len())]
}

impl Program {
    /// A node of type `ty`, preferring recent ones.
    fn pick_node(&self, rng: &mut Rng, ty: Ty, filter: &dyn Fn(usize) -> bool) -> Option<usize> {
        let ok: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.ty[i] == ty && filter(i)).collect();
        if ok.is_empty() {
            return None;
        }
        if chance(rng, 0.5) {
            let k = ok.len().min(3);
            Some(ok[ok.len() - 1 - rng.below(k)])
        } else {
            Some(pick(rng, &ok))
        }
    }

    fn push(&mut self, node: Node, ty: Ty, shape: Sym) {
        self.nodes.push(node);
        self.ty.push(ty);
        self.shape.push(shape);
    }

    fn compatible(&self, a: usize) -> impl Fn(usize) -> bool {
        let sa = self.shape[a].clone();
        let shapes = self.shape.clone();
        move |b| broadcast_sym(&sa, &shapes[b]).is_some()
    }

    fn reduce_shape(&self, x: usize, axes: Axes, keepdims: bool) -> Sym {
        let s = &self.shape[x];
        let red = axes.reduced(s.len());
        s.iter()
            .enumerate()
            .filter_map(|(i, &d)| if red.contains(&i) { keepdims.then_some(Dim::One) } else { Some(d) })
            .collect()
    }

    fn pick_axes(&self, rng: &mut Rng, x: usize) -> Option<Axes> {
        let nd = self.shape[x].len();
        if nd == 0 {
            return None;
        }
        let mut options = vec![Axes::Last, Axes::First, Axes::All, Axes::Last];
        if nd >= 2 {
            options.push(Axes::LastTwo);
            options.push(Axes::LastTwo);
        }
        Some(pick(rng, &options))
    }

    fn generate(seed: u64) -> Program {
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9).wrapping_add(17));
        let ndim = pick(&mut rng, &[1, 2, 2, 2, 3, 3, 1, 2, 2, 2, 3, 3, 4, 6, 10]);
        let fty = pick(&mut rng, &[Dtype::F32, Dtype::F32, Dtype::F32, Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16]);
        let ity = pick(&mut rng, &[Dtype::I32, Dtype::I32, Dtype::I32, Dtype::I64, Dtype::I16, Dtype::U8, Dtype::U32]);
        let full: Sym = (0..ndim).map(Dim::Var).collect();
        let mut p = Program {
            ndim,
            fty,
            ity,
            inputs: vec![],
            nodes: vec![],
            ty: vec![],
            shape: vec![],
            outputs: vec![],
            fixed_shape: false,
            broadcasts_to_input_shape: false,
        };
        // Now and then more inputs than a kernel's first argument block holds.
        let n_inputs = if chance(&mut rng, 0.03) { 25 + rng.below(6) } else { 1 + rng.below(4) };
        for k in 0..n_inputs {
            let shape = if k == 0 {
                full.clone()
            } else {
                match rng.below(6) {
                    0 | 1 => full.clone(),
                    // (1, .., b)
                    2 => (0..ndim).map(|i| if i + 1 == ndim { Dim::Var(i) } else { Dim::One }).collect(),
                    // (a, .., 1)
                    3 => (0..ndim).map(|i| if i + 1 == ndim { Dim::One } else { Dim::Var(i) }).collect(),
                    // (b,)
                    4 => vec![Dim::Var(ndim - 1)],
                    _ => vec![],
                }
            };
            let ty = if k == 0 {
                Ty::F
            } else {
                match rng.below(8) {
                    0 => Ty::I,
                    1 => Ty::B,
                    _ => Ty::F,
                }
            };
            let lay = if shape.is_empty() {
                Lay::Contig
            } else {
                let mut lays = vec![Lay::Contig, Lay::Reversed, Lay::Step(rng.below(shape.len())), Lay::Offset, Lay::Broadcast];
                if shape.len() >= 2 {
                    lays.push(Lay::Transposed);
                    lays.push(Lay::TransposedReversed);
                }
                pick(&mut rng, &lays)
            };
            let ties = chance(&mut rng, 0.3);
            p.inputs.push(InputSpec { ty, shape: shape.clone(), lay, ties });
            p.push(Node::Input(k), ty, shape);
        }
        let steps = 4 + rng.below(16);
        let consts = [0.5, 2.0, -1.5, 3.0, 1e-3, 0.0, -0.25, 7.0, 0.5, 2.0, -1.5, 3.0, 0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0];
        let int_consts: &[i64] = if ity.is_unsigned() { &[3, 7, 0, 1] } else { &[3, -2, 7, 0, 1] };
        let mut made = 0;
        let mut attempts = 0;
        while made < steps && attempts < 200 {
            attempts += 1;
            let before = p.nodes.len();
            match rng.below(20) {
                0..=3 => {
                    if let Some(x) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                        let s = p.shape[x].clone();
                        p.push(Node::Un(pick(&mut rng, &UNS), x), Ty::F, s);
                    }
                }
                4..=6 => {
                    if let Some(a) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                        let comp = p.compatible(a);
                        if let Some(b) = p.pick_node(&mut rng, Ty::F, &comp) {
                            let s = broadcast_sym(&p.shape[a], &p.shape[b]).unwrap();
                            p.push(Node::Bin(pick(&mut rng, &BINS), a, b), Ty::F, s);
                        }
                    }
                }
                7 => {
                    if let Some(a) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                        let s = p.shape[a].clone();
                        let c = pick(&mut rng, &consts);
                        let left = chance(&mut rng, 0.3);
                        p.push(Node::BinConst(pick(&mut rng, &BINS), a, c, left), Ty::F, s);
                    }
                }
                8 => {
                    if let Some(a) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                        let comp = p.compatible(a);
                        if chance(&mut rng, 0.4) {
                            let s = p.shape[a].clone();
                            p.push(Node::CmpConst(pick(&mut rng, &CMPS), a, pick(&mut rng, &consts)), Ty::B, s);
                        } else if let Some(b) = p.pick_node(&mut rng, Ty::F, &comp) {
                            let s = broadcast_sym(&p.shape[a], &p.shape[b]).unwrap();
                            p.push(Node::Cmp(pick(&mut rng, &CMPS), a, b), Ty::B, s);
                        }
                    }
                }
                9 => {
                    if let Some(c) = p.pick_node(&mut rng, Ty::B, &|_| true) {
                        let comp = p.compatible(c);
                        if let Some(a) = p.pick_node(&mut rng, Ty::F, &comp) {
                            let sca = broadcast_sym(&p.shape[c], &p.shape[a]).unwrap();
                            let shape = p.shape.clone();
                            let fits = move |b: usize| broadcast_sym(&sca, &shape[b]).is_some();
                            if let Some(b) = p.pick_node(&mut rng, Ty::F, &fits) {
                                let s = broadcast_sym(&broadcast_sym(&p.shape[c], &p.shape[a]).unwrap(), &p.shape[b]).unwrap();
                                p.push(Node::Where(c, a, b), Ty::F, s);
                            }
                        }
                    }
                }
                10 => {
                    if let Some(x) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                        let s = p.shape[x].clone();
                        // Not float64 -> half: a fused cast rounds twice there (see
                        // `fused_float64_to_half_cast_rounds_once`).
                        let dt = if fty == Dtype::F64 {
                            pick(&mut rng, &[Dtype::F32, Dtype::I32])
                        } else {
                            pick(&mut rng, &[Dtype::F16, Dtype::BF16, Dtype::F64, Dtype::F32, Dtype::I32])
                        };
                        p.push(Node::RoundTrip(dt, x), Ty::F, s);
                    }
                }
                11 => {
                    if chance(&mut rng, 0.5) {
                        if let Some(x) = p.pick_node(&mut rng, Ty::F, &|_| true) {
                            let s = p.shape[x].clone();
                            p.push(Node::ToInt(x), Ty::I, s);
                        }
                    } else {
                        let ty = if chance(&mut rng, 0.5) { Ty::I } else { Ty::B };
                        if let Some(x) = p.pick_node(&mut rng, ty, &|_| true) {
                            let s = p.shape[x].clone();
                            p.push(Node::ToFloat(x), Ty::F, s);
                        }
                    }
                }
                12 => {
                    if let Some(a) = p.pick_node(&mut rng, Ty::I, &|_| true) {
                        let s = p.shape[a].clone();
                        match rng.below(3) {
                            0 => p.push(Node::IUn(pick(&mut rng, &[IUn::Abs, IUn::Neg, IUn::Square]), a), Ty::I, s),
                            1 => p.push(Node::IBinConst(pick(&mut rng, &IOPS), a, pick(&mut rng, int_consts)), Ty::I, s),
                            _ => {
                                let comp = p.compatible(a);
                                if let Some(b) = p.pick_node(&mut rng, Ty::I, &comp) {
                                    let s = broadcast_sym(&p.shape[a], &p.shape[b]).unwrap();
                                    p.push(Node::IBin(pick(&mut rng, &IOPS), a, b), Ty::I, s);
                                }
                            }
                        }
                    }
                }
                13 => {
                    if let Some(a) = p.pick_node(&mut rng, Ty::B, &|_| true) {
                        if chance(&mut rng, 0.3) {
                            let s = p.shape[a].clone();
                            p.push(Node::BNot(a), Ty::B, s);
                        } else {
                            let comp = p.compatible(a);
                            if let Some(b) = p.pick_node(&mut rng, Ty::B, &comp) {
                                let s = broadcast_sym(&p.shape[a], &p.shape[b]).unwrap();
                                let op = pick(&mut rng, &[BOp::And, BOp::Or, BOp::Xor, BOp::Eq]);
                                p.push(Node::BBin(op, a, b), Ty::B, s);
                            }
                        }
                    }
                }
                14..=17 => {
                    if let Some(x) = p.pick_node(&mut rng, Ty::F, &|i| !p.shape[i].is_empty()) {
                        let axes = p.pick_axes(&mut rng, x).unwrap();
                        let red = pick(&mut rng, &REDS);
                        let kd = matches!(red, Red::Softmax) || chance(&mut rng, 0.7);
                        let s = if matches!(red, Red::Softmax) { p.shape[x].clone() } else { p.reduce_shape(x, axes, kd) };
                        p.fixed_shape |= !kd;
                        p.push(Node::Red(red, axes, kd, x), Ty::F, s);
                    }
                }
                18 => {
                    let ty = if chance(&mut rng, 0.6) { Ty::I } else { Ty::B };
                    if let Some(x) = p.pick_node(&mut rng, ty, &|i| !p.shape[i].is_empty()) {
                        let axes = p.pick_axes(&mut rng, x).unwrap();
                        let kd = chance(&mut rng, 0.6);
                        let s = p.reduce_shape(x, axes, kd);
                        p.fixed_shape |= !kd;
                        let node = if ty == Ty::I {
                            Node::IRed(pick(&mut rng, &[IRed::Sum, IRed::Max, IRed::Min]), axes, kd, x)
                        } else {
                            Node::BRed(pick(&mut rng, &[BRed::Any, BRed::All]), axes, kd, x)
                        };
                        p.push(node, ty, s);
                    }
                }
                _ => {
                    // Views inside the function.
                    if let Some(x) = p.pick_node(&mut rng, Ty::F, &|i| !p.shape[i].is_empty()) {
                        let s = p.shape[x].clone();
                        match rng.below(3) {
                            0 => {
                                let t: Sym = s.iter().rev().copied().collect();
                                p.push(Node::Transpose(x), Ty::F, t);
                            }
                            1 => {
                                p.fixed_shape = true;
                                p.push(Node::Flip(x), Ty::F, s);
                            }
                            _ => {
                                if broadcast_sym(&s, &full).as_deref() == Some(&full[..]) && s != full {
                                    p.fixed_shape = true;
                                    p.broadcasts_to_input_shape = true;
                                    p.push(Node::BroadcastFull(x), Ty::F, full.clone());
                                }
                            }
                        }
                    }
                }
            }
            if p.nodes.len() > before {
                made += 1;
            }
        }
        // Outputs: the last node and a few interior ones (possibly repeated, possibly an input).
        let last = p.nodes.len() - 1;
        p.outputs.push(last);
        for _ in 0..rng.below(4) {
            let o = if chance(&mut rng, 0.1) { rng.below(n_inputs) } else { n_inputs + rng.below(p.nodes.len() - n_inputs) };
            p.outputs.push(o);
        }
        p
    }

    /// The program without the nodes nothing reads (inputs stay), renumbered.
    fn without_dead_nodes(&self) -> Program {
        let n = self.nodes.len();
        let mut live = vec![false; n];
        live[..self.inputs.len()].fill(true);
        for &o in &self.outputs {
            live[o] = true;
        }
        for i in (0..n).rev() {
            if live[i] {
                for x in self.nodes[i].operands() {
                    live[x] = true;
                }
            }
        }
        let mut index = vec![usize::MAX; n];
        let mut out = Program { nodes: vec![], ty: vec![], shape: vec![], ..self.clone() };
        for i in (0..n).filter(|&i| live[i]) {
            index[i] = out.nodes.len();
            out.nodes.push(self.nodes[i].remapped(|x| index[x]));
            out.ty.push(self.ty[i]);
            out.shape.push(self.shape[i].clone());
        }
        out.outputs = self.outputs.iter().map(|&o| index[o]).collect();
        out
    }

    /// The program with `node` replaced by `by` wherever it is read (and as an output).
    fn bypassed(&self, node: usize, by: usize) -> Program {
        let mut p = self.clone();
        let f = |x| if x == node { by } else { x };
        for n in p.nodes.iter_mut().skip(node + 1) {
            *n = n.remapped(f);
        }
        p.outputs.iter_mut().for_each(|o| *o = f(*o));
        p.without_dead_nodes()
    }

    /// A test reproducing a failure of this program at `dims` then `dims2`, as Rust to paste
    /// into this file.
    fn to_rust(&self, seed: u64, dims: &[usize], dims2: &[usize], every_mode: bool) -> String {
        let list = |items: Vec<String>| items.join(", ");
        let sym = |s: &Sym| {
            format!("vec![{}]", list(s.iter().map(|d| match d {
                Dim::One => "Dim::One".to_string(),
                Dim::Var(i) => format!("Dim::Var({i})"),
            }).collect()))
        };
        let inputs = list(self.inputs.iter().map(|i| format!("InputSpec {{ ty: Ty::{:?}, shape: {}, lay: Lay::{:?}, ties: {} }}", i.ty, sym(&i.shape), i.lay, i.ties)).collect());
        format!(
            "#[test]\nfn shrunk_from_seed_{seed}() {{\n    let prog = Program {{\n        ndim: {},\n        fty: Dtype::{:?},\n        ity: Dtype::{:?},\n        \
             inputs: vec![{inputs}],\n        nodes: vec![{}],\n        ty: vec![{}],\n        shape: vec![{}],\n        \
             outputs: vec!{:?},\n        fixed_shape: {},\n        broadcasts_to_input_shape: {},\n    }};\n    \
             check_case(&prog, {seed}, &{dims:?}, &{dims2:?}, {every_mode}).unwrap();\n}}",
            self.ndim,
            self.fty,
            self.ity,
            list(self.nodes.iter().map(Node::to_rust).collect()),
            list(self.ty.iter().map(|t| format!("Ty::{t:?}")).collect()),
            list(self.shape.iter().map(sym).collect()),
            self.outputs,
            self.fixed_shape,
            self.broadcasts_to_input_shape,
        )
    }

    /// Concrete sizes for the base shape's axes.
    fn dims(&self, rng: &mut Rng) -> Vec<usize> {
        let sizes: &[usize] = if self.ndim > 4 { &[1, 2, 2, 3] } else { &[1, 2, 3, 3, 4, 5, 6, 8] };
        let mut d: Vec<usize> = (0..self.ndim).map(|_| pick(rng, sizes)).collect();
        if chance(rng, 0.04) {
            // An empty axis.
            let axis = rng.below(self.ndim);
            d[axis] = 0;
        } else if self.ndim <= 4 && chance(rng, 0.15) {
            // A last axis longer than a tile.
            for x in d.iter_mut() {
                *x = (*x).min(3);
            }
            *d.last_mut().unwrap() = pick(rng, &[1030, 2100]);
        }
        d
    }

    fn make_inputs(&self, rng: &mut Rng, dims: &[usize]) -> Vec<Array> {
        self.inputs
            .iter()
            .map(|spec| {
                let shape = concrete(&spec.shape, dims);
                let dtype = match spec.ty {
                    Ty::F => self.fty,
                    Ty::I => self.ity,
                    Ty::B => Dtype::Bool,
                };
                let x = laid_out(rng, &shape, spec.lay, dtype, spec.ties);
                x.eval().unwrap();
                assert_eq!(x.shape(), shape.as_slice());
                x
            })
            .collect()
    }

    /// Runs the program on `args` (eagerly, or inside a compile trace).
    fn run(&self, args: &[Array]) -> Outputs {
        let mut v: Vec<Array> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let out = match *node {
                Node::Input(k) => args[k].clone(),
                Node::Un(u, x) => unary(u, &v[x])?,
                Node::Bin(b, x, y) => binary(b, &v[x], &v[y])?,
                Node::BinConst(b, x, c, left) => {
                    let c = Array::weak_float(c);
                    if left {
                        binary(b, &c, &v[x])?
                    } else {
                        binary(b, &v[x], &c)?
                    }
                }
                Node::Cmp(c, x, y) => compare(c, &v[x], &v[y])?,
                Node::CmpConst(c, x, k) => compare(c, &v[x], &Array::weak_float(k))?,
                Node::Where(c, a, b) => ops::where_(&v[c], &v[a], &v[b])?,
                Node::RoundTrip(dt, x) => ops::astype(ops::astype(&v[x], dt)?, self.fty)?,
                // Unsigned targets take |x|: a negative float's cast to unsigned is undefined in C.
                Node::ToInt(x) if self.ity.is_unsigned() => ops::astype(ops::floor(ops::multiply(ops::abs(&v[x])?, 3.0)?)?, self.ity)?,
                Node::ToInt(x) => ops::astype(ops::floor(ops::multiply(&v[x], 3.0)?)?, self.ity)?,
                Node::ToFloat(x) => ops::astype(&v[x], self.fty)?,
                Node::IBin(op, x, y) => int_binary(op, &v[x], &v[y])?,
                Node::IBinConst(op, x, k) => int_binary(op, &v[x], &Array::weak_int(k))?,
                Node::IUn(u, x) => match u {
                    IUn::Abs => ops::abs(&v[x])?,
                    IUn::Neg => ops::negative(&v[x])?,
                    IUn::Square => ops::square(&v[x])?,
                },
                Node::BBin(op, x, y) => match op {
                    BOp::And => ops::logical_and(&v[x], &v[y])?,
                    BOp::Or => ops::logical_or(&v[x], &v[y])?,
                    BOp::Xor => ops::bitwise_xor(&v[x], &v[y])?,
                    BOp::Eq => ops::equal(&v[x], &v[y])?,
                },
                Node::BNot(x) => ops::logical_not(&v[x])?,
                Node::Red(r, axes, kd, x) => reduction(r, &v[x], axes.list(), kd)?,
                Node::IRed(r, axes, kd, x) => match r {
                    IRed::Sum => ops::sum(&v[x], axes.list(), kd)?,
                    IRed::Max => ops::max(&v[x], axes.list(), kd)?,
                    IRed::Min => ops::min(&v[x], axes.list(), kd)?,
                },
                Node::BRed(r, axes, kd, x) => match r {
                    BRed::Any => ops::any(&v[x], axes.list(), kd)?,
                    BRed::All => ops::all(&v[x], axes.list(), kd)?,
                },
                Node::Transpose(x) => ops::transpose(&v[x], None)?,
                Node::Flip(x) => ops::flip(&v[x], None)?,
                Node::BroadcastFull(x) => ops::broadcast_to(&v[x], args[0].shape())?,
            };
            v.push(out);
        }
        Ok(self.outputs.iter().map(|&o| v[o].clone()).collect())
    }
}

fn unary(u: Un, x: &Array) -> Result<Array> {
    use ops::*;
    match u {
        Un::Exp => exp(minimum(x, 6.0)?),
        Un::Log1Abs => log(add(abs(x)?, 1.0)?),
        Un::Sin => sin(x),
        Un::Cos => cos(x),
        Un::Tanh => tanh(x),
        Un::Sigmoid => sigmoid(x),
        Un::Erf => erf(x),
        Un::SqrtAbs => sqrt(abs(x)?),
        Un::Square => square(x),
        Un::Neg => negative(x),
        Un::Abs => abs(x),
        Un::Floor => floor(x),
        Un::Ceil => ceil(x),
        Un::Round => round(x),
        Un::Sign => sign(x),
        Un::RecipAbs1 => reciprocal(add(abs(x)?, 1.0)?),
        Un::Expm1 => expm1(minimum(x, 6.0)?),
        Un::Log1pAbs => log1p(abs(x)?),
        Un::RsqrtAbs1 => rsqrt(add(abs(x)?, 1.0)?),
        Un::ArcTan => arctan(x),
        Un::CoshTanh => cosh(tanh(x)?),
    }
}

fn binary(b: Bin, x: &Array, y: &Array) -> Result<Array> {
    use ops::*;
    match b {
        Bin::Add => add(x, y),
        Bin::Sub => subtract(x, y),
        Bin::Mul => multiply(x, y),
        Bin::DivSafe => divide(x, add(abs(y)?, 1.0)?),
        Bin::Max => maximum(x, y),
        Bin::Min => minimum(x, y),
        Bin::PowSafe => power(add(abs(x)?, 0.5)?, tanh(y)?),
        Bin::LogAddExp => logaddexp(x, y),
        Bin::ArcTan2 => arctan2(x, y),
    }
}

fn compare(c: Cmp, x: &Array, y: &Array) -> Result<Array> {
    use ops::*;
    match c {
        Cmp::Lt => less(x, y),
        Cmp::Le => less_equal(x, y),
        Cmp::Gt => greater(x, y),
        Cmp::Ge => greater_equal(x, y),
        Cmp::Eq => equal(x, y),
        Cmp::Ne => not_equal(x, y),
    }
}

fn int_binary(op: IOp, x: &Array, y: &Array) -> Result<Array> {
    use ops::*;
    match op {
        IOp::Add => add(x, y),
        IOp::Sub => subtract(x, y),
        IOp::Mul => multiply(x, y),
        IOp::Max => maximum(x, y),
        IOp::Min => minimum(x, y),
        IOp::FloorDivSafe => floor_divide(x, add(abs(y)?, 1)?),
        IOp::RemSafe => remainder(x, add(abs(y)?, 1)?),
        IOp::And => bitwise_and(x, y),
        IOp::Xor => bitwise_xor(x, y),
    }
}

fn reduction(r: Red, x: &Array, axes: Option<&[i64]>, kd: bool) -> Result<Array> {
    use ops::*;
    match r {
        Red::Sum => sum(x, axes, kd),
        Red::Max => max(x, axes, kd),
        Red::Min => min(x, axes, kd),
        Red::Mean => mean(x, axes, kd),
        // Factors near 1, and tanh of the product: a product of thousands of factors can still
        // reach 1e100, where the last bits depend on the order of the multiplications and a later
        // sin would amplify them into different values (seeds 4555 and 5538 of 10,000).
        Red::Prod => tanh(prod(add(multiply(tanh(x)?, 0.1)?, 1.0)?, axes, kd)?),
        Red::LogSumExp => logsumexp(x, axes, kd),
        Red::Var => var(x, axes, kd, 0),
        Red::Std => std(x, axes, kd, 1),
        Red::Softmax => softmax(x, axes, false),
    }
}

/// Random values for `dtype`: floats in [-2, 2) (on a 0.5 grid with `ties`), small integers,
/// or bools.
fn values(rng: &mut Rng, n: usize, dtype: Dtype, ties: bool) -> Vec<f64> {
    match dtype {
        Dtype::Bool => (0..n).map(|_| (rng.next_u64() & 1) as f64).collect(),
        d if d.is_integer() && d.is_unsigned() => (0..n).map(|_| rng.uniform(0.0, 12.0).floor()).collect(),
        d if d.is_integer() => (0..n).map(|_| rng.uniform(-6.0, 6.0).floor()).collect(),
        _ if ties => (0..n).map(|_| (rng.uniform(-2.0, 2.0) * 2.0).floor() / 2.0).collect(),
        _ => rng.vec(n, -2.0, 2.0),
    }
}

/// An array of `shape` laid out in memory as `lay` (a view of a larger or permuted buffer).
fn laid_out(rng: &mut Rng, shape: &[usize], lay: Lay, dtype: Dtype, ties: bool) -> Array {
    let n: usize = shape.iter().product();
    let nd = shape.len();
    let fresh = |rng: &mut Rng, s: &[usize]| {
        let m: usize = s.iter().product();
        arr(&values(rng, m, dtype, ties), s, dtype)
    };
    match lay {
        _ if nd == 0 => fresh(rng, shape),
        Lay::Contig => fresh(rng, shape),
        Lay::Transposed if nd >= 2 => {
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            ops::transpose(fresh(rng, &rev), None).unwrap()
        }
        Lay::TransposedReversed if nd >= 2 => {
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let t = ops::transpose(fresh(rng, &rev), None).unwrap();
            t.eval().unwrap();
            ops::flip(t, None).unwrap()
        }
        Lay::Transposed | Lay::TransposedReversed => fresh(rng, shape),
        Lay::Step(axis) => {
            let axis = axis.min(nd - 1);
            let mut big = shape.to_vec();
            big[axis] = big[axis] * 2 + 1;
            let mut specs = vec![SliceSpec::ALL; nd];
            specs[axis] = SliceSpec { start: Some(1), stop: None, step: 2 };
            ops::slice(fresh(rng, &big), &specs).unwrap()
        }
        Lay::Reversed => ops::flip(fresh(rng, shape), None).unwrap(),
        Lay::Broadcast => {
            let mut small = shape.to_vec();
            for d in small.iter_mut() {
                if chance(rng, 0.5) {
                    *d = 1;
                }
            }
            if small == shape && n > 0 {
                small[0] = 1;
            }
            ops::broadcast_to(fresh(rng, &small), shape).unwrap()
        }
        Lay::Offset => {
            let mut big = shape.to_vec();
            big[0] += 1;
            let mut specs = vec![SliceSpec::ALL; nd];
            specs[0] = SliceSpec { start: Some(1), stop: None, step: 1 };
            ops::slice(fresh(rng, &big), &specs).unwrap()
        }
    }
}

/// Checks one random program: compiled (shapeless off and on, and for some programs the
/// no-fuse and no-simplify modes) equals eager, replays on a second call, and serves other shapes.
/// What one program's check exercised.
#[derive(Default)]
struct Stats {
    /// Shapeless calls with other shapes compared against eager.
    replanned: usize,
    /// Shapeless calls with other shapes that failed with the fixed-shape error.
    refused: usize,
    /// Fused kernels; those with reductions; those making several passes over a row.
    kernels: usize,
    reducing: usize,
    multipass: usize,
    /// Gradients and vmaps of compiled functions compared against the plain function's.
    transformed: usize,
    /// Eager results on another default device (the GPU) compared against the CPU's.
    device_checked: usize,
}

fn check_program(seed: u64) -> std::result::Result<Stats, String> {
    let prog = Program::generate(seed);
    let mut rng = Rng::new(seed ^ 0x5EED_D1FF);
    let dims = prog.dims(&mut rng);
    let mut dims2 = prog.dims(&mut rng);
    for _ in 0..20 {
        if dims2 != dims {
            break;
        }
        dims2 = prog.dims(&mut rng);
    }
    let every_mode = seed.is_multiple_of(4);
    check_case(&prog, seed, &dims, &dims2, every_mode).map_err(|e| {
        let fails = |p: &Program| {
            let run = std::panic::AssertUnwindSafe(|| check_case(p, seed, &dims, &dims2, every_mode));
            !matches!(std::panic::catch_unwind(run), Ok(Ok(_)))
        };
        let small = shrink(&prog, &fails);
        format!("{e}\n  shrunk to {} nodes; as a test to paste here:\n{}", small.nodes.len(), small.to_rust(seed, &dims, &dims2, every_mode))
    })
}

/// Shrinks a program while `fails` holds of it: one of its outputs instead of all, then nodes
/// bypassed by an operand of the same type and shape, dropping what nothing reads any more.
fn shrink(prog: &Program, fails: &dyn Fn(&Program) -> bool) -> Program {
    let mut best = prog.clone();
    for &o in &prog.outputs {
        let one = Program { outputs: vec![o], ..prog.clone() }.without_dead_nodes();
        if fails(&one) {
            best = one;
            break;
        }
    }
    'smaller: loop {
        for i in (best.inputs.len()..best.nodes.len()).rev() {
            for x in best.nodes[i].operands() {
                if best.ty[x] == best.ty[i] && best.shape[x] == best.shape[i] {
                    let p = best.bypassed(i, x);
                    if fails(&p) {
                        best = p;
                        continue 'smaller;
                    }
                }
            }
        }
        return best;
    }
}

/// Checks `prog` at `dims`, then at `dims2` (other sizes of the same axes); `every_mode` adds the
/// no-fuse and no-simplify modes and the transforms of the compiled function.
fn check_case(prog: &Program, seed: u64, dims: &[usize], dims2: &[usize], every_mode: bool) -> std::result::Result<Stats, String> {
    let mut stats = Stats::default();
    let prog = Arc::new(prog.clone());
    let mut rng = Rng::new(seed ^ 0x1D_9075);
    let inputs = prog.make_inputs(&mut rng, dims);
    let ctx = |what: &str, e: String| format!("{what}: {e}\n  dims {dims:?}\n  {prog:?}");
    let want = match prog.run(&inputs) {
        Ok(want) => want,
        // Eager refuses (a reduction without identity over an empty axis, say): compiled must too.
        Err(eager) => {
            let p = prog.clone();
            return match compile(move |a: &[Array]| p.run(a)).call(&inputs) {
                Err(_) => Ok(stats),
                Ok(_) => Err(ctx("compiled succeeded where eager failed", eager.to_string())),
            };
        }
    };
    // On another default device (the GPU), its eager results must also agree with the CPU's.
    if kiln::default_device() != Device::cpu() {
        let cpu_inputs = with_device(Device::cpu(), || prog.make_inputs(&mut Rng::new(seed ^ 0x1D_9075), dims)).unwrap();
        let cpu_want = with_device(Device::cpu(), || prog.run(&cpu_inputs))
            .unwrap()
            .map_err(|e| ctx("eager failed on the CPU only", e.to_string()))?;
        compare_outputs(&want, &cpu_want, false).map_err(|e| ctx(&format!("eager on {} against eager on the CPU", kiln::default_device()), e))?;
        stats.device_checked += 1;
    }
    let inputs2 = prog.make_inputs(&mut rng, dims2);
    let want2 = prog.run(&inputs2).ok();
    if every_mode {
        stats.transformed += check_transforms(&prog, &inputs).map_err(|e| ctx("transforms", e))?;
    }
    let mut configs = vec![
        ("shapeless off", CompileOptions::new()),
        ("shapeless on", CompileOptions::new().shapeless(true)),
    ];
    if every_mode {
        configs.push(("no fuse", CompileOptions::new().mode(CompileMode::NoFuse)));
        configs.push(("no simplify, shapeless", CompileOptions::new().shapeless(true).mode(CompileMode::NoSimplify)));
    }
    for (name, options) in configs {
        let shapeless = options.shapeless;
        let p = prog.clone();
        let c = compile_with(move |a: &[Array]| p.run(a), options);
        let got = c.call(&inputs).map_err(|e| ctx(&format!("{name}: compiled call failed"), e.to_string()))?;
        compare_outputs(&got, &want, false).map_err(|e| ctx(name, e))?;
        let again = c.call(&inputs).map_err(|e| ctx(&format!("{name}: second call failed"), e.to_string()))?;
        compare_outputs(&again, &want, false).map_err(|e| ctx(&format!("{name}, second call"), e))?;
        if c.trace_count() != 1 {
            return Err(ctx(name, format!("second call traced again ({} traces)", c.trace_count())));
        }
        if name == "shapeless off" {
            let report = c.inspect(&inputs, &[]).map_err(|e| ctx("inspect failed", e.to_string()))?;
            stats.kernels += report.groups.len();
            stats.reducing += report.groups.iter().filter(|g| !g.ir.contains("reduced_axes=0")).count();
            stats.multipass += report.groups.iter().filter(|g| !g.ir.contains("passes=1 ")).count();
        }
        // Other shapes of the same ndims.
        match (c.call(&inputs2), &want2) {
            (Ok(_), _) if shapeless && prog.broadcasts_to_input_shape => {}
            (Ok(got2), Some(want2)) => {
                compare_outputs(&got2, want2, false).map_err(|e| ctx(&format!("{name}, dims {dims2:?}"), e))?;
                stats.replanned += usize::from(shapeless && dims2 != dims);
            }
            (Ok(_), None) => return Err(ctx(&format!("{name}: dims {dims2:?}"), "compiled succeeded where eager failed".into())),
            (Err(_), None) => {}
            (Err(e), _) if shapeless && prog.fixed_shape && e.to_string().contains("shapeless") => stats.refused += 1,
            (Err(e), _) => return Err(ctx(&format!("{name}: call with dims {dims2:?} failed"), e.to_string())),
        }
        // A shapeless call at a new pattern of empty axes traces again; a failed trace counts not.
        let empty = |d: &[usize]| d.iter().map(|&x| x == 0).collect::<Vec<_>>();
        let traces = if want2.is_none() || (shapeless && empty(dims) == empty(dims2)) { 1 } else { 2 };
        if dims2 != dims && c.trace_count() != traces {
            return Err(ctx(name, format!("after a call with other shapes: {} traces, expected {traces}", c.trace_count())));
        }
        // Back to the first shapes: served from the cache.
        let back = c.call(&inputs).map_err(|e| ctx(&format!("{name}: call back on the first shapes failed"), e.to_string()))?;
        compare_outputs(&back, &want, false).map_err(|e| ctx(&format!("{name}, back on the first shapes"), e))?;
        if dims2 != dims && c.trace_count() != traces {
            return Err(ctx(name, format!("the first shapes were traced again ({} traces)", c.trace_count())));
        }
    }
    Ok(stats)
}

/// The transforms of a compiled function agree with those of the plain one: the gradient of the
/// sum of the first output (when it is a float) with respect to input 0, as `grad(compile(f))`
/// and as `compile(grad(f))`, and `vmap` of the compiled function over a batch of two examples
/// (the inputs, and the inputs flipped) against each example run eagerly. Returns how many
/// comparisons were made.
fn check_transforms(prog: &Arc<Program>, inputs: &[Array]) -> std::result::Result<usize, String> {
    let mut compared = 0;
    if prog.ty[prog.outputs[0]] == Ty::F {
        let p = prog.clone();
        let loss = move |a: &[Array]| -> Outputs { Ok(vec![ops::sum(ops::astype(&p.run(a)?[0], Dtype::F64)?, None, false)?]) };
        let want = grad(loss.clone(), &[0])(inputs).map_err(|e| format!("eager grad failed: {e}"))?;
        let c = compile(loss.clone());
        let got = grad(move |a: &[Array]| c.call(a), &[0])(inputs).map_err(|e| format!("grad(compile(f)) failed: {e}"))?;
        compare_outputs(&got, &want, false).map_err(|e| format!("grad(compile(f)): {e}"))?;
        let got = compile(grad(loss, &[0])).call(inputs).map_err(|e| format!("compile(grad(f)) failed: {e}"))?;
        compare_outputs(&got, &want, false).map_err(|e| format!("compile(grad(f)): {e}"))?;
        compared += 2;
    }
    let flipped: Vec<Array> = inputs.iter().map(|x| ops::flip(x, None).unwrap()).collect();
    let batch: Vec<Array> = inputs.iter().zip(&flipped).map(|(a, b)| ops::stack(&[a.clone(), b.clone()], 0).unwrap()).collect();
    let examples = [prog.run(inputs), prog.run(&flipped)];
    let (Ok(first), Ok(second)) = (&examples[0], &examples[1]) else { return Ok(compared) };
    let want: Vec<Array> = first.iter().zip(second).map(|(a, b)| ops::stack(&[a.clone(), b.clone()], 0).unwrap()).collect();
    let p = prog.clone();
    let c = compile(move |a: &[Array]| p.run(a));
    let (in_axes, out_axes) = (vec![Some(0); inputs.len()], vec![Some(0); want.len()]);
    let got = vmap(move |a: &[Array]| c.call(a), &in_axes, &out_axes)(&batch).map_err(|e| format!("vmap(compile(f)) failed: {e}"))?;
    compare_outputs(&got, &want, false).map_err(|e| format!("vmap(compile(f)): {e}"))?;
    Ok(compared + 1)
}

/// The seeds a random-graph test checks: as many as the variable `count_var` says (`count`
/// unless set) from `KILN_DIFF_SEED_START` (0 unless set); `scripts/fuzz compile` sets them.
fn seeds(count_var: &str, count: u64) -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let start = var("KILN_DIFF_SEED_START", 0);
    start..start + var(count_var, count)
}

#[test]
fn random_graphs_match_eager() {
    let mut failures = Vec::new();
    let seeds = seeds("KILN_DIFF_SEEDS", 200);
    let count = seeds.end - seeds.start;
    let (mut replanned, mut refused, mut kernels, mut reducing, mut multipass, mut transformed, mut device_checked) = (0, 0, 0, 0, 0, 0, 0);
    for seed in seeds {
        // A panic inside compile (an internal assertion) is a failure of this seed, not of the run.
        match std::panic::catch_unwind(|| check_program(seed)) {
            Ok(Ok(stats)) => {
                replanned += stats.replanned;
                refused += stats.refused;
                kernels += stats.kernels;
                reducing += stats.reducing;
                multipass += stats.multipass;
                transformed += stats.transformed;
                device_checked += stats.device_checked;
            }
            Ok(Err(e)) => failures.push(format!("seed {seed}: {e}")),
            Err(panic) => {
                let msg = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                failures.push(format!("seed {seed}: panicked: {}\n  {:?}", msg.unwrap_or_default(), Program::generate(seed)));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {count} random graphs differ from eager:\n{}", failures.len(), failures.join("\n\n"));
    eprintln!("shapeless calls with other shapes: {replanned} re-planned and compared, {refused} refused (fixed-shape ops)");
    eprintln!("fused kernels: {kernels}, with reductions: {reducing}, with several passes: {multipass}");
    // Coverage is judged on samples of at least 200 (a single reproduced seed covers little).
    let per200 = |n: usize| if count < 200 { usize::MAX } else { n * 200 / count as usize };
    assert!(per200(replanned) >= 60, "only {replanned} shapeless re-plans were compared");
    assert!(per200(kernels) >= 200 && per200(reducing) >= 50 && per200(multipass) >= 20, "too little fusion exercised");
    eprintln!("grads and vmaps of compiled functions compared: {transformed}");
    eprintln!("eager results on {} compared with the CPU's: {device_checked}", kiln::default_device());
    assert!(per200(transformed) >= 60, "only {transformed} transforms of compiled functions were compared");
}

/// Native kernel code (`backend::cpu::native`) gives the interpreter's results bit for bit on
/// the random graphs: each is run compiled with both engines on the same inputs, its native code
/// built for one of the instruction-set levels this CPU runs, in turn.
#[test]
fn random_graphs_run_natively_exactly_as_interpreted() {
    use kiln::backend::cpu::native::{levels, native_runs, with_arch, with_engine, Engine};
    let mut all_levels = levels();
    all_levels.push("native");
    let seeds = seeds("KILN_NATIVE_SEEDS", 80);
    let count = seeds.end - seeds.start;
    let before = native_runs();
    let mut failures = Vec::new();
    for seed in seeds {
        let prog = Arc::new(Program::generate(seed));
        let mut rng = Rng::new(seed ^ 0x5EED_D1FF);
        let dims = prog.dims(&mut rng);
        let inputs = prog.make_inputs(&mut rng, &dims);
        let p = prog.clone();
        let level = all_levels[seed as usize % all_levels.len()];
        // The CPU's two engines, on the CPU whatever the default device.
        let (interpreted, native) = kiln::with_device(kiln::Device::cpu(), || {
            with_arch(level, || {
                let c = compile(move |a: &[Array]| p.run(a));
                (with_engine(Engine::Interpreter, || c.call(&inputs)), with_engine(Engine::NativeNow, || c.call(&inputs)))
            })
        })
        .expect("the CPU is always available");
        match (interpreted, native) {
            (Ok(want), Ok(got)) => {
                if let Err(e) = compare_outputs(&got, &want, true) {
                    failures.push(format!("seed {seed} at {level}: {e}\n  dims {dims:?}\n  {prog:?}"));
                }
            }
            (Err(_), Err(_)) => {}
            (a, b) => failures.push(format!("seed {seed}: interpreter {:?}, native {:?}", a.err(), b.err())),
        }
    }
    assert!(failures.is_empty(), "{} of {count} random graphs differ between the engines:\n{}", failures.len(), failures.join("\n\n"));
    let runs = native_runs() - before;
    assert!(runs >= count / 2, "only {runs} of {count} graphs ran native kernels (is a C compiler installed? KILN_CC)");
}

/// The generator covers what it should: every op family and reduction kind appear, and some
/// programs are shapeless-replayable.
#[test]
fn random_graph_generator_covers_the_op_families() {
    let mut seen = std::collections::BTreeSet::new();
    let mut replayable = 0;
    let mut multi = 0;
    for seed in 0..200 {
        let p = Program::generate(seed);
        replayable += usize::from(!p.fixed_shape);
        multi += usize::from(p.outputs.len() > 1);
        for n in &p.nodes {
            let name = format!("{n:?}");
            seen.insert(name.split('(').next().unwrap().to_string());
            if let Node::Red(r, a, kd, _) = n {
                seen.insert(format!("{r:?}/{a:?}/{kd}"));
            }
        }
    }
    for family in ["Un", "Bin", "BinConst", "Cmp", "CmpConst", "Where", "RoundTrip", "ToInt", "ToFloat", "IBin", "IUn", "BBin", "Red", "IRed", "BRed", "Transpose", "Flip", "BroadcastFull"] {
        assert!(seen.contains(family), "no {family} node in 200 programs");
    }
    for r in ["Sum", "Max", "Mean", "LogSumExp", "Var", "Softmax", "Prod"] {
        for a in ["Last", "LastTwo", "First", "All"] {
            assert!(seen.iter().any(|s| s.starts_with(&format!("{r}/{a}/"))), "no {r} over {a}");
        }
    }
    assert!(replayable > 30, "only {replayable} programs use no fixed-shape op");
    assert!(multi > 80, "only {multi} programs return several values");
}

// ---------------------------------------------------------------------------------------------
// 2. Targeted cases
// ---------------------------------------------------------------------------------------------

fn special_constants(a: &[Array]) -> Outputs {
    let x = &a[0]; // positive, finite
    let big = ops::greater(x, 1e4)?; // all false
    Ok(vec![
        ops::add(x, f64::NAN)?,
        ops::multiply(x, f64::INFINITY)?,
        ops::multiply(x, f64::NEG_INFINITY)?,
        ops::maximum(x, f64::NEG_INFINITY)?,
        ops::minimum(x, f64::INFINITY)?,
        ops::maximum(x, f64::NAN)?,
        // +0.0 and -0.0 constants must stay distinct: 1/x tells their sign.
        ops::reciprocal(ops::multiply(x, 0.0)?)?,
        ops::reciprocal(ops::multiply(x, -0.0)?)?,
        ops::reciprocal(ops::where_(&big, x, -0.0)?)?,
        ops::reciprocal(ops::where_(&big, x, 0.0)?)?,
        ops::reciprocal(ops::add(ops::where_(&big, x, -0.0)?, -0.0)?)?,
        ops::where_(&big, f64::INFINITY, f64::NEG_INFINITY)?,
        ops::isnan(ops::add(x, f64::NAN)?)?,
        ops::less(x, f64::INFINITY)?,
        ops::subtract(ops::multiply(x, f64::INFINITY)?, f64::INFINITY)?,
    ])
}

#[test]
fn special_constants_nan_inf_and_signed_zero() {
    for dtype in [Dtype::F32, Dtype::F64, Dtype::F16, Dtype::BF16] {
        let x = arr(&[0.5, 1.0, 2.0, 3.25, 7.0], &[5], dtype);
        let out = check_both(special_constants, &[x], true, &format!("special constants {dtype}"));
        let all = |k: usize, want: f64| {
            for v in f64s(&out[k]) {
                assert!(v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan()), "{dtype} output {k}: {v} != {want}");
            }
        };
        all(0, f64::NAN);
        all(1, f64::INFINITY);
        all(2, f64::NEG_INFINITY);
        all(5, f64::NAN);
        all(6, f64::INFINITY);
        all(7, f64::NEG_INFINITY);
        all(8, f64::NEG_INFINITY);
        all(9, f64::INFINITY);
        all(10, f64::NEG_INFINITY);
        all(11, f64::NEG_INFINITY);
        all(14, f64::NAN);
        assert_eq!(f64s(&out[3]), f64s(&out[4]));
    }
}

fn large_outputs(a: &[Array]) -> Outputs {
    let x = &a[0];
    Ok(vec![ops::add(ops::multiply(x, 3.0)?, 1.0)?, ops::exp(ops::subtract(0.5, x)?)?, ops::greater(x, 0.25)?])
}

/// Outputs past the streaming-store threshold (16 MiB together), of an odd length so that tasks
/// start at unaligned positions, equal eager bit for bit, and so do their values at both ends.
#[test]
fn outputs_written_with_streaming_stores_match_eager() {
    let n = (5 << 20) + 3;
    let values: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0).collect();
    let x = arr(&values, &[n], Dtype::F32);
    let out = check_both(large_outputs, &[x], true, "large outputs");
    let (y, e) = (f32s(&out[0]), f32s(&out[1]));
    for i in [0, 1, 15, n / 2, n - 2, n - 1] {
        let v = values[i] as f32;
        assert_eq!(y[i], v * 3.0 + 1.0, "element {i}");
        assert!((e[i] as f64 - (0.5 - v as f64).exp()).abs() < 1e-6 * (0.5 - v as f64).exp(), "element {i}");
    }
}

fn precise_f64(a: &[Array]) -> Outputs {
    let x = &a[0];
    let y = ops::add(x, 1.0 + 1e-15)?;
    let one = ops::add(x, 1.0)?;
    Ok(vec![
        y.clone(),
        one.clone(),
        ops::subtract(&y, &one)?,
        ops::multiply(x, 1.0 - 2f64.powi(-53))?,
        ops::add(ops::multiply(x, 0.1)?, 0.2)?,
        ops::add(x, 2f64.powi(53) + 2.0)?,
        ops::sum(ops::add(x, 1e-15)?, None, false)?,
    ])
}

#[test]
fn float64_constants_keep_full_precision() {
    let x = arr(&[0.0, 1.0, -1.0, 1e-300, 3.0], &[5], Dtype::F64);
    // On a GPU the eager sum folds in another order than the compiled one (fused reductions run
    // on the host there): bit for bit only on the CPU; the exact constants are asserted below.
    let on_cpu = kiln::default_device().kind == kiln::DeviceKind::Cpu;
    let out = check_both(precise_f64, &[x], on_cpu, "float64 constants");
    assert_eq!(f64s(&out[0])[0], 1.0 + 1e-15);
    assert_eq!(f64s(&out[1])[0], 1.0);
    assert_eq!(f64s(&out[2])[0], (1.0 + 1e-15) - 1.0);
    assert_eq!(f64s(&out[3])[1], 1.0 - 2f64.powi(-53));
}

fn half_chain(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let y = divide(multiply(add(multiply(x, 1.1)?, 0.3)?, exp(tanh(x)?)?)?, add(abs(x)?, 1.0)?)?;
    let z = subtract(sin(&y)?, multiply(square(x)?, 0.25)?)?;
    let m = mean(x, Some(&[-1]), true)?;
    let xc = subtract(x, &m)?;
    let ln = multiply(&xc, rsqrt(add(mean(square(&xc)?, Some(&[-1]), true)?, 1e-3)?)?)?;
    let big = multiply(x, 30000.0)?; // overflows to inf in float16
    let tiny = multiply(x, 1e-6)?; // float16 subnormals
    let back = astype(astype(&z, Dtype::F32)?, x.dtype())?;
    Ok(vec![
        y.clone(),
        z.clone(),
        softmax(&z, Some(&[-1]), false)?,
        softmax(&z, Some(&[-1]), true)?,
        sum(&z, Some(&[-1]), false)?,
        logsumexp(&y, Some(&[-1]), true)?,
        ln.clone(),
        add(&big, &big)?,
        add(&tiny, multiply(&tiny, 3.0)?)?,
        back,
        max(&y, None, false)?,
        greater(&y, &z)?,
        var(&y, Some(&[-1]), true, 0)?,
        astype(multiply(&y, 100.0)?, Dtype::I32)?,
        sigmoid(erf(&ln)?)?,
    ])
}

#[test]
fn half_precision_chains_are_bit_exact() {
    let mut rng = Rng::new(7);
    for dtype in [Dtype::F16, Dtype::BF16] {
        for shape in [vec![4, 33], vec![3, 1500], vec![2, 3, 5]] {
            let n: usize = shape.iter().product();
            let x = arr(&rng.vec(n, -3.0, 3.0), &shape, dtype);
            check_both(half_chain, &[x.clone()], true, &format!("{dtype} chain {shape:?}"));
            let flipped = ops::flip(&x, None).unwrap();
            check_both(half_chain, &[flipped], true, &format!("{dtype} chain {shape:?}, reversed"));
        }
    }
}

fn to_half_fused(a: &[Array]) -> Outputs {
    // add(x, 0) and the multiply make the cast part of a fused chain.
    let f16 = ops::multiply(ops::astype(ops::add(&a[0], 0.0)?, Dtype::F16)?, 1.0)?;
    let bf16 = ops::multiply(ops::astype(ops::add(&a[0], 0.0)?, Dtype::BF16)?, 1.0)?;
    Ok(vec![f16, bf16])
}

/// float64 -> float16/bfloat16 must round once, as eager astype does (a float32 detour rounds
/// twice and lands on ties that round the wrong way).
#[test]
fn fused_float64_to_half_cast_rounds_once() {
    let e = |k: i32| 2f64.powi(k);
    let x = arr(
        &[1.0 + e(-11) + e(-40), -(1.0 + e(-11) + e(-40)), 1.0 + e(-8) + e(-40), 1.0 + e(-11) - e(-40), 3.0],
        &[5],
        Dtype::F64,
    );
    let eager = to_half_fused(&[x.clone()]).unwrap();
    assert_eq!(f64s(&eager[0])[0], 1.0 + e(-10), "eager rounds once");
    assert_eq!(f64s(&eager[1])[2], 1.0 + e(-7), "eager rounds once");
    check_both(to_half_fused, &[x], true, "float64 -> half in a fused kernel");
}

fn u8_chain(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let sub = subtract(x, 10)?; // wraps below 10
    let mul = multiply(x, 3)?; // wraps above 85
    Ok(vec![
        abs(add(x, 1)?)?, // unsigned abs is the identity
        sub.clone(),
        mul.clone(),
        negative(add(x, 0)?)?,
        bitwise_xor(add(multiply(&sub, 7)?, 200)?, 0x5a)?,
        floor_divide(add(x, 3)?, 7)?,
        remainder(add(x, 3)?, 7)?,
        right_shift(left_shift(add(x, 0)?, 3)?, 1)?,
        maximum(minimum(add(x, 1)?, 150)?, 20)?,
        greater(&sub, x)?,
        sum(&mul, Some(&[-1]), true)?,
        max(&sub, None, false)?,
        astype(add(x, 100)?, Dtype::I8)?,
        floor_divide(add(x, 1)?, multiply(x, 0)?)?, // by zero: 0
        square(add(x, 1)?)?,
    ])
}

fn signed_chain(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let inc = add(x, 1)?; // MAX + 1 wraps to MIN
    Ok(vec![
        abs(add(x, 0)?)?, // abs(MIN) wraps to MIN
        inc.clone(),
        negative(add(x, 0)?)?,
        multiply(&inc, &inc)?,
        floor_divide(add(x, 0)?, -3)?,
        remainder(add(x, 0)?, -3)?,
        floor_divide(add(x, 0)?, multiply(x, 0)?)?, // by zero: 0
        remainder(add(x, 0)?, multiply(x, 0)?)?,
        right_shift(add(x, 0)?, 1)?, // arithmetic
        bitwise_and(subtract(x, 1)?, 0x0f)?,
        sign(add(x, 0)?)?,
        sum(&inc, Some(&[-1]), false)?,
        min(multiply(&inc, 3)?, Some(&[-1]), true)?,
        astype(add(x, 0)?, Dtype::U8)?,
        astype(subtract(x, 1)?, Dtype::F32)?,
        where_(less(&inc, x)?, x, &inc)?,
    ])
}

#[test]
fn integer_and_unsigned_chains_wrap_like_eager() {
    let u = [0.0, 1.0, 5.0, 9.0, 10.0, 128.0, 200.0, 255.0];
    check_both(u8_chain, &[arr(&u, &[2, 4], Dtype::U8)], true, "uint8 chain");
    check_both(u8_chain, &[arr(&u, &[2, 4], Dtype::U16)], true, "uint16 chain");
    check_both(u8_chain, &[arr(&u, &[2, 4], Dtype::U32)], true, "uint32 chain");
    check_both(u8_chain, &[arr(&u, &[2, 4], Dtype::U64)], true, "uint64 chain");
    for dtype in [Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64] {
        let (lo, hi) = match dtype {
            Dtype::I8 => (-128.0, 127.0),
            Dtype::I16 => (-32768.0, 32767.0),
            Dtype::I32 => (i32::MIN as f64, i32::MAX as f64),
            _ => (-(2f64.powi(62)), 2f64.powi(62)),
        };
        let v = [lo, lo + 1.0, -7.0, -1.0, 0.0, 1.0, 7.0, hi];
        let x = arr(&v, &[2, 4], dtype);
        check_both(signed_chain, &[x.clone()], true, &format!("{dtype} chain"));
        check_both(signed_chain, &[ops::flip(&x, None).unwrap()], true, &format!("{dtype} chain, reversed"));
    }
    let x = arr(&u, &[2, 4], Dtype::U8);
    let out = check_both(u8_chain, &[x], true, "uint8 chain");
    assert_eq!(f64s(&out[0]), u.iter().map(|v| (v + 1.0) % 256.0).collect::<Vec<_>>());
    assert_eq!(f64s(&out[1])[0], 246.0);
}

fn bool_logic(a: &[Array]) -> Outputs {
    use ops::*;
    let (p, q) = (&a[0], &a[1]);
    let and = logical_and(p, q)?;
    Ok(vec![
        and.clone(),
        logical_or(p, logical_not(q)?)?,
        bitwise_xor(p, q)?,
        equal(p, q)?,
        not_equal(p, q)?,
        where_(p, q, logical_not(q)?)?,
        any(&and, Some(&[-1]), false)?,
        all(logical_or(p, q)?, Some(&[-1]), true)?,
        sum(astype(&and, Dtype::I32)?, Some(&[-1]), false)?,
        sum(logical_or(p, q)?, None, false)?,
        subtract(multiply(astype(p, Dtype::F32)?, 2.0)?, 1.0)?,
        logical_not(logical_and(p, logical_not(p)?)?)?,
        bitwise_invert(logical_or(p, q)?)?,
        bitwise_or(p, q)?,
        greater(p, q)?,
    ])
}

#[test]
fn bool_logic_matches_eager() {
    let mut rng = Rng::new(3);
    let p = arr(&values(&mut rng, 24, Dtype::Bool, false), &[3, 8], Dtype::Bool);
    let q = arr(&values(&mut rng, 24, Dtype::Bool, false), &[3, 8], Dtype::Bool);
    check_both(bool_logic, &[p.clone(), q.clone()], true, "bool logic");
    let qt = ops::transpose(arr(&values(&mut rng, 24, Dtype::Bool, false), &[8, 3], Dtype::Bool), None).unwrap();
    let pb = ops::broadcast_to(arr(&[1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], &[1, 8], Dtype::Bool), &[3, 8]).unwrap();
    check_both(bool_logic, &[pb, qt], true, "bool logic, views");
}

fn strided_mix(a: &[Array]) -> Outputs {
    use ops::*;
    let (rev, step_neg, col, row, scalar, tr) = (&a[0], &a[1], &a[2], &a[3], &a[4], &a[5]);
    let y = add(subtract(add(multiply(rev, 2.0)?, step_neg)?, multiply(col, row)?)?, scalar)?;
    let z = multiply(exp(negative(abs(&y)?)?)?, tr)?;
    Ok(vec![
        y.clone(),
        z.clone(),
        softmax(&z, Some(&[-1]), false)?,
        sum(&z, Some(&[0]), false)?,
        sum(&y, None, false)?,
        equal(&y, max(&y, Some(&[-1]), true)?)?,
        subtract(&z, mean(&z, Some(&[-1]), true)?)?,
        logsumexp(multiply(col, tr)?, Some(&[-1]), true)?,
        multiply(col, 3.0)?, // a broadcast view through a kernel
        add(flip(&y, None)?, &y)?,
    ])
}

#[test]
fn negative_and_zero_stride_inputs() {
    let mut rng = Rng::new(11);
    let (r, c) = (5, 6);
    let rev = ops::flip(arr(&rng.vec(r * c, -2.0, 2.0), &[r, c], Dtype::F32), None).unwrap();
    let big = arr(&rng.vec(r * 2 * c, -2.0, 2.0), &[r, 2 * c], Dtype::F32);
    let step_neg = ops::slice(&big, &[SliceSpec::ALL, SliceSpec { start: None, stop: None, step: -2 }]).unwrap();
    let col = ops::broadcast_to(arr(&rng.vec(r, -2.0, 2.0), &[r, 1], Dtype::F32), &[r, c]).unwrap();
    let row = ops::broadcast_to(arr(&rng.vec(c, -2.0, 2.0), &[1, c], Dtype::F32), &[r, c]).unwrap();
    let scalar = ops::broadcast_to(arr(&[0.75], &[], Dtype::F32), &[r, c]).unwrap();
    let tr = ops::transpose(arr(&rng.vec(r * c, -2.0, 2.0), &[c, r], Dtype::F32), None).unwrap();
    let args = [rev, step_neg, col, row, scalar, tr];
    for a in &args {
        a.eval().unwrap();
        assert_eq!(a.shape(), &[r, c]);
    }
    check_both(strided_mix, &args, false, "negative and zero strides");
    // Reversed and broadcast along a long axis (several tiles per row).
    let n = 2500;
    let long: Vec<Array> = vec![
        ops::flip(arr(&rng.vec(2 * n, -2.0, 2.0), &[2, n], Dtype::F32), None).unwrap(),
        ops::slice(arr(&rng.vec(4 * n, -2.0, 2.0), &[2, 2 * n], Dtype::F32), &[SliceSpec::ALL, SliceSpec { start: None, stop: None, step: -2 }]).unwrap(),
        ops::broadcast_to(arr(&[0.5, -1.0], &[2, 1], Dtype::F32), &[2, n]).unwrap(),
        ops::broadcast_to(arr(&rng.vec(n, -2.0, 2.0), &[1, n], Dtype::F32), &[2, n]).unwrap(),
        ops::broadcast_to(arr(&[0.75], &[], Dtype::F32), &[2, n]).unwrap(),
        ops::flip(arr(&rng.vec(2 * n, -2.0, 2.0), &[2, n], Dtype::F32), Some(&[0])).unwrap(),
    ];
    check_both(strided_mix, &long, false, "negative and zero strides, long rows");
}

fn views_of_intermediates(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let y = sort(x, Some(-1))?; // an intermediate from a non-fused op
    let t = transpose(&y, None)?; // a view of it that outlives the next kernel
    let z = add(multiply(&y, 2.0)?, 1.0)?; // y's last direct reader
    let u = subtract(multiply(&t, 3.0)?, 1.0)?;
    let s = cumsum(x, Some(-1), false, true)?;
    let v = add(&s, flip(&s, None)?)?;
    let w = sort(x, Some(0))?;
    let w2 = add(exp(&w)?, 1.0)?;
    Ok(vec![z, u, v, w.clone(), w2, multiply(&w, 2.0)?])
}

/// Intermediates produced by single ops, read by fused kernels next to views of themselves: an
/// input buffer may only be donated when nobody else can see it.
#[test]
fn views_of_intermediates_are_not_clobbered() {
    let mut rng = Rng::new(5);
    let x = arr(&rng.vec(36, -2.0, 2.0), &[6, 6], Dtype::F32);
    check_both(views_of_intermediates, &[x], true, "views of intermediates");
    let x = arr(&rng.vec(64 * 64, -2.0, 2.0), &[64, 64], Dtype::F32);
    check_both(views_of_intermediates, &[x], true, "views of intermediates, 64x64");
}

fn aliasing_outputs(a: &[Array]) -> Outputs {
    let x = &a[0];
    let y = ops::exp(ops::add(x, 1.0)?)?;
    Ok(vec![x.clone(), y.clone(), y.clone(), x.clone(), ops::sum(&y, Some(&[-1]), true)?, ops::multiply(x, 2.0)?])
}

#[test]
fn outputs_that_repeat_or_are_inputs() {
    let mut rng = Rng::new(9);
    let x = arr(&rng.vec(12, -1.0, 1.0), &[3, 4], Dtype::F32);
    let out = check_both(aliasing_outputs, &[x.clone()], true, "repeated outputs");
    assert_eq!(f64s(&out[0]), f64s(&x));
    assert_eq!(f64s(&out[1]), f64s(&out[2]));
}

fn ten_dim(a: &[Array]) -> Outputs {
    use ops::*;
    let (x, b) = (&a[0], &a[1]);
    let y = add(multiply(sin(x)?, b)?, exp(negative(square(x)?)?)?)?;
    Ok(vec![
        y.clone(),
        sum(&y, Some(&[-1]), true)?,
        softmax(&y, Some(&[-1]), false)?,
        sum(&y, None, false)?,
        max(&y, Some(&[-2, -1]), true)?,
        mean(&y, Some(&[0]), false)?,
        logsumexp(&y, Some(&[-2, -1]), true)?,
        subtract(&y, mean(&y, Some(&[-1]), true)?)?,
    ])
}

#[test]
fn ten_dimensional_input() {
    let mut rng = Rng::new(10);
    let shape = [2usize, 1, 3, 1, 2, 2, 1, 2, 1, 3];
    let n: usize = shape.iter().product();
    let rev: Vec<usize> = shape.iter().rev().copied().collect();
    let x = ops::transpose(arr(&rng.vec(n, -2.0, 2.0), &rev, Dtype::F32), None).unwrap();
    x.eval().unwrap();
    let x = ops::flip(x, Some(&[0, 2, 9])).unwrap();
    let small = [1usize, 1, 3, 1, 1, 2, 1, 1, 1, 3];
    let b = ops::broadcast_to(arr(&rng.vec(18, -2.0, 2.0), &small, Dtype::F32), &shape).unwrap();
    assert_eq!(x.shape(), &shape);
    check_both(ten_dim, &[x.clone(), b.clone()], false, "10-D input");
    let xc = arr(&rng.vec(n, -2.0, 2.0), &shape, Dtype::F32);
    check_both(ten_dim, &[xc, b], false, "10-D contiguous input");
}

fn argmax_mask(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let m = max(x, Some(&[-1]), true)?;
    let mask = equal(x, &m)?;
    let mn = min(x, Some(&[-1]), true)?;
    Ok(vec![
        mask.clone(),
        sum(astype(&mask, Dtype::F32)?, Some(&[-1]), false)?,
        equal(x, min(x, Some(&[-1]), true)?)?,
        where_(&mask, x, 0.0)?,
        equal(x, max(x, None, true)?)?,
        logical_and(greater(x, &mn)?, less(x, &m)?)?,
        multiply(astype(equal(x, &m)?, x.dtype())?, subtract(x, &m)?)?,
    ])
}

/// Two groups that each take a node reading the other: the max group's mask times `x - min`
/// (which lives in the min group), after the min group took `greater(x, min) & less(x, max)`.
fn max_min_masks(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let m = max(x, Some(&[-1]), true)?;
    let mn = min(x, Some(&[-1]), true)?;
    let below_max = less(x, &m)?;
    let inside = logical_and(greater(x, &mn)?, &below_max)?;
    let scaled = multiply(astype(&below_max, x.dtype())?, subtract(x, &mn)?)?;
    Ok(vec![inside, scaled])
}

/// The smallest form: group A = {exp(x), exp(x) - exp(y)}, group B = {exp(y), exp(y) - exp(x)}.
fn crossing_differences(a: &[Array]) -> Outputs {
    let p = ops::exp(&a[0])?; // starts group A
    let q = ops::exp(&a[1])?; // starts group B
    let r = ops::subtract(&q, &p)?; // joins B, which now waits for A
    let t = ops::subtract(&p, &q)?; // joins A, which now waits for B
    Ok(vec![r, t])
}

/// Fusion's acyclicity check looks at the groups a node depended on when it was created, not at
/// what its group depends on after later joins, so two groups can end up waiting for each other.
#[test]
fn fusion_never_creates_cycles_between_groups() {
    let x = arr(&[1.0, 2.0, 3.0, 0.5, 0.25, 4.0], &[2, 3], Dtype::F32);
    let y = arr(&[0.5, -1.0, 2.0, 1.5, 0.0, -2.0], &[2, 3], Dtype::F32);
    let c = compile(crossing_differences);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.call(&[x.clone(), y.clone()])));
    assert!(matches!(got, Ok(Ok(_))), "compile panicked or failed on exp(y) - exp(x), exp(x) - exp(y)");
    check_both(crossing_differences, &[x.clone(), y], true, "crossing differences");
    check_both(max_min_masks, &[x], true, "max and min masks");
}

#[test]
fn max_then_equal_mask() {
    let mut rng = Rng::new(12);
    // Integer-valued floats, so rows have ties; one row holds a NaN.
    let mut v: Vec<f64> = (0..54).map(|_| rng.uniform(0.0, 4.0).floor()).collect();
    v[2 * 9 + 4] = f64::NAN;
    for dtype in [Dtype::F32, Dtype::F64, Dtype::F16, Dtype::I32] {
        let vals: Vec<f64> = if dtype == Dtype::I32 { v.iter().map(|x| if x.is_nan() { 9.0 } else { *x }).collect() } else { v.clone() };
        let x = arr(&vals, &[6, 9], dtype);
        let out = check_both(argmax_mask, &[x.clone()], true, &format!("argmax mask {dtype}"));
        // Every row without NaN has at least one maximum.
        let counts = f64s(&out[1]);
        for (r, c) in counts.iter().enumerate() {
            if dtype == Dtype::I32 || r != 2 {
                assert!(*c >= 1.0, "{dtype}: row {r} has no maximum");
            } else {
                assert_eq!(*c, 0.0, "{dtype}: the NaN row's max is NaN, which equals nothing");
            }
        }
        let t = ops::transpose(arr(&vals, &[9, 6], dtype), None).unwrap();
        check_both(argmax_mask, &[t], true, &format!("argmax mask {dtype}, transposed"));
    }
    // Over the last two axes of a 3-D array.
    let x = arr(&v.iter().map(|x| if x.is_nan() { 1.0 } else { *x }).collect::<Vec<_>>(), &[3, 2, 9], Dtype::F32);
    let f = |a: &[Array]| -> Outputs {
        let m = ops::max(&a[0], Some(&[-2, -1]), true)?;
        Ok(vec![ops::equal(&a[0], &m)?, ops::sum(ops::equal(&a[0], &m)?, Some(&[-2, -1]), false)?])
    };
    let c = compile(f);
    assert_matches_eager(&c, &f, &[x], true, "argmax mask over the last two axes");
}

fn sum_all(a: &[Array]) -> Outputs {
    let mut acc = a[0].clone();
    for x in &a[1..] {
        acc = ops::add(&acc, x)?;
    }
    Ok(vec![acc])
}

/// Branches that start at inputs and meet: exp(-x) + 2x, and a momentum update b m + (1 - b) g
/// (each multiply of an input starts a group of its own).
fn branches_meet(a: &[Array]) -> Outputs {
    let y = ops::add(ops::exp(ops::negative(&a[0])?)?, ops::multiply(&a[0], 2.0)?)?;
    let m = ops::add(ops::multiply(&a[1], 0.9)?, ops::multiply(&a[2], 0.1)?)?;
    Ok(vec![ops::multiply(&y, &m)?, m])
}

/// Two branches that meet, one of which also feeds the other through a sort (not fusible).
fn branches_meet_through_a_sort(a: &[Array]) -> Outputs {
    let doubled = ops::multiply(&a[0], 2.0)?;
    let sorted = ops::exp(ops::sort(&doubled, Some(-1))?)?;
    Ok(vec![ops::add(&sorted, &doubled)?])
}

#[test]
fn branches_that_meet_fuse_into_one_kernel_unless_a_boundary_lies_between() {
    let mut rng = Rng::new(31);
    let args: Vec<Array> = (0..3).map(|_| laid_out(&mut rng, &[16, 70], Lay::Contig, Dtype::F32, false)).collect();
    check_both(branches_meet, &args, true, "branches that meet");
    let report = compile(branches_meet).inspect(&args, &[]).unwrap();
    assert_eq!((report.groups.len(), report.compiled_kernels, report.eager_kernels), (1, 1, 8), "{report}");
    assert_eq!(report.groups[0].members.len(), 8, "{report}");
    // Merging `doubled` into the group of exp(sort(doubled)) would make that group wait for itself.
    check_both(branches_meet_through_a_sort, &args[..1], true, "branches that meet through a sort");
    let report = compile(branches_meet_through_a_sort).inspect(&args[..1], &[]).unwrap();
    assert_eq!((report.groups.len(), report.compiled_kernels), (1, 3), "{report}");
    assert!(report.groups[0].members.iter().all(|m| !m.contains("multiply")), "{report}");
}

fn weighted_softmax_of_all(a: &[Array]) -> Outputs {
    // Every op has the running value as an operand, so the whole chain grows one group (an op of
    // an input alone, such as sin(x_i), would start a group of its own, merged in where it meets
    // the chain).
    let mut acc = ops::sin(&a[0])?;
    for (i, x) in a[1..].iter().enumerate() {
        acc = match i % 3 {
            0 => ops::add(ops::multiply(&acc, 0.5)?, x)?,
            1 => ops::subtract(&acc, x)?,
            _ => ops::maximum(ops::tanh(&acc)?, x)?,
        };
    }
    Ok(vec![ops::softmax(&acc, Some(&[-1]), false)?, acc])
}

#[test]
fn thirty_inputs_in_one_fused_kernel() {
    let mut rng = Rng::new(30);
    let shape = [8usize, 40];
    let lays = [Lay::Contig, Lay::Transposed, Lay::Reversed, Lay::Step(1), Lay::Broadcast, Lay::Offset];
    let inputs: Vec<Array> = (0..30).map(|i| laid_out(&mut rng, &shape, lays[i % lays.len()], Dtype::F32, false)).collect();
    for x in &inputs {
        x.eval().unwrap();
    }
    let out = check_both(sum_all, &inputs, false, "sum of 30 inputs");
    let want: Vec<f64> = {
        let vals: Vec<Vec<f64>> = inputs.iter().map(f64s).collect();
        (0..shape[0] * shape[1]).map(|i| vals.iter().map(|v| v[i]).sum()).collect()
    };
    common::assert_close(&f64s(&out[0]), &want, 1e-5, 1e-5, "sum of 30 inputs against float64");
    let c = compile(sum_all);
    let report = c.inspect(&inputs, &[]).unwrap();
    assert_eq!(report.groups.len(), 1, "{report}");
    assert_eq!(report.compiled_kernels, 1, "{report}");
    assert_eq!(report.eager_kernels, 29, "{report}");
    assert!(report.boundaries.is_empty(), "{report}");
    assert_eq!(report.groups[0].members.len(), 29);
    assert_eq!(report.groups[0].ir.matches("load in").count(), 30, "{}", report.groups[0].ir);

    // 40 inputs feeding a reduction epilogue: still one kernel.
    let inputs: Vec<Array> = (0..40).map(|i| laid_out(&mut rng, &shape, lays[i % lays.len()], Dtype::F32, false)).collect();
    check_both(weighted_softmax_of_all, &inputs, false, "softmax of 40 inputs");
    let c = compile(weighted_softmax_of_all);
    let report = c.inspect(&inputs, &[]).unwrap();
    assert_eq!(report.groups.len(), 1, "{report}");
    assert_eq!(report.compiled_kernels, 1, "{report}");
}

fn row_norms(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let mu = mean(x, Some(&[-1]), true)?;
    let xc = subtract(x, &mu)?;
    let var = mean(square(&xc)?, Some(&[-1]), true)?;
    let ln = multiply(&xc, rsqrt(add(var, 1e-5)?)?)?;
    Ok(vec![
        softmax(x, Some(&[-1]), false)?,
        ln,
        logsumexp(x, Some(&[-1]), false)?,
        logsumexp(x, Some(&[-1]), true)?,
        sum(exp(x)?, Some(&[-1]), true)?,
        ops::var(x, Some(&[-1]), true, 0)?,
    ])
}

#[test]
fn softmax_layernorm_logsumexp_over_rows_of_many_lengths() {
    let mut rng = Rng::new(21);
    for &(rows, n) in &[(5usize, 1usize), (5, 7), (4, 4096), (3, 100_000), (1, 100_000)] {
        let x = arr(&rng.vec(rows * n, -4.0, 4.0), &[rows, n], Dtype::F32);
        let out = check_both(row_norms, &[x.clone()], false, &format!("rows {rows} x {n}"));
        // Softmax rows sum to one.
        let s = f64s(&out[0]);
        for r in 0..rows {
            let total: f64 = s[r * n..(r + 1) * n].iter().sum();
            assert!((total - 1.0).abs() < 1e-3, "rows {rows} x {n}: softmax row {r} sums to {total}");
        }
        let flipped = ops::flip(&x, Some(&[-1])).unwrap();
        check_both(row_norms, &[flipped], false, &format!("rows {rows} x {n}, reversed"));
    }
}

fn single_pass_rows(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let e = exp(sin(x)?)?;
    let s = sum(&e, Some(&[-1]), true)?;
    Ok(vec![
        log(&s)?,
        e.clone(),
        max(multiply(x, 2.0)?, Some(&[-1]), true)?,
        min(cos(x)?, Some(&[-1]), false)?,
        prod(add(multiply(x, 1e-6)?, 1.0)?, Some(&[-1]), true)?,
        sum(greater(x, 0.0)?, Some(&[-1]), true)?,
    ])
}

/// Rows long enough (>= 2^17) and few enough to be split across threads: the pieces' partial
/// sums, maxima and products must combine into the eager result.
#[test]
fn long_rows_split_across_threads() {
    let mut rng = Rng::new(22);
    for &(rows, n) in &[(1usize, 1usize << 18), (1, 300_001), (2, 140_000)] {
        let x = arr(&rng.vec(rows * n, -3.0, 3.0), &[rows, n], Dtype::F32);
        check_both(single_pass_rows, &[x.clone()], false, &format!("single pass rows {rows} x {n}"));
        check_both(row_norms, &[x.clone()], false, &format!("rows {rows} x {n}"));
        let c = compile(single_pass_rows);
        // The CPU's plan (on a GPU such rows are not fused: the reduction op splits them itself).
        let report = kiln::with_device(kiln::Device::cpu(), || c.inspect(&[x], &[])).unwrap().unwrap();
        assert!(report.groups.iter().any(|g| g.ir.contains("passes=1") && g.ir.contains("reduced_axes=1")), "{report}");
    }
    // The total of one long vector (all axes).
    let x = arr(&rng.vec(500_000, -1.0, 1.0), &[500_000], Dtype::F32);
    let f = |a: &[Array]| -> Outputs { Ok(vec![ops::sum(ops::exp(&a[0])?, None, false)?, ops::max(ops::sin(&a[0])?, None, false)?]) };
    let c = compile(f);
    assert_matches_eager(&c, &f, &[x], false, "sum over one long axis");
}

fn empty_safe(a: &[Array]) -> Outputs {
    use ops::*;
    let x = &a[0];
    let mu = mean(x, Some(&[-1]), true)?;
    let xc = subtract(x, &mu)?;
    Ok(vec![
        softmax(x, Some(&[-1]), false)?,
        multiply(&xc, rsqrt(add(mean(square(&xc)?, Some(&[-1]), true)?, 1e-5)?)?)?,
        logsumexp(x, Some(&[-1]), true)?,
        sum(exp(x)?, Some(&[-1]), true)?,
        add(multiply(exp(x)?, 2.0)?, 1.0)?,
        sum(x, None, false)?,
        mu,
    ])
}

fn max_last(a: &[Array]) -> Outputs {
    Ok(vec![ops::max(ops::exp(&a[0])?, Some(&[-1]), true)?])
}

#[test]
fn empty_arrays() {
    for shape in [[0usize, 5], [5, 0]] {
        let x = arr(&[], &shape, Dtype::F32);
        check_both(empty_safe, &[x.clone()], true, &format!("empty {shape:?}"));
        let e = max_last(&[x.clone()]);
        let c = compile(max_last);
        let got = c.call(&[x.clone()]);
        assert_eq!(got.is_err(), e.is_err(), "max over {shape:?}: compiled and eager must agree on failing");
        if let (Ok(g), Ok(w)) = (got, e) {
            compare_outputs(&g, &w, true).unwrap();
        }
    }
    // A shapeless function traced on non-empty shapes traces again for empty ones (what a trace
    // makes of empty arrays holds only for arrays empty in the same axes), and matches eager.
    for shape in [[0usize, 3], [5, 0], [0, 0]] {
        let c = compile_with(empty_safe, CompileOptions::new().shapeless(true));
        let x = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Dtype::F32);
        c.call(&[x]).unwrap();
        let y = arr(&[], &shape, Dtype::F32);
        assert_matches_eager(&c, &empty_safe, &[y], true, &format!("shapeless, then empty {shape:?}"));
        assert_eq!(c.trace_count(), 2);
    }
}

fn broadcast_to_first(a: &[Array]) -> Outputs {
    // The target shape comes from input 0; the broadcast operand (input 1) keeps its shape.
    Ok(vec![ops::add(ops::broadcast_to(&a[1], a[0].shape())?, 1.0)?])
}

/// In a shapeless function, broadcast_to a shape read from another input: a call with a new
/// shape for that input must give the new shape (or the fixed-shape error), never the traced one.
#[test]
fn shapeless_broadcast_to_a_shape_taken_from_another_input() {
    let c = compile_with(broadcast_to_first, CompileOptions::new().shapeless(true));
    let s = arr(&[2.0], &[], Dtype::F32);
    c.call(&[arr(&[0.0; 6], &[2, 3], Dtype::F32), s.clone()]).unwrap();
    let args = [arr(&[0.0; 20], &[4, 5], Dtype::F32), s];
    let want = broadcast_to_first(&args).unwrap();
    match c.call(&args) {
        Err(e) => assert!(e.to_string().contains("shapeless"), "{e}"),
        Ok(got) => compare_outputs(&got, &want, true).unwrap(),
    }
}

/// max over an axis that a shapeless call makes empty: eager raises "zero-size array to reduction
/// operation max which has no identity"; compiled must not return the identity instead (the call
/// empties an axis, so it traces again and raises eager's error).
#[test]
fn shapeless_max_over_axis_that_became_empty() {
    let c = compile_with(max_last, CompileOptions::new().shapeless(true));
    c.call(&[arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Dtype::F32)]).unwrap();
    let y = arr(&[], &[2, 0], Dtype::F32);
    assert!(max_last(&[y.clone()]).is_err(), "eager raises");
    let got = c.call(&[y.clone()]);
    let e = got.map(|v| f64s(&v[0])).expect_err("compiled max over an empty axis");
    let text = e.to_string();
    assert!(text.contains("max") && text.contains("zero-size"), "{text}");

    let argmax_last = |a: &[Array]| -> Outputs { Ok(vec![ops::argmax(&a[0], Some(-1), false)?]) };
    let c = compile_with(argmax_last, CompileOptions::new().shapeless(true));
    c.call(&[arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Dtype::F32)]).unwrap();
    assert!(argmax_last(&[y.clone()]).is_err(), "eager raises");
    let e = c.call(&[y]).map(|v| f64s(&v[0])).expect_err("compiled argmax over an empty axis");
    assert!(e.to_string().contains("argmax") && e.to_string().contains("empty"), "{e}");
}

fn logsumexp_then_mean(a: &[Array]) -> Outputs {
    let l = ops::logsumexp(&a[0], Some(&[-1]), true)?;
    Ok(vec![ops::mean(l, None, true)?])
}

/// A shapeless trace made at a shape with an empty axis is not replayed at non-empty shapes (nor
/// the other way round): over nothing, reductions give constants (logsumexp is -inf), which the
/// trace may fold. Found by the random graphs with empty axes (seed 107 of the generator).
#[test]
fn shapeless_traces_of_empty_arrays_serve_only_empty_calls() {
    let c = compile_with(logsumexp_then_mean, CompileOptions::new().shapeless(true));
    let empty = arr(&[], &[1, 3, 0], Dtype::F32);
    assert_eq!(f64s(&c.call(&[empty.clone()]).unwrap()[0]), f64s(&logsumexp_then_mean(&[empty.clone()]).unwrap()[0]));
    let values: Vec<f64> = (0..18).map(|i| (i as f64 * 0.37).sin()).collect();
    let full = arr(&values, &[3, 1, 6], Dtype::F32);
    let want = f64s(&logsumexp_then_mean(&[full.clone()]).unwrap()[0]);
    assert!(want[0].is_finite());
    assert_eq!(f64s(&c.call(&[full.clone()]).unwrap()[0]), want, "a trace of an empty array replayed at [3, 1, 6]");
    assert_eq!(c.trace_count(), 2);
    // Back to empty arrays of another size: the first trace serves them.
    let empty2 = arr(&[], &[2, 5, 0], Dtype::F32);
    assert_eq!(f64s(&c.call(&[empty2.clone()]).unwrap()[0]), f64s(&logsumexp_then_mean(&[empty2]).unwrap()[0]));
    assert_eq!(c.trace_count(), 2);
}

// ---------------------------------------------------------------------------------------------
// 3. CSE at scale
// ---------------------------------------------------------------------------------------------

const CHAIN: usize = 40_000;

fn long_chain(a: &[Array]) -> Outputs {
    let mut x = a[0].clone();
    for _ in 0..CHAIN {
        x = ops::add(&x, 1.0)?;
    }
    Ok(vec![x])
}

fn many_terms(a: &[Array]) -> Outputs {
    let x = &a[0];
    let mut acc = ops::multiply(x, 2.0)?;
    for _ in 1..10_000 {
        acc = ops::add(&acc, ops::multiply(x, 2.0)?)?;
    }
    Ok(vec![acc])
}

fn count_lines(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// The bound that tells linear from quadratic time in the tests of long chains: 5 s, or 20 s
/// under a sanitizer (`KILN_SANITIZER`), whose checks slow every memory access.
fn linear_time_bound() -> Duration {
    Duration::from_secs(if std::env::var_os("KILN_SANITIZER").is_some() { 20 } else { 5 })
}

#[test]
fn forty_thousand_uses_of_one_constant() {
    // The bounds are the compile pipeline's, so the kernel runs on the CPU: on a GPU the first
    // call also builds one CUDA kernel of 40,000 instructions with NVRTC (11 s on an H100).
    kiln::with_device(kiln::Device::cpu(), forty_thousand_uses_on_the_current_device).unwrap();
}

fn forty_thousand_uses_on_the_current_device() {
    let x = arr(&[0.0, 1.0, -2.5, 100.0], &[4], Dtype::F32);
    let c = compile(long_chain);
    let t = Instant::now();
    let got = c.call(&[x.clone()]).unwrap();
    let first = t.elapsed();
    assert!(first < linear_time_bound(), "first call (trace, simplify, fuse, run) took {first:?}");
    assert_eq!(f32s(&got[0]), vec![40000.0, 40001.0, 39997.5, 40100.0]);
    let want = long_chain(&[x.clone()]).unwrap();
    compare_outputs(&got, &want, true).unwrap();
    let t = Instant::now();
    c.call(&[x.clone()]).unwrap();
    assert!(t.elapsed() < linear_time_bound(), "replay took {:?}", t.elapsed());
    assert_eq!(c.trace_count(), 1);
    let report = c.inspect(&[x.clone()], &[]).unwrap();
    assert!(count_lines(&report.graph_before, "constant") >= CHAIN, "the trace holds one constant per use");
    assert_eq!(count_lines(&report.graph_after, "constant"), 1, "the constant is merged");
    assert_eq!(count_lines(&report.graph_after, "add("), CHAIN);
    assert_eq!(report.groups.len(), 1);
    assert_eq!(report.compiled_kernels, 1);
    assert_eq!(report.groups[0].ir.matches("const ").count(), 1);

    // Many identical terms: the constant and the product merge, the sum stays.
    let c = compile(many_terms);
    let t = Instant::now();
    let got = c.call(&[x.clone()]).unwrap();
    assert!(t.elapsed() < linear_time_bound(), "first call took {:?}", t.elapsed());
    assert_eq!(f32s(&got[0]), vec![0.0, 20000.0, -50000.0, 2_000_000.0]);
    compare_outputs(&got, &many_terms(&[x.clone()]).unwrap(), true).unwrap();
    let report = c.inspect(&[x], &[]).unwrap();
    assert_eq!(count_lines(&report.graph_after, "constant"), 1, "the constant is merged");
    assert_eq!(count_lines(&report.graph_after, "multiply("), 1, "x * 2 is computed once");
    assert_eq!(count_lines(&report.graph_after, "add("), 9_999);
}

// ---------------------------------------------------------------------------------------------
// 4. CSE correctness
// ---------------------------------------------------------------------------------------------

fn parameter_variants(a: &[Array]) -> Outputs {
    use ops::*;
    let (x, y) = (&a[0], &a[1]);
    Ok(vec![
        log(x)?,
        log2(x)?,
        log10(x)?,
        log1p(x)?,
        sum(x, Some(&[0]), false)?,
        sum(x, Some(&[1]), false)?,
        mean(x, Some(&[0]), false)?,
        mean(x, Some(&[1]), false)?,
        max(x, Some(&[0]), false)?,
        min(x, Some(&[0]), false)?,
        var(x, Some(&[1]), false, 0)?,
        var(x, Some(&[1]), false, 1)?,
        astype(astype(multiply(x, 1.001)?, Dtype::F16)?, Dtype::F32)?,
        astype(astype(multiply(x, 1.001)?, Dtype::BF16)?, Dtype::F32)?,
        subtract(x, y)?,
        subtract(y, x)?,
        divide(x, y)?,
        divide(y, x)?,
        where_(greater(x, 1.0)?, x, y)?,
        where_(greater(x, 1.0)?, y, x)?,
        transpose(add(x, 1.0)?, None)?,
        add(x, 1.0)?,
        sum(x, Some(&[0]), true)?,
        sum(exp(x)?, Some(&[1]), true)?,
        sum(exp(x)?, Some(&[0]), true)?,
        power(x, 2.0)?,
        power(x, 3.0)?,
    ])
}

#[test]
fn cse_keeps_ops_with_different_parameters_apart() {
    let mut rng = Rng::new(40);
    let x = arr(&rng.vec(16, 0.5, 3.0), &[4, 4], Dtype::F32);
    let y = arr(&rng.vec(16, 0.5, 3.0), &[4, 4], Dtype::F32);
    let out = check_both(parameter_variants, &[x.clone(), y.clone()], true, "parameter variants");
    for (a, b, what) in [
        (0, 1, "log vs log2"),
        (1, 2, "log2 vs log10"),
        (0, 3, "log vs log1p"),
        (4, 5, "sum over axis 0 vs 1"),
        (6, 7, "mean over axis 0 vs 1"),
        (8, 9, "max vs min"),
        (10, 11, "var ddof 0 vs 1"),
        (12, 13, "float16 vs bfloat16"),
        (14, 15, "x - y vs y - x"),
        (16, 17, "x / y vs y / x"),
        (18, 19, "where operand order"),
        (20, 21, "transpose vs not"),
        (25, 26, "power 2 vs 3"),
    ] {
        assert_ne!(f64s(&out[a]), f64s(&out[b]), "{what} were merged");
    }
    // And equal expressions are merged.
    let f = |a: &[Array]| -> Outputs {
        let x = &a[0];
        Ok(vec![ops::add(ops::exp(x)?, 1.0)?, ops::add(ops::exp(x)?, 1.0)?, ops::log(x)?, ops::log2(x)?])
    };
    let c = compile(f);
    assert_matches_eager(&c, &f, &[x.clone()], true, "merged expressions");
    let report = c.inspect(&[x], &[]).unwrap();
    assert_eq!(count_lines(&report.graph_after, "= exp("), 1, "{report}");
    assert_eq!(count_lines(&report.graph_after, "= add("), 1, "{report}");
    assert_eq!(count_lines(&report.graph_after, "= log("), 1, "{report}");
    assert_eq!(count_lines(&report.graph_after, "= log2("), 1, "{report}");
}

fn keys_inside(a: &[Array]) -> Outputs {
    let x = &a[0];
    let b1 = random::bits(&[16], 4, Some(&random::key(1)))?;
    let b2 = random::bits(&[16], 4, Some(&random::key(2)))?;
    let b3 = random::bits(&[16], 4, Some(&random::key(1)))?;
    let u1 = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(&random::key(1)))?;
    let u2 = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(&random::key(2)))?;
    Ok(vec![b1, b2, b3, ops::add(x, &u1)?, ops::add(x, &u2)?])
}

fn keys_as_inputs(a: &[Array]) -> Outputs {
    let (x, k1, k2) = (&a[0], &a[1], &a[2]);
    let b1 = random::bits(&[16], 4, Some(k1))?;
    let b2 = random::bits(&[16], 4, Some(k2))?;
    let b3 = random::bits(&[16], 4, Some(k1))?;
    let narrow = random::bits(&[16], 1, Some(k1))?;
    let keys = random::split(k1, 2)?;
    let s0 = ops::reshape(ops::slice_axis(&keys, 0, 0, 1)?, &[2])?;
    let s1 = ops::reshape(ops::slice_axis(&keys, 0, 1, 2)?, &[2])?;
    let c0 = random::bits(&[16], 4, Some(&s0))?;
    let c1 = random::bits(&[16], 4, Some(&s1))?;
    let u1 = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(k1))?;
    let u2 = random::uniform(0.0, 1.0, &[16], Dtype::F32, Some(k2))?;
    Ok(vec![b1, b2, b3, narrow, c0, c1, ops::add(x, &u1)?, ops::add(x, &u2)?])
}

#[test]
fn cse_keeps_random_draws_with_different_keys_apart() {
    let x = arr(&[0.0; 16], &[16], Dtype::F32);
    let out = check_both(keys_inside, &[x.clone()], true, "keys made inside");
    assert_ne!(f64s(&out[0]), f64s(&out[1]), "draws with keys 1 and 2 were merged");
    assert_eq!(f64s(&out[0]), f64s(&out[2]), "equal keys draw equal bits");
    assert_ne!(f64s(&out[3]), f64s(&out[4]), "uniform draws with keys 1 and 2 were merged");

    let (k1, k2) = (random::key(1), random::key(2));
    let out = check_both(keys_as_inputs, &[x.clone(), k1.clone(), k2.clone()], true, "keys as inputs");
    assert_ne!(f64s(&out[0]), f64s(&out[1]), "draws with keys 1 and 2 were merged");
    assert_eq!(f64s(&out[0]), f64s(&out[2]));
    assert_ne!(f64s(&out[4]), f64s(&out[5]), "draws with split keys were merged");
    assert_ne!(f64s(&out[6]), f64s(&out[7]), "uniform draws with keys 1 and 2 were merged");
    // Other keys on the same trace give other bits, as eager.
    let c = compile(keys_as_inputs);
    let (k3, k4) = (random::key(3), random::key(4));
    assert_matches_eager(&c, &keys_as_inputs, &[x.clone(), k1, k2], true, "keys 1, 2");
    assert_matches_eager(&c, &keys_as_inputs, &[x.clone(), k3.clone(), k4], true, "keys 3, 4");
    assert_matches_eager(&c, &keys_as_inputs, &[x, k3.clone(), k3], true, "keys 3, 3");
    assert_eq!(c.trace_count(), 1);
}

/// The shrinker keeps what makes a program fail and drops the rest: with "fails while it computes
/// a sine that reaches an output" as the failure, random programs shrink to the sine and the
/// nodes it needs, and the reproducer names it.
#[test]
fn shrinking_keeps_the_failing_part_of_random_programs() {
    let has_sine = |p: &Program| p.nodes.iter().any(|n| matches!(n, Node::Un(Un::Sin, _)));
    let mut shrunk = 0;
    for seed in 0..400 {
        let prog = Program::generate(seed);
        let fails = |p: &Program| has_sine(&p.without_dead_nodes());
        if !fails(&prog) {
            continue;
        }
        let small = shrink(&prog, &fails);
        assert!(fails(&small), "seed {seed}: the shrunk program no longer fails");
        let computed = small.nodes.len() - small.inputs.len();
        assert!(computed <= 4 && small.outputs.len() == 1, "seed {seed}: {computed} nodes left: {small:?}");
        assert!(small.to_rust(seed, &[2], &[3], false).contains("Node::Un(Un::Sin"));
        shrunk += 1;
    }
    assert!(shrunk >= 20, "only {shrunk} programs had a sine");
}
