//! The GPUs of this machine: the driver started once, each device's primary context, its compute
//! capability, and the CUDA streams kiln's streams map to.

use super::libraries::{self, DRIVER};
use crate::error::{Error, ErrorKind, Result};
use cudarc::driver::{result as cu, sys};
use super::completion::{allocate_words, Streams};
use std::sync::OnceLock;

/// The oldest driver kiln calls: CUDA 12.0 (stream-ordered allocation, the `_v2` entry points).
const OLDEST_DRIVER: i32 = 12000;

/// One GPU.
pub struct Gpu {
    /// Its index among the GPUs the driver lists.
    pub ordinal: usize,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability, e.g. (9, 0).
    pub capability: (i32, i32),
    /// Streaming multiprocessors: launch sizes are chosen from this.
    pub multiprocessors: u32,
    /// Device memory in bytes.
    pub total_memory: usize,
    context: sys::CUcontext,
    /// The memory pool stream-ordered allocations come from.
    pub(super) pool: sys::CUmemoryPool,
    /// Its CUDA streams, by kiln stream index, and their completion words.
    pub(super) streams: Streams,
}

// Safety: a CUDA context and pool are process-wide handles usable from any thread once current.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

/// Describes a driver error in words.
pub(super) fn describe(e: cu::DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name}: {text}")
}

/// A device error from `op`.
pub(super) fn device_error(op: &str, what: &str, e: cu::DriverError) -> Error {
    Error::new(op, ErrorKind::Device, format!("{what} failed: {}", describe(e)))
}

fn start() -> std::result::Result<Vec<Gpu>, Error> {
    libraries::require("gpu", DRIVER)?;
    let mut version = 0;
    // Safety: an out-parameter; the symbol exists in every driver.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(|e| device_error("gpu", "cuDriverGetVersion", e))?;
    if version < OLDEST_DRIVER {
        return Err(Error::new(
            "gpu",
            ErrorKind::Device,
            format!(
                "the NVIDIA driver supports CUDA {}.{}, kiln needs 12.0 or newer; update the driver",
                version / 1000,
                version % 1000 / 10
            ),
        ));
    }
    cu::init().map_err(|e| device_error("gpu", "starting the CUDA driver (cuInit)", e))?;
    let count = cu::device::get_count().map_err(|e| device_error("gpu", "counting GPUs", e))?;
    (0..count)
        .map(|ordinal| {
            let err = |what: &str, e| device_error("gpu", &format!("{what} of GPU {ordinal}"), e);
            let dev = cu::device::get(ordinal).map_err(|e| err("opening", e))?;
            let attr = |a| {
                // Safety: `dev` is a valid device.
                unsafe { cu::device::get_attribute(dev, a) }.map_err(|e| err("reading an attribute", e))
            };
            use sys::CUdevice_attribute_enum as A;
            let capability = (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            );
            let multiprocessors = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
            // Safety: `dev` is a valid device.
            let total_memory = unsafe { cu::device::total_mem(dev) }.map_err(|e| err("reading the memory size", e))?;
            let context = unsafe { cu::primary_ctx::retain(dev) }.map_err(|e| err("creating the context", e))?;
            unsafe { cu::ctx::set_current(context) }.map_err(|e| err("making the context current", e))?;
            let pool = unsafe { cu::device::get_default_mem_pool(dev) }.map_err(|e| err("finding the memory pool", e))?;
            // Freed blocks stay in the pool for reuse until `clear_cache` or a failed allocation.
            let keep_all: u64 = u64::MAX;
            unsafe {
                cu::mem_pool::set_attribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    &keep_all as *const u64 as *mut std::ffi::c_void,
                )
            }
            .map_err(|e| err("configuring the memory pool", e))?;
            let name = cu::device::get_name(dev).unwrap_or_else(|_| "an NVIDIA GPU".into());
            Ok(Gpu {
                ordinal: ordinal as usize,
                name,
                capability,
                multiprocessors,
                total_memory,
                context,
                pool,
                streams: Streams::new(allocate_words()),
            })
        })
        .collect()
}

