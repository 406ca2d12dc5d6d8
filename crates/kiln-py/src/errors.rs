//! kiln errors as Python exceptions. A kiln error (bad shapes, dtypes, axes or values) becomes a
//! `ValueError` carrying kiln's message, which names the op, the shapes and dtypes and the fix;
//! reading data that does not exist yet (a placeholder inside a trace) is a `RuntimeError`.

use kiln::ErrorKind;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use pyo3::PyErr;
use std::cell::RefCell;

thread_local! {
    /// An exception a Python callback (a function being traced or transformed) raised inside
    /// kiln, kept so that it reaches the caller unchanged rather than as a kiln error.
    static RAISED_IN_CALLBACK: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Keeps `e`, raised by a Python callback, for the boundary to re-raise, and returns the kiln
/// error that carries it through kiln.
pub fn stash(e: PyErr) -> kiln::Error {
    let message = e.to_string();
    RAISED_IN_CALLBACK.with(|r| *r.borrow_mut() = Some(e));
    kiln::Error::value("callback", message)
}

/// The Python exception for a kiln error: the callback's own exception when one caused it.
pub fn to_py(e: kiln::Error) -> PyErr {
    if let Some(raised) = RAISED_IN_CALLBACK.with(|r| r.borrow_mut().take()) {
        return raised;
    }
    match e.kind {
        ErrorKind::NoData | ErrorKind::Unsupported | ErrorKind::Device => PyRuntimeError::new_err(e.to_string()),
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

/// A bad index: an exception that is both an `IndexError` (numpy's type for it) and a
/// `ValueError` (mlx's), so code written for either catches it.
pub fn index_error(message: String) -> PyErr {
    Python::attach(|py| index_error_in(py, message))
}

fn index_error_in(py: Python<'_>, message: String) -> PyErr {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let made = TYPE.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "kiln.core")?;
        let bases = (py.get_type::<PyIndexError>(), py.get_type::<PyValueError>());
        let made = py.get_type::<PyType>().call1(("IndexError", bases, namespace))?;
        Ok(made.cast_into::<PyType>()?.unbind())
    });
    match made {
        Ok(t) => PyErr::from_type(t.bind(py).clone(), message),
        Err(e) => e,
    }
}
