//! View ops: new shapes and strides over the same storage. Only a reshape that strides cannot
//! express copies. They touch no data, so the GPU backend uses them too.

use super::strided::{is_row_contiguous, to_contiguous};
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::shape::{row_major_strides, Strides};

/// Permutes axes.
pub fn transpose(x: &Input, perm: &[usize]) -> Buffer {
    let strides = perm.iter().map(|&p| x.buffer.strides[p]).collect();
    Buffer { strides, ..x.buffer.clone() }
}

/// Broadcasts to `shape` with zero strides.
pub fn broadcast_to(x: &Input, shape: &[usize]) -> Buffer {
    Buffer { strides: x.strides_for(shape), ..x.buffer.clone() }
}

/// A strided window: per axis, elements start, start+step, ...
pub fn slice(x: &Input, start: &[usize], step: &[isize]) -> Buffer {
    let b = &x.buffer;
    let offset = b.offset + start.iter().zip(&b.strides).map(|(&s, &st)| s as isize * st).sum::<isize>();
    let strides = b.strides.iter().zip(step).map(|(&st, &k)| st * k).collect();
    Buffer { storage: b.storage.clone(), offset, strides }
}

/// The same elements in `shape`: a view when strides allow, a row-major copy otherwise.
pub fn reshape(op: &str, x: &Input, shape: &[usize]) -> Result<Buffer> {
    if let Some(view) = reshape_view(x, shape) {
        return Ok(view);
    }
    // The one view op that may copy: the copy must fit like any other array.
    crate::buffer::check_host_allocation(op, shape, x.dtype)?;
    let copy = to_contiguous(x, &x.shape);
    Ok(Buffer { strides: row_major_strides(shape), ..copy })
}

/// `x` viewed in `shape` without copying, when strides can express it (any device's reshape).
pub fn reshape_view(x: &Input, shape: &[usize]) -> Option<Buffer> {
    if is_row_contiguous(&x.shape, &x.buffer.strides) {
        return Some(Buffer { strides: row_major_strides(shape), ..x.buffer.clone() });
    }
    reshape_strides(&x.shape, &x.buffer.strides, shape).map(|strides| Buffer { strides, ..x.buffer.clone() })
}

/// Strides that read a view of `old_shape`/`old_strides` as `new_shape` without copying, if any:
/// each group of old axes that merges into or splits from new axes must be contiguous within itself.
fn reshape_strides(old_shape: &[usize], old_strides: &[isize], new_shape: &[usize]) -> Option<Strides> {
    let old: Vec<(usize, isize)> =
        old_shape.iter().zip(old_strides).filter(|(&d, _)| d != 1).map(|(&d, &s)| (d, s)).collect();
    let mut out: Strides = Strides::from_elem(0, new_shape.len());
    let (mut oi, mut ni) = (0usize, 0usize);
    while ni < new_shape.len() {
        if new_shape[ni] == 1 {
            out[ni] = 0;
            ni += 1;
            continue;
        }
        if oi >= old.len() {
            return None;
        }
        // Grow matching groups until their sizes agree.
        let (mut np, mut op) = (new_shape[ni], old[oi].0);
        let (n0, o0) = (ni, oi);
        while np != op {
            if np < op {
                ni += 1;
                np *= new_shape[ni];
            } else {
                oi += 1;
                op *= old[oi].0;
            }
        }
        // The old group must be contiguous within itself.
        for k in o0..oi {
            if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                return None;
            }
        }
        // Assign strides to the new group from its innermost axis outward.
        let mut stride = old[oi].1;
        for k in (n0..=ni).rev() {
            out[k] = stride;
            stride *= new_shape[k] as isize;
        }
        ni += 1;
        oi += 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::reshape_strides;

    #[test]
    fn reshape_of_transposed_splits_without_copy_when_possible() {
        // A (4, 6) view with strides (1, 4) (a transpose): splitting axis 1 into (2, 3) works.
        assert_eq!(reshape_strides(&[4, 6], &[1, 4], &[4, 2, 3]).unwrap().as_slice(), &[1, 12, 4]);
        // Merging the two axes of a transpose cannot be a view.
        assert!(reshape_strides(&[4, 6], &[1, 4], &[24]).is_none());
    }
}
