//! Status codes and error reporting: every C function returns 0 on success and 1 on failure,
//! with the message (the same text as the Rust error: op, shapes, dtypes, the fix) kept per
//! thread for `kiln_last_error` and passed to the error handler, if one is installed. No Rust
//! panic crosses the boundary: a panic becomes an error naming it as a bug.

use kiln::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A function called with every error's message, and the data given with it.
pub type kiln_error_handler = Option<unsafe extern "C" fn(msg: *const c_char, data: *mut c_void)>;

/// A destructor of data handed to kiln (an error handler's data, a closure's payload).
pub type kiln_destructor = Option<unsafe extern "C" fn(data: *mut c_void)>;

struct Handler {
    call: unsafe extern "C" fn(*const c_char, *mut c_void),
    data: *mut c_void,
    dtor: kiln_destructor,
}

// Safety: the caller who installs a handler vouches that it and its data may be used from any
// thread (as with mlx-c's handler).
unsafe impl Send for Handler {}

impl Drop for Handler {
    fn drop(&mut self) {
        if let Some(dtor) = self.dtor {
            // Safety: the data was handed over with this destructor.
            unsafe { dtor(self.data) };
        }
    }
}

static HANDLER: Mutex<Option<Handler>> = Mutex::new(None);

/// An error of the C layer itself (a NULL or empty handle, a bad argument) in `op`.
pub(crate) fn c_error(op: &str, message: impl Into<String>) -> Error {
    Error::new(op, ErrorKind::Value, message)
}

fn report(message: String) {
    let text = CString::new(message.replace('\0', "\\0")).expect("NULs were replaced");
    // Released before the call, so a handler may call kiln (and fail) itself.
    let handler = HANDLER.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|h| (h.call, h.data));
    if let Some((call, data)) = handler {
        // Safety: installed by kiln_set_error_handler with this data.
        unsafe { call(text.as_ptr(), data) };
    }
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs the body of C function `op`: 0 when it succeeds, else 1 with its error reported. Errors
/// raised by the C layer's helpers without an op are given `op`'s name.
pub(crate) fn status(op: &str, body: impl FnOnce() -> kiln::Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(mut e)) => {
            if e.op.is_empty() {
                e.op = op.to_string();
            }
            report(e.to_string());
            1
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            report(format!("{op}: internal error, a bug in kiln (please report it): {what}"));
            1
        }
    }
}

/// Clears this thread's last error and returns its message (the closure layer reads what a C
/// callback left behind).
pub(crate) fn take_last_error() -> String {
    LAST_ERROR.with(|e| std::mem::take(&mut *e.borrow_mut())).to_string_lossy().into_owned()
}

/// Sets this thread's last error message back to `message`.
pub(crate) fn restore_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(message).unwrap_or_default());
}

/// The message of the last error on this thread (empty before any), valid until the next error
/// on this thread.
#[no_mangle]
pub extern "C" fn kiln_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Sets this thread's last error message: a closure body calls it before returning a non-zero
/// status, and the error kiln reports for the failed closure call carries `msg`.
#[no_mangle]
pub unsafe extern "C" fn kiln_set_last_error(msg: *const c_char) -> c_int {
    status("kiln_set_last_error", || {
        let text = unsafe { crate::string::text(msg, "msg") }?;
        restore_last_error(text.to_string());
        Ok(())
    })
}

/// Installs `handler`, called with each error's message and `data` (on the thread that failed)
/// before the function returns its status; NULL removes it. `dtor`, if not NULL, is called on
/// `data` when the handler is replaced.
#[no_mangle]
pub extern "C" fn kiln_set_error_handler(handler: kiln_error_handler, data: *mut c_void, dtor: kiln_destructor) -> c_int {
    status("kiln_set_error_handler", || {
        let new = handler.map(|call| Handler { call, data, dtor });
        let old = std::mem::replace(&mut *HANDLER.lock().unwrap_or_else(|e| e.into_inner()), new);
        drop(old);
        Ok(())
    })
}
