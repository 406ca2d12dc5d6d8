//! The file parsers of `kiln::io` for Python's `load`: Python reads the bytes (of a path, an open
//! file or an `.npz` archive's member) and these turn them into arrays, so every format is read by
//! the one parser that checks what a file claims before trusting it. A `.npy` path is the
//! exception: it loads lazily, its data read when the array is evaluated, as mlx. `save_safetensors` and
//! `save_gguf` write the bytes kiln's writers make.

use crate::array::PyArray;
use crate::errors::OrRaise;
use kiln::gguf::GgufValue;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The array of a `.npy` file's bytes; errors name `source`.
#[pyfunction]
fn _load_npy_bytes(py: Python<'_>, data: &[u8], source: &str) -> PyResult<PyArray> {
    py.detach(|| kiln::io::npy_from_bytes(data, source)).or_raise().map(PyArray::from)
}

/// The array of the `.npy` file at `path`, its data read when the array is evaluated.
#[pyfunction]
fn _load_npy_file(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyArray> {
    py.detach(|| kiln::io::load_npy(path)).or_raise().map(PyArray::from)
}

/// The named arrays and the metadata of a `.safetensors` file's bytes, each in the file's order;
/// errors name `source`.
#[pyfunction]
#[allow(clippy::type_complexity)] // the two lists Python unpacks
fn _load_safetensors_bytes(py: Python<'_>, data: &[u8], source: &str) -> PyResult<(Vec<(String, PyArray)>, Vec<(String, String)>)> {
    let loaded = py.detach(|| kiln::io::safetensors_from_bytes(data, source)).or_raise()?;
    Ok((loaded.arrays.into_iter().map(|(name, a)| (name, PyArray::from(a))).collect(), loaded.metadata))
}

/// The bytes of a `.safetensors` file holding `arrays` and `metadata` (Python writes them to a
/// path or a stream); errors name `target`.
#[pyfunction]
fn _safetensors_bytes<'py>(
    py: Python<'py>,
    arrays: Vec<(String, PyRef<'_, PyArray>)>,
    metadata: Vec<(String, String)>,
    target: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let arrays: Vec<(String, kiln::Array)> = arrays.into_iter().map(|(n, a)| (n, a.array.clone())).collect();
    let bytes = py.detach(|| kiln::io::safetensors_to_bytes(&arrays, &metadata, target)).or_raise()?;
    Ok(PyBytes::new(py, &bytes))
}

/// A GGUF metadata value from Python: a string, a list of strings, or an array.
fn gguf_value(key: &str, v: &Bound<'_, PyAny>) -> PyResult<GgufValue> {
    if let Ok(s) = v.extract::<String>() {
        Ok(GgufValue::Text(s))
    } else if let Ok(a) = v.cast::<PyArray>() {
        Ok(GgufValue::Numbers(a.borrow().array.clone()))
    } else if let Ok(items) = v.extract::<Vec<String>>() {
        Ok(GgufValue::Texts(items))
    } else {
        Err(PyTypeError::new_err(format!(
            "save_gguf: metadata '{key}' has type {}; GGUF metadata are strings, lists of strings or arrays (wrap numbers in kiln.core.array)",
            v.get_type().name()?
        )))
    }
}

/// A GGUF metadata value for Python: a string, a list of strings, or an array.
fn gguf_object<'py>(py: Python<'py>, v: GgufValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        GgufValue::Text(s) => s.into_pyobject(py)?.into_any(),
        GgufValue::Texts(items) => items.into_pyobject(py)?.into_any(),
        GgufValue::Numbers(a) => PyArray::from(a).into_pyobject(py)?.into_any(),
    })
}

/// The bytes of a GGUF file holding `arrays` and `metadata`; errors name `target`.
#[pyfunction]
fn _gguf_bytes<'py>(
    py: Python<'py>,
    arrays: Vec<(String, PyRef<'_, PyArray>)>,
    metadata: Vec<(String, Bound<'py, PyAny>)>,
    target: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let arrays: Vec<(String, kiln::Array)> = arrays.into_iter().map(|(n, a)| (n, a.array.clone())).collect();
    let metadata = metadata.iter().map(|(k, v)| Ok((k.clone(), gguf_value(k, v)?))).collect::<PyResult<Vec<_>>>()?;
    let bytes = py.detach(|| kiln::gguf::gguf_to_bytes(&arrays, &metadata, target)).or_raise()?;
    Ok(PyBytes::new(py, &bytes))
}

/// The named tensors and the metadata of a GGUF file's bytes, in the file's order; errors name
/// `source`.
#[pyfunction]
#[allow(clippy::type_complexity)] // the two lists Python unpacks
fn _load_gguf_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    source: &str,
) -> PyResult<(Vec<(String, PyArray)>, Vec<(String, Bound<'py, PyAny>)>)> {
    let (arrays, metadata) = py.detach(|| kiln::gguf::gguf_from_bytes(data, source)).or_raise()?;
    let metadata = metadata.into_iter().map(|(k, v)| Ok((k, gguf_object(py, v)?))).collect::<PyResult<Vec<_>>>()?;
    Ok((arrays.into_iter().map(|(name, a)| (name, PyArray::from(a))).collect(), metadata))
}

/// Adds the parsers to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_gguf_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_load_gguf_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_load_npy_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_load_npy_file, m)?)?;
    m.add_function(wrap_pyfunction!(_load_safetensors_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_safetensors_bytes, m)?)
}
