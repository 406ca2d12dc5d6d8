//! Compile for C closures. A closure compiled here goes through exactly the pipeline Rust and
//! Python use (`kiln::compile_with`: trace with placeholders, simplify, fuse, cache by
//! signature, replay), so it fuses as they do; the explain and kernel-count calls show what it
//! lowered to for given inputs (seed 000's question).

use crate::closure::{closure, kiln_closure, set_closure, Body, Closure};
use crate::error::{c_error, status};
use crate::handle::{put, set};
use crate::string::kiln_string;
use crate::vector::{arrays, kiln_vector_array};
use kiln::{Array, CompileOptions};
use std::ffi::{c_int, CString};
use std::sync::Arc;

/// A compiled closure: traced on its first call for each input signature (count, dtypes, ndims
/// and, unless `shapeless`, shapes), then replayed. Compiling returns at once, without tracing.
#[no_mangle]
pub unsafe extern "C" fn kiln_compile(res: *mut kiln_closure, fun: kiln_closure, shapeless: bool) -> c_int {
    status("kiln_compile", || {
        let inner = unsafe { closure(fun, "fun") }?.body;
        let compiled = kiln::compile_with(move |a: &[Array]| inner(a), CompileOptions::new().shapeless(shapeless));
        let call = compiled.clone();
        let body: Body = Arc::new(move |a: &[Array]| call.call(a));
        unsafe { set_closure(res, body, Some(compiled)) }
    })
}

/// The compiled function of a closure made by `kiln_compile`.
fn compiled(c: &Closure) -> kiln::Result<&kiln::Compiled> {
    c.compiled.as_ref().ok_or_else(|| c_error("", "the closure was not made by kiln_compile; compile it first"))
}

/// The compile report for `inputs` (tracing first if their signature is new): the graph before
/// and after simplification, each fused kernel with its IR and how it runs (native code and
/// its C source, or interpreted and why), and the kernel counts eager and compiled.
#[no_mangle]
pub unsafe extern "C" fn kiln_compile_explain(res: *mut kiln_string, fun: kiln_closure, inputs: kiln_vector_array) -> c_int {
    status("kiln_compile_explain", || {
        let (fun, inputs) = unsafe { (closure(fun, "fun")?, arrays(inputs, "inputs")?) };
        let report = compiled(&fun)?.inspect(&inputs, &[])?;
        unsafe { set(res, CString::new(report.to_string()).expect("reports hold no NUL")) }
    })
}

/// How many kernels an eager run of the function launches for `inputs`, and how many its
/// compiled plan launches.
#[no_mangle]
pub unsafe extern "C" fn kiln_compile_kernel_count(
    eager: *mut usize,
    compiled_kernels: *mut usize,
    fun: kiln_closure,
    inputs: kiln_vector_array,
) -> c_int {
    status("kiln_compile_kernel_count", || {
        let (fun, inputs) = unsafe { (closure(fun, "fun")?, arrays(inputs, "inputs")?) };
        let report = compiled(&fun)?.inspect(&inputs, &[])?;
        unsafe {
            put(eager, report.eager_kernels, "eager")?;
            put(compiled_kernels, report.compiled_kernels, "compiled_kernels")
        }
    })
}

/// How many times a compiled closure has traced its function.
#[no_mangle]
pub unsafe extern "C" fn kiln_compile_trace_count(res: *mut usize, fun: kiln_closure) -> c_int {
    status("kiln_compile_trace_count", || {
        let fun = unsafe { closure(fun, "fun") }?;
        let n = compiled(&fun)?.trace_count();
        unsafe { put(res, n, "res") }
    })
}

/// Makes every compiled closure run its function directly (for debugging: reading arrays
/// inside it then works).
#[no_mangle]
pub extern "C" fn kiln_disable_compile() -> c_int {
    status("kiln_disable_compile", || {
        kiln::disable_compile();
        Ok(())
    })
}

/// Undoes `kiln_disable_compile` (and the environment variable `KILN_DISABLE_COMPILE`).
#[no_mangle]
pub extern "C" fn kiln_enable_compile() -> c_int {
    status("kiln_enable_compile", || {
        kiln::enable_compile();
        Ok(())
    })
}
