//! The part of a graph a transform rewrites: the nodes between a set of leaves (tracers or
//! placeholders) and a set of outputs, in topological order.

use crate::array::Array;
use crate::primitive::Op;
use std::collections::{HashMap, HashSet};

/// One node on a path from the leaves to the outputs, with its op and inputs.
pub(crate) struct Visit {
    pub node: Array,
    pub op: Op,
    pub inputs: Vec<Array>,
}

/// A graph section: the visits in topological order (inputs first) and the ids of every node
/// that depends on a leaf (the visits and the leaves themselves).
pub(crate) struct Section {
    pub order: Vec<Visit>,
    pub depends: HashSet<usize>,
}

impl Section {
    /// The nodes on paths from `leaves` to `outputs`. Found iteratively, so deep graphs cannot
    /// overflow the stack; nodes that do not depend on a leaf are constants and are left out.
    pub(crate) fn between(outputs: &[Array], leaves: &[Array]) -> Section {
        let leaf_ids: HashSet<usize> = leaves.iter().map(Array::id).collect();
        let mut post: Vec<Visit> = Vec::new();
        let mut seen: HashSet<usize> = HashSet::new();
        // Each entry: a node, and once expanded, its op and inputs (to finish after them).
        type Entry = (Array, Option<(Op, Vec<Array>)>);
        let mut stack: Vec<Entry> =
            outputs.iter().rev().map(|a| (a.clone(), None)).collect();
        while let Some((a, expanded)) = stack.pop() {
            if let Some((op, inputs)) = expanded {
                post.push(Visit { node: a, op, inputs });
                continue;
            }
            if leaf_ids.contains(&a.id()) || !seen.insert(a.id()) {
                continue;
            }
            let Some((op, inputs)) = a.op_and_inputs() else { continue };
            let next: Vec<Array> = inputs.iter().rev().filter(|i| !seen.contains(&i.id())).cloned().collect();
            stack.push((a, Some((op, inputs))));
            stack.extend(next.into_iter().map(|i| (i, None)));
        }
        let mut depends = leaf_ids;
        let mut order = Vec::new();
        for v in post {
            if v.inputs.iter().any(|i| depends.contains(&i.id())) {
                depends.insert(v.node.id());
                order.push(v);
            }
        }
        Section { order, depends }
    }

    /// Whether `a` depends on a leaf (or is one).
    pub(crate) fn reaches(&self, a: &Array) -> bool {
        self.depends.contains(&a.id())
    }

    /// How many outputs of each custom call the section holds, keyed by call id.
    pub(crate) fn custom_call_counts(&self) -> HashMap<usize, usize> {
        let mut counts = HashMap::new();
        for v in &self.order {
            if let Op::Custom { call, .. } = &v.op {
                *counts.entry(call.id()).or_insert(0) += 1;
            }
        }
        counts
    }
}
