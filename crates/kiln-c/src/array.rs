//! Arrays: made from C data (copied, or lent with a destructor), scalars, their shape and dtype,
//! evaluation, element reads and typed data pointers, and printing.

use crate::error::{c_error, kiln_destructor, status};
use crate::handle::{free, handles, put, set, slice, value, Release};
use crate::string::kiln_string;
use crate::vector::kiln_vector_array;
use kiln::{Array, Dtype, Element};
use std::ffi::{c_int, c_void, CString};

/// An array: a lazy node of kiln's graph (cheap to copy with `kiln_array_set`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_array {
    pub ctx: *mut c_void,
}

/// An array handle's value: the array and, once asked for, its shape as C ints.
pub(crate) struct ArraySlot {
    pub(crate) array: Array,
    shape: Vec<c_int>,
}

impl From<Array> for ArraySlot {
    fn from(array: Array) -> ArraySlot {
        ArraySlot { array, shape: Vec::new() }
    }
}

handles!(kiln_array => ArraySlot);

/// A dtype, as kiln's `KILN_*` constants (the order of `kiln::Dtype::ALL`).
pub type kiln_dtype = c_int;
/// bool.
pub const KILN_BOOL: kiln_dtype = 0;
/// uint8.
pub const KILN_UINT8: kiln_dtype = 1;
/// uint16.
pub const KILN_UINT16: kiln_dtype = 2;
/// uint32.
pub const KILN_UINT32: kiln_dtype = 3;
/// uint64.
pub const KILN_UINT64: kiln_dtype = 4;
/// int8.
pub const KILN_INT8: kiln_dtype = 5;
/// int16.
pub const KILN_INT16: kiln_dtype = 6;
/// int32.
pub const KILN_INT32: kiln_dtype = 7;
/// int64.
pub const KILN_INT64: kiln_dtype = 8;
/// float16.
pub const KILN_FLOAT16: kiln_dtype = 9;
/// bfloat16.
pub const KILN_BFLOAT16: kiln_dtype = 10;
/// float32.
pub const KILN_FLOAT32: kiln_dtype = 11;
/// float64.
pub const KILN_FLOAT64: kiln_dtype = 12;
/// complex64: two float32s per element, real part first.
pub const KILN_COMPLEX64: kiln_dtype = 13;

/// The kiln dtype of a C dtype code.
pub(crate) fn dtype(code: kiln_dtype) -> kiln::Result<Dtype> {
    usize::try_from(code)
        .ok()
        .and_then(|i| Dtype::ALL.get(i).copied())
        .ok_or_else(|| c_error("", format!("dtype code {code} is not a kiln_dtype (use KILN_BOOL .. KILN_COMPLEX64)")))
}

/// The C dtype code of a kiln dtype.
pub(crate) fn dtype_code(d: Dtype) -> kiln_dtype {
    Dtype::ALL.iter().position(|&x| x == d).expect("ALL lists every dtype") as kiln_dtype
}

/// The array of handle `a` (a cheap clone), or an error naming argument `what`.
///
/// # Safety
/// `a` is empty or a live handle of this library.
pub(crate) unsafe fn array(a: kiln_array, what: &str) -> kiln::Result<Array> {
    Ok(unsafe { value(a, what) }?.array.clone())
}

/// An array handle's array if it has one (optional arguments, such as a random key).
///
/// # Safety
/// `a` is empty or a live handle of this library.
pub(crate) unsafe fn optional_array(a: kiln_array) -> Option<Array> {
    unsafe { value(a, "") }.ok().map(|s| s.array.clone())
}

/// Writes an array into the handle `res` points at.
///
/// # Safety
/// As [`set`].
pub(crate) unsafe fn set_array(res: *mut kiln_array, a: Array) -> kiln::Result<()> {
    unsafe { set(res, ArraySlot::from(a)) }
}

/// A shape from C ints, each non-negative.
///
/// # Safety
/// `shape` is NULL or valid for `ndim` reads.
pub(crate) unsafe fn shape(shape: *const c_int, ndim: usize, what: &str) -> kiln::Result<Vec<usize>> {
    unsafe { slice(shape, ndim, what) }?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| c_error("", format!("{what} has a negative dimension {d}"))))
        .collect()
}

/// An empty array handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_array_new() -> kiln_array {
    kiln_array { ctx: std::ptr::null_mut() }
}

/// Frees an array handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_free(a: kiln_array) -> c_int {
    status("kiln_array_free", || {
        unsafe { free(a) };
        Ok(())
    })
}

/// Makes `*res` refer to the same array as `src` (arrays are immutable: nothing is copied).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_set(res: *mut kiln_array, src: kiln_array) -> c_int {
    status("kiln_array_set", || unsafe { set_array(res, array(src, "src")?) })
}

