//! Cumulative ops along one axis on a GPU (`scan.cu`, on top of the reductions' block folds): the
//! axis is moved last (a view, or a row-major copy), each row is scanned by a thread (short
//! rows), a block, or several blocks that first fold their parts (few long rows), and the result
//! is handed back as a view in the input's axis order.

use super::context::Gpu;
use super::memory::DeviceBlock;
use super::nvrtc;
use super::reduce;
use super::source::from_f64;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::primitive::{ReduceOp, ScanOp};
use crate::shape::numel;
use cudarc::driver::sys;

const BODY: &str = include_str!("scan.cu");

/// Scan kernels loaded so far, by op, input and output dtype, direction, inclusiveness and entry.
static LOADED: nvrtc::Loaded<(ScanOp, Dtype, Dtype, bool, bool, &'static str)> = nvrtc::Loaded::new();

/// Threads per block of the block scan (`K_SCAN_BLOCK`) and steps each thread scans per tile.
const BLOCK: u32 = 256;
const ITEMS: usize = 8;

/// Rows up to this long are scanned by one thread each, in the CPU's order.
const SERIAL_LEN: usize = 32;

/// The stored value an exclusive scan writes first: the op's identity in the output dtype (the
/// dtype's own extreme for max and min, false for a bool max), as on the CPU.
fn first_value(op: ReduceOp, output: Dtype) -> String {
    match op {
        ReduceOp::Max if output == Dtype::Bool => "0".into(),
        ReduceOp::Max => from_f64(output, "(-(double)K_INF)"),
        ReduceOp::Min => from_f64(output, "((double)K_INF)"),
        ReduceOp::Prod | ReduceOp::All => from_f64(output, "1.0"),
        ReduceOp::Sum | ReduceOp::Any => from_f64(output, "0.0"),
    }
}

/// The definitions that make the reduction text and `scan.cu` scan `op` of `input` into `output`.
/// The running log-sum-exp folds in the float accumulator with `k_logaddexp`, from -inf.
fn definitions(op: ScanOp, input: Dtype, output: Dtype, reverse: bool, inclusive: bool) -> String {
    let (fold, first) = match op.as_reduce() {
        Some(r) => (reduce::fold_parts(r, input), first_value(r, output)),
        None => {
            let fold = (reduce::accumulator(input), "(-(double)K_INF)", "k_logaddexp((a), (b))".to_string());
            (fold, from_f64(output, "(-(double)K_INF)"))
        }
    };
    format!(
        "{}#define K_FIRST {first}\n#define K_REVERSE {}\n#define K_INCLUSIVE {}\n{}",
        reduce::fold_definitions(fold, input, output),
        u8::from(reverse),
        u8::from(inclusive),
        reduce::BODY
    )
}

/// Every scan kernel (each op, input dtype, direction and inclusiveness), as (what, CUDA C). The
/// running log-sum-exp takes floats only (`ops::logcumsumexp` casts integers).
pub(super) fn variants() -> Vec<(String, String)> {
    let mut all = Vec::new();
    for op in [ScanOp::Sum, ScanOp::Prod, ScanOp::Max, ScanOp::Min, ScanOp::LogAddExp] {
        for d in Dtype::REAL {
            let Some(out) = op.as_reduce().map_or(d.is_float().then_some(d), |r| Some(r.out_dtype(d))) else { continue };
            for (reverse, inclusive) in [(false, true), (true, false)] {
                let what = format!("{op:?} scan of {d} (reverse {reverse}, inclusive {inclusive})");
                all.push((what, nvrtc::handwritten_source(BODY, &definitions(op, d, out, reverse, inclusive))));
            }
        }
    }
    all
}

/// Blocks per row when rows are few and long, so every multiprocessor has work.
fn parts_for(gpu: &Gpu, rows: usize, len: usize) -> usize {
    let wanted = 4 * gpu.multiprocessors as usize;
    if rows >= wanted {
        return 1;
    }
    wanted.div_ceil(rows).min(len.div_ceil(4 * ITEMS * BLOCK as usize)).max(1)
}

/// The scan `op` of `x` along `axis` into a new array of `x`'s shape and `dtype`.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn run(op: ScanOp, gpu: &Gpu, stream: sys::CUstream, x: &Input, axis: usize, reverse: bool, inclusive: bool, dtype: Dtype) -> Result<Buffer> {
    let name = "scan";
    let n = numel(&x.shape);
    let len = x.shape[axis];
    let out = DeviceBlock::new(name, gpu, stream, n * dtype.size())?;
    let strides = reduce::rows_in_place(&x.shape, axis);
    if n > 0 {
        let rows = n / len;
        let input = reduce::rows_of(name, gpu, stream, x, &[axis])?;
        let in_ptr = input.gpu_start(name, gpu.ordinal, stream, x.dtype.size())?;
        let kernel = |entry: &'static str| {
            LOADED.get(name, gpu, (op, x.dtype, dtype, reverse, inclusive, entry), entry, || {
                Ok(nvrtc::handwritten_source(BODY, &definitions(op, x.dtype, dtype, reverse, inclusive)))
            })
        };
        if len <= SERIAL_LEN {
            kernel("kiln_scan_serial")?.launch_params(name, stream, gpu.grid_for(BLOCK, rows), BLOCK, 0, &mut [in_ptr, out.ptr, rows as u64, len as u64])?;
        } else {
            let parts = parts_for(gpu, rows, len);
            let carries = DeviceBlock::new(name, gpu, stream, rows * parts * 8)?;
            if parts > 1 {
                let fold = kernel("kiln_scan_parts")?;
                fold.launch_params(name, stream, rows * parts, reduce::block_for(len / parts), 0, &mut [in_ptr, carries.ptr, len as u64, parts as u64])?;
                let scan_carries = kernel("kiln_scan_carries")?;
                scan_carries.launch_params(name, stream, rows.div_ceil(BLOCK as usize), BLOCK, 0, &mut [carries.ptr, rows as u64, parts as u64])?;
            }
            let scan = kernel("kiln_scan_rows")?;
            scan.launch_params(name, stream, rows * parts, BLOCK, 0, &mut [in_ptr, out.ptr, carries.ptr, len as u64, parts as u64])?;
            // `carries` is freed on `stream` after the kernels that use it.
        }
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides })
}
