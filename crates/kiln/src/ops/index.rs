//! Indexing ops: joining and splitting, padding and tiling, triangles and diagonals, and the
//! gather/scatter family.
//!
//! Index arrays may have any integer dtype. A negative index counts from the end of its axis; an
//! index still out of range after that is clamped to the nearest valid position (mlx's behaviour),
//! so reads and writes never leave the array.

use super::creation::{arange, full, positions_along, zeros};
use super::elementwise::{add, greater_equal, less_equal, where_};
use super::shape::{
    bounds_to_keep, broadcast_like, broadcast_to, expand_dims, reshape_to, resolve_bounds, slice, slice_with, squeeze,
    transpose, AxisBound, SliceSpec,
};
use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::{promote_types, Dtype};
use crate::error::{Error, Result};
use crate::primitive::{Op, ScatterOp};
use crate::shape::{broadcast_shapes, fmt_shape, normalize_axis, Shape};

/// Joins arrays along `axis`; dtypes promote to their common type.
pub fn concatenate(arrays: &[Array], axis: i64) -> Result<Array> {
    let op = "concatenate";
    let first = arrays.first().ok_or_else(|| Error::value(op, "needs at least one array"))?;
    let nd = first.ndim();
    if nd == 0 {
        return Err(Error::shape(op, "zero-dimensional arrays cannot be concatenated"));
    }
    let a = normalize_axis(op, axis, nd)?;
    let mut dtype = first.dtype();
    for x in arrays {
        let same = x.ndim() == nd && (0..nd).all(|i| i == a || x.shape()[i] == first.shape()[i]);
        if !same {
            return Err(Error::shape(
                op,
                format!(
                    "all arrays must match except along axis {a}, got {} and {}",
                    fmt_shape(first.shape()),
                    fmt_shape(x.shape())
                ),
            ));
        }
        dtype = promote_types(dtype, x.dtype());
    }
    if arrays.len() == 1 {
        return Ok(first.clone());
    }
    let inputs = arrays.iter().map(|x| cast(x, dtype)).collect::<Result<Vec<_>>>()?;
    Array::from_op(Op::Concatenate { axis: a }, inputs)
}

/// Joins arrays of equal shape along a new axis `axis`.
pub fn stack(arrays: &[Array], axis: i64) -> Result<Array> {
    let first = arrays.first().ok_or_else(|| Error::value("stack", "needs at least one array"))?;
    if let Some(x) = arrays.iter().find(|x| x.shape() != first.shape()) {
        return Err(Error::shape(
            "stack",
            format!("all arrays must have the same shape, got {} and {}", fmt_shape(first.shape()), fmt_shape(x.shape())),
        ));
    }
    let a = normalize_axis("stack", axis, first.ndim() + 1)? as i64;
    let expanded = arrays.iter().map(|x| expand_dims(x, &[a])).collect::<Result<Vec<_>>>()?;
    concatenate(&expanded, a)
}

/// How [`split`] divides an axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitSpec {
    /// This many equal parts; the axis length must divide evenly.
    Sections(usize),
    /// Boundaries between parts (negative counts from the end; clamped like slices).
    Indices(Vec<i64>),
}

/// Splits `x` along `axis` into views.
pub fn split(x: impl AsArray, sections: SplitSpec, axis: i64) -> Result<Vec<Array>> {
    let x = x.as_array();
    let a = normalize_axis("split", axis, x.ndim())?;
    let d = x.shape()[a];
    let bounds: Vec<i64> = match sections {
        SplitSpec::Sections(n) => {
            if n == 0 || !d.is_multiple_of(n) {
                return Err(Error::value(
                    "split",
                    format!("axis {a} of size {d} cannot be split into {n} equal sections; pass indices instead"),
                ));
            }
            (1..n).map(|i| (i * d / n) as i64).collect()
        }
        SplitSpec::Indices(v) => v,
    };
    let mut starts = vec![0i64];
    starts.extend(bounds);
    let mut out = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let mut specs = vec![SliceSpec::ALL; a + 1];
        specs[a] = SliceSpec { start: Some(s), stop: starts.get(i + 1).copied(), step: 1 };
        out.push(slice(&x, &specs)?);
    }
    Ok(out)
}