/// An array of `shape` and `dtype` holding a copy of the row-major elements at `data`.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_data(
    res: *mut kiln_array,
    data: *const c_void,
    shape: *const c_int,
    ndim: usize,
    dtype: kiln_dtype,
) -> c_int {
    status("kiln_array_new_data", || {
        let (shape, dtype) = (unsafe { self::shape(shape, ndim, "shape") }?, self::dtype(dtype)?);
        let bytes = shape.iter().product::<usize>() * dtype.size();
        let data = unsafe { slice(data as *const u8, bytes, "data") }?;
        unsafe { set_array(res, Array::from_bytes(data, &shape, dtype)?) }
    })
}

/// An array over the caller's row-major elements at `data`, without a copy. kiln only reads
/// them and calls `dtor(payload)` once no array uses them (`dtor` may be NULL); nothing may
/// write to them meanwhile.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_data_managed_payload(
    res: *mut kiln_array,
    data: *mut c_void,
    shape: *const c_int,
    ndim: usize,
    dtype: kiln_dtype,
    payload: *mut c_void,
    dtor: kiln_destructor,
) -> c_int {
    status("kiln_array_new_data_managed_payload", || {
        let (shape, dtype) = (unsafe { self::shape(shape, ndim, "shape") }?, self::dtype(dtype)?);
        let owner: Box<dyn Send + Sync> = match dtor {
            Some(dtor) => Box::new(Release { dtor, arg: payload }),
            None => Box::new(()),
        };
        // Safety: the caller lends the memory on the terms documented above.
        let a = unsafe { Array::from_host_memory(data as *const u8, &shape, dtype, owner) }?;
        unsafe { set_array(res, a) }
    })
}

/// As `kiln_array_new_data_managed_payload` with `data` itself as the destructor's argument.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_data_managed(
    res: *mut kiln_array,
    data: *mut c_void,
    shape: *const c_int,
    ndim: usize,
    dtype: kiln_dtype,
    dtor: kiln_destructor,
) -> c_int {
    unsafe { kiln_array_new_data_managed_payload(res, data, shape, ndim, dtype, data, dtor) }
}

fn new_scalar<T: Element>(res: *mut kiln_array, v: T, op: &str) -> c_int {
    status(op, || unsafe { set_array(res, Array::scalar(v)) })
}

/// A 0-d bool array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_bool(res: *mut kiln_array, v: bool) -> c_int {
    new_scalar(res, v, "kiln_array_new_bool")
}

/// A 0-d int32 array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_int(res: *mut kiln_array, v: c_int) -> c_int {
    new_scalar(res, v, "kiln_array_new_int")
}

/// A 0-d int64 array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_int64(res: *mut kiln_array, v: i64) -> c_int {
    new_scalar(res, v, "kiln_array_new_int64")
}

/// A 0-d float32 array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_float32(res: *mut kiln_array, v: f32) -> c_int {
    new_scalar(res, v, "kiln_array_new_float32")
}

/// A 0-d float64 array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_new_float64(res: *mut kiln_array, v: f64) -> c_int {
    new_scalar(res, v, "kiln_array_new_float64")
}

/// The number of dimensions.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_ndim(res: *mut usize, a: kiln_array) -> c_int {
    status("kiln_array_ndim", || unsafe { put(res, array(a, "a")?.ndim(), "res") })
}

/// The number of elements.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_size(res: *mut usize, a: kiln_array) -> c_int {
    status("kiln_array_size", || unsafe { put(res, array(a, "a")?.size(), "res") })
}

/// The number of bytes of the elements.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_nbytes(res: *mut usize, a: kiln_array) -> c_int {
    status("kiln_array_nbytes", || unsafe { put(res, array(a, "a")?.nbytes(), "res") })
}

/// The dtype.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_dtype(res: *mut kiln_dtype, a: kiln_array) -> c_int {
    status("kiln_array_dtype", || unsafe { put(res, dtype_code(array(a, "a")?.dtype()), "res") })
}

/// The shape: `*res` points at `ndim` ints owned by the handle, valid until it changes or is freed.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_shape(res: *mut *const c_int, a: kiln_array) -> c_int {
    status("kiln_array_shape", || {
        let slot = unsafe { value(a, "a") }?;
        slot.shape = slot
            .array
            .shape()
            .iter()
            .map(|&d| c_int::try_from(d).map_err(|_| c_error("", format!("dimension {d} does not fit a C int"))))
            .collect::<kiln::Result<_>>()?;
        unsafe { put(res, slot.shape.as_ptr(), "res") }
    })
}

/// The size of dimension `axis` (negative counts from the end).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_dim(res: *mut c_int, a: kiln_array, axis: c_int) -> c_int {
    status("kiln_array_dim", || {
        let d = unsafe { array(a, "a") }?.dim(axis as i64)?;
        let d = c_int::try_from(d).map_err(|_| c_error("", format!("dimension {d} does not fit a C int")))?;
        unsafe { put(res, d, "res") }
    })
}

/// Evaluates the array (computes it now).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_eval(a: kiln_array) -> c_int {
    status("kiln_array_eval", || unsafe { array(a, "a") }?.eval())
}

