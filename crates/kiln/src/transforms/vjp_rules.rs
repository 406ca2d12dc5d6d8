//! Reverse-mode rules: for each op, the cotangents of its inputs given its output's cotangent.
//! Elementwise ops share their partial derivatives with forward mode ([`unary_partial`],
//! [`binary_partials`]). Results may still be broadcast or of a wider dtype: the walk sums them
//! down to each input's shape and casts them ([`unbroadcast`]).
//!
//! Complex inputs follow mlx's (and PyTorch's) convention: the cotangent of a holomorphic op with
//! derivative f'(z) is `g · conj(f'(z))`, so partials are conjugated in reverse mode only
//! ([`Partial::times_conj`]); the ops that are not holomorphic (real, imag, conj, abs) have
//! their own rules ([`complex_unary_vjp`]).

use super::autodiff::{backward, tracers};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::ops::shape::reshape_to;
use crate::ops::{self, cast};
use crate::primitive::{BinaryOp, FftKind, Op, ReduceOp, ScanOp, ScatterOp, UnaryOp};
use std::f64::consts::{LN_10, LN_2, PI};

/// A partial derivative of an elementwise op: zero, ±1, or an array (broadcasting to the output).
pub(crate) enum Partial {
    Zero,
    One,
    MinusOne,
    Of(Array),
}

impl Partial {
    /// `d * v`, or `None` when the partial is zero.
    pub(crate) fn times(&self, v: &Array) -> Result<Option<Array>> {
        Ok(match self {
            Partial::Zero => None,
            Partial::One => Some(v.clone()),
            Partial::MinusOne => Some(ops::negative(v)?),
            Partial::Of(d) => Some(ops::multiply(v, d)?),
        })
    }

    /// `conj(d) * v`: the reverse-mode product (the conjugate is the partial itself when real).
    pub(crate) fn times_conj(&self, v: &Array) -> Result<Option<Array>> {
        match self {
            Partial::Of(d) if d.dtype().is_complex() => Partial::Of(ops::conjugate(d)?).times(v),
            _ => self.times(v),
        }
    }
}

/// Whether `op` on complex64 input is not holomorphic (its rules are [`complex_unary_vjp`] and
/// the jvp's counterpart).
pub(crate) fn non_holomorphic(op: UnaryOp, x: &Array) -> bool {
    x.dtype().is_complex() && matches!(op, UnaryOp::Real | UnaryOp::Imag | UnaryOp::Conjugate | UnaryOp::Abs)
}

/// The cotangent of complex input `x` of a [`non_holomorphic`] op, given the output's `g`:
/// real(z) sends g back as g + 0i, imag(z) as g·i, conj(z) as conj(g), |z| as g·z/|z|.
fn complex_unary_vjp(op: UnaryOp, x: &Array, g: &Array) -> Result<Array> {
    let g_complex = ops::astype(g, Dtype::C64)?;
    match op {
        UnaryOp::Real => Ok(g_complex),
        UnaryOp::Imag => ops::multiply(g_complex, Array::scalar(crate::Complex64::new(0.0, 1.0))),
        UnaryOp::Conjugate => ops::conjugate(g),
        _ => ops::multiply(g_complex, ops::sign(x)?),
    }
}

