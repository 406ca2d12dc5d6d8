//! The quantized products as one kernel that reads the packed words once: a float32 `x` times a
//! 2-d quantized matrix on a CPU stream runs the blocked host kernel of
//! `backend::cpu::quantized` (which dequantizes in cache-sized blocks); a float32, float16 or
//! bfloat16 `x` of up to `gpu::MAX_ROWS` rows on a GPU stream runs the CUDA kernels of `gpu`.
//! Either is a custom function over `x`, the words and, in affine mode, one float32 scale and
//! one float32 bias per group; for the float formats, the uint8 scale codes (decoded inside the
//! kernels) and nvfp4's global encoding, passed through a function that refuses their gradient.
//!
//! Rules: the vjp gives `x` the product in the other orientation (the same kernels) and the
//! affine scales and biases mlx's formula (the gradient with respect to the dequantized matrix,
//! summed per group, weighted by the codes' values for the scales), built lazily so a caller
//! that wants only `x`'s gradient never computes it; the words and scale codes, integers, get
//! zeros, as integer inputs do everywhere, and so does nvfp4's encoding (the function that
//! passed it in refuses its gradient). jvp and vmap go through the composition.

use super::float::{kernel_scales, scale_code_values};
use super::gpu;
use super::packing::unpack;
use super::{FloatFormat, Scheme};
use crate::array::Array;
use crate::backend::cpu::quantized::{quantized_product, CodeValues, GroupScales, Quantized, QuantizedLayout, ScaleValues};
use crate::device::{current_stream, DeviceKind};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::kernel::{custom_kernel, KernelArgs};
use crate::ops::*;
use crate::transforms::compile::is_shapeless_tracing;
use crate::transforms::{jvp, vmap, CustomFunction};
use std::sync::Arc;

/// The kernel's name in graphs and `explain`.
const KERNEL_NAME: &str = "quantized_matmul";

/// Whether a product of `x` (already in the result's `dtype`) with `words` runs as one kernel: a
/// 2-d quantized matrix, no gather indices, not traced for a shapeless compile (a kernel's output
/// shape is fixed; the composition's follows the inputs), and on a CPU stream a float32 `x`, on
/// a GPU stream a float32 or half `x` of at most `gpu::MAX_ROWS` rows and no empty operand.
pub(super) fn runs_as_kernel(dtype: Dtype, x: &Array, words: &Array, gathers: bool) -> bool {
    let device = current_stream().device.kind;
    if words.ndim() != 2 || gathers || is_shapeless_tracing() || !kernel_takes(device, dtype) {
        return false;
    }
    let rows = x.size() / x.shape().last().copied().unwrap_or(1).max(1);
    device == DeviceKind::Cpu || x.size() > 0 && words.size() > 0 && rows <= gpu::MAX_ROWS
}

/// Whether the kernel of a `device` stream takes `x` of `dtype`: float32 on the CPU; float32
/// or half on a GPU, where the CUDA kernels can be built.
fn kernel_takes(device: DeviceKind, dtype: Dtype) -> bool {
    match device {
        DeviceKind::Cpu => dtype == Dtype::F32,
        DeviceKind::Gpu => matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) && gpu::kernels_build(),
    }
}

/// `x @ wᵀ` (or `x @ w`) as one kernel; `x` is in the result's dtype, and it and the quantized
/// matrix are already checked.
pub(super) fn fused_product(op: &str, x: &Array, words: &Array, scales: &Array, scheme: Scheme, transpose: bool) -> Result<Array> {
    let (rows, word_count) = (words.shape()[0], words.shape()[1]);
    let cols = |bits: u32| word_count * 32 / bits as usize;
    let (layout, args) = match scheme {
        Scheme::Affine { biases, group_size, bits } => {
            let layout = QuantizedLayout { rows, cols: cols(bits), group_size, bits, codes: CodeValues::Integers, scales: ScaleValues::Float32 };
            (layout, vec![x.clone(), words.clone(), astype(scales, Dtype::F32)?, astype(biases, Dtype::F32)?])
        }
        Scheme::Float { format, global_scale } => {
            let (group_size, bits) = (format.group_size(), format.bits());
            let codes = if bits == 4 { CodeValues::E2m1 } else { CodeValues::E4m3 };
            let scale_values = if format == FloatFormat::Nvfp4 { ScaleValues::E4m3 } else { ScaleValues::E8m0 };
            let layout = QuantizedLayout { rows, cols: cols(bits), group_size, bits, codes, scales: scale_values };
            let mut args = vec![x.clone(), words.clone()];
            args.extend(kernel_scales(op, scales, format, global_scale)?);
            (layout, args)
        }
    };
    kernel_product(&args, Arc::new(layout), transpose)
}

