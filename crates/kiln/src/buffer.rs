//! Memory for array data: 64-byte aligned host allocations recycled through a size-class cache,
//! so that repeated large temporaries reuse pages that are already mapped instead of paying page
//! faults on every op (a peer loses several times on CPU copies without one).

use crate::shape::Strides;
use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

const ALIGN: usize = 64;

/// A block of device memory owned by one or more array views.
pub struct Storage {
    ptr: NonNull<u8>,
    class: usize,
}

// Safety: the block is plain memory; access is coordinated by the eval engine, which only writes
// to storages it has just allocated or that it owns uniquely.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

impl Storage {
    /// Allocates at least `bytes` bytes, from the cache when a block of the same size class is free.
    pub fn new(bytes: usize) -> Arc<Storage> {
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
        Arc::new(Storage { ptr, class })
    }

    /// The start of the block.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The usable size of the block in bytes.
    pub fn capacity(&self) -> usize {
        self.class
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        let mut cache = CACHE.lock().unwrap();
        cache.active_bytes -= self.class;
        if cache.cached_bytes + self.class <= cache.limit {
            cache.cached_bytes += self.class;
            cache.free.entry(self.class).or_default().push(SendPtr(self.ptr));
        } else {
            drop(cache);
            // Safety: allocated in `Storage::new` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.class, ALIGN)) };
        }
    }
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

/// Bytes currently held by live arrays.
pub fn active_memory() -> usize {
    CACHE.lock().unwrap().active_bytes
}

/// The most bytes held by live arrays at once since start (or the last [`reset_peak_memory`]).
pub fn peak_memory() -> usize {
    CACHE.lock().unwrap().peak_bytes
}

/// Resets the peak counter to the current active bytes.
pub fn reset_peak_memory() {
    let mut c = CACHE.lock().unwrap();
    c.peak_bytes = c.active_bytes;
}

/// Bytes kept in the cache for reuse.
pub fn cache_memory() -> usize {
    CACHE.lock().unwrap().cached_bytes
}

/// Sets the most bytes the cache keeps (default 8 GiB) and returns the previous limit.
pub fn set_cache_limit(bytes: usize) -> usize {
    let prev = std::mem::replace(&mut CACHE.lock().unwrap().limit, bytes);
    if bytes < cache_memory() {
        clear_cache();
    }
    prev
}

/// Returns every cached block to the system.
pub fn clear_cache() {
    let mut c = CACHE.lock().unwrap();
    for (class, blocks) in std::mem::take(&mut c.free) {
        for p in blocks {
            // Safety: allocated in `Storage::new` with this layout.
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

    /// The address of element 0 of a view whose elements are `elem_size` bytes wide.
    pub fn start_address(&self, elem_size: usize) -> usize {
        (self.storage.ptr() as isize + self.offset * elem_size as isize) as usize
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
