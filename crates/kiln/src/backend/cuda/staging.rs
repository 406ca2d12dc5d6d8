//! Pinned host buffers for the host side of every copy between host and GPU memory, pooled per
//! GPU. A copy from or to pinned memory is a DMA the GPU runs on its own at the link's speed, and
//! it is asynchronous: an upload returns once its bytes are in staging buffers, so the host array
//! can be dropped at once while the GPU goes on. Copies larger than a buffer go through in
//! chunks, the host's copy of one chunk overlapping the DMA of the previous one. Each buffer's
//! event marks the end of the last DMA that used it, and the buffer is reused only after it.
//! Where pinned memory cannot be had, copies fall back to the driver's own (pageable) path.

use super::context::{device_error, Gpu};
use crate::error::Result;
use cudarc::driver::{result as cu, sys};
use rayon::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Bytes per staging buffer, and per chunk of a large copy.
const CHUNK: usize = 8 << 20;
/// Staging buffers a GPU's pool keeps; buffers made beyond this (by concurrent copies) are
/// freed when given back.
const KEPT: usize = 4;
/// Pieces of a chunk copied on separate threads.
const PIECE: usize = 1 << 20;

/// One pinned buffer of `CHUNK` bytes and the event recorded after its last DMA.
struct Staging {
    host: usize,
    event: usize,
}

/// A GPU's staging buffers: the free ones, oldest use first, and how many exist.
#[derive(Default)]
struct Pool {
    free: VecDeque<Staging>,
    made: usize,
}

/// Each GPU's pool.
static POOLS: Mutex<Option<HashMap<usize, Pool>>> = Mutex::new(None);

fn with_pool<T>(g: &Gpu, f: impl FnOnce(&mut Pool) -> T) -> T {
    f(POOLS.lock().unwrap().get_or_insert_with(HashMap::new).entry(g.ordinal).or_default())
}

impl Staging {
    fn new() -> Option<Staging> {
        // Safety: a fresh allocation and event of the current context; both are freed by `free`.
        unsafe {
            let host = cu::malloc_host(CHUNK, sys::CU_MEMHOSTALLOC_PORTABLE).ok()? as usize;
            match cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) {
                Ok(e) => Some(Staging { host, event: e as usize }),
                Err(_) => {
                    let _ = cu::free_host(host as *mut std::ffi::c_void);
                    None
                }
            }
        }
    }

    fn event(&self) -> sys::CUevent {
        self.event as sys::CUevent
    }

    /// Waits for the buffer's last DMA.
    fn wait(&self, op: &str) -> Result<()> {
        // Safety: an event of this context.
        unsafe { cu::event::synchronize(self.event()) }.map_err(|e| device_error(op, "waiting for a copy", e))
    }

    fn free(self) {
        // Safety: made by `new`; its DMA is finished (callers wait first).
        unsafe {
            let _ = cu::event::destroy(self.event());
            let _ = cu::free_host(self.host as *mut std::ffi::c_void);
        }
    }
}

/// A staging buffer of `g` whose last DMA is done: the oldest free one if its DMA is done, else
/// a new one while the pool has fewer than `KEPT`, else the oldest once it is done. None when
/// pinned memory cannot be had.
fn take(op: &str, g: &Gpu) -> Result<Option<Staging>> {
    enum Pick {
        Ready(Staging),
        Wait(Staging),
        Make,
    }
    let pick = with_pool(g, |pool| {
        // Safety: events of this context.
        let front_done = pool.free.front().is_some_and(|s| unsafe { cu::event::query(s.event()) }.is_ok());
        match pool.free.pop_front() {
            Some(s) if front_done => Pick::Ready(s),
            Some(s) if pool.made >= KEPT => Pick::Wait(s),
            oldest => {
                // The oldest is still in use, or every buffer is another copy's: make one more.
                if let Some(s) = oldest {
                    pool.free.push_front(s);
                }
                pool.made += 1;
                Pick::Make
            }
        }
    });
    match pick {
        Pick::Ready(s) => Ok(Some(s)),
        Pick::Wait(s) => s.wait(op).map(|_| Some(s)),
        Pick::Make => {
            let made = Staging::new();
            if made.is_none() {
                with_pool(g, |pool| pool.made -= 1);
            }
            Ok(made)
        }
    }
}

