//! Memory for array data. Host memory: 64-byte aligned allocations recycled through a size-class cache,
//! so that repeated large temporaries reuse pages that are already mapped instead of paying page
//! faults on every op (a peer loses several times on CPU copies without one).

use crate::backend::cuda::DeviceBlock;
use crate::error::Result;
use crate::shape::Strides;
use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const ALIGN: usize = 64;

/// The bytes of one or more array views, wherever they live: in host memory, in a GPU's memory,
/// or both. An array has no device (mlx's model): an op runs on its stream's device, and the
/// storage copies its bytes there the first time they are needed, once; the copy stays with the
/// storage, and every copy is counted ([`transfers`]). Bytes are written only by the op that
/// creates the storage (or by a kernel given the storage for donation while it is resident in
/// one place only), so the copies never disagree.
pub struct Storage {
    bytes: usize,
    host: OnceLock<HostBlock>,
    device: OnceLock<DeviceBlock>,
    /// Copies on GPUs other than `device`'s, made when an op on another GPU reads the bytes.
    other_gpus: Mutex<Vec<DeviceBlock>>,
}

/// A 64-byte aligned host allocation from the size-class cache, or host memory another library
/// owns (`owner` set): kiln only reads that, and releases it by dropping the owner.
struct HostBlock {
    ptr: NonNull<u8>,
    class: usize,
    owner: Option<Box<dyn Send + Sync>>,
}

// Safety: the blocks are plain memory; access is coordinated by the eval engine, which only writes
// to storages it has just allocated or that it owns uniquely.
unsafe impl Send for HostBlock {}
unsafe impl Sync for HostBlock {}

/// Serialises filling a storage's second copy, so two readers never copy the same bytes twice.
static FILL: Mutex<()> = Mutex::new(());

impl Storage {
    /// Allocates at least `bytes` bytes of host memory, from the cache when a block of the same
    /// size class is free.
    pub fn new(bytes: usize) -> Arc<Storage> {
        let host = OnceLock::new();
        let _ = host.set(HostBlock::new(bytes));
        Arc::new(Storage { bytes, host, device: OnceLock::new(), other_gpus: Mutex::new(Vec::new()) })
    }

    /// A storage over `bytes` bytes of host memory at `ptr` that another library owns: kiln never
    /// writes into it (no kernel gets it for donation) and drops `owner`, releasing it, once no
    /// array uses it.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `bytes` bytes until `owner` is dropped, and nothing may
    /// write to that memory meanwhile.
    pub unsafe fn over_host_memory(ptr: NonNull<u8>, bytes: usize, owner: Box<dyn Send + Sync>) -> Arc<Storage> {
        let host = OnceLock::new();
        let _ = host.set(HostBlock { ptr, class: bytes, owner: Some(owner) });
        Arc::new(Storage { bytes, host, device: OnceLock::new(), other_gpus: Mutex::new(Vec::new()) })
    }

    /// A storage whose bytes a GPU kernel writes into `block`.
    pub fn on_device(block: DeviceBlock) -> Arc<Storage> {
        let device = OnceLock::new();
        let bytes = block.bytes;
        let _ = device.set(block);
        Arc::new(Storage { bytes, host: OnceLock::new(), device, other_gpus: Mutex::new(Vec::new()) })
    }

    /// The start of the host copy. Host code reaches storage only through [`Storage::to_host`]
    /// (eval does it for every op that runs on the CPU, and the host reads of `Array` for theirs),
    /// so the copy exists.
    pub fn ptr(&self) -> *mut u8 {
        self.host.get().expect("host code reads a storage only after Storage::to_host").ptr.as_ptr()
    }

    /// The size of the bytes in use (the array data), wherever they live.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The first GPU copy of the bytes, if there is one.
    pub fn device_block(&self) -> Option<&DeviceBlock> {
        self.device.get()
    }

    /// The usable size of the block in bytes.
    pub fn capacity(&self) -> usize {
        self.host.get().map_or(self.bytes, |h| h.class)
    }

    /// Makes the bytes readable on the host: copies them from the GPU (waiting for the kernels
    /// that write them) the first time, and keeps the copy.
    pub fn to_host(&self, op: &str) -> Result<()> {
        if self.host.get().is_some() {
            return Ok(());
        }
        let _fill = FILL.lock().unwrap_or_else(|e| e.into_inner());
        if self.host.get().is_some() {
            return Ok(());
        }
        let device = self.device.get().expect("a storage lives on the host, a GPU, or both");
        let host = HostBlock::new(self.bytes);
        // Safety: the block was just allocated with at least `self.bytes` bytes, and no one else
        // sees it until it is stored below.
        let bytes = unsafe { std::slice::from_raw_parts_mut(host.ptr.as_ptr(), self.bytes) };
        crate::backend::cuda::download(op, device, bytes)?;
        count(&TO_HOST, device.bytes);
        let _ = self.host.set(host);
        Ok(())
    }

