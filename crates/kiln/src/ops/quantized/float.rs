//! mlx's float formats: the values are small floats, each group of them shares one 8-bit
//! scale, and there are no biases.
//!
//! - **mxfp4**: groups of 32, values e2m1 (4 bits: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}), scales e8m0
//!   (the power of two 2^(s - 127)).
//! - **mxfp8**: groups of 32, values e4m3 (8 bits, see `ops::fp8`), scales e8m0.
//! - **nvfp4**: groups of 16, values e2m1, scales e4m3, with an optional float32 global scale
//!   `g` for the whole matrix: the stored scales are multiplied by 448·6/g, so that the scales
//!   of a matrix of small values still use e4m3's whole range.
//!
//! A group's ideal scale is its largest magnitude over the value format's largest (6 or 448).
//! An e8m0 scale is the smallest power of two at least that large (the binary logarithm rounded
//! up, as NVIDIA's conversion and mlx's CUDA kernels do), so no value saturates. mlx's CPU and
//! Metal kernels round the logarithm to the nearest integer instead, which can clip a group's
//! largest values by up to 29%; the stored format is the same, so either reads the other's
//! words. An e4m3 scale is the nearest e4m3 value. Each value is then
//! divided by its scale and rounded to the nearest representable value, ties to even,
//! saturating at the largest. 4-bit codes are sign·8 + the magnitude's index; codes pack into
//! words as in every mode (`packing`).
//!
//! Dequantization is a custom function whose vjp refuses: words and scales are integer codes
//! with no gradient (mlx raises the same), rather than a silent zero.

use super::packing::{pack, unpack, with_last, word};
use super::{check_per_group, check_quantizable, packed_length};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::ops::*;
use crate::transforms::CustomFunction;

/// One of mlx's float quantization formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatFormat {
    /// e2m1 values in groups of 32 with e8m0 scales (OCP MX).
    Mxfp4,
    /// e4m3 values in groups of 32 with e8m0 scales (OCP MX).
    Mxfp8,
    /// e2m1 values in groups of 16 with e4m3 scales (NVIDIA), optionally a global scale.
    Nvfp4,
}

/// The e2m1 magnitudes of codes 0 to 7 (code + 8 is the negative).
const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
/// The largest e4m3 value times the largest e2m1 value: nvfp4's global scale maps to it.
const NVFP4_RANGE: f64 = 448.0 * 6.0;

impl FloatFormat {
    /// The format mlx calls `name` ("mxfp4", "mxfp8" or "nvfp4").
    pub fn from_name(name: &str) -> Option<FloatFormat> {
        match name {
            "mxfp4" => Some(FloatFormat::Mxfp4),
            "mxfp8" => Some(FloatFormat::Mxfp8),
            "nvfp4" => Some(FloatFormat::Nvfp4),
            _ => None,
        }
    }

    /// mlx's name of the format.
    pub fn name(self) -> &'static str {
        match self {
            FloatFormat::Mxfp4 => "mxfp4",
            FloatFormat::Mxfp8 => "mxfp8",
            FloatFormat::Nvfp4 => "nvfp4",
        }
    }

    /// How many values share a scale.
    pub fn group_size(self) -> usize {
        if self == FloatFormat::Nvfp4 {
            16
        } else {
            32
        }
    }

    /// Bits per value.
    pub fn bits(self) -> u32 {
        if self == FloatFormat::Mxfp8 {
            8
        } else {
            4
        }
    }

    /// Checks a group size and bit count a caller gave (mlx's signatures take both) against
    /// the format's own, which are the only ones it has.
    pub fn check_settings(self, op: &str, group_size: Option<usize>, bits: Option<u32>) -> Result<()> {
        if group_size.is_some_and(|g| g != self.group_size()) {
            return Err(Error::value(
                op,
                format!("{} quantization uses groups of {}, got group_size={}", self.name(), self.group_size(), group_size.unwrap()),
            ));
        }
        if bits.is_some_and(|b| b != self.bits()) {
            return Err(Error::value(op, format!("{} quantization uses {} bits, got bits={}", self.name(), self.bits(), bits.unwrap())));
        }
        Ok(())
    }

    /// The largest magnitude of the values' encoding.
    fn largest(self) -> f64 {
        if self == FloatFormat::Mxfp8 {
            448.0
        } else {
            6.0
        }
    }
}

/// Checks a global scale: nvfp4 only, one float32 value.
pub(super) fn check_global_scale(op: &str, format: FloatFormat, global_scale: Option<&Array>) -> Result<()> {
    let Some(g) = global_scale else { return Ok(()) };
    if format != FloatFormat::Nvfp4 {
        return Err(Error::value(op, format!("a global scale is only used by nvfp4 quantization, not {}", format.name())));
    }
    if g.size() != 1 {
        return Err(Error::shape(op, format!("the global scale must be one value, got shape {:?}", g.shape())));
    }
    if g.dtype() != Dtype::F32 {
        return Err(Error::dtype(op, format!("the global scale must be float32, got {}", g.dtype())));
    }
    Ok(())
}