/// Constant padding: `pad_width` holds (before, after) per axis, or one pair for every axis.
pub fn pad(x: impl AsArray, pad_width: &[(usize, usize)], value: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    let nd = x.ndim();
    let widths: Vec<(usize, usize)> = match pad_width.len() {
        n if n == nd => pad_width.to_vec(),
        1 => vec![pad_width[0]; nd],
        n => {
            return Err(Error::value(
                "pad",
                format!("needs one (before, after) pair per axis or one for all; got {n} for shape {}", fmt_shape(x.shape())),
            ))
        }
    };
    let shape: Vec<usize> = x.shape().iter().zip(&widths).map(|(&d, &(b, e))| d + b + e).collect();
    let base = full(&shape, value, Some(x.dtype()))?;
    let specs: Vec<SliceSpec> =
        widths.iter().zip(x.shape()).map(|(&(b, _), &d)| SliceSpec::range(b as i64, (b + d) as i64)).collect();
    slice_update(&base, &x, &specs)
}

/// Repeats the whole array `reps[i]` times along each axis (numpy's tile).
pub fn tile(x: impl AsArray, reps: &[usize]) -> Result<Array> {
    let x = x.as_array();
    let nd = x.ndim().max(reps.len());
    let pad1 = |v: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, nd - v.len()).chain(v.iter().copied()).collect() };
    let (shape, reps) = (pad1(x.shape()), pad1(reps));
    let inter: Shape = shape.iter().flat_map(|&d| [1, d]).collect();
    let wide: Vec<usize> = shape.iter().zip(&reps).flat_map(|(&d, &r)| [r, d]).collect();
    let out: Shape = shape.iter().zip(&reps).map(|(&d, &r)| d * r).collect();
    reshape_to(&broadcast_to(reshape_to(&x, inter)?, &wide)?, out)
}

/// Repeats each element `repeats` times along `axis` (the flattened array when `None`).
pub fn repeat(x: impl AsArray, repeats: usize, axis: Option<i64>) -> Result<Array> {
    let x = x.as_array();
    let (x, a) = match axis {
        None => (reshape_to(&x, Shape::from_slice(&[x.size()]))?, 0),
        Some(ax) => {
            let a = normalize_axis("repeat", ax, x.ndim())?;
            (x, a)
        }
    };
    let e = expand_dims(&x, &[a as i64 + 1])?;
    let mut wide = e.shape().to_vec();
    wide[a + 1] = repeats;
    let mut out: Shape = x.shape().into();
    out[a] *= repeats;
    reshape_to(&broadcast_to(&e, &wide)?, out)
}

/// `x` with zeros outside the lower (`col <= row + k`) or upper (`col >= row + k`) triangle of the
/// last two axes, via a comparison of row and column aranges.
fn triangle(op: &str, x: Array, k: i64, lower: bool) -> Result<Array> {
    if x.ndim() < 2 {
        return Err(Error::shape(op, format!("needs at least two dimensions, got {}", fmt_shape(x.shape()))));
    }
    let nd = x.ndim();
    let (n, m) = (x.shape()[nd - 2], x.shape()[nd - 1]);
    let rows = reshape_to(&arange(0.0, n as f64, 1.0, Dtype::I64)?, Shape::from_slice(&[n, 1]))?;
    let cols = reshape_to(&arange(0.0, m as f64, 1.0, Dtype::I64)?, Shape::from_slice(&[1, m]))?;
    let shifted = add(&rows, k)?;
    let mask = if lower { less_equal(&cols, &shifted)? } else { greater_equal(&cols, &shifted)? };
    let z = zeros(&[], x.dtype())?;
    where_(&mask, &x, &z)
}

/// The lower triangle of the last two axes: entries with `col <= row + k` kept, others zero.
pub fn tril(x: impl AsArray, k: i64) -> Result<Array> {
    triangle("tril", x.as_array(), k, true)
}

