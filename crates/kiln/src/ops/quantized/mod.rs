//! Quantization in mlx's formats: [`quantize`] (affine) and [`quantize_float`] (mxfp4, mxfp8,
//! nvfp4), [`dequantize`], the products [`quantized_matmul`] and [`gather_qmm`], and [`qqmm`],
//! which quantizes both operands.
//!
//! A matrix `w` of shape `(..., K)` is cut into groups along its last axis; each group keeps a
//! scale (and, in affine mode, a bias) and each element a code of `bits` bits. The codes pack
//! into uint32 words (`packing`), giving `(..., K·bits/32)` words; scales (and biases) are
//! `(..., K / group_size)`. How values and scales are encoded is the mode's: `affine` and
//! `float` say.
//!
//! The ops are compositions of core ops (so they run on every device and under every
//! transform), except the products with a 2-d quantized matrix, which run one kernel that reads
//! the packed words once (`product`): a blocked host kernel for a float32 `x` on the CPU, CUDA
//! kernels (`gpu`) for a float32 or half `x` of a few rows on a GPU. Elsewhere the products
//! dequantize, then multiply.

mod affine;
mod float;
mod gpu;
mod packing;
mod product;
mod qqmm;

pub use affine::quantize;
pub use float::{quantize_float, FloatFormat};
pub(crate) use packing::pack;
pub use qqmm::qqmm;

use crate::array::Array;
use crate::dtype::{promote_types, Dtype};
use crate::error::{Error, Result};
use crate::ops::{gather_mm, swapaxes, AsArray};
use crate::shape::fmt_shape;

/// How a quantized matrix's words and scales are to be read.
#[derive(Clone, Copy, Debug)]
pub enum Scheme<'a> {
    /// Integers with a scale and a bias per group ([`quantize`]'s output).
    Affine {
        /// The biases, one per group, floating point.
        biases: &'a Array,
        /// Values per group: 32, 64 or 128.
        group_size: usize,
        /// Bits per value: 2, 3, 4, 5, 6 or 8.
        bits: u32,
    },
    /// Small floats with one uint8 scale code per group ([`quantize_float`]'s output).
    Float {
        /// The format.
        format: FloatFormat,
        /// nvfp4's global scale, if the matrix was quantized with one.
        global_scale: Option<&'a Array>,
    },
}

impl<'a> Scheme<'a> {
    /// The affine scheme of [`quantize`]'s `biases`, `group_size` and `bits`.
    pub fn affine(biases: &'a Array, group_size: usize, bits: u32) -> Scheme<'a> {
        Scheme::Affine { biases, group_size, bits }
    }
}

/// Checks that `w` can be quantized in groups of `group_size`; returns its last axis K.
fn check_quantizable(op: &str, w: &Array, group_size: usize) -> Result<usize> {
    if !w.dtype().is_float() {
        return Err(Error::dtype(op, format!("only real floating point arrays can be quantized, got {}", w.dtype())));
    }
    if w.ndim() < 2 {
        return Err(Error::shape(op, format!("the matrix must have at least 2 dimensions, got shape {}", fmt_shape(w.shape()))));
    }
    let k = w.shape()[w.ndim() - 1];
    if !k.is_multiple_of(group_size) {
        return Err(Error::shape(
            op,
            format!("the last axis ({k}) must be a multiple of the group size {group_size}; got shape {}", fmt_shape(w.shape())),
        ));
    }
    Ok(k)
}

/// Checks packed `words` (uint32, at least 2-d, whole groups of `group_size` values of
/// `bits` bits per row); returns the unpacked length K.
fn packed_length(op: &str, words: &Array, group_size: usize, bits: u32) -> Result<usize> {
    if words.dtype() != Dtype::U32 {
        return Err(Error::dtype(op, format!("the quantized matrix must be uint32 words, got {}", words.dtype())));
    }
    if words.ndim() < 2 {
        return Err(Error::shape(op, format!("the quantized matrix must have at least 2 dimensions, got shape {}", fmt_shape(words.shape()))));
    }
    let w = words.shape()[words.ndim() - 1];
    let k = w.checked_mul(32).map(|b| b / bits as usize).ok_or_else(|| {
        Error::shape(op, format!("words of shape {} hold more values than memory can address", fmt_shape(words.shape())))
    })?;
    if !(w * 32).is_multiple_of(bits as usize) || !k.is_multiple_of(group_size) {
        return Err(Error::shape(
            op,
            format!(
                "words of shape {} do not hold whole groups of {group_size} values of {bits} bits; check bits, group_size and mode",
                fmt_shape(words.shape())
            ),
        ));
    }
    Ok(k)
}

/// Checks that a per-group array (`name`: scales or biases) has one entry per group of `words`.
fn check_per_group(op: &str, name: &str, p: &Array, words: &Array, k: usize, group_size: usize) -> Result<()> {
    let expected = [&words.shape()[..words.ndim() - 1], &[k / group_size]].concat();
    if p.shape() != expected {
        return Err(Error::shape(
            op,
            format!(
                "{name} of shape {} do not match words of shape {} ({k} values in groups of {group_size} need shape {})",
                fmt_shape(p.shape()),
                fmt_shape(words.shape()),
                fmt_shape(&expected)
            ),
        ));
    }
    Ok(())
}

/// Checks a dequantized matrix's dtype: a real floating-point one.
fn check_result_dtype(op: &str, dtype: Dtype) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("the result must have a real floating-point dtype, got {dtype}")));
    }
    Ok(())
}

