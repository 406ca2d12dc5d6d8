//! Non-temporal (streaming) stores for outputs much larger than the caches.
//!
//! An ordinary store to a line that is not cached first reads the line from memory (to own it),
//! so writing a large output moves its bytes twice. Streaming stores write whole lines straight
//! to memory without that read: a kernel that reads one array and writes one then moves two
//! thirds of the bytes. They also keep the output from evicting what the kernel still reads.
//! Small outputs are stored normally: the next op will likely read them from the cache.

/// Outputs of at least this many bytes are written with streaming stores (about the size of
/// the last-level cache of a desktop or one server slice; beyond it the data is in memory anyway
/// by the time anyone reads it).
pub const STREAM_ABOVE: usize = 16 << 20;

/// Copies `bytes` bytes from `src` to `dst` with streaming stores where the destination is
/// 16-byte aligned and ordinary stores for the unaligned head and tail. Streaming stores are
/// weakly ordered: the thread must call [`fence`] before other threads may read the data (once per
/// task, not per copy: a fence waits for every pending line to reach memory).
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `bytes` bytes; they must not overlap.
pub unsafe fn stream_copy(src: *const u8, dst: *mut u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = (dst.align_offset(16)).min(bytes);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let body = (bytes - head) / 16;
        for i in 0..body {
            let v = _mm_loadu_si128(src.add(head + 16 * i) as *const __m128i);
            _mm_stream_si128(dst.add(head + 16 * i) as *mut __m128i, v);
        }
        let done = head + 16 * body;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), bytes - done);
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, bytes);
}

/// Orders this thread's earlier streaming stores before its later stores, so that a thread that
/// sees this task as finished also sees its data.
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // Safety: a store fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copy_equals_the_source_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for dst_off in 0..17 {
            for src_off in 0..3 {
                for len in [0usize, 1, 15, 16, 17, 31, 64, 200, 900] {
                    let mut dst = vec![0xAAu8; 1000];
                    unsafe { stream_copy(src.as_ptr().add(src_off), dst.as_mut_ptr().add(dst_off), len) };
                    fence();
                    assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len], "{dst_off} {src_off} {len}");
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xAA) && dst[dst_off + len..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }
}
