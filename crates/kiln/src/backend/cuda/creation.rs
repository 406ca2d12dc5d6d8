//! Arrays made on a GPU from parameters rather than inputs (`creation.cu`): arange, and the
//! random bits of the CPU's counter-based generator, so one key gives the same numbers on both
//! devices.

use super::context::Gpu;
use super::elementwise;
use super::memory::DeviceBlock;
use super::nvrtc;
use super::source::{from_f64, storage_type};
use crate::backend::cpu::strided::is_row_contiguous;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;
use std::ffi::c_void;

const BODY: &str = include_str!("creation.cu");

/// Threads per block of these kernels (their `__launch_bounds__`).
const BLOCK: u32 = 256;

/// The definitions of this file's kernels for output `dtype`.
fn definitions(dtype: Dtype) -> String {
    format!("#define K_OUT {}\n#define K_FROM_F64(x) {}\n", storage_type(dtype), from_f64(dtype, "(x)"))
}

/// The file for every output dtype, as (what, CUDA C).
pub(super) fn variants() -> Vec<(String, String)> {
    Dtype::REAL.iter().map(|&d| (format!("arange and random bits into {d}"), nvrtc::handwritten_source(BODY, &definitions(d)))).collect()
}

/// `start + i * step` for i below `shape[0]`, converted to `dtype` as on the CPU.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn arange(gpu: &Gpu, stream: sys::CUstream, start: f64, step: f64, shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let op = "arange";
    let n = numel(shape);
    let out = DeviceBlock::new(op, gpu, stream, n * dtype.size())?;
    if n > 0 {
        let f = nvrtc::handwritten(op, gpu, BODY, definitions(dtype), "kiln_arange")?;
        let (mut out_arg, mut start_arg, mut step_arg, mut n_arg) = (out.ptr, start, step, n as i64);
        f.launch(op, stream, gpu.grid_for(BLOCK, n), BLOCK, &mut [
            &mut out_arg as *mut u64 as *mut c_void,
            &mut start_arg as *mut f64 as *mut c_void,
            &mut step_arg as *mut f64 as *mut c_void,
            &mut n_arg as *mut i64 as *mut c_void,
        ])?;
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}

/// Random bits of `width` bytes (uint8, uint16 or uint32) for each key of `key` (uint32, shape
/// `(..., 2)`): the key axes lead `shape`, and each key fills its block with its stream's words.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn random_bits(gpu: &Gpu, stream: sys::CUstream, key: &Input, shape: &[usize], width: usize) -> Result<Buffer> {
    let op = "random_bits";
    if key.dtype != Dtype::U32 || key.shape.last() != Some(&2) {
        return Err(Error::value(op, "the key must be a uint32 array of shape (..., 2)"));
    }
    let dtype = match width {
        1 => Dtype::U8,
        2 => Dtype::U16,
        _ => Dtype::U32,
    };
    let keys = numel(&key.shape) / 2;
    let n = numel(&shape[key.shape.len() - 1..]);
    let out = DeviceBlock::new(op, gpu, stream, numel(shape) * dtype.size())?;
    if keys > 0 && n > 0 {
        let key_rows = if is_row_contiguous(&key.shape, &key.buffer.strides) {
            key.buffer.clone()
        } else {
            elementwise::contiguous(op, gpu, stream, key)?
        };
        let f = nvrtc::handwritten(op, gpu, BODY, definitions(dtype), "kiln_random_bits")?;
        let mut keys_arg = key_rows.gpu_start(op, gpu.ordinal, stream, 4)?;
        let (mut out_arg, mut n_arg, mut count_arg) = (out.ptr, n as i64, keys as i64);
        f.launch(op, stream, gpu.grid_for(BLOCK, keys * n.div_ceil(2)), BLOCK, &mut [
            &mut keys_arg as *mut u64 as *mut c_void,
            &mut out_arg as *mut u64 as *mut c_void,
            &mut n_arg as *mut i64 as *mut c_void,
            &mut count_arg as *mut i64 as *mut c_void,
        ])?;
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}
