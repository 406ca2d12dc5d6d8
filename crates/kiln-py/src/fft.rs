//! The native `fft` submodule: `kiln::ops::fft`'s n-dimensional transforms with mlx's `s`, `axes`
//! and `norm` arguments. `kiln.core.fft` writes the one- and two-dimensional forms, the shifts and
//! the sample frequencies over these.

use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use crate::errors::OrRaise;
use crate::ops::{Axes, Sizes};
use kiln::ops::fft::{self, FftNorm};
use pyo3::prelude::*;

type Transform = fn(kiln::Array, Option<&[i64]>, Option<&[i64]>, FftNorm) -> kiln::Result<kiln::Array>;

fn run(op: &str, f: Transform, a: Operand, s: Option<Sizes>, axes: Option<Axes>, norm: &str, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let norm = FftNorm::from_name(op, norm).or_raise()?;
    let s = s.map(|s| s.0);
    on(stream.as_ref(), || f(a.0, s.as_deref(), Axes::of(&axes), norm)).map(PyArray::from)
}

macro_rules! transforms {
    ($($name:ident => $f:path, $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[pyfunction]
            #[pyo3(signature = (a, s = None, axes = None, norm = "backward", *, stream = None))]
            fn $name(a: Operand, s: Option<Sizes>, axes: Option<Axes>, norm: &str, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
                run(stringify!($name), |x, s, axes, norm| $f(x, s, axes, norm), a, s, axes, norm, stream)
            }
        )*
        /// Adds the `fft` submodule to `parent`.
        pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
            let m = PyModule::new(parent.py(), "fft")?;
            $(m.add_function(wrap_pyfunction!($name, &m)?)?;)*
            parent.add_submodule(&m)
        }
    };
}

transforms! {
    fftn => fft::fftn, "The n-dimensional discrete Fourier transform over `axes`, each cropped or zero-padded to `s`.";
    ifftn => fft::ifftn, "The n-dimensional inverse discrete Fourier transform.";
    rfftn => fft::rfftn, "The n-dimensional transform of a real array (n/2 + 1 values along the last axis).";
    irfftn => fft::irfftn, "The inverse of `rfftn`: a real array.";
}
