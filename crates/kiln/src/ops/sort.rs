//! Cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp), sorting, partitioning and topk. With no
//! axis, each works on the flattened array, as in mlx.

use super::shape::{flatten, slice_axis};
use super::AsArray;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::primitive::{Op, ScanOp};
use crate::shape::normalize_axis;

/// The array and axis an op works on: the flattened array when `axis` is `None`.
fn along(name: &str, x: impl AsArray, axis: Option<i64>) -> Result<(Array, usize)> {
    let x = x.as_array();
    match axis {
        Some(a) => {
            let a = normalize_axis(name, a, x.ndim())?;
            Ok((x, a))
        }
        None => Ok((flatten(&x, 0, -1)?, 0)),
    }
}

fn scan(op: ScanOp, name: &str, x: impl AsArray, axis: Option<i64>, reverse: bool, inclusive: bool) -> Result<Array> {
    let (x, axis) = along(name, x, axis)?;
    Array::from_op(Op::Scan { op, axis, reverse, inclusive }, vec![x])
}

macro_rules! scans {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(x: impl AsArray, axis: Option<i64>, reverse: bool, inclusive: bool) -> Result<Array> {
            scan(ScanOp::$op, stringify!($name), x, axis, reverse, inclusive)
        }
    )*};
}

scans! {
    /// Cumulative sum along `axis` (exclusive when `!inclusive`, from the end when `reverse`).
    cumsum => Sum,
    /// Cumulative product along `axis`.
    cumprod => Prod,
    /// Running maximum along `axis`.
    cummax => Max,
    /// Running minimum along `axis`.
    cummin => Min,
}

/// Running log-sum-exp along `axis`: out[i] = ln Σ exp(x[j]) over the same window as
/// [`cumsum`], combined pairwise in log space so nothing overflows. Integers and bools compute in
/// float, as in [`logaddexp`](super::logaddexp).
pub fn logcumsumexp(x: impl AsArray, axis: Option<i64>, reverse: bool, inclusive: bool) -> Result<Array> {
    let x = x.as_array();
    let x = if x.dtype().is_inexact() { x } else { super::cast(&x, x.dtype().to_float())? };
    scan(ScanOp::LogAddExp, "logcumsumexp", x, axis, reverse, inclusive)
}

/// Sorted along `axis` (NaNs last).
pub fn sort(x: impl AsArray, axis: Option<i64>) -> Result<Array> {
    let (x, axis) = along("sort", x, axis)?;
    Array::from_op(Op::Sort { axis }, vec![x])
}

/// Indices (uint32) that sort along `axis`; stable.
pub fn argsort(x: impl AsArray, axis: Option<i64>) -> Result<Array> {
    let (x, axis) = along("argsort", x, axis)?;
    Array::from_op(Op::ArgSort { axis }, vec![x])
}

fn kth_index(name: &str, x: &Array, axis: usize, kth: i64) -> Result<usize> {
    let n = x.shape()[axis] as i64;
    let k = if kth < 0 { kth + n } else { kth };
    if k < 0 || k >= n {
        return Err(Error::value(name, format!("kth {kth} is out of bounds for an axis of size {n}")));
    }
    Ok(k as usize)
}

/// Partially sorted along `axis`: the element at `kth` is where sorting would put it, with no
/// larger element before it and no smaller one after.
pub fn partition(x: impl AsArray, kth: i64, axis: Option<i64>) -> Result<Array> {
    let (x, axis) = along("partition", x, axis)?;
    let kth = kth_index("partition", &x, axis, kth)?;
    Array::from_op(Op::Partition { kth, axis }, vec![x])
}

/// Indices (uint32) of a partition along `axis`.
pub fn argpartition(x: impl AsArray, kth: i64, axis: Option<i64>) -> Result<Array> {
    let (x, axis) = along("argpartition", x, axis)?;
    let kth = kth_index("argpartition", &x, axis, kth)?;
    Array::from_op(Op::ArgPartition { kth, axis }, vec![x])
}

/// The `k` largest elements along `axis` (unordered, as in mlx).
pub fn topk(x: impl AsArray, k: usize, axis: Option<i64>) -> Result<Array> {
    let (x, ax) = along("topk", x, axis)?;
    let n = x.shape()[ax];
    if k > n {
        return Err(Error::value("topk", format!("k must be in 0..={n} for an axis of size {n}, got {k}")));
    }
    if k == 0 || k == n {
        // Nothing to choose: an empty slice, or the whole input (as mlx returns it).
        return slice_axis(&x, ax as i64, (n - k) as i64, n as i64);
    }
    let p = partition(&x, (n - k) as i64, Some(ax as i64))?;
    slice_axis(&p, ax as i64, (n - k) as i64, n as i64)
}
