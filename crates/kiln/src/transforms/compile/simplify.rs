//! Graph simplification of a tape, in one linear pass plus dead-code elimination:
//!
//! - **No-op removal**: identity reshapes, transposes, broadcasts, casts and slices, and the
//!   identity views that transforms leave behind (`stop_gradient`, custom-function outputs).
//! - **Constant merging**: size-1 constants equal bit for bit, in the same dtype and shape, become
//!   one node (NaN, infinities and -0.0 are compared by bits, so they stay distinct from 0.0).
//! - **Common-subexpression elimination** by hash-consing: a node is looked up by its op (whose
//!   parameters hash and compare structurally: log bases, reduction axes, random widths) and its
//!   already-merged inputs, so the pass is linear in graph size. Random draws with different key
//!   nodes never merge; user kernels never merge (they may be impure).
//! - **Squeezes sink**: an elementwise op on squeezed values (`logsumexp(l) - sum(l * y)` with
//!   `keepdims=False`) runs before the squeeze instead, so it joins the fused kernel of the
//!   reductions that made its operands.
//! - **Exact strength reduction**: division by a float constant power of two becomes
//!   multiplication by its reciprocal, which is exact, so results are bit for bit the same (a
//!   multiply is several times cheaper than a divide).
//! - **Products written transposed**: `transpose(matmul(a, b))` over the last two axes, where
//!   nothing else reads the product, becomes `matmul(transpose(b), transpose(a))`: the same sums,
//!   written straight in the layout that is read. The gradient of `x @ w.T` (every linear layer's
//!   weight) otherwise comes out as a transposed view, which each later elementwise kernel (the
//!   optimizer's update) reads with a strided gather. The sums are the same, in the same order
//!   over the shared axis; the GEMM may still round the last bit differently for the swapped
//!   shapes (a matrix-vector path where one side is 1, complex products' cross terms), as
//!   between any two GEMM calls of different shapes, so compiled and eager results agree to
//!   the product's rounding rather than bit for bit.
//! - **Dead-code elimination**: only nodes the outputs need survive.

use super::trace::{Tape, TapeNode, Value};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::primitive::{BinaryOp, Op};
use crate::shape::Shape;
use std::collections::HashMap;

/// The simplified tape (`merge` false: only dead-code elimination, for the no_simplify mode).
// A user kernel call in an op key hashes and compares by identity; the eager outputs it keeps
// behind a mutex take no part in that.
#[allow(clippy::mutable_key_type)]
pub(crate) fn simplify(tape: &Tape, merge: bool) -> Tape {
    let mut out: Vec<TapeNode> = Vec::with_capacity(tape.nodes.len());
    let mut map: Vec<usize> = Vec::with_capacity(tape.nodes.len());
    let mut scalars: HashMap<(Dtype, Shape, u64), usize> = HashMap::new();
    let mut arrays: HashMap<usize, usize> = HashMap::new();
    let mut exprs: HashMap<(Op, Vec<usize>), usize> = HashMap::new();
    for node in &tape.nodes {
        // The node over simplified inputs, a division by a power of two turned into a multiply.
        let value = match &node.value {
            Value::Op(op, inputs) => {
                let inputs: Vec<usize> = inputs.iter().map(|&i| map[i]).collect();
                match merge.then(|| reciprocal_multiply(op, &inputs, &out)).flatten() {
                    Some(r) => {
                        let r = intern_scalar(r, &mut out, &mut scalars);
                        Value::Op(Op::Binary(BinaryOp::Multiply), vec![inputs[0], r])
                    }
                    None => Value::Op(op.clone(), inputs),
                }
            }
            v => v.clone(),
        };
        // An elementwise op on squeezed reduction results runs before the squeeze, on the
        // keepdims values, where it fuses with the reductions that made them.
        let value = match &value {
            Value::Op(op, inputs) if merge => match squeeze_sunk(op, inputs, &node.shape, &out) {
                Some((axes, from, inner)) => {
                    let key = (op.clone(), inner);
                    let id = *exprs.entry(key.clone()).or_insert_with(|| {
                        out.push(TapeNode { value: Value::Op(key.0, key.1), shape: from, dtype: node.dtype });
                        out.len() - 1
                    });
                    Value::Op(Op::Squeeze(axes), vec![id])
                }
                None => value,
            },
            _ => value,
        };
        // A sum down to a shape is a plain reduction once shapes are known; it then fuses.
        let value = match &value {
            Value::Op(Op::SumLike, inputs) if merge => sum_as_reduction(inputs[0], node, &mut out, &mut exprs),
            _ => value,
        };
        let found = match (&value, merge) {
            (_, false) | (Value::Input(_), _) => None,
            (Value::Constant(a), true) => match scalar_bits(a) {
                Some(bits) => scalars.get(&(a.dtype(), a.shape().into(), bits)).copied(),
                None => arrays.get(&a.id()).copied(),
            },
            (Value::Op(op, inputs), true) => {
                identity_of(op, inputs, &out).or_else(|| exprs.get(&(op.clone(), inputs.clone())).copied())
            }
        };
        // Counts are known once shapes are (every plan is for concrete shapes): fold them into
        // constants, which fused kernels bake in.
        let found = match (&value, merge) {
            (Value::Op(Op::Count { axes, ddof, dtype }, inputs), true) if found.is_none() => {
                let shape = &out[inputs[0]].shape;
                let n = axes.iter().map(|&a| shape[a]).product::<usize>().saturating_sub(*ddof);
                let c = count_constant(n, *dtype).expect("a scalar count converts to any dtype");
                Some(intern_scalar(c, &mut out, &mut scalars))
            }
            _ => found,
        };
        if let Some(existing) = found {
            map.push(existing);
            continue;
        }
        let id = out.len();
        match &value {
            Value::Op(op, inputs) if merge && mergeable(op) => {
                exprs.insert((op.clone(), inputs.clone()), id);
            }
            Value::Constant(a) => {
                match scalar_bits(a) {
                    Some(bits) => scalars.insert((a.dtype(), a.shape().into(), bits), id),
                    None => arrays.insert(a.id(), id),
                };
            }
            _ => {}
        }
        map.push(id);
        out.push(TapeNode { value, shape: node.shape.clone(), dtype: node.dtype });
    }
    let outputs = tape.outputs.iter().map(|&o| map[o]).collect();
    let simplified = eliminate_dead(Tape { nodes: out, outputs, inputs: tape.inputs });
    if merge {
        eliminate_dead(products_transposed(simplified))
    } else {
        simplified
    }
}

