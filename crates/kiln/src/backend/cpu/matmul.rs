//! Matrix products through the `gemm` crate, which takes arbitrary row and column strides, so
//! transposed and sliced operands are multiplied without copies. float16 and bfloat16 go through
//! float32; complex64 through the crate's complex kernels; integers and booleans through
//! [`super::integer_matmul`].

use super::elementwise::astype;
use super::integer_matmul::{self, batch_offset};
use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::shape::numel;
use gemm::Parallelism;
use rayon::prelude::*;

/// `a @ b` for inputs of equal batch shape (the op layer broadcasts batch dimensions).
pub fn matmul(a: &Input, b: &Input, shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    match dtype {
        Dtype::F32 => Ok(gemm_batched::<f32>(a, b, shape)),
        Dtype::F64 => Ok(gemm_batched::<f64>(a, b, shape)),
        Dtype::C64 => Ok(gemm_batched::<crate::Complex64>(a, b, shape)),
        // Half types multiply in float32 and round once, as on GPUs (the gemm crate's float16
        // kernels round partial sums to float16).
        Dtype::F16 | Dtype::BF16 => {
            let to_f32 = |x: &Input| Input {
                shape: x.shape.clone(),
                dtype: Dtype::F32,
                buffer: astype(x, Dtype::F32).expect("half types convert to float32"),
                donatable: false,
            };
            let out = gemm_batched::<f32>(&to_f32(a), &to_f32(b), shape);
            let out_in = Input { shape: shape.into(), dtype: Dtype::F32, buffer: out, donatable: true };
            astype(&out_in, dtype)
        }
        _ => Ok(integer_matmul::matmul(a, b, shape, dtype)),
    }
}

/// Products of fewer multiply-adds run on one thread.
const SMALL_WORK: usize = 1 << 18;
/// Products of up to this many multiply-adds are split into one block per thread
/// ([`split_grid`]); larger ones are split by the gemm crate, which shares packed panels between
/// threads.
const SPLIT_WORK: usize = 1 << 26;
/// The fewest rows and columns a grid's blocks are cut to (a few of the micro-kernels' tiles;
/// the last block of a row or column of the grid takes what is left, and may be narrower).
const SPLIT_MIN: usize = 32;

/// An element type the gemm crate multiplies, with the crate's own type of the same layout.
pub(crate) trait GemmElement: Element {
    /// The gemm crate's type.
    type G: Copy + 'static;
    /// 0 and 1 in that type (the product's `alpha` and `beta`).
    const ZERO_ONE: (Self::G, Self::G);
}

impl GemmElement for f32 {
    type G = f32;
    const ZERO_ONE: (f32, f32) = (0.0, 1.0);
}

impl GemmElement for f64 {
    type G = f64;
    const ZERO_ONE: (f64, f64) = (0.0, 1.0);
}

/// kiln's complex64 and the crate's `c32` are both two float32s, real part first.
impl GemmElement for crate::Complex64 {
    type G = gemm::c32;
    const ZERO_ONE: (gemm::c32, gemm::c32) = (gemm::c32::new(0.0, 0.0), gemm::c32::new(1.0, 0.0));
}

/// How an `m x n` product is cut into blocks, one per task: `(row parts, column parts)`, at most
/// `threads` blocks of about [`SPLIT_MIN`] rows and columns or more (one block when none fit).
/// Each task packs its own rows of `a` and columns of `b`, so among the grids with the most
/// blocks the one with the least packing (the smallest block perimeter, the fewest row parts on a
/// tie) wins: on 2 threads that is two strips of the longer side; on 16 threads a 128x256
/// product is 2x8 blocks of 64x32, not 8 strips of 128x32 that each pack all of `a`.
fn split_grid(m: usize, n: usize, threads: usize) -> (usize, usize) {
    let (most_rows, most_cols) = ((m / SPLIT_MIN).max(1), (n / SPLIT_MIN).max(1));
    let mut best = (1, 1);
    let cost = |(r, c): (usize, usize)| (usize::MAX - r * c, m.div_ceil(r) + n.div_ceil(c));
    for r in 1..=most_rows.min(threads) {
        let c = most_cols.min(threads / r);
        if cost((r, c)) < cost(best) {
            best = (r, c);
        }
    }
    best
}