    /// The address of the bytes on GPU `gpu` for a kernel queued on `stream`: copies them there
    /// the first time (and keeps the copy), and orders the kernel after the ones that write them.
    pub fn on_gpu(&self, op: &str, gpu: usize, stream: crate::backend::cuda::CuStream) -> Result<u64> {
        if self.device.get().is_none() {
            let _fill = FILL.lock().unwrap_or_else(|e| e.into_inner());
            if self.device.get().is_none() {
                let host = self.host.get().expect("a storage lives on the host, a GPU, or both");
                // Safety: the host copy holds `self.bytes` bytes, written only before it was shared.
                let bytes = unsafe { std::slice::from_raw_parts(host.ptr.as_ptr(), self.bytes) };
                let block = crate::backend::cuda::upload(op, gpu, stream, bytes)?;
                count(&TO_DEVICE, self.bytes);
                let _ = self.device.set(block);
            }
        }
        let device = self.device.get().expect("filled above");
        if device.gpu != gpu {
            return self.on_other_gpu(op, device, gpu, stream);
        }
        device.read_on(op, stream)?;
        Ok(device.ptr)
    }

    /// [`Storage::on_gpu`] for a GPU other than the one holding the first device copy: a copy
    /// from that GPU the first time (counted as a move to a device), kept with the storage.
    fn on_other_gpu(&self, op: &str, first: &DeviceBlock, gpu: usize, stream: crate::backend::cuda::CuStream) -> Result<u64> {
        let mut others = self.other_gpus.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = others.iter().find(|b| b.gpu == gpu) {
            b.read_on(op, stream)?;
            return Ok(b.ptr);
        }
        let block = crate::backend::cuda::copy_between_gpus(op, first, gpu, stream)?;
        count(&TO_DEVICE, self.bytes);
        let ptr = block.ptr;
        others.push(block);
        Ok(ptr)
    }

    /// Whether the bytes are in kiln's own host memory only (a CPU kernel may overwrite them in
    /// place): not on a GPU too, and not memory another library lent.
    pub fn host_only(&self) -> bool {
        self.device.get().is_none() && self.host.get().is_none_or(|h| h.owner.is_none())
    }

    /// The GPU holding a copy of the bytes, if one does.
    pub fn gpu(&self) -> Option<usize> {
        self.device.get().map(|d| d.gpu)
    }

    /// Whether the bytes have a copy on the host.
    pub fn on_host(&self) -> bool {
        self.host.get().is_some()
    }
}

impl HostBlock {
    fn new(bytes: usize) -> HostBlock {
        let class = size_class(bytes);
        let mut cache = CACHE.lock().unwrap();
        let ptr = match cache.free.get_mut(&class).and_then(|v| v.pop()) {
            Some(p) => {
                cache.cached_bytes -= class;
                p.0
            }
            None => {
                drop(cache);
                let layout = Layout::from_size_align(class, ALIGN).expect("allocation size overflows");
                // Safety: class is never zero.
                let p = unsafe { alloc(layout) };
                let p = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
                advise_huge_pages(p.as_ptr(), class);
                cache = CACHE.lock().unwrap();
                p
            }
        };
        cache.active_bytes += class;
        cache.peak_bytes = cache.peak_bytes.max(cache.active_bytes);
        HostBlock { ptr, class, owner: None }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if self.owner.is_some() {
            return; // lent memory: dropping the owner releases it
        }
        let mut cache = CACHE.lock().unwrap();
        cache.active_bytes -= self.class;
        if cache.cached_bytes + self.class <= cache.limit {
            cache.cached_bytes += self.class;
            cache.free.entry(self.class).or_default().push(SendPtr(self.ptr));
        } else {
            drop(cache);
            // Safety: allocated in `HostBlock::new` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.class, ALIGN)) };
        }
    }
}

/// Copies between host and GPU memory so far: counts and bytes each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Copies from the host to a GPU.
    pub to_device: usize,
    /// Bytes copied from the host to a GPU.
    pub to_device_bytes: usize,
    /// Copies from a GPU to the host.
    pub to_host: usize,
    /// Bytes copied from a GPU to the host.
    pub to_host_bytes: usize,
}

static TO_DEVICE: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static TO_HOST: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

fn count(counter: &[AtomicUsize; 2], bytes: usize) {
    counter[0].fetch_add(1, Ordering::Relaxed);
    counter[1].fetch_add(bytes, Ordering::Relaxed);
}