/// `∂y/∂x` of a unary op with input `x` and output `y`.
pub(crate) fn unary_partial(op: UnaryOp, x: &Array, y: &Array) -> Result<Partial> {
    use ops::{add, cos, divide, exp, multiply, negative, reciprocal, rsqrt, sign, sin, square, subtract};
    use UnaryOp::*;
    let of = |a: Result<Array>| a.map(Partial::Of);
    match op {
        Abs => of(sign(x)),
        Negative => Ok(Partial::MinusOne),
        Exp => Ok(Partial::Of(y.clone())),
        Expm1 => of(add(y, 1.0)),
        Log => of(reciprocal(x)),
        Log1p => of(reciprocal(add(x, 1.0)?)),
        Log2 => of(reciprocal(multiply(x, LN_2)?)),
        Log10 => of(reciprocal(multiply(x, LN_10)?)),
        Sqrt => of(divide(0.5, y)),
        Rsqrt => of(multiply(divide(y, x)?, -0.5)),
        Square => of(multiply(x, 2.0)),
        Reciprocal => of(negative(square(y)?)),
        Sin => of(cos(x)),
        Cos => of(negative(sin(x)?)),
        Tan => of(add(square(y)?, 1.0)),
        ArcSin => of(rsqrt(subtract(1.0, square(x)?)?)),
        ArcCos => of(negative(rsqrt(subtract(1.0, square(x)?)?)?)),
        ArcTan => of(reciprocal(add(square(x)?, 1.0)?)),
        Sinh => of(ops::cosh(x)),
        Cosh => of(ops::sinh(x)),
        Tanh => of(subtract(1.0, square(y)?)),
        ArcSinh => of(rsqrt(add(square(x)?, 1.0)?)),
        ArcCosh => of(rsqrt(subtract(square(x)?, 1.0)?)),
        ArcTanh => of(reciprocal(subtract(1.0, square(x)?)?)),
        Erf => of(multiply(exp(negative(square(x)?)?)?, 2.0 / PI.sqrt())),
        ErfInv => of(multiply(exp(square(y)?)?, PI.sqrt() / 2.0)),
        Sigmoid => of(multiply(y, subtract(1.0, y)?)),
        // On real inputs (complex ones have their own rules, see `non_holomorphic`).
        Real | Conjugate => Ok(Partial::One),
        // Piecewise constant, or boolean/integer results: no gradient.
        Imag | Sign | Floor | Ceil | Round | LogicalNot | IsNan | IsInf | IsPosInf | IsNegInf | IsFinite
        | BitwiseInvert => Ok(Partial::Zero),
    }
}

/// `(∂y/∂a, ∂y/∂b)` of a binary op with inputs `a`, `b` and output `y`. Ties of maximum and
/// minimum send the whole gradient to `a`, as mlx does.
pub(crate) fn binary_partials(op: BinaryOp, a: &Array, b: &Array, y: &Array) -> Result<(Partial, Partial)> {
    use ops::{add, divide, exp, floor_divide, log, multiply, negative, square, subtract, where_};
    use BinaryOp::*;
    let mask = |m: Result<Array>| -> Result<Partial> { Ok(Partial::Of(cast(&m?, y.dtype())?)) };
    Ok(match op {
        Add => (Partial::One, Partial::One),
        Subtract => (Partial::One, Partial::MinusOne),
        Multiply => (Partial::Of(b.clone()), Partial::Of(a.clone())),
        Divide => (Partial::Of(ops::reciprocal(b)?), Partial::Of(negative(divide(y, b)?)?)),
        Remainder => (Partial::One, Partial::Of(negative(floor_divide(a, b)?)?)),
        Power => {
            // b * a^(b-1), with 0 where b == 0 (x^0 is constant, even at x = 0).
            let da = where_(ops::equal(b, 0.0)?, 0.0, multiply(b, ops::power(a, subtract(b, 1.0)?)?)?)?;
            // y * log(a), with 0 where a == 0 (there y is 0 or inf and log(a) is -inf).
            let zero = ops::equal(a, 0.0)?;
            let safe = where_(&zero, 1.0, a)?;
            let db = where_(&zero, 0.0, multiply(y, log(&safe)?)?)?;
            (Partial::Of(da), Partial::Of(db))
        }
        Maximum => (mask(ops::greater_equal(a, b))?, mask(ops::less(a, b))?),
        Minimum => (mask(ops::less_equal(a, b))?, mask(ops::greater(a, b))?),
        ArcTan2 => {
            let r = add(square(a)?, square(b)?)?;
            (Partial::Of(divide(b, &r)?), Partial::Of(negative(divide(a, &r)?)?))
        }
        LogAddExp => {
            // e^(a-y) and e^(b-y); where both inputs are -inf (y too) the two share equally.
            let both_neg_inf = ops::isneginf(y)?;
            let share = |v: &Array| where_(&both_neg_inf, 0.5, exp(subtract(v, y)?)?);
            (Partial::Of(share(a)?), Partial::Of(share(b)?))
        }
        FloorDivide | Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd
        | LogicalOr | BitwiseAnd | BitwiseOr | BitwiseXor | LeftShift | RightShift => {
            (Partial::Zero, Partial::Zero)
        }
    })
}

