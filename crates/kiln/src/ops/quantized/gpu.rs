//! The GPU lowering of the fused quantized products (`product`): CUDA kernels
//! (`backend/cuda/quantized.cu`) that read the packed words once and decode them in registers,
//! run through [`crate::cuda_kernel`] (NVRTC builds, cached by source; an opaque kernel inside
//! compiled functions).
//!
//! - `transpose` (`x @ wᵀ`): one warp per few rows of `w`, the lanes splitting the rows, so the
//!   x values a lane loads serve every row and each result is written once.
//! - not `transpose` (`x @ w`): one thread per unit of output columns and slice of `w`'s rows;
//!   the slices' float32 partial sums are added by a reduction afterwards.
//!
//! The float formats' code values and scale codes' values are printed into the source, so each
//! format builds its own kernels; the scale codes are decoded inside them (nvfp4's global
//! encoding is an input). Up to [`MAX_ROWS`] rows of `x` only: beyond that a product is
//! compute-bound and dequantize-then-cuBLAS (tensor cores) serves it better.

use crate::array::Array;
use crate::backend::cpu::quantized::{CodeValues, QuantizedLayout, ScaleValues};
use crate::cuda_kernel::{cuda_type, CudaKernel, CudaLaunch};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::ops::{astype, reshape, sum};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The kernels' helpers; the constants they need are printed before them.
const SOURCE: &str = include_str!("../../backend/cuda/quantized.cu");

/// The most rows of `x` (all leading axes together) the fused kernels take.
pub(super) const MAX_ROWS: usize = 32;
/// Rows of `x` one warp (or thread) takes, at most.
const ROWS_PER_THREAD: usize = 8;
/// Rows of `w` one warp of the transposed kernel takes (the x values it loads serve them all).
const ROWS_PER_WARP: usize = 4;
/// The most x values a lane of the transposed kernel holds (in registers).
const ROW_VALUES: usize = 64;
/// The most running sums one thread of the not-transposed kernel keeps (in registers).
const COLUMN_SUMS: usize = 128;
/// Threads per block.
const BLOCK: usize = 128;
/// Threads the not-transposed kernel aims at over all its slices (enough to fill a GPU).
const COLUMN_THREADS: usize = 1 << 16;
/// The fewest rows of `w` a slice of the not-transposed kernel runs down.
const MIN_SLICE_HEIGHT: usize = 8;
/// The most bytes the not-transposed kernel's partial sums take, or the packed weight's size
/// where that is larger: more slices would write and read again more than the product reads.
const PARTIAL_BYTES: usize = 16 << 20;

/// Whether the kernels can be built here: like every [`crate::cuda_kernel`], they include the
/// CUDA toolkit's headers, without which the products keep to the composition.
pub(super) fn kernels_build() -> bool {
    !crate::backend::cuda::libraries::header_dirs().is_empty()
}

/// `x @ wᵀ` (or `x @ w`) on the current GPU stream for `args = (x, words, scales, biases)`
/// (affine: float32 scales and biases) or `(x, words, scale codes[, encoding])`: x of a floating
/// dtype with leading axes, laid out as `layout` says. The result has x's dtype.
pub(super) fn product(args: &[Array], layout: &QuantizedLayout, transpose: bool) -> Result<Array> {
    let x = &args[0];
    let inner = *x.shape().last().expect("x has an axis");
    let rows = x.size() / inner;
    let x2 = reshape(x, &[rows as i64, inner as i64])?;
    let mut inputs = vec![x2, args[1].clone(), args[2].clone()];
    inputs.extend(args.get(3).cloned());
    // Registers bound the rows of x a thread takes, and so do x's rows (a power of two, so a
    // layout builds at most four kernels): rows the kernel has no x for cost it work.
    let held = if transpose { ROW_VALUES } else { COLUMN_SUMS };
    let per_thread = ROWS_PER_THREAD.min(held / unit_values(layout.bits)).min(rows.next_power_of_two());
    let row_blocks = rows.div_ceil(per_thread);
    let key = KernelKey { dtype: x.dtype(), bits: layout.bits, group_size: layout.group_size, codes: layout.codes, scales: layout.scales, per_thread, transpose };
    let kernel = kernel(key)?;
    let mut out_shape = x.shape().to_vec();
    let out = if transpose {
        let warps = layout.rows.div_ceil(ROWS_PER_WARP);
        let launch = CudaLaunch::new(vec![(vec![rows, layout.rows], x.dtype())], [warps * 32, row_blocks, 1], [BLOCK, 1, 1]);
        kernel.call(&inputs, &launch)?.remove(0)
    } else {
        // Slices fill the GPU together with the blocks of x's rows (the partial sums grow with both).
        let units = layout.cols / unit_values(layout.bits);
        let partial_room = PARTIAL_BYTES.max(args[1].nbytes()) / (rows * layout.cols * 4);
        let slices = COLUMN_THREADS
            .div_ceil(units * row_blocks)
            .min(layout.rows.div_ceil(MIN_SLICE_HEIGHT))
            .min(partial_room)
            .clamp(1, 65_535);
        let launch = CudaLaunch::new(vec![(vec![slices, rows, layout.cols], Dtype::F32)], [units, slices, row_blocks], [BLOCK, 1, 1]);
        let partial = kernel.call(&inputs, &launch)?.remove(0);
        astype(sum(&partial, Some(&[0]), false)?, x.dtype())?
    };
    *out_shape.last_mut().expect("x has an axis") = if transpose { layout.rows } else { layout.cols };
    let shape: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
    reshape(out, &shape)
}

