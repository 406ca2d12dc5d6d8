//! Reductions over axes on a GPU (`reduce.cu`): the reduced axes are moved last (a view, or a
//! row-major copy when strides cannot express it), then each row is folded by a block, or by
//! several blocks and a second pass when rows are few and long (a full reduction).

use super::context::Gpu;
use super::elementwise;
use super::memory::DeviceBlock;
use super::nvrtc;
use super::source::{compute_type, storage_type, PRELUDE};
use crate::backend::cpu::strided::is_row_contiguous;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::{Category, Dtype};
use crate::error::Result;
use crate::primitive::{ArgReduceOp, ReduceOp};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;
use std::ffi::c_void;

/// The reduction kernels' text (scans build on its block folds).
pub(super) const BODY: &str = include_str!("reduce.cu");

/// Reduction kernels loaded so far, by op, input and output dtype, and entry point.
static LOADED: nvrtc::Loaded<(ReduceOp, Dtype, Dtype, &'static str)> = nvrtc::Loaded::new();

/// The accumulator's dtype for an input dtype: float64 for floats, 64-bit integers otherwise.
pub(super) fn accumulator_dtype(input: Dtype) -> Dtype {
    match input.category() {
        Category::Float => Dtype::F64,
        Category::Unsigned => Dtype::U64,
        Category::Signed | Category::Bool => Dtype::I64,
        // Never used: complex64 is refused before any GPU kernel (`backend::run`).
        Category::Complex => Dtype::C64,
    }
}

/// The accumulator's CUDA type for an input dtype.
pub(super) fn accumulator(input: Dtype) -> &'static str {
    compute_type(accumulator_dtype(input))
}

/// A fold of `op` over values of `input`: its accumulator type, identity, and combination of
/// accumulators `(a)` and `(b)` (shared by `reduce.cu` and the fused row kernels).
pub(super) fn fold_parts(op: ReduceOp, input: Dtype) -> (&'static str, &'static str, String) {
    let acc = accumulator(input);
    let float = input.is_float();
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
    (acc, identity, combine)
}

/// The definitions that make `reduce.cu` the reduction `op` of `input` into `output`.
pub(super) fn definitions(op: ReduceOp, input: Dtype, output: Dtype) -> String {
    fold_definitions(fold_parts(op, input), input, output)
}

