//! Fusion: grouping tape nodes into fused kernels, and lowering each group to the fused IR.
//!
//! A group has an iteration space `S` and the block of axes its reductions fold: trailing ones, or
//! on the CPU a block with kept axes after it (columns, [`crate::fused::Kernel::inner`]). Walking
//! the tape in order, an elementwise op (unary, binary, where, astype) joins the group of one of
//! its operands when its shape is the group's space (element level) or the space with the reduced
//! axes set to 1 (row level: arithmetic on reduction results). A reduction over one block of
//! consecutive axes joins the group of its operand (its prologue) when that group folds the same
//! block or nothing yet, or starts one. So an elementwise chain is one kernel, and softmax, layer
//! norm, logsumexp and losses over the last axis (or, on the CPU, over any one block of axes, as
//! a batch norm's statistics) are one kernel each.
//! Anything else (matmul, sort, gather, views, user kernels, ...) runs as a single op: an opaque
//! boundary that the groups before and after it do not cross.
//!
//! A node never joins a group that one of its other operands depends on through a node outside
//! the group: that would make the group wait for itself.
//!
//! Where an elementwise node's operands come from two groups of the same space (two branches that
//! meet, as in `exp(-x) + 2 * x` or `b1 * m + (1 - b1) * g`, or two row reductions of the same
//! rows, as in the cross-entropy `logsumexp(l) - sum(l * onehot)`), the node joins the larger
//! group and the other is merged into it, unless a node outside both lies on a path between them.

use super::trace::{Tape, Value};
use crate::fused::{InstOp, Inst, Kernel, Level};
use crate::primitive::Op;
use crate::shape::Shape;
use super::group_set::GroupSet;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

/// A unit of execution: a single op node, or a fused group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    /// One tape node run as one op.
    Single(usize),
    /// Fused kernel `k` of [`Grouping::kernels`].
    Fused(usize),
}

/// A fused group with its kernel and where its values come from and go.
#[derive(Debug)]
pub(crate) struct FusedGroup {
    pub kernel: Arc<Kernel>,
    /// Tape nodes read (kernel input k is `inputs[k]`).
    pub inputs: Vec<usize>,
    /// Tape nodes written (kernel output k is `outputs[k]`).
    pub outputs: Vec<usize>,
    /// The member nodes, in tape order.
    pub members: Vec<usize>,
    /// A node whose shape is the iteration space.
    pub space: usize,
}

/// The tape split into execution units, in an order that respects every dependency.
#[derive(Debug)]
pub(crate) struct Grouping {
    pub order: Vec<Group>,
    pub kernels: Vec<FusedGroup>,
}

struct Building {
    space: Shape,
    reduced: usize,
    /// Kept axes after the reduced ones ([`Kernel::inner`]).
    inner: usize,
    /// Whether its rows are few and long on a GPU ([`crate::fused::fuses_split_rows`]): the kernel then
    /// folds each row over many blocks and finishes the rows in a second kernel, so the group
    /// keeps to one pass over the elements (nothing at element level uses a row value).
    split: bool,
    /// Member nodes (sorted into tape order once grouping ends).
    members: Vec<usize>,
    /// The groups merged into this one (directly or through others): their nodes are this
    /// group's now.
    absorbed: Vec<usize>,
    /// Groups that the operands from outside this group depend on (as they were numbered then;
    /// `absorbed` maps them to the groups that hold those nodes now).
    waits: GroupSet,
}

impl Building {
    /// An empty group over `space` that folds `reduced` axes followed by `inner` kept ones.
    fn new(space: Shape, (reduced, inner): (usize, usize)) -> Building {
        Building { space, reduced, inner, split: false, members: Vec::new(), absorbed: Vec::new(), waits: GroupSet::default() }
    }

    /// The row shape: the space with its reduced axes set to 1.
    fn row_shape(&self) -> Shape {
        let mut r = self.space.clone();
        let end = r.len() - self.inner;
        for d in r[end - self.reduced..end].iter_mut() {
            *d = 1;
        }
        r
    }

