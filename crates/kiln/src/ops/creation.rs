//! Arrays made from parameters: zeros, ones, full, arange and the *_like forms.

use super::shape::broadcast_to;
use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::{F64Bits, Op};
use crate::shape::fmt_shape;

/// `value` in `dtype`, as an ordinary array: a number never fills a weak scalar (as in mlx,
/// `full((), 0, int32)` promotes with int16 to int32).
fn fill_value(value: &Array, dtype: Dtype) -> Result<Array> {
    let filled = cast(value, dtype)?;
    if filled.is_weak() {
        Array::from_op(Op::AsType(dtype), vec![filled])
    } else {
        Ok(filled)
    }
}

/// An array of `shape` filled with `value` (a broadcast view of one element), in `dtype` or, when
/// `None`, the value's own dtype (float32 for a Rust float, int32 for a Rust integer).
pub fn full(shape: &[usize], value: impl AsArray, dtype: Option<Dtype>) -> Result<Array> {
    let v = value.as_array();
    let filled = fill_value(&v, dtype.unwrap_or(v.dtype()))?;
    broadcast_to(&filled, shape).map_err(|_| cannot_fill("full", &v, shape))
}

/// The error of `op` when `value` does not broadcast to `shape`.
fn cannot_fill(op: &str, value: &Array, shape: &[usize]) -> Error {
    Error::shape(op, format!("value of shape {} cannot fill shape {}", fmt_shape(value.shape()), fmt_shape(shape)))
}

/// Zeros of `shape` and `dtype`.
pub fn zeros(shape: &[usize], dtype: Dtype) -> Result<Array> {
    full(shape, 0i64, Some(dtype))
}

/// Ones of `shape` and `dtype`.
pub fn ones(shape: &[usize], dtype: Dtype) -> Result<Array> {
    full(shape, 1i64, Some(dtype))
}

/// Zeros with the shape and dtype of `x`.
pub fn zeros_like(x: impl AsArray) -> Result<Array> {
    full_like(x, 0i64)
}

/// Ones with the shape and dtype of `x`.
pub fn ones_like(x: impl AsArray) -> Result<Array> {
    full_like(x, 1i64)
}

/// `value` with the shape and dtype of `x`. The shape follows `x` in the graph (a broadcast like
/// `x`, whose data is not read), so a shapeless compiled function called at a new shape gives
/// the new shape.
pub fn full_like(x: impl AsArray, value: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    let v = value.as_array();
    let filled = fill_value(&v, x.dtype())?;
    super::shape::broadcast_like(&filled, &x).map_err(|_| cannot_fill("full_like", &v, x.shape()))
}

/// `0, 1, ..., n-1` along `axis` of an array of rank `ndim` whose other axes have size 1: the
/// position of each element along that axis, ready to broadcast (index grids, scatter owners).
pub(crate) fn positions_along(n: usize, axis: usize, ndim: usize, dtype: Dtype) -> Result<Array> {
    let mut shape = vec![1usize; ndim];
    shape[axis] = n;
    super::shape::reshape_to(&arange(0.0, n as f64, 1.0, dtype)?, shape.into())
}

