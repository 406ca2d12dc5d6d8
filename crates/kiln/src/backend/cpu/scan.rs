//! Cumulative scans along one axis. Lanes along the axis are made contiguous, scanned in the
//! reduction domains (floats in f64, integers in 64 bits with wrapping) and returned as a view in
//! the original axis order.

use super::lanes::{lanes, unpermute};
use super::parallel::{for_chunks, SERIAL_BELOW};
use super::reduce::{Domain, Int64};
use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::complex::{Complex64, Wide};
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::primitive::{ReduceOp, ScanOp};

/// What an exclusive scan writes before it has seen an element: the op's identity in the output
/// dtype. For max and min that is the dtype's own extreme (int32 min, not int64 min narrowed to
/// 0), and false/true for bool.
fn exclusive_start<O: Element>(op: ReduceOp) -> O {
    match op {
        ReduceOp::Max if O::DTYPE == Dtype::Bool => O::from_f64(0.0),
        ReduceOp::Max => O::from_f64(f64::NEG_INFINITY),
        ReduceOp::Min => O::from_f64(f64::INFINITY),
        ReduceOp::Sum | ReduceOp::Any => O::from_f64(0.0),
        ReduceOp::Prod | ReduceOp::All => O::from_f64(1.0),
    }
}

/// Scans every row of `rows x len`: out[i] combines x[..=i] (inclusive) or x[..i] (exclusive),
/// from the end when `reverse`.
#[allow(clippy::too_many_arguments)]
fn scan_rows<T: Element, O: Element, A: Domain>(
    op: ReduceOp,
    src: usize,
    dst: usize,
    rows: usize,
    len: usize,
    reverse: bool,
    inclusive: bool,
    load: impl Fn(T) -> A + Sync,
    store: impl Fn(A) -> O + Sync,
) {
    let first = exclusive_start::<O>(op);
    for_chunks(rows, (SERIAL_BELOW / len.max(1)).max(1), |start, n| {
        for r in start..start + n {
            let (x, o) = unsafe { ((src as *const T).add(r * len), (dst as *mut O).add(r * len)) };
            let mut acc = A::identity(op);
            for k in 0..len {
                let i = if reverse { len - 1 - k } else { k };
                let v = load(unsafe { *x.add(i) });
                if inclusive {
                    acc = A::combine(op, acc, v);
                    unsafe { *o.add(i) = store(acc) };
                } else {
                    unsafe { *o.add(i) = if k == 0 { first } else { store(acc) } };
                    acc = A::combine(op, acc, v);
                }
            }
        }
    });
}

/// A cumulative op along `axis` with output `dtype`.
pub fn scan(op: ScanOp, x: &Input, axis: usize, reverse: bool, inclusive: bool, dtype: Dtype) -> Result<Buffer> {
    let l = lanes(x, &[axis]);
    let permuted: Vec<usize> = l.perm.iter().map(|&p| x.shape[p]).collect();
    let out = alloc(&permuted, dtype);
    let (src, dst, rop) = (l.buffer.start_address(x.dtype.size()), out.ptr::<u8>() as usize, op.as_reduce());
    crate::with_dtype!(x.dtype, T => crate::with_dtype!(dtype, O => {
        if x.dtype.is_complex() {
            scan_rows::<Complex64, Complex64, Wide>(rop, src, dst, l.rows, l.len, reverse, inclusive, Wide::of, Wide::narrow)
        } else if x.dtype.is_float() {
            scan_rows::<T, O, f64>(rop, src, dst, l.rows, l.len, reverse, inclusive, |v: T| Element::to_f64(v), O::from_f64)
        } else if x.dtype.is_unsigned() {
            scan_rows::<T, O, u64>(rop, src, dst, l.rows, l.len, reverse, inclusive, |v| v.to_u64(), O::from_u64)
        } else {
            scan_rows::<T, O, i64>(rop, src, dst, l.rows, l.len, reverse, inclusive, |v| v.to_i64(), O::from_i64)
        }
    }));
    Ok(Buffer { strides: unpermute(&x.shape, &l.perm), ..out })
}
