//! Backends execute one op on evaluated inputs. The op layer never names a backend: eval hands
//! each node to the backend of its stream's device. The CPU backend is the first; a CUDA backend
//! is another module behind the same [`run`] entry point.

pub mod cpu;
pub mod cuda;

use crate::buffer::Buffer;
use crate::device::{DeviceKind, Stream};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::primitive::Op;
use crate::shape::Shape;

/// An evaluated input as a kernel sees it.
pub struct Input {
    /// The input's shape.
    pub shape: Shape,
    /// The input's dtype.
    pub dtype: Dtype,
    /// The input's data (storage, offset, strides).
    pub buffer: Buffer,
    /// True when no one else can see this input's storage: the kernel may write its output there.
    pub donatable: bool,
}

impl Input {
    /// The same data seen as unsigned integers of the dtype's width, so copies move bits
    /// exactly (NaN payloads and all) whatever the dtype.
    pub fn as_bits(&self) -> Input {
        let dtype = match self.dtype.size() {
            1 => Dtype::U8,
            2 => Dtype::U16,
            4 => Dtype::U32,
            _ => Dtype::U64,
        };
        Input { shape: self.shape.clone(), dtype, buffer: self.buffer.clone(), donatable: false }
    }
}

/// Runs `op` on `inputs` on `stream`'s device, producing the output's data.
pub fn run(stream: Stream, op: &Op, inputs: &[Input], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    match stream.device.kind {
        DeviceKind::Cpu => run_on_host(op, inputs, shape, dtype),
        DeviceKind::Gpu => {
            refuse_complex_on_gpu(op.name(), inputs.iter().map(|x| x.dtype).chain([dtype]))?;
            cuda::run(stream, op, inputs, shape, dtype)
        }
    }
}

/// The GPU has no complex64 kernels yet: a clear error instead of a kernel that reads the wrong
/// type. (Fusion never groups complex ops, so fused kernels need no such check.)
fn refuse_complex_on_gpu(op: &str, dtypes: impl IntoIterator<Item = Dtype>) -> Result<()> {
    if dtypes.into_iter().any(Dtype::is_complex) {
        return Err(crate::Error::new(
            op,
            crate::ErrorKind::Unsupported,
            "complex64 arrays are computed on the CPU only for now; pass stream=mx.cpu (or set the default device to the CPU)",
        ));
    }
    Ok(())
}

/// Runs `op` on the CPU, first copying to the host any input whose bytes are only on a GPU. An
/// output that cannot fit in host memory is a clear error before anything is allocated (views
/// allocate nothing; a reshape that must copy checks its copy itself).
pub fn run_on_host(op: &Op, inputs: &[Input], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    if !op.is_view() {
        crate::buffer::check_host_allocation(op.name(), shape, dtype)?;
    }
    to_host(op.name(), inputs)?;
    cpu::run(op, inputs, shape, dtype)
}

/// Runs fused kernel `k` over `space` on `stream`'s device: printed as CUDA C on a GPU, run by
/// the CPU's executor (or its native code) on the host.
pub fn run_fused(stream: Stream, k: &crate::fused::Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    if stream.device.kind == DeviceKind::Gpu {
        return cuda::run_fused(stream, k, inputs, space);
    }
    to_host(&k.name, inputs)?;
    cpu::fused::run(k, inputs, space)
}

/// Makes every input's bytes readable on the host (a no-op for inputs already there).
pub fn to_host(op: &str, inputs: &[Input]) -> Result<()> {
    inputs.iter().try_for_each(|x| x.buffer.storage.to_host(op))
}


/// The smallest and largest value of an integer dtype as C expressions (`<stdint.h>`'s names,
/// which the CUDA prelude defines too): the bounds of saturating casts in both printers.
pub(crate) fn c_int_range(d: Dtype) -> (&'static str, &'static str) {
    match d {
        Dtype::U8 => ("0", "UINT8_MAX"),
        Dtype::U16 => ("0", "UINT16_MAX"),
        Dtype::U32 => ("0", "UINT32_MAX"),
        Dtype::U64 => ("0", "UINT64_MAX"),
        Dtype::I8 => ("INT8_MIN", "INT8_MAX"),
        Dtype::I16 => ("INT16_MIN", "INT16_MAX"),
        Dtype::I32 => ("INT32_MIN", "INT32_MAX"),
        _ => ("INT64_MIN", "INT64_MAX"),
    }
}

/// kiln's cache directory for built kernels: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
/// `~/.cache/kiln`, else the temporary directory. Each backend keeps a folder in it.
pub(crate) fn cache_root() -> std::path::PathBuf {
    use std::path::PathBuf;
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("KILN_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("kiln")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("kiln")))
        .unwrap_or_else(|| std::env::temp_dir().join("kiln"))
}

/// 64-bit FNV-1a over `parts`: a stable hash for cache file names (std's hasher may change
/// between releases).
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.as_bytes().iter().chain(&[0u8]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