/// What nvfp4's scales are multiplied by before encoding: 448·6 / g, or 1 without a global scale.
fn scale_encoding(global_scale: Option<&Array>) -> Result<Array> {
    match global_scale {
        Some(g) => divide(NVFP4_RANGE, reshape(g, &[])?),
        None => Ok(Array::scalar(1f32)),
    }
}

/// The e8m0 code of each (non-negative float32) ideal scale: the exponent field of the
/// smallest power of two at least as large, read from its bits (exact on every device): the
/// field itself for a power of two, one more otherwise. A zero scale gives 2⁰ (as mlx's),
/// infinity and NaN give e8m0's NaN, 255.
fn e8m0_code(ideal: &Array) -> Result<Array> {
    let bits = view(ideal, Dtype::U32)?;
    let field = right_shift(&bits, word(23))?;
    let inexact = not_equal(bitwise_and(&bits, word(0x7F_FFFF))?, word(0))?;
    let code = where_(logical_and(inexact, less(&field, word(255))?)?, add(&field, word(1))?, &field)?;
    astype(where_(equal(ideal, 0.0)?, word(127), code)?, Dtype::U8)
}

/// The float32 values of e8m0 codes: 2^(code - 127), built from the exponent bits (exact);
/// code 0 is the subnormal 2⁻¹²⁷ and 255 is NaN.
fn e8m0_value(codes: &Array) -> Result<Array> {
    let codes = astype(codes, Dtype::U32)?;
    let value = view(left_shift(&codes, word(23))?, Dtype::F32)?;
    let value = where_(equal(&codes, 0.0)?, Array::scalar(2f32.powi(-127)), value)?;
    where_(equal(&codes, 255.0)?, f32::NAN, value)
}

/// The e2m1 code of each (already scaled) float32 value: the count of midpoints between
/// neighbours that its magnitude passes, a midpoint itself going to the code with an even
/// index (round half to even), saturating at 6; NaN gives 7 (6, as mlx's); the sign bit adds 8.
fn e2m1_code(values: &Array) -> Result<Array> {
    let magnitude = abs(values)?;
    let mut code = astype(greater(&magnitude, 0.25)?, Dtype::U32)?;
    for (midpoint, even_above) in [(0.75, true), (1.25, false), (1.75, true), (2.5, false), (3.5, true), (5.0, false)] {
        let passed = if even_above { greater_equal(&magnitude, midpoint)? } else { greater(&magnitude, midpoint)? };
        code = add(code, astype(passed, Dtype::U32)?)?;
    }
    let code = where_(isnan(values)?, word(7), code)?;
    let sign = left_shift(right_shift(view(values, Dtype::U32)?, word(31))?, word(3))?;
    bitwise_or(code, sign)
}

/// The float32 values of e2m1 codes.
fn e2m1_value(codes: &Array) -> Result<Array> {
    take(Array::from_slice(&e2m1_table(), &[16])?, codes, None)
}

/// Quantizes `w` (floating point, at least 2-d, its last axis a multiple of the format's group
/// size) in `format`: returns the packed words and the uint8 scale codes. `global_scale` (a
/// float32 value, nvfp4 only) is usually the matrix's largest magnitude.
pub fn quantize_float(w: impl AsArray, format: FloatFormat, global_scale: Option<&Array>) -> Result<(Array, Array)> {
    let op = "quantize";
    let w = w.as_array();
    check_global_scale(op, format, global_scale)?;
    let group = format.group_size();
    let k = check_quantizable(op, &w, group)?;
    let groups = astype(reshape(&w, &with_last(w.shape(), &[k / group, group]))?, Dtype::F32)?;
    let ideal = divide(max(abs(&groups)?, Some(&[-1]), true)?, format.largest())?;
    let (codes, scale) = if format == FloatFormat::Nvfp4 {
        let encoding = scale_encoding(global_scale)?;
        let codes = to_fp8(multiply(&ideal, &encoding)?)?;
        let scale = divide(from_fp8(&codes, Dtype::F32)?, &encoding)?;
        (codes, scale)
    } else {
        let codes = e8m0_code(&ideal)?;
        let scale = e8m0_value(&codes)?;
        (codes, scale)
    };
    let scaled = where_(equal(&scale, 0.0)?, 0.0, divide(&groups, &scale)?)?;
    let scaled = reshape(scaled, &with_last(w.shape(), &[k]))?;
    let value_codes = if format == FloatFormat::Mxfp8 { astype(to_fp8(&scaled)?, Dtype::U32)? } else { e2m1_code(&scaled)? };
    Ok((pack(&value_codes, format.bits())?, reshape(codes, &with_last(w.shape(), &[k / group]))?))
}

