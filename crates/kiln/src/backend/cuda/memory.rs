//! Device memory: stream-ordered allocations from each GPU's memory pool (`cuMemAllocAsync`),
//! never managed memory. A freed block goes back to the pool on the stream that used it last and
//! is reused by later allocations without a driver round trip; the pool keeps freed memory until
//! `clear_cache`, a cache limit, or an allocation that would not fit otherwise.
//!
//! Small blocks (up to `SMALL_BYTES`) skip even the pool's driver calls: a freed small block that
//! no other stream read is kept by kiln, keyed by its GPU, stream and size, and handed to the
//! next allocation of that size on that stream, which stream order makes safe. This takes two
//! driver calls off every small op (what a tiny op's latency is made of).
//!
//! Statistics follow the CPU's: active bytes (held by live arrays), their peak, and cached bytes
//! (what the pool and kiln's small-block lists hold beyond the active ones). A request the GPU cannot satisfy first frees the
//! cache and retries, then fails with an error that names the request and what is in use.

use super::context::{describe, device_error, gpu, Gpu};
use crate::error::{Error, ErrorKind, Result};
use cudarc::driver::{result as cu, sys};
use std::sync::atomic::{AtomicUsize, Ordering};
use crate::fast_hash::FastMap;
use std::sync::Mutex;

