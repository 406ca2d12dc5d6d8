//! Shape ops. All of them are views (zero-copy) except a reshape whose strides cannot express it.

use super::AsArray;
use crate::array::Array;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::{fmt_shape, normalize_axes, normalize_axis, Shape};

/// Reshapes to `shape`; one entry may be -1 and is inferred.
pub fn reshape(x: impl AsArray, shape: &[i64]) -> Result<Array> {
    let x = x.as_array();
    let bad = || {
        Error::shape(
            "reshape",
            format!("cannot reshape array of shape {} into shape {}", fmt_shape(x.shape()), fmt_shape(shape)),
        )
    };
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            d if d >= 0 => known = known.checked_mul(d as usize).ok_or_else(bad)?,
            _ => return Err(bad()),
        }
    }
    let mut out: Shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !x.size().is_multiple_of(known) {
            return Err(bad());
        }
        out[i] = x.size() / known;
    }
    if out.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(x.size()) {
        return Err(bad());
    }
    if x.shape() == out.as_slice() {
        return Ok(x);
    }
    Array::from_op(Op::Reshape { shape: out, inferred: infer }, vec![x])
}

/// Reshape to a fully known shape, skipping the node when it is unchanged.
pub(crate) fn reshape_to(x: &Array, shape: Shape) -> Result<Array> {
    if x.shape() == shape.as_slice() && !keeps_identities() {
        return Ok(x.clone());
    }
    Array::from_op(Op::Reshape { shape, inferred: None }, vec![x.clone()])
}

/// Whether a reshape or broadcast to the shape its input has now must still be a node: while
/// compile traces, the target shape is fixed but the input's may change in a shapeless replay,
/// which then reports the stale shape instead of passing the input through. Simplification
/// removes the node again at each concrete shape where it is an identity.
fn keeps_identities() -> bool {
    crate::transforms::compile::is_compile_tracing()
}

/// Merges axes `start..=end` into one.
pub fn flatten(x: impl AsArray, start_axis: i64, end_axis: i64) -> Result<Array> {
    let x = x.as_array();
    if x.ndim() == 0 {
        return reshape_to(&x, Shape::from_slice(&[1]));
    }
    let s = normalize_axis("flatten", start_axis, x.ndim())?;
    let e = normalize_axis("flatten", end_axis, x.ndim())?;
    if s > e {
        return Err(Error::axis("flatten", format!("start_axis {start_axis} is after end_axis {end_axis}")));
    }
    if s == e {
        return Ok(x);
    }
    Array::from_op(Op::Flatten { start: s, end: e }, vec![x])
}

/// Splits `axis` into `shape` (one entry may be -1).
pub fn unflatten(x: impl AsArray, axis: i64, shape: &[i64]) -> Result<Array> {
    let x = x.as_array();
    let a = normalize_axis("unflatten", axis, x.ndim())?;
    let mut full: Vec<i64> = x.shape()[..a].iter().map(|&d| d as i64).collect();
    let d = x.shape()[a];
    let known: i64 = shape.iter().filter(|&&v| v != -1).product();
    if shape.iter().filter(|&&v| v == -1).count() > 1 || (known != 0 && d as i64 % known != 0)
        || (!shape.contains(&-1) && known != d as i64)
        || (shape.contains(&-1) && known == 0)
        || shape.iter().any(|&v| v < -1)
    {
        return Err(Error::shape("unflatten", format!("cannot split axis of size {d} into {}", fmt_shape(shape))));
    }
    // The -1 is resolved here: the other sizes come from the input's shape, so a reshape that
    // re-infers only the -1 (shapeless compile) would keep them stale.
    full.extend(shape.iter().map(|&v| if v == -1 { d as i64 / known } else { v }));
    full.extend(x.shape()[a + 1..].iter().map(|&d| d as i64));
    reshape_to(&x, full.iter().map(|&v| v as usize).collect())
}

