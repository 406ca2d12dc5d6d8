//! Sorting along one axis on a GPU (`sort.cu`): the axis is moved last (a view, or a row-major
//! copy), rows are sorted as (value, position) pairs (a bitonic network per tile in shared
//! memory, then pairwise merges for long rows), and the values or positions are handed back as a
//! view in the input's axis order.
//!
//! Sorting pairs is stable, so `argsort` gives the CPU's indices exactly and `sort` its values.
//! Partitions are full sorts here: a sorted row is a valid partition around every position, though
//! its order differs from the CPU's selection algorithm (only the partition property is promised).

use super::context::Gpu;
use super::memory::DeviceBlock;
use super::nvrtc;
use super::reduce;
use super::source::storage_type;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::shape::numel;
use cudarc::driver::sys;

const BODY: &str = include_str!("sort.cu");

/// Threads per block of the merge passes.
const MERGE_BLOCK: u32 = 256;

/// The sort key's CUDA type for `d` and the expression ordering stored value `x` by it.
fn key_of(d: Dtype) -> (&'static str, String) {
    let float = |bits: &str, key: &str, sign: &str, inf: &str| format!("k_float_order<{key}>(({key}){bits}, {sign}, {inf})");
    match d {
        Dtype::F16 => ("u32", float("(x)", "u32", "0x8000u", "0x7c00u")),
        Dtype::BF16 => ("u32", float("(x)", "u32", "0x8000u", "0x7f80u")),
        Dtype::F32 => ("u32", float("__float_as_uint(x)", "u32", "0x80000000u", "0x7f800000u")),
        Dtype::F64 => ("u64", float("__double_as_longlong(x)", "u64", "0x8000000000000000ull", "0x7ff0000000000000ull")),
        Dtype::I8 | Dtype::I16 | Dtype::I32 => ("u32", "((u32)(i32)(x) ^ 0x80000000u)".into()),
        Dtype::I64 => ("u64", "((u64)(x) ^ 0x8000000000000000ull)".into()),
        Dtype::U64 => ("u64", "((u64)(x))".into()),
        Dtype::Bool | Dtype::U8 | Dtype::U16 | Dtype::U32 => ("u32", "((u32)(x))".into()),
        Dtype::C64 => unreachable!("complex64 is refused before any GPU kernel (backend::run)"),
    }
}

/// The definitions that make `sort.cu` sort elements of `d`.
fn definitions(d: Dtype) -> String {
    let (key, order) = key_of(d);
    format!("#define K_T {}\n#define K_KEY {key}\n#define K_ORDER(x) {order}\n", storage_type(d))
}

/// The sort kernels for every dtype, as (what, CUDA C).
pub(super) fn variants() -> Vec<(String, String)> {
    Dtype::REAL.iter().map(|&d| (format!("sort of {d}"), nvrtc::handwritten_source(BODY, &definitions(d)))).collect()
}

/// The most elements a block sorts in shared memory: 64 KiB of 4-byte keys and positions, 48 KiB
/// of 8-byte keys and positions.
fn max_tile(d: Dtype) -> usize {
    if d.size() == 8 { 4096 } else { 8192 }
}

/// `x` sorted along `axis`: its values (`positions == false`) or the uint32 positions that sort
/// it (stable), in a new array of `x`'s shape.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn run(op: &str, gpu: &Gpu, stream: sys::CUstream, x: &Input, axis: usize, positions: bool) -> Result<Buffer> {
    let n = numel(&x.shape);
    let len = x.shape[axis];
    if len > u32::MAX as usize {
        return Err(Error::unsupported(op, format!("rows of {len} elements along axis {axis} of shape {:?}: positions are uint32", x.shape)));
    }
    let size = x.dtype.size();
    let out = DeviceBlock::new(op, gpu, stream, n * if positions { 4 } else { size })?;
    let strides = reduce::rows_in_place(&x.shape, axis);
    if n > 0 {
        let rows = n / len;
        let input = reduce::rows_of(op, gpu, stream, x, &[axis])?;
        let in_ptr = input.gpu_start(op, gpu.ordinal, stream, size)?;
        let key_size: u64 = if size == 8 { 8 } else { 4 };
        let tile = len.next_power_of_two().min(max_tile(x.dtype));
        let tiles = len.div_ceil(tile);
        // The final outputs: one of the two is null.
        let (values, indices) = if positions { (0, out.ptr) } else { (out.ptr, 0) };
        let kernel = |entry: &'static str| nvrtc::handwritten(op, gpu, BODY, definitions(x.dtype), entry);
        let threads = (tile as u32 / 2).clamp(32, 1024);
        let shared = (tile as u64 * (key_size + 4)) as u32;
        if tiles == 1 {
            kernel("kiln_sort_tiles")?.launch_params(op, stream, rows, threads, shared, &mut [in_ptr, 0, 0, values, indices, len as u64, tile as u64])?;
        } else {
            // Keys and positions of the sorted runs, and of the runs a merge pass writes.
            let runs = || -> Result<(DeviceBlock, DeviceBlock)> {
                Ok((DeviceBlock::new(op, gpu, stream, n * key_size as usize)?, DeviceBlock::new(op, gpu, stream, n * 4)?))
            };
            let (mut from, mut to) = (runs()?, runs()?);
            kernel("kiln_sort_tiles")?.launch_params(op, stream, rows * tiles, threads, shared, &mut [in_ptr, from.0.ptr, from.1.ptr, 0, 0, len as u64, tile as u64])?;
            let merge = kernel("kiln_sort_merge")?;
            let mut width = tile;
            while width < len {
                let last = 2 * width >= len;
                let (v, i) = if last { (values, indices) } else { (0, 0) };
                merge.launch_params(op, stream, gpu.grid_for(MERGE_BLOCK, n), MERGE_BLOCK, 0, &mut [
                    from.0.ptr, from.1.ptr, to.0.ptr, to.1.ptr, in_ptr, v, i, rows as u64, len as u64, width as u64,
                ])?;
                std::mem::swap(&mut from, &mut to);
                width *= 2;
            }
            // The run buffers are freed on `stream` after the kernels that use them.
        }
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides })
}
