//! Evaluation: a topological schedule over the pending part of the graph, run node by node on
//! each node's device backend (on a GPU, with elementwise chains fused: see
//! [`crate::transforms::compile::eager`]).
//!
//! Memory: the schedule does not hold nodes; each node is held only by its consumers' input lists
//! (and by user handles). When a node has run it drops its inputs, so an intermediate is freed
//! right after its last consumer ran. An input that only the running node holds, and whose storage
//! no other view shares, is offered to the kernel for donation (it may write the output into it).

use crate::array::{Array, Node, State};
use crate::backend::{self, Input};
use crate::error::{Error, ErrorKind, Result};
use crate::fast_hash::FastSet;
use std::sync::{Arc, Mutex};

/// One evaluation at a time: nodes are shared between graphs, and two evaluations racing on one
/// node would compute it twice. Kernels themselves run in parallel inside.
static EVAL_LOCK: Mutex<()> = Mutex::new(());

/// Computes every pending node the `targets` depend on.
pub(crate) fn eval(targets: &[Array]) -> Result<()> {
    if targets.iter().all(|a| matches!(&*a.lock(), State::Ready(_))) {
        return Ok(());
    }
    let _guard = EVAL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut order = schedule(targets)?;
    if crate::transforms::compile::eager::run(&mut order, run_node)? {
        return Ok(());
    }
    for slot in order.iter_mut() {
        let node = slot.take().expect("each node is scheduled once");
        run_node(&node)?;
    }
    Ok(())
}

/// Post-order of the pending nodes reachable from `targets` (inputs before consumers), found
/// iteratively so deep graphs cannot overflow the stack. Reaching a placeholder is an error: its
/// value is unknown while a transform traces the function.
pub(crate) fn schedule(targets: &[Array]) -> Result<Vec<Option<Array>>> {
    let mut order = Vec::new();
    let mut seen: FastSet<*const Node> = FastSet::default();
    let mut stack: Vec<(Array, bool)> = targets.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((a, expanded)) = stack.pop() {
        if expanded {
            order.push(Some(a));
            continue;
        }
        if !seen.insert(Arc::as_ptr(&a.0)) {
            continue;
        }
        let inputs = match &*a.lock() {
            State::Pending { inputs, .. } => inputs.clone(),
            State::Ready(_) | State::Traced { .. } => continue,
            State::Placeholder(transform) => return Err(placeholder_error(transform, &a)),
        };
        stack.push((a, true));
        for i in inputs.into_iter().rev() {
            if !seen.contains(&Arc::as_ptr(&i.0)) {
                stack.push((i, false));
            }
        }
    }
    Ok(order)
}

fn placeholder_error(transform: &str, a: &Array) -> Error {
    let hint = if transform == "compile" {
        "; to print or inspect values while debugging, call kiln::disable_compile() (or set \
         KILN_DISABLE_COMPILE=1) so the function runs uncompiled, or return the array as an output"
    } else {
        ""
    };
    Error::new(
        transform,
        ErrorKind::NoData,
        format!(
            "cannot evaluate an array that depends on a traced input (shape {}, dtype {}): \
             {transform} traces the function without data, so it must not read values \
             (eval, item, to_vec, printing) of arrays computed from its inputs{hint}",
            crate::shape::fmt_shape(a.shape()),
            a.dtype()
        ),
    )
}

fn run_node(node: &Array) -> Result<()> {
    let (op, inputs) = match &mut *node.lock() {
        State::Pending { op, inputs } => (op.clone(), std::mem::take(inputs)),
        State::Ready(_) | State::Traced { .. } | State::Placeholder(_) => return Ok(()),
    };
    // A node kept for a transform keeps its inputs too, so their storage must stay intact.
    let keep = node.0.traced && crate::transforms::is_tracing();
    let data: Vec<Input> = inputs
        .iter()
        .map(|a| {
            let buffer = a.buffer().expect("inputs run before their consumers");
            // Only this node holds the input and only the input holds the storage (plus the clone
            // just taken): nobody can observe the storage being overwritten. A storage with a
            // GPU copy is never overwritten on the host, so its copies cannot disagree.
            let donatable = !keep
                && Arc::strong_count(&a.0) == 1 && Arc::strong_count(&buffer.storage) == 2
                && buffer.storage.host_only();
            Input { shape: a.shape().into(), dtype: a.dtype(), buffer, donatable }
        })
        .collect();
    match backend::run(node.stream(), &op, &data, node.shape(), node.dtype()) {
        Ok(buffer) => {
            drop(data);
            if keep {
                *node.lock() = State::Traced { buffer, op, inputs };
                crate::transforms::note_kept(node);
            } else {
                *node.lock() = State::Ready(buffer);
                drop(inputs);
            }
            Ok(())
        }
        Err(e) => {
            *node.lock() = State::Pending { op, inputs };
            Err(e)
        }
    }
}
