//! Shapeless replay: one trace serves every shape of the same ndims and dtypes. The tape's shapes
//! are re-inferred for each new set of input shapes with the ops' own inference. Ops whose
//! parameters were fixed from trace-time shapes (a reshape to a fixed shape, broadcast_to, slices
//! with fixed bounds, user kernels with declared output shapes) cannot serve other shapes. Such a
//! shape may have been read off any input (`broadcast_to(y, x.shape)`), so when any input's shape
//! differs from the traced one, replay of a tape holding one fails with an error that names the
//! op and the fix, instead of returning a result computed with stale shapes.
//!
//! As in mlx, two kinds follow new shapes: a reshape's axis written -1 is re-inferred (its other
//! sizes stay as traced), and a gather or scatter whose source array keeps its traced shape is
//! re-inferred from its index arrays' new shapes (its slice sizes are then still the source's).

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
                if let Some(fix) = fixed_shape_fix(op, source_kept).filter(|_| !changes.is_empty()) {
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

/// For ops whose parameters hold trace-time shapes: what to do instead. `source_kept`: whether
/// the op's first input kept its traced shape in this call.
fn fixed_shape_fix(op: &Op, source_kept: bool) -> Option<&'static str> {
    Some(match op {
        Op::Reshape { inferred: None, .. } => "write -1 for the size that follows the input (it is re-inferred), use flatten or unflatten, or compile without shapeless",
        Op::BroadcastTo(_) => "let a binary op broadcast its operands instead of broadcast_to a fixed shape, or compile without shapeless",
        Op::Slice { .. } | Op::SliceUpdate { .. } => "slice bounds are fixed at trace time; compile without shapeless",
        Op::Gather { .. } | Op::Scatter { .. } if !source_kept => "the slice sizes of a gather or scatter follow its source array, whose shape is fixed at trace time; compile without shapeless",
        Op::Partition { .. } | Op::ArgPartition { .. } => "the partition index is fixed at trace time; compile without shapeless",
        Op::Kernel { .. } => "a custom kernel declares fixed output shapes; compile without shapeless",
        Op::RandomBits { .. } => "random draws have fixed shapes; compile without shapeless",
        _ => return None,
    })
}
