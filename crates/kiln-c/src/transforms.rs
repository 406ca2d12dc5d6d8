//! Function transforms over closures, as the Rust ones: vjp, jvp, value_and_grad, vmap and
//! checkpoint. The closures they return compose with each other and with compile.

use crate::closure::{closure, kiln_closure, set_closure, Body};
use crate::error::{c_error, status};
use crate::handle::{free, handles, set, slice, value};
use crate::vector::{arrays, kiln_vector_array};
use kiln::Array;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// A closure giving (values, gradients): what `kiln_value_and_grad` makes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_closure_value_and_grad {
    pub ctx: *mut c_void,
}

/// A function giving the function's outputs and the gradients of its first output.
type ValueAndGrad = Arc<dyn Fn(&[Array]) -> kiln::Result<(Vec<Array>, Vec<Array>)> + Send + Sync>;

handles!(kiln_closure_value_and_grad => ValueAndGrad);

/// The `in_axes`/`out_axes` entry of `kiln_vmap` for an argument or output without a batch axis.
pub const KILN_NO_AXIS: c_int = -2147483647;

/// Writes two vectors of arrays into `*res_0` and `*res_1`.
///
/// # Safety
/// As [`set`].
unsafe fn set_pair(res_0: *mut kiln_vector_array, res_1: *mut kiln_vector_array, (a, b): (Vec<Array>, Vec<Array>)) -> kiln::Result<()> {
    unsafe {
        set(res_0, a)?;
        set(res_1, b)
    }
}

/// vjp or jvp: a function, its primals and the seed vectors (cotangents or tangents) to the
/// outputs and the products.
type Linearize = fn(&dyn Fn(&[Array]) -> kiln::Result<Vec<Array>>, &[Array], &[Array]) -> kiln::Result<(Vec<Array>, Vec<Array>)>;

/// Runs `transform` of `fun` at `primals` with `seeds` (the argument named `seeds_name`) for
/// the C function `op`, writing its two results into `*res_0` and `*res_1`.
///
/// # Safety
/// As the C functions' contract.
#[allow(clippy::too_many_arguments)]
unsafe fn linearize(
    op: &str,
    transform: Linearize,
    res_0: *mut kiln_vector_array,
    res_1: *mut kiln_vector_array,
    fun: kiln_closure,
    primals: kiln_vector_array,
    seeds: kiln_vector_array,
    seeds_name: &str,
) -> c_int {
    status(op, || {
        let (fun, primals, seeds) = unsafe { (closure(fun, "fun")?, arrays(primals, "primals")?, arrays(seeds, seeds_name)?) };
        let out = transform(&*fun.body, &primals, &seeds)?;
        unsafe { set_pair(res_0, res_1, out) }
    })
}

/// Reverse mode: the outputs of `fun` at `primals` into `*res_0`, and the vector-Jacobian
/// products with `cotangents` (one per output) into `*res_1`, one per primal.
#[no_mangle]
pub unsafe extern "C" fn kiln_vjp(
    res_0: *mut kiln_vector_array,
    res_1: *mut kiln_vector_array,
    fun: kiln_closure,
    primals: kiln_vector_array,
    cotangents: kiln_vector_array,
) -> c_int {
    unsafe { linearize("kiln_vjp", |f, p, c| kiln::vjp(f, p, c), res_0, res_1, fun, primals, cotangents, "cotangents") }
}

/// Forward mode: the outputs of `fun` at `primals` into `*res_0`, and the Jacobian-vector
/// products with `tangents` (one per primal) into `*res_1`, one per output.
#[no_mangle]
pub unsafe extern "C" fn kiln_jvp(
    res_0: *mut kiln_vector_array,
    res_1: *mut kiln_vector_array,
    fun: kiln_closure,
    primals: kiln_vector_array,
    tangents: kiln_vector_array,
) -> c_int {
    unsafe { linearize("kiln_jvp", |f, p, t| kiln::jvp(f, p, t), res_0, res_1, fun, primals, tangents, "tangents") }
}

