//! Shapeless replay: one trace serves every shape of the same ndims and dtypes. The tape's shapes
//! are re-inferred for each new set of input shapes with the ops' own inference. Ops whose
//! parameters were fixed from trace-time shapes (a reshape to a fixed shape, broadcast_to, slices
//! with fixed bounds, gathers with fixed slice sizes, user kernels with declared output shapes)
//! cannot serve other shapes: when their input shapes change, replay fails with an error that names
//! the op and the fix, instead of returning a result computed with stale shapes.

use super::trace::{Tape, TapeNode, Value};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::{fmt_shape, Shape};

/// The tape with every node's shape re-inferred from `inputs` (input slots' new shapes).
pub(crate) fn reinfer(tape: &Tape, inputs: &[Shape]) -> Result<Tape> {
    let mut nodes: Vec<TapeNode> = Vec::with_capacity(tape.nodes.len());
    for node in &tape.nodes {
        let shape = match &node.value {
            Value::Input(i) => inputs[*i].clone(),
            Value::Constant(a) => a.shape().into(),
            Value::Op(op, ins) => {
                let metas: Vec<(Shape, Dtype)> = ins.iter().map(|&i| (nodes[i].shape.clone(), nodes[i].dtype)).collect();
                let changed = ins.iter().any(|&i| nodes[i].shape != tape.nodes[i].shape);
                if changed {
                    if let Some(fix) = fixed_shape_fix(op) {
                        let was: Vec<String> = ins.iter().map(|&i| fmt_shape(&tape.nodes[i].shape)).collect();
                        let now: Vec<String> = metas.iter().map(|m| fmt_shape(&m.0)).collect();
                        return Err(Error::shape(
                            op.name(),
                            format!(
                                "in a shapeless compiled function, {} was traced with input shapes {} and \
                                 fixed output shape {}, which cannot serve input shapes {}; {fix}",
                                op.name(),
                                was.join(", "),
                                fmt_shape(&node.shape),
                                now.join(", ")
                            ),
                        ));
                    }
                }
                let refs: Vec<&(Shape, Dtype)> = metas.iter().collect();
                op.infer(&refs).map_err(|e| Error::shape(op.name(), format!("in a shapeless compiled function: {}", e.message)))?.0
            }
        };
        nodes.push(TapeNode { value: node.value.clone(), shape, dtype: node.dtype });
    }
    Ok(Tape { nodes, outputs: tape.outputs.clone(), inputs: tape.inputs })
}

/// For ops whose parameters hold trace-time shapes: what to do instead.
fn fixed_shape_fix(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Reshape(_) => "use flatten or unflatten (which follow the input shape) instead of reshape to a computed shape, or compile without shapeless",
        Op::BroadcastTo(_) => "let a binary op broadcast its operands instead of broadcast_to a fixed shape, or compile without shapeless",
        Op::Slice { .. } | Op::SliceUpdate { .. } => "slice bounds are fixed at trace time; compile without shapeless",
        Op::Gather { .. } | Op::Scatter { .. } => "gather and scatter slice sizes are fixed at trace time; compile without shapeless",
        Op::Partition { .. } | Op::ArgPartition { .. } => "the partition index is fixed at trace time; compile without shapeless",
        Op::Kernel { .. } => "a custom kernel declares fixed output shapes; compile without shapeless",
        Op::RandomBits { .. } => "random draws have fixed shapes; compile without shapeless",
        _ => return None,
    })
}
