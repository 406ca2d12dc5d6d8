//! The CUDA backend: NVIDIA GPUs as a device for eager ops.
//!
//! Libraries are loaded at run time ([`libraries`]), so the crate builds and its CPU half runs
//! with no CUDA toolkit or driver. Memory comes from each GPU's stream-ordered pool ([`memory`]);
//! kernels are queued on CUDA streams and `eval` returns without waiting: only a host read of the
//! data (or `synchronize`) waits. Elementwise ops are one-instruction kernels of the fused IR,
//! printed as CUDA C by the one CUDA lowering ([`source`]) and built by NVRTC ([`nvrtc`]).
//!
//! Matrix products go through cuBLASLt ([`matmul`]); arg-reductions, scans, sorts, gathers,
//! scatters, concatenation, slice updates, arange and random bits are hand-written kernels
//! (`*.cu`).
//!
//! User CUDA kernels ([`crate::cuda_kernel`]) are built and launched by [`user_kernel`]. User
//! CPU kernels (`Op::Kernel` with a Rust body) run on the CPU: their inputs are copied to the host (once per
//! storage, counted in [`crate::transfers`]) and the result stays there until a GPU op needs it.
//! Which ops ran that way is listed by [`ops_on_host`].

mod completion;
pub use completion::waits as synchronize_waits;
pub mod context;
mod copy;
pub mod graph;
mod creation;
mod elementwise;
mod index;
mod integer_matmul;
pub mod launches;
pub mod libraries;
pub mod matmul;
pub mod memory;
pub mod nvrtc;
pub mod reduce;
pub mod row_source;
mod rows;
mod scan;
mod sort;
mod staging;
mod switch;
pub mod source;
pub(crate) mod user_kernel;

pub use memory::DeviceBlock;

use crate::backend::cpu::views;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::device::Stream;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::fused::InstOp;
use crate::primitive::Op;
use cudarc::driver::{result as cu, sys};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A CUDA stream handle.
pub type CuStream = sys::CUstream;

/// Ops that ran on the host for a GPU stream, with how often.
static ON_HOST: Mutex<BTreeMap<&'static str, usize>> = Mutex::new(BTreeMap::new());

/// The ops that ran on the CPU for a GPU stream so far (no GPU kernel yet), with their counts.
pub fn ops_on_host() -> Vec<(&'static str, usize)> {
    ON_HOST.lock().unwrap().iter().map(|(k, v)| (*k, *v)).collect()
}

/// Every variant of the hand-written kernels (copies, creation, arg-reductions, scans, sorts,
/// gathers and scatters) as (what, CUDA C): the tests build each with NVRTC, with or without a
/// GPU.
pub fn handwritten_sources() -> Vec<(String, String)> {
    let mut all = copy::variants();
    all.extend(creation::variants());
    all.extend(reduce::arg_variants());
    all.extend(scan::variants());
    all.extend(sort::variants());
    all.extend(index::variants());
    all.extend(integer_matmul::variants());
    all
}

/// The GPU of kiln's `stream` (made current) and the CUDA stream it maps to.
fn resolve(op: &str, stream: Stream) -> Result<(&'static context::Gpu, CuStream)> {
    let gpu = context::gpu(op, stream.device.index)?;
    Ok((gpu, gpu.stream(op, stream.index)?))
}

/// Runs `op` on the GPU of `stream`.
pub fn run(stream: Stream, op: &Op, inputs: &[Input], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let name = op.name();
    let (gpu, cu_stream) = resolve(name, stream)?;
    let fused = |inst: InstOp| {
        let k = elementwise::one_op(name, inst, inputs, dtype);
        Ok(elementwise::run(name, gpu, cu_stream, &k, inputs, shape)?.remove(0))
    };
    match op {
        Op::Unary(u) => fused(InstOp::Unary(*u, 0)),
        Op::Binary(b) => fused(InstOp::Binary(*b, 0, 1)),
        Op::Select => fused(InstOp::Select(0, 1, 2)),
        Op::AsType(_) => fused(InstOp::Cast(0)),
        Op::Reduce { op: r, axes, .. } => reduce::run(*r, gpu, cu_stream, &inputs[0], axes, shape, dtype),
        Op::SumLike => match crate::shape::unbroadcast_axes(&inputs[0].shape, shape) {
            axes if axes.is_empty() => fused(InstOp::Cast(0)),
            axes => reduce::run(crate::primitive::ReduceOp::Sum, gpu, cu_stream, &inputs[0], &axes, shape, dtype),
        },
        Op::ArgReduce { op: r, axis } => reduce::arg_reduce(*r, gpu, cu_stream, &inputs[0], *axis, shape),
        Op::Scan { op: s, axis, reverse, inclusive } => scan::run(*s, gpu, cu_stream, &inputs[0], *axis, *reverse, *inclusive, dtype),
        Op::Sort { axis } | Op::Partition { axis, .. } => sort::run(name, gpu, cu_stream, &inputs[0], *axis, false),
        Op::ArgSort { axis } | Op::ArgPartition { axis, .. } => sort::run(name, gpu, cu_stream, &inputs[0], *axis, true),
        Op::Gather { axes, slice_sizes } => index::gather(gpu, cu_stream, inputs, axes, slice_sizes, shape),
        Op::Scatter { axes, op: s } => index::scatter(gpu, cu_stream, inputs, axes, *s),
        Op::Matmul => matmul::run(gpu, cu_stream, &inputs[0], &inputs[1], shape, dtype),
        // Never reached: every transform reads or writes complex64, which `backend::run` refuses
        // on the GPU.
        Op::Fft { .. } => Err(crate::Error::new(name, crate::ErrorKind::Unsupported, "Fourier transforms run on the CPU only for now")),
        Op::Concatenate { axis } => copy::concatenate(gpu, cu_stream, inputs, *axis, shape),
        Op::SliceUpdate { start, step, .. } => copy::slice_update(gpu, cu_stream, &inputs[0], &inputs[1], start, step),
        Op::Arange { start, step, .. } => creation::arange(gpu, cu_stream, start.get(), step.get(), shape, dtype),
        // A count reads only its input's shape: made on the host, it reaches GPU kernels as an
        // immediate parameter, with no launch and no copy.
        Op::Count { .. } => crate::backend::cpu::run(op, inputs, shape, dtype),
        Op::Kernel { call, index } if call.is_cuda() => call.run_one(stream, *index, inputs),
        Op::RandomBits { width, .. } => creation::random_bits(gpu, cu_stream, &inputs[0], shape, *width),
        Op::Transpose(perm) => Ok(views::transpose(&inputs[0], perm)),
        Op::BroadcastTo(_) | Op::BroadcastLike { .. } => Ok(views::broadcast_to(&inputs[0], shape)),
        Op::Slice { start, step, .. } => Ok(views::slice(&inputs[0], start, step)),
        Op::StopGradient => Ok(inputs[0].buffer.clone()),
        Op::Custom { index, .. } => Ok(inputs[*index].buffer.clone()),
        Op::View(_) => {
            let copy = elementwise::contiguous(name, gpu, cu_stream, &inputs[0].as_bits())?;
            Ok(Buffer { offset: 0, strides: crate::shape::row_major_strides(shape), ..copy })
        }
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze(_) | Op::ExpandDims(_) => match views::reshape_view(&inputs[0], shape) {
            Some(view) => Ok(view),
            None => {
                let copy = elementwise::contiguous(name, gpu, cu_stream, &inputs[0])?;
                Ok(Buffer { strides: crate::shape::row_major_strides(shape), ..copy })
            }
        },
        _ => {
            *ON_HOST.lock().unwrap().entry(name).or_default() += 1;
            crate::backend::run_on_host(op, inputs, shape, dtype)
        }
    }
}