/// Evenly spaced values `start, start + step, ...` below `stop` (above it for negative steps).
pub fn arange(start: f64, stop: f64, step: f64, dtype: Dtype) -> Result<Array> {
    if step == 0.0 || step.is_nan() || !start.is_finite() || !stop.is_finite() {
        return Err(Error::value(
            "arange",
            format!("needs finite start and stop and a non-zero step, got {start}, {stop}, {step}"),
        ));
    }
    if dtype == Dtype::Bool {
        return Err(Error::dtype("arange", "cannot make a bool range"));
    }
    let len = ((stop - start) / step).ceil().max(0.0) as usize;
    // An infinite step reaches past the stop at once: the start alone, if it lies before it.
    let (len, step) = if step.is_infinite() { (usize::from((stop - start) * step.signum() > 0.0), 0.0) } else { (len, step) };
    // An integer range counts its length from the given bounds, then steps from the start and by
    // the step truncated to integers, as mlx: arange(0, 3, 0.2) in int32 is fifteen zeros.
    let (start, step) = if dtype.is_integer() { (start.trunc(), step.trunc()) } else { (start, step) };
    let last = start + len.saturating_sub(1) as f64 * step;
    let fits = |v: f64| v.abs() < 2f64.powi(63) && dtype.holds_integer(v as i64);
    if dtype.is_integer() && dtype.size() < 8 && len > 0 && !(fits(start) && fits(last)) {
        // A range past a narrow integer dtype's bounds wraps as integer arithmetic does, as in
        // mlx: counted in int64, then narrowed.
        let wide = Array::from_op(Op::Arange { start: F64Bits::new(start), step: F64Bits::new(step), len, dtype: Dtype::I64 }, vec![])?;
        return cast(&wide, dtype);
    }
    Array::from_op(Op::Arange { start: F64Bits::new(start), step: F64Bits::new(step), len, dtype }, vec![])
}

/// `num` evenly spaced values from `start` to `stop` inclusive, in `dtype`.
pub fn linspace(start: f64, stop: f64, num: usize, dtype: Dtype) -> Result<Array> {
    linspace_with(start, stop, num, true, dtype)
}

/// `num` evenly spaced values from `start` to `stop`, `stop` included when `endpoint` (else the
/// values split `[start, stop)` into `num` equal steps), in `dtype`.
pub fn linspace_with(start: f64, stop: f64, num: usize, endpoint: bool, dtype: Dtype) -> Result<Array> {
    if !start.is_finite() || !stop.is_finite() {
        return Err(Error::value("linspace", format!("needs finite bounds, got {start} and {stop}")));
    }
    let intervals = if endpoint { num.saturating_sub(1) } else { num };
    let step = if intervals > 0 { (stop - start) / intervals as f64 } else { 0.0 };
    let i = arange(0.0, num as f64, 1.0, Dtype::F64)?;
    let v = super::add(super::multiply(&i, step)?, start)?;
    cast(&v, dtype)
}

/// An `n` x `m` (default `n` x `n`) matrix with ones on the `k`-th diagonal, zeros elsewhere.
pub fn eye(n: usize, m: Option<usize>, k: i64, dtype: Dtype) -> Result<Array> {
    let m = m.unwrap_or(n);
    let rows = super::shape::reshape_to(&arange(0.0, n as f64, 1.0, Dtype::I64)?, [n, 1][..].into())?;
    let cols = super::shape::reshape_to(&arange(0.0, m as f64, 1.0, Dtype::I64)?, [1, m][..].into())?;
    let on = super::equal(&cols, super::add(&rows, k)?)?;
    cast(&on, dtype)
}

/// The `n` x `n` identity matrix.
pub fn identity(n: usize, dtype: Dtype) -> Result<Array> {
    eye(n, None, 0, dtype)
}

/// Coordinate grids from 1-d arrays: with `indexing_xy` the first two output axes are swapped
/// (numpy's default "xy"), otherwise matrix indexing ("ij").
pub fn meshgrid(arrays: &[Array], indexing_xy: bool) -> Result<Vec<Array>> {
    let n = arrays.len();
    let mut sizes: Vec<usize> = arrays.iter().map(|a| a.size()).collect();
    if let Some(a) = arrays.iter().find(|a| a.ndim() != 1) {
        return Err(Error::shape("meshgrid", format!("needs 1-d arrays, got shape {}", fmt_shape(a.shape()))));
    }
    if indexing_xy && n >= 2 {
        sizes.swap(0, 1);
    }
    arrays
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let pos = if indexing_xy && n >= 2 && i < 2 { 1 - i } else { i };
            let mut s = vec![1usize; n];
            s[pos] = a.size();
            broadcast_to(&super::shape::reshape_to(a, s.into())?, &sizes)
        })
        .collect()
}