/// The cotangent of the input `x` of a Fourier transform over `axes`, given the output's `g`: the
/// adjoint (conjugate transpose) of the transform. The DFT matrix F of size n has F^H = n·F⁻¹,
/// so the forward transform's adjoint is n times the inverse and the inverse's is the forward
/// one over n; the real forward transform's is the real part of that for `g` padded back to the
/// real length; the real inverse's is the real forward transform of `g` over n with the entries
/// that stand for two conjugate terms (all but the first and, for even n, the last) doubled.
fn fft_vjp(axes: &[usize], kind: FftKind, x: &Array, g: &Array) -> Result<Array> {
    let transform = |kind: FftKind, v: Array| Array::from_op(Op::Fft { axes: axes.to_vec(), kind }, vec![v]);
    let last = *axes.last().expect("an fft has at least one axis");
    let others: f64 = axes[..axes.len() - 1].iter().map(|&a| x.shape()[a] as f64).product();
    match kind {
        FftKind::Forward | FftKind::Inverse => {
            let n: f64 = axes.iter().map(|&a| x.shape()[a] as f64).product();
            let g = ops::astype(g, Dtype::C64)?;
            if kind == FftKind::Forward {
                ops::multiply(transform(FftKind::Inverse, g)?, n)
            } else {
                ops::divide(transform(FftKind::Forward, g)?, n)
            }
        }
        FftKind::RealForward => {
            let n = x.shape()[last];
            let mut widths = vec![(0, 0); g.ndim()];
            widths[last] = (0, n - g.shape()[last]);
            let padded = ops::pad(&ops::astype(g, Dtype::C64)?, &widths, 0.0)?;
            ops::real(ops::multiply(transform(FftKind::Inverse, padded)?, others * n as f64)?)
        }
        FftKind::RealInverse(n) => {
            let m = n / 2 + 1;
            let doubled = |k: usize| {
                if k == 0 || (n % 2 == 0 && k == m - 1) {
                    1.0
                } else {
                    2.0
                }
            };
            let mut shape = vec![1; x.ndim()];
            shape[last] = m;
            let mask = Array::from_slice(&(0..m).map(|k| (doubled(k) / (others * n as f64)) as f32).collect::<Vec<_>>(), &shape)?;
            ops::multiply(transform(FftKind::RealForward, ops::astype(g, Dtype::F32)?)?, mask)
        }
    }
}

/// `x` summed down to `like`'s shape (the cotangent of a broadcast of `like`). While compile
/// traces it is an [`Op::SumLike`] node, whose summed axes follow the shapes of a shapeless
/// replay; otherwise a sum over the axes the broadcast added or stretched.
pub(crate) fn unbroadcast(x: Array, like: &Array) -> Result<Array> {
    let shape = like.shape();
    if x.ndim() < shape.len() {
        return Err(crate::error::Error::shape(
            "vjp",
            format!(
                "a cotangent of shape {} cannot be summed down to shape {}",
                crate::shape::fmt_shape(x.shape()),
                crate::shape::fmt_shape(shape)
            ),
        ));
    }
    if crate::transforms::compile::is_compile_tracing() {
        return Array::from_op(Op::SumLike, vec![x, like.clone()]);
    }
    if x.shape() == shape {
        return Ok(x);
    }
    let axes = crate::shape::unbroadcast_axes(x.shape(), shape);
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    reshape_to(&ops::sum(&x, Some(&axes), true)?, shape.into())
}

