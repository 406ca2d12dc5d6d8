//! kiln errors as Python exceptions. A kiln error (bad shapes, dtypes, axes or values) becomes a
//! `ValueError` carrying kiln's message, which names the op, the shapes and dtypes and the fix;
//! reading data that does not exist yet (a placeholder inside a trace) is a `RuntimeError`.

use kiln::ErrorKind;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// The Python exception for a kiln error.
pub fn to_py(e: kiln::Error) -> PyErr {
    match e.kind {
        ErrorKind::NoData | ErrorKind::Unsupported => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// `?`-friendly conversion of kiln results into Python results.
pub trait OrRaise<T> {
    /// The value, or the kiln error raised as its Python exception.
    fn or_raise(self) -> pyo3::PyResult<T>;
}

impl<T> OrRaise<T> for kiln::Result<T> {
    fn or_raise(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
