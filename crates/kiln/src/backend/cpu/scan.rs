//! Cumulative scans.

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::ScanOp;

/// A cumulative op along `axis`.
pub fn scan(_op: ScanOp, _x: &Input, _axis: usize, _reverse: bool, _inclusive: bool, _dtype: Dtype) -> Result<Buffer> {
    Err(Error::unsupported("cumsum", "not implemented on the CPU yet"))
}
