//! Affine quantization in mlx's format: [`quantize`], [`dequantize`], [`quantized_matmul`] and
//! [`gather_qmm`].
//!
//! A matrix `w` of shape `(..., K)` is cut into groups of `group_size` (32, 64 or 128) along its
//! last axis; each group keeps a scale `s` and a bias `b`, and each element the integer
//! `q = round((w - b) / s)` in `[0, 2^bits - 1]` (bits 2, 3, 4, 5, 6 or 8), so `w ≈ s·q + b`.
//! The integers are packed as one little-endian bit stream into uint32 words (element `i` at
//! bits `i·bits ..`), giving `(..., K·bits/32)` words; scales and biases are `(..., K /
//! group_size)` in `w`'s dtype. The choice of `s` and `b` is mlx's: the group's edge of larger
//! magnitude is represented exactly, and a group whose values straddle zero keeps zero exact.
//!
//! The ops are compositions of core ops (so they run on every device and under every
//! transform); the products dequantize, then multiply. A fused kernel that multiplies straight
//! from the packed words is the speed work of the nn issue.

use super::*;
use crate::dtype::promote_types;
use crate::shape::fmt_shape;

/// Checks `group_size` and `bits` against what the format allows.
fn check_format(op: &str, group_size: usize, bits: u32) -> Result<()> {
    if ![32, 64, 128].contains(&group_size) {
        return Err(Error::value(op, format!("the group size must be 32, 64 or 128, got {group_size}")));
    }
    if !(2..=8).contains(&bits) || bits == 7 {
        return Err(Error::value(op, format!("bits must be 2, 3, 4, 5, 6 or 8, got {bits}")));
    }
    Ok(())
}

/// `shape` with its last axis replaced by `last`, as reshape arguments.
fn with_last(shape: &[usize], last: &[usize]) -> Vec<i64> {
    shape[..shape.len() - 1].iter().chain(last).map(|&d| d as i64).collect()
}

/// Quantizes `w` (floating point, at least 2-d, its last axis a multiple of `group_size`):
/// returns the packed words, the scales and the biases.
pub fn quantize(w: impl AsArray, group_size: usize, bits: u32) -> Result<(Array, Array, Array)> {
    let op = "quantize";
    let w = w.as_array();
    check_format(op, group_size, bits)?;
    if !w.dtype().is_float() {
        return Err(Error::dtype(op, format!("only real floating point arrays can be quantized, got {}", w.dtype())));
    }
    if w.ndim() < 2 {
        return Err(Error::shape(op, format!("the matrix must have at least 2 dimensions, got shape {}", fmt_shape(w.shape()))));
    }
    let k = w.shape()[w.ndim() - 1];
    if !k.is_multiple_of(group_size) || !(k * bits as usize).is_multiple_of(32) {
        return Err(Error::shape(
            op,
            format!("the last axis ({k}) must be a multiple of the group size {group_size}; got shape {}", fmt_shape(w.shape())),
        ));
    }
    let groups = reshape(&w, &with_last(w.shape(), &[k / group_size, group_size]))?;
    let groups = astype(groups, Dtype::F32)?;
    let (high, low) = (max(&groups, Some(&[-1]), true)?, min(&groups, Some(&[-1]), true)?);
    let levels = ((1u32 << bits) - 1) as f64;
    // The edge of larger magnitude is kept exact: scale and bias are signed toward it.
    let low_wins = greater(abs(&low)?, abs(&high)?)?;
    let spread = maximum(divide(subtract(&high, &low)?, levels)?, 1e-7)?;
    let scale = where_(&low_wins, &spread, negative(&spread)?)?;
    let edge = where_(&low_wins, &low, &high)?;
    let q0 = round(divide(&edge, &scale)?)?;
    let scale = where_(not_equal(&q0, 0.0)?, divide(&edge, &q0)?, &scale)?;
    let bias = where_(equal(&q0, 0.0)?, 0.0, &edge)?;
    let q = clip(round(divide(subtract(&groups, &bias)?, &scale)?)?, Some(&0.0), Some(&levels))?;
    let q = reshape(astype(q, Dtype::U32)?, &with_last(w.shape(), &[k]))?;
    let words = pack(&q, bits)?;
    let squeeze_last = |a: Array| -> Result<Array> { astype(reshape(a, &with_last(w.shape(), &[k / group_size]))?, w.dtype()) };
    Ok((words, squeeze_last(scale)?, squeeze_last(bias)?))
}

/// A uint32 scalar (a strong one, so uint32 arithmetic stays uint32).
fn word(v: u32) -> Array {
    Array::scalar(v)
}

/// Packs `(..., K)` integers (K a multiple of 32) of `bits` bits into `(..., K·bits/32)` uint32 words, as one
/// little-endian bit stream: each value's bits are spread out, then gathered 32 at a time.
pub(crate) fn pack(q: &Array, bits: u32) -> Result<Array> {
    let k = q.shape()[q.ndim() - 1];
    from_bits(&reshape(to_bits(q, bits)?, &with_last(q.shape(), &[k / 32 * bits as usize, 32]))?)
}