/// [`Op::SumLike`] of `from` into `node`'s shape as the reduction it is at these shapes: a cast
/// (an identity when the dtype agrees) when no axis broadcast, else a keepdims sum, whose added
/// leading axes are squeezed.
#[allow(clippy::mutable_key_type)]
fn sum_as_reduction(from: usize, node: &TapeNode, out: &mut Vec<TapeNode>, exprs: &mut HashMap<(Op, Vec<usize>), usize>) -> Value {
    let axes = crate::shape::unbroadcast_axes(&out[from].shape, &node.shape);
    if axes.is_empty() {
        return Value::Op(Op::AsType(node.dtype), vec![from]);
    }
    let extra = out[from].shape.len() - node.shape.len();
    let reduce = Op::Reduce { op: crate::primitive::ReduceOp::Sum, axes: axes.clone(), identity_if_empty: false };
    if extra == 0 {
        return Value::Op(reduce, vec![from]);
    }
    let kept: Shape = out[from].shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let id = *exprs.entry((reduce.clone(), vec![from])).or_insert_with(|| {
        out.push(TapeNode { value: Value::Op(reduce, vec![from]), shape: kept, dtype: node.dtype });
        out.len() - 1
    });
    Value::Op(Op::Squeeze((0..extra).collect()), vec![id])
}

/// The node of the evaluated scalar constant `c`: an equal one already in `out`, or `c` added.
fn intern_scalar(c: Array, out: &mut Vec<TapeNode>, scalars: &mut HashMap<(Dtype, Shape, u64), usize>) -> usize {
    let bits = scalar_bits(&c).expect("an evaluated scalar");
    *scalars.entry((c.dtype(), Shape::new(), bits)).or_insert_with(|| {
        out.push(TapeNode { value: Value::Constant(c.clone()), shape: Shape::new(), dtype: c.dtype() });
        out.len() - 1
    })
}

/// An evaluated scalar `n` of `dtype` (rounded as the eager count kernel rounds it).
fn count_constant(n: usize, dtype: Dtype) -> crate::Result<Array> {
    let c = crate::ops::astype(Array::scalar(n as f64), dtype)?;
    c.eval()?;
    Ok(c)
}

