//! Splitting element ranges across the rayon pool. Small problems stay on the calling thread:
//! waking workers costs more than it saves below about a hundred thousand elements.

use rayon::prelude::*;

/// Elements below which work runs on the calling thread.
pub const SERIAL_BELOW: usize = 1 << 17;

/// Calls `f(start, len)` over consecutive chunks of `0..total` of at most `chunk` elements, in
/// parallel when `total` is large.
pub fn for_chunks(total: usize, chunk: usize, f: impl Fn(usize, usize) + Sync) {
    if total == 0 {
        return;
    }
    let chunk = chunk.max(1);
    if total < SERIAL_BELOW {
        let mut start = 0;
        while start < total {
            let len = chunk.min(total - start);
            f(start, len);
            start += len;
        }
        return;
    }
    let n = total.div_ceil(chunk);
    (0..n).into_par_iter().for_each(|i| {
        let start = i * chunk;
        f(start, chunk.min(total - start));
    });
}
