//! Shape and layout ops: reshape, flatten, squeeze, transpose, broadcasting, joining, splitting,
//! padding, tiling, triangles, rolls, diagonals and the gather-style `take` family.

use super::{Axes, Sizes};
use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops::{self, SplitSpec};
use kiln::Array;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

fn wrap_all(v: Vec<Array>) -> Vec<PyArray> {
    v.into_iter().map(PyArray::from).collect()
}

/// The same data in a new shape (one dimension may be -1).
#[pyfunction]
#[pyo3(signature = (a, /, shape, *, stream = None))]
pub fn reshape(a: Operand, shape: Sizes, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::reshape(a.0, &shape.0)).map(PyArray::from)
}

/// `a` as a fresh row-contiguous array (mlx's `contiguous`). `allow_col_major` lets mlx keep a
/// column-major array uncopied; kiln always copies, which gives the same values.
#[pyfunction]
#[pyo3(signature = (a, /, allow_col_major = false, *, stream = None))]
pub fn contiguous(a: Operand, allow_col_major: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let _ = allow_col_major;
    on(stream.as_ref(), || ops::copy(a.0)).map(PyArray::from)
}

/// Axes `start_axis..=end_axis` merged into one.
#[pyfunction]
#[pyo3(signature = (a, /, start_axis = 0, end_axis = -1, *, stream = None))]
pub fn flatten(
    a: Operand,
    start_axis: i64,
    end_axis: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::flatten(a.0, start_axis, end_axis)).map(PyArray::from)
}

/// Axis `axis` split into `shape` (one dimension may be -1).
#[pyfunction]
#[pyo3(signature = (a, /, axis, shape, *, stream = None))]
pub fn unflatten(
    a: Operand,
    axis: i64,
    shape: Sizes,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::unflatten(a.0, axis, &shape.0)).map(PyArray::from)
}

/// Size-1 axes removed (all of them when `axis` is None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, *, stream = None))]
pub fn squeeze(
    a: Operand,
    axis: Option<Axes>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::squeeze(a.0, Axes::of(&axis))).map(PyArray::from)
}

/// Size-1 axes inserted at `axis`.
#[pyfunction]
#[pyo3(signature = (a, /, axis, *, stream = None))]
pub fn expand_dims(a: Operand, axis: Axes, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::expand_dims(a.0, &axis.0)).map(PyArray::from)
}

/// Axes permuted (reversed when `axes` is None).
#[pyfunction]
#[pyo3(signature = (a, /, axes = None, *, stream = None))]
pub fn transpose(
    a: Operand,
    axes: Option<Vec<i64>>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::transpose(a.0, axes.as_deref())).map(PyArray::from)
}

/// Two axes exchanged.
#[pyfunction]
#[pyo3(signature = (a, /, axis1, axis2, *, stream = None))]
pub fn swapaxes(
    a: Operand,
    axis1: i64,
    axis2: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::swapaxes(a.0, axis1, axis2)).map(PyArray::from)
}

/// Axis `source` moved to position `destination`.
#[pyfunction]
#[pyo3(signature = (a, /, source, destination, *, stream = None))]
pub fn moveaxis(
    a: Operand,
    source: i64,
    destination: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::moveaxis(a.0, source, destination)).map(PyArray::from)
}

/// A broadcast view with `shape`.
#[pyfunction]
#[pyo3(signature = (a, /, shape, *, stream = None))]
pub fn broadcast_to(a: Operand, shape: Sizes, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let dims = shape.dims("broadcast_to")?;
    on(stream.as_ref(), || ops::broadcast_to(a.0, &dims)).map(PyArray::from)
}