/// The definitions of a fold given as [`fold_parts`] gives them, of `input` into `output`.
pub(super) fn fold_definitions((acc, identity, combine): (&str, &str, String), input: Dtype, output: Dtype) -> String {
    let load = match input {
        Dtype::F16 => "(double)k_f16_load(x)".to_string(),
        Dtype::BF16 => "(double)k_bf16_load(x)".to_string(),
        _ => format!("({acc})(x)"),
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

/// Into how many parts, each folded by its own block, `gpu` splits rows of `len` elements when
/// there are `rows` of them ([`crate::fused::gpu_parts_per_row`], the rule fusion follows too).
pub(super) fn parts_per_row(gpu: &Gpu, rows: usize, len: usize) -> usize {
    crate::fused::gpu_parts_per_row(gpu.multiprocessors as usize, rows, len)
}

/// Threads per block for rows of `cols` elements: a warp for short rows, up to 256 for long ones.
pub(super) fn block_for(cols: usize) -> u32 {
    match cols {
        0..=256 => 32,
        257..=2048 => 128,
        _ => 256,
    }
}

/// `x` with `axes` moved last, as row-major rows of their elements: a view where strides allow,
/// else a copy.
pub(super) fn rows_of(op: &str, gpu: &Gpu, stream: sys::CUstream, x: &Input, axes: &[usize]) -> Result<Buffer> {
    let kept: Vec<usize> = (0..x.shape.len()).filter(|d| !axes.contains(d)).collect();
    let order: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let permuted = Input {
        shape: order.iter().map(|&d| x.shape[d]).collect(),
        dtype: x.dtype,
        buffer: Buffer { strides: order.iter().map(|&d| x.buffer.strides[d]).collect(), ..x.buffer.clone() },
        donatable: false,
    };
    if is_row_contiguous(&permuted.shape, &permuted.buffer.strides) {
        Ok(permuted.buffer)
    } else {
        elementwise::contiguous(op, gpu, stream, &permuted)
    }
}

/// The strides that read rows of `x`'s elements along `axis` (written row-major with `axis`
/// moved last, as [`rows_of`] reads them) back in `x`'s axis order.
pub(super) fn rows_in_place(shape: &[usize], axis: usize) -> crate::shape::Strides {
    let perm: Vec<usize> = (0..shape.len()).filter(|&d| d != axis).chain([axis]).collect();
    crate::backend::cpu::lanes::unpermute(shape, &perm)
}

/// Reduces `axes` of `x` into a new array of `shape` (reduced axes kept with size 1) and `dtype`.
pub fn run(op: ReduceOp, gpu: &Gpu, stream: sys::CUstream, x: &Input, axes: &[usize], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let name = "reduce";
    let rows_input = rows_of(name, gpu, stream, x, axes)?;
    let rows = numel(shape);
    let cols: usize = axes.iter().map(|&d| x.shape[d]).product();
    let out = DeviceBlock::new(name, gpu, stream, rows * dtype.size())?;
    if rows > 0 {
        let splits = parts_per_row(gpu, rows, cols);
        let partial = DeviceBlock::new(name, gpu, stream, rows * splits * 8)?;
        let input = rows_input.gpu_start(name, gpu.ordinal, stream, x.dtype.size())?;
        let kernel = |entry: &'static str| LOADED.get(name, gpu, (op, x.dtype, dtype, entry), entry, || Ok(source(op, x.dtype, dtype)));
        let rows_fn = kernel("kiln_reduce_rows")?;
        let (mut cols_arg, mut splits_arg) = (cols as i64, splits as i64);
        let (mut in_arg, mut partial_arg, mut out_arg) = (input, partial.ptr, out.ptr);
        rows_fn.launch(name, stream, rows * splits, block_for(cols / splits), &mut [
            &mut in_arg as *mut u64 as *mut c_void,
            &mut partial_arg as *mut u64 as *mut c_void,
            &mut out_arg as *mut u64 as *mut c_void,
            &mut cols_arg as *mut i64 as *mut c_void,
            &mut splits_arg as *mut i64 as *mut c_void,
        ])?;
        if splits > 1 {
            let partials_fn = kernel("kiln_reduce_partials")?;
            partials_fn.launch(name, stream, rows, block_for(splits), &mut [
                &mut partial_arg as *mut u64 as *mut c_void,
                &mut out_arg as *mut u64 as *mut c_void,
                &mut splits_arg as *mut i64 as *mut c_void,
            ])?;
        }
        // `partial` is freed on `stream` after the kernels that use it.
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}

const ARG_BODY: &str = include_str!("arg_reduce.cu");

/// The definitions that make `arg_reduce.cu` arg-reduction `op` of `input`.
fn arg_definitions(op: ArgReduceOp, input: Dtype) -> String {
    let better = match op {
        ArgReduceOp::ArgMax => "((a) > (b))",
        ArgReduceOp::ArgMin => "((a) < (b))",
    };
    let load = match input {
        Dtype::F16 => "(double)k_f16_load(x)",
        Dtype::BF16 => "(double)k_bf16_load(x)",
        _ => "(double)(x)",
    };
    format!("#define K_IN {}\n#define K_LOAD(x) {load}\n#define K_BETTER(a, b) {better}\n", storage_type(input))
}

/// Every arg-reduction kernel, as (what, CUDA C).
pub(super) fn arg_variants() -> Vec<(String, String)> {
    [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin]
        .into_iter()
        .flat_map(|op| Dtype::REAL.iter().map(move |&d| (format!("{op:?} of {d}"), nvrtc::handwritten_source(ARG_BODY, &arg_definitions(op, d)))))
        .collect()
}

/// The index (uint32) of the largest or smallest element along `axis` of `x`, into a new array
/// of `shape`: the first NaN, else the first extreme value, as on the CPU.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn arg_reduce(op: ArgReduceOp, gpu: &Gpu, stream: sys::CUstream, x: &Input, axis: usize, shape: &[usize]) -> Result<Buffer> {
    let name = "arg_reduce";
    let rows = numel(shape);
    let cols = x.shape[axis];
    let out = DeviceBlock::new(name, gpu, stream, rows * 4)?;
    if rows > 0 && cols == 0 {
        // An empty axis gives index 0, as on the CPU.
        // Safety: the block holds `rows * 4` bytes of this context.
        unsafe { cudarc::driver::result::memset_d8_async(out.ptr, 0, rows * 4, stream) }
            .map_err(|e| super::context::device_error(name, "zeroing the output", e))?;
    } else if rows > 0 {
        let input = rows_of(name, gpu, stream, x, &[axis])?;
        let f = nvrtc::handwritten(name, gpu, ARG_BODY, arg_definitions(op, x.dtype), "kiln_arg_reduce")?;
        let mut in_arg = input.gpu_start(name, gpu.ordinal, stream, x.dtype.size())?;
        let (mut out_arg, mut cols_arg) = (out.ptr, cols as i64);
        f.launch(name, stream, rows, block_for(cols), &mut [
            &mut in_arg as *mut u64 as *mut c_void,
            &mut out_arg as *mut u64 as *mut c_void,
            &mut cols_arg as *mut i64 as *mut c_void,
        ])?;
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}
