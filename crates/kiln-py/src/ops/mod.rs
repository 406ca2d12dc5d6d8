//! The module-level ops of `kiln.core`, with mlx.core's names, argument names and defaults. Every
//! op takes `stream=` (a stream, a device or a device type) and turns kiln errors into
//! `ValueError`s. One file per family, mirroring `kiln::ops`.

pub mod conv;
pub mod creation;
pub mod derived;
pub mod linalg;
pub mod math;
pub mod quantized;
pub mod reduce;
pub mod shape;
pub mod sort;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

/// One int or a sequence of ints (`what` names the argument in the error).
fn int_or_ints(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<PyInt>() {
        return Ok(vec![obj.extract()?]);
    }
    obj.extract::<Vec<i64>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be an int or a sequence of ints, got {}",
            obj.get_type()
        ))
    })
}

/// An `axis` argument: one axis or a sequence of them.
pub struct Axes(pub Vec<i64>);

impl<'a, 'py> FromPyObject<'a, 'py> for Axes {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        int_or_ints(&obj, "axis").map(Axes)
    }
}

/// A `shape` argument: one size or a sequence of sizes.
pub struct Sizes(pub Vec<i64>);

impl<'a, 'py> FromPyObject<'a, 'py> for Sizes {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        int_or_ints(&obj, "shape").map(Sizes)
    }
}

/// The kiln arrays of op operands.
pub fn arrays(items: Vec<crate::convert::Operand>) -> Vec<kiln::Array> {
    items.into_iter().map(|o| o.0).collect()
}

impl Sizes {
    /// The sizes as dimensions, rejecting negative ones (which only `reshape` allows, as -1).
    pub fn dims(&self, op: &str) -> PyResult<Vec<usize>> {
        self.0
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "{op}: negative dimension {d} in shape {:?}",
                        self.0
                    ))
                })
            })
            .collect()
    }
}

impl Axes {
    /// The axes as a slice, for the kiln ops that take `Option<&[i64]>`.
    pub fn of(axes: &Option<Axes>) -> Option<&[i64]> {
        axes.as_ref().map(|a| a.0.as_slice())
    }
}

/// Adds every op to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    math::register(m)?;
    conv::register(m)?;
    reduce::register(m)?;
    shape::register(m)?;
    creation::register(m)?;
    linalg::register(m)?;
    derived::register(m)?;
    quantized::register(m)?;
    sort::register(m)
}
