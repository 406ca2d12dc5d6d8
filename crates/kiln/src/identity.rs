//! [`Shared`]: an `Arc` that compares and hashes by address, for values (user kernel calls,
//! custom-function calls) whose equality is "the same call", never "an equal call".

use std::ops::Deref;
use std::sync::Arc;

/// A shared value equal only to clones of itself.
pub(crate) struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// Wraps `value` as a new identity.
    pub(crate) fn new(value: T) -> Shared<T> {
        Shared(Arc::new(value))
    }

    /// The identity as a number (the allocation's address).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Shared<T> {
        Shared(self.0.clone())
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> PartialEq for Shared<T> {
    fn eq(&self, other: &Shared<T>) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> Eq for Shared<T> {}

impl<T> std::hash::Hash for Shared<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.id().hash(h)
    }
}