/// The cotangents of `op`'s inputs given the cotangent `g` of its output `y`; `None` where an
/// input gets no gradient.
pub(crate) fn vjp(op: &Op, inputs: &[Array], y: &Array, g: &Array) -> Result<Vec<Option<Array>>> {
    let x = &inputs[0];
    let one = |c: Result<Array>| c.map(|c| vec![Some(c)]);
    match op {
        Op::Unary(u) if non_holomorphic(*u, x) => one(complex_unary_vjp(*u, x, g)),
        Op::Unary(u) => Ok(vec![unary_partial(*u, x, y)?.times_conj(g)?]),
        Op::Binary(b) => {
            let (da, db) = binary_partials(*b, x, &inputs[1], y)?;
            Ok(vec![da.times_conj(g)?, db.times_conj(g)?])
        }
        Op::Select => {
            let c = &inputs[0];
            Ok(vec![None, Some(ops::where_(c, g, 0.0)?), Some(ops::where_(c, 0.0, g)?)])
        }
        // A float value cast to an integer or bool carries no gradient back; an integer one
        // (an integer argument, as mlx differentiates them) does.
        Op::AsType(d) => Ok(vec![(x.dtype().is_integer() || d.is_inexact()).then(|| g.clone())]),
        Op::Reshape { .. } | Op::Flatten { .. } => one(reshape_to(g, x.shape().into())),
        Op::Squeeze(axes) => one(Array::from_op(Op::ExpandDims(axes.clone()), vec![g.clone()])),
        Op::ExpandDims(axes) => one(Array::from_op(Op::Squeeze(axes.clone()), vec![g.clone()])),
        Op::Kernel { call, .. } => Err(call.no_transform("vjp")),
        Op::View(_) => Err(no_derivative_of_view("vjp")),
        Op::Transpose(perm) => one(Array::from_op(Op::Transpose(inverse(perm)), vec![g.clone()])),
        Op::BroadcastTo(_) => Ok(vec![Some(g.clone())]),
        Op::BroadcastLike { .. } => Ok([Some(g.clone())].into_iter().chain(inputs[1..].iter().map(|_| None)).collect()),
        Op::SumLike => Ok(vec![Some(ops::broadcast_like(g, x)?), None]),
        Op::Slice { start, step, written, .. } => one(Array::from_op(
            Op::SliceUpdate { start: start.clone(), step: step.clone(), written: written.clone() },
            vec![ops::zeros_like(x)?, g.clone()],
        )),
        Op::Concatenate { axis } => {
            let mut at = 0;
            inputs
                .iter()
                .map(|i| {
                    let n = i.shape()[*axis];
                    at += n;
                    Ok(Some(ops::slice_axis(g, *axis as i64, (at - n) as i64, at as i64)?))
                })
                .collect()
        }
        Op::SliceUpdate { start, step, written } => {
            let update = &inputs[1];
            let dst = Array::from_op(
                Op::SliceUpdate { start: start.clone(), step: step.clone(), written: written.clone() },
                vec![g.clone(), ops::zeros_like(update)?],
            )?;
            let upd = Array::from_op(
                Op::Slice {
                    start: start.clone(),
                    step: step.clone(),
                    len: update.shape().to_vec(),
                    written: written.clone(),
                },
                vec![g.clone()],
            )?;
            Ok(vec![Some(dst), Some(upd)])
        }
        Op::Reduce { op: r, axes, .. } => one(reduce_vjp(*r, axes, x, y, g)),
        Op::Scan { op: s, axis, reverse, inclusive } => one(scan_vjp(*s, *axis, *reverse, *inclusive, x, y, g)),
        Op::Sort { axis } => one(ops::add_along_axis(&ops::zeros_like(x)?, &ops::argsort(x, Some(*axis as i64))?, g, *axis)),
        Op::Partition { kth, axis } => {
            let idx = Array::from_op(Op::ArgPartition { kth: *kth, axis: *axis }, vec![x.clone()])?;
            one(ops::add_along_axis(&ops::zeros_like(x)?, &idx, g, *axis))
        }
        Op::Gather { axes, .. } => {
            let mut scatter_inputs = vec![ops::zeros_like(x)?];
            scatter_inputs.extend(inputs[1..].iter().cloned());
            scatter_inputs.push(g.clone());
            let mut out = vec![Some(Array::from_op(Op::Scatter { axes: axes.clone(), op: ScatterOp::Add }, scatter_inputs)?)];
            out.extend(inputs[1..].iter().map(|_| None));
            Ok(out)
        }
        Op::Scatter { axes, op: s } => scatter_vjp(*s, axes, inputs, y, g),
        Op::Fft { axes, kind } => one(fft_vjp(axes, *kind, x, g)),
        Op::Matmul => {
            let b = &inputs[1];
            // Conjugate transposes (plain transposes for real inputs).
            let ga = ops::matmul(g, ops::conjugate(ops::swapaxes(b, -1, -2)?)?)?;
            let gb = ops::matmul(ops::conjugate(ops::swapaxes(x, -1, -2)?)?, g)?;
            Ok(vec![Some(ga), Some(gb)])
        }
        Op::Custom { index, .. } => {
            Ok((0..inputs.len()).map(|i| (i == *index).then(|| g.clone())).collect())
        }
        Op::StopGradient
        | Op::ArgReduce { .. }
        | Op::ArgSort { .. }
        | Op::ArgPartition { .. }
        | Op::RandomBits { .. }
        | Op::Count { .. }
        | Op::Arange { .. } => Ok(inputs.iter().map(|_| None).collect()),
    }
}