/// Unpacks `(..., W)` words into the `count = W·32/bits` integers of `bits` bits they hold (the
/// inverse of [`pack`]).
fn unpack(words: &Array, bits: u32, count: usize) -> Result<Array> {
    if 32 % bits == 0 {
        // Whole values per word: shift each word by every value's offset.
        let offsets = multiply(arange(0.0, (32 / bits) as f64, 1.0, Dtype::U32)?, word(bits))?;
        let values = bitwise_and(right_shift(expand_dims(words, &[-1])?, &offsets)?, word((1 << bits) - 1))?;
        return reshape(values, &with_last(words.shape(), &[count]));
    }
    from_bits(&reshape(to_bits(words, 32)?, &with_last(words.shape(), &[count, bits as usize]))?)
}

/// The low `width` bits of each uint32 value, along a new last axis (lowest bit first, 0 or 1).
fn to_bits(x: &Array, width: u32) -> Result<Array> {
    bitwise_and(right_shift(expand_dims(x, &[-1])?, arange(0.0, width as f64, 1.0, Dtype::U32)?)?, word(1))
}

/// The uint32 values whose bits (lowest first) lie along the last axis: the inverse of
/// [`to_bits`]. No two bits share a place, so the sum with place values is an exact OR and
/// never exceeds 32 bits.
fn from_bits(bits: &Array) -> Result<Array> {
    let width = bits.shape()[bits.ndim() - 1];
    let places = left_shift(word(1), arange(0.0, width as f64, 1.0, Dtype::U32)?)?;
    astype(sum(multiply(bits, places)?, Some(&[-1]), false)?, Dtype::U32)
}

/// Checks packed `words` against their `scales` and `biases`; returns the unpacked length K.
fn check_packed(op: &str, words: &Array, scales: &Array, biases: &Array, group_size: usize, bits: u32) -> Result<usize> {
    check_format(op, group_size, bits)?;
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
                "words of shape {} do not hold whole groups of {group_size} values of {bits} bits; check bits and group_size",
                fmt_shape(words.shape())
            ),
        ));
    }
    let expected = [&words.shape()[..words.ndim() - 1], &[k / group_size]].concat();
    for (name, p) in [("scales", scales), ("biases", biases)] {
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
        if !p.dtype().is_float() {
            return Err(Error::dtype(op, format!("{name} must be floating point, got {}", p.dtype())));
        }
    }
    Ok(k)
}

/// The matrix that `words`, `scales` and `biases` stand for: `scales · q + biases`, computed in
/// float32 and given in `dtype` (a floating-point one; default: the scales' and biases' dtype).
pub fn dequantize(words: &Array, scales: &Array, biases: &Array, group_size: usize, bits: u32, dtype: Option<Dtype>) -> Result<Array> {
    let k = check_packed("dequantize", words, scales, biases, group_size, bits)?;
    let dtype = dtype.unwrap_or(promote_types(scales.dtype(), biases.dtype()));
    if !dtype.is_float() {
        return Err(Error::dtype("dequantize", format!("the result must have a floating-point dtype, got {dtype}")));
    }
    let q = reshape(unpack(words, bits, k)?, &with_last(words.shape(), &[k / group_size, group_size]))?;
    let per_group = |p: &Array| -> Result<Array> { expand_dims(astype(p, Dtype::F32)?, &[-1]) };
    let w = add(multiply(astype(q, Dtype::F32)?, per_group(scales)?)?, per_group(biases)?)?;
    astype(reshape(w, &with_last(words.shape(), &[k]))?, dtype)
}

/// `x @ wᵀ` (or `x @ w` when not `transpose`) for a quantized `w`; the result has the dtype of
/// `x`, the scales and the biases promoted together.
pub fn quantized_matmul(x: impl AsArray, words: &Array, scales: &Array, biases: &Array, transpose: bool, group_size: usize, bits: u32) -> Result<Array> {
    gather_qmm(x, words, scales, biases, None, None, transpose, group_size, bits)
}

/// [`gather_mm`] with a quantized right-hand side: `x[lhs_indices] @ w[rhs_indices]ᵀ` (or
/// without the transpose), the indices selecting among the leading (batch) matrices.
#[allow(clippy::too_many_arguments)] // mlx's signature
pub fn gather_qmm(
    x: impl AsArray,
    words: &Array,
    scales: &Array,
    biases: &Array,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Result<Array> {
    let op = if lhs_indices.is_none() && rhs_indices.is_none() { "quantized_matmul" } else { "gather_qmm" };
    let x = x.as_array();
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("x must be floating point, got {}", x.dtype())));
    }
    let dtype = promote_types(promote_types(x.dtype(), scales.dtype()), biases.dtype());
    let x = astype(&x, dtype)?;
    let w = dequantize(words, scales, biases, group_size, bits, Some(dtype)).map_err(|e| e.in_op(op))?;
    let (rows, cols) = (w.shape()[w.ndim() - 2], w.shape()[w.ndim() - 1]);
    let inner = if transpose { cols } else { rows };
    if x.ndim() == 0 || x.shape()[x.ndim() - 1] != inner {
        return Err(Error::shape(
            op,
            format!(
                "x of shape {} does not multiply the quantized matrix of shape {} (transpose = {transpose}): the last axis must be {inner}",
                fmt_shape(x.shape()),
                fmt_shape(w.shape())
            ),
        ));
    }
    let w = if transpose { swapaxes(&w, -1, -2)? } else { w };
    gather_mm(&x, &w, lhs_indices, rhs_indices, false).map_err(|e| e.in_op(op))
}
