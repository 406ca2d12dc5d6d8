//! Matrix products through the `gemm` crate, which takes arbitrary row and column strides, so
//! transposed and sliced operands are multiplied without copies. float16 and bfloat16 go through
//! float32; integers and booleans through [`super::integer_matmul`].

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

fn gemm_batched<T: Element>(a: &Input, b: &Input, shape: &[usize]) -> Buffer {
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.shape[nd - 1]);
    let out = alloc(shape, T::DTYPE);
    let batch = numel(&shape[..nd - 2]);
    let (sa, sb) = (&a.buffer.strides, &b.buffer.strides);
    let (pa, pb, po) = (a.buffer.ptr::<T>() as usize, b.buffer.ptr::<T>() as usize, out.ptr::<T>() as usize);
    let offset_of = |strides: &[isize], i: usize| batch_offset(&shape[..nd - 2], strides, i);
    let one_product = |i: usize, par: Parallelism| unsafe {
        gemm::gemm(
            m, n, k,
            (po as *mut T).add(i * m * n), 1, n as isize,
            false,
            (pa as *const T).offset(offset_of(sa, i)), sa[nd - 1], sa[nd - 2],
            (pb as *const T).offset(offset_of(sb, i)), sb[nd - 1], sb[nd - 2],
            T::from_f64(0.0), T::from_f64(1.0),
            false, false, false,
            par,
        );
    };
    if k == 0 {
        // Empty sums: the product is all zeros.
        unsafe { std::ptr::write_bytes(po as *mut T, 0, batch * m * n) };
    } else if batch > 1 && m * n * k < (1 << 18) {
        (0..batch).into_par_iter().for_each(|i| one_product(i, Parallelism::None));
    } else {
        let threads = rayon::current_num_threads();
        for i in 0..batch {
            one_product(i, if m * n * k < (1 << 15) { Parallelism::None } else { Parallelism::Rayon(threads) });
        }
    }
    out
}