/// The upper triangle of the last two axes: entries with `col >= row + k` kept, others zero.
pub fn triu(x: impl AsArray, k: i64) -> Result<Array> {
    triangle("triu", x.as_array(), k, false)
}

/// Checks that index arrays are integers.
fn check_indices(op: &str, indices: &[Array]) -> Result<()> {
    if let Some(i) = indices.iter().find(|i| !i.dtype().is_integer()) {
        return Err(Error::dtype(op, format!("indices must be integers, got {}; cast with astype", i.dtype())));
    }
    Ok(())
}

/// Resolves distinct axes for index arrays.
fn index_axes(op: &str, x: &Array, indices: &[Array], axes: &[i64]) -> Result<Vec<usize>> {
    if axes.len() != indices.len() {
        return Err(Error::value(op, format!("{} index arrays for {} axes", indices.len(), axes.len())));
    }
    let ax = axes.iter().map(|&a| normalize_axis(op, a, x.ndim())).collect::<Result<Vec<_>>>()?;
    let mut seen = ax.clone();
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::axis(op, format!("repeated axis in {axes:?}")));
    }
    Ok(ax)
}

/// The broadcast shape of index arrays.
fn index_batch(op: &str, indices: &[Array]) -> Result<Shape> {
    let mut b = Shape::new();
    for i in indices {
        b = broadcast_shapes(op, &b, i.shape())?;
    }
    Ok(b)
}

/// mlx's general gather: for every position of the broadcast indices, the slice of `slice_sizes`
/// starting at `indices[i]` along `axes[i]` (and 0 elsewhere). Output shape: indices ++ slice_sizes.
pub fn gather(x: impl AsArray, indices: &[Array], axes: &[i64], slice_sizes: &[usize]) -> Result<Array> {
    let x = x.as_array();
    check_indices("gather", indices)?;
    let ax = index_axes("gather", &x, indices, axes)?;
    if slice_sizes.len() != x.ndim() || slice_sizes.iter().zip(x.shape()).any(|(&s, &d)| s > d) {
        return Err(Error::shape(
            "gather",
            format!("slice sizes {slice_sizes:?} must give one size per axis, within shape {}", fmt_shape(x.shape())),
        ));
    }
    index_batch("gather", indices)?;
    let mut inputs = vec![x];
    inputs.extend(indices.iter().cloned());
    Array::from_op(Op::Gather { axes: ax, slice_sizes: slice_sizes.to_vec() }, inputs)
}

/// The scatter family's constructor: `updates` (shape indices ++ one slice dim per axis of `x`)
/// combined by `op` into a copy of `x` at the indexed slices.
fn scatter_op(name: &str, x: Array, indices: &[Array], updates: Array, axes: &[i64], op: ScatterOp) -> Result<Array> {
    check_indices(name, indices)?;
    let ax = index_axes(name, &x, indices, axes)?;
    let b = index_batch(name, indices)?;
    let nb = b.len();
    let ok = updates.ndim() == nb + x.ndim()
        && broadcast_shapes(name, &b, &updates.shape()[..nb]).is_ok_and(|s| s == b)
        && updates.shape()[nb..].iter().zip(x.shape()).all(|(&u, &d)| u <= d);
    if !ok {
        return Err(Error::shape(
            name,
            format!(
                "updates of shape {} must have the indices' shape {} followed by one slice size per axis of {}",
                fmt_shape(updates.shape()),
                fmt_shape(&b),
                fmt_shape(x.shape())
            ),
        ));
    }
    let mut full_shape = b.clone();
    full_shape.extend_from_slice(&updates.shape()[nb..]);
    let updates = broadcast_to(cast(&updates, x.dtype())?, &full_shape)?;
    let mut inputs = vec![x];
    inputs.extend(indices.iter().map(|i| broadcast_to(i, &b)).collect::<Result<Vec<_>>>()?);
    inputs.push(updates);
    Array::from_op(Op::Scatter { axes: ax, op }, inputs)
}

