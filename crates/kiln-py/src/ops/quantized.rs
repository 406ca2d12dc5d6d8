//! Affine quantization with mlx's signatures: `quantize`, `dequantize`, `quantized_matmul` and
//! `gather_qmm` (`kiln::ops::quantized`). mlx's other modes (the float formats) are refused by
//! name.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use kiln::{ops, Array};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// mlx's defaults for affine quantization.
const GROUP_SIZE: usize = 64;
const BITS: u32 = 4;

/// Refuses a mode other than affine.
fn check_mode(op: &str, mode: &str) -> PyResult<()> {
    if mode != "affine" {
        return Err(PyValueError::new_err(format!("{op}: mode '{mode}' is not supported; kiln quantizes in mode 'affine'")));
    }
    Ok(())
}

/// Refuses a mode other than affine, and affine without biases.
fn affine<'a>(op: &str, mode: &str, biases: Option<&'a PyArray>) -> PyResult<&'a Array> {
    check_mode(op, mode)?;
    biases.map(|b| &b.array).ok_or_else(|| PyValueError::new_err(format!("{op}: affine quantization needs biases")))
}

/// `quantize(w, group_size=64, bits=4, mode='affine')`: `(words, scales, biases)`.
#[pyfunction]
#[pyo3(signature = (w, /, group_size = None, bits = None, mode = "affine", *, stream = None))]
fn quantize(w: Operand, group_size: Option<usize>, bits: Option<u32>, mode: &str, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray, PyArray)> {
    check_mode("quantize", mode)?;
    let (q, s, b) = on(stream.as_ref(), || ops::quantize(w.0, group_size.unwrap_or(GROUP_SIZE), bits.unwrap_or(BITS)))?;
    Ok((q.into(), s.into(), b.into()))
}

/// `dequantize(w, scales, biases, group_size=64, bits=4, mode='affine', dtype=None)`.
#[pyfunction]
#[pyo3(signature = (w, /, scales, biases = None, group_size = None, bits = None, mode = "affine", dtype = None, *, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn dequantize(
    w: PyRef<PyArray>,
    scales: PyRef<PyArray>,
    biases: Option<PyRef<PyArray>>,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let biases = affine("dequantize", mode, biases.as_deref())?;
    let (g, b) = (group_size.unwrap_or(GROUP_SIZE), bits.unwrap_or(BITS));
    on(stream.as_ref(), || ops::dequantize(&w.array, &scales.array, biases, g, b, dtype.map(|d| d.0))).map(PyArray::from)
}

/// `quantized_matmul(x, w, scales, biases, transpose=True, group_size=64, bits=4, mode='affine')`.
#[pyfunction]
#[pyo3(signature = (x, w, /, scales, biases = None, transpose = true, group_size = None, bits = None, mode = "affine", *, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn quantized_matmul(
    x: Operand,
    w: PyRef<PyArray>,
    scales: PyRef<PyArray>,
    biases: Option<PyRef<PyArray>>,
    transpose: bool,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let biases = affine("quantized_matmul", mode, biases.as_deref())?;
    let (g, b) = (group_size.unwrap_or(GROUP_SIZE), bits.unwrap_or(BITS));
    on(stream.as_ref(), || ops::quantized_matmul(x.0, &w.array, &scales.array, biases, transpose, g, b)).map(PyArray::from)
}

/// `gather_qmm(x, w, scales, biases, lhs_indices=None, rhs_indices=None, transpose=True, ...)`.
#[pyfunction]
#[pyo3(signature = (x, w, /, scales, biases = None, lhs_indices = None, rhs_indices = None, transpose = true, group_size = None, bits = None, mode = "affine", *, sorted_indices = false, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn gather_qmm(
    x: Operand,
    w: PyRef<PyArray>,
    scales: PyRef<PyArray>,
    biases: Option<PyRef<PyArray>>,
    lhs_indices: Option<Operand>,
    rhs_indices: Option<Operand>,
    transpose: bool,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    sorted_indices: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let _ = sorted_indices; // a hint for mlx's kernels; the result is the same either way
    let biases = affine("gather_qmm", mode, biases.as_deref())?;
    let (g, b) = (group_size.unwrap_or(GROUP_SIZE), bits.unwrap_or(BITS));
    let (lhs, rhs) = (lhs_indices.map(|i| i.0), rhs_indices.map(|i| i.0));
    on(stream.as_ref(), || ops::gather_qmm(x.0, &w.array, &scales.array, biases, lhs.as_ref(), rhs.as_ref(), transpose, g, b)).map(PyArray::from)
}

/// Adds the quantization ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(quantized_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(gather_qmm, m)?)
}