/// For `x / c` with `c` a float32 or float64 scalar constant that is a power of two (whose
/// reciprocal is exact): the reciprocal, as a constant of `c`'s dtype. `x * (1/c)` then rounds the
/// same real number as `x / c`, so the result is bit for bit the same.
fn reciprocal_multiply(op: &Op, inputs: &[usize], out: &[TapeNode]) -> Option<Array> {
    if *op != Op::Binary(BinaryOp::Divide) {
        return None;
    }
    let c = &out[inputs[1]];
    let Value::Constant(a) = &c.value else {
        return None;
    };
    if !c.shape.is_empty() {
        return None;
    }
    let bits = scalar_bits(a)?;
    let v = match c.dtype {
        Dtype::F32 => f32::from_bits(bits as u32) as f64,
        Dtype::F64 => f64::from_bits(bits),
        _ => return None,
    };
    let r = 1.0 / v;
    let power_of_two = v.is_finite() && v != 0.0 && r.is_finite() && r * v == 1.0 && {
        let m = if c.dtype == Dtype::F32 { (bits as u32 & 0x007f_ffff) as u64 } else { bits & 0x000f_ffff_ffff_ffff };
        m == 0
    };
    if !power_of_two {
        return None;
    }
    // The reciprocal must be exact in the constant's own dtype too.
    if c.dtype == Dtype::F32 && (r as f32) as f64 != r {
        return None;
    }
    let k = crate::ops::astype(Array::scalar(r), c.dtype).ok()?;
    k.eval().ok()?;
    Some(k)
}

/// For an elementwise op of output `shape` whose operands are all the same squeeze (the same
/// axes of inputs of one shape) or scalars: the squeeze's axes, its inputs' shape, and the
/// operands with the squeezes' inputs in their place. The op may then run before the squeeze:
/// the values are the same, element for element.
fn squeeze_sunk(op: &Op, inputs: &[usize], shape: &[usize], nodes: &[TapeNode]) -> Option<(Vec<usize>, Shape, Vec<usize>)> {
    if !matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Select | Op::AsType(_)) {
        return None;
    }
    let mut squeeze: Option<(&Vec<usize>, &Shape)> = None;
    let mut inner = Vec::with_capacity(inputs.len());
    for &i in inputs {
        let n = &nodes[i];
        let Value::Op(Op::Squeeze(axes), from) = &n.value else {
            if !n.shape.is_empty() {
                return None;
            }
            inner.push(i);
            continue;
        };
        let from_shape = &nodes[from[0]].shape;
        if n.shape.as_slice() != shape || squeeze.is_some_and(|(a, f)| a != axes || f != from_shape) {
            return None;
        }
        squeeze = Some((axes, from_shape));
        inner.push(from[0]);
    }
    let (axes, from) = squeeze?;
    Some((axes.clone(), from.clone(), inner))
}

/// Whether equal nodes of this op may be merged.
fn mergeable(op: &Op) -> bool {
    !matches!(op, Op::Kernel { .. })
}

/// The node an op is an identity of, if it is one on these inputs.
fn identity_of(op: &Op, inputs: &[usize], nodes: &[TapeNode]) -> Option<usize> {
    let first = inputs.first().map(|&i| &nodes[i]);
    let same = match op {
        Op::StopGradient => true,
        Op::Custom { call, .. } if call.rules().name == crate::transforms::custom::DEPENDS => false,
        Op::Custom { index, .. } => return Some(inputs[*index]),
        Op::Reshape { shape: s, .. } | Op::BroadcastTo(s) => first?.shape == *s,
        Op::Flatten { start, end } => start == end,
        Op::Squeeze(axes) | Op::ExpandDims(axes) => axes.is_empty(),
        Op::Transpose(perm) => perm.iter().enumerate().all(|(i, &p)| i == p),
        Op::AsType(d) => first?.dtype == *d,
        Op::Slice { start, step, len, .. } => {
            start.iter().all(|&s| s == 0) && step.iter().all(|&s| s == 1) && first?.shape.as_slice() == len.as_slice()
        }
        _ => false,
    };
    same.then(|| inputs[0])
}

/// How many nodes and outputs of `tape` read each node.
fn use_counts(tape: &Tape) -> Vec<usize> {
    let mut uses = vec![0; tape.nodes.len()];
    for node in &tape.nodes {
        if let Value::Op(_, inputs) = &node.value {
            inputs.iter().for_each(|&i| uses[i] += 1);
        }
    }
    tape.outputs.iter().for_each(|&o| uses[o] += 1);
    uses
}

