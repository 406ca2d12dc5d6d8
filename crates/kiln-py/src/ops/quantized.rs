//! Quantization with mlx's signatures: `quantize`, `dequantize`, `quantized_matmul`,
//! `gather_qmm` and `qqmm` (`kiln::ops::quantized`), in every mode mlx has: `affine` and the
//! float formats `mxfp4`, `mxfp8` and `nvfp4`.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use kiln::ops::{FloatFormat, Scheme};
use kiln::{ops, Array, Error};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// A mode with its settings filled in: mlx's defaults where the caller gave none.
enum Mode {
    Affine { group_size: usize, bits: u32 },
    Float(FloatFormat),
}

/// Reads `mode` with the group size and bits a caller gave (checked against a float format's).
fn mode(op: &str, name: &str, group_size: Option<usize>, bits: Option<u32>) -> kiln::Result<Mode> {
    if name == "affine" {
        return Ok(Mode::Affine { group_size: group_size.unwrap_or(64), bits: bits.unwrap_or(4) });
    }
    let format = FloatFormat::from_name(name).ok_or_else(|| {
        Error::value(op, format!("unknown quantization mode '{name}'; the modes are 'affine', 'mxfp4', 'mxfp8' and 'nvfp4'"))
    })?;
    format.check_settings(op, group_size, bits)?;
    Ok(Mode::Float(format))
}

/// How to read words in `mode`: affine needs biases, the float formats refuse them; only nvfp4
/// takes a global scale.
fn scheme<'a>(op: &str, mode: &Mode, biases: Option<&'a Array>, global_scale: Option<&'a Array>) -> kiln::Result<Scheme<'a>> {
    match (mode, biases) {
        (&Mode::Affine { group_size, bits }, Some(biases)) => {
            refuse_global_scale(op, global_scale)?;
            Ok(Scheme::affine(biases, group_size, bits))
        }
        (Mode::Affine { .. }, None) => Err(Error::value(op, "affine quantization needs biases")),
        (&Mode::Float(format), None) => Ok(Scheme::Float { format, global_scale }),
        (Mode::Float(format), Some(_)) => Err(Error::value(op, format!("{} quantization has no biases; pass biases=None", format.name()))),
    }
}

/// Refuses a global scale in affine mode (only nvfp4 has one).
fn refuse_global_scale(op: &str, global_scale: Option<&Array>) -> kiln::Result<()> {
    match global_scale {
        Some(_) => Err(Error::value(op, "a global scale is only used by nvfp4 quantization, not affine")),
        None => Ok(()),
    }
}

/// `quantize(w, group_size=None, bits=None, mode='affine', *, global_scale=None)`: `(words,
/// scales, biases)` in affine mode, `(words, scales)` in the float formats.
#[pyfunction]
#[pyo3(signature = (w, /, group_size = None, bits = None, mode = "affine", *, global_scale = None, stream = None))]
fn quantize<'py>(
    py: Python<'py>,
    w: Operand,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    global_scale: Option<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<Bound<'py, PyTuple>> {
    let parts = on(stream.as_ref(), || match self::mode("quantize", mode, group_size, bits)? {
        Mode::Affine { group_size, bits } => {
            refuse_global_scale("quantize", global_scale.as_ref().map(|g| &g.0))?;
            let (q, s, b) = ops::quantize(w.0, group_size, bits)?;
            Ok(vec![q, s, b])
        }
        Mode::Float(format) => {
            let (q, s) = ops::quantize_float(w.0, format, global_scale.as_ref().map(|g| &g.0))?;
            Ok(vec![q, s])
        }
    })?;
    PyTuple::new(py, parts.into_iter().map(PyArray::from))
}

/// `dequantize(w, scales, biases=None, group_size=None, bits=None, mode='affine',
/// global_scale=None, dtype=None)`.
#[pyfunction]
#[pyo3(signature = (w, /, scales, biases = None, group_size = None, bits = None, mode = "affine", global_scale = None, dtype = None, *, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn dequantize(
    w: PyRef<PyArray>,
    scales: PyRef<PyArray>,
    biases: Option<PyRef<PyArray>>,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    global_scale: Option<Operand>,
    dtype: Option<PyDtype>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let op = "dequantize";
    on(stream.as_ref(), || {
        let scheme = scheme(op, &self::mode(op, mode, group_size, bits)?, biases.as_deref().map(|b| &b.array), global_scale.as_ref().map(|g| &g.0))?;
        ops::dequantize(&w.array, &scales.array, scheme, dtype.map(|d| d.0))
    })
    .map(PyArray::from)
}

/// `quantized_matmul(x, w, scales, biases=None, transpose=True, group_size=None, bits=None,
/// mode='affine')`.
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
    let op = "quantized_matmul";
    on(stream.as_ref(), || {
        let scheme = scheme(op, &self::mode(op, mode, group_size, bits)?, biases.as_deref().map(|b| &b.array), None)?;
        ops::quantized_matmul(x.0, &w.array, &scales.array, scheme, transpose)
    })
    .map(PyArray::from)
}

/// `gather_qmm(x, w, scales, biases=None, lhs_indices=None, rhs_indices=None, transpose=True,
/// group_size=None, bits=None, mode='affine', *, sorted_indices=False)`.
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
    let op = "gather_qmm";
    let (lhs, rhs) = (lhs_indices.map(|i| i.0), rhs_indices.map(|i| i.0));
    on(stream.as_ref(), || {
        let scheme = scheme(op, &self::mode(op, mode, group_size, bits)?, biases.as_deref().map(|b| &b.array), None)?;
        ops::gather_qmm(x.0, &w.array, &scales.array, scheme, lhs.as_ref(), rhs.as_ref(), transpose)
    })
    .map(PyArray::from)
}

/// `qqmm(x, w, scales=None, group_size=None, bits=None, mode='nvfp4', global_scale_x=None,
/// global_scale_w=None)`: `x @ wᵀ` with both operands quantized in a float format.
#[pyfunction]
#[pyo3(signature = (x, w, scales = None, group_size = None, bits = None, mode = "nvfp4", global_scale_x = None, global_scale_w = None, *, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn qqmm(
    x: Operand,
    w: PyRef<PyArray>,
    scales: Option<PyRef<PyArray>>,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    global_scale_x: Option<Operand>,
    global_scale_w: Option<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let op = "qqmm";
    on(stream.as_ref(), || {
        let Mode::Float(format) = self::mode(op, mode, group_size, bits)? else {
            return Err(Error::value(op, "qqmm quantizes in a float format: 'nvfp4', 'mxfp8' or 'mxfp4', not 'affine'"));
        };
        let (gx, gw) = (global_scale_x.as_ref().map(|g| &g.0), global_scale_w.as_ref().map(|g| &g.0));
        ops::qqmm(x.0, &w.array, scales.as_deref().map(|s| &s.array), format, gx, gw)
    })
    .map(PyArray::from)
}

/// Adds the quantization ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(quantized_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(gather_qmm, m)?)?;
    m.add_function(wrap_pyfunction!(qqmm, m)?)
}
