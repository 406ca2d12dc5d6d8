//! Reductions (sum, prod, max, min, all, any, argmax, argmin) and the composites built from them
//! (mean, var, std, logsumexp, softmax). Reduced axes are dropped unless `keepdims`.

use super::shape::{flatten, squeeze_axes};
use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::{ArgReduceOp, Op, ReduceOp};
use crate::shape::{normalize_axes, normalize_axis};

/// Resolves `axes` (`None` = all) for `x`.
fn resolve_axes(op: &str, x: &Array, axes: Option<&[i64]>) -> Result<Vec<usize>> {
    match axes {
        None => Ok((0..x.ndim()).collect()),
        Some(a) => normalize_axes(op, a, x.ndim()),
    }
}

fn reduce(op: ReduceOp, name: &str, x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    reduce_node(op, name, x, axes, keepdims, false)
}

/// The maximum over `axes`, kept, that is -inf over an empty axis instead of an error: for
/// composites whose result is right then (and which a shapeless call may give an empty axis).
fn max_or_identity(x: &Array, axes: Option<&[i64]>) -> Result<Array> {
    reduce_node(ReduceOp::Max, "max", x, axes, true, true)
}

fn reduce_node(
    op: ReduceOp,
    name: &str,
    x: impl AsArray,
    axes: Option<&[i64]>,
    keepdims: bool,
    identity_if_empty: bool,
) -> Result<Array> {
    let x = x.as_array();
    let axes = resolve_axes(name, &x, axes)?;
    let out_dtype = op.out_dtype(x.dtype());
    if axes.is_empty() {
        return cast(&x, out_dtype);
    }
    let r = Array::from_op(Op::Reduce { op, axes: axes.clone(), identity_if_empty }, vec![x])?;
    if keepdims { Ok(r) } else { squeeze_axes(&r, axes) }
}

macro_rules! reductions {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
            reduce(ReduceOp::$op, stringify!($name), x, axes, keepdims)
        }
    )*};
}

reductions! {
    /// Sum over `axes` (all when `None`); bool and narrow integers accumulate in (u)int32.
    sum => Sum,
    /// Product over `axes`.
    prod => Prod,
    /// Maximum over `axes` (NaN propagates); an empty reduction is an error.
    max => Max,
    /// Minimum over `axes` (NaN propagates); an empty reduction is an error.
    min => Min,
    /// Whether every element is non-zero.
    all => All,
    /// Whether any element is non-zero.
    any => Any,
}

/// The number of elements a reduction over `axes` combines.
fn count(x: &Array, axes: Option<&[i64]>, op: &str) -> Result<usize> {
    Ok(resolve_axes(op, x, axes)?.iter().map(|&a| x.shape()[a]).product())
}

/// The element count along `axes` minus `ddof`, as a node of `x`'s dtype (see [`Op::Count`]).
fn count_node(x: &Array, axes: Option<&[i64]>, ddof: usize, op: &str) -> Result<Array> {
    let axes = resolve_axes(op, x, axes)?.to_vec();
    Array::from_op(Op::Count { axes, ddof, dtype: x.dtype() }, vec![x.clone()])
}

/// Mean over `axes`; integers give float32.
pub fn mean(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let x = x.as_array();
    let x = cast(&x, x.dtype().to_float())?;
    let n = count_node(&x, axes, 0, "mean")?;
    super::divide(sum(&x, axes, keepdims)?, n)
}

/// Variance over `axes` with `ddof` delta degrees of freedom (two-pass: mean, then squared
/// deviations), as numpy's `var`.
pub fn var(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool, ddof: usize) -> Result<Array> {
    let x = x.as_array();
    let x = cast(&x, x.dtype().to_float())?;
    let centred = super::subtract(&x, mean(&x, axes, true)?)?;
    // Of complex values, the mean squared magnitude (a real variance, as numpy's).
    let dev = super::square(if x.dtype().is_complex() { super::abs(&centred)? } else { centred })?;
    let n = count_node(&dev, axes, ddof, "var")?;
    let s = sum(&dev, axes, keepdims)?;
    // As numpy and mlx: the divisor is clamped at 0, so n <= ddof gives inf (or nan for 0/0).
    super::divide(s, n)
}

