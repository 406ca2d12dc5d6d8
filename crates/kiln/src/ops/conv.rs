//! Convolutions: mlx's `conv_general` and the 1-3d forms built on it, transposed ones included.
//!
//! Layouts are mlx's: input `(N, spatial..., C_in)`, weight `(C_out, kernel..., C_in / groups)`,
//! output `(N, out..., C_out)`. A convolution has two implementations of one meaning: a
//! composition of existing ops (patches gathered by strided slices, then one matmul per group),
//! which is what GPUs and half types run; and on the CPU, in float32 and float64, a host kernel
//! that fuses the gathering into the GEMM (about twice as fast: the patch matrix, `taps` times
//! the input, never reaches memory), wrapped as a custom function. Its rules: the input's
//! gradient is another convolution, the weight's gradient a second host kernel, the jvp uses
//! linearity, and vmap folds a batched input into N; what those cannot express (a batched
//! weight, derivatives of the weight's gradient) goes through the composition. Both are tested
//! against float64 loops written from the definitions and against finite differences.
//!
//! Why a custom function and not a variant of `Op` (the architecture's enum of ops): the GPUs run
//! the composition, whose matmuls are cuBLAS's, and an `Op` would need a lowering on every
//! backend and rules in every transform before any of them could use it. The custom function
//! keeps the fast path on the CPU alone, with rules written once here; compile treats it as the
//! opaque boundary every user kernel is, which costs nothing, as a convolution ends a fused group
//! anyway.

use super::creation::{zeros, zeros_like};
use super::elementwise::add;
use super::index::{flip, pad, stack};
use super::linalg::matmul;
use super::shape::{expand_dims, moveaxis, reshape, slice, transpose, SliceSpec};
use super::{promote_pair, AsArray};
use crate::array::Array;
use crate::backend::cpu::conv::{conv_forward, conv_weight_grad, ConvGeometry};
use crate::device::{current_stream, DeviceKind};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernel::{custom_kernel, KernelArgs};
use crate::shape::fmt_shape;
use crate::transforms::{vjp, vmap, CustomFunction};
use std::sync::Arc;

/// The settings of [`conv_general`]. Each per-axis list holds one value per spatial axis, or one
/// value for all of them; an empty list means the default.
#[derive(Clone, Debug)]
pub struct ConvParams {
    /// Step between windows (default 1).
    pub stride: Vec<i64>,
    /// Zeros added before each spatial axis (default 0); negative values crop instead.
    pub padding_lo: Vec<i64>,
    /// Zeros added after each spatial axis (default 0); negative values crop instead.
    pub padding_hi: Vec<i64>,
    /// Spacing between kernel taps (default 1).
    pub kernel_dilation: Vec<i64>,
    /// Spacing between input elements, with zeros between them (default 1; transposed
    /// convolutions use their stride here).
    pub input_dilation: Vec<i64>,
    /// Channel groups: input and output channels split into this many independent convolutions.
    pub groups: i64,
    /// Correlate with the kernel flipped along its spatial axes (a true convolution).
    pub flip: bool,
}

impl Default for ConvParams {
    fn default() -> ConvParams {
        ConvParams {
            stride: vec![],
            padding_lo: vec![],
            padding_hi: vec![],
            kernel_dilation: vec![],
            input_dilation: vec![],
            groups: 1,
            flip: false,
        }
    }
}

/// One value per spatial axis from a list of none (`default`), one, or `d` values.
fn per_axis(name: &str, values: &[i64], d: usize, default: i64) -> Result<Vec<i64>> {
    match values.len() {
        0 => Ok(vec![default; d]),
        1 => Ok(vec![values[0]; d]),
        n if n == d => Ok(values.to_vec()),
        _ => Err(Error::value("conv", format!("{name} {values:?} does not fit a {d}D convolution: give one value or {d}"))),
    }
}