/// `tape` with each `transpose(matmul(a, b))` over the last two axes, where nothing else reads
/// the product, as `matmul(transpose(b), transpose(a))` (the old product is left dead).
fn products_transposed(tape: Tape) -> Tape {
    let uses = use_counts(&tape);
    let mut nodes: Vec<TapeNode> = Vec::with_capacity(tape.nodes.len() + 2);
    let mut map: Vec<usize> = Vec::with_capacity(tape.nodes.len());
    for node in tape.nodes {
        let read_once = matches!(&node.value, Value::Op(Op::Transpose(_), from) if uses[from[0]] == 1);
        let value = match node.value {
            Value::Op(op, inputs) => Value::Op(op, inputs.iter().map(|&j| map[j]).collect()),
            v => v,
        };
        let value = match &value {
            Value::Op(Op::Transpose(perm), from) if read_once => transposed_operands(perm, from[0], &mut nodes).unwrap_or(value),
            _ => value,
        };
        map.push(nodes.len());
        nodes.push(TapeNode { value, ..node });
    }
    let outputs = tape.outputs.iter().map(|&o| map[o]).collect();
    Tape { nodes, outputs, inputs: tape.inputs }
}

/// `matmul(transpose(b), transpose(a))` for `transpose(matmul(a, b))`, node `product` of `nodes`
/// transposed by `perm`, when `perm` swaps the last two axes; the operands' transposes are
/// appended to `nodes`.
fn transposed_operands(perm: &[usize], product: usize, nodes: &mut Vec<TapeNode>) -> Option<Value> {
    let Value::Op(Op::Matmul, operands) = &nodes[product].value else { return None };
    let operands = operands.clone();
    let rank = perm.len();
    let swaps_last_two = rank >= 2
        && perm[..rank - 2].iter().enumerate().all(|(i, &p)| i == p)
        && perm[rank - 2] == rank - 1
        && perm[rank - 1] == rank - 2;
    if !swaps_last_two || operands.iter().any(|&x| nodes[x].shape.len() != rank) {
        return None;
    }
    let mut transposed = |x: usize| -> usize {
        // The operand of `x @ w.T`'s weight gradient is itself such a transpose: undo it.
        if let Value::Op(Op::Transpose(p), inner) = &nodes[x].value {
            if p.as_slice() == perm {
                return inner[0];
            }
        }
        let mut shape = nodes[x].shape.clone();
        shape.swap(rank - 2, rank - 1);
        let dtype = nodes[x].dtype;
        nodes.push(TapeNode { value: Value::Op(Op::Transpose(perm.to_vec()), vec![x]), shape, dtype });
        nodes.len() - 1
    };
    let (b, a) = (transposed(operands[1]), transposed(operands[0]));
    Some(Value::Op(Op::Matmul, vec![b, a]))
}

/// The bytes of a one-element constant, as a u64 key.
pub(super) fn scalar_bits(a: &Array) -> Option<u64> {
    if a.size() != 1 {
        return None;
    }
    let buf = a.buffer()?;
    buf.storage.to_host("compile").ok()?;
    Some(buf.first_element_bits(a.dtype().size()))
}

/// Keeps only the nodes the outputs depend on (inputs always stay, so input indices hold).
pub(crate) fn eliminate_dead(tape: Tape) -> Tape {
    let mut live = vec![false; tape.nodes.len()];
    for &o in &tape.outputs {
        live[o] = true;
    }
    for i in (0..tape.nodes.len()).rev() {
        if let Value::Input(_) = tape.nodes[i].value {
            live[i] = true;
        }
        if live[i] {
            if let Value::Op(_, inputs) = &tape.nodes[i].value {
                for &j in inputs {
                    live[j] = true;
                }
            }
        }
    }
    let mut map = vec![usize::MAX; tape.nodes.len()];
    let mut nodes = Vec::new();
    for (i, node) in tape.nodes.into_iter().enumerate() {
        if !live[i] {
            continue;
        }
        map[i] = nodes.len();
        let value = match node.value {
            Value::Op(op, inputs) => Value::Op(op, inputs.iter().map(|&j| map[j]).collect()),
            v => v,
        };
        nodes.push(TapeNode { value, ..node });
    }
    let outputs = tape.outputs.iter().map(|&o| map[o]).collect();
    Tape { nodes, outputs, inputs: tape.inputs }
}
