//! Counter-based random bits (threefry2x32).

use crate::backend::Input;
use crate::buffer::Buffer;
use crate::error::{Error, Result};

/// `shape` random elements of `width` bytes from a key.
pub fn random_bits(_key: &Input, _shape: &[usize], _width: usize) -> Result<Buffer> {
    Err(Error::unsupported("random_bits", "not implemented on the CPU yet"))
}
