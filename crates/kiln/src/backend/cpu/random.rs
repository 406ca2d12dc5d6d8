//! Counter-based random bits: threefry2x32 with 20 rounds (Salmon et al., "Parallel random
//! numbers: as easy as 1, 2, 3"). Word pair j of the output is the encryption of counter j under
//! the key, so results do not depend on how the work is split across threads.

use super::parallel::for_chunks;
use super::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::shape::numel;

const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];

/// Encrypts the counter `(c0, c1)` under the key `(k0, k1)`.
pub fn threefry2x32(k0: u32, k1: u32, c0: u32, c1: u32) -> (u32, u32) {
    let ks = [k0, k1, 0x1BD1_1BDA ^ k0 ^ k1];
    let (mut x0, mut x1) = (c0.wrapping_add(ks[0]), c1.wrapping_add(ks[1]));
    for round in 0..20 {
        x0 = x0.wrapping_add(x1);
        x1 = x1.rotate_left(ROTATIONS[round % 8]) ^ x0;
        if round % 4 == 3 {
            let s = round / 4 + 1;
            x0 = x0.wrapping_add(ks[s % 3]);
            x1 = x1.wrapping_add(ks[(s + 1) % 3]).wrapping_add(s as u32);
        }
    }
    (x0, x1)
}

/// `shape` elements of `width` bytes per key in `key` (uint32, shape `(..., 2)`: one key or a
/// batch of them, as vmap makes): element i of a key's block is the low `width` bytes of 32-bit
/// word i of that key's threefry stream.
pub fn random_bits(key: &Input, shape: &[usize], width: usize) -> Result<Buffer> {
    if key.dtype != Dtype::U32 || key.shape.last() != Some(&2) {
        return Err(Error::value("random_bits", "the key must be a uint32 array of shape (..., 2)"));
    }
    let nk = key.shape.len() - 1;
    let dtype = match width {
        1 => Dtype::U8,
        2 => Dtype::U16,
        _ => Dtype::U32,
    };
    let block: &[usize] = &shape[nk..];
    let n = numel(block);
    let out = alloc(shape, dtype);
    let kp = key.buffer.ptr::<u32>();
    let word_stride = key.buffer.strides[nk];
    let mut k = 0;
    super::strided::for_each_offset(&key.shape[..nk], &key.buffer.strides[..nk], |off| {
        // Safety: each key offset addresses two words inside the key view.
        let (k0, k1) = unsafe { (*kp.offset(off), *kp.offset(off + word_stride)) };
        fill_block(k0, k1, out.ptr::<u8>() as usize + k * n * width, n, width);
        k += 1;
    });
    Ok(out)
}

/// Writes `n` elements of `width` bytes of the stream of key `(k0, k1)` at address `base`.
fn fill_block(k0: u32, k1: u32, base: usize, n: usize, width: usize) {
    // Chunks start at even positions so each counter's two words land in one chunk.
    for_chunks(n, 1 << 16, |start, len| {
        let mut i = start;
        while i < start + len {
            let j = (i / 2) as u64;
            let (w0, w1) = threefry2x32(k0, k1, (j >> 32) as u32, j as u32);
            for (k, w) in [w0, w1].into_iter().enumerate() {
                let pos = 2 * j as usize + k;
                if pos >= i && pos < start + len {
                    // Safety: pos < n, inside this key's block.
                    unsafe {
                        match width {
                            1 => *(base as *mut u8).add(pos) = w as u8,
                            2 => *(base as *mut u16).add(pos) = w as u16,
                            _ => *(base as *mut u32).add(pos) = w,
                        }
                    }
                }
            }
            i = 2 * j as usize + 2;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::threefry2x32;

    #[test]
    fn known_answers_from_random123() {
        assert_eq!(threefry2x32(0, 0, 0, 0), (0x6b20_0159, 0x99ba_4efe));
        assert_eq!(threefry2x32(u32::MAX, u32::MAX, u32::MAX, u32::MAX), (0x1cb9_96fc, 0xbb00_2be7));
        assert_eq!(threefry2x32(0x1319_8a2e, 0x0370_7344, 0x243f_6a88, 0x85a3_08d3), (0xc492_3a9c, 0x483d_f7a0));
    }
}
