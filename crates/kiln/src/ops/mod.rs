//! Public op constructors, one file per family, with mlx.core's names. Constructors validate
//! arguments (naming the op, shapes and dtypes in errors), apply type promotion, and build graph
//! nodes; nothing is computed until evaluation.

pub mod conv;
pub mod creation;
pub mod derived;
pub mod einsum;
pub mod elementwise;
pub mod fast;
pub mod fft;
pub mod fp8;
pub mod hadamard;
pub mod index;
pub mod linalg;
pub mod quantized;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod sort;
pub mod windows;

pub use conv::*;
pub use creation::*;
pub use derived::*;
pub use einsum::*;
pub use elementwise::*;
pub use fp8::{from_fp8, to_fp8};
pub use hadamard::hadamard_transform;
pub use index::*;
pub use linalg::*;
pub use quantized::{dequantize, gather_qmm, qqmm, quantize, quantize_float, quantized_matmul, FloatFormat, Scheme};
pub use reduce::*;
pub use shape::*;
pub use sort::*;
pub use windows::*;

use crate::array::{Array, Literal};
use crate::dtype::{promote, Dtype};
use crate::error::{Error, Result};
use crate::primitive::Op;

/// Anything an op accepts as an array argument: arrays (owned or borrowed) and Rust numbers.
/// Numbers are *weak* scalars, as Python numbers are in mlx: `x_f16 * 2.0` stays float16.
/// `bool` is a strong bool scalar.
pub trait AsArray {
    /// The value as an array.
    fn as_array(&self) -> Array;
}

impl AsArray for Array {
    fn as_array(&self) -> Array {
        self.clone()
    }
}

impl<T: AsArray + ?Sized> AsArray for &T {
    fn as_array(&self) -> Array {
        (**self).as_array()
    }
}

impl AsArray for f64 {
    fn as_array(&self) -> Array {
        Array::weak_float(*self)
    }
}

impl AsArray for f32 {
    fn as_array(&self) -> Array {
        Array::weak_float(*self as f64)
    }
}

impl AsArray for i64 {
    fn as_array(&self) -> Array {
        Array::weak_int(*self)
    }
}

impl AsArray for i32 {
    fn as_array(&self) -> Array {
        Array::weak_int(*self as i64)
    }
}

impl AsArray for bool {
    fn as_array(&self) -> Array {
        Array::scalar(*self)
    }
}

/// `x` converted to `dtype`; a weak literal is rebuilt in `dtype` from its exact value instead of
/// being rounded through its default dtype first.
pub(crate) fn cast(x: &Array, dtype: Dtype) -> Result<Array> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    let source = match x.literal() {
        Some(Literal::Int(v)) => Array::scalar(v),
        Some(Literal::Float(v)) => Array::scalar(v),
        None => x.clone(),
    };
    if source.dtype() == dtype {
        return Ok(source);
    }
    Array::from_op(Op::AsType(dtype), vec![source])
}

/// Promotes two operands of `op` to their common dtype (weak scalars adopt the other's dtype). A
/// Python int that the other operand's integer dtype cannot hold is an error, as in mlx (it would
/// otherwise wrap or saturate silently).
pub(crate) fn promote_pair(op: &str, a: &Array, b: &Array) -> Result<(Array, Array)> {
    let dt = promote(a.dtype(), a.is_weak(), b.dtype(), b.is_weak());
    for x in [a, b] {
        if let (Some(Literal::Int(v)), true) = (x.literal(), dt.is_integer()) {
            if !dt.holds_integer(v) {
                return Err(Error::value(
                    op,
                    format!(
                        "the Python int {v} does not fit the other operand's dtype {dt}; make the operands \
                         one wider dtype first (e.g. astype(int64))"
                    ),
                ));
            }
        }
    }
    Ok((cast(a, dt)?, cast(b, dt)?))
}