/// `x` with `(size - 1) * (factor - 1)` zeros between the elements of `axis` (none after the last).
fn dilate_axis(x: &Array, axis: usize, factor: i64) -> Result<Array> {
    let size = x.shape()[axis] as i64;
    if factor == 1 || size <= 1 {
        return Ok(x.clone());
    }
    let spread = expand_dims(x, &[axis as i64 + 1])?;
    let mut widths = vec![(0usize, 0usize); spread.ndim()];
    widths[axis + 1] = (0, factor as usize - 1);
    let spread = pad(&spread, &widths, 0.0)?;
    let mut merged: Vec<i64> = x.shape().iter().map(|&s| s as i64).collect();
    merged[axis] = size * factor;
    let merged = reshape(&spread, &merged)?;
    let mut specs = vec![SliceSpec::ALL; x.ndim()];
    specs[axis] = SliceSpec::range(0, (size - 1) * factor + 1);
    slice(&merged, &specs)
}

/// `x` with `lo` and `hi` zeros added around spatial axis `axis` (cropped where negative).
fn pad_axis(x: &Array, axis: usize, lo: i64, hi: i64) -> Result<Array> {
    let size = x.shape()[axis] as i64;
    let mut specs = vec![SliceSpec::ALL; x.ndim()];
    specs[axis] = SliceSpec::range((-lo).max(0), size - (-hi).max(0));
    let cropped = if lo < 0 || hi < 0 { slice(x, &specs)? } else { x.clone() };
    if lo <= 0 && hi <= 0 {
        return Ok(cropped);
    }
    let mut widths = vec![(0usize, 0usize); x.ndim()];
    widths[axis] = (lo.max(0) as usize, hi.max(0) as usize);
    pad(&cropped, &widths, 0.0)
}

/// The row-major multi-indices of every kernel position.
fn kernel_positions(kernel: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &k in kernel {
        out = out.into_iter().flat_map(|p| (0..k).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    out
}

/// A general convolution (mlx's `conv_general`): `input` `(N, spatial..., C_in)` with `weight`
/// `(C_out, kernel..., C_in / groups)`, 1 to 3 spatial axes, float inputs; see [`ConvParams`].
pub fn conv_general(input: impl AsArray, weight: impl AsArray, p: &ConvParams) -> Result<Array> {
    let (x, w) = (input.as_array(), weight.as_array());
    let nd = x.ndim();
    if !(3..=5).contains(&nd) {
        return Err(Error::shape(
            "conv",
            format!(
                "the input must have 1 to 3 spatial axes, as (N, ..., C_in); got shape {}",
                fmt_shape(x.shape())
            ),
        ));
    }
    let d = nd - 2;
    if w.ndim() != nd {
        return Err(Error::shape(
            "conv",
            format!(
                "a {d}D convolution needs a weight of {nd} dimensions, (C_out, ..., C_in); got weight {} for input {}",
                fmt_shape(w.shape()),
                fmt_shape(x.shape())
            ),
        ));
    }
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            "conv",
            format!("the input must be floating point, got {}; convert it with astype", x.dtype()),
        ));
    }
    let groups = p.groups;
    let (c_in, c_out, c_group) = (x.shape()[d + 1], w.shape()[0], w.shape()[d + 1]);
    if groups < 1 {
        return Err(Error::value("conv", format!("groups must be positive, got {groups}")));
    }
    let g = groups as usize;
    if c_in % g != 0 || c_out % g != 0 || c_in != g * c_group {
        return Err(Error::shape(
            "conv",
            format!(
                "with groups={g} the input channels ({c_in}) must equal groups times the weight's last axis, and the \
                 output channels ({c_out}) must divide by groups; got input {} and weight {}",
                fmt_shape(x.shape()),
                fmt_shape(w.shape())
            ),
        ));
    }
    let stride = per_axis("stride", &p.stride, d, 1)?;
    let lo = per_axis("padding", &p.padding_lo, d, 0)?;
    let hi = per_axis("padding", &p.padding_hi, d, 0)?;
    let kdil = per_axis("kernel dilation", &p.kernel_dilation, d, 1)?;
    let idil = per_axis("input dilation", &p.input_dilation, d, 1)?;
    for (name, v) in [("stride", &stride), ("kernel dilation", &kdil), ("input dilation", &idil)] {
        if v.iter().any(|&s| s < 1) {
            return Err(Error::value("conv", format!("{name} must be positive, got {v:?}")));
        }
    }
    if w.shape()[1..=d].contains(&0) {
        return Err(Error::shape("conv", format!("the kernel's spatial sizes must be positive; got weight {}", fmt_shape(w.shape()))));
    }
    let input_shape = fmt_shape(x.shape());
    let (x, w) = promote_pair("conv", &x, &w)?;
    let mut out_dims = Vec::with_capacity(d);
    for a in 0..d {
        let dilated = (x.shape()[a + 1] as i64 - 1).max(0) * idil[a] + (x.shape()[a + 1] > 0) as i64;
        let span = (w.shape()[a + 1] as i64 - 1) * kdil[a] + 1;
        let room = dilated + lo[a] + hi[a] - span;
        if room < 0 || dilated + lo[a].min(0) + hi[a].min(0) < 0 {
            return Err(Error::shape(
                "conv",
                format!(
                    "spatial axis {a} of the input ({}, after dilation and padding {} + {}) is smaller than the \
                     kernel's extent ({span}); input {}, weight {}",
                    dilated + lo[a] + hi[a],
                    lo[a],
                    hi[a],
                    input_shape,
                    fmt_shape(w.shape())
                ),
            ));
        }
        out_dims.push((room / stride[a] + 1) as usize);
    }
    let settings = Arc::new(Resolved { stride, lo, hi, kdil, idil, groups: g, flip: p.flip, out_dims });
    convolve_resolved(&x, &w, &settings)
}

