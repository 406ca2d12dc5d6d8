//! What a compiled function sees besides its array arguments: non-array constants (part of the
//! cache key) and shared lists of arrays it reads or writes implicitly (model and optimizer state).

use crate::array::Array;
use crate::primitive::F64Bits;
use std::sync::{Arc, Mutex, MutexGuard};

/// A non-array argument of a compiled function. Constants are part of the cache key: calling with
/// a different constant traces again, as a Python int or string argument does in mlx.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Constant {
    /// Python's `None`.
    None,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float, compared by its bits (so NaN equals itself and -0.0 differs from 0.0).
    Float(F64Bits),
    /// A string.
    Str(String),
    /// A tuple of constants.
    Tuple(Vec<Constant>),
}

impl Constant {
    /// The float value, if this is a float or an int.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Constant::Float(v) => Some(v.get()),
            Constant::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
}

impl From<bool> for Constant {
    fn from(v: bool) -> Constant {
        Constant::Bool(v)
    }
}
impl From<i64> for Constant {
    fn from(v: i64) -> Constant {
        Constant::Int(v)
    }
}
impl From<f64> for Constant {
    fn from(v: f64) -> Constant {
        Constant::Float(F64Bits::new(v))
    }
}
impl From<&str> for Constant {
    fn from(v: &str) -> Constant {
        Constant::Str(v.to_string())
    }
}

/// A shared, mutable list of arrays: the Rust form of the Python lists that `compile(inputs=...,
/// outputs=...)` captures. Clones share one list. A compiled function declared with a list as an
/// implicit input reads its current arrays on every call; declared as an implicit output, the
/// arrays the function leaves in it are written back after every call.
#[derive(Clone, Default)]
pub struct ArrayList(Arc<Mutex<Vec<Array>>>);

impl ArrayList {
    /// A list holding `arrays`.
    pub fn new(arrays: Vec<Array>) -> ArrayList {
        ArrayList(Arc::new(Mutex::new(arrays)))
    }
    fn lock(&self) -> MutexGuard<'_, Vec<Array>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Array `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Array> {
        self.lock().get(i).cloned()
    }
    /// Replaces array `i` (panics past the end, like slice indexing).
    pub fn set(&self, i: usize, a: Array) {
        self.lock()[i] = a;
    }
    /// Appends an array.
    pub fn push(&self, a: Array) {
        self.lock().push(a);
    }
    /// How many arrays the list holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }
    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
    /// A copy of the arrays.
    pub fn to_vec(&self) -> Vec<Array> {
        self.lock().clone()
    }
    /// Replaces the whole content, returning the old one.
    pub fn replace(&self, arrays: Vec<Array>) -> Vec<Array> {
        std::mem::replace(&mut *self.lock(), arrays)
    }
    /// Whether two handles share one list.
    pub fn same_list(&self, other: &ArrayList) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// State a compiled function reads or writes besides its arguments.
#[derive(Clone)]
pub enum Implicit {
    /// A list of arrays.
    List(ArrayList),
    /// The global random state ([`crate::random::state`]): declare it as input and output so that
    /// random draws inside a compiled function differ from call to call.
    RandomState,
}

impl Implicit {
    /// The arrays this state holds now.
    pub(crate) fn read(&self) -> Vec<Array> {
        match self {
            Implicit::List(l) => l.to_vec(),
            Implicit::RandomState => vec![crate::random::state()],
        }
    }
}