/// Standard deviation: the square root of [`var`].
pub fn std(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool, ddof: usize) -> Result<Array> {
    super::sqrt(var(x, axes, keepdims, ddof).map_err(|e| e.in_op("std"))?)
}

/// log(sum(exp(x))) over `axes`, computed stably by shifting by the maximum.
pub fn logsumexp(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let x = x.as_array();
    refuse_complex("logsumexp", &x)?;
    let x = cast(&x, x.dtype().to_float())?;
    if count(&x, axes, "logsumexp")? == 0 {
        let s = sum(&x, axes, keepdims)?;
        return super::log(s); // log(0) = -inf, as for an empty sum of exponentials
    }
    let m = max_or_identity(&x, axes)?;
    // An infinite max would make x - m NaN; shift by 0 there instead.
    let m = super::where_(super::isinf(&m)?, 0.0, &m)?;
    let s = sum(super::exp(super::subtract(&x, &m)?)?, axes, true)?;
    let out = super::add(super::log(s)?, &m)?;
    if keepdims {
        Ok(out)
    } else {
        let axes = resolve_axes("logsumexp", &x, axes)?;
        squeeze_axes(&out, axes)
    }
}

/// Softmax over `axes` (all when `None`), stable by subtracting the maximum. With `precise`,
/// float16/bfloat16 inputs are computed in float32 and converted back.
pub fn softmax(x: impl AsArray, axes: Option<&[i64]>, precise: bool) -> Result<Array> {
    let x = x.as_array();
    refuse_complex("softmax", &x)?;
    let dt = x.dtype().to_float();
    if count(&x, axes, "softmax")? == 0 {
        return cast(&x, dt); // empty in, empty out
    }
    let work = if precise && matches!(dt, Dtype::F16 | Dtype::BF16) { Dtype::F32 } else { dt };
    let xw = cast(&x, work)?;
    let m = max_or_identity(&xw, axes)?;
    let e = super::exp(super::subtract(&xw, &m)?)?;
    let out = super::divide(&e, sum(&e, axes, true)?)?;
    cast(&out, dt)
}

/// Composites that shift by a maximum have no meaning for complex numbers (whose order is only
/// numpy's lexicographic convention).
fn refuse_complex(op: &str, x: &Array) -> Result<()> {
    if x.dtype().is_complex() {
        return Err(Error::dtype(op, "not defined for complex64 inputs; apply it to the real part or the magnitude"));
    }
    Ok(())
}

fn arg_reduce(op: ArgReduceOp, name: &str, x: impl AsArray, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    let x = x.as_array();
    let ndim = x.ndim();
    let (x, axis, flat) = match axis {
        Some(a) => {
            let a = normalize_axis(name, a, ndim)?;
            (x, a, false)
        }
        None => (flatten(&x, 0, -1)?, 0, true),
    };
    let r = Array::from_op(Op::ArgReduce { op, axis }, vec![x])?;
    match (keepdims, flat) {
        // Over the flattened array, keepdims keeps every axis of the input (as size 1), as numpy.
        (true, true) => crate::ops::reshape(&r, &vec![1; ndim]),
        (true, false) => Ok(r),
        (false, _) => squeeze_axes(&r, vec![axis]),
    }
}

/// Index (uint32) of the first maximum along `axis` (of the flattened array when `None`).
pub fn argmax(x: impl AsArray, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMax, "argmax", x, axis, keepdims)
}

/// Index (uint32) of the first minimum along `axis` (of the flattened array when `None`).
pub fn argmin(x: impl AsArray, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMin, "argmin", x, axis, keepdims)
}