/// [`ConvParams`] checked against the shapes and given one value per spatial axis, with the
/// output's spatial sizes they imply.
#[derive(Debug)]
struct Resolved {
    stride: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    kdil: Vec<i64>,
    idil: Vec<i64>,
    groups: usize,
    flip: bool,
    out_dims: Vec<usize>,
}

/// The convolution of checked operands of one dtype: on the CPU in float32 and float64, the
/// fused im2col-and-GEMM kernel of [`crate::backend::cpu::conv`]; elsewhere (GPUs, half types)
/// the composition of [`convolve_by_patches`].
fn convolve_resolved(x: &Array, w: &Array, r: &Arc<Resolved>) -> Result<Array> {
    if host_kernel_runs(x.dtype()) {
        convolve_on_host(x, w, r)
    } else {
        convolve_by_patches(x, w, r)
    }
}

/// The geometry of convolving `x` with a weight of spatial sizes `kernel` and `c_out` output
/// channels under `r`.
fn geometry(x: &Array, kernel: &[usize], c_out: usize, r: &Resolved) -> ConvGeometry {
    let d = x.ndim() - 2;
    ConvGeometry {
        batch: x.shape()[0],
        input: x.shape()[1..=d].to_vec(),
        output: r.out_dims.clone(),
        kernel: kernel.to_vec(),
        stride: r.stride.iter().map(|&s| s as usize).collect(),
        padding_lo: r.lo.clone(),
        kernel_dilation: r.kdil.iter().map(|&s| s as usize).collect(),
        input_dilation: r.idil.iter().map(|&s| s as usize).collect(),
        channels_in: x.shape()[d + 1],
        channels_out: c_out,
        groups: r.groups,
        flip: r.flip,
    }
}

/// A host kernel of two float32 or float64 operands and one output of `shape`, running `body`
/// in the operands' dtype.
fn host_kernel(
    name: &'static str,
    args: &[Array],
    shape: Vec<usize>,
    body: fn(&[f32], &[f32], &mut [f32], &ConvGeometry),
    body64: fn(&[f64], &[f64], &mut [f64], &ConvGeometry),
    geometry: ConvGeometry,
) -> Result<Vec<Array>> {
    let dtype = args[0].dtype();
    custom_kernel(name, args, &[(shape, dtype)], move |k: &mut KernelArgs| {
        if dtype == Dtype::F32 {
            let (inputs, out) = k.inputs_and_output::<f32>(0)?;
            body(inputs.get(0)?, inputs.get(1)?, out, &geometry);
        } else {
            let (inputs, out) = k.inputs_and_output::<f64>(0)?;
            body64(inputs.get(0)?, inputs.get(1)?, out, &geometry);
        }
        Ok(())
    })
}

