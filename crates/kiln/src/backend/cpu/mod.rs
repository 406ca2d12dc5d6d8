//! The CPU backend: one function per op family, each accepting inputs of any strides.

pub mod elementwise;
pub mod fused;
pub mod integer_matmul;
pub mod math;
pub mod matmul;
pub mod native;
pub mod parallel;
pub mod scalar;
pub mod simd;
pub mod stream;
pub mod strided;
pub mod views;

mod complex;
pub(crate) mod conv;
pub(crate) mod quantized;
mod creation;
mod fft;
mod index;
pub(crate) mod lanes;
mod random;
mod reduce;
mod scan;
mod sort;

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::primitive::Op;

/// Runs one op on the CPU.
pub fn run(op: &Op, inputs: &[Input], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    match op {
        Op::Arange { start, step, .. } => Ok(creation::arange(start.get(), step.get(), shape, dtype)),
        Op::Unary(u) => elementwise::unary(*u, &inputs[0], shape, dtype),
        Op::Binary(b) => elementwise::binary(*b, &inputs[0], &inputs[1], shape, dtype),
        Op::Select => elementwise::select(&inputs[0], &inputs[1], &inputs[2], shape),
        Op::AsType(d) => elementwise::astype(&inputs[0], *d),
        Op::View(_) => {
            let copy = strided::to_contiguous(&inputs[0], &inputs[0].shape);
            Ok(Buffer { offset: 0, strides: crate::shape::row_major_strides(shape), ..copy })
        }
        Op::Reshape { .. } => views::reshape(op.name(), &inputs[0], shape),
        Op::Transpose(perm) => Ok(views::transpose(&inputs[0], perm)),
        Op::BroadcastTo(_) | Op::BroadcastLike { .. } => Ok(views::broadcast_to(&inputs[0], shape)),
        Op::Slice { start, step, .. } => Ok(views::slice(&inputs[0], start, step)),
        Op::Concatenate { axis } => index::concatenate(inputs, *axis, shape),
        Op::SliceUpdate { start, step, .. } => index::slice_update(&inputs[0], &inputs[1], start, step),
        Op::Reduce { op, axes, .. } => reduce::reduce(*op, &inputs[0], axes, shape, dtype),
        Op::SumLike => match crate::shape::unbroadcast_axes(&inputs[0].shape, shape) {
            axes if axes.is_empty() => elementwise::astype(&inputs[0], dtype),
            axes => reduce::reduce(crate::primitive::ReduceOp::Sum, &inputs[0], &axes, shape, dtype),
        },
        Op::ArgReduce { op, axis } => reduce::arg_reduce(*op, &inputs[0], *axis, shape),
        Op::Scan { op, axis, reverse, inclusive } => {
            scan::scan(*op, &inputs[0], *axis, *reverse, *inclusive, dtype)
        }
        Op::Sort { axis } => sort::sort(&inputs[0], *axis),
        Op::ArgSort { axis } => sort::argsort(&inputs[0], *axis),
        Op::Partition { kth, axis } => sort::partition(&inputs[0], *kth, *axis),
        Op::ArgPartition { kth, axis } => sort::argpartition(&inputs[0], *kth, *axis),
        Op::Gather { axes, slice_sizes } => index::gather(inputs, axes, slice_sizes, shape),
        Op::Scatter { axes, op } => index::scatter(inputs, axes, *op),
        Op::Matmul => matmul::matmul(&inputs[0], &inputs[1], shape, dtype),
        Op::Fft { axes, kind } => fft::fft(&inputs[0], axes, *kind, shape),
        Op::RandomBits { width, .. } => random::random_bits(&inputs[0], shape, *width),
        Op::StopGradient => Ok(inputs[0].buffer.clone()),
        Op::Custom { index, .. } => Ok(inputs[*index].buffer.clone()),
        Op::Flatten { .. } | Op::Squeeze(_) | Op::ExpandDims(_) => views::reshape(op.name(), &inputs[0], shape),
        Op::Count { axes, ddof, dtype } => {
            let n = axes.iter().map(|&a| inputs[0].shape[a]).product::<usize>().saturating_sub(*ddof);
            Ok(creation::arange(n as f64, 0.0, &[1], *dtype))
        }
        Op::Kernel { call, index } => call.run_one(crate::Stream::default_for(crate::Device::cpu()), *index, inputs),
    }
}