/// Evaluates the arrays together, sharing their common work.
#[no_mangle]
pub unsafe extern "C" fn kiln_eval(arrays: kiln_vector_array) -> c_int {
    status("kiln_eval", || {
        let arrays = unsafe { value(arrays, "arrays") }?;
        kiln::eval(&arrays.iter().collect::<Vec<_>>())
    })
}

/// The array printed as text (as Python's `print`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_tostring(res: *mut kiln_string, a: kiln_array) -> c_int {
    status("kiln_array_tostring", || {
        let text = format!("{}", unsafe { array(a, "a") }?);
        unsafe { set(res, CString::new(text).expect("printed arrays hold no NUL")) }
    })
}

fn item<T: Element>(op: &str, res: *mut T, a: kiln_array) -> c_int {
    status(op, || {
        let a = unsafe { array(a, "a") }?;
        if a.dtype() != T::DTYPE {
            return Err(c_error(
                "",
                format!("the array's dtype is {}, not {}: convert it with kiln_astype first", a.dtype(), T::DTYPE),
            ));
        }
        unsafe { put(res, a.item::<T>()?, "res") }
    })
}

/// Evaluates `a` and returns the address of its elements in row-major order on the host: a
/// strided view is replaced in the handle by a row-major copy first, which the handle keeps.
fn data_of(op: &str, a: kiln_array, want: Option<Dtype>) -> kiln::Result<*const c_void> {
    let slot = unsafe { value(a, "a") }?;
    if let Some(want) = want.filter(|&w| w != slot.array.dtype()) {
        return Err(c_error(
            op,
            format!("the array's dtype is {}, not {want}: convert it with kiln_astype first", slot.array.dtype()),
        ));
    }
    let (row_major, ptr) = slot.array.row_major_parts()?;
    slot.array = row_major;
    Ok(ptr as *const c_void)
}

fn data<T: Element>(op: &str, res: *mut *const T, a: kiln_array) -> c_int {
    status(op, || unsafe { put(res, data_of(op, a, Some(T::DTYPE))? as *const T, "res") })
}

/// The address of the elements, row-major on the host, whatever the dtype (float16 and bfloat16
/// as 16-bit words); valid while the handle holds this array.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data(res: *mut *const c_void, a: kiln_array) -> c_int {
    status("kiln_array_data", || unsafe { put(res, data_of("kiln_array_data", a, None)?, "res") })
}

/// The one element of a bool array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_bool(res: *mut bool, a: kiln_array) -> c_int {
    item("kiln_array_item_bool", res, a)
}
/// The one element of a uint8 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_uint8(res: *mut u8, a: kiln_array) -> c_int {
    item("kiln_array_item_uint8", res, a)
}
/// The one element of a uint32 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_uint32(res: *mut u32, a: kiln_array) -> c_int {
    item("kiln_array_item_uint32", res, a)
}
/// The one element of a uint64 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_uint64(res: *mut u64, a: kiln_array) -> c_int {
    item("kiln_array_item_uint64", res, a)
}
/// The one element of an int32 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_int32(res: *mut i32, a: kiln_array) -> c_int {
    item("kiln_array_item_int32", res, a)
}
/// The one element of an int64 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_int64(res: *mut i64, a: kiln_array) -> c_int {
    item("kiln_array_item_int64", res, a)
}
/// The one element of a float32 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_float32(res: *mut f32, a: kiln_array) -> c_int {
    item("kiln_array_item_float32", res, a)
}
/// The one element of a float64 array of size 1.
#[no_mangle]
pub unsafe extern "C" fn kiln_array_item_float64(res: *mut f64, a: kiln_array) -> c_int {
    item("kiln_array_item_float64", res, a)
}

/// The elements of a bool array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_bool(res: *mut *const bool, a: kiln_array) -> c_int {
    data("kiln_array_data_bool", res, a)
}
/// The elements of a uint8 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_uint8(res: *mut *const u8, a: kiln_array) -> c_int {
    data("kiln_array_data_uint8", res, a)
}
/// The elements of a uint32 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_uint32(res: *mut *const u32, a: kiln_array) -> c_int {
    data("kiln_array_data_uint32", res, a)
}
/// The elements of a uint64 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_uint64(res: *mut *const u64, a: kiln_array) -> c_int {
    data("kiln_array_data_uint64", res, a)
}
/// The elements of an int32 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_int32(res: *mut *const i32, a: kiln_array) -> c_int {
    data("kiln_array_data_int32", res, a)
}
/// The elements of an int64 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_int64(res: *mut *const i64, a: kiln_array) -> c_int {
    data("kiln_array_data_int64", res, a)
}
/// The elements of a float32 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_float32(res: *mut *const f32, a: kiln_array) -> c_int {
    data("kiln_array_data_float32", res, a)
}
/// The elements of a float64 array (see `kiln_array_data`).
#[no_mangle]
pub unsafe extern "C" fn kiln_array_data_float64(res: *mut *const f64, a: kiln_array) -> c_int {
    data("kiln_array_data_float64", res, a)
}