/// Whether the host kernels take operands of `dtype` here: on a CPU stream, in float32 or float64.
fn host_kernel_runs(dtype: Dtype) -> bool {
    current_stream().device.kind == DeviceKind::Cpu && matches!(dtype, Dtype::F32 | Dtype::F64)
}

/// The host kernel as a custom function: the forward pass runs [`conv_forward`]; the vjp is two
/// more host kernels (the input's gradient is a convolution, the weight's is
/// [`weight_gradient`]), the jvp uses that a convolution is linear in each operand, and vmap
/// folds a batched input into N (a batched weight goes through the composition).
fn convolve_on_host(x: &Array, w: &Array, r: &Arc<Resolved>) -> Result<Array> {
    let geometry = geometry(x, &w.shape()[1..x.ndim() - 1], w.shape()[0], r);
    let mut out_shape = vec![geometry.batch];
    out_shape.extend(&r.out_dims);
    out_shape.push(geometry.channels_out);
    let forward = move |args: &[Array]| {
        host_kernel(KERNEL_NAME, args, out_shape.clone(), conv_forward::<f32>, conv_forward::<f64>, geometry.clone())
    };
    let (vjp_settings, jvp_settings, vmap_settings) = (r.clone(), r.clone(), r.clone());
    let call = CustomFunction::new(KERNEL_NAME, forward)
        .vjp(move |args, cotangents, _| {
            let r = &vjp_settings;
            let input_grad = input_gradient(&args[0], &args[1], &cotangents[0], r)?;
            Ok(vec![input_grad, weight_gradient(&args[0], &cotangents[0], args[1].shape(), r)?])
        })
        .jvp(move |args, tangents| {
            let r = &jvp_settings;
            Ok(vec![add(convolve_resolved(&tangents[0], &args[1], r)?, convolve_resolved(&args[0], &tangents[1], r)?)?])
        })
        .vmap(move |args, axes| {
            let r = &vmap_settings;
            match axes {
                [Some(axis), None] => {
                    let x = moveaxis(&args[0], *axis as i64, 0)?;
                    let (b, n) = (x.shape()[0] as i64, x.shape()[1] as i64);
                    let mut folded: Vec<i64> = x.shape()[1..].iter().map(|&s| s as i64).collect();
                    folded[0] = b * n;
                    let y = convolve_resolved(&reshape(&x, &folded)?, &args[1], r)?;
                    let mut shape: Vec<i64> = vec![b, n];
                    shape.extend(y.shape()[1..].iter().map(|&s| s as i64));
                    Ok((vec![reshape(&y, &shape)?], vec![Some(0)]))
                }
                _ => {
                    let r = r.clone();
                    let composition = move |a: &[Array]| Ok(vec![convolve_by_patches(&a[0], &a[1], &r)?]);
                    let in_axes: Vec<Option<i64>> = axes.iter().map(|a| a.map(|a| a as i64)).collect();
                    Ok((vmap(composition, &in_axes, &[Some(0)])(args)?, vec![Some(0)]))
                }
            }
        })
        .into_fn();
    Ok(call(&[x.clone(), w.clone()])?.remove(0))
}