    /// Whether a reduction of `block` ((reduced, inner) axes) can join: the group folds nothing
    /// yet or folds the same axes.
    fn folds_like(&self, block: (usize, usize)) -> bool {
        self.reduced == 0 || (self.reduced, self.inner) == block
    }
    /// The level a node of `shape` has in this group, if it fits.
    fn level_of(&self, shape: &[usize]) -> Option<Level> {
        if shape == self.space.as_slice() {
            Some(Level::Element)
        } else if self.reduced > 0 && shape == self.row_shape().as_slice() {
            Some(Level::Row)
        } else {
            None
        }
    }
}

/// Whether a node with ancestor groups `deps` (or a group waiting on `deps`) depends on group `g`
/// or on a group merged into it.
fn depends_on(groups: &[Building], deps: &GroupSet, g: usize) -> bool {
    deps.contains(g) || groups[g].absorbed.iter().any(|&h| deps.contains(h))
}

/// Whether `op` computes each element from the same position of its operands (what fuses).
pub(super) fn is_elementwise(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Select | Op::AsType(_))
}

/// The axes a reduction folds as (reduced, inner): one consecutive block of `reduced` axes with
/// `inner` kept axes after it, folding more than one element (reductions over size-1 axes are
/// copies and stay single). Blocks with kept axes after them (columns) only where `columns`.
fn reduction_block(op: &Op, in_shape: &[usize], columns: bool) -> Option<(usize, usize)> {
    let Op::Reduce { axes, .. } = op else { return None };
    let (&first, &last) = (axes.first()?, axes.last()?);
    let consecutive = axes.iter().enumerate().all(|(i, &a)| a == first + i);
    let inner = in_shape.len() - 1 - last;
    let folds = axes.iter().map(|&a| in_shape[a]).product::<usize>() > 1;
    (consecutive && folds && (inner == 0 || columns)).then_some((axes.len(), inner))
}

/// Where a plan will run, as far as grouping cares.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Target {
    /// On a GPU, its multiprocessors: a reduction of rows few and long for them
    /// ([`crate::fused::fuses_split_rows`]) fuses only into a group of one pass over the
    /// elements. A row kernel folds each row in one block, which leaves most of the GPU idle when
    /// rows are few and long; a one-pass kernel instead folds parts of each row in many blocks and
    /// finishes the rows (and the row arithmetic after the fold) in a second kernel.
    pub gpu_multiprocessors: Option<usize>,
    /// Whether the plan runs on a GPU (whose fused kernels fold trailing axes only).
    pub gpu: bool,
    /// Fuse elementwise ops only, leaving every reduction a single op (eager fusion: a fused
    /// reduction may fold in another order than the reduction kernel, and eager results must not
    /// depend on whether fusion ran).
    pub elementwise_only: bool,
}

impl Target {
    /// Whether reductions with kept axes after the reduced ones fuse ([`Kernel::inner`]): on
    /// the CPU only.
    fn fuses_columns(&self) -> bool {
        !self.gpu
    }
}

/// Whether a reduction of the last `k` axes of `shape` folds few long rows on `target`.
fn split_rows(shape: &[usize], k: usize, target: Target) -> bool {
    let split = shape.len() - k;
    let (rows, len) = (shape[..split].iter().product::<usize>(), shape[split..].iter().product::<usize>());
    target.gpu_multiprocessors.is_some_and(|sms| crate::fused::fuses_split_rows(sms, rows, len))
}

