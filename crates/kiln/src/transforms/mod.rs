//! Function transformations as graph rewrites over the op enum: reverse mode (`vjp`, `grad`,
//! `value_and_grad`), forward mode (`jvp`), batching (`vmap`), `checkpoint` and
//! `custom_function`. Every op carries its own rules (`vjp_rules`, `jvp_rules`, `batching`), each
//! a `match` over [`crate::primitive::Op`] without a catch-all, so a new op cannot be added
//! without deciding its derivative and its batching rule.
//!
//! Autodiff runs the function on *tracers* (identity views of the primal values, so the function
//! may still read values), then walks the graph between the tracers and the outputs. Rules build
//! their results from ordinary ops, so derivatives are themselves differentiable (grad of grad,
//! jvp of vjp) and every transform nests with the others. vmap traces the function once on
//! data-less placeholders of the per-example shape and rewrites that graph with batching rules.

pub mod autodiff;
pub mod custom;
pub mod vmap;

mod batching;
mod graph;
mod jvp_rules;
mod vjp_rules;

pub use autodiff::{grad, jvp, stop_gradient, value_and_grad, vjp};
pub use custom::{checkpoint, CustomFunction};
pub use vmap::vmap;

use std::cell::Cell;

thread_local! {
    /// How many transforms are tracing a function on this thread right now.
    static TRACE_DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Whether a transform is tracing a function on this thread: nodes built now are marked, and
/// evaluating them keeps their graph for the transform to walk.
pub(crate) fn is_tracing() -> bool {
    TRACE_DEPTH.with(|d| d.get() > 0)
}

/// Marks the thread as tracing while alive (nests).
pub(crate) struct TraceGuard;

impl TraceGuard {
    /// Enters a trace.
    pub(crate) fn enter() -> TraceGuard {
        TRACE_DEPTH.with(|d| d.set(d.get() + 1));
        TraceGuard
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        TRACE_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// The signature every transform takes and returns: a function of a list of arrays giving a list
/// of arrays (a later layer maps pytrees onto it).
pub trait Function: Fn(&[crate::Array]) -> crate::Result<Vec<crate::Array>> {}

impl<F: Fn(&[crate::Array]) -> crate::Result<Vec<crate::Array>>> Function for F {}
