//! Forward-mode rules: for each op, its output's tangent given its inputs' tangents (`None` for
//! an input without one). Linear ops apply themselves to the tangent; elementwise ops use the
//! partials shared with reverse mode. Ops whose forward rule would repeat a subtle reverse rule
//! (cumulative products and extremes, product-scatters) use the reverse rule twice instead:
//! `u ↦ vjp(u)` is linear, and the vjp of `u ↦ ⟨vjp(u), t⟩` is the jvp for `t`.

use super::autodiff::{backward, tracers};
use super::vjp_rules::{self, binary_partials, prod_of_others, unary_partial, Partial};
use crate::array::Array;
use crate::error::Result;
use crate::ops::{self, cast};
use crate::primitive::{Op, ReduceOp, ScanOp, ScatterOp};

/// The tangent of `op`'s output `y` given its inputs' tangents `t`, or `None` when it is zero.
pub(crate) fn jvp(op: &Op, inputs: &[Array], y: &Array, t: &[Option<Array>]) -> Result<Option<Array>> {
    let x = &inputs[0];
    // The tangent of input `i`, zeros when it has none.
    let tan = |i: usize| t[i].clone().map_or_else(|| ops::zeros_like(&inputs[i]), Ok);
    // `op` itself applied to the tangent of the first input, other inputs unchanged.
    let same_op = || {
        let mut ins = vec![tan(0)?];
        ins.extend(inputs[1..].iter().cloned());
        Array::from_op(op.clone(), ins).map(Some)
    };
    match op {
        Op::Unary(u) if vjp_rules::non_holomorphic(*u, x) => t[0].as_ref().map(|t| complex_unary_jvp(*u, x, t)).transpose(),
        Op::Unary(u) => along(&unary_partial(*u, x, y)?, &t[0]),
        Op::Binary(b) => {
            let (da, db) = binary_partials(*b, x, &inputs[1], y)?;
            sum_of(along(&da, &t[0])?, along(&db, &t[1])?)
        }
        Op::Select => Ok(Some(ops::where_(&inputs[0], tan(1)?, tan(2)?)?)),
        Op::AsType(d) => Ok(match &t[0] {
            Some(t0) if x.dtype().is_inexact() && d.is_inexact() => Some(ops::astype(t0, *d)?),
            _ => None,
        }),
        Op::Reshape { .. } | Op::Transpose(_) | Op::BroadcastTo(_) | Op::BroadcastLike { .. } | Op::SumLike | Op::Slice { .. } | Op::Flatten { .. } | Op::Squeeze(_) | Op::ExpandDims(_) => same_op(),
        Op::Kernel { call, .. } => Err(call.no_transform("jvp")),
        Op::View(_) => Err(vjp_rules::no_derivative_of_view("jvp")),
        Op::Concatenate { .. } => {
            let ts = (0..inputs.len()).map(tan).collect::<Result<Vec<_>>>()?;
            Array::from_op(op.clone(), ts).map(Some)
        }
        Op::SliceUpdate { .. } => Array::from_op(op.clone(), vec![tan(0)?, tan(1)?]).map(Some),
        Op::Reduce { op: r, axes, .. } => {
            let Some(t0) = &t[0] else { return Ok(None) };
            let ax = vjp_rules::as_i64(axes);
            let weighted = match r {
                ReduceOp::Sum => t0.clone(),
                ReduceOp::Prod => ops::multiply(t0, prod_of_others(x, axes)?)?,
                ReduceOp::Max | ReduceOp::Min => {
                    let mask = cast(&ops::equal(x, y)?, x.dtype())?;
                    let count = ops::sum(&mask, Some(&ax), true)?;
                    ops::divide(ops::multiply(t0, &mask)?, count)?
                }
                ReduceOp::All | ReduceOp::Any => return Ok(None),
            };
            Ok(Some(ops::sum(&weighted, Some(&ax), true)?))
        }
        Op::Scan { op: ScanOp::Sum, .. } => same_op(),
        Op::Scan { op: ScanOp::LogAddExp, axis, reverse, inclusive } => {
            // dy_i = Σ exp(x_j - y_i) t_j over the window of i; an output of -inf has none.
            let Some(t0) = &t[0] else { return Ok(None) };
            let scanned = vjp_rules::signed_log_scan("jvp", &ops::negative(y)?, x, t0, *axis, *reverse, *inclusive)?;
            Ok(Some(ops::where_(ops::equal(y, f64::NEG_INFINITY)?, 0.0, scanned)?))
        }
        Op::Sort { axis } => {
            let idx = ops::argsort(x, Some(*axis as i64))?;
            Ok(Some(ops::take_along_axis(tan(0)?, &idx, Some(*axis as i64))?))
        }
        Op::Partition { kth, axis } => {
            let idx = Array::from_op(Op::ArgPartition { kth: *kth, axis: *axis }, vec![x.clone()])?;
            Ok(Some(ops::take_along_axis(tan(0)?, &idx, Some(*axis as i64))?))
        }
        Op::Gather { .. } => same_op(),
        Op::Scatter { op: ScatterOp::Set | ScatterOp::Add, .. } => {
            let mut ins = vec![tan(0)?];
            ins.extend(inputs[1..inputs.len() - 1].iter().cloned());
            ins.push(tan(inputs.len() - 1)?);
            Array::from_op(op.clone(), ins).map(Some)
        }
        Op::Scan { .. } | Op::Scatter { .. } => jvp_by_transposition(op, inputs, y, t),
        // Linear: the transform of the tangent.
        Op::Fft { .. } => same_op(),
        Op::Matmul => {
            let ta = t[0].as_ref().map(|t0| ops::matmul(t0, &inputs[1])).transpose()?;
            let tb = t[1].as_ref().map(|t1| ops::matmul(x, t1)).transpose()?;
            sum_of(ta, tb)
        }
        Op::Custom { index, .. } => Ok(t[*index].clone()),
        Op::StopGradient
        | Op::ArgReduce { .. }
        | Op::ArgSort { .. }
        | Op::ArgPartition { .. }
        | Op::RandomBits { .. }
        | Op::Count { .. }
        | Op::Arange { .. } => Ok(None),
    }
}

