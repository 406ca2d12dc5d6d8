//! Discrete Fourier transforms on the CPU, through rustfft (any length: mixed radix, Rader and
//! Bluestein plans), computed in float64 and rounded once to complex64 or float32.
//!
//! A transform over several axes is a pass per axis: each pass moves every lane along its axis
//! into a contiguous buffer, transforms it and writes it back, lanes spread over the thread pool.
//! The real forward transform runs its real axis first (keeping n/2 + 1 values), the real inverse
//! runs it last (rebuilding the other half by Hermitian symmetry, and keeping the real part).

use super::elementwise::copy_to_row_major;
use super::parallel::for_chunks;
use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::complex::Complex64;
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::primitive::FftKind;
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

type C = Complex<f64>;

/// A row-major array of float64 complex values being transformed.
struct Data {
    values: Vec<C>,
    shape: Vec<usize>,
}

/// `kind` over `axes` of `x`, as a buffer of `shape`.
pub fn fft(x: &Input, axes: &[usize], kind: FftKind, shape: &[usize]) -> Result<Buffer> {
    let mut data = read(x);
    let (&last, others) = axes.split_last().expect("an fft has at least one axis");
    match kind {
        FftKind::Forward | FftKind::Inverse => {
            for &a in axes {
                pass(&mut data, a, kind == FftKind::Inverse, Lane::Complex);
            }
        }
        FftKind::RealForward => {
            pass(&mut data, last, false, Lane::HalfOfReal);
            for &a in others {
                pass(&mut data, a, false, Lane::Complex);
            }
        }
        FftKind::RealInverse(n) => {
            for &a in others {
                pass(&mut data, a, true, Lane::Complex);
            }
            pass(&mut data, last, true, Lane::Hermitian(n));
        }
    }
    debug_assert_eq!(data.shape, shape);
    Ok(write(&data, if matches!(kind, FftKind::RealInverse(_)) { Dtype::F32 } else { Dtype::C64 }))
}

/// The elements of `x` in row-major order as float64 complex values (real dtypes with a zero
/// imaginary part).
fn read(x: &Input) -> Data {
    let row_major = copy_to_row_major(x, &x.shape);
    let n = x.shape.iter().product::<usize>();
    let values = if x.dtype.is_complex() {
        let p = row_major.ptr::<Complex64>();
        (0..n).map(|i| unsafe { *p.add(i) }).map(|z| C::new(z.re as f64, z.im as f64)).collect()
    } else {
        crate::with_dtype!(x.dtype, T => {
            let p = row_major.ptr::<T>();
            (0..n).map(|i| C::new(unsafe { *p.add(i) }.to_f64(), 0.0)).collect()
        })
    };
    Data { values, shape: x.shape.to_vec() }
}

/// `data` rounded to complex64, or its real parts to float32.
fn write(data: &Data, dtype: Dtype) -> Buffer {
    let out = alloc(&data.shape, dtype);
    if dtype == Dtype::C64 {
        let p = out.ptr::<Complex64>();
        for (i, z) in data.values.iter().enumerate() {
            unsafe { *p.add(i) = Complex64::new(z.re as f32, z.im as f32) };
        }
    } else {
        let p = out.ptr::<f32>();
        for (i, z) in data.values.iter().enumerate() {
            unsafe { *p.add(i) = z.re as f32 };
        }
    }
    out
}

/// What a pass reads and keeps of each lane.
#[derive(Clone, Copy, PartialEq)]
enum Lane {
    /// All n values in, all n out.
    Complex,
    /// n values of a real sequence in, the first n/2 + 1 of its transform out (the others are
    /// their conjugates).
    HalfOfReal,
    /// The first n/2 + 1 values of a Hermitian sequence of length n in (the rest are the
    /// conjugates mirrored, x[n - k] = conj(x[k])), n out, of which the caller keeps real parts.
    Hermitian(usize),
}

/// Transforms every lane along `axis` as `lane` says, scaled by 1/n when `inverse`.
fn pass(data: &mut Data, axis: usize, inverse: bool, lane: Lane) {
    let in_len = data.shape[axis];
    let (n, out_len) = match lane {
        Lane::Complex => (in_len, in_len),
        Lane::HalfOfReal => (in_len, in_len / 2 + 1),
        Lane::Hermitian(n) => (n, n),
    };
    let inner: usize = data.shape[axis + 1..].iter().product();
    let outer: usize = data.shape[..axis].iter().product();
    let mut out_shape = data.shape.clone();
    out_shape[axis] = out_len;
    let mut out = vec![C::new(0.0, 0.0); outer * out_len * inner];
    if n > 0 && !out.is_empty() {
        let plan = if inverse { FftPlanner::new().plan_fft_inverse(n) } else { FftPlanner::new().plan_fft_forward(n) };
        let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
        let lanes = outer * inner;
        let (src, dst) = (data.values.as_ptr() as usize, out.as_mut_ptr() as usize);
        let chunk = (1 << 16) / n.max(1) + 1;
        for_chunks(lanes, chunk, |start, count| {
            let mut buffer = vec![C::new(0.0, 0.0); n];
            let mut scratch = vec![C::new(0.0, 0.0); plan.get_inplace_scratch_len()];
            for l in start..start + count {
                let (o, i) = (l / inner, l % inner);
                let at = |k: usize, len: usize| (o * len + k) * inner + i;
                // Safety: lanes are disjoint; `src` holds outer × in_len × inner values and `dst`
                // outer × out_len × inner.
                unsafe {
                    let read = |k: usize| *(src as *const C).add(at(k, in_len));
                    for (k, b) in buffer.iter_mut().enumerate() {
                        *b = match lane {
                            Lane::Hermitian(_) if k >= in_len => read(n - k).conj(),
                            _ => read(k),
                        };
                    }
                    plan.process_with_scratch(&mut buffer, &mut scratch);
                    for (k, b) in buffer.iter().take(out_len).enumerate() {
                        *(dst as *mut C).add(at(k, out_len)) = b * scale;
                    }
                }
            }
        });
    }
    data.values = out;
    data.shape = out_shape;
}
