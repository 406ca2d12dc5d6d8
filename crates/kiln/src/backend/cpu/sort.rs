//! Sorting and partitioning along an axis.

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// Sorts along `axis`.
pub fn sort(_x: &Input, _axis: usize) -> Result<Buffer> {
    Err(Error::unsupported("sort", "not implemented on the CPU yet"))
}

/// Sorting indices along `axis`.
pub fn argsort(_x: &Input, _axis: usize) -> Result<Buffer> {
    Err(Error::unsupported("argsort", "not implemented on the CPU yet"))
}

/// Partitions along `axis` around `kth`.
pub fn partition(_x: &Input, _kth: usize, _axis: usize) -> Result<Buffer> {
    Err(Error::unsupported("partition", "not implemented on the CPU yet"))
}

/// Partition indices along `axis`.
pub fn argpartition(_x: &Input, _kth: usize, _axis: usize) -> Result<Buffer> {
    Err(Error::unsupported("argpartition", "not implemented on the CPU yet"))
}
