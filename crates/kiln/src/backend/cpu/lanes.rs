//! Lanes: views of an input with chosen axes moved last and made contiguous, so reductions,
//! scans and sorts run over contiguous rows. Outputs computed lane-major can be handed back as
//! a view in the original axis order (no copy).

use super::strided::{is_row_contiguous, to_contiguous};
use super::views::transpose;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::shape::{numel, row_major_strides, Shape, Strides};

/// A contiguous buffer of `rows` rows of `len` elements each.
pub struct Lanes {
    /// The data, row-major over (rows, len).
    pub buffer: Buffer,
    /// Number of rows (product of the kept axes).
    pub rows: usize,
    /// Elements per row (product of the lane axes).
    pub len: usize,
    /// The permutation applied: kept axes in order, then the lane axes.
    pub perm: Vec<usize>,
}

/// `x` with `axes` (sorted) moved last, contiguous; a view when already in that layout.
pub fn lanes(x: &Input, axes: &[usize]) -> Lanes {
    let nd = x.shape.len();
    let mut perm: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let len = axes.iter().map(|&a| x.shape[a]).product::<usize>();
    let rows = numel(&x.shape) / len.max(1);
    let rows = if len == 0 { perm[..nd - axes.len()].iter().map(|&a| x.shape[a]).product() } else { rows };
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let buffer = if identity && is_row_contiguous(&x.shape, &x.buffer.strides) {
        x.buffer.clone()
    } else {
        let shape: Shape = perm.iter().map(|&p| x.shape[p]).collect();
        let t = Input { shape: shape.clone(), dtype: x.dtype, buffer: transpose(x, &perm), donatable: false };
        to_contiguous(&t, &shape)
    };
    Lanes { buffer, rows, len, perm }
}

/// Strides that read a row-major buffer of the permuted shape back in the original axis order.
pub fn unpermute(shape: &[usize], perm: &[usize]) -> Strides {
    let permuted: Shape = perm.iter().map(|&p| shape[p]).collect();
    let ps = row_major_strides(&permuted);
    let mut out: Strides = Strides::from_elem(0, shape.len());
    for (i, &p) in perm.iter().enumerate() {
        out[p] = ps[i];
    }
    out
}
