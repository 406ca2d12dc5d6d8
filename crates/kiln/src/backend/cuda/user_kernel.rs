//! Launching user CUDA kernels ([`crate::cuda_kernel`]): inputs made row-major when asked,
//! outputs allocated (with room for one element per thread, and filled with the initial value
//! when one is given), the source built by
//! NVRTC with the toolkit's headers (cached by source), and the kernel queued on the stream.

use super::memory::DeviceBlock;
use super::nvrtc::Loaded;
use super::{creation, elementwise, libraries};
use crate::backend::cpu::strided::is_row_contiguous;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::cuda_kernel::{CudaCall, MAX_NDIM};
use crate::device::{DeviceKind, Stream};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::shape::{fmt_shape, numel, row_major_strides, Shape};
use std::ffi::c_void;

const OP: &str = "cuda_kernel";

/// User kernels built so far, by full source.
static BUILT: Loaded<String> = Loaded::with_toolkit_headers();

/// One kernel parameter, kept in place while the launch reads it.
enum Param {
    Address(u64),
    Shape([i32; MAX_NDIM]),
    Strides([i64; MAX_NDIM]),
    Rank(i32),
}

impl Param {
    fn as_arg(&mut self) -> *mut c_void {
        match self {
            Param::Address(a) => a as *mut u64 as *mut c_void,
            Param::Shape(s) => s.as_mut_ptr() as *mut c_void,
            Param::Strides(s) => s.as_mut_ptr() as *mut c_void,
            Param::Rank(r) => r as *mut i32 as *mut c_void,
        }
    }
}

/// Elements to allocate for an output of `elements` written by a launch of `launched` threads:
/// one per thread where that is at most twice the output (or 64Ki elements), so that a kernel
/// writing one element per thread without a bounds check, as mlx's examples do when the grid is
/// rounded up to the threadgroup, cannot write over another array.
fn room_for(elements: usize, launched: usize) -> usize {
    if launched <= elements.saturating_mul(2).max(1 << 16) { launched.max(elements) } else { elements }
}

/// Runs kernel `name` as `call` describes on `stream`, reading `inputs` and returning one
/// buffer per entry of `outputs`.
pub(crate) fn run(stream: Stream, name: &str, call: &CudaCall, inputs: &[Input], outputs: &[(Shape, Dtype)]) -> Result<Vec<Buffer>> {
    if stream.device.kind != DeviceKind::Gpu {
        return Err(Error::value(OP, format!("kernel '{name}' is CUDA C and runs on a GPU stream, not on the {}", stream.device)));
    }
    let (gpu, cu_stream) = super::resolve(OP, stream)?;
    if libraries::header_dirs().is_empty() {
        return Err(Error::new(
            OP,
            crate::ErrorKind::Device,
            format!(
                "kernel '{name}' includes the CUDA toolkit's headers (cuda_fp16.h, cooperative_groups.h), which were not \
                 found; set CUDA_HOME (or KILN_CUDA_PATH) to a CUDA 12 or 13 toolkit, or pip install nvidia-cuda-runtime \
                 nvidia-cuda-cccl"
            ),
        ));
    }
    let f = BUILT.get(OP, gpu, call.source.clone(), &call.entry, || Ok(call.source.clone()))?;
    let mut params = Vec::new();
    for (x, used) in inputs.iter().zip(&call.shape_uses) {
        let buffer = if call.ensure_row_contiguous && !is_row_contiguous(&x.shape, &x.buffer.strides) {
            elementwise::contiguous(OP, gpu, cu_stream, x)?
        } else {
            x.buffer.clone()
        };
        params.push(Param::Address(buffer.gpu_start(OP, gpu.ordinal, cu_stream, x.dtype.size())?));
        if used.shape {
            let mut axes = [0i32; MAX_NDIM];
            for (a, &d) in axes.iter_mut().zip(x.shape.iter()) {
                *a = i32::try_from(d).map_err(|_| {
                    Error::shape(OP, format!("kernel '{name}' reads the shape {} as 32-bit integers, and an axis exceeds them", fmt_shape(&x.shape)))
                })?;
            }
            params.push(Param::Shape(axes));
        }
        if used.strides {
            let mut axes = [0i64; MAX_NDIM];
            for (a, &s) in axes.iter_mut().zip(buffer.strides.iter()) {
                *a = s as i64;
            }
            params.push(Param::Strides(axes));
        }
        if used.ndim {
            params.push(Param::Rank(x.shape.len() as i32));
        }
    }
    let launched: usize = call.blocks.iter().zip(call.threads).map(|(&b, t)| b as usize * t as usize).product();
    let mut results = Vec::with_capacity(outputs.len());
    for (shape, dtype) in outputs {
        let room = room_for(numel(shape), launched);
        let storage = match call.init_value {
            Some(v) => creation::arange(gpu, cu_stream, v, 0.0, &[room], *dtype)?.storage,
            None => Storage::on_device(DeviceBlock::new(OP, gpu, cu_stream, room * dtype.size())?),
        };
        let out = Buffer { storage, offset: 0, strides: row_major_strides(shape) };
        params.push(Param::Address(out.gpu_start(OP, gpu.ordinal, cu_stream, dtype.size())?));
        results.push(out);
    }
    let mut args: Vec<*mut c_void> = params.iter_mut().map(Param::as_arg).collect();
    f.launch_3d(OP, cu_stream, call.blocks, call.threads, call.shared_memory, &mut args)
        .map_err(|e| Error::new(OP, e.kind, format!("kernel '{name}': {}", e.message)))?;
    Ok(results)
}
