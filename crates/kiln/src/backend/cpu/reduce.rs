//! Reductions over axes.

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::{ArgReduceOp, ReduceOp};

/// Reduces `axes` (kept with size 1 in `shape`).
pub fn reduce(_op: ReduceOp, _x: &Input, _axes: &[usize], _shape: &[usize], _dtype: Dtype) -> Result<Buffer> {
    Err(Error::unsupported("reduce", "not implemented on the CPU yet"))
}

/// argmax / argmin along `axis`.
pub fn arg_reduce(_op: ArgReduceOp, _x: &Input, _axis: usize, _shape: &[usize]) -> Result<Buffer> {
    Err(Error::unsupported("argmax", "not implemented on the CPU yet"))
}