/// Bytes held by live device blocks, summed over GPUs.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The most bytes active at once.
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The most bytes arrays may hold on a GPU (0: no limit beyond the device's memory).
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The largest block kiln keeps for reuse itself.
const SMALL_BYTES: usize = 64 << 10;
/// The most bytes kiln's small-block lists keep.
const SMALL_CACHE_BYTES: usize = 64 << 20;

/// Freed small blocks by (GPU, stream, size in bytes).
type SmallLists = FastMap<(usize, usize, usize), Vec<sys::CUdeviceptr>>;

/// Kiln's freed small blocks, and their total size.
static SMALL: Mutex<Option<(SmallLists, usize)>> = Mutex::new(None);

/// A kept small block of `words` bytes for `stream` of GPU `gpu`, if one is free.
fn reuse_small(gpu: usize, stream: sys::CUstream, words: usize) -> Option<sys::CUdeviceptr> {
    let mut small = SMALL.lock().unwrap();
    let (lists, total) = small.as_mut()?;
    let ptr = lists.get_mut(&(gpu, stream as usize, words))?.pop()?;
    *total -= words;
    Some(ptr)
}

/// Keeps a freed small block for reuse on its stream; false when the lists are full.
fn keep_small(gpu: usize, stream: sys::CUstream, words: usize, ptr: sys::CUdeviceptr) -> bool {
    let mut small = SMALL.lock().unwrap();
    let (lists, total) = small.get_or_insert_with(|| (FastMap::default(), 0));
    if *total + words > SMALL_CACHE_BYTES {
        return false;
    }
    *total += words;
    lists.entry((gpu, stream as usize, words)).or_default().push(ptr);
    true
}

/// Frees GPU `g`'s kept small blocks (into its pool, on their streams).
fn release_small(g: &Gpu) {
    let mut small = SMALL.lock().unwrap();
    let Some((lists, total)) = small.as_mut() else { return };
    lists.retain(|&(gpu, stream, words), ptrs| {
        if gpu != g.ordinal {
            return true;
        }
        for p in ptrs.drain(..) {
            *total -= words;
            // Safety: a pool block of this context, used last on `stream`.
            let _ = unsafe { cu::free_async(p, stream as sys::CUstream) };
        }
        false
    });
}

/// Bytes in GPU `g`'s kept small blocks.
fn small_bytes(g: &Gpu) -> usize {
    SMALL.lock().unwrap().as_ref().map_or(0, |(lists, _)| {
        lists.iter().filter(|((gpu, _, _), _)| *gpu == g.ordinal).map(|((_, _, words), ptrs)| words * ptrs.len()).sum()
    })
}

/// A block of one GPU's memory holding an array's bytes.
pub struct DeviceBlock {
    /// The GPU it lives on.
    pub gpu: usize,
    /// Its device address.
    pub ptr: sys::CUdeviceptr,
    /// Its size in bytes.
    pub bytes: usize,
    /// The stream it was written on: readers on other streams wait for it, and it is freed there.
    pub stream: sys::CUstream,
    /// Other streams that read it: the free waits for them.
    readers: Mutex<Vec<usize>>,
    /// For memory another library allocated (see [`DeviceBlock::foreign`]): what releases it.
    owner: Option<Box<dyn Send + Sync>>,
}

// Safety: a device address and stream handle are plain values usable from any thread.
unsafe impl Send for DeviceBlock {}
unsafe impl Sync for DeviceBlock {}

impl DeviceBlock {
    /// Allocates `bytes` on `gpu`, ordered on `stream`.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn new(op: &str, g: &Gpu, stream: sys::CUstream, bytes: usize) -> Result<DeviceBlock> {
        if let Some(launch) = super::graph::capture_owner(g.ordinal) {
            return DeviceBlock::plain(op, g, launch, bytes);
        }
        let size = bytes.max(1);
        let limit = LIMIT.load(Ordering::Relaxed);
        if limit != 0 && ACTIVE.load(Ordering::Relaxed) + size > limit {
            return Err(out_of_memory(op, g, size, "the memory limit set by set_memory_limit"));
        }
        // Whole 8-byte words: a kernel that updates a narrow element through the aligned word
        // holding it (a combining scatter's compare-and-swap) stays inside the block.
        let words = size.next_multiple_of(8);
        let kept = if words <= SMALL_BYTES { reuse_small(g.ordinal, stream, words) } else { None };
        // Safety: the context is current (gpu() made it so) and the stream belongs to it.
        let ptr = match kept.map_or_else(|| unsafe { cu::malloc_async(stream, words) }, Ok) {
            Ok(p) => p,
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                clear_gpu_cache(g)?;
                unsafe { cu::malloc_async(stream, words) }
                    .map_err(|e| out_of_memory(op, g, size, &format!("the device ({})", describe(e))))?
            }
            Err(e) => return Err(device_error(op, &format!("allocating {size} bytes on GPU {}", g.ordinal), e)),
        };
        let now = ACTIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
        Ok(DeviceBlock { gpu: g.ordinal, ptr, bytes: size, stream, readers: Mutex::new(Vec::new()), owner: None })
    }

    /// `bytes` of GPU `g`'s memory at `ptr` that another library allocated and `owner` releases
    /// when dropped (after kiln's reads of it are done). Not counted in kiln's memory statistics.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn foreign(g: &Gpu, ptr: sys::CUdeviceptr, bytes: usize, stream: sys::CUstream, owner: Box<dyn Send + Sync>) -> DeviceBlock {
        DeviceBlock { gpu: g.ordinal, ptr, bytes, stream, readers: Mutex::new(Vec::new()), owner: Some(owner) }
    }

    /// A plain allocation (`cuMemAlloc`) of `bytes` on `g`, outside the pool, for a CUDA graph
    /// (a pool allocation made while capturing would become a graph allocation node). Freed,
    /// after the work queued on `stream` is done, when dropped; not counted in the statistics.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn plain(op: &str, g: &Gpu, stream: sys::CUstream, bytes: usize) -> Result<DeviceBlock> {
        /// Frees a plain allocation when dropped.
        struct Plain(sys::CUdeviceptr);
        impl Drop for Plain {
            fn drop(&mut self) {
                // Safety: allocated by malloc_sync in the current context; its users are done
                // (the block's drop waited for its streams).
                let _ = unsafe { cu::free_sync(self.0) };
            }
        }
        // Safety: the context is made current first (a free on another GPU may have switched it).
        super::context::gpu(op, g.ordinal)?;
        let ptr = unsafe { cu::malloc_sync(bytes.max(1).next_multiple_of(8)) }
            .map_err(|e| out_of_memory(op, g, bytes, &format!("the device ({})", describe(e))))?;
        Ok(DeviceBlock::foreign(g, ptr, bytes.max(1), stream, Box::new(Plain(ptr))))
    }

    /// Whether the block is outside kiln's memory statistics (a plain allocation for a CUDA
    /// graph, or another library's memory).
    pub(super) fn uncounted(&self) -> bool {
        self.owner.is_some()
    }

    /// Makes `reader` wait for the writes queued on this block's stream before reading it, and
    /// remembers it so the free waits for the reads. (Nothing to order while a graph is being
    /// recorded: the recorded work runs later, on the stream the graph is launched on.)
    pub fn read_on(&self, op: &str, reader: sys::CUstream) -> Result<()> {
        if reader == self.stream || super::graph::capturing() {
            return Ok(());
        }
        order(op, self.stream, reader)?;
        let mut readers = self.readers.lock().unwrap();
        if !readers.contains(&(reader as usize)) {
            readers.push(reader as usize);
        }
        Ok(())
    }
}

/// Makes `later` wait for everything queued on `earlier` so far.
pub(super) fn order(op: &str, earlier: sys::CUstream, later: sys::CUstream) -> Result<()> {
    let event = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| device_error(op, "creating an event", e))?;
    // Safety: both streams and the event belong to the current context; the event is destroyed
    // after the wait is queued (the driver keeps it until the wait completes).
    unsafe {
        cu::event::record(event, earlier).map_err(|e| device_error(op, "recording an event", e))?;
        cu::stream::wait_event(later, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .map_err(|e| device_error(op, "ordering two streams", e))?;
        cu::event::destroy(event).map_err(|e| device_error(op, "destroying an event", e))?;
    }
    Ok(())
}