/// The copies between host and GPU memory since the process started: each array's bytes move at
/// most once each way, so a count that grows with every call shows data shuttling back and forth.
pub fn transfers() -> Transfers {
    let get = |c: &[AtomicUsize; 2]| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed));
    let (to_device, to_device_bytes) = get(&TO_DEVICE);
    let (to_host, to_host_bytes) = get(&TO_HOST);
    Transfers { to_device, to_device_bytes, to_host, to_host_bytes }
}

/// Blocks of at least this many bytes ask for transparent huge pages.
const HUGE_PAGES_ABOVE: usize = 4 << 20;

/// Asks Linux to back a large block with 2 MiB pages where it can (systems whose transparent huge
/// pages are set to `madvise` only do it when asked): streaming through a large array then takes
/// one TLB entry per 2 MiB instead of per 4 KiB, and first touches fault 512 times less often.
/// Only a hint: where it is refused or not Linux, nothing changes.
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGES_ABOVE {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        const PAGE: usize = 4096;
        // madvise takes page-aligned ranges: advise the whole pages inside the block.
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + bytes) / PAGE * PAGE;
        if end > start {
            // Safety: the range lies inside a block this process just allocated; the advice only
            // changes how it is backed, never its contents.
            unsafe { madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE) };
        }
    }
}

/// Rounds a request up to its size class: 64 bytes below 4 KiB, then steps of an eighth of the
/// power of two below, so a class wastes at most 12.5% and nearby sizes share blocks.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1);
    if b <= 4096 {
        return b.div_ceil(ALIGN) * ALIGN;
    }
    let step = (1usize << (usize::BITS - 1 - b.leading_zeros())) / 8;
    b.div_ceil(step) * step
}

struct SendPtr(NonNull<u8>);
unsafe impl Send for SendPtr {}

struct Cache {
    free: BTreeMap<usize, Vec<SendPtr>>,
    cached_bytes: usize,
    active_bytes: usize,
    peak_bytes: usize,
    limit: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    free: BTreeMap::new(),
    cached_bytes: 0,
    active_bytes: 0,
    peak_bytes: 0,
    limit: 8 << 30,
});

use crate::backend::cuda::memory as gpu_memory;

/// Bytes currently held by live arrays, in host and GPU memory together.
pub fn active_memory() -> usize {
    CACHE.lock().unwrap().active_bytes + gpu_memory::active_memory()
}

/// The most bytes held by live arrays at once since start (or the last [`reset_peak_memory`]):
/// the host's peak plus the GPUs' peak.
pub fn peak_memory() -> usize {
    CACHE.lock().unwrap().peak_bytes + gpu_memory::peak_memory()
}

/// Resets the peak counters to the current active bytes.
pub fn reset_peak_memory() {
    let mut c = CACHE.lock().unwrap();
    c.peak_bytes = c.active_bytes;
    gpu_memory::reset_peak_memory();
}

/// Bytes kept for reuse: the host cache, the GPUs' pools, and the buffers CUDA graphs of
/// compiled plans hold between launches.
pub fn cache_memory() -> usize {
    CACHE.lock().unwrap().cached_bytes + gpu_memory::cache_memory()
}

/// Sets the most bytes the host cache keeps (default 8 GiB) and each GPU pool keeps; returns the
/// previous host limit.
pub fn set_cache_limit(bytes: usize) -> usize {
    let prev = std::mem::replace(&mut CACHE.lock().unwrap().limit, bytes);
    if bytes < CACHE.lock().unwrap().cached_bytes {
        clear_host_cache();
    }
    gpu_memory::set_cache_limit(bytes);
    prev
}

/// Sets the most bytes arrays may hold in host memory and on each GPU (0: the memory there is the
/// limit); returns the previous limit. A larger request first frees the cache, then fails with a
/// clear error.
pub fn set_memory_limit(bytes: usize) -> usize {
    gpu_memory::set_memory_limit(bytes)
}

/// Bytes of memory this machine has (RAM and swap, from `/proc/meminfo`), read once; None where
/// that is unknown.
fn machine_memory() -> Option<usize> {
    static TOTAL: OnceLock<Option<usize>> = OnceLock::new();
    *TOTAL.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib = |key: &str| -> Option<usize> {
            let line = info.lines().find(|l| l.starts_with(key))?;
            line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
        };
        Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
    })
}

