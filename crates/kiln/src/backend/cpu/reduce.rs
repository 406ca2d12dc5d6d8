//! Reductions over axes: the reduced axes are moved last (a view when they already are), then each
//! row is folded with eight independent accumulators so the loop vectorises. A few long rows (a
//! full reduction) are split across threads and the partial results combined. Reducing a block
//! of leading or middle axes with kept axes after them (a column sum) reads the array row by row
//! into a vector of accumulators (in place where it is contiguous, else from a row-major copy),
//! instead of moving the axes last with a transposing copy: each column folds in order whatever
//! the input's layout, as compiled column kernels do.
//!
//! Floats accumulate in float64 (more accurate than the float32 accumulation of peers, and still
//! memory-bound); integers in 64 bits with wrapping, then narrowed to the output dtype.

use super::lanes::lanes;
use super::parallel::{for_items, SERIAL_BELOW};
use super::strided::{alloc, is_row_contiguous, to_contiguous};
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::complex::{Complex64, Wide};
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::primitive::{ArgReduceOp, ReduceOp};
use rayon::prelude::*;

/// How values combine in a reduction domain.
pub(super) trait Domain: Copy + Send + Sync {
    /// The neutral element of `op`.
    fn identity(op: ReduceOp) -> Self;
    /// Combines two partial results.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! float_domain {
    ($t:ty) => {
        impl Domain for $t {
            fn identity(op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Sum | ReduceOp::Any => 0.0,
                    ReduceOp::Prod | ReduceOp::All => 1.0,
                    ReduceOp::Max => <$t>::NEG_INFINITY,
                    ReduceOp::Min => <$t>::INFINITY,
                }
            }
            #[inline(always)]
            fn combine(op: ReduceOp, a: $t, b: $t) -> $t {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    // NaN propagates, as in numpy.
                    ReduceOp::Max => if a > b || a.is_nan() { a } else { b },
                    ReduceOp::Min => if a < b || a.is_nan() { a } else { b },
                    ReduceOp::All => ((a != 0.0) & (b != 0.0)) as u8 as $t,
                    ReduceOp::Any => ((a != 0.0) | (b != 0.0)) as u8 as $t,
                }
            }
        }
    };
}
// float64 accumulates every float reduction; float32 serves max and min of float32 values, which
// are exact in either and twice as wide per vector in float32.
float_domain!(f64);
float_domain!(f32);

macro_rules! int_domain {
    ($t:ty) => {
        impl Domain for $t {
            fn identity(op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Sum | ReduceOp::Any => 0,
                    ReduceOp::Prod | ReduceOp::All => 1,
                    ReduceOp::Max => <$t>::MIN,
                    ReduceOp::Min => <$t>::MAX,
                }
            }
            #[inline(always)]
            fn combine(op: ReduceOp, a: $t, b: $t) -> $t {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::All => ((a != 0) & (b != 0)) as $t,
                    ReduceOp::Any => ((a != 0) | (b != 0)) as $t,
                }
            }
        }
    };
}
int_domain!(i64);
int_domain!(u64);

/// Folds `len` elements at `p` (converted by `load`) with sixteen accumulators. The op is matched
/// once, outside the loop, and the loop runs in an AVX2 copy where the CPU has it, so it vectorises
/// (the conversion to the accumulation domain included).
#[inline(always)]
pub(super) unsafe fn fold<T: Copy, A: Domain>(op: ReduceOp, p: *const T, len: usize, load: impl Fn(T) -> A) -> A {
    match op {
        ReduceOp::Sum => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::Sum, a, b), A::identity(op)),
        ReduceOp::Prod => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::Prod, a, b), A::identity(op)),
        ReduceOp::Max => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::Max, a, b), A::identity(op)),
        ReduceOp::Min => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::Min, a, b), A::identity(op)),
        ReduceOp::All => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::All, a, b), A::identity(op)),
        ReduceOp::Any => fold_with(p, len, &load, |a, b| A::combine(ReduceOp::Any, a, b), A::identity(op)),
    }
}

/// [`fold`] for one combining function, dispatched to the AVX2+FMA copy where available.
#[inline(always)]
unsafe fn fold_with<T: Copy, A: Copy>(p: *const T, len: usize, load: impl Fn(T) -> A, combine: impl Fn(A, A) -> A, init: A) -> A {
    #[inline(always)]
    unsafe fn body<T: Copy, A: Copy>(p: *const T, len: usize, load: impl Fn(T) -> A, combine: impl Fn(A, A) -> A, init: A) -> A {
        const WAYS: usize = 16;
        let mut acc = [init; WAYS];
        let full = len / WAYS * WAYS;
        let mut i = 0;
        while i < full {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = combine(*a, load(*p.add(i + j)));
            }
            i += WAYS;
        }
        let mut r = init;
        for a in acc {
            r = combine(r, a);
        }
        for k in full..len {
            r = combine(r, load(*p.add(k)));
        }
        r
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2<T: Copy, A: Copy>(p: *const T, len: usize, load: impl Fn(T) -> A, combine: impl Fn(A, A) -> A, init: A) -> A {
        body(p, len, load, combine, init)
    }
    #[cfg(target_arch = "x86_64")]
    if super::simd::has_avx2_fma() {
        return avx2(p, len, load, combine, init);
    }
    body(p, len, load, combine, init)
}

