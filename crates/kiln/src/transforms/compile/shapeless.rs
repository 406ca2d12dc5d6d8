//! Shapeless replay: one trace serves every shape of the same ndims and dtypes. The tape's shapes
//! are re-inferred for each new set of input shapes with the ops' own inference. Ops whose
//! parameters were fixed from trace-time shapes (a reshape to a fixed shape, broadcast_to, slices
//! with fixed bounds, user kernels with declared output shapes) cannot serve other shapes. Such a
//! shape may have been read off any input (`broadcast_to(y, x.shape)`), so when any input's shape
//! differs from the traced one, replay of a tape holding one fails with an error that names the
//! op and the fix, instead of returning a result computed with stale shapes.
//!
//! Two kinds follow new shapes where that gives eager's result: a reshape's axis written -1 is
//! re-inferred (as in mlx) when only input axes folded into it changed size (the other output
//! sizes, fixed at trace time, may have been read off the input: `reshape(x.shape[0], -1)`), and
//! a gather whose source array keeps its traced shape follows its index arrays' new shapes (its
//! slice sizes are then still the source's).

use super::trace::{Tape, TapeNode, Value};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::{fmt_shape, Shape};

/// The tape with every node's shape re-inferred from `inputs` (input slots' new shapes).
pub(crate) fn reinfer(tape: &Tape, inputs: &[Shape]) -> Result<Tape> {
    let changes: Vec<String> = tape
        .nodes
        .iter()
        .filter_map(|n| match n.value {
            Value::Input(i) if inputs[i] != n.shape => {
                Some(format!("input {i} {} -> {}", fmt_shape(&n.shape), fmt_shape(&inputs[i])))
            }
            _ => None,
        })
        .collect();
    let mut nodes: Vec<TapeNode> = Vec::with_capacity(tape.nodes.len());
    for node in &tape.nodes {
        let shape = match &node.value {
            Value::Input(i) => inputs[*i].clone(),
            Value::Constant(a) => a.shape().into(),
            Value::Op(op, ins) => {
                let source_kept = ins.first().is_none_or(|&s| nodes[s].shape == tape.nodes[s].shape);
                let follows = match op {
                    Op::Reshape { inferred: Some(a), .. } => {
                        minus_one_follows(&tape.nodes[ins[0]].shape, &nodes[ins[0]].shape, &node.shape, *a)
                    }
                    _ => false,
                };
                if let Some(fix) = fixed_shape_fix(op, source_kept, follows).filter(|_| !changes.is_empty()) {
                    return Err(Error::shape(
                        op.name(),
                        format!(
                            "in a shapeless compiled function, {} was traced with the fixed output shape {}, \
                             which may have come from an input's shape and cannot follow this call's shapes \
                             ({}); {fix}",
                            op.name(),
                            fmt_shape(&node.shape),
                            changes.join(", ")
                        ),
                    ));
                }
                let metas: Vec<(Shape, Dtype)> = ins.iter().map(|&i| (nodes[i].shape.clone(), nodes[i].dtype)).collect();
                let refs: Vec<&(Shape, Dtype)> = metas.iter().collect();
                op.infer(&refs).map_err(|e| Error::shape(op.name(), format!("in a shapeless compiled function: {}", e.message)))?.0
            }
        };
        nodes.push(TapeNode { value: node.value.clone(), shape, dtype: node.dtype });
    }
    Ok(Tape { nodes, outputs: tape.outputs.clone(), inputs: tape.inputs })
}

/// Whether a reshape whose axis `a` was written -1, traced from `traced_in` to `traced_out`, gives
/// eager's result at the input shape `new_in` by re-inferring axis `a` alone: the leading input
/// axes that make the output axes before `a` and the trailing ones that make those after it kept
/// their sizes, so only input axes folded into `a` changed.
fn minus_one_follows(traced_in: &[usize], new_in: &[usize], traced_out: &[usize], a: usize) -> bool {
    let n = traced_in.len();
    if new_in.len() != n {
        return false;
    }
    let (before, after): (usize, usize) = (traced_out[..a].iter().product(), traced_out[a + 1..].iter().product());
    let lead = (0..=n).filter(|&i| traced_in[..i].iter().product::<usize>() == before).max();
    let trail = (0..=n).filter(|&i| traced_in[i..].iter().product::<usize>() == after).min();
    match (lead, trail) {
        (Some(p), Some(q)) if before > 0 && after > 0 && p <= q => new_in[..p] == traced_in[..p] && new_in[q..] == traced_in[q..],
        _ => false,
    }
}

/// For ops whose parameters hold trace-time shapes: what to do instead. `source_kept`: whether
/// the op's first input kept its traced shape in this call; `follows`: whether a reshape's -1
/// axis alone follows this call's shape ([`minus_one_follows`]).
fn fixed_shape_fix(op: &Op, source_kept: bool, follows: bool) -> Option<&'static str> {
    Some(match op {
        Op::Reshape { .. } if !follows => "a reshape keeps the sizes it was given (only an axis written -1 follows new shapes, and only when the input axes that changed are folded into it); use flatten, or compile without shapeless",
        Op::BroadcastTo(_) => "let a binary op broadcast its operands instead of broadcast_to a fixed shape, or compile without shapeless",
        Op::Slice { .. } | Op::SliceUpdate { .. } => "slice bounds are fixed at trace time; compile without shapeless",
        Op::Gather { .. } if !source_kept => "the slice sizes of a gather follow its source array, whose shape is fixed at trace time; compile without shapeless",
        Op::Scatter { .. } => "scatter's updates are sized at trace time; compile without shapeless",
        Op::Partition { .. } | Op::ArgPartition { .. } => "the partition index is fixed at trace time; compile without shapeless",
        Op::Kernel { .. } => "a custom kernel declares fixed output shapes; compile without shapeless",
        Op::RandomBits { .. } => "random draws have fixed shapes; compile without shapeless",
        _ => return None,
    })
}
