//! Splitting element ranges across the rayon pool. Small problems stay on the calling thread:
//! waking workers costs more than it saves below about a hundred thousand elements.

use rayon::prelude::*;

/// Elements below which work runs on the calling thread.
pub const SERIAL_BELOW: usize = 1 << 17;

/// Elements of work below which a task is not split further: about ten microseconds of work,
/// well above the cost of handing a task to a worker.
pub const MIN_TASK: usize = 1 << 14;

/// Tasks per thread that split work aims for, so that threads that start late still get a share.
const TASKS_PER_THREAD: usize = 4;

/// Items per task when `items` items of `per_item` elements of work each are split across the
/// pool: all of them under [`SERIAL_BELOW`] elements of work (one task, on the calling thread);
/// else tasks of about [`SERIAL_BELOW`] elements, smaller (down to [`MIN_TASK`], rounded down to
/// whole items) where that many would leave threads idle. So a 1024x1024 row reduction is 8
/// tasks on 2 threads and 64 on 16 (a fixed [`SERIAL_BELOW`] per task gave 8 on any machine,
/// half of 16 cores idle).
pub fn items_per_task(items: usize, per_item: usize) -> usize {
    let per_item = per_item.max(1);
    let work = items.saturating_mul(per_item);
    if work < SERIAL_BELOW {
        return items.max(1);
    }
    let threads = rayon::current_num_threads();
    let task = (work / (TASKS_PER_THREAD * threads)).clamp(MIN_TASK, SERIAL_BELOW);
    (task / per_item).max(1)
}

/// [`for_chunks`] over `items` items of `per_item` elements of work each, in chunks of
/// [`items_per_task`] items.
pub fn for_items(items: usize, per_item: usize, f: impl Fn(usize, usize) + Sync) {
    for_chunks(items, items_per_task(items, per_item), f)
}

/// [`for_items`] with scratch state: `f(state, start, len)`, with `init()` making a state that
/// the chunks a worker runs in a row share (rayon's `for_each_init`), not one per chunk.
pub fn for_items_with<S>(
    items: usize,
    per_item: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, usize) + Sync,
) {
    for_chunks_with(items, items_per_task(items, per_item), init, f)
}

/// Calls `f(start, len)` over consecutive chunks of `0..total` of at most `chunk` items, in
/// parallel when there is more than one chunk (callers with items of uniform work use
/// [`for_items`], which sizes the chunks).
pub fn for_chunks(total: usize, chunk: usize, f: impl Fn(usize, usize) + Sync) {
    for_chunks_with(total, chunk, || (), |_, start, len| f(start, len))
}

/// [`for_chunks`] with scratch state made by `init` (see [`for_items_with`]).
pub fn for_chunks_with<S>(
    total: usize,
    chunk: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, usize) + Sync,
) {
    if total == 0 {
        return;
    }
    let chunk = chunk.max(1);
    let n = total.div_ceil(chunk);
    run_tasks(n, n > 1, init, |state, i| f(state, i * chunk, chunk.min(total - i * chunk)));
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
        return run_tasks(total.div_ceil(CHUNK), total >= SERIAL_BELOW, init, task);
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
    run_tasks(rows.div_ceil(BLOCK), total >= SERIAL_BELOW, init, band);
}

/// Runs `task(state, i)` for `i < tasks`: on the pool when `parallel` (each worker's run of tasks
/// sharing one `init()` state), else on the calling thread with one state.
fn run_tasks<S>(tasks: usize, parallel: bool, init: impl Fn() -> S + Sync, task: impl Fn(&mut S, usize) + Sync) {
    if !parallel {
        let mut state = init();
        (0..tasks).for_each(|i| task(&mut state, i));
    } else {
        (0..tasks).into_par_iter().for_each_init(&init, |state, i| task(state, i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_work_is_one_task_and_large_work_gives_every_thread_tasks_of_at_least_min_task() {
        for threads in [1, 2, 5, 16, 64] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
            pool.install(|| {
                assert_eq!(items_per_task(100, 1000), 100, "100k elements stay on the calling thread");
                assert_eq!(items_per_task(0, 1000), 1);
                for (rows, len) in [(1024usize, 1024usize), (4096, 4096), (100_000, 3), (3, 1 << 20)] {
                    let per = items_per_task(rows, len);
                    let tasks = rows.div_ceil(per);
                    let work = rows * len;
                    let at = format!("{threads} threads, {rows}x{len}: {per} rows per task, {tasks} tasks");
                    // Enough tasks to keep every thread busy where the work and the items allow ...
                    assert!(tasks >= (TASKS_PER_THREAD * threads).min(work / MIN_TASK).min(rows), "{at}");
                    // ... none under MIN_TASK elements (short of one item) nor over SERIAL_BELOW,
                    // unless one item is.
                    assert!((per + 1) * len > MIN_TASK.min(work), "{at}");
                    assert!(per * len <= SERIAL_BELOW || per == 1, "{at}");
                }
            });
        }
    }

    #[test]
    fn sixteen_threads_split_a_1024_square_into_64_tasks() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(16).build().expect("a pool");
        pool.install(|| {
            let per = items_per_task(1024, 1024);
            assert_eq!(per * 1024, MIN_TASK, "16 rows of 1024 per task");
            assert_eq!(1024 / per, 64);
        });
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        pool.install(|| assert_eq!(items_per_task(1024, 1024) * 1024, SERIAL_BELOW, "2 threads: 8 tasks of 128 rows"));
    }
}