/// The gradient of a convolution with respect to its input, as another convolution (so it runs on
/// the fast kernel too): the cotangent, spread by the stride (input dilation), correlated with the
/// kernel flipped and its channel axes swapped per group, padded so that the result has the
/// dilated input's extent, and read at the input's own positions (stride = the input dilation).
fn input_gradient(x: &Array, w: &Array, cotangent: &Array, r: &Resolved) -> Result<Array> {
    if x.size() == 0 || cotangent.size() == 0 {
        return zeros_like(x);
    }
    let d = x.ndim() - 2;
    let g = r.groups as i64;
    let (c_out, c_group) = (w.shape()[0] as i64, w.shape()[d + 1] as i64);
    let kernel: Vec<i64> = w.shape()[1..=d].iter().map(|&k| k as i64).collect();
    // (C_out, K..., C_in/g) -> (C_in, K..., C_out/g): within each group, channels swap roles.
    let mut grouped = vec![g, c_out / g];
    grouped.extend(&kernel);
    grouped.push(c_group);
    let mut order: Vec<i64> = vec![0, d as i64 + 2];
    order.extend(2..d as i64 + 2);
    order.push(1);
    let mut swapped = vec![g * c_group];
    swapped.extend(&kernel);
    swapped.push(c_out / g);
    let w2 = reshape(transpose(reshape(w, &grouped)?, Some(&order))?, &swapped)?;
    let (mut lo, mut hi) = (Vec::with_capacity(d), Vec::with_capacity(d));
    for (a, k) in kernel.iter().enumerate() {
        let span = (k - 1) * r.kdil[a] + 1;
        let spread = (r.out_dims[a] as i64 - 1) * r.stride[a] + 1;
        let extent = (x.shape()[a + 1] as i64 - 1) * r.idil[a] + 1;
        lo.push(span - 1 - r.lo[a]);
        hi.push(extent + span - 1 - spread - (span - 1 - r.lo[a]));
    }
    let settings = Resolved {
        stride: r.idil.clone(),
        lo,
        hi,
        kdil: r.kdil.clone(),
        idil: r.stride.clone(),
        groups: r.groups,
        flip: !r.flip,
        out_dims: x.shape()[1..=d].to_vec(),
    };
    convolve_resolved(cotangent, &w2, &Arc::new(settings))
}

/// The gradient of a convolution with respect to its weight (of shape `weight_shape`), given the
/// input and the output's cotangent: on the CPU the blocked kernel
/// [`crate::backend::cpu::conv::conv_weight_grad`], as a custom function whose rules come from
/// [`weight_gradient_by_patches`] (it is bilinear, so its jvp is two more calls of itself).
fn weight_gradient(x: &Array, cotangent: &Array, weight_shape: &[usize], r: &Arc<Resolved>) -> Result<Array> {
    if x.size() == 0 || cotangent.size() == 0 {
        return zeros(weight_shape, x.dtype());
    }
    if !(host_kernel_runs(x.dtype()) && cotangent.dtype() == x.dtype()) {
        return weight_gradient_by_patches(x, cotangent, weight_shape, r);
    }
    let d = x.ndim() - 2;
    let geometry = geometry(x, &weight_shape[1..=d], weight_shape[0], r);
    let shape = weight_shape.to_vec();
    let forward = move |args: &[Array]| {
        host_kernel(WEIGHT_GRAD_NAME, args, shape.clone(), conv_weight_grad::<f32>, conv_weight_grad::<f64>, geometry.clone())
    };
    let by_patches = |r: &Arc<Resolved>, shape: &[usize]| {
        let (r, shape) = (r.clone(), shape.to_vec());
        move |a: &[Array]| Ok(vec![weight_gradient_by_patches(&a[0], &a[1], &shape, &r)?])
    };
    let (vjp_rule, vmap_rule) = (by_patches(r, weight_shape), by_patches(r, weight_shape));
    let (jvp_settings, jvp_shape) = (r.clone(), weight_shape.to_vec());
    let call = CustomFunction::new(WEIGHT_GRAD_NAME, forward)
        .vjp(move |args, cotangents, _| Ok(vjp(&vjp_rule, args, cotangents)?.1))
        .jvp(move |args, tangents| {
            let (r, shape) = (&jvp_settings, &jvp_shape);
            Ok(vec![add(weight_gradient(&tangents[0], &args[1], shape, r)?, weight_gradient(&args[0], &tangents[1], shape, r)?)?])
        })
        .vmap(move |args, axes| {
            let in_axes: Vec<Option<i64>> = axes.iter().map(|a| a.map(|a| a as i64)).collect();
            Ok((vmap(&vmap_rule, &in_axes, &[Some(0)])(args)?, vec![Some(0)]))
        })
        .into_fn();
    Ok(call(&[x.clone(), cotangent.clone()])?.remove(0))
}

