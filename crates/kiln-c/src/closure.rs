//! Closures: C functions of a vector of arrays giving a vector of arrays, wrapped so the
//! transforms and compile take them as they take Rust functions. A closure made by `kiln_compile`
//! also keeps its compiled function, for the introspection calls.

use crate::error::{c_error, kiln_destructor, status, take_last_error};
use crate::handle::{boxed, free, handles, set, value, Release};
use crate::vector::{arrays, kiln_vector_array};
use kiln::Array;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A function of arrays, callable from C and from the transforms.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_closure {
    pub ctx: *mut c_void,
}

/// A C closure body: fills `*res` with the outputs for `input`; returns 0 on success.
pub type kiln_closure_fn = Option<unsafe extern "C" fn(res: *mut kiln_vector_array, input: kiln_vector_array) -> c_int>;

/// A C closure body with a payload (the data given to `kiln_closure_new_func_payload`).
pub type kiln_closure_payload_fn =
    Option<unsafe extern "C" fn(res: *mut kiln_vector_array, input: kiln_vector_array, payload: *mut c_void) -> c_int>;

/// A function of a list of arrays, shareable across threads (compile requires it).
pub(crate) type Body = Arc<dyn Fn(&[Array]) -> kiln::Result<Vec<Array>> + Send + Sync>;

/// A closure handle's value.
#[derive(Clone)]
pub(crate) struct Closure {
    /// What calling the closure runs.
    pub(crate) body: Body,
    /// The compiled function, for closures made by `kiln_compile`.
    pub(crate) compiled: Option<kiln::Compiled>,
}

handles!(kiln_closure => Closure);

/// The closure of handle `c`, or an error naming argument `what`.
///
/// # Safety
/// `c` is empty or a live handle of this library.
pub(crate) unsafe fn closure(c: kiln_closure, what: &str) -> kiln::Result<Closure> {
    Ok(unsafe { value(c, what) }?.clone())
}

/// Writes a closure running `body` into `*res`.
///
/// # Safety
/// As [`set`].
pub(crate) unsafe fn set_closure(res: *mut kiln_closure, body: Body, compiled: Option<kiln::Compiled>) -> kiln::Result<()> {
    unsafe { set(res, Closure { body, compiled }) }
}

/// Calls a C body on `args`: hands it a vector of the arguments and an empty result vector, and
/// turns a non-zero status into an error carrying the kiln error the body left, if any.
fn call_c(args: &[Array], call: impl FnOnce(*mut kiln_vector_array, kiln_vector_array) -> c_int) -> kiln::Result<Vec<Array>> {
    let input: kiln_vector_array = boxed(args.to_vec());
    let mut output = kiln_vector_array { ctx: std::ptr::null_mut() };
    let before = take_last_error();
    let code = call(&mut output, input);
    let left = take_last_error();
    let result = unsafe { value(output, "") }.map(std::mem::take);
    unsafe {
        free(input);
        free(output);
    }
    if code != 0 {
        let cause = if left.is_empty() { "it left no kiln error".to_string() } else { left };
        return Err(c_error("closure", format!("the C closure returned status {code}: {cause}")));
    }
    // A successful callback leaves the caller's last error as it was.
    crate::error::restore_last_error(before);
    result.map_err(|_| c_error("closure", "the C closure returned 0 without writing its result vector"))
}

/// An empty closure handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_closure_new() -> kiln_closure {
    kiln_closure { ctx: std::ptr::null_mut() }
}

/// A closure running the C function `fun`.
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_new_func(res: *mut kiln_closure, fun: kiln_closure_fn) -> c_int {
    status("kiln_closure_new_func", || {
        let fun = fun.ok_or_else(|| c_error("", "fun is a NULL function pointer"))?;
        let body: Body = Arc::new(move |args: &[Array]| call_c(args, |out, input| unsafe { fun(out, input) }));
        unsafe { set_closure(res, body, None) }
    })
}

/// The payload of a closure, passed to each call and released with the last copy of the closure.
struct Payload {
    ptr: *mut c_void,
    _release: Option<Release>,
}

// Safety: whoever makes a closure with a payload vouches that it may be used from any thread
// (compiled functions and the transforms may call the closure from worker threads).
unsafe impl Send for Payload {}
unsafe impl Sync for Payload {}

/// A closure running `fun` with `payload`; `dtor(payload)` runs when the last copy of the closure
/// (including compiled and transformed closures made from it) is freed. `dtor` may be NULL.
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_new_func_payload(
    res: *mut kiln_closure,
    fun: kiln_closure_payload_fn,
    payload: *mut c_void,
    dtor: kiln_destructor,
) -> c_int {
    status("kiln_closure_new_func_payload", || {
        let fun = fun.ok_or_else(|| c_error("", "fun is a NULL function pointer"))?;
        let payload = Arc::new(Payload { ptr: payload, _release: dtor.map(|dtor| Release { dtor, arg: payload }) });
        let body: Body = Arc::new(move |args: &[Array]| call_c(args, |out, input| unsafe { fun(out, input, payload.ptr) }));
        unsafe { set_closure(res, body, None) }
    })
}

/// Calls the closure on `input`, writing its outputs into `*res`.
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_apply(res: *mut kiln_vector_array, cls: kiln_closure, input: kiln_vector_array) -> c_int {
    status("kiln_closure_apply", || {
        let (cls, input) = unsafe { (closure(cls, "cls")?, arrays(input, "input")?) };
        unsafe { set(res, (cls.body)(&input)?) }
    })
}

/// Frees a closure handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_free(cls: kiln_closure) -> c_int {
    status("kiln_closure_free", || {
        unsafe { free(cls) };
        Ok(())
    })
}