/// The matrix that `words` and `scales` stand for under `scheme`, in `dtype` (a floating-point
/// one; default: the scales' and biases' dtype in affine mode, bfloat16 in the float formats,
/// as mlx's).
pub fn dequantize(words: &Array, scales: &Array, scheme: Scheme, dtype: Option<Dtype>) -> Result<Array> {
    dequantize_in("dequantize", words, scales, scheme, dtype)
}

/// [`dequantize`] with errors naming `op`.
fn dequantize_in(op: &str, words: &Array, scales: &Array, scheme: Scheme, dtype: Option<Dtype>) -> Result<Array> {
    match scheme {
        Scheme::Affine { biases, group_size, bits } => affine::dequantize_affine(op, words, scales, biases, group_size, bits, dtype),
        Scheme::Float { format, global_scale } => float::dequantize_float(op, words, scales, format, global_scale, dtype),
    }
}

/// `x @ wᵀ` (or `x @ w` when not `transpose`) for a quantized `w`. The result's dtype is x's
/// (promoted with the scales and biases in affine mode).
pub fn quantized_matmul(x: impl AsArray, words: &Array, scales: &Array, scheme: Scheme, transpose: bool) -> Result<Array> {
    gather_qmm(x, words, scales, scheme, None, None, transpose)
}

/// [`gather_mm`] with a quantized right-hand side: `x[lhs_indices] @ w[rhs_indices]ᵀ` (or
/// without the transpose), the indices selecting among the leading (batch) matrices.
pub fn gather_qmm(
    x: impl AsArray,
    words: &Array,
    scales: &Array,
    scheme: Scheme,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    transpose: bool,
) -> Result<Array> {
    let op = if lhs_indices.is_none() && rhs_indices.is_none() { "quantized_matmul" } else { "gather_qmm" };
    let x = x.as_array();
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("x must be floating point, got {}", x.dtype())));
    }
    let dtype = match scheme {
        Scheme::Affine { biases, .. } => promote_types(promote_types(x.dtype(), scales.dtype()), biases.dtype()),
        Scheme::Float { .. } => x.dtype(),
    };
    let k = match scheme {
        Scheme::Affine { biases, group_size, bits } => affine::check_affine(op, words, scales, biases, group_size, bits)?,
        Scheme::Float { format, global_scale } => float::check_float(op, words, scales, format, global_scale)?,
    };
    let x = crate::ops::astype(&x, dtype)?;
    let rows = words.shape()[words.ndim() - 2];
    let inner = if transpose { k } else { rows };
    if x.ndim() == 0 || x.shape()[x.ndim() - 1] != inner {
        return Err(Error::shape(
            op,
            format!(
                "x of shape {} does not multiply the quantized matrix of {rows} rows of {k} values (transpose = {transpose}): the last axis must be {inner}",
                fmt_shape(x.shape()),
            ),
        ));
    }
    if product::runs_as_kernel(dtype, &x, words, lhs_indices.is_some() || rhs_indices.is_some()) {
        return product::fused_product(op, &x, words, scales, scheme, transpose);
    }
    let w = dequantize_in(op, words, scales, scheme, Some(dtype))?;
    let w = if transpose { swapaxes(&w, -1, -2)? } else { w };
    gather_mm(&x, &w, lhs_indices, rhs_indices, false).map_err(|e| e.in_op(op))
}
