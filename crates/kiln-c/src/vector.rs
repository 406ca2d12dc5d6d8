//! Vectors of arrays: the arguments and results of closures, and the operands of ops that take
//! or give several arrays.

use crate::array::{array, kiln_array, set_array};
use crate::error::{c_error, status};
use crate::handle::{boxed, free, handles, put, set, slice, value};
use kiln::Array;
use std::ffi::{c_int, c_void};

/// A vector of arrays.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_vector_array {
    pub ctx: *mut c_void,
}

handles!(kiln_vector_array => Vec<Array>);

/// The arrays of handle `v`, or an error naming argument `what`.
///
/// # Safety
/// `v` is empty or a live handle of this library.
pub(crate) unsafe fn arrays(v: kiln_vector_array, what: &str) -> kiln::Result<Vec<Array>> {
    Ok(unsafe { value(v, what) }?.clone())
}

/// A new, empty vector (ready for `kiln_vector_array_append_value`).
#[no_mangle]
pub extern "C" fn kiln_vector_array_new() -> kiln_vector_array {
    boxed(Vec::new())
}

/// A vector of the `n` arrays at `data`.
#[no_mangle]
pub unsafe extern "C" fn kiln_vector_array_new_data(res: *mut kiln_vector_array, data: *const kiln_array, n: usize) -> c_int {
    status("kiln_vector_array_new_data", || {
        let handles = unsafe { slice(data, n, "data") }?;
        let v = handles.iter().enumerate().map(|(i, &a)| unsafe { array(a, &format!("data[{i}]")) }).collect::<kiln::Result<_>>()?;
        unsafe { set(res, v) }
    })
}

/// Appends `a` to the vector `v`.
#[no_mangle]
pub unsafe extern "C" fn kiln_vector_array_append_value(v: kiln_vector_array, a: kiln_array) -> c_int {
    status("kiln_vector_array_append_value", || {
        let a = unsafe { array(a, "a") }?;
        unsafe { value(v, "v") }?.push(a);
        Ok(())
    })
}

/// The number of arrays in `v`.
#[no_mangle]
pub unsafe extern "C" fn kiln_vector_array_size(res: *mut usize, v: kiln_vector_array) -> c_int {
    status("kiln_vector_array_size", || unsafe { put(res, value(v, "v")?.len(), "res") })
}

/// Array `index` of `v`.
#[no_mangle]
pub unsafe extern "C" fn kiln_vector_array_get(res: *mut kiln_array, v: kiln_vector_array, index: usize) -> c_int {
    status("kiln_vector_array_get", || {
        let v = unsafe { value(v, "v") }?;
        let a = v.get(index).ok_or_else(|| c_error("", format!("index {index} is out of range for a vector of {} arrays", v.len())))?;
        unsafe { set_array(res, a.clone()) }
    })
}

/// Frees a vector handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_vector_array_free(v: kiln_vector_array) -> c_int {
    status("kiln_vector_array_free", || {
        unsafe { free(v) };
        Ok(())
    })
}
