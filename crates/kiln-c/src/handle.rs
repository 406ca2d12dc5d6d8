//! Opaque handles: each C handle is a struct holding one pointer (`ctx`) to a boxed Rust value,
//! passed by value as in mlx-c. A handle whose `ctx` is NULL is empty: `kiln_*_new()` makes one,
//! freeing it does nothing, a function writing a result into it fills it, and passing it where a
//! value is needed is an error naming the argument (never a crash). Writing a result into a
//! filled handle replaces its value in place, so every copy of that handle sees the new value.

use crate::error::c_error;
use kiln::Result;
use std::ffi::c_void;

/// A C handle type and the Rust value it owns.
pub(crate) trait Handle: Copy {
    /// What the handle holds.
    type Value;
    /// The C type's name, for error messages.
    const NAME: &'static str;
    /// The boxed value's address (NULL when empty).
    fn ctx(self) -> *mut c_void;
    /// A handle of a boxed value's address.
    fn with_ctx(ctx: *mut c_void) -> Self;
}

/// Declares `Handle` for C handle structs (the structs themselves are written out, so cbindgen
/// sees them).
macro_rules! handles {
    ($($name:ident => $value:ty),* $(,)?) => {$(
        impl crate::handle::Handle for $name {
            type Value = $value;
            const NAME: &'static str = stringify!($name);
            fn ctx(self) -> *mut std::ffi::c_void {
                self.ctx
            }
            fn with_ctx(ctx: *mut std::ffi::c_void) -> Self {
                $name { ctx }
            }
        }
    )*};
}
pub(crate) use handles;

/// A new handle owning `value`.
pub(crate) fn boxed<H: Handle>(value: H::Value) -> H {
    H::with_ctx(Box::into_raw(Box::new(value)) as *mut c_void)
}

/// The value behind `h`, or an error naming argument `what` when the handle is empty.
///
/// # Safety
/// `h` is empty or was made by this library and not freed.
pub(crate) unsafe fn value<'a, H: Handle>(h: H, what: &str) -> Result<&'a mut H::Value> {
    let ctx = h.ctx() as *mut H::Value;
    if ctx.is_null() {
        return Err(c_error("", format!("{what} is an empty {} handle (NULL ctx): give it a value first", H::NAME)));
    }
    // Safety: a non-empty handle points at a live boxed value (the caller's contract).
    Ok(unsafe { &mut *ctx })
}

/// Writes `v` into the handle `*res` points at: replaced in place when it holds a value, boxed
/// anew when empty. A NULL `res` is an error.
///
/// # Safety
/// `res` is NULL or points at a handle that is empty or was made by this library.
pub(crate) unsafe fn set<H: Handle>(res: *mut H, v: H::Value) -> Result<()> {
    let Some(slot) = (unsafe { res.as_mut() }) else {
        return Err(c_error("", format!("the result pointer (a {}*) is NULL", H::NAME)));
    };
    match unsafe { value(*slot, "") } {
        Ok(old) => *old = v,
        Err(_) => *slot = boxed(v),
    }
    Ok(())
}

/// Drops the value of `h` (nothing for an empty handle).
///
/// # Safety
/// `h` is empty or was made by this library and not freed before.
pub(crate) unsafe fn free<H: Handle>(h: H) {
    let ctx = h.ctx() as *mut H::Value;
    if !ctx.is_null() {
        // Safety: made by `boxed`.
        drop(unsafe { Box::from_raw(ctx) });
    }
}

/// Writes a plain value through an out-pointer, or fails naming the NULL pointer.
///
/// # Safety
/// `res` is NULL or valid for a write.
pub(crate) unsafe fn put<T>(res: *mut T, v: T, what: &str) -> Result<()> {
    match unsafe { res.as_mut() } {
        Some(r) => {
            *r = v;
            Ok(())
        }
        None => Err(c_error("", format!("the result pointer {what} is NULL"))),
    }
}

/// The C array `(ptr, len)` as a slice; NULL is allowed only with `len` 0.
///
/// # Safety
/// `ptr` is NULL or valid for reads of `len` elements.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(c_error("", format!("{what} is NULL but its length is {len}")));
    }
    // Safety: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Calls a C destructor on its argument when dropped: the owner of memory or a payload that C
/// lent to kiln.
pub(crate) struct Release {
    pub(crate) dtor: unsafe extern "C" fn(*mut c_void),
    pub(crate) arg: *mut c_void,
}

// Safety: whoever lends data with a destructor vouches that both may be used from any thread.
unsafe impl Send for Release {}
unsafe impl Sync for Release {}

impl Drop for Release {
    fn drop(&mut self) {
        // Safety: handed over with this destructor.
        unsafe { (self.dtor)(self.arg) }
    }
}