/// The custom function over `(x, words, scales, biases)` (affine: float32 scales and biases) or
/// `(x, words, scale codes[, encoding])` (the float formats), on the kernels of the stream's
/// device.
fn kernel_product(args: &[Array], layout: Arc<QuantizedLayout>, transpose: bool) -> Result<Array> {
    let kernel_layout = layout.clone();
    // The stream may differ from the one the product was chosen on (a vjp run elsewhere): a
    // dtype the stream's kernel does not take gets the composition.
    let forward = move |args: &[Array]| {
        let device = current_stream().device.kind;
        match device {
            _ if !kernel_takes(device, args[0].dtype()) => Ok(vec![composed_product(args, &kernel_layout, transpose)?]),
            DeviceKind::Cpu => host_product(args, kernel_layout.clone(), transpose),
            DeviceKind::Gpu => Ok(vec![gpu::product(args, &kernel_layout, transpose)?]),
        }
    };
    let (vjp_layout, jvp_layout, vmap_layout) = (layout.clone(), layout.clone(), layout);
    let call = CustomFunction::new(KERNEL_NAME, forward)
        .vjp(move |args, cotangents, _| {
            let cotangent = &cotangents[0];
            let mut others = args.to_vec();
            others[0] = cotangent.clone();
            let dx = kernel_product(&others, vjp_layout.clone(), !transpose)?;
            let mut grads = vec![dx, zeros_like(&args[1])?];
            if vjp_layout.scales == ScaleValues::Float32 {
                grads.extend(scale_and_bias_gradients(&args[0], cotangent, &args[1], &vjp_layout, transpose)?);
            } else {
                // The codes' refusal lies outside, where they were passed in.
                for code_input in &args[2..] {
                    grads.push(zeros_like(code_input)?);
                }
            }
            Ok(grads)
        })
        .jvp(move |args, tangents| {
            let layout = jvp_layout.clone();
            let composition = move |a: &[Array]| Ok(vec![composed_product(a, &layout, transpose)?]);
            Ok(jvp(composition, args, tangents)?.1)
        })
        .vmap(move |args, axes| {
            let layout = vmap_layout.clone();
            let composition = move |a: &[Array]| Ok(vec![composed_product(a, &layout, transpose)?]);
            let in_axes: Vec<Option<i64>> = axes.iter().map(|a| a.map(|a| a as i64)).collect();
            Ok((vmap(composition, &in_axes, &[Some(0)])(args)?, vec![Some(0)]))
        })
        .into_fn();
    Ok(call(args)?.remove(0))
}

/// The host kernel's call on float32 `args`.
fn host_product(args: &[Array], layout: Arc<QuantizedLayout>, transpose: bool) -> Result<Vec<Array>> {
    let outer = if transpose { layout.rows } else { layout.cols };
    let mut out_shape = args[0].shape().to_vec();
    *out_shape.last_mut().expect("x has an axis") = outer;
    custom_kernel(KERNEL_NAME, args, &[(out_shape, Dtype::F32)], move |k: &mut KernelArgs| {
        let (inputs, out) = k.inputs_and_output::<f32>(0)?;
        let (scales, biases) = match layout.scales {
            ScaleValues::Float32 => (GroupScales::Values(inputs.get::<f32>(2)?), Some(inputs.get::<f32>(3)?)),
            codes => {
                let encoding = if codes == ScaleValues::E4m3 { inputs.get::<f32>(3)?[0] } else { 1.0 };
                (GroupScales::Codes(inputs.get::<u8>(2)?, codes.table(encoding)), None)
            }
        };
        let q = Quantized { words: inputs.get::<u32>(1)?, scales, biases };
        quantized_product(inputs.get::<f32>(0)?, &q, &layout, transpose, out);
        Ok(())
    })
}

