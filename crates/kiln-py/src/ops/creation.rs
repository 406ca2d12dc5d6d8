//! Array creation: `zeros`, `ones`, `full`, the `_like` forms, `arange`, `linspace`, `eye`,
//! `identity`. Default dtypes follow mlx: float32, except `arange` of ints, which is int32.

use super::Sizes;
use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use kiln::{ops, Array, Dtype};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyInt;

/// The dtype asked for, float32 by default (mlx's default for creation and sampling).
pub fn dtype_or_f32(dtype: Option<PyDtype>) -> Dtype {
    dtype.map_or(Dtype::F32, |d| d.0)
}

/// An array of `shape` filled with zeros.
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, stream = None))]
pub fn zeros(
    shape: Sizes,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let dims = shape.dims("zeros")?;
    on(stream.as_ref(), || ops::zeros(&dims, dtype_or_f32(dtype))).map(PyArray::from)
}

/// An array of `shape` filled with ones.
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, stream = None))]
pub fn ones(
    shape: Sizes,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let dims = shape.dims("ones")?;
    on(stream.as_ref(), || ops::ones(&dims, dtype_or_f32(dtype))).map(PyArray::from)
}

/// An array of `shape` filled with `vals` (broadcast), of `dtype` or the values' dtype.
#[pyfunction]
#[pyo3(signature = (shape, vals, dtype = None, *, stream = None))]
pub fn full(
    shape: Sizes,
    vals: Operand,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let dims = shape.dims("full")?;
    on(stream.as_ref(), || {
        ops::full(&dims, vals.0, dtype.map(|d| d.0))
    })
    .map(PyArray::from)
}

/// Zeros with the shape of `a`, of `dtype` (default: `a`'s).
#[pyfunction]
#[pyo3(signature = (a, /, dtype = None, *, stream = None))]
pub fn zeros_like(a: Operand, dtype: Option<PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || in_dtype(ops::zeros_like(a.0)?, dtype)).map(PyArray::from)
}

/// Ones with the shape of `a`, of `dtype` (default: `a`'s).
#[pyfunction]
#[pyo3(signature = (a, /, dtype = None, *, stream = None))]
pub fn ones_like(a: Operand, dtype: Option<PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || in_dtype(ops::ones_like(a.0)?, dtype)).map(PyArray::from)
}

/// `x` converted to `dtype` when one is given.
fn in_dtype(x: Array, dtype: Option<PyDtype>) -> kiln::Result<Array> {
    match dtype {
        Some(d) => ops::astype(&x, d.0),
        None => Ok(x),
    }
}

/// Evenly spaced values in `[start, stop)`: `arange(stop)`, `arange(start, stop)` or
/// `arange(start, stop, step)` (positional or by keyword). Ints give int32 (int64 when a bound
/// does not fit) and any float gives float32 unless `dtype` is set.
#[pyfunction]
#[pyo3(signature = (start_or_stop = None, stop = None, step = None, dtype = None, *, start = None, stream = None))]
pub fn arange(
    start_or_stop: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    dtype: Option<PyDtype>,
    start: Option<&Bound<'_, PyAny>>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let (start, stop) = match (start, start_or_stop, stop) {
        (Some(s), None, Some(e)) | (Some(s), Some(e), None) | (None, Some(s), Some(e)) => (Some(s), e),
        (None, Some(e), None) | (None, None, Some(e)) => (None, e),
        _ => return Err(PyTypeError::new_err("arange: give stop, start and stop, or start, stop and step")),
    };
    let number = |o: &Bound<'_, PyAny>| -> PyResult<f64> {
        o.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(format!("arange: expected a number, got {}", o.get_type()))
        })
    };
    let given: Vec<&Bound<'_, PyAny>> = [start, Some(stop), step].into_iter().flatten().collect();
    let all_int = given.iter().all(|o| o.is_instance_of::<PyInt>());
    let fits_i32 = given.iter().all(|o| o.extract::<i32>().is_ok());
    let start = start.map(number).transpose()?.unwrap_or(0.0);
    let stop = number(stop)?;
    let step = step.map(number).transpose()?.unwrap_or(1.0);
    let inferred = match (all_int, fits_i32) {
        (true, true) => Dtype::I32,
        (true, false) => Dtype::I64,
        _ => Dtype::F32,
    };
    let dt = dtype.map_or(inferred, |d| d.0);
    let len = ((stop - start) / step).ceil();
    if len > i32::MAX as f64 {
        return Err(PyValueError::new_err(format!(
            "arange: {start} to {stop} by {step} is {len} elements, more than {} (mlx's limit for arange)",
            i32::MAX
        )));
    }
    on(stream.as_ref(), || ops::arange(start, stop, step, dt)).map(PyArray::from)
}

/// `num` evenly spaced values from `start` to `stop` (included unless `endpoint` is false).
#[pyfunction]
#[pyo3(signature = (start, stop, num = 50, endpoint = true, dtype = None, stream = None))]
pub fn linspace(
    start: f64,
    stop: f64,
    num: i64,
    endpoint: bool,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let num = usize::try_from(num)
        .map_err(|_| PyValueError::new_err(format!("linspace: num must be at least 0, got {num}")))?;
    on(stream.as_ref(), || {
        ops::linspace_with(start, stop, num, endpoint, dtype_or_f32(dtype))
    })
    .map(PyArray::from)
}

/// An `n` by `m` matrix with ones on diagonal `k`.
#[pyfunction]
#[pyo3(signature = (n, m = None, k = 0, dtype = None, *, stream = None))]
pub fn eye(
    n: usize,
    m: Option<usize>,
    k: i64,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::eye(n, m, k, dtype_or_f32(dtype))).map(PyArray::from)
}

/// The `n` by `n` identity matrix.
#[pyfunction]
#[pyo3(signature = (n, dtype = None, *, stream = None))]
pub fn identity(
    n: usize,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::identity(n, dtype_or_f32(dtype))).map(PyArray::from)
}

/// Adds the creation ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(zeros, m)?,
        wrap_pyfunction!(ones, m)?,
        wrap_pyfunction!(full, m)?,
        wrap_pyfunction!(zeros_like, m)?,
        wrap_pyfunction!(ones_like, m)?,
        wrap_pyfunction!(arange, m)?,
        wrap_pyfunction!(linspace, m)?,
        wrap_pyfunction!(eye, m)?,
        wrap_pyfunction!(identity, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
