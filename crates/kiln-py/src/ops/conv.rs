//! Convolutions: `conv1d`, `conv2d`, `conv3d`, `conv_transpose1d/2d/3d`, `conv_general` and
//! `convolve`, with mlx.core's argument names and defaults.

use super::int_or_ints;
use crate::array::PyArray;
use crate::convert::Operand;
use crate::device::{on, StreamOrDevice};
use kiln::ops::{self, ConvParams};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// A per-axis argument of a convolution (stride, padding, dilation): one int for every spatial
/// axis, or a sequence of one per axis.
pub struct Spatial(Vec<i64>);

impl<'a, 'py> FromPyObject<'a, 'py> for Spatial {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        int_or_ints(&obj, "a convolution's stride, padding and dilation").map(Spatial)
    }
}

impl Spatial {
    /// The `d` values of op `op` (an int repeated), refusing a sequence of another length. As in
    /// mlx, the input's rank decides the convolution: `conv1d`'s single values fit any rank, while
    /// `conv2d`'s pairs refuse an input without two spatial axes.
    fn of(&self, what: &str, op: &str, d: usize) -> PyResult<Vec<i64>> {
        match self.0.len() {
            1 => Ok(vec![self.0[0]; d]),
            n if n == d => Ok(self.0.clone()),
            _ => Err(PyValueError::new_err(format!("{op}: {what} must be an int or {d} ints, got {:?}", self.0))),
        }
    }
}

/// A convolution over `d` spatial axes, transposed when `output_padding` is given (the body of
/// `conv1d/2d/3d` and `conv_transpose1d/2d/3d`).
#[allow(clippy::too_many_arguments)]
fn conv_nd(
    op: &str,
    d: usize,
    input: Operand,
    weight: Operand,
    stride: Spatial,
    padding: Spatial,
    dilation: Spatial,
    output_padding: Option<Spatial>,
    groups: i64,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let (stride, padding) = (stride.of("stride", op, d)?, padding.of("padding", op, d)?);
    let dilation = dilation.of("dilation", op, d)?;
    let output_padding = output_padding.map(|o| o.of("output_padding", op, d)).transpose()?;
    on(stream.as_ref(), || {
        match &output_padding {
            None => ops::conv(&input.0, &weight.0, &stride, &padding, &dilation, groups),
            Some(extra) => ops::conv_transpose(&input.0, &weight.0, &stride, &padding, &dilation, extra, groups),
        }
        .map_err(|e| e.in_op(op))
    })
    .map(PyArray::from)
}

/// Defines a convolution over a fixed number of spatial axes (`conv1d`, `conv2d`, `conv3d`), or
/// with an `output_padding` argument a transposed one (`conv_transpose1d/2d/3d`).
macro_rules! conv_fn {
    ($name:ident, $d:literal, $doc:literal $(, $output_padding:ident)?) => {
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (input, weight, /, stride = Spatial(vec![1]), padding = Spatial(vec![0]), dilation = Spatial(vec![1]), $($output_padding = Spatial(vec![0]),)? groups = 1, *, stream = None))]
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            input: Operand,
            weight: Operand,
            stride: Spatial,
            padding: Spatial,
            dilation: Spatial,
            $($output_padding: Spatial,)?
            groups: i64,
            stream: Option<StreamOrDevice>,
        ) -> PyResult<PyArray> {
            let transposed: Option<Spatial> = None $(.or(Some($output_padding)))?;
            conv_nd(stringify!($name), $d, input, weight, stride, padding, dilation, transposed, groups, stream)
        }
    };
}

conv_fn!(conv1d, 1, "1D convolution of `input` (N, L, C_in) with `weight` (C_out, K, C_in / groups).");
conv_fn!(conv2d, 2, "2D convolution of `input` (N, H, W, C_in) with `weight` (C_out, KH, KW, C_in / groups).");
conv_fn!(conv3d, 3, "3D convolution of `input` (N, D, H, W, C_in) with `weight` (C_out, KD, KH, KW, C_in / groups).");
conv_fn!(conv_transpose1d, 1, "1D transposed convolution of `input` (N, L, C_in) with `weight` (C_out, K, C_in / groups).", output_padding);
conv_fn!(conv_transpose2d, 2, "2D transposed convolution of `input` (N, H, W, C_in) with `weight` (C_out, KH, KW, C_in / groups).", output_padding);
conv_fn!(
    conv_transpose3d,
    3,
    "3D transposed convolution of `input` (N, D, H, W, C_in) with `weight` (C_out, KD, KH, KW, C_in / groups).",
    output_padding
);

/// The `(lo, hi)` padding of `conv_general`: an int, a sequence of ints (both sides alike), or a
/// pair of sequences (before, after).
fn general_padding(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Vec<i64>)> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
        if items.len() == 2 && items.iter().all(|i| i.is_instance_of::<PyTuple>() || i.is_instance_of::<PyList>()) {
            return Ok((int_or_ints(&items[0], "padding")?, int_or_ints(&items[1], "padding")?));
        }
    }
    let both = int_or_ints(obj, "padding")?;
    Ok((both.clone(), both))
}

/// General convolution (mlx's `conv_general`): strides, padding (or a (before, after) pair),
/// kernel and input dilation, groups and kernel flipping, over 1 to 3 spatial axes.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = Spatial(vec![1]), padding = None, kernel_dilation = Spatial(vec![1]), input_dilation = Spatial(vec![1]), groups = 1, flip = false, *, stream = None))]
#[allow(clippy::too_many_arguments)]
pub fn conv_general(
    input: Operand,
    weight: Operand,
    stride: Spatial,
    padding: Option<Bound<'_, PyAny>>,
    kernel_dilation: Spatial,
    input_dilation: Spatial,
    groups: i64,
    flip: bool,
    stream: Option<StreamOrDevice>,
) -> PyResult<PyArray> {
    let (padding_lo, padding_hi) = padding.as_ref().map_or(Ok((vec![], vec![])), general_padding)?;
    let params = ConvParams {
        stride: stride.0,
        padding_lo,
        padding_hi,
        kernel_dilation: kernel_dilation.0,
        input_dilation: input_dilation.0,
        groups,
        flip,
    };
    on(stream.as_ref(), || ops::conv_general(&input.0, &weight.0, &params)).map(PyArray::from)
}

/// numpy's `convolve` of two 1-D arrays, `mode` "full", "same" or "valid".
#[pyfunction]
#[pyo3(signature = (a, v, /, mode = "full", *, stream = None))]
pub fn convolve(a: Operand, v: Operand, mode: &str, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
    let mode = match mode {
        "full" => ops::ConvolveMode::Full,
        "same" => ops::ConvolveMode::Same,
        "valid" => ops::ConvolveMode::Valid,
        _ => return Err(PyValueError::new_err(format!("convolve: mode must be 'full', 'same' or 'valid', got '{mode}'"))),
    };
    on(stream.as_ref(), || ops::convolve(&a.0, &v.0, mode)).map(PyArray::from)
}

/// Adds the convolutions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(conv1d, m)?,
        wrap_pyfunction!(conv2d, m)?,
        wrap_pyfunction!(conv3d, m)?,
        wrap_pyfunction!(conv_transpose1d, m)?,
        wrap_pyfunction!(conv_transpose2d, m)?,
        wrap_pyfunction!(conv_transpose3d, m)?,
        wrap_pyfunction!(conv_general, m)?,
        wrap_pyfunction!(convolve, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