/// A closure giving the outputs of `fun` and the gradients of its first output (a scalar) with
/// respect to the arguments `argnums` (all of them when `argnums_num` is 0).
#[no_mangle]
pub unsafe extern "C" fn kiln_value_and_grad(
    res: *mut kiln_closure_value_and_grad,
    fun: kiln_closure,
    argnums: *const c_int,
    argnums_num: usize,
) -> c_int {
    status("kiln_value_and_grad", || {
        let fun = unsafe { closure(fun, "fun") }?;
        let argnums = unsafe { slice(argnums, argnums_num, "argnums") }?
            .iter()
            .map(|&i| usize::try_from(i).map_err(|_| c_error("", format!("argnums holds {i}; argument numbers are not negative"))))
            .collect::<kiln::Result<Vec<_>>>()?;
        let body = fun.body;
        let vg: ValueAndGrad = Arc::new(move |args: &[Array]| {
            let nums: Vec<usize> = if argnums.is_empty() { (0..args.len()).collect() } else { argnums.clone() };
            let f = |a: &[Array]| body(a);
            kiln::value_and_grad(f, &nums)(args)
        });
        unsafe { set(res, vg) }
    })
}

/// An empty value-and-grad handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_closure_value_and_grad_new() -> kiln_closure_value_and_grad {
    kiln_closure_value_and_grad { ctx: std::ptr::null_mut() }
}

/// Calls a value-and-grad closure: the outputs into `*res_0`, the gradients into `*res_1`.
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_value_and_grad_apply(
    res_0: *mut kiln_vector_array,
    res_1: *mut kiln_vector_array,
    cls: kiln_closure_value_and_grad,
    input: kiln_vector_array,
) -> c_int {
    status("kiln_closure_value_and_grad_apply", || {
        let (cls, input) = unsafe { (value(cls, "cls")?.clone(), arrays(input, "input")?) };
        let out = cls(&input)?;
        unsafe { set_pair(res_0, res_1, out) }
    })
}

/// Frees a value-and-grad handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_closure_value_and_grad_free(cls: kiln_closure_value_and_grad) -> c_int {
    status("kiln_closure_value_and_grad_free", || {
        unsafe { free(cls) };
        Ok(())
    })
}

/// Batch axes from C: `KILN_NO_AXIS` for none.
fn batch_axes(axes: &[c_int]) -> Vec<Option<i64>> {
    axes.iter().map(|&a| (a != KILN_NO_AXIS).then_some(a as i64)).collect()
}

/// A closure mapping `fun` over a batch axis: `in_axes[i]` is argument i's batch axis and
/// `out_axes[j]` output j's (`KILN_NO_AXIS`: not batched); each op runs once on the batch.
#[no_mangle]
pub unsafe extern "C" fn kiln_vmap(
    res: *mut kiln_closure,
    fun: kiln_closure,
    in_axes: *const c_int,
    in_axes_num: usize,
    out_axes: *const c_int,
    out_axes_num: usize,
) -> c_int {
    status("kiln_vmap", || {
        let fun = unsafe { closure(fun, "fun") }?;
        let ins = batch_axes(unsafe { slice(in_axes, in_axes_num, "in_axes") }?);
        let outs = batch_axes(unsafe { slice(out_axes, out_axes_num, "out_axes") }?);
        let inner = fun.body;
        let mapped = kiln::vmap(move |a: &[Array]| inner(a), &ins, &outs);
        let body: Body = Arc::new(mapped);
        unsafe { set_closure(res, body, None) }
    })
}

/// A closure computing as `fun` whose gradients recompute its intermediates instead of
/// keeping them (less memory, more compute).
#[no_mangle]
pub unsafe extern "C" fn kiln_checkpoint(res: *mut kiln_closure, fun: kiln_closure) -> c_int {
    status("kiln_checkpoint", || {
        let inner = unsafe { closure(fun, "fun") }?.body;
        let body: Body = Arc::new(kiln::checkpoint(move |a: &[Array]| inner(a)));
        unsafe { set_closure(res, body, None) }
    })
}
