//! Shapeless replay: one trace serves every shape of the same ndims and dtypes. The tape's shapes
//! are re-inferred for each new set of input shapes with the ops' own inference. Ops whose
//! parameters were fixed from trace-time shapes (a reshape to a fixed shape, broadcast_to, slices
//! with fixed bounds, user kernels with declared output shapes) cannot serve other shapes. Such a
//! shape may have been read off any input (`broadcast_to(y, x.shape)`), so when any input's shape
//! differs from the traced one, replay of a tape holding one fails with an error that names the
//! op and the fix, instead of returning a result computed with stale shapes.
//!
//! Three kinds follow new shapes where that gives eager's result. Slices and slice updates whose
//! bounds the caller wrote as numbers (indexing `x[1:]`, `x[:, :-1]`, `x[-1] = v`) are resolved
//! again at each call's shapes, as eager indexing resolves them; bounds written after the traced
//! function read a shape (`x[: x.shape[0] // 2]`) may have been computed from it and stay fixed
//! (refused at new shapes), as do bounds ops compute from shapes (`split`, gradients of
//! `concatenate`). A reshape's axis written -1 is re-inferred (as in mlx) when only input axes
//! folded into it changed size (the other output sizes, fixed at trace time, may have been read
//! off the input: `reshape(x.shape[0], -1)`). A gather follows its index arrays' new shapes, and
//! its source's too when it takes whole slices of the source's other axes (`take`, indexing with
//! arrays) and only those changed size; other gathers need their source's traced shape.

use super::trace::{Tape, TapeNode, Value};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::ops::resolve_bounds;
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
        let (value, shape) = match &node.value {
            Value::Input(i) => (node.value.clone(), inputs[*i].clone()),
            Value::Constant(a) => (node.value.clone(), a.shape().into()),
            Value::Op(op, ins) => {
                let rewritten = rewritten_op(op, ins, &tape.nodes, &nodes)?;
                let fixed = || {
                    let source_kept = ins.first().is_none_or(|&s| nodes[s].shape == tape.nodes[s].shape);
                    let follows = match op {
                        Op::Reshape { inferred: Some(a), .. } => {
                            minus_one_follows(&tape.nodes[ins[0]].shape, &nodes[ins[0]].shape, &node.shape, *a)
                        }
                        _ => false,
                    };
                    fixed_shape_fix(op, source_kept, follows)
                };
                if let Some(fix) = rewritten.is_none().then(fixed).flatten().filter(|_| !changes.is_empty()) {
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
                let op = rewritten.unwrap_or_else(|| op.clone());
                let metas: Vec<(Shape, Dtype)> =
                    ins.iter().map(|&i| (nodes[i].shape.clone(), nodes[i].dtype)).collect();
                let refs: Vec<&(Shape, Dtype)> = metas.iter().collect();
                let shape = op
                    .infer(&refs)
                    .map_err(|e| Error::shape(op.name(), format!("in a shapeless compiled function: {}", e.message)))?
                    .0;
                (Value::Op(op, ins.clone()), shape)
            }
        };
        nodes.push(TapeNode { value, shape, dtype: node.dtype });
    }
    Ok(Tape { nodes, outputs: tape.outputs.clone(), inputs: tape.inputs })
}

/// An op whose parameters follow this call's shapes, rewritten for them (`None` for other ops):
/// a slice or slice update whose bounds were kept as written, resolved again at its input's
/// new shape as eager indexing would (a slice update's update must still fill the region), and
/// a gather taking whole slices of the source's other axes (`take`, array indexing), whose
/// slice sizes follow the source's new shape. `traced` and `now` hold the nodes at trace time
/// and in this call.
fn rewritten_op(op: &Op, ins: &[usize], traced: &[TapeNode], now: &[TapeNode]) -> Result<Option<Op>> {
    let shapeless = |e: Error| Error::new(&e.op, e.kind, format!("in a shapeless compiled function: {}", e.message));
    let dst = &now[ins[0]].shape;
    Ok(match op {
        Op::Slice { written: Some(w), .. } => {
            let (start, step, len) = resolve_bounds("slice", w, dst).map_err(shapeless)?;
            Some(Op::Slice { start, step, len, written: Some(w.clone()) })
        }
        Op::SliceUpdate { written: Some(w), .. } => {
            let (start, step, len) = resolve_bounds("slice_update", w, dst).map_err(shapeless)?;
            let update = &now[ins[1]].shape;
            if update.as_slice() != len.as_slice() {
                return Err(Error::shape(
                    "slice_update",
                    format!(
                        "in a shapeless compiled function, an update of shape {} does not fill the region {} \
                         of an array of shape {} at this call's shapes",
                        fmt_shape(update),
                        fmt_shape(&len),
                        fmt_shape(dst)
                    ),
                ));
            }
            Some(Op::SliceUpdate { start, step, written: Some(w.clone()) })
        }
        Op::Gather { axes, slice_sizes } if follows_source(axes, slice_sizes, &traced[ins[0]].shape, dst) => {
            let slice_sizes = dst.iter().enumerate().map(|(a, &d)| if axes.contains(&a) { 1 } else { d }).collect();
            Some(Op::Gather { axes: axes.clone(), slice_sizes })
        }
        _ => None,
    })
}

/// Whether a gather follows its source's new shape `now` (traced as `traced`): its slices are
/// one element along the indexed axes and whole along the others (as `take` and array indexing
/// gather), and only the other axes changed size. Indices made at trace time for the indexed
/// axes (`diagonal`'s positions, `arange(x.shape[0])`) stay valid only while those keep theirs.
fn follows_source(axes: &[usize], slice_sizes: &[usize], traced: &[usize], now: &[usize]) -> bool {
    slice_sizes.iter().zip(traced).zip(now).enumerate().all(|(a, ((&s, &d), &n))| {
        if axes.contains(&a) {
            s == 1 && d == n
        } else {
            s == d
        }
    })
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
        Op::Slice { .. } | Op::SliceUpdate { .. } => "its bounds were computed (by an op from shapes, or by the function after it read a shape) and are fixed at trace time; index with numbers written relative to the ends (x[1:], x[:-1], x[-1]) without reading shapes first, or compile without shapeless",
        Op::Gather { .. } if !source_kept => "this gather's slice sizes (not whole axes) were fixed from its source's traced shape; compile without shapeless",
        Op::Scatter { .. } => "scatter's updates are sized at trace time; compile without shapeless",
        Op::Partition { .. } | Op::ArgPartition { .. } => "the partition index is fixed at trace time; compile without shapeless",
        Op::Kernel { .. } => "a custom kernel declares fixed output shapes; compile without shapeless",
        Op::RandomBits { .. } => "random draws have fixed shapes; compile without shapeless",
        _ => return None,
    })
}