/// Groups the tape's nodes (`enabled` false: every op alone, for the no_fuse mode) for `target`.
pub(crate) fn fuse(tape: &Tape, enabled: bool, target: Target) -> Grouping {
    let n = tape.nodes.len();
    let mut group_of: Vec<Option<usize>> = vec![None; n];
    let mut level: Vec<Level> = vec![Level::Element; n];
    let mut groups: Vec<Building> = Vec::new();
    let mut deps: Vec<GroupSet> = vec![GroupSet::default(); n];
    for (id, node) in tape.nodes.iter().enumerate() {
        let Value::Op(op, inputs) = &node.value else { continue };
        let mut d = GroupSet::default();
        for &i in inputs {
            d.union_with(&deps[i]);
            if let Some(g) = group_of[i] {
                d.insert(g);
            }
        }
        deps[id] = d;
        // complex64 ops run alone: fused kernels (interpreted, native C, CUDA) have no complex type.
        let complex = node.dtype.is_complex() || inputs.iter().any(|&i| tape.nodes[i].dtype.is_complex());
        if !enabled || complex {
            continue;
        }
        // A group may take this node only if no other operand waits for that group.
        let acyclic = |g: usize| inputs.iter().all(|&i| group_of[i] == Some(g) || !depends_on(&groups, &deps[i], g));
        if is_elementwise(op) {
            // The largest group that fits (merging the smaller ones into it moves fewer nodes).
            let joined = inputs.iter().filter_map(|&i| group_of[i]).filter_map(|g| {
                let lv = groups[g].level_of(&node.shape)?;
                let operands_fit = inputs.iter().all(|&i| group_of[i] != Some(g) || lv == Level::Element || level[i] == Level::Row);
                // In a split group a row value is known only after the second kernel.
                let one_pass = !groups[g].split || lv == Level::Row || inputs.iter().all(|&i| group_of[i] != Some(g) || level[i] == Level::Element);
                (operands_fit && one_pass && acyclic(g)).then_some((g, lv))
            }).rev().max_by_key(|&(g, _)| groups[g].members.len());
            let (g, lv) = joined.unwrap_or_else(|| {
                groups.push(Building::new(node.shape.clone(), (0, 0)));
                (groups.len() - 1, Level::Element)
            });
            if joined.is_some() {
                for &i in inputs {
                    if let Some(h) = group_of[i] {
                        if mergeable(&groups, &group_of, &deps, inputs, g, h) {
                            merge(&mut groups, &mut group_of, g, h);
                        }
                    }
                }
            }
            join(&mut groups[g], inputs, id, g, &group_of, &deps);
            group_of[id] = Some(g);
            level[id] = lv;
        } else if let Some(block) = inputs
            .first()
            .filter(|_| !target.elementwise_only)
            .and_then(|&x| reduction_block(op, &tape.nodes[x].shape, target.fuses_columns()))
        {
            let x = inputs[0];
            let split = block.1 == 0 && split_rows(&tape.nodes[x].shape, block.0, target);
            let joined = group_of[x].filter(|&g| {
                let b = &groups[g];
                b.space == tape.nodes[x].shape && b.folds_like(block) && level[x] == Level::Element && acyclic(g)
            });
            let g = joined.unwrap_or_else(|| {
                groups.push(Building::new(tape.nodes[x].shape.clone(), block));
                groups.len() - 1
            });
            (groups[g].reduced, groups[g].inner) = block;
            groups[g].split = split;
            join(&mut groups[g], inputs, id, g, &group_of, &deps);
            group_of[id] = Some(g);
            level[id] = Level::Row;
        }
    }
    for b in &mut groups {
        b.members.sort_unstable();
    }
    // Groups of one node run as that op's own kernel.
    let mut kernel_of: Vec<Option<usize>> = vec![None; groups.len()];
    let mut kernels = Vec::new();
    let mut read_outside = vec![false; n];
    for &o in &tape.outputs {
        read_outside[o] = true;
    }
    for (c, node) in tape.nodes.iter().enumerate() {
        if let Value::Op(_, inputs) = &node.value {
            for &i in inputs {
                if group_of[i].is_none() || group_of[i] != group_of[c] {
                    read_outside[i] = true;
                }
            }
        }
    }
    for (g, b) in groups.iter().enumerate() {
        if b.members.len() > 1 {
            kernel_of[g] = Some(kernels.len());
            kernels.push(lower(tape, b, &group_of, g, &level, &read_outside));
        }
    }
    let unit_of = |id: usize| -> Option<Group> {
        match &tape.nodes[id].value {
            Value::Op(..) => Some(match group_of[id].and_then(|g| kernel_of[g]) {
                Some(k) => Group::Fused(k),
                None => Group::Single(id),
            }),
            _ => None,
        }
    };
    match schedule(tape, &unit_of) {
        Some(order) => Grouping { order, kernels },
        // Two groups that each grew to need the other: run every op alone rather than fail.
        None => fuse(tape, false, target),
    }
}