/// Runs fused kernel `k` over `space` on the GPU of `stream`: elementwise kernels a thread per
/// element (or vector), kernels with reductions a block per row.
pub fn run_fused(stream: Stream, k: &crate::fused::Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    let (gpu, cu_stream) = resolve(&k.name, stream)?;
    if k.inner > 0 {
        let why = "folds axes with kept axes after them, which fused GPU kernels don't do (compile fuses them for the CPU only)";
        return Err(crate::Error::unsupported(&k.name, why));
    }
    if k.reduced > 0 {
        return rows::run(&k.name, gpu, cu_stream, k, inputs, space);
    }
    elementwise::run_recorded(&k.name, gpu, cu_stream, k, inputs, space)
}

/// Runs elementwise fused kernel `k` over `space` on the GPU of `stream` once its code is ready:
/// `None` while NVRTC builds it on another thread (eager fusion runs the ops one by one meanwhile).
pub fn run_fused_when_built(stream: Stream, k: &crate::fused::Kernel, inputs: &[Input], space: &[usize]) -> Result<Option<Vec<Buffer>>> {
    let (gpu, cu_stream) = resolve(&k.name, stream)?;
    elementwise::run_when_built(&k.name, gpu, cu_stream, k, inputs, space)
}

/// Copies a device block's bytes to `host` once the kernels writing them are done.
pub fn download(op: &str, block: &DeviceBlock, host: &mut [u8]) -> Result<()> {
    graph::refuse_host_copy(op)?;
    let g = context::gpu(op, block.gpu)?;
    staging::download(op, g, block.stream, block.ptr, &mut host[..block.bytes])
}

/// A new block on GPU `gpu` holding a copy of `host`, ordered on `stream`.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn upload(op: &str, gpu: usize, stream: CuStream, host: &[u8]) -> Result<DeviceBlock> {
    graph::refuse_host_copy(op)?;
    let g = context::gpu(op, gpu)?;
    let block = DeviceBlock::new(op, g, stream, host.len())?;
    staging::upload(op, g, stream, block.ptr, host)?;
    Ok(block)
}

/// A copy on GPU `gpu` of `src`, which lives on another GPU, queued on `stream` (of `gpu`) after
/// the kernels that write `src`; `src`'s own stream waits for the copy, so its free comes after.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn copy_between_gpus(op: &str, src: &DeviceBlock, gpu: usize, stream: CuStream) -> Result<DeviceBlock> {
    let from = context::gpu(op, src.gpu)?;
    memory::order(op, src.stream, stream)?;
    let to = context::gpu(op, gpu)?;
    let block = DeviceBlock::new(op, to, stream, src.bytes)?;
    // Safety: both blocks hold `src.bytes` bytes in their contexts; the copy is ordered after the
    // source's writers (above) and before its free (below).
    unsafe { cu::memcpy_peer_async(to.context(), block.ptr, from.context(), src.ptr, src.bytes, stream) }
        .map_err(|e| context::device_error(op, &format!("copying from GPU {} to GPU {gpu}", src.gpu), e))?;
    memory::order(op, stream, src.stream)?;
    Ok(block)
}

/// Waits for the work queued on `stream`.
pub fn synchronize(stream: Stream) -> Result<()> {
    graph::refuse_while_capturing("synchronize", "waiting for the GPU")?;
    context::gpu("synchronize", stream.device.index)?.synchronize_stream("synchronize", stream.index)
}