/// Returns a buffer to `g`'s pool, or frees it (once its DMA is done) when the pool already
/// keeps `KEPT` free ones.
fn give(g: &Gpu, s: Staging) {
    let spare = with_pool(g, |pool| {
        if pool.free.len() < KEPT {
            pool.free.push_back(s);
            None
        } else {
            pool.made -= 1;
            Some(s)
        }
    });
    if let Some(s) = spare {
        let _ = s.wait("free");
        s.free();
    }
}

/// Frees `g`'s staging buffers (part of `clear_cache`); the GPU was synchronized first.
pub(super) fn clear(g: &Gpu) {
    let pool = POOLS.lock().unwrap().as_mut().and_then(|p| p.remove(&g.ordinal)).unwrap_or_default();
    pool.free.into_iter().for_each(Staging::free);
}

/// Copies `src` to `dst` (of equal length), in pieces on several threads when large.
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    if dst.len() < 2 * PIECE {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(PIECE).zip(src.par_chunks(PIECE)).for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// The first `len` bytes of a staging buffer.
///
/// # Safety
/// No DMA may be writing or reading the buffer while the slice is used by the host.
unsafe fn bytes<'a>(s: &Staging, len: usize) -> &'a mut [u8] {
    std::slice::from_raw_parts_mut(s.host as *mut u8, len)
}

/// Queues a copy of `host` to device address `dst` on `stream`; returns once `host` may be
/// reused (its bytes are staged, or copied by the driver).
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn upload(op: &str, g: &Gpu, stream: sys::CUstream, dst: sys::CUdeviceptr, host: &[u8]) -> Result<()> {
    let copy_error = |e| device_error(op, "copying to the GPU", e);
    for (i, piece) in host.chunks(CHUNK).enumerate() {
        let at = dst + (i * CHUNK) as u64;
        let Some(s) = take(op, g)? else {
            // Safety: a copy from pageable memory returns once the driver has staged the bytes.
            unsafe { cu::memcpy_htod_async(at, piece, stream) }.map_err(copy_error)?;
            continue;
        };
        // Safety: `take` returned the buffer with its DMA done; the copy queued below reads it
        // until the event recorded after it, which the next `take` waits for.
        unsafe {
            let staged = bytes(&s, piece.len());
            copy_bytes(staged, piece);
            let queued = cu::memcpy_htod_async(at, staged, stream).and_then(|_| cu::event::record(s.event(), stream));
            give(g, s);
            queued.map_err(copy_error)?;
        }
    }
    Ok(())
}

/// Copies the bytes at device address `src` into `host` after the work queued on `stream`, and
/// waits for them.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn download(op: &str, g: &Gpu, stream: sys::CUstream, src: sys::CUdeviceptr, host: &mut [u8]) -> Result<()> {
    let copy_error = |e| device_error(op, "copying to the host", e);
    // Chunks in flight: their buffers and where their bytes go.
    let mut in_flight: VecDeque<(Staging, usize, usize)> = VecDeque::new();
    let mut result = Ok(());
    for start in (0..host.len()).step_by(CHUNK) {
        let len = CHUNK.min(host.len() - start);
        let s = match take(op, g) {
            Ok(Some(s)) => s,
            Ok(None) => {
                // Safety: the copy is waited for before `host` is read.
                result = unsafe { cu::memcpy_dtoh_async(&mut host[start..start + len], src + start as u64, stream) }
                    .and_then(|_| unsafe { cu::stream::synchronize(stream) })
                    .map_err(copy_error);
                if result.is_err() {
                    break;
                }
                continue;
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        // Safety: the buffer's DMA is done; the host reads it only after the event recorded
        // after this copy.
        let queued = unsafe { cu::memcpy_dtoh_async(bytes(&s, len), src + start as u64, stream).and_then(|_| cu::event::record(s.event(), stream)) };
        in_flight.push_back((s, start, len));
        if let Err(e) = queued {
            result = Err(copy_error(e));
            break;
        }
        if in_flight.len() == 2 {
            let (s, at, len) = in_flight.pop_front().expect("two in flight");
            result = s.wait(op).map(|_| copy_bytes(&mut host[at..at + len], unsafe { bytes(&s, len) }));
            give(g, s);
            if result.is_err() {
                break;
            }
        }
    }
    // Finish (or, after an error, only wait for) the chunks still in flight.
    for (s, at, len) in in_flight {
        let done = s.wait(op);
        if result.is_ok() {
            // Safety: the DMA into the buffer is done.
            result = done.map(|_| copy_bytes(&mut host[at..at + len], unsafe { bytes(&s, len) }));
        }
        give(g, s);
    }
    result
}