/// Axes as the `i64` list the public ops take.
pub(crate) fn as_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

/// The permutation undoing `perm`.
pub(crate) fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

fn reduce_vjp(op: ReduceOp, axes: &[usize], x: &Array, y: &Array, g: &Array) -> Result<Array> {
    // Broadcast like x (not to x's shape), so that the gradient follows shapeless calls.
    let g = ops::broadcast_like(g, x)?;
    match op {
        ReduceOp::Sum => Ok(g),
        ReduceOp::Prod => ops::multiply(&g, ops::conjugate(prod_of_others(x, axes)?)?),
        ReduceOp::Max | ReduceOp::Min => {
            // Ties share the gradient equally, as in mlx.
            let mask = cast(&ops::equal(x, y)?, x.dtype())?;
            let count = ops::sum(&mask, Some(&as_i64(axes)), true)?;
            ops::multiply(&g, ops::divide(&mask, &count)?)
        }
        ReduceOp::All | ReduceOp::Any => ops::zeros_like(x),
    }
}

/// For each element of `x`, the product of the other elements of its reduction over `axes`,
/// without dividing (exact when `x` holds zeros): exclusive products from both ends, multiplied.
pub(crate) fn prod_of_others(x: &Array, axes: &[usize]) -> Result<Array> {
    let kept: Vec<usize> = (0..x.ndim()).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let xt = Array::from_op(Op::Transpose(perm.clone()), vec![x.clone()])?;
    let mut flat: Vec<i64> = kept.iter().map(|&a| x.shape()[a] as i64).collect();
    flat.push(axes.iter().map(|&a| x.shape()[a] as i64).product());
    let xf = ops::reshape(&xt, &flat)?;
    let left = ops::cumprod(&xf, Some(-1), false, false)?;
    let right = ops::cumprod(&xf, Some(-1), true, false)?;
    let others = reshape_to(&ops::multiply(&left, &right)?, xt.shape().into())?;
    Array::from_op(Op::Transpose(inverse(&perm)), vec![others])
}

fn scan_vjp(op: ScanOp, axis: usize, reverse: bool, inclusive: bool, x: &Array, y: &Array, g: &Array) -> Result<Array> {
    let ax = Some(axis as i64);
    if op == ScanOp::Sum {
        return ops::cumsum(g, ax, !reverse, inclusive);
    }
    if op == ScanOp::LogAddExp {
        // dx_j = Σ g_i exp(x_j - y_i) over the outputs i whose window holds j: the opposite scan.
        // Outputs of -inf (an empty window, or one of -inf inputs only) pass nothing back.
        let from_output = ops::where_(ops::equal(y, f64::NEG_INFINITY)?, f64::NEG_INFINITY, ops::negative(y)?)?;
        return signed_log_scan("vjp", x, &from_output, g, axis, !reverse, inclusive);
    }
    if x.size() == 0 {
        return ops::zeros_like(x);
    }
    if reverse || !inclusive {
        // Differentiate the same scan written as a forward inclusive scan, flips and a shift.
        return vjp_of(|t| canonical_scan(op, axis, reverse, inclusive, &t[0]), x, g);
    }
    match op {
        ScanOp::Prod => cumprod_vjp(axis, x, y, g),
        _ => {
            // The gradient of each running extreme goes to the last position that set it.
            let pos = ops::positions_along(x.shape()[axis], axis, x.ndim(), Dtype::I32)?;
            let candidate = ops::where_(ops::equal(x, y)?, &pos, 0)?;
            let source = ops::cummax(&candidate, ax, false, true)?;
            ops::add_along_axis(&ops::zeros_like(x)?, &source, g, axis)
        }
    }
}