/// The arrays broadcast against each other.
#[pyfunction]
#[pyo3(signature = (*arrays, stream = None))]
pub fn broadcast_arrays(
    arrays: Vec<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<Vec<PyArray>> {
    let a = super::arrays(arrays);
    on(stream.as_ref(), || ops::broadcast_arrays(&a)).map(wrap_all)
}

/// The arrays joined along an existing `axis` (flattened first when `axis` is None).
#[pyfunction]
#[pyo3(signature = (arrays, /, axis = 0, *, stream = None))]
pub fn concatenate(
    arrays: Vec<Operand>,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let a = super::arrays(arrays);
    on(stream.as_ref(), || match axis {
        Some(ax) => ops::concatenate(&a, ax),
        None => ops::concatenate(
            &a.iter()
                .map(|x| ops::reshape(x, &[-1]))
                .collect::<kiln::Result<Vec<_>>>()?,
            0,
        ),
    })
    .map(PyArray::from)
}

/// `concatenate`'s other name.
#[pyfunction]
#[pyo3(signature = (arrays, /, axis = 0, *, stream = None))]
pub fn concat(
    arrays: Vec<Operand>,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    concatenate(arrays, axis, stream)
}

/// The arrays joined along a new `axis`.
#[pyfunction]
#[pyo3(signature = (arrays, /, axis = 0, *, stream = None))]
pub fn stack(arrays: Vec<Operand>, axis: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let a = super::arrays(arrays);
    on(stream.as_ref(), || ops::stack(&a, axis)).map(PyArray::from)
}

/// Views splitting `axis` into equal sections (an int) or at the given indices (a sequence).
#[pyfunction]
#[pyo3(signature = (a, /, indices_or_sections, axis = 0, *, stream = None))]
pub fn split(
    a: Operand,
    indices_or_sections: &Bound<'_, PyAny>,
    axis: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<Vec<PyArray>> {
    let spec = if indices_or_sections.is_instance_of::<PyInt>() {
        let n: i64 = indices_or_sections.extract()?;
        let n = usize::try_from(n)
            .map_err(|_| PyValueError::new_err(format!("split: the number of sections must be positive, got {n}")))?;
        SplitSpec::Sections(n)
    } else {
        SplitSpec::Indices(indices_or_sections.extract().map_err(|_| {
            PyTypeError::new_err("split: indices_or_sections must be an int or a sequence of ints")
        })?)
    };
    on(stream.as_ref(), || ops::split(a.0, spec, axis)).map(wrap_all)
}

/// Padding widths: an int, a `(before, after)` pair, or one pair per axis.
fn pad_widths(pad_width: &Bound<'_, PyAny>, ndim: usize) -> PyResult<Vec<(usize, usize)>> {
    if let Ok(w) = pad_width.extract::<usize>() {
        return Ok(vec![(w, w); ndim]);
    }
    if let Ok(v) = pad_width.extract::<Vec<usize>>() {
        match v[..] {
            [w] => return Ok(vec![(w, w); ndim]),
            [b, e] => return Ok(vec![(b, e); ndim]),
            _ => {}
        }
    }
    if let Ok(v) = pad_width.extract::<Vec<(usize, usize)>>() {
        if v.len() == 1 {
            return Ok(vec![v[0]; ndim]);
        }
        return Ok(v);
    }
    if let Ok(v) = pad_width.extract::<Vec<Vec<usize>>>() {
        if v.len() == 1 && v[0].len() == 1 {
            return Ok(vec![(v[0][0], v[0][0]); ndim]);
        }
    }
    Err(PyTypeError::new_err(
        "pad: pad_width must be an int, a (before, after) pair, or one pair per axis",
    ))
}

/// Pads with `constant_values` (mode "constant"), the edge values ("edge"), or the array
/// mirrored at its ends without ("reflect") or with ("symmetric") the edge element, as numpy.
#[pyfunction]
#[pyo3(signature = (a, pad_width, mode = "constant", constant_values = None, *, stream = None))]
pub fn pad(
    a: Operand,
    pad_width: &Bound<'_, PyAny>,
    mode: &str,
    constant_values: Option<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let widths = pad_widths(pad_width, a.0.ndim())?;
    let value = constant_values.map_or_else(|| Array::weak_int(0), |v| v.0);
    let source: fn(i64, i64) -> i64 = match mode {
        "constant" => return on(stream.as_ref(), || ops::pad(&a.0, &widths, &value)).map(PyArray::from),
        "edge" => |i, n| i.clamp(0, n - 1),
        "reflect" => |i, n| {
            let period = 2 * (n - 1);
            let m = if period == 0 { 0 } else { i.rem_euclid(period) };
            if m < n { m } else { period - m }
        },
        "symmetric" => |i, n| {
            let m = i.rem_euclid(2 * n);
            if m < n { m } else { 2 * n - 1 - m }
        },
        _ => {
            return Err(PyValueError::new_err(format!(
                "pad: mode '{mode}' is not supported; use 'constant', 'edge', 'reflect' or 'symmetric'"
            )))
        }
    };
    on(stream.as_ref(), || index_pad(&a.0, &widths, mode, source)).map(PyArray::from)
}

/// Pads each axis by gathering, for every position of the padded axis, the element `source`
/// maps it to (given the position relative to the axis start and the axis length).
fn index_pad(a: &Array, widths: &[(usize, usize)], mode: &str, source: fn(i64, i64) -> i64) -> kiln::Result<Array> {
    if widths.len() != a.ndim() {
        return Err(kiln::Error::value(
            "pad",
            format!("pad_width has {} pairs for an array of shape {:?}; give one pair per axis", widths.len(), a.shape()),
        ));
    }
    let mut x = a.clone();
    for (axis, &(before, after)) in widths.iter().enumerate() {
        if before + after == 0 {
            continue;
        }
        let n = x.shape()[axis] as i64;
        if n == 0 {
            return Err(kiln::Error::value(
                "pad",
                format!("{mode} padding cannot extend axis {axis} of shape {:?}: it is empty", a.shape()),
            ));
        }
        let positions = -(before as i64)..n + after as i64;
        let index: Vec<i64> = positions.map(|i| source(i, n)).collect();
        let len = index.len();
        x = ops::take(&x, Array::from_slice(&index, &[len])?, Some(axis as i64))?;
    }
    Ok(x)
}

/// The array repeated `reps` times along each axis.
#[pyfunction]
#[pyo3(signature = (a, reps, /, *, stream = None))]
pub fn tile(a: Operand, reps: Sizes, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let reps = reps.dims("tile")?;
    on(stream.as_ref(), || ops::tile(a.0, &reps)).map(PyArray::from)
}

/// Each element repeated `repeats` times along `axis` (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (array, repeats, axis = None, *, stream = None))]
pub fn repeat(
    array: Operand,
    repeats: usize,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::repeat(array.0, repeats, axis)).map(PyArray::from)
}

/// The lower triangle (diagonal `k` and below) of the last two axes.
#[pyfunction]
#[pyo3(signature = (x, k = 0, *, stream = None))]
pub fn tril(x: Operand, k: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::tril(x.0, k)).map(PyArray::from)
}

