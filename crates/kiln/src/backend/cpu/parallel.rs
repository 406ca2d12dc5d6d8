//! Splitting element ranges across the rayon pool. Small problems stay on the calling thread:
//! waking workers costs more than it saves below about a hundred thousand elements.

use rayon::prelude::*;

/// Elements below which work runs on the calling thread.
pub const SERIAL_BELOW: usize = 1 << 17;

/// Calls `f(start, len)` over consecutive chunks of `0..total` of at most `chunk` items, in
/// parallel when there is more than one chunk. Callers size `chunk` so that one chunk is about
/// [`SERIAL_BELOW`] elements of work (for rows of a reduction: that many elements divided by the
/// row length), so small problems stay on the calling thread and large ones use every core
/// whether they are many short items or a few long ones.
pub fn for_chunks(total: usize, chunk: usize, f: impl Fn(usize, usize) + Sync) {
    if total == 0 {
        return;
    }
    let chunk = chunk.max(1);
    let n = total.div_ceil(chunk);
    if n == 1 {
        return f(0, total);
    }
    (0..n).into_par_iter().for_each(|i| {
        let start = i * chunk;
        f(start, chunk.min(total - start));
    });
}

/// Elements per task of [`for_runs`] when it is not blocked.
const CHUNK: usize = 1 << 16;

/// Side of the square blocks [`for_runs`] walks when reads are transposed: 64 rows of 64 elements
/// touch 64 pages and 16 KiB of float32 cache lines, which stay in L1 and the TLB.
pub const BLOCK: usize = 64;

/// Calls `f(state, start, len)` over runs covering the row-major positions `0..rows * width` of a
/// `(rows, width)` output, in parallel when large, with `init()` making one `state` (scratch
/// buffers) per task.
///
/// Normally runs are long consecutive chunks. With `blocked`, each task takes a band of [`BLOCK`]
/// rows and walks it block by block: the runs of one block are the [`BLOCK`]-element pieces of its
/// rows, one row after another. That is the order to use when an input is read with a large stride
/// along the output's rows (a transposed view): consecutive runs then read neighbouring elements
/// of the same input lines instead of striding through a new page for every element.
pub fn for_runs<S>(
    rows: usize,
    width: usize,
    blocked: bool,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, usize) + Sync,
) {
    let total = rows * width;
    if total == 0 {
        return;
    }
    if !blocked {
        let task = |state: &mut S, i: usize| f(state, i * CHUNK, CHUNK.min(total - i * CHUNK));
        return run_tasks(total.div_ceil(CHUNK), total, init, task);
    }
    let band = |state: &mut S, b: usize| {
        let (r0, r1) = (b * BLOCK, ((b + 1) * BLOCK).min(rows));
        for c0 in (0..width).step_by(BLOCK) {
            let len = BLOCK.min(width - c0);
            for r in r0..r1 {
                f(state, r * width + c0, len);
            }
        }
    };
    run_tasks(rows.div_ceil(BLOCK), total, init, band);
}

/// Runs `task(state, i)` for `i < tasks`, on the pool when `total` elements are enough to pay.
fn run_tasks<S>(tasks: usize, total: usize, init: impl Fn() -> S + Sync, task: impl Fn(&mut S, usize) + Sync) {
    if total < SERIAL_BELOW {
        let mut state = init();
        (0..tasks).for_each(|i| task(&mut state, i));
    } else {
        (0..tasks).into_par_iter().for_each_init(&init, |state, i| task(state, i));
    }
}
