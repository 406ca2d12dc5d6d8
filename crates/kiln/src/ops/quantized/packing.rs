//! The packed layout every quantization mode shares: values of `bits` bits laid out as one
//! little-endian bit stream in uint32 words (value `i` at bits `i·bits ..`), so `(..., K)`
//! values take `(..., K·bits/32)` words.

use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::ops::{arange, astype, bitwise_and, expand_dims, left_shift, multiply, reshape, right_shift, sum};

/// `shape` with its last axis replaced by `last`, as reshape arguments.
pub(crate) fn with_last(shape: &[usize], last: &[usize]) -> Vec<i64> {
    shape[..shape.len() - 1].iter().chain(last).map(|&d| d as i64).collect()
}

/// A uint32 scalar (a strong one, so uint32 arithmetic stays uint32).
pub(crate) fn word(v: u32) -> Array {
    Array::scalar(v)
}

/// Packs `(..., K)` uint32 values of `bits` bits (`K·bits` a multiple of 32) into `(...,
/// K·bits/32)` words: each value's bits are spread out, then gathered 32 at a time.
pub(crate) fn pack(q: &Array, bits: u32) -> Result<Array> {
    let (k, bits_each) = (q.shape()[q.ndim() - 1], bits as usize);
    // k·bits/32 without overflowing for huge k (k·bits is a multiple of 32).
    let words = k / 32 * bits_each + k % 32 * bits_each / 32;
    from_bits(&reshape(to_bits(q, bits)?, &with_last(q.shape(), &[words, 32]))?)
}

/// Unpacks `(..., W)` words into the `count = W·32/bits` uint32 values of `bits` bits they hold
/// (the inverse of [`pack`]).
pub(crate) fn unpack(words: &Array, bits: u32, count: usize) -> Result<Array> {
    if 32 % bits == 0 {
        // Whole values per word: shift each word by every value's offset.
        let offsets = multiply(arange(0.0, (32 / bits) as f64, 1.0, Dtype::U32)?, word(bits))?;
        let values = bitwise_and(right_shift(expand_dims(words, &[-1])?, &offsets)?, word((1 << bits) - 1))?;
        return reshape(values, &with_last(words.shape(), &[count]));
    }
    from_bits(&reshape(to_bits(words, 32)?, &with_last(words.shape(), &[count, bits as usize]))?)
}

/// The low `width` bits of each uint32 value, along a new last axis (lowest bit first, 0 or 1).
fn to_bits(x: &Array, width: u32) -> Result<Array> {
    bitwise_and(right_shift(expand_dims(x, &[-1])?, arange(0.0, width as f64, 1.0, Dtype::U32)?)?, word(1))
}

/// The uint32 values whose bits (lowest first) lie along the last axis: the inverse of
/// [`to_bits`]. No two bits share a place, so the sum with place values is an exact OR and
/// never exceeds 32 bits.
fn from_bits(bits: &Array) -> Result<Array> {
    let width = bits.shape()[bits.ndim() - 1];
    let places = left_shift(word(1), arange(0.0, width as f64, 1.0, Dtype::U32)?)?;
    astype(sum(multiply(bits, places)?, Some(&[-1]), false)?, Dtype::U32)
}