/// The upper triangle (diagonal `k` and above) of the last two axes.
#[pyfunction]
#[pyo3(signature = (x, k = 0, *, stream = None))]
pub fn triu(x: Operand, k: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::triu(x.0, k)).map(PyArray::from)
}

/// Elements shifted by `shift` along `axis` with wrap-around (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (a, shift, axis = None, *, stream = None))]
pub fn roll(
    a: Operand,
    shift: Axes,
    axis: Option<Axes>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shifts = shift.0;
    let Some(Axes(axes)) = axis else {
        // numpy rolls the flattened array by every shift in turn.
        return on(stream.as_ref(), || ops::roll(&a.0, shifts.iter().sum(), None)).map(PyArray::from);
    };
    // Shifts and axes pair up, one of them broadcast when it has one entry; an axis named twice
    // is rolled by the sum of its shifts.
    let pairs = match (shifts.len(), axes.len()) {
        (s, x) if s == x => shifts.iter().copied().zip(axes.iter().copied()).collect::<Vec<_>>(),
        (1, _) => axes.iter().map(|&x| (shifts[0], x)).collect(),
        (_, 1) => shifts.iter().map(|&s| (s, axes[0])).collect(),
        (s, x) => {
            return Err(PyValueError::new_err(format!(
                "roll: {s} shifts and {x} axes do not pair up; give as many of each, or one of either"
            )))
        }
    };
    let ndim = a.0.ndim() as i64;
    let mut total: Vec<(i64, i64)> = Vec::new();
    for (s, x) in pairs {
        let x = if (-ndim..0).contains(&x) { x + ndim } else { x };
        match total.iter_mut().find(|(_, t)| *t == x) {
            Some((sum, _)) => *sum += s,
            None => total.push((s, x)),
        }
    }
    let (shifts, axes): (Vec<i64>, Vec<i64>) = total.into_iter().unzip();
    on(stream.as_ref(), || ops::roll_axes(&a.0, &shifts, &axes)).map(PyArray::from)
}

/// `a` with its elements in reverse order along `axis` (an axis, several, or all when None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, *, stream = None))]
pub fn flip(a: Operand, axis: Option<Axes>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::flip(a.0, axis.as_ref().map(|Axes(ax)| ax.as_slice()))).map(PyArray::from)
}