macro_rules! scatter_fns {
    ($($(#[$doc:meta])* $name:ident => $op:ident,)*) => {$(
        $(#[$doc])*
        pub fn $name(x: impl AsArray, indices: &[Array], updates: impl AsArray, axes: &[i64]) -> Result<Array> {
            scatter_op(stringify!($name), x.as_array(), indices, updates.as_array(), axes, ScatterOp::$op)
        }
    )*};
}

scatter_fns! {
    /// Writes `updates` at the indexed slices (the last of duplicate indices wins).
    scatter => Set,
    /// Adds `updates` at the indexed slices; duplicate indices accumulate.
    scatter_add => Add,
    /// Multiplies by `updates` at the indexed slices; duplicates accumulate.
    scatter_prod => Prod,
    /// Maximum with `updates` at the indexed slices.
    scatter_max => Max,
    /// Minimum with `updates` at the indexed slices.
    scatter_min => Min,
}

/// A copy of `x` with the region selected by `specs` (as in [`slice`]) replaced by `update`
/// (broadcast to the region, cast to `x`'s dtype).
pub fn slice_update(x: impl AsArray, update: impl AsArray, specs: &[SliceSpec]) -> Result<Array> {
    let bounds: Vec<AxisBound> = specs.iter().map(|&s| AxisBound::Range(s)).collect();
    slice_update_with(x.as_array(), update.as_array(), &bounds, None)
}

/// [`slice_update`] of the region `x[bounds]` (indexed axes kept with size 1), its bounds kept as
/// written so a shapeless compiled function resolves them again at each call's shapes, as
/// [`slice_written`] does.
pub fn slice_update_written(x: impl AsArray, update: impl AsArray, bounds: &[AxisBound]) -> Result<Array> {
    slice_update_with(x.as_array(), update.as_array(), bounds, bounds_to_keep(bounds))
}

/// [`slice_update`] of `bounds`; `written` (see [`bounds_to_keep`]) keeps them in the op so a
/// shapeless replay resolves them again, and the update then broadcasts against the region at
/// each call's shapes; `None` fixes them.
fn slice_update_with(x: Array, update: Array, bounds: &[AxisBound], written: Option<Vec<AxisBound>>) -> Result<Array> {
    let (start, step, len) = resolve_bounds("slice_update", bounds, x.shape())?;
    let written = written.filter(|_| !len.contains(&0));
    if broadcast_shapes("slice_update", update.shape(), &len).map_or(true, |s| s.as_slice() != len.as_slice()) {
        return Err(Error::shape(
            "slice_update",
            format!("update of shape {} does not broadcast to the region {}", fmt_shape(update.shape()), fmt_shape(&len)),
        ));
    }
    let update = cast(&update, x.dtype())?;
    let update = if written.is_some() {
        // The region's shape may change in a shapeless replay: broadcast against the region
        // (simplification removes the broadcast where it is an identity).
        broadcast_like(&update, &slice_with(x.clone(), bounds, written.clone())?)?
    } else {
        broadcast_to(&update, &len)?
    };
    Array::from_op(Op::SliceUpdate { start, step, written }, vec![x, update])
}

/// `x` and an axis: `x` flattened with axis 0 when `axis` is `None`.
fn axis_or_flat(op: &str, x: Array, axis: Option<i64>) -> Result<(Array, usize)> {
    match axis {
        None => Ok((reshape_to(&x, Shape::from_slice(&[x.size()]))?, 0)),
        Some(a) => {
            let a = normalize_axis(op, a, x.ndim())?;
            Ok((x, a))
        }
    }
}

/// Elements of `x` at `indices` along `axis` (of the flattened array when `None`); the result has
/// the indices' shape in place of that axis.
pub fn take(x: impl AsArray, indices: impl AsArray, axis: Option<i64>) -> Result<Array> {
    let (x, a) = axis_or_flat("take", x.as_array(), axis)?;
    let idx = indices.as_array();
    check_indices("take", std::slice::from_ref(&idx))?;
    if x.shape()[a] == 0 && idx.size() > 0 {
        return Err(Error::value(
            "take",
            format!("cannot take indices of shape {} from axis {a} of size 0 (array shape {})", fmt_shape(idx.shape()), fmt_shape(x.shape())),
        ));
    }
    let mut sizes = x.shape().to_vec();
    sizes[a] = 1;
    let ni = idx.ndim();
    let g = gather(&x, std::slice::from_ref(&idx), &[a as i64], &sizes)?;
    let g = squeeze(&g, Some(&[(ni + a) as i64]))?;
    let perm: Vec<i64> = (ni..ni + a).chain(0..ni).chain(ni + a..g.ndim()).map(|v| v as i64).collect();
    transpose(&g, Some(&perm))
}

/// Index arrays for every axis of `x` (an arange on each axis but `a`, where `indices` go),
/// broadcast to their common shape.
fn along_axis_indices(op: &str, x: &Array, indices: &Array, a: usize) -> Result<Vec<Array>> {
    check_indices(op, std::slice::from_ref(indices))?;
    if indices.ndim() != x.ndim() {
        return Err(Error::shape(
            op,
            format!("indices of shape {} must have as many dimensions as {}", fmt_shape(indices.shape()), fmt_shape(x.shape())),
        ));
    }
    let nd = x.ndim();
    let mut out = Vec::with_capacity(nd);
    for i in 0..nd {
        if i == a {
            out.push(indices.clone());
        } else {
            out.push(positions_along(x.shape()[i], i, nd, Dtype::I64)?);
        }
    }
    super::shape::broadcast_arrays(&out).map_err(|e| Error::shape(op, e.message))
}

/// Values of `x` at `indices` along `axis`; indices broadcast against `x` on the other axes.
pub fn take_along_axis(x: impl AsArray, indices: impl AsArray, axis: Option<i64>) -> Result<Array> {
    let op = "take_along_axis";
    let (x, a) = axis_or_flat(op, x.as_array(), axis)?;
    let idx = indices.as_array();
    let idx = if axis.is_none() { reshape_to(&idx, Shape::from_slice(&[idx.size()]))? } else { idx };
    let all = along_axis_indices(op, &x, &idx, a)?;
    let b: Shape = all[0].shape().into();
    let axes: Vec<i64> = (0..x.ndim() as i64).collect();
    let g = gather(&x, &all, &axes, &vec![1; x.ndim()])?;
    reshape_to(&g, b)
}

/// A copy of `x` with `values` written at `indices` along `axis` (of the flattened array when
/// `None`; the result then keeps `x`'s shape, as in mlx).
pub fn put_along_axis(x: impl AsArray, indices: impl AsArray, values: impl AsArray, axis: Option<i64>) -> Result<Array> {
    scatter_along_axis("put_along_axis", x.as_array(), indices, values, axis, ScatterOp::Set)
}

/// A copy of `x` with `values` added at `indices` along `axis` (duplicates accumulate): the
/// derivative of [`take_along_axis`], used by the sort and scan derivatives.
pub(crate) fn add_along_axis(x: &Array, indices: &Array, values: &Array, axis: usize) -> Result<Array> {
    scatter_along_axis("add_along_axis", x.clone(), indices, values, Some(axis as i64), ScatterOp::Add)
}

fn scatter_along_axis(
    op: &str,
    x: Array,
    indices: impl AsArray,
    values: impl AsArray,
    axis: Option<i64>,
    combine: ScatterOp,
) -> Result<Array> {
    let shape: Shape = x.shape().into();
    let (x, a) = axis_or_flat(op, x, axis)?;
    let idx = indices.as_array();
    let idx = if axis.is_none() { reshape_to(&idx, Shape::from_slice(&[idx.size()]))? } else { idx };
    if x.size() == 0 && idx.ndim() == x.ndim() {
        // Nothing to write into: x as it is, whatever the indices' dtype (as mlx).
        return reshape_to(&x, shape);
    }
    let all = along_axis_indices(op, &x, &idx, a)?;
    let mut b: Vec<usize> = all[0].shape().to_vec();
    let values = values.as_array();
    let values = broadcast_to(&values, &b).map_err(|e| Error::shape(op, e.message))?;
    b.extend(std::iter::repeat_n(1, x.ndim()));
    let values = reshape_to(&values, b.into())?;
    let axes: Vec<i64> = (0..x.ndim() as i64).collect();
    let out = scatter_op(op, x, &all, values, &axes, combine)?;
    // With no axis the scatter ran on the flattened array; mlx hands it back in x's shape.
    if axis.is_none() { reshape_to(&out, shape) } else { Ok(out) }
}

/// Reverses the order of elements along `axes` (all axes when `None`): a negative-step view.
pub fn flip(x: impl AsArray, axes: Option<&[i64]>) -> Result<Array> {
    let x = x.as_array();
    let ax: Vec<usize> = match axes {
        None => (0..x.ndim()).collect(),
        Some(a) => crate::shape::normalize_axes("flip", a, x.ndim())?,
    };
    let specs: Vec<SliceSpec> = (0..x.ndim())
        .map(|i| if ax.contains(&i) { SliceSpec { start: None, stop: None, step: -1 } } else { SliceSpec::ALL })
        .collect();
    slice(&x, &specs)
}

/// Shifts elements by `shift` along `axis` with wrap-around (of the flattened array, reshaped
/// back, when `None`).
pub fn roll(x: impl AsArray, shift: i64, axis: Option<i64>) -> Result<Array> {
    let x = x.as_array();
    let (flat, a) = axis_or_flat("roll", x.clone(), axis)?;
    let n = flat.shape()[a] as i64;
    if n == 0 {
        return Ok(x);
    }
    let s = shift.rem_euclid(n);
    if s == 0 {
        return Ok(x);
    }
    let part = |lo: i64, hi: i64| -> Result<Array> {
        let mut specs = vec![SliceSpec::ALL; a + 1];
        specs[a] = SliceSpec::range(lo, hi);
        slice(&flat, &specs)
    };
    let out = concatenate(&[part(n - s, n)?, part(0, n - s)?], a as i64)?;
    reshape_to(&out, x.shape().into())
}

/// Rolls along several axes at once, as numpy and mlx do for tuples: `shifts[i]` along
/// `axes[i]` (one shift applies to every axis; an axis named twice rolls by the sum).
pub fn roll_axes(x: impl AsArray, shifts: &[i64], axes: &[i64]) -> Result<Array> {
    let x = x.as_array();
    if shifts.len() != axes.len() && shifts.len() != 1 {
        return Err(Error::value(
            "roll",
            format!("got {} shifts for {} axes; give one shift, or one per axis", shifts.len(), axes.len()),
        ));
    }
    axes.iter().enumerate().try_fold(x, |out, (i, &axis)| roll(out, shifts[i.min(shifts.len() - 1)], Some(axis)))
}

/// The diagonal at `offset` of the planes spanned by `axis1` and `axis2`, as a new last axis.
pub fn diagonal(x: impl AsArray, offset: i64, axis1: i64, axis2: i64) -> Result<Array> {
    let x = x.as_array();
    let op = "diagonal";
    if x.ndim() < 2 {
        return Err(Error::shape(op, format!("needs at least two dimensions, got {}", fmt_shape(x.shape()))));
    }
    let a1 = normalize_axis(op, axis1, x.ndim())?;
    let a2 = normalize_axis(op, axis2, x.ndim())?;
    if a1 == a2 {
        return Err(Error::axis(op, format!("axis1 and axis2 must differ, both are {a1}")));
    }
    let (r0, c0) = (0.max(-offset), 0.max(offset));
    let len = (x.shape()[a1] as i64 - r0).min(x.shape()[a2] as i64 - c0).max(0);
    let rest: Vec<usize> = (0..x.ndim()).filter(|&i| i != a1 && i != a2).map(|i| x.shape()[i]).collect();
    let mut out_shape = rest.clone();
    out_shape.push(len as usize);
    if len == 0 {
        return zeros(&out_shape, x.dtype());
    }
    let rows = arange(r0 as f64, (r0 + len) as f64, 1.0, Dtype::I64)?;
    let cols = arange(c0 as f64, (c0 + len) as f64, 1.0, Dtype::I64)?;
    let mut sizes = x.shape().to_vec();
    sizes[a1] = 1;
    sizes[a2] = 1;
    let g = gather(&x, &[rows, cols], &[a1 as i64, a2 as i64], &sizes)?;
    let g = squeeze(&g, Some(&[1 + a1 as i64, 1 + a2 as i64]))?;
    let perm: Vec<i64> = (1..g.ndim() as i64).chain([0]).collect();
    transpose(&g, Some(&perm))
}

/// A 1-d `x` as the `k`-th diagonal of a square matrix, or the `k`-th diagonal of a 2-d `x`.
pub fn diag(x: impl AsArray, k: i64) -> Result<Array> {
    let x = x.as_array();
    match x.ndim() {
        1 => {
            let len = x.shape()[0];
            let n = len + k.unsigned_abs() as usize;
            let (r0, c0) = (0.max(-k) as f64, 0.max(k) as f64);
            let rows = arange(r0, r0 + len as f64, 1.0, Dtype::I64)?;
            let cols = arange(c0, c0 + len as f64, 1.0, Dtype::I64)?;
            let base = zeros(&[n, n], x.dtype())?;
            if len == 0 {
                return Ok(base);
            }
            let upd = reshape_to(&x, Shape::from_slice(&[len, 1, 1]))?;
            scatter_op("diag", base, &[rows, cols], upd, &[0, 1], ScatterOp::Set)
        }
        2 => diagonal(&x, k, 0, 1),
        _ => Err(Error::shape("diag", format!("needs a 1-d or 2-d array, got {}", fmt_shape(x.shape())))),
    }
}

/// `a` with the positions where `mask` is true replaced, in row-major order, by consecutive rows
/// of `values` (mlx's `a[mask] = values`). `mask` is boolean with the shape of `a`'s leading
/// axes; `values` has one row per replaced position along its first axis (its other axes
/// broadcast to `a`'s remaining ones), or broadcasts to every position (a scalar, say). With
/// fewer rows than true positions the last row repeats, as out-of-range gather indices clamp.
/// Composed of an exclusive cumulative sum, a take and a where, so it differentiates, batches and
/// compiles as they do.
pub fn masked_scatter(a: impl AsArray, mask: impl AsArray, values: impl AsArray) -> Result<Array> {
    let (a, mask, values) = (a.as_array(), mask.as_array(), values.as_array());
    let op = "masked_scatter";
    if mask.dtype() != Dtype::Bool {
        return Err(Error::dtype(op, format!("the mask must be boolean, got {}", mask.dtype())));
    }
    let k = mask.ndim();
    if k > a.ndim() || mask.shape() != &a.shape()[..k] {
        return Err(Error::shape(
            op,
            format!(
                "the mask's shape {} must be the leading axes of the array's shape {}",
                fmt_shape(mask.shape()),
                fmt_shape(a.shape())
            ),
        ));
    }
    let rest = &a.shape()[k..];
    if values.ndim() > rest.len() + 1 {
        return Err(Error::shape(
            op,
            format!(
                "values of shape {} have more axes than one per replaced position plus the array's remaining axes {}",
                fmt_shape(values.shape()),
                fmt_shape(rest)
            ),
        ));
    }
    let count = if values.ndim() == rest.len() + 1 { values.shape()[0] } else { mask.size() };
    let rows_shape: Vec<usize> = std::iter::once(count).chain(rest.iter().copied()).collect();
    let rows = broadcast_to(cast(&values, a.dtype())?, &rows_shape).map_err(|e| Error::shape(op, e.message))?;
    if mask.size() == 0 {
        return Ok(a);
    }
    if count == 0 {
        return Err(Error::value(op, "no values to write: give at least one row of values"));
    }
    let flat = reshape_to(&mask, Shape::from_slice(&[mask.size()]))?;
    let position = super::cumsum(cast(&flat, Dtype::I32)?, Some(0), false, false)?;
    let taken = take(&rows, where_(&flat, &position, 0)?, Some(0))?;
    let mask_shape: Vec<usize> = mask.shape().iter().copied().chain(rest.iter().map(|_| 1)).collect();
    where_(reshape_to(&mask, mask_shape.into())?, reshape_to(&taken, a.shape().into())?, &a)
}
