//! Elementwise ops: unary math, broadcasting binary ops, `where`, `clip`, `view`, the fp8 codes, and
//! the comparisons built from them (`isclose`, `allclose`, `array_equal`).

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::{ops, Array};
use pyo3::prelude::*;

macro_rules! unary_ops {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("Elementwise `", stringify!($name), "` (mlx.core's op of that name).")]
            #[pyfunction]
            #[pyo3(signature = (a, /, *, stream = None))]
            pub fn $name(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                on(stream.as_ref(), || ops::$name(a.0)).map(PyArray::from)
            }
        )*
        fn register_unary(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}

unary_ops!(
    abs,
    negative,
    sign,
    exp,
    expm1,
    log,
    log1p,
    log2,
    log10,
    sqrt,
    rsqrt,
    square,
    reciprocal,
    sin,
    cos,
    tan,
    arcsin,
    arccos,
    arctan,
    sinh,
    cosh,
    tanh,
    arcsinh,
    arccosh,
    arctanh,
    erf,
    erfinv,
    sigmoid,
    floor,
    ceil,
    logical_not,
    isnan,
    isinf,
    isposinf,
    isneginf,
    isfinite,
    bitwise_invert,
    real,
    imag,
    conjugate,
    degrees,
    radians,
    trunc
);

macro_rules! binary_ops {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("Elementwise, broadcasting `", stringify!($name), "` (mlx.core's op of that name).")]
            #[pyfunction]
            #[pyo3(signature = (a, b, /, *, stream = None))]
            pub fn $name(a: Operand, b: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                on(stream.as_ref(), || ops::$name(a.0, b.0)).map(PyArray::from)
            }
        )*
        fn register_binary(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}

binary_ops!(
    add,
    subtract,
    multiply,
    divide,
    floor_divide,
    remainder,
    power,
    maximum,
    minimum,
    arctan2,
    logaddexp,
    equal,
    not_equal,
    less,
    less_equal,
    greater,
    greater_equal,
    logical_and,
    logical_or,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    left_shift,
    right_shift,
    logical_xor
);

/// Rounds to `decimals` places (half to even).
#[pyfunction]
#[pyo3(signature = (a, /, decimals = 0, *, stream = None))]
pub fn round(a: Operand, decimals: i32, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        let dtype = a.0.dtype();
        if dtype.is_integer() || dtype == kiln::Dtype::Bool {
            // Integers are whole already; negative decimals round to tens, hundreds..., as mlx.
            if decimals >= 0 {
                return Ok(a.0);
            }
            let scale = 10f64.powi(-decimals);
            return ops::astype(ops::multiply(ops::round(ops::divide(&a.0, scale)?)?, scale)?, dtype);
        }
        if decimals == 0 {
            return ops::round(a.0);
        }
        let scale = 10f64.powi(decimals);
        ops::divide(ops::round(ops::multiply(&a.0, scale)?)?, scale)
    })
    .map(PyArray::from)
}

/// `x` where `condition` holds, else `y` (broadcasting all three).
#[pyfunction]
#[pyo3(name = "where", signature = (condition, x, y, /, *, stream = None))]
pub fn where_(
    condition: Operand,
    x: Operand,
    y: Operand,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::where_(condition.0, x.0, y.0)).map(PyArray::from)
}

/// Limits values to `[a_min, a_max]` (either bound may be None).
#[pyfunction]
#[pyo3(signature = (a, /, a_min, a_max, *, stream = None))]
pub fn clip(
    a: Operand,
    a_min: Option<Operand>,
    a_max: Option<Operand>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let lo = a_min.as_ref().map(|o| &o.0 as &dyn ops::AsArray);
    let hi = a_max.as_ref().map(|o| &o.0 as &dyn ops::AsArray);
    on(stream.as_ref(), || ops::clip(&a.0, lo, hi)).map(PyArray::from)
}

/// A copy that gradients do not flow through.
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
pub fn stop_gradient(a: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || kiln::stop_gradient(&a.0)).map(PyArray::from)
}