impl DeviceBlock {
    /// Moves the block out of `self`, leaving an empty block that frees nothing.
    pub(super) fn take(&mut self) -> DeviceBlock {
        let readers = std::mem::take(&mut *self.readers.lock().unwrap());
        let block = DeviceBlock { readers: Mutex::new(readers), owner: self.owner.take(), ..*self };
        self.ptr = 0;
        self.bytes = 0;
        block
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        // A graph being recorded may address this block: it keeps it until the graph goes.
        if super::graph::keep(self) {
            return;
        }
        if let Some(owner) = self.owner.take() {
            // Another library's memory: its owner may reuse it at once, so kiln's reads finish first.
            if gpu("free", self.gpu).is_ok() {
                for &s in self.readers.lock().unwrap().iter().chain([&(self.stream as usize)]) {
                    // Safety: a stream of this context; a failure means the driver is already broken.
                    let _ = unsafe { cu::stream::synchronize(s as sys::CUstream) };
                }
            }
            drop(owner);
            return;
        }
        ACTIVE.fetch_sub(self.bytes, Ordering::Relaxed);
        let words = self.bytes.next_multiple_of(8);
        let readers = self.readers.lock().unwrap();
        if words <= SMALL_BYTES && readers.is_empty() && keep_small(self.gpu, self.stream, words, self.ptr) {
            return;
        }
        if gpu("free", self.gpu).is_err() {
            return;
        }
        for &r in readers.iter() {
            // A failure here leaves the free unordered only if the driver is already broken.
            let _ = order("free", r as sys::CUstream, self.stream);
        }
        // Safety: allocated by malloc_async in this context; no kiln view refers to it any more.
        let _ = unsafe { cu::free_async(self.ptr, self.stream) };
    }
}

fn pool_attribute(g: &Gpu, attr: sys::CUmemPool_attribute) -> usize {
    let mut v: u64 = 0;
    // Safety: the attribute is a u64 counter of the pool.
    let _ = unsafe { cu::mem_pool::get_attribute(g.pool, attr, &mut v as *mut u64 as *mut std::ffi::c_void) };
    v as usize
}

fn out_of_memory(op: &str, g: &Gpu, size: usize, by: &str) -> Error {
    let (free, total) = cu::mem_get_info().unwrap_or((0, g.total_memory));
    Error::new(
        op,
        ErrorKind::Device,
        format!(
            "out of GPU memory: {op} asked for {size} bytes on GPU {} ({}), refused by {by}; arrays \
             hold {} bytes, the cache {} bytes, the device has {free} of {total} bytes free. Free \
             arrays you no longer need, evaluate in smaller pieces, or raise the limit",
            g.ordinal,
            g.name,
            ACTIVE.load(Ordering::Relaxed),
            cached_bytes(g),
        ),
    )
}

fn cached_bytes(g: &Gpu) -> usize {
    let reserved = pool_attribute(g, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    let used = pool_attribute(g, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    reserved.saturating_sub(used) + small_bytes(g)
}

fn clear_gpu_cache(g: &Gpu) -> Result<()> {
    g.synchronize("clear_cache")?;
    super::staging::clear(g);
    release_small(g);
    g.synchronize("clear_cache")?;
    // Safety: the pool belongs to the current context; trimming only returns unused memory.
    unsafe { cu::mem_pool::trim_to(g.pool, 0) }.map_err(|e| device_error("clear_cache", "trimming the memory pool", e))
}

/// The GPUs already started, without starting the driver for a statistics call.
fn started_gpus() -> Vec<&'static Gpu> {
    if ACTIVE.load(Ordering::Relaxed) == 0 && PEAK.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let n = super::context::gpus().map(|g| g.len()).unwrap_or(0);
    (0..n).filter_map(|i| gpu("memory", i).ok()).collect()
}

/// Bytes device arrays hold.
pub fn active_memory() -> usize {
    ACTIVE.load(Ordering::Relaxed)
}

/// The most bytes device arrays held at once.
pub fn peak_memory() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts the peak over from the current active bytes.
pub fn reset_peak_memory() {
    PEAK.store(ACTIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Bytes the GPUs' pools and kiln's small-block lists keep for reuse, and the buffers CUDA graphs
/// of compiled plans hold between their launches.
pub fn cache_memory() -> usize {
    started_gpus().into_iter().map(cached_bytes).sum::<usize>() + super::graph::held_bytes()
}

/// Returns every GPU's cached memory to the device, releasing the CUDA graphs of compiled plans
/// too (each plan records its graph again when called).
pub fn clear_cache() {
    super::graph::release_all();
    for g in started_gpus() {
        let _ = clear_gpu_cache(g);
    }
}

/// Sets how many freed bytes each GPU's pool keeps (the release threshold).
pub fn set_cache_limit(bytes: usize) {
    for g in started_gpus() {
        let v = bytes as u64;
        // Safety: the attribute is a u64 of the pool.
        let _ = unsafe {
            cu::mem_pool::set_attribute(
                g.pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &v as *const u64 as *mut std::ffi::c_void,
            )
        };
    }
}

/// Sets the most bytes device arrays may hold (0 for no limit); returns the previous limit.
pub fn set_memory_limit(bytes: usize) -> usize {
    LIMIT.swap(bytes, Ordering::Relaxed)
}

/// The limit [`set_memory_limit`] set (0: none); the host's allocations honour it too.
pub fn memory_limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}
