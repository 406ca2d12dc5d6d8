//! Tracing: the function runs once on data-less placeholders, and the graph it builds is copied
//! into a [`Tape`], a flat, topologically ordered list of nodes that later stages rewrite.
//!
//! Arrays the function captured from outside (anything that does not depend on a placeholder)
//! become constants of the tape, evaluated once at the end of the trace, as the seeds describe.
//! Reaching a placeholder of another trace (kept from an earlier, impure call) is the
//! "uncaptured input" error: its value would silently be missing.

use super::state::{Constant, Implicit};
use crate::array::{Array, State};
use crate::dtype::Dtype;
use crate::error::{Error, ErrorKind, Result};
use crate::primitive::Op;
use crate::shape::{fmt_shape, Shape};
use std::cell::Cell;
use std::collections::HashMap;

/// One tape node.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// Input `i` of the compiled function (explicit arguments, then implicit inputs).
    Input(usize),
    /// An evaluated array captured from outside the function.
    Constant(Array),
    /// An op of earlier nodes.
    Op(Op, Vec<usize>),
}

/// A node with its traced shape and dtype.
#[derive(Clone, Debug)]
pub(crate) struct TapeNode {
    pub value: Value,
    pub shape: Shape,
    pub dtype: Dtype,
}

/// A traced function: nodes in topological order and the nodes it returns.
#[derive(Clone, Debug)]
pub(crate) struct Tape {
    pub nodes: Vec<TapeNode>,
    pub outputs: Vec<usize>,
    pub inputs: usize,
}

thread_local! {
    /// How many compile traces run on this thread (nested compiled calls are inlined).
    static TRACING: Cell<usize> = const { Cell::new(0) };
    /// Whether the function being traced has read a shape so far ([`note_shape_read`]).
    static SHAPE_READ: Cell<bool> = const { Cell::new(false) };
    /// Whether a shapeless compile is tracing on this thread ([`is_shapeless_tracing`]).
    static SHAPELESS: Cell<bool> = const { Cell::new(false) };
}

/// Records that the traced function's own code read an array's shape (Python's `.shape`,
/// `.size`, `len()`), so numbers it passes to later ops may have been computed from a shape.
/// Slice bounds written after such a read stay fixed in a shapeless replay (and are refused
/// at new shapes) instead of being re-resolved as the literals they may not be.
pub fn note_shape_read() {
    if is_compile_tracing() {
        SHAPE_READ.with(|r| r.set(true));
    }
}

/// Whether the function being traced has read a shape before this point ([`note_shape_read`]).
pub(crate) fn shape_was_read() -> bool {
    SHAPE_READ.with(|r| r.get())
}

/// Whether this thread is tracing a function for compile.
pub(crate) fn is_compile_tracing() -> bool {
    TRACING.with(|t| t.get() > 0)
}

/// Whether this thread is tracing for a shapeless compile (or inside one): ops that would fix
/// shapes at trace time choose a form whose shapes follow the inputs (a host kernel's output
/// shapes are fixed, so the quantized products and convolutions build their compositions).
pub(crate) fn is_shapeless_tracing() -> bool {
    SHAPELESS.with(|s| s.get())
}

/// Marks a compile trace as running while alive (nests); remembers the outer trace's
/// shapelessness to restore it.
struct TracingGuard {
    outer_shapeless: bool,
}

impl TracingGuard {
    fn enter(shapeless: bool) -> TracingGuard {
        if TRACING.with(|t| t.replace(t.get() + 1)) == 0 {
            SHAPE_READ.with(|r| r.set(false));
        }
        let outer_shapeless = SHAPELESS.with(|s| s.replace(s.get() || shapeless));
        TracingGuard { outer_shapeless }
    }
}

impl Drop for TracingGuard {
    fn drop(&mut self) {
        TRACING.with(|t| t.set(t.get() - 1));
        SHAPELESS.with(|s| s.set(self.outer_shapeless));
    }
}

/// What a trace produced besides the tape: how the outputs split into explicit results and the
/// implicit outputs, one count per declared output state.
pub(crate) struct Traced {
    pub tape: Tape,
    pub explicit: usize,
    pub implicit: Vec<usize>,
}

/// The function type compile traces.
pub(crate) type TracedFn = dyn Fn(&[Array], &[Constant]) -> Result<Vec<Array>> + Send + Sync;