/// Removes the given size-1 axes, or all of them when `axes` is `None`.
pub fn squeeze(x: impl AsArray, axes: Option<&[i64]>) -> Result<Array> {
    let x = x.as_array();
    let drop: Vec<usize> = match axes {
        // Every size-1 axis: which axes those are depends on the shape, so this is a reshape to a
        // fixed shape (a shapeless compiled function then reports it rather than keep an axis
        // that a new shape made size 1).
        None => {
            let out = x.shape().iter().copied().filter(|&d| d != 1).collect();
            return reshape_to(&x, out);
        }
        Some(ax) => {
            let ax = normalize_axes("squeeze", ax, x.ndim())?;
            if let Some(&bad) = ax.iter().find(|&&a| x.shape()[a] != 1) {
                return Err(Error::shape(
                    "squeeze",
                    format!("cannot squeeze axis {bad} of size {} in shape {}", x.shape()[bad], fmt_shape(x.shape())),
                ));
            }
            ax
        }
    };
    squeeze_axes(&x, drop)
}

/// Removes the size-1 axes `axes` (sorted) as an [`Op::Squeeze`] node, so a shapeless compiled
/// function re-infers the result's shape.
pub(crate) fn squeeze_axes(x: &Array, axes: Vec<usize>) -> Result<Array> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    Array::from_op(Op::Squeeze(axes), vec![x.clone()])
}

/// Inserts size-1 axes at `axes` (positions in the result).
pub fn expand_dims(x: impl AsArray, axes: &[i64]) -> Result<Array> {
    let x = x.as_array();
    let nd = x.ndim() + axes.len();
    let ax = normalize_axes("expand_dims", axes, nd)?;
    if ax.is_empty() {
        return Ok(x);
    }
    Array::from_op(Op::ExpandDims(ax), vec![x])
}

/// Permutes axes; `None` reverses them.
pub fn transpose(x: impl AsArray, axes: Option<&[i64]>) -> Result<Array> {
    let x = x.as_array();
    let perm: Vec<usize> = match axes {
        None => (0..x.ndim()).rev().collect(),
        Some(ax) => {
            if ax.len() != x.ndim() {
                return Err(Error::axis(
                    "transpose",
                    format!("axes {ax:?} do not match an array with {} dimensions", x.ndim()),
                ));
            }
            let perm: Vec<usize> = ax.iter().map(|&a| normalize_axis("transpose", a, x.ndim())).collect::<Result<_>>()?;
            let mut seen = perm.clone();
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err(Error::axis("transpose", format!("repeated axis in {ax:?}")));
            }
            perm
        }
    };
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x);
    }
    Array::from_op(Op::Transpose(perm), vec![x])
}

/// Swaps two axes.
pub fn swapaxes(x: impl AsArray, axis1: i64, axis2: i64) -> Result<Array> {
    let x = x.as_array();
    let a = normalize_axis("swapaxes", axis1, x.ndim())?;
    let b = normalize_axis("swapaxes", axis2, x.ndim())?;
    let mut perm: Vec<i64> = (0..x.ndim() as i64).collect();
    perm.swap(a, b);
    transpose(&x, Some(&perm))
}

/// Moves axis `source` to position `destination`.
pub fn moveaxis(x: impl AsArray, source: i64, destination: i64) -> Result<Array> {
    let x = x.as_array();
    let s = normalize_axis("moveaxis", source, x.ndim())?;
    let d = normalize_axis("moveaxis", destination, x.ndim())?;
    let mut perm: Vec<i64> = (0..x.ndim() as i64).collect();
    let a = perm.remove(s);
    perm.insert(d, a);
    transpose(&x, Some(&perm))
}

/// `x` broadcast to the shape of `reference` (whose data is not read): a broadcast that keeps
/// following the reference's shape when a shapeless compiled function is called on new shapes.
/// (Even when the shapes agree now it stays an op: they may differ in a later shapeless call.)
pub(crate) fn broadcast_like(x: impl AsArray, reference: &Array) -> Result<Array> {
    let x = x.as_array();
    if x.same_node(reference) {
        return Ok(x);
    }
    Array::from_op(Op::BroadcastLike { kept: 0 }, vec![x, reference.clone()])
}

/// Broadcasts to `shape` (a view with zero strides).
pub fn broadcast_to(x: impl AsArray, shape: &[usize]) -> Result<Array> {
    let x = x.as_array();
    if x.shape() == shape && !keeps_identities() {
        return Ok(x);
    }
    Array::from_op(Op::BroadcastTo(shape.into()), vec![x])
}