/// Reduces each row of `rows x len` contiguous elements at `src` into `out[row]`.
fn reduce_rows<T: Element, A: Domain>(
    op: ReduceOp,
    src: usize,
    rows: usize,
    len: usize,
    load: impl Fn(T) -> A + Sync + Copy,
    store: impl Fn(usize, A) + Sync,
) {
    let src = src as *const T as usize;
    let row_ptr = |r: usize| (src as *const T).wrapping_add(r * len) as usize;
    let threads = rayon::current_num_threads();
    if rows < threads && len >= SERIAL_BELOW {
        // Few long rows: split each row across threads and combine the partial results.
        const PIECE: usize = 1 << 16;
        for r in 0..rows {
            let base = row_ptr(r);
            let partial = (0..len.div_ceil(PIECE))
                .into_par_iter()
                .map(|k| unsafe {
                    let start = k * PIECE;
                    fold(op, (base as *const T).add(start), PIECE.min(len - start), load)
                })
                .reduce(|| A::identity(op), |a, b| A::combine(op, a, b));
            store(r, partial);
        }
    } else {
        for_items(rows, len, |start, n| {
            for r in start..start + n {
                store(r, unsafe { fold(op, row_ptr(r) as *const T, len, load) });
            }
        });
    }
}

/// The shape of a column reduction: `axes` one consecutive block with kept axes after it, read
/// as `(outer, len, width)` with the middle axis reduced (of `x`'s row-major order).
fn column_layout(x: &Input, axes: &[usize]) -> Option<(usize, usize, usize)> {
    let (first, last) = (*axes.first()?, *axes.last()?);
    let consecutive = last - first + 1 == axes.len();
    if !consecutive || last + 1 == x.shape.len() {
        return None;
    }
    let width: usize = x.shape[last + 1..].iter().product();
    Some((x.shape[..first].iter().product(), x.shape[first..=last].iter().product(), width))
}

/// `acc[j] = combine(acc[j], load(row[j]))` for every column `j`: one position of a column
/// reduction (eager's and compiled column kernels' alike, so both fold in the same order), the
/// combining function chosen once outside the loop.
#[inline(always)]
pub(super) fn fold_columns<T: Copy, A: Domain>(op: ReduceOp, acc: &mut [A], row: &[T], load: impl Fn(T) -> A) {
    #[inline(always)]
    fn each<T: Copy, A: Copy>(acc: &mut [A], row: &[T], load: impl Fn(T) -> A, combine: impl Fn(A, A) -> A) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a = combine(*a, load(v));
        }
    }
    match op {
        ReduceOp::Sum => each(acc, row, load, |a, b| A::combine(ReduceOp::Sum, a, b)),
        ReduceOp::Prod => each(acc, row, load, |a, b| A::combine(ReduceOp::Prod, a, b)),
        ReduceOp::Max => each(acc, row, load, |a, b| A::combine(ReduceOp::Max, a, b)),
        ReduceOp::Min => each(acc, row, load, |a, b| A::combine(ReduceOp::Min, a, b)),
        ReduceOp::All => each(acc, row, load, |a, b| A::combine(ReduceOp::All, a, b)),
        ReduceOp::Any => each(acc, row, load, |a, b| A::combine(ReduceOp::Any, a, b)),
    }
}

/// Reduces the middle axis of a row-major `(outer, len, width)` array at `src`: output element
/// `o * width + j` folds `x[o, i, j]` over `i`. Tasks take pieces of columns and stream whole row
/// pieces into their accumulators, so the inner loop is contiguous and vectorises across columns.
fn reduce_columns<T: Element, A: Domain>(
    op: ReduceOp,
    src: usize,
    (outer, len, width): (usize, usize, usize),
    load: impl Fn(T) -> A + Sync + Copy,
    store: impl Fn(usize, A) + Sync,
) {
    const PIECE: usize = 1024;
    let pieces = width.div_ceil(PIECE);
    for_items(outer * pieces, len * PIECE.min(width), |start, n| {
        let mut acc = vec![A::identity(op); PIECE.min(width)];
        for task in start..start + n {
            let (o, c0) = (task / pieces, (task % pieces) * PIECE);
            let cols = PIECE.min(width - c0);
            acc[..cols].fill(A::identity(op));
            for i in 0..len {
                let row = unsafe { std::slice::from_raw_parts((src as *const T).add((o * len + i) * width + c0), cols) };
                fold_columns(op, &mut acc[..cols], row, load);
            }
            for (j, &a) in acc[..cols].iter().enumerate() {
                store(o * width + c0 + j, a);
            }
        }
    });
}

