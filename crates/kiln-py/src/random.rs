//! `kiln.core.random` (native part): keys, seeding, the samplers with mlx's signatures, and the
//! global state's getter and setter, which `kiln.core.random.state` (a list, capturable by
//! `compile`) reads and writes.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use crate::errors::OrRaise;
use crate::ops::creation::dtype_or_f32;
use crate::ops::Sizes;
use kiln::{ops, random, Array, Dtype};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

/// A key from a seed.
#[pyfunction]
fn key(seed: u64) -> PyArray {
    random::key(seed).into()
}

/// Reseeds the global random state.
#[pyfunction]
fn seed(seed: u64) {
    random::seed(seed);
}

/// `num` new keys derived from `key` (shape `(num, 2)`).
#[pyfunction]
#[pyo3(signature = (key, num = 2, stream = None))]
fn split(key: PyArray, num: usize, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    on(stream.as_ref(), || random::split(&key.array, num)).map(PyArray::from)
}

fn dims(shape: Option<Sizes>, op: &str) -> PyResult<Vec<usize>> {
    shape.map_or(Ok(Vec::new()), |s| s.dims(op))
}

/// A bound given as a Python number (exact) or an array (broadcast).
fn bound(o: &Operand) -> Option<f64> {
    o.0.literal().map(|l| match l {
        kiln::Literal::Float(v) => v,
        kiln::Literal::Int(v) => v as f64,
    })
}

/// Uniform samples in `[low, high)`; the bounds may be arrays that broadcast with `shape`.
#[pyfunction]
#[pyo3(signature = (low = None, high = None, shape = None, dtype = None, key = None, stream = None))]
fn uniform(
    low: Option<Operand>,
    high: Option<Operand>,
    shape: Option<Sizes>,
    dtype: Option<PyDtype>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let low = low.unwrap_or(Operand(Array::weak_float(0.0)));
    let high = high.unwrap_or(Operand(Array::weak_float(1.0)));
    let dt = dtype_or_f32(dtype);
    let k = key.as_ref().map(|k| &k.array);
    let mut shape = dims(shape, "uniform")?;
    on(stream.as_ref(), || match (bound(&low), bound(&high)) {
        (Some(lo), Some(hi)) => random::uniform(lo, hi, &shape, dt, k),
        _ => {
            let b = ops::broadcast_arrays(&[low.0.clone(), high.0.clone()])?;
            if shape.is_empty() {
                shape = b[0].shape().to_vec();
            }
            let u = random::uniform(0.0, 1.0, &shape, dt, k)?;
            ops::add(&low.0, ops::multiply(ops::subtract(&high.0, &low.0)?, u)?)
        }
    })
    .map(PyArray::from)
}

/// A distribution parameter, or its default as a weak float.
fn or_float(o: Option<Operand>, default: f64) -> Array {
    o.map_or_else(|| Array::weak_float(default), |o| o.0)
}

/// The samplers of location-scale families, with mlx's signature.
macro_rules! location_scale_samplers {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[pyfunction]
        #[pyo3(signature = (shape = None, dtype = None, loc = None, scale = None, key = None, stream = None))]
        fn $name(
            shape: Option<Sizes>,
            dtype: Option<PyDtype>,
            loc: Option<Operand>,
            scale: Option<Operand>,
            key: Option<PyArray>,
            stream: Option<StreamOrDevice>,
        ) -> PyResult<PyArray> {
            let shape = dims(shape, stringify!($name))?;
            let (loc, scale) = (or_float(loc, 0.0), or_float(scale, 1.0));
            on(stream.as_ref(), || random::$name(&shape, dtype_or_f32(dtype), loc, scale, key.as_ref().map(|k| &k.array)))
                .map(PyArray::from)
        }
    )*};
}

location_scale_samplers! {
    /// Normal samples with mean `loc` and standard deviation `scale` (numbers or arrays that
    /// broadcast to `shape`).
    normal;
    /// Laplace samples with location `loc` and scale `scale` (numbers or arrays that broadcast
    /// to `shape`).
    laplace;
}

/// The samples' shape: the one given, or the broadcast shape of the parameters.
fn shape_or_broadcast(shape: Option<Sizes>, op: &str, parameters: &[&Array]) -> PyResult<Vec<usize>> {
    match shape {
        Some(s) => s.dims(op),
        None => {
            let shapes: Vec<&[usize]> = parameters.iter().map(|p| p.shape()).collect();
            let mut out = Vec::new();
            for s in shapes {
                out = kiln::shape::broadcast_shapes(op, &out, s).or_raise()?.to_vec();
            }
            Ok(out)
        }
    }
}

/// Normal samples truncated to `[lower, upper]` (numbers or arrays); the shape defaults to the
/// bounds' broadcast shape.
#[pyfunction]
#[pyo3(signature = (lower, upper, shape = None, dtype = None, key = None, stream = None))]
fn truncated_normal(
    lower: Operand,
    upper: Operand,
    shape: Option<Sizes>,
    dtype: Option<PyDtype>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shape = shape_or_broadcast(shape, "truncated_normal", &[&lower.0, &upper.0])?;
    on(stream.as_ref(), || {
        random::truncated_normal(lower.0, upper.0, &shape, dtype_or_f32(dtype), key.as_ref().map(|k| &k.array))
    })
    .map(PyArray::from)
}

/// True with probability `p` (broadcast to `shape`, or `p`'s shape when None).
#[pyfunction]
#[pyo3(signature = (p = None, shape = None, key = None, stream = None))]
fn bernoulli(
    p: Option<Operand>,
    shape: Option<Sizes>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let p = or_float(p, 0.5);
    let shape = shape.map(|s| s.dims("bernoulli")).transpose()?;
    on(stream.as_ref(), || random::bernoulli(p, shape.as_deref(), key.as_ref().map(|k| &k.array))).map(PyArray::from)
}

