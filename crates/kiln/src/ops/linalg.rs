//! Matrix products.

use super::shape::{broadcast_to, expand_dims, squeeze};
use super::{promote_pair, AsArray};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::{broadcast_shapes, fmt_shape};

/// Matrix product with numpy rules: 1-d operands are promoted to a row / column and the added axis
/// removed; leading (batch) axes broadcast. Floating-point dtypes only, as in mlx.
pub fn matmul(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let (a, b) = promote_pair(&a.as_array(), &b.as_array())?;
    if !a.dtype().is_float() {
        return Err(Error::dtype(
            "matmul",
            format!("only floating-point inputs are supported, got {}; cast with astype", a.dtype()),
        ));
    }
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::shape("matmul", "inputs must have at least one dimension; use multiply for scalars"));
    }
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    let a = if a1 { expand_dims(&a, &[0])? } else { a };
    let b = if b1 { expand_dims(&b, &[-1])? } else { b };
    let (na, nb) = (a.ndim(), b.ndim());
    if a.shape()[na - 1] != b.shape()[nb - 2] {
        return Err(Error::shape(
            "matmul",
            format!(
                "last dimension of the first input must equal the second-to-last of the second, got {} and {}",
                fmt_shape(a.shape()),
                fmt_shape(b.shape())
            ),
        ));
    }
    let batch = broadcast_shapes("matmul", &a.shape()[..na - 2], &b.shape()[..nb - 2])?;
    let with_batch = |x: &Array| -> Result<Array> {
        let n = x.ndim();
        let mut s = batch.clone();
        s.extend_from_slice(&x.shape()[n - 2..]);
        broadcast_to(x, &s)
    };
    let out = Array::from_op(Op::Matmul, vec![with_batch(&a)?, with_batch(&b)?])?;
    let out = if a1 { squeeze(&out, Some(&[-2]))? } else { out };
    if b1 { squeeze(&out, Some(&[-1])) } else { Ok(out) }
}

/// `beta * c + alpha * (a @ b)`.
pub fn addmm(c: impl AsArray, a: impl AsArray, b: impl AsArray, alpha: f64, beta: f64) -> Result<Array> {
    let ab = super::multiply(matmul(a, b)?, alpha)?;
    super::add(super::multiply(c, beta)?, ab)
}
