//! Integer and boolean matrix products, which no BLAS covers: sums of products wrap in the output
//! dtype, as numpy's do, and a boolean product is the OR of ANDs. Signed integers multiply as
//! their unsigned bits of the same width (two's complement wraps the same way), so four widths
//! cover the eight integer dtypes.

use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::shape::numel;
use rayon::prelude::*;

/// Products with fewer multiply-adds than this run on one thread.
const PARALLEL_WORK: usize = 1 << 16;

/// `a @ b` of integer or boolean inputs of equal batch shape into a new row-major array.
pub fn matmul(a: &Input, b: &Input, shape: &[usize], dtype: Dtype) -> Buffer {
    match (dtype, dtype.size()) {
        (Dtype::Bool, _) => product::<u8>(a, b, shape, dtype, |acc, x, y| acc | (x & y)),
        (_, 1) => product::<u8>(a, b, shape, dtype, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))),
        (_, 2) => product::<u16>(a, b, shape, dtype, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))),
        (_, 4) => product::<u32>(a, b, shape, dtype, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))),
        _ => product::<u64>(a, b, shape, dtype, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))),
    }
}

/// The element offset of batch member `i` in an operand with these batch strides.
pub(super) fn batch_offset(batch_shape: &[usize], strides: &[isize], mut i: usize) -> isize {
    let mut off = 0;
    for axis in (0..batch_shape.len()).rev() {
        off += (i % batch_shape[axis]) as isize * strides[axis];
        i /= batch_shape[axis];
    }
    off
}

/// Row by row: each output row accumulates `a[r, p] * b[p, :]` over `p` with `step`.
fn product<T: Copy + Default + Send + Sync>(a: &Input, b: &Input, shape: &[usize], dtype: Dtype, step: impl Fn(T, T, T) -> T + Sync) -> Buffer {
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.shape[nd - 1]);
    let out = alloc(shape, dtype);
    let total = numel(shape);
    if total == 0 {
        return out;
    }
    let (sa, sb) = (&a.buffer.strides, &b.buffer.strides);
    let (pa, pb) = (a.buffer.ptr::<T>() as usize, b.buffer.ptr::<T>() as usize);
    // Safety: the output was just allocated with `total` elements of T's width.
    let rows = unsafe { std::slice::from_raw_parts_mut(out.ptr::<T>(), total) };
    let one_row = |(r, row): (usize, &mut [T])| {
        let (i, ra) = (r / m, r % m);
        // Safety: the views address elements inside their buffers for every in-range index.
        unsafe {
            let a_row = (pa as *const T).offset(batch_offset(&shape[..nd - 2], sa, i) + ra as isize * sa[nd - 2]);
            let b_mat = (pb as *const T).offset(batch_offset(&shape[..nd - 2], sb, i));
            row.fill(T::default());
            for p in 0..k {
                let x = *a_row.offset(p as isize * sa[nd - 1]);
                let b_row = b_mat.offset(p as isize * sb[nd - 2]);
                if sb[nd - 1] == 1 {
                    let b_row = std::slice::from_raw_parts(b_row, n);
                    row.iter_mut().zip(b_row).for_each(|(o, &y)| *o = step(*o, x, y));
                } else {
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = step(*o, x, *b_row.offset(j as isize * sb[nd - 1]));
                    }
                }
            }
        }
    };
    if total * k < PARALLEL_WORK {
        rows.chunks_mut(n).enumerate().for_each(one_row);
    } else {
        rows.par_chunks_mut(n).enumerate().for_each(one_row);
    }
    out
}