/// Checks `words` and uint8 `scales` in `format` (and the global scale); returns the values per
/// row.
pub(super) fn check_float(op: &str, words: &Array, scales: &Array, format: FloatFormat, global_scale: Option<&Array>) -> Result<usize> {
    check_global_scale(op, format, global_scale)?;
    let k = packed_length(op, words, format.group_size(), format.bits())?;
    check_per_group(op, "scales", scales, words, k, format.group_size())?;
    if scales.dtype() != Dtype::U8 {
        return Err(Error::dtype(op, format!("the scales of {} quantization are uint8 codes, got {}", format.name(), scales.dtype())));
    }
    Ok(k)
}

/// The matrix that `words` and uint8 `scales` in `format` stand for, in `dtype` (a
/// floating-point one; default bfloat16, as mlx's), with nvfp4's `global_scale` if it was
/// quantized with one.
pub(super) fn dequantize_float(
    op: &str,
    words: &Array,
    scales: &Array,
    format: FloatFormat,
    global_scale: Option<&Array>,
    dtype: Option<Dtype>,
) -> Result<Array> {
    let k = check_float(op, words, scales, format, global_scale)?;
    let group = format.group_size();
    let dtype = dtype.unwrap_or(Dtype::BF16);
    super::check_result_dtype(op, dtype)?;
    let forward = move |args: &[Array]| -> Result<Vec<Array>> {
        let (words, scales) = (&args[0], &args[1]);
        let values = reshape(code_values(words, format, k)?, &with_last(words.shape(), &[k / group, group]))?;
        let w = multiply(values, expand_dims(decode_scales(scales, format, args.get(2))?, &[-1])?)?;
        Ok(vec![astype(reshape(w, &with_last(words.shape(), &[k]))?, dtype)?])
    };
    let mut args = vec![words.clone(), scales.clone()];
    args.extend(global_scale.cloned());
    Ok(without_gradient(op, format, forward, &args)?.remove(0))
}

/// The values of the `k` codes per row that `words` hold in `format`, in float32, unscaled.
fn code_values(words: &Array, format: FloatFormat, k: usize) -> Result<Array> {
    let codes = unpack(words, format.bits(), k)?;
    if format == FloatFormat::Mxfp8 {
        from_fp8(astype(codes, Dtype::U8)?, Dtype::F32)
    } else {
        e2m1_value(&codes)
    }
}

/// The float32 values of scale codes in `format`, with nvfp4's global scale if any.
fn decode_scales(scales: &Array, format: FloatFormat, global_scale: Option<&Array>) -> Result<Array> {
    let encoding = if format == FloatFormat::Nvfp4 { Some(scale_encoding(global_scale)?) } else { None };
    scale_code_values(scales, encoding.as_ref())
}

/// The scale codes and, for nvfp4, the global scale's encoding (1 without one) as the kernels
/// read them, after the checks of [`dequantize_float`], through a function that refuses
/// gradients as it does: the kernels decode the codes themselves.
pub(super) fn kernel_scales(op: &str, scales: &Array, format: FloatFormat, global_scale: Option<&Array>) -> Result<Vec<Array>> {
    let forward = move |args: &[Array]| -> Result<Vec<Array>> {
        let mut out = vec![args[0].clone()];
        if format == FloatFormat::Nvfp4 {
            out.push(scale_encoding(args.get(1))?);
        }
        Ok(out)
    };
    let mut args = vec![scales.clone()];
    args.extend(global_scale.cloned());
    without_gradient(op, format, forward, &args)
}

/// The float32 values of e8m0 codes (`encoding` `None`) or of e4m3 codes divided by nvfp4's
/// `encoding`, as ops: [`decode_scales`] after [`kernel_scales`].
pub(super) fn scale_code_values(codes: &Array, encoding: Option<&Array>) -> Result<Array> {
    match encoding {
        Some(encoding) => divide(from_fp8(codes, Dtype::F32)?, encoding),
        None => e8m0_value(codes),
    }
}

/// Calls `forward` on `args` (codes: words, scales, a global scale) as a custom function whose
/// vjp refuses: the codes have no gradient.
fn without_gradient(
    op: &str,
    format: FloatFormat,
    forward: impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
    args: &[Array],
) -> Result<Vec<Array>> {
    let name = op.to_string();
    let refusal = move |_: &[Array], _: &[Array], _: &[Array]| -> Result<Vec<Array>> {
        Err(Error::value(
            &name,
            format!(
                "no gradient with respect to the words or scales of {} quantization: they are integer codes (differentiate the matrix before quantizing it)",
                format.name()
            ),
        ))
    };
    CustomFunction::new("dequantize", forward).vjp(refusal).into_fn()(args)
}

/// The 16 e2m1 codes' values: magnitudes by code, then their negatives (the sign bit is bit 3).
pub(super) fn e2m1_table() -> Vec<f32> {
    E2M1.iter().copied().chain(E2M1.iter().map(|v| -v)).collect()
}