/// What a kernel definition depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct KernelKey {
    dtype: Dtype,
    bits: u32,
    group_size: usize,
    codes: CodeValues,
    scales: ScaleValues,
    per_thread: usize,
    transpose: bool,
}

/// The kernel definition for `key`, made once per process: its source (with a float format's
/// code and scale values printed into it) takes tens of microseconds to write, longer than
/// the kernel of a one-row product runs.
fn kernel(key: KernelKey) -> Result<Arc<CudaKernel>> {
    static KERNELS: OnceLock<Mutex<HashMap<KernelKey, Arc<CudaKernel>>>> = OnceLock::new();
    let kernels = KERNELS.get_or_init(Default::default);
    if let Some(kernel) = kernels.lock().expect("kernel cache").get(&key) {
        return Ok(kernel.clone());
    }
    let mut input_names = vec!["x", "w", "scales"];
    let (biases, encoding) = match key.scales {
        ScaleValues::Float32 => ("biases", "nullptr"),
        ScaleValues::E8m0 => ("nullptr", "nullptr"),
        ScaleValues::E4m3 => ("nullptr", "encoding"),
    };
    input_names.extend([biases, encoding].into_iter().filter(|name| *name != "nullptr"));
    let kernel = if key.transpose {
        let body = format!("kiln_quantized_rows(x, w, scales, {biases}, {encoding}, out, x_shape[0], w_shape[0], x_shape[1]);");
        CudaKernel::new("quantized_rows", &input_names, &["out"], &body)?
    } else {
        let body = format!("kiln_quantized_columns(x, w, scales, {biases}, {encoding}, partial, x_shape[0], w_shape[0], w_shape[1] * 32 / BITS);");
        CudaKernel::new("quantized_columns", &input_names, &["partial"], &body)?
    };
    let kernel = Arc::new(kernel.header(&header(key)));
    kernels.lock().expect("kernel cache").insert(key, kernel.clone());
    Ok(kernel)
}

/// Values a thread decodes at once: one word's, or 32 when `bits` does not divide 32.
fn unit_values(bits: u32) -> usize {
    if 32 % bits == 0 {
        32 / bits as usize
    } else {
        32
    }
}

/// The constants the kernels read, the float formats' code and scale values (as bits, so NaN
/// codes print too), then the kernels' helpers.
fn header(key: KernelKey) -> String {
    let affine = key.scales == ScaleValues::Float32;
    let float_bits = |values: &[f32]| values.iter().map(|v| format!("{:#x}u", v.to_bits())).collect::<Vec<_>>().join(", ");
    let (codes, scales) = if affine {
        (vec![0.0], vec![0.0])
    } else {
        (key.codes.table(key.bits), key.scales.table(1.0).to_vec())
    };
    format!(
        "using T = {};\nusing S = {};\nconstexpr int BITS = {};\nconstexpr int GROUP = {};\nconstexpr bool AFFINE = {affine};\n\
         constexpr int MT = {};\nconstexpr int RPW = {ROWS_PER_WARP};\n\
         __constant__ uint32_t kiln_code_bits[{}] = {{{}}};\n__constant__ uint32_t kiln_scale_bits[{}] = {{{}}};\n{SOURCE}",
        cuda_type(key.dtype),
        if affine { "float" } else { "uint8_t" },
        key.bits,
        key.group_size,
        key.per_thread,
        codes.len(),
        float_bits(&codes),
        scales.len(),
        float_bits(&scales),
    )
}
