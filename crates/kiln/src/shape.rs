//! Shapes, strides and broadcasting.

use crate::error::{Error, Result};
use smallvec::SmallVec;

/// The extent of each axis. Small shapes (the common case) live inline.
pub type Shape = SmallVec<[usize; 6]>;
/// Element strides per axis; negative for reversed views, zero for broadcast axes.
pub type Strides = SmallVec<[isize; 6]>;

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major (C order) strides of a shape.
pub fn row_major_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(0, shape.len());
    let mut acc = 1isize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d.max(1) as isize;
    }
    strides
}

/// Formats a shape as Python does: `(2, 3)`, `(4,)`, `()`.
pub fn fmt_shape<D: std::fmt::Display>(shape: &[D]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The broadcast of two shapes by numpy rules; `op` names the op in the error.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let n = a.len().max(b.len());
    let mut out: Shape = SmallVec::from_elem(0, n);
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                op,
                format!("cannot broadcast shapes {} and {}", fmt_shape(a), fmt_shape(b)),
            ));
        };
    }
    Ok(out)
}

/// The axes of `from` that a broadcast from `to` added or stretched: summing them (keeping
/// axes) brings an array of shape `from` back to `to`'s size.
pub fn unbroadcast_axes(from: &[usize], to: &[usize]) -> Vec<usize> {
    let extra = from.len() - to.len();
    (0..from.len()).filter(|&i| i < extra || (to[i - extra] == 1 && from[i] != 1)).collect()
}

/// Resolves a possibly negative axis against `ndim`, naming `op` in the error.
pub fn normalize_axis(op: &str, axis: i64, ndim: usize) -> Result<usize> {
    let n = ndim as i64;
    if axis < -n || axis >= n {
        return Err(Error::axis(
            op,
            format!("axis {axis} is out of bounds for an array with {ndim} dimensions"),
        ));
    }
    Ok(if axis < 0 { (axis + n) as usize } else { axis as usize })
}

/// Resolves a list of axes, rejecting duplicates; the result is sorted.
pub fn normalize_axes(op: &str, axes: &[i64], ndim: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(op, a, ndim))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::axis(op, format!("repeated axis in {axes:?}")));
    }
    Ok(out)
}

/// Removes size-1 axes from a shape and merges axes that are contiguous in both stride sets,
/// so kernels loop over as few dimensions as possible. Returns the collapsed shape and strides
/// (one stride list per input).
pub fn collapse_dims(shape: &[usize], strides: &[&[isize]]) -> (Shape, Vec<Strides>) {
    let mut out_shape: Shape = SmallVec::new();
    let mut out_strides: Vec<Strides> = vec![SmallVec::new(); strides.len()];
    for axis in 0..shape.len() {
        let d = shape[axis];
        if d == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && strides.iter().zip(&out_strides).all(|(s, o)| *o.last().unwrap() == s[axis] * d as isize);
        if mergeable {
            *out_shape.last_mut().unwrap() *= d;
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                *o.last_mut().unwrap() = s[axis];
            }
        } else {
            out_shape.push(d);
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                o.push(s[axis]);
            }
        }
    }
    (out_shape, out_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes("add", &[2, 1, 3], &[4, 1]).unwrap().as_slice(), &[2, 4, 3]);
        assert_eq!(broadcast_shapes("add", &[], &[5]).unwrap().as_slice(), &[5]);
        let e = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err();
        assert_eq!(e.to_string(), "add: cannot broadcast shapes (2, 3) and (4,)");
    }

    #[test]
    fn collapse_merges_contiguous_axes() {
        let (s, st) = collapse_dims(&[2, 3, 4], &[&[12, 4, 1]]);
        assert_eq!(s.as_slice(), &[24]);
        assert_eq!(st[0].as_slice(), &[1]);
        let (s, st) = collapse_dims(&[2, 3, 4], &[&[12, 4, 1], &[0, 4, 1]]);
        assert_eq!(s.as_slice(), &[2, 12]);
        assert_eq!(st[1].as_slice(), &[0, 1]);
    }
}
