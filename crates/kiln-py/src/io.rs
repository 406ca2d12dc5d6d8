//! The file parsers of `kiln::io` for Python's `load`: Python reads the bytes (of a path, an open
//! file or an `.npz` archive's member) and these turn them into arrays, so every format is read by
//! the one parser that checks what a file claims before trusting it. `save_safetensors` writes
//! the bytes kiln's writer makes.

use crate::array::PyArray;
use crate::errors::OrRaise;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The array of a `.npy` file's bytes; errors name `source`.
#[pyfunction]
fn _load_npy_bytes(py: Python<'_>, data: &[u8], source: &str) -> PyResult<PyArray> {
    py.detach(|| kiln::io::npy_from_bytes(data, source)).or_raise().map(PyArray::from)
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

/// Adds the parsers to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_load_npy_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_load_safetensors_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_safetensors_bytes, m)?)
}
