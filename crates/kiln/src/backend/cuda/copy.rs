//! Ops that move elements without computing (`copy.cu`): concatenate writes each input into its
//! slab of a new array; slice_update copies the destination and writes the update into its
//! strided region. One kernel per element size copies any strided layout into another.

use super::context::Gpu;
use super::elementwise::{self, merged_axes};
use super::memory::DeviceBlock;
use super::nvrtc;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::error::{Error, Result};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;

const BODY: &str = include_str!("copy.cu");

/// Threads per block of the copy kernel (its `__launch_bounds__`).
const BLOCK: u32 = 256;

/// The unsigned CUDA type of an element of `bytes` bytes: what moves bits without computing.
pub(super) fn bits_type(bytes: usize) -> &'static str {
    match bytes {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    }
}

/// The definitions of the copy of `size`-byte elements over `rank` axes.
fn definitions(size: usize, rank: usize) -> String {
    format!("#define K_T {}\n#define K_RANK {rank}\n", bits_type(size))
}

/// Every variant of the copy kernel up to rank 8, as (what, CUDA C).
pub(super) fn variants() -> Vec<(String, String)> {
    [1, 2, 4, 8]
        .into_iter()
        .flat_map(|size| (1..=8).map(move |rank| (format!("copy of {size}-byte elements over {rank} axes"), nvrtc::handwritten_source(BODY, &definitions(size, rank)))))
        .collect()
}

/// Copies the elements of `x` (its shape and strides, from its buffer's start) to device address
/// `dst` with element strides `dst_strides`.
fn copy_into(op: &str, gpu: &Gpu, stream: sys::CUstream, x: &Input, dst: u64, dst_strides: &[isize]) -> Result<()> {
    let n = numel(&x.shape);
    if n == 0 {
        return Ok(());
    }
    let size = x.dtype.size();
    let (dims, strides) = merged_axes(&x.shape, &[x.buffer.strides.to_vec(), dst_strides.to_vec()]);
    let rank = dims.len().max(1);
    let f = nvrtc::handwritten(op, gpu, BODY, definitions(size, rank), "kiln_copy")?;
    let src = x.buffer.gpu_start(op, gpu.ordinal, stream, size)?;
    let mut words: Vec<u64> = vec![src, dst, n as u64];
    words.extend((0..rank).map(|d| dims.get(d).copied().unwrap_or(1) as u64));
    for s in &strides {
        words.extend((0..rank).map(|d| s.get(d).copied().unwrap_or(0) as u64));
    }
    f.launch_words(op, gpu, stream, BLOCK, n, &mut words)
}

/// The inputs joined along `axis` into a new row-major array of `shape`.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn concatenate(gpu: &Gpu, stream: sys::CUstream, inputs: &[Input], axis: usize, shape: &[usize]) -> Result<Buffer> {
    let op = "concatenate";
    let size = inputs[0].dtype.size();
    let out = DeviceBlock::new(op, gpu, stream, numel(shape) * size)?;
    let strides = row_major_strides(shape);
    let mut at = 0usize;
    for x in inputs {
        let start = (at as isize * strides[axis] * size as isize) as i64;
        copy_into(op, gpu, stream, x, out.ptr.wrapping_add_signed(start), &strides)?;
        at += x.shape[axis];
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides })
}

/// A row-major copy of `dst` whose region starting at `start` with steps `step` holds `update`.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn slice_update(gpu: &Gpu, stream: sys::CUstream, dst: &Input, update: &Input, start: &[usize], step: &[isize]) -> Result<Buffer> {
    let op = "slice_update";
    if update.dtype != dst.dtype {
        return Err(Error::dtype(op, format!("the update's dtype {} differs from the array's {}", update.dtype, dst.dtype)));
    }
    let out = elementwise::contiguous(op, gpu, stream, dst)?;
    let size = dst.dtype.size() as isize;
    let strides = row_major_strides(&dst.shape);
    let base: isize = start.iter().zip(&strides).map(|(&s, &k)| s as isize * k).sum();
    let region: Vec<isize> = strides.iter().zip(step).map(|(&k, &s)| k * s).collect();
    let at = out.storage.on_gpu(op, gpu.ordinal, stream)?.wrapping_add_signed((base * size) as i64);
    copy_into(op, gpu, stream, update, at, &region)?;
    Ok(out)
}