/// The diagonal `offset` of the plane `(axis1, axis2)`, as a new last axis.
#[pyfunction]
#[pyo3(signature = (a, offset = 0, axis1 = 0, axis2 = 1, *, stream = None))]
pub fn diagonal(
    a: Operand,
    offset: i64,
    axis1: i64,
    axis2: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::diagonal(a.0, offset, axis1, axis2)).map(PyArray::from)
}

/// The `k`-th diagonal of a matrix, or a matrix with a vector on its `k`-th diagonal.
#[pyfunction]
#[pyo3(signature = (a, /, k = 0, *, stream = None))]
pub fn diag(a: Operand, k: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::diag(a.0, k)).map(PyArray::from)
}

/// Elements at `indices` along `axis` (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (a, /, indices, axis = None, *, stream = None))]
pub fn take(
    a: Operand,
    indices: Operand,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::take(a.0, indices.0, axis)).map(PyArray::from)
}

/// Elements picked along `axis` by `indices` of the same rank.
#[pyfunction]
#[pyo3(signature = (a, /, indices, axis, *, stream = None))]
pub fn take_along_axis(
    a: Operand,
    indices: Operand,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        ops::take_along_axis(a.0, indices.0, axis)
    })
    .map(PyArray::from)
}

/// A copy with `values` written along `axis` at `indices`.
#[pyfunction]
#[pyo3(signature = (a, /, indices, values, axis, *, stream = None))]
pub fn put_along_axis(
    a: Operand,
    indices: Operand,
    values: Operand,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        ops::put_along_axis(a.0, indices.0, values.0, axis)
    })
    .map(PyArray::from)
}

/// The start of each dynamic slice along `axes` (normalized), one 0-d index each, clamped so
/// that a slice of `sizes` fits (as JAX's dynamic slices are).
fn dynamic_starts(
    op: &str,
    a: &Array,
    starts: &Array,
    axes: &[usize],
    sizes: &[usize],
) -> kiln::Result<Vec<Array>> {
    if starts.ndim() != 1 || starts.shape()[0] != axes.len() || !starts.dtype().is_integer() {
        return Err(kiln::Error::value(
            op,
            format!(
                "start_indices must be a 1-d integer array with one entry per axis ({} axes), got {} of shape {:?}",
                axes.len(),
                starts.dtype(),
                starts.shape()
            ),
        ));
    }
    axes.iter()
        .enumerate()
        .map(|(i, &ax)| {
            let (dim, size) = (a.shape()[ax], sizes[ax]);
            let start = ops::take(starts, Array::scalar(i as i32), Some(0))?;
            ops::clip(
                &start,
                Some(&Array::weak_int(0) as &dyn ops::AsArray),
                Some(&Array::weak_int((dim - size) as i64) as &dyn ops::AsArray),
            )
        })
        .collect()
}

/// `axes` made non-negative, each checked against `ndim` (kiln's own axis check and message).
fn normalize_axes(op: &str, axes: &[i64], ndim: usize) -> kiln::Result<Vec<usize>> {
    axes.iter()
        .map(|&a| kiln::shape::normalize_axis(op, a, ndim))
        .collect()
}

fn as_i64(axes: &[usize]) -> Vec<i64> {
    axes.iter().map(|&a| a as i64).collect()
}

/// A slice of `slice_size` along `axes` starting at `start_indices`, an array (so the start can
/// be computed, even inside `compile`); other axes are taken whole.
#[pyfunction]
#[pyo3(signature = (a, /, start_indices, axes, slice_size, *, stream = None))]
pub fn slice(
    a: Operand,
    start_indices: Operand,
    axes: Vec<i64>,
    slice_size: Vec<usize>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        let x = &a.0;
        if slice_size.len() != axes.len() {
            return Err(kiln::Error::value(
                "slice",
                format!("{} slice sizes for {} axes", slice_size.len(), axes.len()),
            ));
        }
        let axes = normalize_axes("slice", &axes, x.ndim())?;
        let mut sizes = x.shape().to_vec();
        for (&ax, &n) in axes.iter().zip(&slice_size) {
            if n > sizes[ax] {
                return Err(kiln::Error::shape(
                    "slice",
                    format!(
                        "slice size {n} does not fit axis {ax} of shape {:?}",
                        x.shape()
                    ),
                ));
            }
            sizes[ax] = n;
        }
        let starts = dynamic_starts("slice", x, &start_indices.0, &axes, &sizes)?;
        ops::gather(x, &starts, &as_i64(&axes), &sizes)
    })
    .map(PyArray::from)
}

