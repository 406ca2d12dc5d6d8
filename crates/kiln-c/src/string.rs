//! Strings handed to C (printed arrays, compile reports): NUL-terminated, owned by the handle.

use crate::error::{c_error, status};
use crate::handle::{free, handles, put, set, value};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// A string owned by kiln.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_string {
    pub ctx: *mut c_void,
}

handles!(kiln_string => CString);

/// A C string argument as UTF-8 text, or an error naming argument `what`.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(s: *const c_char, what: &str) -> kiln::Result<&'a str> {
    if s.is_null() {
        return Err(c_error("", format!("{what} is a NULL string")));
    }
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| c_error("", format!("{what} is not UTF-8")))
}

/// An empty string handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_string_new() -> kiln_string {
    kiln_string { ctx: std::ptr::null_mut() }
}

/// A string handle holding a copy of `s`.
#[no_mangle]
pub unsafe extern "C" fn kiln_string_new_data(res: *mut kiln_string, s: *const c_char) -> c_int {
    status("kiln_string_new_data", || {
        let copy = CString::new(unsafe { text(s, "s") }?).expect("a C string holds no NUL");
        unsafe { set(res, copy) }
    })
}

/// The text: `*res` is valid until the handle changes or is freed.
#[no_mangle]
pub unsafe extern "C" fn kiln_string_data(res: *mut *const c_char, s: kiln_string) -> c_int {
    status("kiln_string_data", || unsafe { put(res, value(s, "s")?.as_ptr(), "res") })
}

/// Frees a string handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_string_free(s: kiln_string) -> c_int {
    status("kiln_string_free", || {
        unsafe { free(s) };
        Ok(())
    })
}