/// Broadcasts arrays to their common shape.
pub fn broadcast_arrays(arrays: &[Array]) -> Result<Vec<Array>> {
    let mut shape = Shape::new();
    for a in arrays {
        shape = crate::shape::broadcast_shapes("broadcast_arrays", &shape, a.shape())?;
    }
    arrays.iter().map(|a| broadcast_against(a, arrays, 0, &shape)).collect()
}

/// `x` broadcast against the shapes of `others` (their data is not read), its last `kept` axes
/// left alone; `shape` is the result's shape now. While compile traces this is an
/// [`Op::BroadcastLike`] node, which a shapeless replay re-infers from the operands' new shapes
/// (mlx's rule for `broadcast_arrays` and batched matmul); otherwise a plain broadcast view.
pub(crate) fn broadcast_against(x: &Array, others: &[Array], kept: usize, shape: &[usize]) -> Result<Array> {
    if !crate::transforms::compile::is_compile_tracing() {
        return broadcast_to(x, shape);
    }
    let mut inputs = vec![x.clone()];
    inputs.extend(others.iter().filter(|o| !o.same_node(x)).cloned());
    if inputs.len() == 1 {
        return Ok(x.clone());
    }
    Array::from_op(Op::BroadcastLike { kept }, inputs)
}

/// Python-style slice bounds of one axis: `start:stop:step` with `None` for omitted bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceSpec {
    /// First index (negative counts from the end); `None` is the natural start for the step.
    pub start: Option<i64>,
    /// One past the last index; `None` runs to the end for the step.
    pub stop: Option<i64>,
    /// Step, non-zero; negative walks backwards.
    pub step: i64,
}

impl SliceSpec {
    /// The whole axis, `:`.
    pub const ALL: SliceSpec = SliceSpec { start: None, stop: None, step: 1 };

    /// `start:stop` with step 1.
    pub fn range(start: i64, stop: i64) -> SliceSpec {
        SliceSpec { start: Some(start), stop: Some(stop), step: 1 }
    }

    /// Resolves against an axis of size `dim`: (first index, length), with Python's clamping.
    pub fn resolve(&self, dim: usize) -> Result<(usize, usize)> {
        let d = dim as i64;
        if self.step == 0 {
            return Err(Error::value("slice", "slice step cannot be zero"));
        }
        let fix = |v: i64, lo: i64, hi: i64| {
            let v = if v < 0 { v + d } else { v };
            v.clamp(lo, hi)
        };
        let (start, len) = if self.step > 0 {
            let start = self.start.map_or(0, |s| fix(s, 0, d));
            let stop = self.stop.map_or(d, |s| fix(s, 0, d));
            (start, if stop > start { (stop - start + self.step - 1) / self.step } else { 0 })
        } else {
            let start = self.start.map_or(d - 1, |s| fix(s, -1, d - 1));
            let stop = self.stop.map_or(-1, |s| fix(s, -1, d - 1));
            let k = -self.step;
            (start, if start > stop { (start - stop + k - 1) / k } else { 0 })
        };
        Ok(if len == 0 { (0, 0) } else { (start as usize, len as usize) })
    }
}

/// One axis of an index as the caller wrote it: a single position (which must be in range; the
/// axis keeps size 1) or a range. Kept by [`slice_written`] so a shapeless compiled function
/// resolves it again at each call's shapes, as eager indexing would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisBound {
    /// `x[i]` on this axis (negative counts from the end).
    Index(i64),
    /// `x[start:stop:step]` on this axis.
    Range(SliceSpec),
}

impl AxisBound {
    /// Resolves against an axis of size `dim`: (first index, step, length); an index out of
    /// range is an error naming `op` and `axis`.
    pub fn resolve(&self, op: &str, axis: usize, dim: usize) -> Result<(usize, isize, usize)> {
        match *self {
            AxisBound::Index(i) => {
                let j = if i < 0 { i + dim as i64 } else { i };
                if !(0..dim as i64).contains(&j) {
                    return Err(Error::value(
                        op,
                        format!("index {i} is out of bounds for axis {axis} with size {dim}"),
                    ));
                }
                Ok((j as usize, 1, 1))
            }
            AxisBound::Range(spec) => {
                let (s, l) = spec.resolve(dim).map_err(|e| Error::value(op, e.message))?;
                Ok((s, spec.step as isize, l))
            }
        }
    }