/// A copy of `a` with `update` written at `start_indices` along `axes` (a dynamic
/// `slice_update`; the update spans the other axes whole).
#[pyfunction]
#[pyo3(signature = (a, /, update, start_indices, axes, *, stream = None))]
pub fn slice_update(
    a: Operand,
    update: Operand,
    start_indices: Operand,
    axes: Vec<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        let (x, u) = (&a.0, &update.0);
        if u.ndim() != x.ndim() || u.shape().iter().zip(x.shape()).any(|(&n, &d)| n > d) {
            return Err(kiln::Error::shape(
                "slice_update",
                format!(
                    "update of shape {:?} must have the array's {} dimensions and fit in {:?}",
                    u.shape(),
                    x.ndim(),
                    x.shape()
                ),
            ));
        }
        let axes = normalize_axes("slice_update", &axes, x.ndim())?;
        let starts = dynamic_starts("slice_update", x, &start_indices.0, &axes, u.shape())?;
        ops::scatter(x, &starts, u, &as_i64(&axes))
    })
    .map(PyArray::from)
}

/// Coordinate grids from 1-d arrays (`indexing` "xy" or "ij"; `sparse` keeps them broadcastable).
#[pyfunction]
#[pyo3(signature = (*arrays, sparse = false, indexing = "xy", stream = None))]
pub fn meshgrid<'py>(
    py: Python<'py>,
    arrays: Vec<Operand>,
    sparse: bool,
    indexing: &str,
    stream: Option<StreamOrDevice>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, grids(arrays, sparse, indexing, stream)?)
}

/// [`meshgrid`]'s arrays.
fn grids(arrays: Vec<Operand>, sparse: bool, indexing: &str, stream: Option<StreamOrDevice>) -> PyResult<Vec<PyArray>> {
    let xy = match indexing {
        "xy" => true,
        "ij" => false,
        _ => {
            return Err(PyValueError::new_err(format!(
                "meshgrid: indexing must be 'xy' or 'ij', got '{indexing}'"
            )))
        }
    };
    let a = super::arrays(arrays);
    if !sparse {
        return on(stream.as_ref(), || ops::meshgrid(&a, xy)).map(wrap_all);
    }
    let n = a.len();
    on(stream.as_ref(), || {
        a.iter()
            .enumerate()
            .map(|(i, x)| {
                let pos = if xy && n >= 2 && i < 2 { 1 - i } else { i };
                let mut shape = vec![1i64; n];
                shape[pos] = -1;
                ops::reshape(x, &shape)
            })
            .collect::<kiln::Result<Vec<_>>>()
    })
    .map(wrap_all)
}

/// Adds the shape ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(reshape, m)?,
        wrap_pyfunction!(contiguous, m)?,
        wrap_pyfunction!(flatten, m)?,
        wrap_pyfunction!(unflatten, m)?,
        wrap_pyfunction!(squeeze, m)?,
        wrap_pyfunction!(expand_dims, m)?,
        wrap_pyfunction!(transpose, m)?,
        wrap_pyfunction!(swapaxes, m)?,
        wrap_pyfunction!(moveaxis, m)?,
        wrap_pyfunction!(broadcast_to, m)?,
        wrap_pyfunction!(broadcast_arrays, m)?,
        wrap_pyfunction!(concatenate, m)?,
        wrap_pyfunction!(concat, m)?,
        wrap_pyfunction!(stack, m)?,
        wrap_pyfunction!(split, m)?,
        wrap_pyfunction!(pad, m)?,
        wrap_pyfunction!(tile, m)?,
        wrap_pyfunction!(repeat, m)?,
        wrap_pyfunction!(tril, m)?,
        wrap_pyfunction!(triu, m)?,
        wrap_pyfunction!(roll, m)?,
        wrap_pyfunction!(flip, m)?,
        wrap_pyfunction!(diagonal, m)?,
        wrap_pyfunction!(diag, m)?,
        wrap_pyfunction!(take, m)?,
        wrap_pyfunction!(take_along_axis, m)?,
        wrap_pyfunction!(put_along_axis, m)?,
        wrap_pyfunction!(meshgrid, m)?,
        wrap_pyfunction!(slice, m)?,
        wrap_pyfunction!(slice_update, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
