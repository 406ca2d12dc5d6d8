//! The per-function cache: a bounded least-recently-used map from input signature to compiled
//! entry. Each `Compiled` owns its cache, so entries are freed with the last handle to it.

use super::state::Constant;
use crate::device::Device;
use crate::dtype::Dtype;
use crate::shape::{fmt_shape, Shape};
use crate::fast_hash::FastMap;
use std::hash::Hash;
use std::sync::Arc;

/// One input as the cache sees it: dtype and ndim, and the shape unless compiled shapeless.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct InputKey {
    pub dtype: Dtype,
    pub ndim: usize,
    pub shape: Option<Shape>,
    /// Shapeless: the axes of size 0. A trace of empty arrays holds what they make of the ops (a
    /// sum over nothing is a constant 0), so it serves only calls empty in the same axes.
    pub empty_axes: Vec<usize>,
}

impl InputKey {
    /// The key of an input of `dtype` and `shape`, which keeps the whole shape unless `shapeless`.
    pub(crate) fn new(dtype: Dtype, shape: &[usize], shapeless: bool) -> InputKey {
        InputKey {
            dtype,
            ndim: shape.len(),
            shape: (!shapeless).then(|| shape.into()),
            empty_axes: if shapeless { (0..shape.len()).filter(|&i| shape[i] == 0).collect() } else { Vec::new() },
        }
    }
}

/// What a trace depends on: the inputs (explicit, then implicit), the constants, the device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Signature {
    pub inputs: Vec<InputKey>,
    pub explicit: usize,
    pub constants: Vec<Constant>,
    pub device: Device,
}

impl Signature {
    /// Why a trace for `self` was needed when `previous` was the last signature: the first
    /// difference, in words (for the `KILN_LOG=compile` log).
    pub(crate) fn change_from(&self, previous: Option<&Signature>) -> String {
        let Some(p) = previous else { return "first call".to_string() };
        if p.explicit != self.explicit {
            return format!("argument count {} -> {}", p.explicit, self.explicit);
        }
        if p.inputs.len() != self.inputs.len() {
            return format!("implicit input count {} -> {}", p.inputs.len() - p.explicit, self.inputs.len() - self.explicit);
        }
        for (i, (a, b)) in p.inputs.iter().zip(&self.inputs).enumerate() {
            if a.dtype != b.dtype {
                return format!("input {i} dtype {} -> {}", a.dtype, b.dtype);
            }
            if a.ndim != b.ndim {
                return format!("input {i} ndim {} -> {}", a.ndim, b.ndim);
            }
            if a.empty_axes != b.empty_axes {
                return format!("input {i} empty axes {:?} -> {:?}", a.empty_axes, b.empty_axes);
            }
            if let (Some(x), Some(y)) = (&a.shape, &b.shape) {
                if x != y {
                    return format!("input {i} shape {} -> {}", fmt_shape(x), fmt_shape(y));
                }
            }
        }
        if p.constants != self.constants {
            return format!("constants {:?} -> {:?}", p.constants, self.constants);
        }
        if p.device != self.device {
            return format!("device {} -> {}", p.device, self.device);
        }
        "signature evicted from the cache".to_string()
    }
}

/// A bounded map that forgets its least recently used entry when full.
pub(crate) struct Lru<K, V> {
    map: FastMap<K, (Arc<V>, u64)>,
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty cache of at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Lru<K, V> {
        Lru { map: FastMap::default(), tick: 0, capacity: capacity.max(1) }
    }
    /// The entry for `key`, marked as just used.
    pub(crate) fn get(&mut self, key: &K) -> Option<Arc<V>> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, t)| {
            *t = tick;
            v.clone()
        })
    }
    /// Inserts `value`, evicting the least recently used entry when full.
    pub(crate) fn insert(&mut self, key: K, value: Arc<V>) {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            if let Some(old) = self.map.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| k.clone()) {
                self.map.remove(&old);
            }
        }
        self.tick += 1;
        self.map.insert(key, (value, self.tick));
    }
    /// How many entries are held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}