/// Integers uniform in `[low, high)` (numbers or arrays that broadcast to `shape`).
#[pyfunction]
#[pyo3(signature = (low, high, shape = None, dtype = None, key = None, stream = None))]
fn randint(
    low: Operand,
    high: Operand,
    shape: Option<Sizes>,
    dtype: Option<PyDtype>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shape = dims(shape, "randint")?;
    let dt = dtype.map_or(Dtype::I32, |d| d.0);
    on(stream.as_ref(), || random::randint(low.0, high.0, &shape, dt, key.as_ref().map(|k| &k.array))).map(PyArray::from)
}

/// Samples of the multivariate normal with mean `mean` (…, n) and covariance `cov` (…, n, n), of
/// shape `shape + (n,)`.
#[pyfunction]
#[pyo3(signature = (mean, cov, shape = None, dtype = None, key = None, stream = None))]
fn multivariate_normal(
    mean: Operand,
    cov: Operand,
    shape: Option<Sizes>,
    dtype: Option<PyDtype>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shape = dims(shape, "multivariate_normal")?;
    on(stream.as_ref(), || {
        random::multivariate_normal(mean.0, cov.0, &shape, dtype_or_f32(dtype), key.as_ref().map(|k| &k.array))
    })
    .map(PyArray::from)
}

/// Random bits: unsigned integers of `width` bytes (1, 2 or 4) with every bit uniform.
#[pyfunction]
#[pyo3(signature = (shape = None, width = 4, key = None, stream = None))]
fn bits(
    shape: Option<Sizes>,
    width: usize,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shape = dims(shape, "bits")?;
    on(stream.as_ref(), || {
        random::bits(&shape, width, key.as_ref().map(|k| &k.array))
    })
    .map(PyArray::from)
}

/// Standard Gumbel samples.
#[pyfunction]
#[pyo3(signature = (shape = None, dtype = None, key = None, stream = None))]
fn gumbel(
    shape: Option<Sizes>,
    dtype: Option<PyDtype>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let shape = dims(shape, "gumbel")?;
    on(stream.as_ref(), || {
        random::gumbel(&shape, dtype_or_f32(dtype), key.as_ref().map(|k| &k.array))
    })
    .map(PyArray::from)
}

/// Category indices sampled from unnormalised log-probabilities along `axis`. `shape` (the
/// output shape) and `num_samples` (appended samples) are alternatives.
#[pyfunction]
#[pyo3(signature = (logits, axis = -1, shape = None, num_samples = None, key = None, stream = None))]
fn categorical(
    logits: Operand,
    axis: i64,
    shape: Option<Sizes>,
    num_samples: Option<usize>,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let k = key.as_ref().map(|k| &k.array);
    match (shape, num_samples) {
        (Some(_), Some(_)) => Err(PyValueError::new_err(
            "categorical: pass at most one of shape and num_samples",
        )),
        (Some(s), None) => {
            let dims = s.dims("categorical")?;
            on(stream.as_ref(), || {
                let mut lg = logits.0.clone();
                let ax = if axis < 0 {
                    axis + lg.ndim() as i64
                } else {
                    axis
                };
                lg = ops::moveaxis(lg, ax, -1)?;
                let mut full: Vec<usize> = dims.clone();
                full.push(*lg.shape().last().unwrap_or(&0));
                let lg = ops::broadcast_to(lg, &full)?;
                random::categorical(lg, -1, None, k)
            })
            .map(PyArray::from)
        }
        (None, n) => on(stream.as_ref(), || {
            random::categorical(&logits.0, axis, n, k)
        })
        .map(PyArray::from),
    }
}

/// A random permutation of `arange(x)` (an int) or of `x` along `axis` (an array).
#[pyfunction]
#[pyo3(signature = (x, axis = 0, key = None, stream = None))]
fn permutation(
    x: &Bound<'_, PyAny>,
    axis: i64,
    key: Option<PyArray>,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let k = key.as_ref().map(|k| &k.array);
    if x.is_instance_of::<PyInt>() {
        let n: usize = x.extract()?;
        return on(stream.as_ref(), || random::permutation(n, k)).map(PyArray::from);
    }
    let a = crate::convert::operand(x)?;
    on(stream.as_ref(), || random::permutation_of(&a, axis, k)).map(PyArray::from)
}

/// The global random state (the key the next draw without a key splits).
#[pyfunction]
fn _get_state() -> PyArray {
    random::state().into()
}

/// Replaces the global random state.
#[pyfunction]
fn _set_state(key: PyArray) -> PyResult<()> {
    random::set_state(&key.array).or_raise()
}

/// Builds the native `random` submodule.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "random")?;
    for f in [
        wrap_pyfunction!(key, &m)?,
        wrap_pyfunction!(seed, &m)?,
        wrap_pyfunction!(split, &m)?,
        wrap_pyfunction!(uniform, &m)?,
        wrap_pyfunction!(normal, &m)?,
        wrap_pyfunction!(laplace, &m)?,
        wrap_pyfunction!(multivariate_normal, &m)?,
        wrap_pyfunction!(truncated_normal, &m)?,
        wrap_pyfunction!(bernoulli, &m)?,
        wrap_pyfunction!(randint, &m)?,
        wrap_pyfunction!(gumbel, &m)?,
        wrap_pyfunction!(bits, &m)?,
        wrap_pyfunction!(categorical, &m)?,
        wrap_pyfunction!(permutation, &m)?,
        wrap_pyfunction!(_get_state, &m)?,
        wrap_pyfunction!(_set_state, &m)?,
    ] {
        m.add_function(f)?;
    }
    parent.add_submodule(&m)
}