/// Adds node `id` with operands `inputs` to group `b` (numbered `g`).
fn join(b: &mut Building, inputs: &[usize], id: usize, g: usize, group_of: &[Option<usize>], deps: &[GroupSet]) {
    b.members.push(id);
    for &i in inputs {
        if group_of[i] != Some(g) {
            b.waits.union_with(&deps[i]);
        }
    }
}

/// Whether group `h`, holding an operand of a node that joins group `g`, can merge into `g`: a
/// group of the same space that is elementwise or folds the same axes (sibling row reductions,
/// as the two halves of a cross-entropy), with no path between the two through a node outside
/// both (neither group, nor the joining node, reads an outside value that depends on the other).
/// Split groups never merge: the merged group might need a second pass over the elements.
fn mergeable(groups: &[Building], group_of: &[Option<usize>], deps: &[GroupSet], inputs: &[usize], g: usize, h: usize) -> bool {
    h != g
        && !groups[g].split
        && !groups[h].split
        && (groups[h].reduced == 0 || (groups[h].reduced, groups[h].inner) == (groups[g].reduced, groups[g].inner))
        && groups[h].space == groups[g].space
        && !depends_on(groups, &groups[h].waits, g)
        && !depends_on(groups, &groups[g].waits, h)
        && inputs.iter().all(|&i| group_of[i] == Some(g) || group_of[i] == Some(h) || !depends_on(groups, &deps[i], h))
}

/// Moves the members of group `h` into group `g`.
fn merge(groups: &mut [Building], group_of: &mut [Option<usize>], g: usize, h: usize) {
    let members = std::mem::take(&mut groups[h].members);
    for &m in &members {
        group_of[m] = Some(g);
    }
    let waits = std::mem::take(&mut groups[h].waits);
    let absorbed = std::mem::take(&mut groups[h].absorbed);
    groups[g].members.extend(members);
    groups[g].waits.union_with(&waits);
    groups[g].absorbed.extend(absorbed);
    groups[g].absorbed.push(h);
}

/// Orders the units so that each runs after the units producing its inputs (Kahn's algorithm,
/// taking the unit whose first node comes earliest in the tape); `None` if the groups formed a
/// cycle (a group that grew after another group took a node depending on it).
fn schedule(tape: &Tape, unit_of: &dyn Fn(usize) -> Option<Group>) -> Option<Vec<Group>> {
    let mut units: Vec<Group> = Vec::new();
    let mut index: HashMap<Group, usize> = HashMap::new();
    let mut first: Vec<usize> = Vec::new();
    let mut node_unit: Vec<Option<usize>> = vec![None; tape.nodes.len()];
    for (id, unit) in node_unit.iter_mut().enumerate() {
        if let Some(u) = unit_of(id) {
            let next = units.len();
            let ix = *index.entry(u).or_insert(next);
            if ix == next {
                units.push(u);
                first.push(id);
            }
            *unit = Some(ix);
        }
    }
    let mut succ: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); units.len()];
    let mut indegree = vec![0usize; units.len()];
    for (id, node) in tape.nodes.iter().enumerate() {
        if let (Value::Op(_, inputs), Some(u)) = (&node.value, node_unit[id]) {
            for &i in inputs {
                if let Some(p) = node_unit[i] {
                    if p != u && succ[p].insert(u) {
                        indegree[u] += 1;
                    }
                }
            }
        }
    }
    let mut ready: BinaryHeap<std::cmp::Reverse<(usize, usize)>> =
        (0..units.len()).filter(|&u| indegree[u] == 0).map(|u| std::cmp::Reverse((first[u], u))).collect();
    let mut order = Vec::with_capacity(units.len());
    while let Some(std::cmp::Reverse((_, u))) = ready.pop() {
        order.push(units[u]);
        for &s in &succ[u] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push(std::cmp::Reverse((first[s], s)));
            }
        }
    }
    (order.len() == units.len()).then_some(order)
}

