//! Reductions (`sum`, `mean`, `var`, ...), arg-reductions, `logsumexp`, `softmax` and the
//! cumulative scans.

use super::Axes;
use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops;
use pyo3::prelude::*;

macro_rules! reductions {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` over `axis` (all axes when None).")]
            #[pyfunction]
            #[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
            pub fn $name(a: Operand, axis: Option<Axes>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                on(stream.as_ref(), || ops::$name(a.0, Axes::of(&axis), keepdims)).map(PyArray::from)
            }
        )*
        fn register_reductions(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}

reductions!(sum, prod, max, min, all, any, mean, logsumexp);

macro_rules! spreads {
    ($($(#[$doc:meta])* $name:ident => $py:literal, $op:path;)*) => {$(
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(name = $py, signature = (a, /, axis = None, keepdims = false, ddof = 0, *, stream = None))]
        pub fn $name(a: Operand, axis: Option<Axes>, keepdims: bool, ddof: usize, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
            on(stream.as_ref(), || $op(a.0, Axes::of(&axis), keepdims, ddof)).map(PyArray::from)
        }
    )*};
}

spreads! {
    /// Variance over `axis`, dividing by `N - ddof`.
    var => "var", ops::var;
    /// Standard deviation over `axis`, dividing by `N - ddof`.
    std_dev => "std", ops::std;
}

macro_rules! arg_reductions {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
        pub fn $name(a: Operand, axis: Option<i64>, keepdims: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
            on(stream.as_ref(), || ops::$name(a.0, axis, keepdims)).map(PyArray::from)
        }
    )*};
}

arg_reductions! {
    /// Index of the largest element along `axis` (of the flattened array when None).
    argmax;
    /// Index of the smallest element along `axis` (of the flattened array when None).
    argmin;
}

/// Softmax over `axis` (all axes when None); `precise` computes in float32 for half inputs.
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, *, precise = false, stream = None))]
pub fn softmax(
    a: Operand,
    axis: Option<Axes>,
    precise: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        ops::softmax(a.0, Axes::of(&axis), precise)
    })
    .map(PyArray::from)
}

macro_rules! scans {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` along `axis` (of the flattened array when None).")]
            #[pyfunction]
            #[pyo3(signature = (a, /, axis = None, *, reverse = false, inclusive = true, stream = None))]
            pub fn $name(a: Operand, axis: Option<i64>, reverse: bool, inclusive: bool, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                on(stream.as_ref(), || ops::$name(a.0, axis, reverse, inclusive)).map(PyArray::from)
            }
        )*
        fn register_scans(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}

scans!(cumsum, cumprod, cummax, cummin, logcumsumexp);

/// Adds the reductions and scans to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_reductions(m)?;
    register_scans(m)?;
    for f in [
        wrap_pyfunction!(var, m)?,
        wrap_pyfunction!(std_dev, m)?,
        wrap_pyfunction!(argmax, m)?,
        wrap_pyfunction!(argmin, m)?,
        wrap_pyfunction!(softmax, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
