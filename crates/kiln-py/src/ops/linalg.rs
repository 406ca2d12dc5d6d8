//! Products: `matmul`, `addmm`, `gather_mm`, `block_masked_mm`, `segmented_mm`, `hadamard_transform`, `outer`, `inner`, `tensordot`, `einsum`, `einsum_path`.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops::{self, TensordotAxes};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// Matrix product with numpy's broadcasting and 1-d rules.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
pub fn matmul(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::matmul(a.0, b.0)).map(PyArray::from)
}

/// `alpha * (a @ b) + beta * c`.
#[pyfunction]
#[pyo3(signature = (c, a, b, /, alpha = 1.0, beta = 1.0, *, stream = None))]
pub fn addmm(
    c: Operand,
    a: Operand,
    b: Operand,
    alpha: f64,
    beta: f64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::addmm(c.0, a.0, b.0, alpha, beta)).map(PyArray::from)
}

/// Products of the matrices picked from the batches of `a` and `b` by index arrays (mlx's
/// `gather_mm`).
#[pyfunction]
#[pyo3(signature = (a, b, /, lhs_indices = None, rhs_indices = None, *, sorted_indices = false, stream = None))]
pub fn gather_mm(
    a: Operand,
    b: Operand,
    lhs_indices: Option<Operand>,
    rhs_indices: Option<Operand>,
    sorted_indices: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let (lhs, rhs) = (lhs_indices.map(|i| i.0), rhs_indices.map(|i| i.0));
    on(stream.as_ref(), || ops::gather_mm(a.0, b.0, lhs.as_ref(), rhs.as_ref(), sorted_indices)).map(PyArray::from)
}

/// A matrix product masked in square blocks (mlx's `block_masked_mm`).
#[pyfunction]
#[pyo3(signature = (a, b, /, block_size = 64, mask_out = None, mask_lhs = None, mask_rhs = None, *, stream = None))]
pub fn block_masked_mm(
    a: Operand,
    b: Operand,
    block_size: usize,
    mask_out: Option<Operand>,
    mask_lhs: Option<Operand>,
    mask_rhs: Option<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let [out, lhs, rhs] = [mask_out, mask_lhs, mask_rhs].map(|m| m.map(|m| m.0));
    on(stream.as_ref(), || ops::block_masked_mm(a.0, b.0, block_size, out.as_ref(), lhs.as_ref(), rhs.as_ref()))
        .map(PyArray::from)
}

/// Products of `a`'s and `b`'s slices along the inner axis, one per segment (mlx's
/// `segmented_mm`).
#[pyfunction]
#[pyo3(signature = (a, b, /, segments, *, stream = None))]
pub fn segmented_mm(a: Operand, b: Operand, segments: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::segmented_mm(a.0, b.0, &segments.0)).map(PyArray::from)
}

/// The Walsh-Hadamard transform of the last axis (sizes m·2^k, m in 1, 12, 20, 28), times
/// `scale` (default 1/√n).
#[pyfunction]
#[pyo3(signature = (a, /, scale = None, *, stream = None))]
pub fn hadamard_transform(a: Operand, scale: Option<f64>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::hadamard_transform(a.0, scale)).map(PyArray::from)
}

/// Outer product of the flattened inputs.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
pub fn outer(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::outer(a.0, b.0)).map(PyArray::from)
}

/// Sum of products over the last axes.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
pub fn inner(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::inner(a.0, b.0)).map(PyArray::from)
}

/// Sum of products over `axes`: a count of trailing/leading axes or a pair of axis lists.
#[pyfunction]
#[pyo3(signature = (a, b, /, axes = None, *, stream = None))]
pub fn tensordot(
    a: Operand,
    b: Operand,
    axes: Option<&Bound<'_, PyAny>>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let spec = match axes {
        None => TensordotAxes::Count(2),
        Some(x) => {
            if let Ok(n) = x.extract::<usize>() {
                TensordotAxes::Count(n)
            } else if let Ok((l, r)) = x.extract::<(Vec<i64>, Vec<i64>)>() {
                TensordotAxes::Pairs(l, r)
            } else if let Ok((l, r)) = x.extract::<(i64, i64)>() {
                TensordotAxes::Pairs(vec![l], vec![r])
            } else {
                return Err(PyTypeError::new_err(
                    "tensordot: axes must be an int or a pair of axis lists",
                ));
            }
        }
    };
    on(stream.as_ref(), || ops::tensordot(a.0, b.0, spec)).map(PyArray::from)
}

/// Einstein summation over `operands` as described by `subscripts`.
#[pyfunction]
#[pyo3(signature = (subscripts, *operands, stream = None))]
pub fn einsum(
    subscripts: &str,
    operands: Vec<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let operands = super::arrays(operands);
    on(stream.as_ref(), || ops::einsum(subscripts, &operands)).map(PyArray::from)
}

/// The order `einsum` contracts `operands` in, as mlx's `einsum_path`: a list of position tuples
/// (each step's result goes to the end of the list) and a report of its cost.
#[pyfunction]
#[pyo3(signature = (subscripts, *operands))]
pub fn einsum_path<'py>(py: Python<'py>, subscripts: &str, operands: Vec<Operand>) -> PyResult<(Bound<'py, PyList>, String)> {
    let (path, report) = on(None, || ops::einsum_path(subscripts, &super::arrays(operands)))?;
    let steps = path.into_iter().map(|step| PyTuple::new(py, step)).collect::<PyResult<Vec<_>>>()?;
    Ok((PyList::new(py, steps)?, report))
}

/// Adds the products to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(matmul, m)?,
        wrap_pyfunction!(addmm, m)?,
        wrap_pyfunction!(gather_mm, m)?,
        wrap_pyfunction!(block_masked_mm, m)?,
        wrap_pyfunction!(segmented_mm, m)?,
        wrap_pyfunction!(hadamard_transform, m)?,
        wrap_pyfunction!(outer, m)?,
        wrap_pyfunction!(inner, m)?,
        wrap_pyfunction!(tensordot, m)?,
        wrap_pyfunction!(einsum, m)?,
        wrap_pyfunction!(einsum_path, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