    /// Whether this is the whole axis at any size (`:`).
    fn is_whole(&self) -> bool {
        *self == AxisBound::Range(SliceSpec::ALL)
    }
}

/// Per axis of `shape`: (starts, steps, lengths) of `bounds` (missing trailing axes whole).
pub(crate) fn resolve_bounds(
    op: &str,
    bounds: &[AxisBound],
    shape: &[usize],
) -> Result<(Vec<usize>, Vec<isize>, Vec<usize>)> {
    if bounds.len() > shape.len() {
        return Err(Error::value(op, format!("{} slices for an array with {} dimensions", bounds.len(), shape.len())));
    }
    let (mut start, mut step, mut len) = (vec![], vec![], vec![]);
    for (axis, &dim) in shape.iter().enumerate() {
        let (s, k, l) = bounds.get(axis).unwrap_or(&AxisBound::Range(SliceSpec::ALL)).resolve(op, axis, dim)?;
        start.push(s);
        step.push(k);
        len.push(l);
    }
    Ok((start, step, len))
}

/// The bounds to keep in a slice op for shapeless replay: the caller's, unless the traced
/// function read a shape before (then they may have been computed from it and stay fixed).
/// Outside compile tracing nothing needs keeping. (A slice empty at trace time drops them too:
/// ops after it may have taken shortcuts for empty inputs, such as softmax's.)
pub(crate) fn bounds_to_keep(bounds: &[AxisBound]) -> Option<Vec<AxisBound>> {
    let tracing = crate::transforms::compile::is_compile_tracing();
    (tracing && !crate::transforms::compile::shape_was_read()).then(|| bounds.to_vec())
}

/// A strided view, one [`SliceSpec`] per leading axis (missing trailing axes are taken whole).
/// The bounds are resolved now; a shapeless compiled function keeps them fixed (see
/// [`slice_written`] for bounds that follow new shapes).
pub fn slice(x: impl AsArray, specs: &[SliceSpec]) -> Result<Array> {
    let bounds: Vec<AxisBound> = specs.iter().map(|&s| AxisBound::Range(s)).collect();
    slice_with(x.as_array(), &bounds, None)
}

/// `x[bounds]` without dropping the indexed axes (they keep size 1): a strided view whose bounds
/// are kept as written, so a shapeless compiled function resolves them again at each call's
/// shapes (`x[1:]`, `x[:, :-1]`, `x[-1]` follow a new length as in eager). Use it for bounds
/// the caller wrote as numbers, not ones computed from a shape.
pub fn slice_written(x: impl AsArray, bounds: &[AxisBound]) -> Result<Array> {
    slice_with(x.as_array(), bounds, bounds_to_keep(bounds))
}

/// [`slice`] of `bounds`, keeping `written` in the op (see [`bounds_to_keep`]).
pub(crate) fn slice_with(x: Array, bounds: &[AxisBound], written: Option<Vec<AxisBound>>) -> Result<Array> {
    let (start, step, len) = resolve_bounds("slice", bounds, x.shape())?;
    let written = written.filter(|_| !len.contains(&0));
    let identity = len.as_slice() == x.shape() && step.iter().all(|&k| k == 1);
    if identity && written.as_ref().is_none_or(|w| w.iter().all(AxisBound::is_whole)) {
        return Ok(x);
    }
    Array::from_op(Op::Slice { start, step, len, written }, vec![x])
}

/// A view of `start..stop` with step 1 along one axis.
pub fn slice_axis(x: impl AsArray, axis: i64, start: i64, stop: i64) -> Result<Array> {
    let x = x.as_array();
    let a = normalize_axis("slice", axis, x.ndim())?;
    let mut specs = vec![SliceSpec::ALL; a + 1];
    specs[a] = SliceSpec::range(start, stop);
    slice(&x, &specs)
}