/// exp(offset_i) · Σ_j exp(log_weight_j) · v_j over the windows of a scan along `axis`, computed
/// in log space (the positive and the negative parts of `v` apart) so no exponential overflows:
/// the derivative of `logcumsumexp` in either direction. Complex inputs are refused.
pub(super) fn signed_log_scan(
    transform: &str,
    offset: &Array,
    log_weight: &Array,
    v: &Array,
    axis: usize,
    reverse: bool,
    inclusive: bool,
) -> Result<Array> {
    if [offset, log_weight, v].iter().any(|a| a.dtype().is_complex()) {
        return Err(Error::value(
            "logcumsumexp",
            format!("the {transform} of logcumsumexp is defined for real inputs only, got complex64"),
        ));
    }
    let part = |keep: Array| -> Result<Array> {
        let magnitude = ops::log(ops::where_(&keep, ops::abs(v)?, 1.0)?)?;
        let log_v = ops::where_(&keep, magnitude, f64::NEG_INFINITY)?;
        let window = ops::logcumsumexp(ops::add(log_weight, log_v)?, Some(axis as i64), reverse, inclusive)?;
        ops::exp(ops::add(offset, window)?)
    };
    let scanned = ops::subtract(part(ops::greater(v, 0.0)?)?, part(ops::less(v, 0.0)?)?)?;
    // A NaN in `v` is in neither part: it makes every window holding it NaN.
    let nans = ops::cumsum(ops::astype(ops::isnan(v)?, Dtype::F32)?, Some(axis as i64), reverse, inclusive)?;
    ops::where_(ops::greater(nans, 0.0)?, f64::NAN, scanned)
}

/// A reverse or exclusive scan rebuilt from a forward inclusive scan: flips and a shift by one
/// (filling with the op's identity).
fn canonical_scan(op: ScanOp, axis: usize, reverse: bool, inclusive: bool, x: &Array) -> Result<Array> {
    let flip = |a: &Array| ops::flip(a, Some(&[axis as i64]));
    let x1 = if reverse { flip(x)? } else { x.clone() };
    let mut y = Array::from_op(Op::Scan { op, axis, reverse: false, inclusive: true }, vec![x1])?;
    if !inclusive {
        let n = x.shape()[axis] as i64;
        let identity = match op {
            ScanOp::Prod => 1.0,
            ScanOp::Max => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        };
        let mut fill_shape = x.shape().to_vec();
        fill_shape[axis] = 1;
        let fill = ops::full(&fill_shape, identity, Some(x.dtype()))?;
        y = ops::concatenate(&[fill, ops::slice_axis(&y, axis as i64, 0, n - 1)?], axis as i64)?;
    }
    if reverse { flip(&y) } else { Ok(y) }
}

/// The vjp of an inclusive forward cumprod, exact with zeros: before the first zero the
/// gradient is a reverse cumsum of `g * y` over `x`; at the first zero it is the reverse cumsum
/// of `g` times the product of the other factors up to the next zero; after it, zero.
fn cumprod_vjp(axis: usize, x: &Array, y: &Array, g: &Array) -> Result<Array> {
    use ops::{cumsum, equal, multiply, where_};
    let ax = Some(axis as i64);
    let is_zero = equal(x, 0.0)?;
    let zeros_so_far = cumsum(&is_zero, ax, false, true)?;
    let safe = where_(&is_zero, 1.0, x)?;
    let rsum = |v: Array| cumsum(&v, ax, true, true);
    let before = ops::divide(rsum(multiply(g, y)?)?, &safe)?;
    let one_zero = equal(&zeros_so_far, 1)?;
    let safe_prod = ops::cumprod(&safe, ax, false, true)?;
    let at_zero = rsum(multiply(multiply(g, &safe_prod)?, cast(&one_zero, x.dtype())?)?)?;
    let first_zero = ops::logical_and(&is_zero, &one_zero)?;
    where_(equal(&zeros_so_far, 0)?, before, where_(first_zero, at_zero, 0.0)?)
}

/// The vjp of `f` at `x` for cotangent `g`, by walking `f`'s graph: for ops whose rule is
/// easiest stated through an equivalent composite.
fn vjp_of(f: impl Fn(&[Array]) -> Result<Array>, x: &Array, g: &Array) -> Result<Array> {
    let leaves = tracers(std::slice::from_ref(x))?;
    let y = f(&leaves)?;
    Ok(backward(&[y], &leaves, std::slice::from_ref(g), false)?.remove(0))
}

