//! Cumulative scans along one axis. Lanes along the axis are made contiguous, scanned in the
//! reduction domains (floats in f64, integers in 64 bits with wrapping; the running log-sum-exp
//! in f64, or in complex64 for complex inputs) and returned as a view in the original axis order.

use super::lanes::{lanes, unpermute};
use super::math::LogSpaceAdd;
use super::parallel::for_items;
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
/// from the end when `reverse`. The running value starts at `identity`; an exclusive scan writes
/// `first` where it has seen nothing yet.
#[allow(clippy::too_many_arguments)]
fn scan_rows<T: Element, O: Element, A: Copy + Send + Sync>(
    (identity, first): (A, O),
    combine: impl Fn(A, A) -> A + Sync,
    src: usize,
    dst: usize,
    rows: usize,
    len: usize,
    reverse: bool,
    inclusive: bool,
    load: impl Fn(T) -> A + Sync,
    store: impl Fn(A) -> O + Sync,
) {
    for_items(rows, len, |start, n| {
        for r in start..start + n {
            let (x, o) = unsafe { ((src as *const T).add(r * len), (dst as *mut O).add(r * len)) };
            let mut acc = identity;
            for k in 0..len {
                let i = if reverse { len - 1 - k } else { k };
                let v = load(unsafe { *x.add(i) });
                if inclusive {
                    acc = combine(acc, v);
                    unsafe { *o.add(i) = store(acc) };
                } else {
                    unsafe { *o.add(i) = if k == 0 { first } else { store(acc) } };
                    acc = combine(acc, v);
                }
            }
        }
    });
}

/// The start of a scan of reduction `op` in domain `A`, written `O` by an exclusive scan.
fn start_of<A: Domain, O: Element>(op: ReduceOp) -> (A, O) {
    (A::identity(op), exclusive_start::<O>(op))
}

/// The step of a scan of reduction `op` in domain `A`.
fn folding<A: Domain>(op: ReduceOp) -> impl Fn(A, A) -> A + Sync {
    move |a, b| A::combine(op, a, b)
}

/// A cumulative op along `axis` with output `dtype`.
pub fn scan(op: ScanOp, x: &Input, axis: usize, reverse: bool, inclusive: bool, dtype: Dtype) -> Result<Buffer> {
    let l = lanes(x, &[axis]);
    let permuted: Vec<usize> = l.perm.iter().map(|&p| x.shape[p]).collect();
    let out = alloc(&permuted, dtype);
    let (src, dst, rows, len) = (l.buffer.start_address(x.dtype.size()), out.ptr::<u8>() as usize, l.rows, l.len);
    crate::with_dtype!(x.dtype, T => crate::with_dtype!(dtype, O => match (op.as_reduce(), x.dtype) {
        (None, Dtype::C64) => {
            let start = Complex64::new(f32::NEG_INFINITY, 0.0);
            scan_rows::<Complex64, Complex64, Complex64>(
                (start, start), Complex64::logaddexp, src, dst, rows, len, reverse, inclusive, |v| v, |a| a,
            )
        }
        (None, _) => {
            let start = (f64::NEG_INFINITY, O::from_f64(f64::NEG_INFINITY));
            scan_rows::<T, O, f64>(start, f64::log_add_exp, src, dst, rows, len, reverse, inclusive, Element::to_f64, O::from_f64)
        }
        (Some(rop), Dtype::C64) => scan_rows::<Complex64, Complex64, Wide>(
            start_of(rop), folding(rop), src, dst, rows, len, reverse, inclusive, Wide::of, Wide::narrow,
        ),
        (Some(rop), d) if d.is_float() => scan_rows::<T, O, f64>(
            start_of(rop), folding(rop), src, dst, rows, len, reverse, inclusive, Element::to_f64, O::from_f64,
        ),
        (Some(rop), d) if d.is_unsigned() => scan_rows::<T, O, u64>(
            start_of(rop), folding(rop), src, dst, rows, len, reverse, inclusive, |v| v.to_u64(), O::from_u64,
        ),
        (Some(rop), _) => scan_rows::<T, O, i64>(
            start_of(rop), folding(rop), src, dst, rows, len, reverse, inclusive, |v| v.to_i64(), O::from_i64,
        ),
    }));
    Ok(Buffer { strides: unpermute(&x.shape, &l.perm), ..out })
}