/// Runs `f` on placeholders shaped like `args` and the implicit inputs' current arrays, and
/// records the graph (for a shapeless compile when `shapeless`). Implicit lists hold placeholders
/// only during the trace; they are restored whether it succeeds or fails.
pub(crate) fn trace(
    f: &TracedFn,
    args: &[Array],
    constants: &[Constant],
    implicit_in: &[Implicit],
    implicit_out: &[Implicit],
    shapeless: bool,
) -> Result<Traced> {
    let placeholder = |a: &Array| Array::placeholder(a.shape(), a.dtype(), "compile");
    let arg_ph: Vec<Array> = args.iter().map(placeholder).collect();
    let mut all_ph = arg_ph.clone();
    let mut saved = Vec::new();
    let random = implicit_in.iter().chain(implicit_out).any(|s| matches!(s, Implicit::RandomState));
    let mut random_ph = None;
    for s in implicit_in {
        match s {
            Implicit::List(l) => {
                let ph: Vec<Array> = l.to_vec().iter().map(placeholder).collect();
                all_ph.extend(ph.iter().cloned());
                saved.push((l.clone(), l.replace(ph)));
            }
            Implicit::RandomState => {
                let p = placeholder(&crate::random::state());
                all_ph.push(p.clone());
                random_ph = Some(p);
            }
        }
    }
    for s in implicit_out {
        if let Implicit::List(l) = s {
            if !saved.iter().any(|(k, _)| k.same_list(l)) {
                saved.push((l.clone(), l.to_vec()));
            }
        }
    }
    // The function's outputs, and the random state it leaves when the state is declared.
    let run = || -> Result<(Vec<Array>, Option<Array>)> {
        let out = f(&arg_ph, constants)?;
        Ok((out, random.then(crate::random::state)))
    };
    let result = {
        let _guard = TracingGuard::enter(shapeless);
        match &random_ph {
            Some(p) => crate::ops::random::with_replayed_state(p, run),
            None => run(),
        }
    };
    let mut outputs = Vec::new();
    let mut implicit = Vec::new();
    if let Ok((out, state)) = &result {
        outputs.extend(out.iter().cloned());
        for s in implicit_out {
            let arrays = match s {
                Implicit::List(l) => l.to_vec(),
                Implicit::RandomState => state.iter().cloned().collect(),
            };
            implicit.push(arrays.len());
            outputs.extend(arrays);
        }
    }
    for (list, original) in saved {
        list.replace(original);
    }
    let (explicit, _) = result?;
    let tape = record(&outputs, &all_ph, args)?;
    Ok(Traced { tape, explicit: explicit.len(), implicit })
}

/// Copies the graph between `leaves` (the placeholders) and `outputs` into a tape; everything
/// that does not depend on a leaf is evaluated and kept as a constant. Reaching one of the call's
/// `arguments` themselves (rather than its placeholder) is an error, as in mlx: the function
/// used the argument from its enclosing scope, and its value would be frozen as a constant.
fn record(outputs: &[Array], leaves: &[Array], arguments: &[Array]) -> Result<Tape> {
    let arguments: HashMap<usize, usize> = arguments.iter().enumerate().map(|(i, a)| (a.id(), i)).collect();
    let mut ids: HashMap<usize, usize> = HashMap::new();
    let mut nodes: Vec<TapeNode> = Vec::new();
    for (i, p) in leaves.iter().enumerate() {
        ids.insert(p.id(), nodes.len());
        nodes.push(TapeNode { value: Value::Input(i), shape: p.shape().into(), dtype: p.dtype() });
    }
    let mut constants = Vec::new();
    // Iterative post-order: (array, children pushed?).
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((a, expanded)) = stack.pop() {
        if ids.contains_key(&a.id()) {
            continue;
        }
        if let Some(&i) = arguments.get(&a.id()) {
            return Err(argument_reached(&a, i));
        }
        let graph = match &*a.lock() {
            State::Pending { op, inputs } | State::Traced { op, inputs, .. } => Some((op.clone(), inputs.clone())),
            State::Ready(_) => None,
            State::Placeholder(transform) => return Err(uncaptured(&a, transform)),
        };
        let value = match graph {
            None => Some(Value::Constant(a.clone())),
            Some((op, inputs)) if expanded => {
                let idx: Vec<usize> = inputs.iter().map(|i| ids[&i.id()]).collect();
                let is_const = idx.iter().all(|&i| matches!(nodes[i].value, Value::Constant(_)));
                // Ops of constants only (arange has no inputs at all) are constants too.
                Some(if is_const {
                    Value::Constant(a.clone())
                } else {
                    Value::Op(op, idx)
                })
            }
            Some((_, inputs)) => {
                stack.push((a.clone(), true));
                for i in inputs.into_iter().rev() {
                    if !ids.contains_key(&i.id()) {
                        stack.push((i, false));
                    }
                }
                None
            }
        };
        if let Some(value) = value {
            if ids.contains_key(&a.id()) {
                continue;
            }
            if matches!(value, Value::Constant(_)) {
                constants.push(a.clone());
            }
            ids.insert(a.id(), nodes.len());
            nodes.push(TapeNode { value, shape: a.shape().into(), dtype: a.dtype() });
        }
    }
    let refs: Vec<&Array> = constants.iter().collect();
    crate::eval(&refs)?;
    let outputs = outputs.iter().map(|o| ids[&o.id()]).collect();
    Ok(Tape { nodes, outputs, inputs: leaves.len() })
}

fn argument_reached(a: &Array, i: usize) -> Error {
    Error::new(
        "compile",
        ErrorKind::Value,
        format!(
            "the function uses argument {i} (shape {}, dtype {}) directly, not through its \
             parameter (for example captured from the enclosing scope, or inside an array computed \
             from it before the call): its value would be frozen into the compiled function; use \
             the parameter, or pass the derived array as an argument",
            fmt_shape(a.shape()),
            a.dtype()
        ),
    )
}

fn uncaptured(a: &Array, transform: &str) -> Error {
    Error::new(
        "compile",
        ErrorKind::Value,
        format!(
            "the function uses an array (shape {}, dtype {}) that is not one of its inputs but a \
             traced value of another {transform} trace, for example one kept in outside state by an \
             earlier impure call; pass it as an argument, or declare the list holding it in \
             CompileOptions::inputs",
            fmt_shape(a.shape()),
            a.dtype()
        ),
    )
}