/// Every GPU, started on first use, or why there are none usable.
pub fn gpus() -> Result<&'static [Gpu]> {
    static GPUS: OnceLock<std::result::Result<Vec<Gpu>, Error>> = OnceLock::new();
    match GPUS.get_or_init(start) {
        Ok(g) => Ok(g),
        Err(e) => Err(e.clone()),
    }
}

/// How many GPUs can be used (0 when there is no driver or device).
pub fn count() -> usize {
    gpus().map(|g| g.len()).unwrap_or(0)
}

/// GPU `index`, made current on this thread, or a clear error naming `op`. A GPU that cannot be
/// used here (no driver, no device, an index past the last) is a `Value` error, as asking mlx
/// for a device it lacks is a ValueError.
pub fn gpu(op: &str, index: usize) -> Result<&'static Gpu> {
    let all = gpus().map_err(|e| Error::new(op, ErrorKind::Value, format!("the GPU cannot be used: {}", e.message)))?;
    let g = all.get(index).ok_or_else(|| {
        Error::new(
            op,
            ErrorKind::Value,
            if all.is_empty() {
                "the CUDA driver is installed but lists no GPU".to_string()
            } else {
                format!("there is no GPU {index}: this machine has {} (indices 0 to {})", all.len(), all.len() - 1)
            },
        )
    })?;
    // Safety: the context lives for the process.
    unsafe { cu::ctx::set_current(g.context) }.map_err(|e| device_error(op, "making the GPU's context current", e))?;
    Ok(g)
}

impl Gpu {
    /// The CUDA stream kiln's stream `index` runs on (created on first use, never blocking the
    /// legacy default stream); while this thread records a CUDA graph for it, the private
    /// stream the recording happens on.
    pub fn stream(&self, op: &str, index: usize) -> Result<sys::CUstream> {
        Ok(super::graph::recording_stream(self.launch_stream(op, index)?))
    }

    /// The CUDA stream kiln's stream `index` runs on, recording or not, for an op that may queue
    /// work on it (see [`Streams::take`]).
    pub fn launch_stream(&self, op: &str, index: usize) -> Result<sys::CUstream> {
        let create = || {
            let s = cu::stream::create(cu::stream::StreamKind::NonBlocking).map_err(|e| device_error(op, "creating a stream", e))?;
            Ok(s as usize)
        };
        Ok(self.streams.take(index, create)? as sys::CUstream)
    }

    /// Waits for the work queued on kiln stream `index`: by its completion word when a
    /// signalling kernel is its last work ([`Streams::wait_armed`]), else by the driver.
    pub fn synchronize_stream(&self, op: &str, index: usize) -> Result<()> {
        let by_word = self.streams.wait_armed(index);
        super::completion::count_wait(by_word);
        if by_word {
            return Ok(());
        }
        let Some(s) = self.streams.peek(index) else { return Ok(()) };
        // Safety: a stream of this context.
        unsafe { cu::stream::synchronize(s as sys::CUstream) }.map_err(|e| device_error(op, "waiting for the GPU", e))
    }

    /// Waits for all work on every stream of this GPU.
    pub fn synchronize(&self, op: &str) -> Result<()> {
        cu::ctx::synchronize().map_err(|e| device_error(op, "waiting for the GPU", e))
    }

    /// Blocks of `block` threads for `work` items: enough to cover them, at most 16 per
    /// multiprocessor (kernels loop over the rest).
    pub fn grid_for(&self, block: u32, work: usize) -> usize {
        work.div_ceil(block as usize).min(self.multiprocessors as usize * 16).max(1)
    }

    /// The GPU's primary context.
    pub(super) fn context(&self) -> sys::CUcontext {
        self.context
    }

    /// The architecture NVRTC builds for, e.g. `sm_90a` (the `a` variant where the device has
    /// architecture-specific features, as Hopper does).
    pub fn arch(&self) -> String {
        let (major, minor) = self.capability;
        let suffix = if major >= 9 { "a" } else { "" };
        format!("sm_{major}{minor}{suffix}")
    }
}