/// Lowers group `g` to the fused IR.
fn lower(tape: &Tape, b: &Building, group_of: &[Option<usize>], g: usize, level: &[Level], read_outside: &[bool]) -> FusedGroup {
    let mut insts: Vec<Inst> = Vec::new();
    let mut inst_of: HashMap<(usize, Level), usize> = HashMap::new();
    let mut inputs: Vec<usize> = Vec::new();
    let push = |insts: &mut Vec<Inst>, op: InstOp, dtype, lv: Level| {
        let phase = match op {
            InstOp::Reduce(_, v) => insts[v].phase + 1,
            _ => crate::fused::operands(&op).iter().map(|&o| insts[o].phase).max().unwrap_or(0),
        };
        insts.push(Inst { op, dtype, level: lv, phase });
        insts.len() - 1
    };
    for &m in &b.members {
        let Value::Op(op, operands) = &tape.nodes[m].value else { unreachable!("members are ops") };
        let lv = level[m];
        // A reduction reads its operand per element; other ops at their own level.
        let at = if matches!(op, Op::Reduce { .. }) { Level::Element } else { lv };
        let mut args = Vec::new();
        for &i in operands {
            let node = &tape.nodes[i];
            let v = if group_of[i] == Some(g) {
                let v = inst_of[&(i, level[i])];
                if at == Level::Element && level[i] == Level::Row {
                    *inst_of.entry((i, Level::Element)).or_insert_with(|| push(&mut insts, InstOp::Broadcast(v), node.dtype, Level::Element))
                } else {
                    v
                }
            } else if let Some(bits) = scalar_constant(&node.value) {
                *inst_of.entry((i, at)).or_insert_with(|| push(&mut insts, InstOp::Const(bits), node.dtype, at))
            } else {
                let k = inputs.iter().position(|&x| x == i).unwrap_or_else(|| {
                    inputs.push(i);
                    inputs.len() - 1
                });
                *inst_of.entry((i, at)).or_insert_with(|| push(&mut insts, InstOp::Load(k), node.dtype, at))
            };
            args.push(v);
        }
        let dtype = tape.nodes[m].dtype;
        let inst = match op {
            Op::Unary(u) => InstOp::Unary(*u, args[0]),
            Op::Binary(o) => InstOp::Binary(*o, args[0], args[1]),
            Op::Select => InstOp::Select(args[0], args[1], args[2]),
            Op::AsType(_) => InstOp::Cast(args[0]),
            Op::Reduce { op, .. } => InstOp::Reduce(*op, args[0]),
            _ => unreachable!("only elementwise ops and reductions are fused"),
        };
        let id = push(&mut insts, inst, dtype, lv);
        inst_of.insert((m, lv), id);
    }
    let outputs: Vec<usize> = b.members.iter().copied().filter(|&m| read_outside[m]).collect();
    let passes = 1 + insts.iter().filter(|i| i.level == Level::Element).map(|i| i.phase).max().unwrap_or(0);
    let name = b.members.iter().map(|&m| tape_op_name(tape, m)).collect::<Vec<_>>().join("_");
    let kernel = Kernel {
        name: if name.len() > 60 { format!("{}_x{}", &name[..name[..60].rfind('_').unwrap_or(60)], b.members.len()) } else { name },
        reduced: b.reduced,
        inner: b.inner,
        inputs: inputs.iter().map(|&i| tape.nodes[i].dtype).collect(),
        outputs: outputs.iter().map(|&m| inst_of[&(m, level[m])]).collect(),
        insts,
        passes,
        lowered: Default::default(),
    };
    let space = b
        .members
        .iter()
        .copied()
        .find(|&m| level[m] == Level::Element)
        .unwrap_or_else(|| match &tape.nodes[b.members[0]].value {
            Value::Op(_, ins) => ins[0],
            _ => unreachable!("members are ops"),
        });
    FusedGroup { kernel: Arc::new(kernel), inputs, outputs, members: b.members.clone(), space }
}

fn tape_op_name(tape: &Tape, m: usize) -> &'static str {
    match &tape.nodes[m].value {
        Value::Op(op, _) => op.name(),
        _ => "input",
    }
}

/// The bits of a one-element constant, to bake into a kernel.
fn scalar_constant(v: &Value) -> Option<u64> {
    match v {
        Value::Constant(a) if a.size() == 1 => super::simplify::scalar_bits(a),
        _ => None,
    }
}
