//! The layer ops of `mx.fast` (`rms_norm`, `layer_norm`, `rope`,
//! `scaled_dot_product_attention`) with mlx's arguments, over `kiln::ops::fast`, which checks
//! them and runs each op as a compiled, fused composition.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops::fast::{self, AttentionMask, Rope};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// `rms_norm(x, weight, eps)`: `x / sqrt(mean(x²) + eps) * weight` over the last axis.
#[pyfunction]
#[pyo3(signature = (x, weight, eps, *, stream = None))]
fn rms_norm(x: PyRef<PyArray>, weight: Option<PyRef<PyArray>>, eps: f32, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || fast::rms_norm(&x.array, weight.as_ref().map(|w| &w.array), eps)).map(PyArray::from)
}

/// `layer_norm(x, weight, bias, eps)`: `(x - mean) / sqrt(var + eps) * weight + bias` over the
/// last axis.
#[pyfunction]
#[pyo3(signature = (x, weight, bias, eps, *, stream = None))]
fn layer_norm(
    x: PyRef<PyArray>,
    weight: Option<PyRef<PyArray>>,
    bias: Option<PyRef<PyArray>>,
    eps: f32,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let (weight, bias) = (weight.as_ref().map(|w| &w.array), bias.as_ref().map(|b| &b.array));
    on(stream.as_ref(), || fast::layer_norm(&x.array, weight, bias, eps)).map(PyArray::from)
}

/// `rope(a, dims, *, traditional, base, scale, offset, freqs=None)`: rotary position embedding.
#[pyfunction]
#[pyo3(signature = (a, dims, *, traditional, base, scale, offset, freqs = None, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn rope(
    a: PyRef<PyArray>,
    dims: i64,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    offset: Operand,
    freqs: Option<PyRef<PyArray>>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let settings = Rope { dims, traditional, base, scale };
    on(stream.as_ref(), || fast::rope(&a.array, settings, &offset.0, freqs.as_ref().map(|f| &f.array))).map(PyArray::from)
}

/// `scaled_dot_product_attention(q, k, v, *, scale, mask=None, sinks=None)`; `mask` is None,
/// `"causal"` or an array.
#[pyfunction]
#[pyo3(signature = (q, k, v, *, scale, mask = None, sinks = None, stream = None))]
#[allow(clippy::too_many_arguments)] // mlx's signature
fn scaled_dot_product_attention(
    q: PyRef<PyArray>,
    k: PyRef<PyArray>,
    v: PyRef<PyArray>,
    scale: f32,
    mask: Option<&Bound<'_, PyAny>>,
    sinks: Option<PyRef<PyArray>>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let mask = match mask {
        None => AttentionMask::None,
        Some(m) if m.is_none() => AttentionMask::None,
        Some(m) if m.is_instance_of::<PyString>() => match m.extract::<String>()?.as_str() {
            "causal" => AttentionMask::Causal,
            other => {
                return Err(PyValueError::new_err(format!(
                    "scaled_dot_product_attention: the only mask named by a string is 'causal', got '{other}'"
                )))
            }
        },
        Some(m) => AttentionMask::Array(m.extract::<Operand>()?.0),
    };
    let sinks = sinks.as_ref().map(|s| &s.array);
    on(stream.as_ref(), || fast::scaled_dot_product_attention(&q.array, &k.array, &v.array, scale, &mask, sinks)).map(PyArray::from)
}

/// Adds the layer ops to the native `fast` submodule.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rope, m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)
}
