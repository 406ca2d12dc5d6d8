//! Gathers, scatters, concatenation and slice updates.

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::primitive::ScatterOp;

/// Joins inputs along `axis`.
pub fn concatenate(_inputs: &[Input], _axis: usize, _shape: &[usize]) -> Result<Buffer> {
    Err(Error::unsupported("concatenate", "not implemented on the CPU yet"))
}

/// A copy of `dst` with a strided region replaced by `update`.
pub fn slice_update(_dst: &Input, _update: &Input, _start: &[usize], _step: &[isize]) -> Result<Buffer> {
    Err(Error::unsupported("slice_update", "not implemented on the CPU yet"))
}

/// Gathers slices at indices.
pub fn gather(_inputs: &[Input], _axes: &[usize], _slice_sizes: &[usize], _shape: &[usize]) -> Result<Buffer> {
    Err(Error::unsupported("gather", "not implemented on the CPU yet"))
}

/// Scatters updates into a copy of the first input.
pub fn scatter(_inputs: &[Input], _axes: &[usize], _op: ScatterOp) -> Result<Buffer> {
    Err(Error::unsupported("scatter", "not implemented on the CPU yet"))
}
