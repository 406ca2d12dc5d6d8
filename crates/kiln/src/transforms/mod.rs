//! Function transformations as graph rewrites over the op enum: reverse mode (`vjp`, `grad`,
//! `value_and_grad`), forward mode (`jvp`), batching (`vmap`), `checkpoint` and
//! `custom_function`. Every op carries its own rules (`vjp_rules`, `jvp_rules`, `batching`), each
//! a `match` over [`crate::primitive::Op`] without a catch-all, so a new op cannot be added
//! without deciding its derivative and its batching rule. (The architecture guide places these
//! rules on the op enum in `primitive.rs`; they live here so that file stays about shapes and
//! dtypes and the rules can use the public ops. The exhaustive matches keep the same guarantee.)
//!
//! Autodiff runs the function on *tracers* (identity views of the primal values, so the function
//! may still read values), then walks the graph between the tracers and the outputs. Rules build
//! their results from ordinary ops, so derivatives are themselves differentiable (grad of grad,
//! jvp of vjp) and every transform nests with the others. vmap traces the function once on
//! data-less placeholders of the per-example shape and rewrites that graph with batching rules.
//!
//! ```
//! use kiln::{grad, ops, vmap, Array};
//! // f(x, y) = sum(sin(x) * y); functions take and return lists of arrays.
//! let f = |a: &[Array]| Ok(vec![ops::sum(ops::multiply(ops::sin(&a[0])?, &a[1])?, None, false)?]);
//! let x = Array::from_vec(vec![0.0f64, 1.0]);
//! let y = Array::from_vec(vec![2.0f64, 3.0]);
//! let d = grad(f, &[0, 1])(&[x.clone(), y.clone()]).unwrap();
//! assert_eq!(d[0].to_vec::<f64>().unwrap(), vec![2.0, 3.0 * 1f64.cos()]);
//! // Second derivative of sum(sin(x) * y) in x: -sin(x) * y.
//! let dx = move |a: &[Array]| Ok(vec![ops::sum(&grad(f, &[0])(a)?[0], None, false)?]);
//! let d2 = grad(dx, &[0])(&[x.clone(), y.clone()]).unwrap();
//! assert_eq!(d2[0].to_vec::<f64>().unwrap(), vec![0.0, -3.0 * 1f64.sin()]);
//! // One gradient per row of a batch of x, y shared: each op runs once on the whole batch.
//! let xs = Array::from_slice(&[0.0f64, 1.0, 2.0, 3.0], &[2, 2]).unwrap();
//! let per_row = vmap(grad(f, &[0]), &[Some(0), None], &[Some(0)]);
//! assert_eq!(per_row(&[xs, y]).unwrap()[0].shape(), &[2, 2]);
//! ```

pub mod autodiff;
pub mod compile;
pub mod custom;
pub mod vmap;

mod batching;
mod graph;
mod jvp_rules;
mod vjp_rules;

pub use autodiff::{grad, jvp, stop_gradient, value_and_grad, vjp};
pub use custom::{checkpoint, depends, CustomFunction};
pub use vmap::vmap;
pub use compile::{
    compile, compile_fn, compile_with, compile_with_constants, disable_compile, enable_compile, is_compile_enabled,
    ArrayList, CompileMode, CompileOptions, Compiled, Constant, Implicit, Report,
};

use crate::array::{Array, Node};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Weak};

/// How many transforms are tracing a function right now, on any thread. Process-wide rather than
/// per thread, so a traced function may hand work to other threads: nodes they build or evaluate
/// during the trace are kept too.
static TRACE_DEPTH: AtomicUsize = AtomicUsize::new(0);

/// Nodes evaluated during the current traces, which kept their graph. The lock also orders trace
/// entries and exits, so the last exit releases exactly the nodes no trace can still need.
static KEPT: Mutex<Vec<Weak<Node>>> = Mutex::new(Vec::new());

fn kept() -> std::sync::MutexGuard<'static, Vec<Weak<Node>>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a node that kept its graph when evaluated during a trace, to release it when the
/// last trace ends.
pub(crate) fn note_kept(node: &Array) {
    kept().push(std::sync::Arc::downgrade(&node.0));
}

/// Whether a transform is tracing a function: nodes built now are marked, and evaluating them
/// keeps their graph for the transform to walk.
pub(crate) fn is_tracing() -> bool {
    TRACE_DEPTH.load(Ordering::Acquire) > 0
}

thread_local! {
    /// How many transforms are tracing a function on this thread.
    static TRACE_DEPTH_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether a transform is tracing a function on this thread. A compiled function called then
/// runs inline, so the transform sees its ops; calls on other threads are inlined only when their
/// arguments come from a trace (see `compile`).
pub(crate) fn is_tracing_on_this_thread() -> bool {
    TRACE_DEPTH_HERE.with(|d| d.get() > 0)
}

/// Marks a trace as running while alive (nests). When the last trace ends, nodes evaluated
/// during it forget the graph they kept, so it can be freed.
pub(crate) struct TraceGuard;

impl TraceGuard {
    /// Enters a trace.
    pub(crate) fn enter() -> TraceGuard {
        let _order = kept();
        TRACE_DEPTH.fetch_add(1, Ordering::AcqRel);
        TRACE_DEPTH_HERE.with(|d| d.set(d.get() + 1));
        TraceGuard
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        let mut list = kept();
        TRACE_DEPTH_HERE.with(|d| d.set(d.get() - 1));
        if TRACE_DEPTH.fetch_sub(1, Ordering::AcqRel) == 1 {
            for node in std::mem::take(&mut *list).iter().filter_map(Weak::upgrade) {
                Array(node).release_trace();
            }
        }
    }
}

/// The signature every transform takes and returns: a function of a list of arrays giving a list
/// of arrays (a later layer maps pytrees onto it).
pub trait Function: Fn(&[crate::Array]) -> crate::Result<Vec<crate::Array>> {}

impl<F: Fn(&[crate::Array]) -> crate::Result<Vec<crate::Array>>> Function for F {}
