//! Gathers, scatters, concatenation and slice updates.
//!
//! Index semantics (shared by gather and scatter): an index is read as a signed integer, a negative
//! one counts from the end of its axis, and the result is then clamped so the whole slice lies in
//! bounds (`0 ..= dim - slice_size`), as mlx does. Out-of-range indices therefore never touch
//! memory outside the array; they select the nearest valid slice.

use super::parallel::for_items;
use super::scalar::{Compute, Scalar};
use super::strided::{alloc, for_each_offset, gather_range, is_row_contiguous, to_contiguous};
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Element;
use crate::error::Result;
use crate::primitive::{BinaryOp, ScatterOp};
use crate::shape::{collapse_dims, numel, row_major_strides};

/// The input as a row-major buffer of its own shape: itself when already so, else a copy.
fn contiguous(input: &Input) -> Buffer {
    if is_row_contiguous(&input.shape, &input.buffer.strides) {
        input.buffer.clone()
    } else {
        to_contiguous(input, &input.shape)
    }
}

/// Joins inputs along `axis`: each input fills, per outer row, one contiguous block of the output.
pub fn concatenate(inputs: &[Input], axis: usize, shape: &[usize]) -> Result<Buffer> {
    let dtype = inputs[0].dtype;
    let out = alloc(shape, dtype);
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let row = shape[axis] * inner;
    crate::with_dtype!(dtype, T => {
        let dst = out.ptr::<T>() as usize;
        let mut col = 0usize;
        for input in inputs {
            let block = input.shape[axis] * inner;
            let (cshape, cstrides) = collapse_dims(&input.shape, &[&input.buffer.strides]);
            let src = input.buffer.ptr::<T>() as usize;
            if block > 0 {
                for_items(outer, block, |start, len| unsafe {
                    for o in start..start + len {
                        let d = (dst as *mut T).add(o * row + col);
                        gather_range(src as *const T, &cshape, &cstrides[0], o * block, block, d);
                    }
                });
            }
            col += block;
        }
    });
    Ok(out)
}

/// A copy of `dst` with the strided region (`start`, `step` per axis, of the update's shape)
/// replaced by `update`. A donatable row-contiguous `dst` is written in place.
pub fn slice_update(dst: &Input, update: &Input, start: &[usize], step: &[isize]) -> Result<Buffer> {
    let out = if dst.donatable && is_row_contiguous(&dst.shape, &dst.buffer.strides) {
        Buffer { strides: row_major_strides(&dst.shape), ..dst.buffer.clone() }
    } else {
        to_contiguous(dst, &dst.shape)
    };
    if numel(&update.shape) == 0 {
        return Ok(out);
    }
    let ostrides = row_major_strides(&dst.shape);
    let base: isize = start.iter().zip(&ostrides).map(|(&s, &k)| s as isize * k).sum();
    let region: Vec<isize> = ostrides.iter().zip(step).map(|(&k, &s)| k * s).collect();
    let upd = contiguous(update);
    // Rows of the (collapsed) region are written in parallel; each row is one run of the update.
    let (cshape, cstrides) = collapse_dims(&update.shape, &[&region]);
    let cstrides = &cstrides[0];
    let n = cshape.len();
    let (inner, istride) = if n == 0 { (1, 1) } else { (cshape[n - 1], cstrides[n - 1]) };
    let outer = &cshape[..n.saturating_sub(1)];
    let rows = numel(outer);
    crate::with_dtype!(dst.dtype, T => {
        let o = unsafe { out.ptr::<T>().offset(base) } as usize;
        let u = upd.ptr::<T>() as usize;
        for_items(rows, inner, |start, len| unsafe {
            for r in start..start + len {
                let (mut rem, mut off) = (r, 0isize);
                for axis in (0..outer.len()).rev() {
                    off += (rem % outer[axis]) as isize * cstrides[axis];
                    rem /= outer[axis];
                }
                let d = (o as *mut T).offset(off);
                let s = (u as *const T).add(r * inner);
                if istride == 1 {
                    std::ptr::copy_nonoverlapping(s, d, inner);
                } else {
                    for i in 0..inner {
                        *d.offset(i as isize * istride) = *s.add(i);
                    }
                }
            }
        });
    });
    Ok(out)
}

/// The index arrays (inputs broadcast to `batch`) as element offsets into an array with `strides`:
/// wrapped, clamped so each slice of `slice[axes[i]]` elements fits in `dims[axes[i]]`.
fn slice_offsets(
    indices: &[Input],
    axes: &[usize],
    dims: &[usize],
    strides: &[isize],
    slice: &[usize],
    batch: &[usize],
) -> Vec<isize> {
    let mut offsets = vec![0isize; numel(batch)];
    for (idx, &axis) in indices.iter().zip(axes) {
        let dim = dims[axis] as i64;
        let hi = (dim - slice[axis] as i64).max(0);
        let stride = strides[axis];
        let istrides = idx.strides_for(batch);
        crate::with_dtype!(idx.dtype, T => {
            let p = idx.buffer.ptr::<T>();
            let mut j = 0usize;
            for_each_offset(batch, &istrides, |off| {
                // Safety: `off` walks the index view, which the evaluator keeps alive.
                let v = unsafe { *p.offset(off) }.to_f64() as i64;
                let v = if v < 0 { v + dim } else { v };
                offsets[j] += v.clamp(0, hi) as isize * stride;
                j += 1;
            });
        });
    }
    offsets
}