/// [`weight_gradient`] through the composition's own vjp (the weight's value does not matter:
/// a convolution is linear in it).
fn weight_gradient_by_patches(x: &Array, cotangent: &Array, weight_shape: &[usize], r: &Arc<Resolved>) -> Result<Array> {
    let r = r.clone();
    let composition = move |a: &[Array]| Ok(vec![convolve_by_patches(&a[0], &a[1], &r)?]);
    let w = zeros(weight_shape, x.dtype())?;
    Ok(vjp(composition, &[x.clone(), w], std::slice::from_ref(cotangent))?.1.remove(1))
}

/// The name the weight-gradient kernel shows in graphs, `explain` and errors.
const WEIGHT_GRAD_NAME: &str = "conv_weight_grad";

/// The name the CPU kernel shows in graphs, `explain` and errors.
const KERNEL_NAME: &str = "conv_general";

/// The convolution as a composition of existing ops: the input is dilated and padded, its windows
/// are taken by strided slices (one per kernel position) and stacked into patches, and one matrix
/// product per group contracts the patches with the weight. Autodiff, vmap, compile and the GPU
/// come from those ops' own rules, and the contraction runs on each device's tuned GEMM.
fn convolve_by_patches(x: &Array, w: &Array, r: &Resolved) -> Result<Array> {
    let (nd, d, g) = (x.ndim(), x.ndim() - 2, r.groups);
    let (c_out, c_group) = (w.shape()[0], w.shape()[d + 1]);
    // The input dilated, then padded or cropped.
    let mut xs = x.clone();
    for a in 0..d {
        xs = dilate_axis(&xs, a + 1, r.idil[a])?;
        xs = pad_axis(&xs, a + 1, r.lo[a], r.hi[a])?;
    }
    let w = if r.flip { flip(w, Some(&(1..=d as i64).collect::<Vec<_>>()))? } else { w.clone() };
    // One strided window of the input per kernel position, stacked: (N, out..., taps, C_in).
    let kernel: Vec<usize> = w.shape()[1..=d].to_vec();
    let windows: Vec<Array> = kernel_positions(&kernel)
        .iter()
        .map(|k| {
            let mut specs = vec![SliceSpec::ALL; nd];
            for a in 0..d {
                let start = k[a] as i64 * r.kdil[a];
                let stop = start + (r.out_dims[a] as i64 - 1) * r.stride[a] + 1;
                specs[a + 1] = SliceSpec { start: Some(start), stop: Some(stop), step: r.stride[a] };
            }
            slice(&xs, &specs)
        })
        .collect::<Result<_>>()?;
    let patches = stack(&windows, d as i64 + 1)?;
    let (n, taps) = (patches.shape()[0] as i64, kernel.iter().product::<usize>() as i64);
    let m = n * r.out_dims.iter().product::<usize>() as i64;
    let (gi, cg, co) = (g as i64, c_group as i64, (c_out / g) as i64);
    // Per group: (M, taps * C_group) @ (taps * C_group, C_out / groups).
    let lhs = transpose(reshape(&patches, &[m, taps, gi, cg])?, Some(&[2, 0, 1, 3]))?;
    let lhs = reshape(&lhs, &[gi, m, taps * cg])?;
    let rhs = transpose(reshape(&w, &[gi, co, taps * cg])?, Some(&[0, 2, 1]))?;
    let product = transpose(matmul(&lhs, &rhs)?, Some(&[1, 0, 2]))?;
    let mut shape = vec![n];
    shape.extend(r.out_dims.iter().map(|&o| o as i64));
    shape.push(c_out as i64);
    reshape(&product, &shape)
}