fn scatter_vjp(op: ScatterOp, axes: &[usize], inputs: &[Array], y: &Array, g: &Array) -> Result<Vec<Option<Array>>> {
    let a = &inputs[0];
    let updates = inputs.last().expect("scatter has updates");
    let indices = &inputs[1..inputs.len() - 1];
    let nb = updates.ndim() - a.ndim();
    let gather = |v: &Array| {
        let mut gi = vec![v.clone()];
        gi.extend(indices.iter().cloned());
        Array::from_op(Op::Gather { axes: axes.to_vec(), slice_sizes: updates.shape()[nb..].to_vec() }, gi)
    };
    let scatter = |base: &Array, upd: Array, how: ScatterOp| {
        let mut si = vec![base.clone()];
        si.extend(indices.iter().cloned());
        si.push(upd);
        Array::from_op(Op::Scatter { axes: axes.to_vec(), op: how }, si)
    };
    let (ga, gu) = match op {
        ScatterOp::Set => {
            // Of duplicate writes only the last survives: scatter each update's id the same way
            // and give the gradient to the updates whose id is the one left standing.
            let ids = reshape_to(&ops::arange(0.0, updates.size() as f64, 1.0, Dtype::I32)?, updates.shape().into())?;
            let owners = scatter(&ops::full(a.shape(), -1, Some(Dtype::I32))?, ids.clone(), ScatterOp::Set)?;
            let survived = ops::equal(gather(&owners)?, &ids)?;
            (scatter(g, ops::zeros_like(updates)?, ScatterOp::Set)?, ops::where_(&survived, gather(g)?, 0.0)?)
        }
        ScatterOp::Add => (g.clone(), gather(g)?),
        ScatterOp::Max | ScatterOp::Min => {
            // Ties between the destination and the updates (or among updates) share the
            // gradient equally, as reductions do.
            let from_a = cast(&ops::equal(y, a)?, a.dtype())?;
            let from_updates = cast(&ops::equal(updates, gather(y)?)?, a.dtype())?;
            let count = ops::add(&from_a, scatter(&ops::zeros_like(a)?, from_updates.clone(), ScatterOp::Add)?)?;
            let share = ops::divide(g, ops::maximum(&count, 1.0)?)?;
            (ops::multiply(&share, &from_a)?, ops::multiply(gather(&share)?, &from_updates)?)
        }
        ScatterOp::Prod => {
            // y = a * P with P the product of the updates landing on each element. For an update
            // u, the product of the others is P / u, or (when u is 0) the product of the non-zero
            // updates if u is the only zero there; computed without dividing by zero.
            let is_zero = ops::equal(updates, 0.0)?;
            let ones = ops::ones_like(a)?;
            let nonzero = ops::where_(&is_zero, 1.0, updates)?;
            let p_nonzero = scatter(&ones, nonzero.clone(), ScatterOp::Prod)?;
            let zero_count = scatter(&ops::zeros_like(a)?, cast(&is_zero, a.dtype())?, ScatterOp::Add)?;
            let (pn, zc) = (gather(&p_nonzero)?, gather(&zero_count)?);
            let others_if_zero = ops::where_(ops::equal(&zc, 1.0)?, &pn, 0.0)?;
            let others_if_nonzero = ops::where_(ops::equal(&zc, 0.0)?, ops::divide(&pn, &nonzero)?, 0.0)?;
            let others = ops::where_(&is_zero, others_if_zero, others_if_nonzero)?;
            let p = ops::where_(ops::equal(&zero_count, 0.0)?, &p_nonzero, 0.0)?;
            let ga = ops::multiply(g, &p)?;
            let gu = ops::multiply(gather(&ops::multiply(g, a)?)?, others)?;
            (ga, gu)
        }
    };
    let mut out = vec![Some(ga)];
    out.extend(indices.iter().map(|_| None));
    out.push(Some(gu));
    Ok(out)
}

/// The error for differentiating through `view`: reinterpreted bits have no derivative.
pub(super) fn no_derivative_of_view(transform: &str) -> Error {
    Error::value(
        "view",
        format!("a {transform} cannot pass through view (reinterpreted bits have no derivative); apply stop_gradient to its input"),
    )
}