/// Folds `x` over `axes` in domain `A`, by columns when the axes allow (see [`column_layout`]; a
/// strided `x` is made row-major first, so each column folds in order whatever the layout, as a
/// compiled column kernel does) and otherwise by rows after moving the axes last, handing each
/// result to `store(index, value)`.
fn reduce_in<T: Element, A: Domain>(
    op: ReduceOp,
    x: &Input,
    axes: &[usize],
    load: impl Fn(T) -> A + Sync + Copy,
    store: impl Fn(usize, A) + Sync,
) {
    if let Some(layout) = column_layout(x, axes) {
        let data = if is_row_contiguous(&x.shape, &x.buffer.strides) { x.buffer.clone() } else { to_contiguous(x, &x.shape) };
        return reduce_columns(op, data.ptr::<T>() as usize, layout, load, store);
    }
    let l = lanes(x, axes);
    reduce_rows(op, l.buffer.ptr::<T>() as usize, l.rows, l.len, load, store);
}

/// Reduces `axes` of `x` into a buffer of `shape` (reduced axes kept with size 1) and `dtype`.
pub fn reduce(op: ReduceOp, x: &Input, axes: &[usize], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let out = alloc(shape, dtype);
    let dst = out.ptr::<u8>() as usize;
    if x.dtype.is_complex() {
        // Sums, products and max/min stay complex; all/any give bool.
        let store = |r: usize, a: Wide| unsafe {
            match dtype {
                Dtype::C64 => *(dst as *mut Complex64).add(r) = a.narrow(),
                _ => *(dst as *mut bool).add(r) = a.re != 0.0,
            }
        };
        reduce_in::<Complex64, Wide>(op, x, axes, Wide::of, store);
        return Ok(out);
    }
    crate::with_dtype!(x.dtype, T => {
        if x.dtype.is_float() {
            crate::with_dtype!(dtype, O => reduce_in::<T, f64>(op, x, axes, |v: T| Element::to_f64(v),
                |r, a| unsafe { *(dst as *mut O).add(r) = O::from_f64(a) }))
        } else if x.dtype.is_unsigned() {
            crate::with_dtype!(dtype, O => reduce_in::<T, u64>(op, x, axes, |v: T| v.to_u64(),
                |r, a| unsafe { *(dst as *mut O).add(r) = O::from_u64(a) }))
        } else {
            crate::with_dtype!(dtype, O => reduce_in::<T, i64>(op, x, axes, |v: T| v.to_i64(),
                |r, a| unsafe { *(dst as *mut O).add(r) = O::from_i64(a) }))
        }
    });
    Ok(out)
}

/// Exact conversions between element types and the 64-bit integer accumulators (not through
/// f64, which would round past 2^53). Integers narrow by wrapping, as `astype` does.
pub(super) trait Int64: Element {
    /// Widens exactly to i64 (wrapping for u64).
    fn to_i64(self) -> i64;
    /// Widens exactly to u64.
    fn to_u64(self) -> u64;
    /// Narrows with wrapping.
    fn from_i64(v: i64) -> Self;
    /// Narrows with wrapping.
    fn from_u64(v: u64) -> Self;
}

macro_rules! int64_prim {
    ($($t:ty),*) => {$(
        impl Int64 for $t {
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
            #[inline(always)] fn to_u64(self) -> u64 { self as u64 }
            #[inline(always)] fn from_i64(v: i64) -> Self { v as $t }
            #[inline(always)] fn from_u64(v: u64) -> Self { v as $t }
        }
    )*};
}
int64_prim!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

macro_rules! int64_via_f64 {
    ($($t:ty),*) => {$(
        impl Int64 for $t {
            fn to_i64(self) -> i64 { self.to_f64() as i64 }
            fn to_u64(self) -> u64 { self.to_f64() as u64 }
            fn from_i64(v: i64) -> Self { <$t>::from_f64(v as f64) }
            fn from_u64(v: u64) -> Self { <$t>::from_f64(v as f64) }
        }
    )*};
}
int64_via_f64!(bool, half::f16, half::bf16);

/// argmax / argmin along `axis`: the first index of the extreme value (NaN counts as extreme, as in
/// numpy), as uint32.
pub fn arg_reduce(op: ArgReduceOp, x: &Input, axis: usize, shape: &[usize]) -> Result<Buffer> {
    let l = lanes(x, &[axis]);
    let out = alloc(shape, Dtype::U32);
    let (src, dst, len) = (l.buffer.start_address(x.dtype.size()), out.ptr::<u32>() as usize, l.len);
    crate::with_dtype!(x.dtype, T => {
        for_items(l.rows, len, |start, n| {
            for r in start..start + n {
                let row = unsafe { std::slice::from_raw_parts((src as *const T).add(r * len), len) };
                let mut best = 0usize;
                for (i, v) in row.iter().enumerate().skip(1) {
                    let (v, b) = (Element::to_f64(*v), Element::to_f64(row[best]));
                    if b.is_nan() {
                        break;
                    }
                    let better = match op {
                        ArgReduceOp::ArgMax => v > b || v.is_nan(),
                        ArgReduceOp::ArgMin => v < b || v.is_nan(),
                    };
                    if better {
                        best = i;
                    }
                }
                unsafe { *(dst as *mut u32).add(r) = best as u32 };
            }
        });
    });
    Ok(out)
}
