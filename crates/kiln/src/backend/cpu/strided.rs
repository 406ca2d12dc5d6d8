//! Walking strided views: element offsets in row-major order, gathering a range of a view into
//! contiguous memory, and allocation of fresh row-major outputs. Every CPU kernel accepts any
//! strides (negative, zero for broadcast) through these; contiguous inputs skip them.

use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::shape::{collapse_dims, numel, row_major_strides, Strides};

/// A fresh row-major buffer for `shape` elements of `dtype`.
pub fn alloc(shape: &[usize], dtype: Dtype) -> Buffer {
    Buffer {
        storage: Storage::new(numel(shape) * dtype.size()),
        offset: 0,
        strides: row_major_strides(shape),
    }
}

/// Whether a view with these strides is laid out row-major without gaps (size-1 axes ignored).
/// An empty view counts as contiguous: it has no elements to be out of place, and any strides
/// (such as `row_major_strides` gives it) read it.
pub fn is_row_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1isize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected *= d as isize;
    }
    true
}

impl Input {
    /// Whether the input is row-major contiguous with exactly `shape` (no broadcasting).
    pub fn is_contiguous_as(&self, shape: &[usize]) -> bool {
        self.shape.as_slice() == shape && is_row_contiguous(&self.shape, &self.buffer.strides)
    }

    /// The input's strides broadcast to `shape` (zero on new and stretched axes).
    pub fn strides_for(&self, shape: &[usize]) -> Strides {
        broadcast_strides(&self.shape, &self.buffer.strides, shape)
    }
}

/// Strides that read a view of `shape`/`strides` as if broadcast to `target`.
pub fn broadcast_strides(shape: &[usize], strides: &[isize], target: &[usize]) -> Strides {
    let lead = target.len() - shape.len();
    (0..target.len())
        .map(|i| if i < lead || shape[i - lead] == 1 { 0 } else { strides[i - lead] })
        .collect()
}

/// Calls `f` with the element offset of every element of a view, in row-major order.
pub fn for_each_offset(shape: &[usize], strides: &[isize], mut f: impl FnMut(isize)) {
    if numel(shape) == 0 {
        return;
    }
    let (shape, strides) = collapse_dims(shape, &[strides]);
    let strides = &strides[0];
    let n = shape.len();
    if n == 0 {
        f(0);
        return;
    }
    let mut idx = vec![0usize; n];
    let mut off = 0isize;
    let inner = shape[n - 1];
    let inner_stride = strides[n - 1];
    loop {
        for i in 0..inner as isize {
            f(off + i * inner_stride);
        }
        off += inner_stride * inner as isize;
        // Carry into the outer axes.
        let mut axis = n - 1;
        loop {
            off -= strides[axis] * shape[axis] as isize;
            idx[axis] = 0;
            if axis == 0 {
                return;
            }
            axis -= 1;
            idx[axis] += 1;
            off += strides[axis];
            if idx[axis] < shape[axis] {
                break;
            }
        }
    }
}

/// Copies elements `start .. start + len` (row-major positions in a view of `shape`) of the view
/// at `src` with `strides` to `dst`.
///
/// # Safety
/// `src` with `strides` must be valid for every element of `shape`, and `dst` for `len` writes.
pub unsafe fn gather_range<T: Copy>(
    src: *const T,
    shape: &[usize],
    strides: &[isize],
    start: usize,
    len: usize,
    dst: *mut T,
) {
    if len == 0 {
        return;
    }
    let n = shape.len();
    if n == 0 {
        *dst = *src;
        return;
    }
    // Multi-index of `start`.
    let mut idx = [0usize; 64];
    let mut rem = start;
    let mut off = 0isize;
    for axis in (0..n).rev() {
        idx[axis] = rem % shape[axis];
        rem /= shape[axis];
        off += idx[axis] as isize * strides[axis];
    }
    let inner = shape[n - 1];
    let inner_stride = strides[n - 1];
    let mut written = 0usize;
    while written < len {
        let run = (inner - idx[n - 1]).min(len - written);
        let d = dst.add(written);
        match inner_stride {
            1 => std::ptr::copy_nonoverlapping(src.offset(off), d, run),
            0 => {
                let v = *src.offset(off);
                for i in 0..run {
                    *d.add(i) = v;
                }
            }
            s => {
                for i in 0..run {
                    *d.add(i) = *src.offset(off + i as isize * s);
                }
            }
        }
        written += run;
        off += run as isize * inner_stride;
        idx[n - 1] += run;
        // Carry.
        let mut axis = n - 1;
        while idx[axis] == shape[axis] && axis > 0 {
            off -= strides[axis] * shape[axis] as isize;
            idx[axis] = 0;
            axis -= 1;
            idx[axis] += 1;
            off += strides[axis];
        }
    }
}

/// A copy of `input` read as `shape` (broadcasting allowed) into a fresh row-major buffer.
pub fn to_contiguous(input: &Input, shape: &[usize]) -> Buffer {
    super::elementwise::copy_to_row_major(input, shape)
}

/// How to walk a row-major output of `shape` read through inputs with `strides` (broadcast to
/// `shape`): as `(rows, width)` with width the last axis, and whether to go block by block (see
/// [`super::parallel::for_runs`]) because some input strides far along the last axis.
pub fn run_layout(shape: &[usize], strides: &[&[isize]]) -> (usize, usize, bool) {
    let width = shape.last().copied().unwrap_or(1);
    let rows = numel(shape) / width.max(1); // 0 when the output is empty
    let transposed = strides.iter().any(|s| s.last().is_some_and(|&l| l.unsigned_abs() > 1));
    (rows, width, transposed && width >= super::parallel::BLOCK && rows > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_handles_negative_and_zero_strides() {
        // A (2, 3) view of [0..6] reversed along axis 1, and a broadcast row.
        let data: Vec<i32> = (0..6).collect();
        let mut out = vec![0; 5];
        unsafe {
            gather_range(data.as_ptr().add(2), &[2, 3], &[3, -1], 1, 5, out.as_mut_ptr());
        }
        assert_eq!(out, vec![1, 0, 5, 4, 3]);
        let mut out = vec![0; 6];
        unsafe { gather_range(data.as_ptr(), &[2, 3], &[0, 1], 0, 6, out.as_mut_ptr()) };
        assert_eq!(out, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn offsets_walk_row_major() {
        let mut offs = vec![];
        for_each_offset(&[2, 2], &[1, 2], |o| offs.push(o));
        assert_eq!(offs, vec![0, 2, 1, 3]);
    }
}