/// Gathers slices of `slice_sizes` starting at the indexed positions (see the module docs).
pub fn gather(inputs: &[Input], axes: &[usize], slice_sizes: &[usize], shape: &[usize]) -> Result<Buffer> {
    let a = &inputs[0];
    let batch = &shape[..shape.len() - slice_sizes.len()];
    let out = alloc(shape, a.dtype);
    let per = numel(slice_sizes);
    if per == 0 || numel(batch) == 0 {
        return Ok(out);
    }
    let offsets = slice_offsets(&inputs[1..], axes, &a.shape, &a.buffer.strides, slice_sizes, batch);
    let (cshape, cstrides) = collapse_dims(slice_sizes, &[&a.buffer.strides]);
    crate::with_dtype!(a.dtype, T => {
        let src = a.buffer.ptr::<T>() as usize;
        let dst = out.ptr::<T>() as usize;
        let offsets = &offsets;
        for_items(offsets.len(), per, |start, len| unsafe {
            for (b, &off) in offsets.iter().enumerate().skip(start).take(len) {
                let s = (src as *const T).offset(off);
                gather_range(s, &cshape, &cstrides[0], 0, per, (dst as *mut T).add(b * per));
            }
        });
    });
    Ok(out)
}

/// Combines `n` updates into `o` with `op` (not `Set`).
///
/// # Safety
/// Pointers valid for `n` elements; `tmp` holds at least `2 * n` compute values when converting.
unsafe fn combine<T: Compute>(op: BinaryOp, o: *mut T, u: *const T, n: usize, tmp: &mut Vec<T::C>) -> Result<()> {
    if !T::CONVERTS {
        // Same type: compute in place.
        let (o, u) = (o as *mut T::C, u as *const T::C);
        return <T::C as Scalar>::binary(op, o, u, o, n);
    }
    tmp.resize(2 * n, T::C::default());
    let (x, y) = tmp.split_at_mut(n);
    T::load(o, x.as_mut_ptr(), n);
    T::load(u, y.as_mut_ptr(), n);
    <T::C as Scalar>::binary(op, x.as_ptr(), y.as_ptr(), x.as_mut_ptr(), n)?;
    T::store(x.as_ptr(), o, n);
    Ok(())
}

/// Scatters updates into a copy of the first input, combining with `op`. Runs serially in update
/// order, so duplicate indices combine (Add accumulates) and the last `Set` wins.
pub fn scatter(inputs: &[Input], axes: &[usize], op: ScatterOp) -> Result<Buffer> {
    let a = &inputs[0];
    let updates = &inputs[inputs.len() - 1];
    let indices = &inputs[1..inputs.len() - 1];
    let nd = a.shape.len();
    let nb = updates.shape.len() - nd;
    let batch = updates.shape[..nb].to_vec();
    let slice = updates.shape[nb..].to_vec();
    let out = if a.donatable && is_row_contiguous(&a.shape, &a.buffer.strides) {
        Buffer { strides: row_major_strides(&a.shape), ..a.buffer.clone() }
    } else {
        to_contiguous(a, &a.shape)
    };
    let per = numel(&slice);
    if per == 0 || numel(&batch) == 0 {
        return Ok(out);
    }
    let ostrides = row_major_strides(&a.shape);
    let offsets = slice_offsets(indices, axes, &a.shape, &ostrides, &slice, &batch);
    let upd = contiguous(updates);
    let bop = match op {
        ScatterOp::Set => None,
        ScatterOp::Add => Some(BinaryOp::Add),
        ScatterOp::Prod => Some(BinaryOp::Multiply),
        ScatterOp::Max => Some(BinaryOp::Maximum),
        ScatterOp::Min => Some(BinaryOp::Minimum),
    };
    // Runs along the last slice axis are contiguous in the output and in the updates.
    let run = *slice.last().unwrap_or(&1);
    let (outer_shape, outer_strides) = if nd == 0 {
        (vec![], vec![])
    } else {
        (slice[..nd - 1].to_vec(), ostrides[..nd - 1].to_vec())
    };
    crate::with_dtype!(a.dtype, T => unsafe {
        let o = out.ptr::<T>();
        let u = upd.ptr::<T>();
        let mut tmp = Vec::new();
        let mut status = Ok(());
        let mut k = 0usize;
        for &base in &offsets {
            for_each_offset(&outer_shape, &outer_strides, |off| {
                let d = o.offset(base + off);
                let s = u.add(k);
                k += run;
                match bop {
                    None => std::ptr::copy_nonoverlapping(s, d, run),
                    Some(b) => {
                        if status.is_ok() {
                            status = combine::<T>(b, d, s, run, &mut tmp);
                        }
                    }
                }
            });
        }
        status?;
    });
    Ok(out)
}
