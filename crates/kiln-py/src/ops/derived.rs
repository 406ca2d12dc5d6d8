//! Ops of mlx.core that kiln builds from other ops (`kiln::ops::derived` and
//! `kiln::ops::windows`), with mlx's signatures.

use super::Axes;
use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use kiln::{ops, Array};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `atleast_nd(*arys)`: one array back for one argument, a list for several.
fn each(py: Python<'_>, arys: &Bound<'_, PyTuple>, stream: Option<StreamOrDevice>, f: fn(Array) -> kiln::Result<Array>) -> PyResult<Py<PyAny>> {
    let out: Vec<PyArray> = arys
        .iter()
        .map(|a| {
            let a = a.extract::<Operand>()?.0;
            on(stream.as_ref(), || f(a)).map(PyArray::from)
        })
        .collect::<PyResult<_>>()?;
    Ok(match <[PyArray; 1]>::try_from(out) {
        Ok([one]) => one.into_pyobject(py)?.into_any().unbind(),
        Err(many) => many.into_pyobject(py)?.into_any().unbind(),
    })
}

macro_rules! atleast {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(*arys)`: each array with at least that many dimensions.")]
        #[pyfunction]
        #[pyo3(signature = (*arys, stream = None))]
        fn $name(py: Python<'_>, arys: &Bound<'_, PyTuple>, stream: Option<StreamOrDevice>) -> PyResult<Py<PyAny>> {
            each(py, arys, stream, |a| ops::$name(a))
        }
    )*};
}

atleast!(atleast_1d, atleast_2d, atleast_3d);

/// NaN replaced by `nan`, infinities by `posinf`/`neginf` (default: the dtype's extremes).
#[pyfunction]
#[pyo3(signature = (a, nan = 0.0, posinf = None, neginf = None, *, stream = None))]
fn nan_to_num(a: Operand, nan: f64, posinf: Option<f64>, neginf: Option<f64>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::nan_to_num(a.0, nan, posinf, neginf)).map(PyArray::from)
}

/// The sum of diagonal `offset` of the plane (`axis1`, `axis2`).
#[pyfunction]
#[pyo3(signature = (a, /, offset = 0, axis1 = 0, axis2 = 1, dtype = None, *, stream = None))]
fn trace(a: Operand, offset: i64, axis1: i64, axis2: i64, dtype: Option<PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::trace(a.0, offset, axis1, axis2, dtype.map(|d| d.0))).map(PyArray::from)
}

/// An `n` by `m` matrix with ones at and below diagonal `k` (float32 by default).
#[pyfunction]
#[pyo3(signature = (n, m = None, k = 0, dtype = None, *, stream = None))]
fn tri(n: usize, m: Option<usize>, k: i64, dtype: Option<PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::tri(n, m, k, super::creation::dtype_or_f32(dtype))).map(PyArray::from)
}

/// The Kronecker product of two non-empty arrays.
#[pyfunction]
#[pyo3(signature = (a, b, *, stream = None))]
fn kron(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::kron(a.0, b.0)).map(PyArray::from)
}

/// `(floor_divide(a, b), remainder(a, b))`.
#[pyfunction]
#[pyo3(signature = (a, b, *, stream = None))]
fn divmod(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let (q, r) = on(stream.as_ref(), || ops::divmod(a.0, b.0))?;
    Ok((q.into(), r.into()))
}

/// The `n`-th difference along `axis`.
#[pyfunction]
#[pyo3(signature = (a, /, n = 1, axis = -1, *, stream = None))]
fn diff(a: Operand, n: i64, axis: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let n = usize::try_from(n).map_err(|_| PyValueError::new_err(format!("diff: the order n must be non-negative, got {n}")))?;
    on(stream.as_ref(), || ops::diff(a.0, n, axis)).map(PyArray::from)
}

/// The slices of `x` along `axis`, that axis removed.
#[pyfunction]
#[pyo3(signature = (x, /, *, axis = 0, stream = None))]
fn unstack(x: Operand, axis: i64, stream: Option<StreamOrDevice>) -> PyResult<Vec<PyArray>> {
    Ok(on(stream.as_ref(), || ops::unstack(x.0, axis))?.into_iter().map(PyArray::from).collect())
}

/// The dot products of `a` (conjugated) and `b` along `axis`.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, axis = -1, stream = None))]
fn vecdot(a: Operand, b: Operand, axis: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::vecdot(a.0, b.0, axis)).map(PyArray::from)
}

/// How many elements are nonzero along `axis` (all when None), as int32.
#[pyfunction]
#[pyo3(signature = (a, /, *, axis = None, keepdims = false, stream = None))]
fn count_nonzero(a: Operand, axis: Option<Axes>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::count_nonzero(a.0, Axes::of(&axis), keepdims)).map(PyArray::from)
}

/// A zero-filled array of `a`'s shape and of `dtype` (default: `a`'s).
#[pyfunction]
#[pyo3(signature = (a, /, dtype = None, *, stream = None))]
fn empty_like(a: Operand, dtype: Option<PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::empty_like(a.0, dtype.map(|d| d.0))).map(PyArray::from)
}

/// The median along `axis` (all axes when None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
fn median(a: Operand, axis: Option<Axes>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::median(a.0, Axes::of(&axis), keepdims)).map(PyArray::from)
}

/// Where each value would be inserted into the 1-d `sorted_sequence` (`side` 'left' or 'right').
#[pyfunction]
#[pyo3(signature = (sorted_sequence, values, /, side = "left", *, stream = None))]
fn searchsorted(sorted_sequence: Operand, values: Operand, side: &str, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let right = match side {
        "left" => false,
        "right" => true,
        other => return Err(PyValueError::new_err(format!("searchsorted: side must be 'left' or 'right', got '{other}'"))),
    };
    on(stream.as_ref(), || ops::searchsorted(sorted_sequence.0, values.0, right)).map(PyArray::from)
}

/// `a`'s elements read as `shape` with element `strides` from `offset` (a gathered copy).
#[pyfunction]
#[pyo3(signature = (a, /, shape = None, strides = None, offset = 0, *, stream = None))]
fn as_strided(a: Operand, shape: Option<Vec<i64>>, strides: Option<Vec<i64>>, offset: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let shape = match shape {
        Some(s) if s.iter().any(|&d| d < 0) => return Err(PyValueError::new_err(format!("as_strided: shape {s:?} has a negative size"))),
        Some(s) => Some(s.into_iter().map(|d| d as usize).collect::<Vec<_>>()),
        None => None,
    };
    on(stream.as_ref(), || ops::as_strided(a.0, shape.as_deref(), strides.as_deref(), offset)).map(PyArray::from)
}

macro_rules! windows {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "(M)`: the window of `M` points, float32 (empty for `M < 1`).")]
        #[pyfunction]
        #[pyo3(signature = (M, *, stream = None))]
        #[allow(non_snake_case)] // numpy's and mlx's argument name
        fn $name(M: i64, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
            on(stream.as_ref(), || ops::$name(M.max(0) as usize)).map(PyArray::from)
        }
    )*};
}

windows!(bartlett, blackman, hamming, hanning);

/// Adds the derived ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(atleast_1d, m)?,
        wrap_pyfunction!(atleast_2d, m)?,
        wrap_pyfunction!(atleast_3d, m)?,
        wrap_pyfunction!(nan_to_num, m)?,
        wrap_pyfunction!(trace, m)?,
        wrap_pyfunction!(tri, m)?,
        wrap_pyfunction!(kron, m)?,
        wrap_pyfunction!(divmod, m)?,
        wrap_pyfunction!(diff, m)?,
        wrap_pyfunction!(unstack, m)?,
        wrap_pyfunction!(vecdot, m)?,
        wrap_pyfunction!(count_nonzero, m)?,
        wrap_pyfunction!(empty_like, m)?,
        wrap_pyfunction!(median, m)?,
        wrap_pyfunction!(searchsorted, m)?,
        wrap_pyfunction!(as_strided, m)?,
        wrap_pyfunction!(bartlett, m)?,
        wrap_pyfunction!(blackman, m)?,
        wrap_pyfunction!(hamming, m)?,
        wrap_pyfunction!(hanning, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
