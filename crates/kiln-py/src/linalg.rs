//! The native `linalg` submodule: `kiln::linalg`'s factorizations and solves with mlx's
//! signatures (`stream=` accepted as everywhere). `kiln.core.linalg` adds the ops written in
//! Python over these (`norm`, `cross`).

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::linalg;
use pyo3::prelude::*;

fn arrays<const N: usize>(parts: [kiln::Array; N]) -> [PyArray; N] {
    parts.map(PyArray::from)
}

/// The inverse of each square matrix.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn inv(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::inv(a.0)).map(PyArray::from)
}

/// The inverse of each triangular matrix (upper or lower).
#[pyfunction]
#[pyo3(signature = (a, /, upper = false, *, stream = None))]
fn tri_inv(a: Operand, upper: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::tri_inv(a.0, upper)).map(PyArray::from)
}

/// The Cholesky factor (lower, or upper with `upper=True`).
#[pyfunction]
#[pyo3(signature = (a, /, upper = false, *, stream = None))]
fn cholesky(a: Operand, upper: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::cholesky(a.0, upper)).map(PyArray::from)
}

/// The inverse of a matrix from its Cholesky factor.
#[pyfunction]
#[pyo3(signature = (a, /, upper = false, *, stream = None))]
fn cholesky_inv(a: Operand, upper: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::cholesky_inv(a.0, upper)).map(PyArray::from)
}

/// The pseudo-inverse of each matrix.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn pinv(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::pinv(a.0)).map(PyArray::from)
}

/// The reduced QR factorization: (Q, R).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn qr(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let [q, r] = arrays(on(stream.as_ref(), || linalg::qr(a.0).map(|(q, r)| [q, r]))?);
    Ok((q, r))
}

/// The SVD: (U, S, Vt), or S alone with `compute_uv=False`.
#[pyfunction]
#[pyo3(signature = (a, /, compute_uv = true, *, stream = None))]
fn svd(py: Python<'_>, a: Operand, compute_uv: bool, stream: Option<StreamOrDevice>) -> PyResult<Py<PyAny>> {
    let mut parts: Vec<PyArray> = on(stream.as_ref(), || linalg::svd(a.0, compute_uv))?.into_iter().map(PyArray::from).collect();
    if compute_uv {
        let vt = parts.pop().unwrap();
        let s = parts.pop().unwrap();
        Ok((parts.pop().unwrap(), s, vt).into_pyobject(py)?.into_any().unbind())
    } else {
        Ok(parts.pop().unwrap().into_pyobject(py)?.into_any().unbind())
    }
}

/// The eigenvalues and eigenvectors of each symmetric matrix.
#[pyfunction]
#[pyo3(signature = (a, /, UPLO = "L", *, stream = None))]
#[allow(non_snake_case)] // mlx's (and numpy's) keyword
fn eigh(a: Operand, UPLO: &str, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let [w, v] = arrays(on(stream.as_ref(), || linalg::eigh(a.0, UPLO).map(|(w, v)| [w, v]))?);
    Ok((w, v))
}

/// The eigenvalues of each symmetric matrix.
#[pyfunction]
#[pyo3(signature = (a, /, UPLO = "L", *, stream = None))]
#[allow(non_snake_case)] // mlx's (and numpy's) keyword
fn eigvalsh(a: Operand, UPLO: &str, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::eigvalsh(a.0, UPLO)).map(PyArray::from)
}

/// The eigenvalues and eigenvectors (columns) of each general real matrix, as complex64.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn eig(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let [w, v] = arrays(on(stream.as_ref(), || linalg::eig(a.0).map(|(w, v)| [w, v]))?);
    Ok((w, v))
}

/// The eigenvalues of each general real matrix, as complex64.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn eigvals(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::eigvals(a.0)).map(PyArray::from)
}

/// The LU factorization: (P, L, U) with `L[P] @ U == a`.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn lu(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray, PyArray)> {
    let [p, l, u] = arrays(on(stream.as_ref(), || linalg::lu(a.0).map(|(p, l, u)| [p, l, u]))?);
    Ok((p, l, u))
}

/// The LU factorization packed as LAPACK's: (LU, pivots).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn lu_factor(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let [lu, pivots] = arrays(on(stream.as_ref(), || linalg::lu_factor(a.0).map(|(l, p)| [l, p]))?);
    Ok((lu, pivots))
}

/// The determinant of each square matrix.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn det(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::det(a.0)).map(PyArray::from)
}

/// The sign and log absolute value of each determinant.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn slogdet(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<(PyArray, PyArray)> {
    let [sign, log] = arrays(on(stream.as_ref(), || linalg::slogdet(a.0).map(|(s, l)| [s, l]))?);
    Ok((sign, log))
}

/// Solves `a @ x = b`.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
fn solve(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::solve(a.0, b.0)).map(PyArray::from)
}

/// Solves `a @ x = b` for triangular `a`.
#[pyfunction]
#[pyo3(signature = (a, b, /, upper = false, *, stream = None))]
fn solve_triangular(a: Operand, b: Operand, upper: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || linalg::solve_triangular(a.0, b.0, upper)).map(PyArray::from)
}

/// Builds the native `linalg` submodule.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "linalg")?;
    for f in [
        wrap_pyfunction!(inv, &m)?,
        wrap_pyfunction!(tri_inv, &m)?,
        wrap_pyfunction!(cholesky, &m)?,
        wrap_pyfunction!(cholesky_inv, &m)?,
        wrap_pyfunction!(pinv, &m)?,
        wrap_pyfunction!(qr, &m)?,
        wrap_pyfunction!(svd, &m)?,
        wrap_pyfunction!(eigh, &m)?,
        wrap_pyfunction!(eigvalsh, &m)?,
        wrap_pyfunction!(eig, &m)?,
        wrap_pyfunction!(eigvals, &m)?,
        wrap_pyfunction!(lu, &m)?,
        wrap_pyfunction!(lu_factor, &m)?,
        wrap_pyfunction!(det, &m)?,
        wrap_pyfunction!(slogdet, &m)?,
        wrap_pyfunction!(solve, &m)?,
        wrap_pyfunction!(solve_triangular, &m)?,
    ] {
        m.add_function(f)?;
    }
    parent.add_submodule(&m)
}