/// Refuses, with an error naming `op`, the shape and the dtype, a host array that cannot be
/// allocated: more bytes than the machine has (the allocation would abort the process, or the
/// kernel would kill it once the memory is touched), or past the limit of [`set_memory_limit`]
/// (after the cache is freed).
pub(crate) fn check_host_allocation(op: &str, shape: &[usize], dtype: crate::dtype::Dtype) -> Result<()> {
    use crate::error::{Error, ErrorKind};
    let Some(bytes) = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d)) else {
        return Err(Error::new(op, ErrorKind::Value, format!("an array of shape {} and {dtype} has more bytes than memory can address", crate::shape::fmt_shape(shape))));
    };
    let refuse = |by: String| {
        Error::new(
            op,
            ErrorKind::Device,
            format!(
                "out of host memory: {op} needs {bytes} bytes for an array of shape {} and {dtype}, refused by {by}. \
                 Free arrays you no longer need, evaluate in smaller pieces, or use a smaller dtype",
                crate::shape::fmt_shape(shape)
            ),
        )
    };
    if let Some(total) = machine_memory().filter(|&t| bytes > t) {
        return Err(refuse(format!("the machine's size ({total} bytes of RAM and swap)")));
    }
    let limit = gpu_memory::memory_limit();
    if limit != 0 && CACHE.lock().unwrap().active_bytes + bytes > limit {
        clear_host_cache();
        let active = CACHE.lock().unwrap().active_bytes;
        if active + bytes > limit {
            return Err(refuse(format!("the memory limit set by set_memory_limit ({limit} bytes; arrays hold {active})")));
        }
    }
    Ok(())
}

/// Returns every cached block to the system (host and GPUs), releasing the CUDA graphs of
/// compiled plans too (each plan records its graph again at its next calls).
pub fn clear_cache() {
    clear_host_cache();
    gpu_memory::clear_cache();
}

fn clear_host_cache() {
    let mut c = CACHE.lock().unwrap();
    for (class, blocks) in std::mem::take(&mut c.free) {
        for p in blocks {
            // Safety: allocated in `HostBlock::new` with this layout.
            unsafe { dealloc(p.0.as_ptr(), Layout::from_size_align_unchecked(class, ALIGN)) };
        }
    }
    c.cached_bytes = 0;
}

/// The data of an evaluated array: a storage block, the offset of element 0 (in elements), and
/// per-axis strides (in elements). Views share storage with different offsets and strides.
#[derive(Clone)]
pub struct Buffer {
    /// The memory block.
    pub storage: Arc<Storage>,
    /// Offset of the first element, in elements.
    pub offset: isize,
    /// Stride of each axis, in elements.
    pub strides: Strides,
}

impl Buffer {
    /// Pointer to element 0 as `T` (the view's offset counts elements of `T`, so `T` must be the
    /// array's element type; use [`Buffer::start_address`] where the type is not known).
    pub fn ptr<T>(&self) -> *mut T {
        // Safety: offset stays inside the block for every valid view.
        unsafe { (self.storage.ptr() as *mut T).offset(self.offset) }
    }

    /// The device address of the view's first element (of `elem_size` bytes) on GPU `gpu`, for
    /// a kernel queued on `stream`: the bytes are copied there first if they are not yet.
    pub fn gpu_start(&self, op: &str, gpu: usize, stream: crate::backend::cuda::CuStream, elem_size: usize) -> Result<u64> {
        Ok(self.storage.on_gpu(op, gpu, stream)?.wrapping_add_signed(self.offset as i64 * elem_size as i64))
    }

    /// The address of element 0 of a view whose elements are `elem_size` bytes wide.
    pub fn start_address(&self, elem_size: usize) -> usize {
        (self.storage.ptr() as isize + self.offset * elem_size as isize) as usize
    }

    /// The bytes of element 0 of a view with `elem_size`-byte elements (at most 8), in the low
    /// bytes of a u64: a scalar's value as constants and kernel parameters carry it. The host
    /// copy must exist ([`Storage::to_host`]).
    pub fn first_element_bits(&self, elem_size: usize) -> u64 {
        assert!(elem_size <= 8, "an element of {elem_size} bytes does not fit in a u64");
        let mut bits = 0u64;
        // Safety: an evaluated view holds an element of `elem_size` bytes at its start.
        unsafe {
            std::ptr::copy_nonoverlapping(self.start_address(elem_size) as *const u8, &mut bits as *mut u64 as *mut u8, elem_size)
        };
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_bound_waste() {
        for b in [1usize, 63, 64, 65, 4095, 4097, 1 << 20, (1 << 20) + 1, 123_456_789] {
            let c = size_class(b);
            assert!(c >= b && c as f64 <= b as f64 * 1.125 + 64.0, "{b} -> {c}");
        }
    }

    #[test]
    fn freed_blocks_are_reused() {
        let s = Storage::new((1 << 22) + 12_345);
        let p = s.ptr();
        drop(s);
        let s2 = Storage::new((1 << 22) + 12_345);
        assert_eq!(s2.ptr(), p);
    }
}
