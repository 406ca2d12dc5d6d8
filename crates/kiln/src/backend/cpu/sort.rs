//! Sorting and partitioning along one axis: lanes along the axis are copied out contiguous, each
//! row is sorted (or partitioned) independently in parallel, and the result is returned as a view
//! in the original axis order. NaNs order after every number, as in numpy.

use super::lanes::{lanes, unpermute};
use super::parallel::for_items;
use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::error::Result;
use std::cmp::Ordering;

/// Total order with NaN last (a value is NaN exactly when it is not equal to itself).
#[inline]
fn nan_last<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| {
        #[allow(clippy::eq_op)]
        match (a != a, b != b) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            _ => Ordering::Less,
        }
    })
}

/// What to do with each row.
#[derive(Clone, Copy)]
enum RowOp {
    Sort,
    Partition(usize),
}

/// Values (`indices == false`) or uint32 indices of each row of `x` along `axis`, sorted or
/// partitioned.
fn run(x: &Input, axis: usize, op: RowOp, indices: bool) -> Result<Buffer> {
    let l = lanes(x, &[axis]);
    let permuted: Vec<usize> = l.perm.iter().map(|&p| x.shape[p]).collect();
    let out = alloc(&permuted, if indices { Dtype::U32 } else { x.dtype });
    let (src, dst, len) = (l.buffer.start_address(x.dtype.size()), out.ptr::<u8>() as usize, l.len);
    crate::with_dtype!(x.dtype, T => {
        for_items(l.rows, len, |start, n| {
            let mut idx: Vec<u32> = Vec::with_capacity(len);
            for r in start..start + n {
                let row = unsafe { std::slice::from_raw_parts((src as *const T).add(r * len), len) };
                if indices {
                    idx.clear();
                    idx.extend(0..len as u32);
                    let by = |a: &u32, b: &u32| nan_last(&row[*a as usize], &row[*b as usize]);
                    match op {
                        RowOp::Sort => idx.sort_by(by), // stable: equal values keep their order
                        // Ties go by position, so equal values keep their order around `k`.
                        RowOp::Partition(k) => { idx.select_nth_unstable_by(k, |a, b| by(a, b).then(a.cmp(b))); }
                    }
                    let o = unsafe { std::slice::from_raw_parts_mut((dst as *mut u32).add(r * len), len) };
                    o.copy_from_slice(&idx);
                } else {
                    let o = unsafe { std::slice::from_raw_parts_mut((dst as *mut T).add(r * len), len) };
                    o.copy_from_slice(row);
                    match op {
                        RowOp::Sort => o.sort_unstable_by(nan_last),
                        RowOp::Partition(k) => { o.select_nth_unstable_by(k, nan_last); }
                    }
                }
            }
        });
    });
    Ok(Buffer { strides: unpermute(&x.shape, &l.perm), ..out })
}

/// Sorts along `axis`.
pub fn sort(x: &Input, axis: usize) -> Result<Buffer> {
    run(x, axis, RowOp::Sort, false)
}

/// Stable sorting indices along `axis`.
pub fn argsort(x: &Input, axis: usize) -> Result<Buffer> {
    run(x, axis, RowOp::Sort, true)
}

/// Partitions along `axis` around position `kth`.
pub fn partition(x: &Input, kth: usize, axis: usize) -> Result<Buffer> {
    run(x, axis, RowOp::Partition(kth), false)
}

/// Partition indices along `axis` around position `kth`.
pub fn argpartition(x: &Input, kth: usize, axis: usize) -> Result<Buffer> {
    run(x, axis, RowOp::Partition(kth), true)
}