/// The tangent of a complex op that is not holomorphic, for input tangent `t`: real, imag and
/// conj apply themselves to it; |z| gives Re(conj(z)·t)/|z|, a real tangent.
fn complex_unary_jvp(op: crate::primitive::UnaryOp, x: &Array, t: &Array) -> Result<Array> {
    use crate::primitive::UnaryOp;
    match op {
        UnaryOp::Abs => ops::real(ops::multiply(ops::conjugate(ops::sign(x)?)?, t)?),
        _ => Array::from_op(Op::Unary(op), vec![ops::astype(t, crate::Dtype::C64)?]),
    }
}

/// A partial derivative applied to an input's tangent, if it has one.
fn along(d: &Partial, t: &Option<Array>) -> Result<Option<Array>> {
    t.as_ref().map_or(Ok(None), |t| d.times(t))
}

/// The sum of two tangent contributions, either of which may be absent (zero).
fn sum_of(a: Option<Array>, b: Option<Array>) -> Result<Option<Array>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(ops::add(&a, &b)?),
        (a, b) => a.or(b),
    })
}

/// The jvp from the op's vjp rule: the vjp is linear in the cotangent `u`, so the gradient with
/// respect to `u` of `Σ_i ⟨vjp_i(u), t_i⟩` is the tangent of the output.
fn jvp_by_transposition(op: &Op, inputs: &[Array], y: &Array, t: &[Option<Array>]) -> Result<Option<Array>> {
    let u = tracers(&[ops::zeros_like(y)?])?;
    let input_cts = vjp_rules::vjp(op, inputs, y, &u[0])?;
    let mut total: Option<Array> = None;
    for ((ct, tangent), input) in input_cts.into_iter().zip(t).zip(inputs) {
        if let (Some(ct), Some(tangent)) = (ct, tangent) {
            let ct = vjp_rules::unbroadcast(ct, input)?;
            let term = ops::sum(&ops::multiply(&ct, tangent)?, None, false)?;
            total = sum_of(total, Some(term))?;
        }
    }
    let Some(total) = total else { return Ok(None) };
    let seed = ops::ones_like(&total)?;
    Ok(Some(backward(&[total], &u, &[seed], false)?.remove(0)))
}