/// Each code's unscaled value, shaped `(rows, groups, group_size)`.
fn grouped_code_values(words: &Array, layout: &QuantizedLayout) -> Result<Array> {
    let shape = [layout.rows as i64, (layout.cols / layout.group_size) as i64, layout.group_size as i64];
    let codes = unpack(words, layout.bits, layout.cols)?;
    let values = match layout.codes {
        CodeValues::Integers => astype(codes, Dtype::F32)?,
        kind => {
            let table = kind.table(layout.bits);
            take(Array::from_slice(&table, &[table.len()])?, codes, None)?
        }
    };
    reshape(values, &shape)
}

/// The dequantized matrix of `(words, scales, biases)` or `(words, scale codes[, encoding])`,
/// `(rows, cols)`, as a composition.
fn composed_matrix(args: &[Array], layout: &QuantizedLayout) -> Result<Array> {
    let per_group = |a: &Array| expand_dims(a, &[-1]);
    let scales = match layout.scales {
        ScaleValues::Float32 => args[1].clone(),
        _ => scale_code_values(&args[1], args.get(2))?,
    };
    let mut w = multiply(grouped_code_values(&args[0], layout)?, per_group(&scales)?)?;
    if layout.scales == ScaleValues::Float32 {
        w = add(w, per_group(&args[2])?)?;
    }
    reshape(w, &[layout.rows as i64, layout.cols as i64])
}

/// [`kernel_product`]'s function as a composition (for the transforms the kernel has no rule for).
fn composed_product(args: &[Array], layout: &QuantizedLayout, transpose: bool) -> Result<Array> {
    let w = composed_matrix(&args[1..], layout)?;
    matmul(&args[0], if transpose { swapaxes(&w, 0, 1)? } else { w })
}

/// The cotangents of the affine scales and biases: the gradient with respect to the
/// dequantized matrix, `dw`, summed over each group, times the codes for the scales.
fn scale_and_bias_gradients(
    x: &Array,
    cotangent: &Array,
    words: &Array,
    layout: &QuantizedLayout,
    transpose: bool,
) -> Result<Vec<Array>> {
    let flat = |a: &Array| {
        let (lead, last) = a.shape().split_at(a.ndim() - 1);
        reshape(a, &[lead.iter().product::<usize>() as i64, last[0] as i64])
    };
    let (x, cotangent) = (flat(x)?, flat(cotangent)?);
    let dw = if transpose { matmul(swapaxes(&cotangent, 0, 1)?, &x)? } else { matmul(swapaxes(&x, 0, 1)?, &cotangent)? };
    let grouped = reshape(dw, &[layout.rows as i64, (layout.cols / layout.group_size) as i64, layout.group_size as i64])?;
    Ok(vec![sum(multiply(&grouped, grouped_code_values(words, layout)?)?, Some(&[-1]), false)?, sum(&grouped, Some(&[-1]), false)?])
}

#[cfg(test)]
mod tests {
    use super::super::float::e2m1_table;
    use super::*;

    /// e4m3's 256 values from the format's definition: a sign, 4 exponent bits of bias 7 and 3
    /// mantissa bits; 0x7F (either sign) is NaN, exponent 0 subnormal.
    fn e4m3_table() -> Vec<f32> {
        (0u32..256)
            .map(|code| {
                let (exponent, mantissa) = ((code >> 3) & 0xF, (code & 7) as f32);
                let magnitude = match (exponent, code & 0x7F) {
                    (_, 0x7F) => f32::NAN,
                    (0, _) => mantissa / 8.0 * 2f32.powi(-6),
                    _ => (1.0 + mantissa / 8.0) * 2f32.powi(exponent as i32 - 7),
                };
                if code & 0x80 != 0 { -magnitude } else { magnitude }
            })
            .collect()
    }

    #[test]
    fn code_values_from_bits_equal_the_formats_tables() {
        for (table, codes) in [(e2m1_table(), CodeValues::E2m1), (e4m3_table(), CodeValues::E4m3)] {
            for (code, want) in table.into_iter().enumerate() {
                let got = codes.value(code as u32);
                assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{codes:?} code {code}: {got} != {want}");
            }
        }
    }
}