/// A convolution over 1, 2 or 3 spatial axes (mlx's `conv1d`/`conv2d`/`conv3d`, by the rank of
/// `input`): `stride`, `padding` and `dilation` hold one value per spatial axis or one for all.
pub fn conv(input: impl AsArray, weight: impl AsArray, stride: &[i64], padding: &[i64], dilation: &[i64], groups: i64) -> Result<Array> {
    let params = ConvParams {
        stride: stride.to_vec(),
        padding_lo: padding.to_vec(),
        padding_hi: padding.to_vec(),
        kernel_dilation: dilation.to_vec(),
        groups,
        ..ConvParams::default()
    };
    conv_general(input, weight, &params)
}

/// A transposed convolution (the gradient of [`conv`] with respect to its input, mlx's
/// `conv_transpose1d/2d/3d`): `output_padding` adds that many rows at the end of each output axis.
pub fn conv_transpose(
    input: impl AsArray,
    weight: impl AsArray,
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    output_padding: &[i64],
    groups: i64,
) -> Result<Array> {
    let (x, w) = (input.as_array(), weight.as_array());
    if x.ndim() < 3 || w.ndim() != x.ndim() {
        // conv_general names the problem.
        return conv_general(&x, &w, &ConvParams::default()).map_err(|e| e.in_op("conv_transpose"));
    }
    let d = x.ndim() - 2;
    let stride = per_axis("stride", stride, d, 1)?;
    let padding = per_axis("padding", padding, d, 0)?;
    let dilation = per_axis("dilation", dilation, d, 1)?;
    let output_padding = per_axis("output padding", output_padding, d, 0)?;
    let (mut lo, mut hi) = (vec![], vec![]);
    for a in 0..d {
        let span = dilation[a] * (w.shape()[a + 1] as i64 - 1) + 1;
        lo.push(span - padding[a] - 1);
        hi.push(span - padding[a] - 1 + output_padding[a]);
    }
    let params = ConvParams {
        stride: vec![1],
        padding_lo: lo,
        padding_hi: hi,
        kernel_dilation: dilation,
        input_dilation: stride,
        groups,
        flip: true,
    };
    conv_general(&x, &w, &params)
}

/// Which part of the full convolution [`convolve`] returns (numpy's modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvolveMode {
    /// Every overlap: length `M + N - 1`.
    Full,
    /// The middle of the full result, as long as the longer input.
    Same,
    /// Only where the shorter input lies wholly inside the longer: length `max - min + 1`.
    Valid,
}

/// numpy's `convolve` of two 1-D float arrays: the shorter one flipped and slid over the longer.
pub fn convolve(a: impl AsArray, v: impl AsArray, mode: ConvolveMode) -> Result<Array> {
    let (a, v) = (a.as_array(), v.as_array());
    if a.ndim() != 1 || v.ndim() != 1 || a.size() == 0 || v.size() == 0 {
        return Err(Error::shape(
            "convolve",
            format!("both inputs must be 1-D and non-empty; got shapes {} and {}", fmt_shape(a.shape()), fmt_shape(v.shape())),
        ));
    }
    let (long, short) = if v.size() > a.size() { (v, a) } else { (a, v) };
    let (m, n) = (long.size() as i64, short.size() as i64);
    let (lo, hi) = match mode {
        ConvolveMode::Full => (n - 1, n - 1),
        ConvolveMode::Same => (n - 1 - (n - 1) / 2, (n - 1) / 2),
        ConvolveMode::Valid => (0, 0),
    };
    let params = ConvParams { padding_lo: vec![lo], padding_hi: vec![hi], flip: true, ..ConvParams::default() };
    let out = conv_general(reshape(&long, &[1, m, 1])?, reshape(&short, &[1, n, 1])?, &params).map_err(|e| e.in_op("convolve"))?;
    reshape(&out, &[-1])
}
