//! Reductions over axes on a GPU (`reduce.cu`): the reduced axes are moved last (a view, or a
//! row-major copy when strides cannot express it), then each row is folded by a block, or by
//! several blocks and a second pass when rows are few and long (a full reduction).

use super::context::{device_error, Gpu};
use super::elementwise;
use super::memory::DeviceBlock;
use super::nvrtc::{self, Function};
use super::source::{storage_type, PRELUDE};
use crate::backend::cpu::strided::is_row_contiguous;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::{Category, Dtype};
use crate::error::Result;
use crate::primitive::ReduceOp;
use crate::shape::{numel, row_major_strides};
use cudarc::driver::{result as cu, sys};
use std::ffi::c_void;

const BODY: &str = include_str!("reduce.cu");

/// Reduction kernels loaded so far, by op, input and output dtype, and entry point.
static LOADED: nvrtc::Loaded<(ReduceOp, Dtype, Dtype, &'static str)> = nvrtc::Loaded::new();

/// The accumulator's CUDA type for an input dtype: float64 for floats, 64-bit integers otherwise.
fn accumulator(input: Dtype) -> &'static str {
    match input.category() {
        Category::Float => "double",
        Category::Unsigned => "u64",
        Category::Signed | Category::Bool => "i64",
    }
}

/// The definitions that make `reduce.cu` the reduction `op` of `input` into `output`.
fn definitions(op: ReduceOp, input: Dtype, output: Dtype) -> String {
    let acc = accumulator(input);
    let float = input.is_float();
    let load = match input {
        Dtype::F16 => "(double)k_f16_load(x)".to_string(),
        Dtype::BF16 => "(double)k_bf16_load(x)".to_string(),
        _ => format!("({acc})(x)"),
    };
    let (identity, combine) = match op {
        ReduceOp::Sum => ("0", "((a) + (b))".to_string()),
        ReduceOp::Prod => ("1", "((a) * (b))".to_string()),
        ReduceOp::All => ("1", format!("({acc})((a) != 0 && (b) != 0)")),
        ReduceOp::Any => ("0", format!("({acc})((a) != 0 || (b) != 0)")),
        // NaN propagates, as in numpy and on the CPU.
        ReduceOp::Max => (
            if float { "(-(double)K_INF)" } else if acc == "u64" { "0ull" } else { "INT64_MIN" },
            "(((a) > (b) || (a) != (a)) ? (a) : (b))".to_string(),
        ),
        ReduceOp::Min => (
            if float { "((double)K_INF)" } else if acc == "u64" { "UINT64_MAX" } else { "INT64_MAX" },
            "(((a) < (b) || (a) != (a)) ? (a) : (b))".to_string(),
        ),
    };
    let store = match output {
        Dtype::Bool => "(u8)((a) != 0)".to_string(),
        Dtype::F16 => "k_f16_store(k_f32_round_odd((double)(a)))".to_string(),
        Dtype::BF16 => "k_bf16_store(k_f32_round_odd((double)(a)))".to_string(),
        d => format!("({})(a)", storage_type(d)),
    };
    format!(
        "#define K_IN {}\n#define K_ACC {acc}\n#define K_OUT {}\n#define K_LOAD(x) {load}\n#define K_IDENTITY {identity}\n\
         #define K_COMBINE(a, b) {combine}\n#define K_STORE(a) {store}\n",
        storage_type(input),
        storage_type(output)
    )
}

/// The CUDA C of reduction `op` of `input` into `output`: the prelude, the reduction's
/// definitions and `reduce.cu`.
pub fn source(op: ReduceOp, input: Dtype, output: Dtype) -> String {
    format!("{PRELUDE}\n{}\n{BODY}", definitions(op, input, output))
}

/// Threads per block for rows of `cols` elements: a warp for short rows, up to 256 for long ones.
fn block_for(cols: usize) -> u32 {
    match cols {
        0..=256 => 32,
        257..=2048 => 128,
        _ => 256,
    }
}

/// Reduces `axes` of `x` into a new array of `shape` (reduced axes kept with size 1) and `dtype`.
pub fn run(op: ReduceOp, gpu: &Gpu, stream: sys::CUstream, x: &Input, axes: &[usize], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let name = "reduce";
    let kept: Vec<usize> = (0..x.shape.len()).filter(|d| !axes.contains(d)).collect();
    let order: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let permuted = Input {
        shape: order.iter().map(|&d| x.shape[d]).collect(),
        dtype: x.dtype,
        buffer: Buffer { strides: order.iter().map(|&d| x.buffer.strides[d]).collect(), ..x.buffer.clone() },
        donatable: false,
    };
    let rows_input = if is_row_contiguous(&permuted.shape, &permuted.buffer.strides) {
        permuted.buffer.clone()
    } else {
        elementwise::contiguous(name, gpu, stream, &permuted)?
    };
    let rows = numel(shape);
    let cols: usize = axes.iter().map(|&d| x.shape[d]).product();
    let out = DeviceBlock::new(name, gpu, stream, rows * dtype.size())?;
    if rows > 0 {
        let many_blocks = 8 * gpu.multiprocessors as usize;
        let splits = if rows < many_blocks && cols > 8192 { many_blocks.div_ceil(rows).min(cols.div_ceil(4096)) } else { 1 };
        let partial = DeviceBlock::new(name, gpu, stream, rows * splits * 8)?;
        let input = rows_input.storage.on_gpu(name, gpu.ordinal, stream)?
            .wrapping_add_signed(rows_input.offset as i64 * x.dtype.size() as i64);
        let kernel = |entry: &'static str| LOADED.get(name, gpu, (op, x.dtype, dtype, entry), entry, || Ok(source(op, x.dtype, dtype)));
        let rows_fn = kernel("kiln_reduce_rows")?;
        let (mut cols_arg, mut splits_arg) = (cols as i64, splits as i64);
        let (mut in_arg, mut partial_arg, mut out_arg) = (input, partial.ptr, out.ptr);
        launch(stream, rows_fn, rows * splits, block_for(cols / splits), &mut [
            &mut in_arg as *mut u64 as *mut c_void,
            &mut partial_arg as *mut u64 as *mut c_void,
            &mut out_arg as *mut u64 as *mut c_void,
            &mut cols_arg as *mut i64 as *mut c_void,
            &mut splits_arg as *mut i64 as *mut c_void,
        ])?;
        if splits > 1 {
            let partials_fn = kernel("kiln_reduce_partials")?;
            launch(stream, partials_fn, rows, block_for(splits), &mut [
                &mut partial_arg as *mut u64 as *mut c_void,
                &mut out_arg as *mut u64 as *mut c_void,
                &mut splits_arg as *mut i64 as *mut c_void,
            ])?;
        }
        // `partial` is freed on `stream` after the kernels that use it.
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}

fn launch(stream: sys::CUstream, f: Function, blocks: usize, threads: u32, args: &mut [*mut c_void]) -> Result<()> {
    let blocks = u32::try_from(blocks).ok().filter(|&b| b <= i32::MAX as u32).ok_or_else(|| {
        crate::error::Error::unsupported("reduce", format!("{blocks} rows are more than one GPU launch covers (2^31 - 1)"))
    })?;
    // Safety: `args` point at values of the kernel's parameter types, in order; the buffers they
    // address hold what the kernel indexes.
    unsafe { cu::launch_kernel(f.0, (blocks, 1, 1), (threads, 1, 1), 0, stream, args) }
        .map_err(|e| device_error("reduce", "launching a reduction", e))
}
