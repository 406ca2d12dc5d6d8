//! Affine quantization: each group of `group_size` (32, 64 or 128) values along the last axis
//! keeps a scale `s` and a bias `b` in the matrix's dtype, and each value the integer
//! `q = round((w - b) / s)` in `[0, 2^bits - 1]` (bits 2, 3, 4, 5, 6 or 8), so `w ≈ s·q + b`.
//! The choice of `s` and `b` is mlx's: the group's edge of larger magnitude is represented
//! exactly, and a group whose values straddle zero keeps zero exact.

use super::packing::{pack, unpack, with_last};
use super::{check_quantizable, packed_length};
use crate::array::Array;
use crate::dtype::{promote_types, Dtype};
use crate::error::{Error, Result};
use crate::ops::*;

/// Checks `group_size` and `bits` against what the format allows.
pub(super) fn check_format(op: &str, group_size: usize, bits: u32) -> Result<()> {
    if ![32, 64, 128].contains(&group_size) {
        return Err(Error::value(op, format!("the group size must be 32, 64 or 128, got {group_size}")));
    }
    if !(2..=8).contains(&bits) || bits == 7 {
        return Err(Error::value(op, format!("bits must be 2, 3, 4, 5, 6 or 8, got {bits}")));
    }
    Ok(())
}

/// Quantizes `w` (floating point, at least 2-d, its last axis a multiple of `group_size`):
/// returns the packed words, the scales and the biases.
pub fn quantize(w: impl AsArray, group_size: usize, bits: u32) -> Result<(Array, Array, Array)> {
    let op = "quantize";
    let w = w.as_array();
    check_format(op, group_size, bits)?;
    let k = check_quantizable(op, &w, group_size)?;
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

/// Checks affine `words` with their `scales` and `biases`; returns the values per row.
pub(super) fn check_affine(op: &str, words: &Array, scales: &Array, biases: &Array, group_size: usize, bits: u32) -> Result<usize> {
    check_format(op, group_size, bits)?;
    let k = packed_length(op, words, group_size, bits)?;
    for (name, p) in [("scales", scales), ("biases", biases)] {
        super::check_per_group(op, name, p, words, k, group_size)?;
        if !p.dtype().is_float() {
            return Err(Error::dtype(op, format!("{name} must be floating point in affine mode, got {}", p.dtype())));
        }
    }
    Ok(k)
}

/// The matrix that affine `words`, `scales` and `biases` stand for: `scales · q + biases`,
/// computed in float32 and given in `dtype` (a floating-point one; default: the scales' and
/// biases' dtype).
pub(super) fn dequantize_affine(
    op: &str,
    words: &Array,
    scales: &Array,
    biases: &Array,
    group_size: usize,
    bits: u32,
    dtype: Option<Dtype>,
) -> Result<Array> {
    let k = check_affine(op, words, scales, biases, group_size, bits)?;
    let dtype = dtype.unwrap_or(promote_types(scales.dtype(), biases.dtype()));
    super::check_result_dtype(op, dtype)?;
    let q = reshape(unpack(words, bits, k)?, &with_last(words.shape(), &[k / group_size, group_size]))?;
    let per_group = |p: &Array| -> Result<Array> { expand_dims(astype(p, Dtype::F32)?, &[-1]) };
    let w = add(multiply(astype(q, Dtype::F32)?, per_group(scales)?)?, per_group(biases)?)?;
    astype(reshape(w, &with_last(words.shape(), &[k]))?, dtype)
}

