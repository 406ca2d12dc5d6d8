//! Sorting, partitioning and `topk`.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops;
use pyo3::prelude::*;

/// Sorted along `axis` (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = -1, *, stream = None))]
pub fn sort(a: Operand, axis: Option<i64>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::sort(a.0, axis)).map(PyArray::from)
}

/// The indices that sort along `axis` (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = -1, *, stream = None))]
pub fn argsort(a: Operand, axis: Option<i64>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::argsort(a.0, axis)).map(PyArray::from)
}

/// Partitioned along `axis` around the element of sorted position `kth`.
#[pyfunction]
#[pyo3(signature = (a, /, kth, axis = -1, *, stream = None))]
pub fn partition(
    a: Operand,
    kth: i64,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::partition(a.0, kth, axis)).map(PyArray::from)
}

/// The indices that partition along `axis` around sorted position `kth`.
#[pyfunction]
#[pyo3(signature = (a, /, kth, axis = -1, *, stream = None))]
pub fn argpartition(
    a: Operand,
    kth: i64,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::argpartition(a.0, kth, axis)).map(PyArray::from)
}

/// The `k` largest elements along `axis` (unordered, as mlx).
#[pyfunction]
#[pyo3(signature = (a, /, k, axis = -1, *, stream = None))]
pub fn topk(
    a: Operand,
    k: usize,
    axis: Option<i64>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::topk(a.0, k, axis)).map(PyArray::from)
}

/// Adds the sorting ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(sort, m)?,
        wrap_pyfunction!(argsort, m)?,
        wrap_pyfunction!(partition, m)?,
        wrap_pyfunction!(argpartition, m)?,
        wrap_pyfunction!(topk, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
