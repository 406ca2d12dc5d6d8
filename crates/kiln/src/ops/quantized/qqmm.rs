//! [`qqmm`]: a product whose operands are both quantized in a float format, as in low-precision
//! training: `x` is quantized on the fly, and so is `w` unless it comes quantized.
//!
//! Its vjp is mlx's (the straight-through estimator, with quantized cotangents): the gradient
//! of `x` is `qqmm(cotangent, wᵀ)` and that of a float `w` is `qqmm(cotangentᵀ, xᵀ)`, the
//! second operand quantized along the product's inner axis each time. With nvfp4 global
//! scales, the cotangent's is its largest magnitude.

use super::float::{check_global_scale, dequantize_float, quantize_float, FloatFormat};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::ops::*;
use crate::shape::fmt_shape;
use crate::transforms::{CustomFunction, Function};

/// `x` quantized in `format` and read back in float32.
fn round_trip(x: &Array, format: FloatFormat, global_scale: Option<&Array>) -> Result<Array> {
    let (words, scales) = quantize_float(x, format, global_scale)?;
    dequantize_float("qqmm", &words, &scales, format, global_scale, Some(Dtype::F32))
}

/// Checks an operand that qqmm quantizes: float32, float16 or bfloat16.
fn check_operand(name: &str, a: &Array) -> Result<()> {
    if !a.dtype().is_float() || a.dtype() == Dtype::F64 {
        return Err(Error::dtype("qqmm", format!("{name} must be float32, float16 or bfloat16, got {}", a.dtype())));
    }
    Ok(())
}

/// `x @ wᵀ` with `x` (1-d or more; leading axes are batch) quantized in `format` and `w` a
/// 2-d `(N, K)` matrix: uint32 words with their `scales` (from [`quantize_float`] in the same
/// format), or floating point, quantized here. nvfp4 takes both global scales or neither. The
/// result has x's dtype.
pub fn qqmm(
    x: impl AsArray,
    w: &Array,
    scales: Option<&Array>,
    format: FloatFormat,
    global_scale_x: Option<&Array>,
    global_scale_w: Option<&Array>,
) -> Result<Array> {
    let op = "qqmm";
    let x = x.as_array();
    check_operand("x", &x)?;
    check_global_scale(op, format, global_scale_x)?;
    check_global_scale(op, format, global_scale_w)?;
    if global_scale_x.is_some() != global_scale_w.is_some() {
        return Err(Error::value(op, "give both global_scale_x and global_scale_w, or neither"));
    }
    if w.ndim() != 2 || x.ndim() == 0 {
        return Err(Error::shape(
            op,
            format!("needs a 2-d weight and an x of at least 1 dimension, got {} and {}", fmt_shape(w.shape()), fmt_shape(x.shape())),
        ));
    }
    let quantized = w.dtype() == Dtype::U32;
    let w = match (quantized, scales) {
        (true, Some(scales)) => dequantize_float(op, w, scales, format, global_scale_w, Some(Dtype::F32))?,
        (true, None) => return Err(Error::value(op, "a quantized weight (uint32 words) needs its scales")),
        (false, Some(_)) => return Err(Error::value(op, format!("scales were given but the weight is not quantized (it is {})", w.dtype()))),
        (false, None) => {
            check_operand("w", w)?;
            w.clone()
        }
    };
    let k = x.shape()[x.ndim() - 1];
    if w.shape()[1] != k {
        return Err(Error::shape(op, format!("x of shape {} does not multiply a weight of {} columns", fmt_shape(x.shape()), w.shape()[1])));
    }
    let rows = reshape(&x, &[x.shape()[..x.ndim() - 1].iter().product::<usize>() as i64, k as i64])?;
    let mut args = vec![rows, w];
    args.extend(global_scale_x.into_iter().chain(global_scale_w).cloned());
    let product = product_function(format, !quantized)(&args)?.remove(0);
    let mut shape: Vec<i64> = x.shape()[..x.ndim() - 1].iter().map(|&d| d as i64).collect();
    shape.push(product.shape()[1] as i64);
    reshape(product, &shape)
}

/// The product of 2-d `(x, w[, global_scale_x, global_scale_w])` as a custom function with
/// mlx's vjp; `quantize_w` says whether `w` is a float matrix to quantize (else it is already
/// dequantized and gets no gradient).
fn product_function(format: FloatFormat, quantize_w: bool) -> impl Function {
    let forward = move |args: &[Array]| -> Result<Vec<Array>> {
        let x = round_trip(&args[0], format, args.get(2))?;
        let w = if quantize_w { round_trip(&args[1], format, args.get(3))? } else { astype(&args[1], Dtype::F32)? };
        Ok(vec![astype(matmul(x, swapaxes(w, 0, 1)?)?, args[0].dtype())?])
    };
    let vjp = move |args: &[Array], cotangents: &[Array], _: &[Array]| -> Result<Vec<Array>> {
        let cotangent = &cotangents[0];
        let scaled = args.len() == 4;
        let cotangent_scale = if scaled { Some(astype(max(abs(cotangent)?, None, false)?, Dtype::F32)?) } else { None };
        let (scale_x, scale_w) = (args.get(2), args.get(3));
        let dx = qqmm(cotangent, &swapaxes(&args[1], 0, 1)?, None, format, cotangent_scale.as_ref(), scale_w)?;
        let dw = if quantize_w {
            qqmm(swapaxes(cotangent, 0, 1)?, &swapaxes(&args[0], 0, 1)?, None, format, cotangent_scale.as_ref(), scale_x)?
        } else {
            zeros_like(&args[1])?
        };
        let mut grads = vec![astype(dx, args[0].dtype())?, astype(dw, args[1].dtype())?];
        grads.extend(args[2..].iter().map(zeros_like).collect::<Result<Vec<_>>>()?);
        Ok(grads)
    };
    CustomFunction::new("qqmm", forward).vjp(vjp).into_fn()
}
