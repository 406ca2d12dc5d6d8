//! A fast hasher for kiln's internal lookup tables (loaded kernels, compile caches, kept device
//! blocks, the nodes an eval has seen), which are used on every op or call: their keys are kiln's own values, never
//! input an attacker chooses, so the standard library's DoS-resistant SipHash buys nothing there
//! and costs a measurable part of a tiny GPU op. One multiply and rotate per 8 bytes, as
//! rustc's FxHash.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Odd multiplier spreading each word over the high bits (as FxHash's).
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// The hasher: a running word, rotated and mixed with each value written.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` hashed with [`FastHasher`]; make one with `FastMap::default()`.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` hashed with [`FastHasher`]; make one with `FastSet::default()`.
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(v)
    }

    #[test]
    fn equal_keys_hash_alike_and_near_keys_differ() {
        assert_eq!(hash(&(vec![1u32, 2, 3], "abc")), hash(&(vec![1u32, 2, 3], "abc")));
        let mut seen = std::collections::HashSet::new();
        for a in 0..64u64 {
            for b in 0..64u64 {
                seen.insert(hash(&(a, b)));
            }
        }
        assert_eq!(seen.len(), 64 * 64, "small tuples must not collide");
        // Byte strings that differ only by a trailing zero hash apart.
        let bytes = |b: &[u8]| {
            let mut h = FastHasher::default();
            h.write(b);
            h.finish()
        };
        assert_ne!(bytes(&[1, 2]), bytes(&[1, 2, 0]));
        let mut map: FastMap<Vec<u8>, usize> = FastMap::default();
        map.insert(b"kernel".to_vec(), 7);
        assert_eq!(map.get(b"kernel".as_slice()), Some(&7));
    }
}
