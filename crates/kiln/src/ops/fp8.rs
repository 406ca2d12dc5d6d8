//! 8-bit floats in the e4m3 format (`float8_e4m3fn`: 1 sign bit, 4 exponent bits of bias 7, 3
//! mantissa bits, no infinities, 0x7F/0xFF is NaN, largest finite value 448), stored as uint8,
//! as mlx's `to_fp8` and `from_fp8`. Both are composites of exact elementwise ops, so they run
//! on every device, fuse under compile and batch under vmap.

use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// The code of the largest finite e4m3 value, 448 = 1.75 · 2⁸.
const MAX_FINITE: i32 = 0x7E;
/// The NaN code (sign bit clear).
const NAN: i32 = 0x7F;

/// `x` (any float dtype; float64 is rounded to float32 first) rounded to the nearest e4m3
/// value, ties to even, as its uint8 code; magnitudes beyond 448 saturate to ±448 and NaN gives
/// 0x7F (0xFF with its sign bit set).
pub fn to_fp8(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if !x.dtype().is_float() {
        return Err(Error::dtype("to_fp8", format!("needs a floating-point array, got {}; cast it first", x.dtype())));
    }
    let x = cast(&x, Dtype::F32)?;
    let magnitude = super::abs(&x)?;
    // The binary exponent, exactly, from float32's exponent field; values below e4m3's smallest
    // normal (2⁻⁶) share the subnormal step 2⁻⁹.
    let field = super::bitwise_and(super::right_shift(super::view(&magnitude, Dtype::U32)?, 23)?, 0xFF)?;
    let exponent = super::clip(super::subtract(cast(&field, Dtype::F32)?, 127.0)?, Some(&-6.0), Some(&8.0))?;
    // code = 8·(e + 6) + round(|x|·2^(3 - e)): the mantissa's rounding carries into the exponent.
    let scaled = super::multiply(&magnitude, super::power(2.0, super::subtract(3.0, &exponent)?)?)?;
    let code = super::add(super::multiply(super::add(&exponent, 6.0)?, 8.0)?, super::round(&scaled)?)?;
    let code = super::minimum(&code, MAX_FINITE as f64)?;
    let code = super::where_(super::isnan(&x)?, NAN as f64, &code)?;
    let sign = super::where_(super::less(super::view(&x, Dtype::I32)?, 0)?, Array::scalar(0x80u32), Array::scalar(0u32))?;
    cast(&super::bitwise_or(cast(&code, Dtype::U32)?, sign)?, Dtype::U8)
}

/// The values of e4m3 codes `x` (uint8) in float `dtype`, exactly (every e4m3 value is a normal
/// float16, bfloat16, float32 and float64 value).
pub fn from_fp8(x: impl AsArray, dtype: Dtype) -> Result<Array> {
    let x = x.as_array();
    if x.dtype() != Dtype::U8 {
        return Err(Error::dtype("from_fp8", format!("needs uint8 codes (from to_fp8), got {}", x.dtype())));
    }
    if !dtype.is_float() {
        return Err(Error::dtype("from_fp8", format!("decodes into a floating-point dtype, got {dtype}")));
    }
    let code = cast(&x, Dtype::U32)?;
    let low = super::bitwise_and(&code, 0x7F)?;
    let (biased, mantissa) = (super::right_shift(&low, 3)?, super::bitwise_and(&low, 7)?);
    // Normal codes: float32 bits with the exponent rebiased from 7 to 127.
    let normal_bits = super::bitwise_or(super::left_shift(super::add(&biased, 120)?, 23)?, super::left_shift(&mantissa, 20)?)?;
    let normal = super::view(&normal_bits, Dtype::F32)?;
    let subnormal = super::multiply(cast(&mantissa, Dtype::F32)?, 2f64.powi(-9))?;
    let magnitude = super::where_(super::equal(&biased, 0)?, subnormal, normal)?;
    let magnitude = super::where_(super::equal(&low, NAN)?, f32::NAN, magnitude)?;
    let negative = super::not_equal(super::bitwise_and(&code, 0x80)?, 0)?;
    cast(&super::where_(negative, super::negative(&magnitude)?, magnitude)?, dtype)
}