/// The bytes of `a` read as `dtype` (the last axis scales by the ratio of the item sizes).
#[pyfunction]
#[pyo3(signature = (a, /, dtype, *, stream = None))]
pub fn view(a: Operand, dtype: crate::dtype::PyDtype, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::view(&a.0, dtype.0)).map(PyArray::from)
}

/// `x` rounded to 8-bit e4m3 floats, as their uint8 codes.
#[pyfunction]
#[pyo3(signature = (x, /, *, stream = None))]
pub fn to_fp8(x: Operand, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::to_fp8(&x.0)).map(PyArray::from)
}

/// The values of e4m3 codes `x` (uint8) as `dtype` (bfloat16 unless given, as mlx).
#[pyfunction]
#[pyo3(signature = (x, /, dtype = None, *, stream = None))]
pub fn from_fp8(x: Operand, dtype: Option<crate::dtype::PyDtype>, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || ops::from_fp8(&x.0, dtype.map_or(kiln::Dtype::BF16, |d| d.0))).map(PyArray::from)
}

/// Where both `a` and `b` are NaN.
fn both_nan(a: &Array, b: &Array) -> kiln::Result<Array> {
    ops::logical_and(ops::isnan(a)?, ops::isnan(b)?)
}

/// `|a - b| <= atol + rtol * |b|` elementwise (NaNs equal when `equal_nan`).
fn close(a: &Array, b: &Array, rtol: f64, atol: f64, equal_nan: bool) -> kiln::Result<Array> {
    let tol = ops::add(ops::multiply(ops::abs(b)?, rtol)?, atol)?;
    // An infinite `b` makes the tolerance infinite: only equality (below) counts then.
    let near = ops::logical_and(ops::less_equal(ops::abs(ops::subtract(a, b)?)?, tol)?, ops::isfinite(b)?)?;
    // Equal infinities are close; anything else with an infinity or NaN is not.
    let same = ops::equal(a, b)?;
    let close = ops::logical_or(near, same)?;
    if !equal_nan {
        return Ok(close);
    }
    ops::logical_or(close, both_nan(a, b)?)
}

/// Elementwise closeness, as numpy's `isclose`.
#[pyfunction]
#[pyo3(signature = (a, b, /, rtol = 1e-5, atol = 1e-8, *, equal_nan = false, stream = None))]
pub fn isclose(
    a: Operand,
    b: Operand,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || close(&a.0, &b.0, rtol, atol, equal_nan)).map(PyArray::from)
}

/// True when every element pair is close (a 0-d bool array), as numpy's `allclose`.
#[pyfunction]
#[pyo3(signature = (a, b, /, rtol = 1e-5, atol = 1e-8, *, equal_nan = false, stream = None))]
pub fn allclose(
    a: Operand,
    b: Operand,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        ops::all(close(&a.0, &b.0, rtol, atol, equal_nan)?, None, false)
    })
    .map(PyArray::from)
}

/// True when both arrays have one shape and equal elements (a 0-d bool array).
#[pyfunction]
#[pyo3(signature = (a, b, /, equal_nan = false, *, stream = None))]
pub fn array_equal(
    a: Operand,
    b: Operand,
    equal_nan: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    on(stream.as_ref(), || {
        if a.0.shape() != b.0.shape() {
            return Ok(Array::scalar(false));
        }
        let mut eq = ops::equal(&a.0, &b.0)?;
        if equal_nan && (a.0.dtype().is_inexact() || b.0.dtype().is_inexact()) {
            eq = ops::logical_or(eq, both_nan(&a.0, &b.0)?)?;
        }
        ops::all(eq, None, false)
    })
    .map(PyArray::from)
}

/// Adds the elementwise ops to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_unary(m)?;
    register_binary(m)?;
    for f in [
        wrap_pyfunction!(round, m)?,
        wrap_pyfunction!(where_, m)?,
        wrap_pyfunction!(clip, m)?,
        wrap_pyfunction!(stop_gradient, m)?,
        wrap_pyfunction!(view, m)?,
        wrap_pyfunction!(to_fp8, m)?,
        wrap_pyfunction!(from_fp8, m)?,
        wrap_pyfunction!(isclose, m)?,
        wrap_pyfunction!(allclose, m)?,
        wrap_pyfunction!(array_equal, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