fn gemm_batched<T: GemmElement>(a: &Input, b: &Input, shape: &[usize]) -> Buffer {
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.shape[nd - 1]);
    let out = alloc(shape, T::DTYPE);
    let batch = numel(&shape[..nd - 2]);
    let (sa, sb) = (&a.buffer.strides, &b.buffer.strides);
    let (pa, pb, po) = (a.buffer.ptr::<T>() as usize, b.buffer.ptr::<T>() as usize, out.ptr::<T>() as usize);
    let offset_of = |strides: &[isize], i: usize| batch_offset(&shape[..nd - 2], strides, i);
    // Rows [r0, r0 + rows) and columns [c0, c0 + cols) of product `i`.
    let block = |i: usize, (r0, rows): (usize, usize), (c0, cols): (usize, usize), par: Parallelism| unsafe {
        gemm::gemm(
            rows, cols, k,
            (po as *mut T::G).add(i * m * n + r0 * n + c0), 1, n as isize,
            false,
            (pa as *const T::G).offset(offset_of(sa, i) + r0 as isize * sa[nd - 2]), sa[nd - 1], sa[nd - 2],
            (pb as *const T::G).offset(offset_of(sb, i) + c0 as isize * sb[nd - 1]), sb[nd - 1], sb[nd - 2],
            T::ZERO_ONE.0, T::ZERO_ONE.1,
            false, false, false,
            par,
        );
    };
    let one_product = |i: usize, par: Parallelism| block(i, (0, m), (0, n), par);
    if k == 0 {
        // Empty sums: the product is all zeros.
        unsafe { std::ptr::write_bytes(po as *mut T, 0, batch * m * n) };
    } else if batch > 1 && m * n * k < (1 << 18) {
        (0..batch).into_par_iter().for_each(|i| one_product(i, Parallelism::None));
    } else {
        let threads = rayon::current_num_threads();
        for i in 0..batch {
            let work = m * n * k;
            let (row_parts, col_parts) = split_grid(m, n, threads);
            if work < SMALL_WORK || threads == 1 {
                one_product(i, Parallelism::None);
            } else if work <= SPLIT_WORK && row_parts * col_parts > 1 {
                // Measured (2 threads, Zen 4): the 784-256-10 MLP's products run 30% faster with
                // AVX2 kernels and 2% with AVX-512 ones when each thread takes a whole block of
                // the output than when the gemm crate splits them itself.
                let (rows, cols) = (m.div_ceil(row_parts), n.div_ceil(col_parts));
                (0..row_parts * col_parts).into_par_iter().for_each(|p| {
                    let (r0, c0) = ((p / col_parts) * rows, (p % col_parts) * cols);
                    if r0 < m && c0 < n {
                        block(i, (r0, rows.min(m - r0)), (c0, cols.min(n - c0)), Parallelism::None)
                    }
                });
            } else {
                one_product(i, Parallelism::Rayon(threads));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::split_grid;

    #[test]
    fn products_split_into_as_many_blocks_as_threads_with_the_least_packing() {
        // Two threads: two strips of the longer side.
        assert_eq!(split_grid(128, 256, 2), (1, 2));
        assert_eq!(split_grid(784, 256, 2), (2, 1));
        // Sixteen threads: sixteen blocks, not eight full-height strips (2x8 and 4x4 pack alike;
        // the first wins).
        assert_eq!(split_grid(128, 256, 16), (2, 8));
        // No more blocks than 32-wide pieces fit; too small to split is one block.
        assert_eq!(split_grid(784, 10, 16), (16, 1));
        assert_eq!(split_grid(40, 40, 16), (1, 1));
        assert_eq!(split_grid(128, 10, 16), (4, 1));
    }
}
