//! The lazy graph behind arrays as Graphviz DOT text (`export_to_dot`, as in mlx): every op an
//! eval of the given arrays would still run, back to the evaluated arrays they start from, so a
//! user can see what a computation will do before it runs (`dot -Tsvg` draws it).

use crate::array::{Array, State};
use crate::fast_hash::{FastMap, FastSet};
use std::fmt::Write as _;

/// DOT text of the graph computing `outputs`. Evaluated arrays are sources; each pending op is a
/// box with edges from its inputs to it and from it to its result; arrays are ellipses labelled
/// with a name (from `names`, else `A0`, `A1`, ... in the order found), their shape and dtype.
/// Results that nothing else in the graph uses are sinks.
pub fn to_dot(outputs: &[Array], names: &[(Array, String)]) -> String {
    let order = post_order(outputs);
    let mut named: FastMap<usize, String> = names.iter().map(|(a, n)| (a.id(), n.clone())).collect();
    let mut next = 0usize;
    let mut name_of = |a: &Array| -> String {
        named
            .entry(a.id())
            .or_insert_with(|| {
                next += 1;
                format!("A{}", next - 1)
            })
            .clone()
    };
    let used: FastSet<usize> = order.iter().flat_map(|(_, inputs)| inputs.iter().map(|i| i.id())).collect();
    let mut s = String::from("digraph {\n");
    for (a, inputs) in &order {
        let name = name_of(a);
        let label = format!("{name}\\n{} {}", crate::shape::fmt_shape(a.shape()), a.dtype());
        let Some(op) = op_name(a) else {
            let _ = writeln!(s, "  {{ rank=source; \"{name}\" [label=\"{label}\"]; }}");
            continue;
        };
        let sink = if used.contains(&a.id()) { "" } else { "rank=sink; " };
        let _ = writeln!(s, "  {{ \"op {name}\" [label=\"{op}\", shape=rectangle]; }}");
        for i in inputs {
            let _ = writeln!(s, "  \"{}\" -> \"op {name}\";", name_of(i));
        }
        let _ = writeln!(s, "  {{ {sink}\"{name}\" [label=\"{label}\"]; }}");
        let _ = writeln!(s, "  \"op {name}\" -> \"{name}\";");
    }
    s.push_str("}\n");
    s
}

/// The op computing `a`, if it is not evaluated.
fn op_name(a: &Array) -> Option<&'static str> {
    match &*a.lock() {
        State::Pending { op, .. } | State::Traced { op, .. } => Some(op.name()),
        State::Ready(_) | State::Placeholder(_) => None,
    }
}

/// Every array reachable from `outputs` through unevaluated ops, inputs before the arrays they
/// compute, each with its inputs (none for evaluated arrays); iterative, so deep graphs cannot
/// overflow the stack.
fn post_order(outputs: &[Array]) -> Vec<(Array, Vec<Array>)> {
    let mut order = Vec::new();
    let mut seen: FastSet<usize> = FastSet::default();
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((a, expanded)) = stack.pop() {
        let inputs = match &*a.lock() {
            State::Pending { inputs, .. } | State::Traced { inputs, .. } => inputs.clone(),
            State::Ready(_) | State::Placeholder(_) => Vec::new(),
        };
        if expanded {
            order.push((a, inputs));
            continue;
        }
        if !seen.insert(a.id()) {
            continue;
        }
        stack.push((a, true));
        stack.extend(inputs.into_iter().rev().filter(|i| !seen.contains(&i.id())).map(|i| (i, false)));
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;

    #[test]
    fn pending_ops_are_boxes_between_their_inputs_and_results() {
        let a = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let b = Array::from_slice(&[3.0f32, 4.0], &[2]).unwrap();
        let c = ops::add(&a, &b).unwrap();
        let d = ops::exp(&c).unwrap();
        let dot = to_dot(std::slice::from_ref(&d), &[(a.clone(), "x".into())]);
        assert!(dot.starts_with("digraph {\n") && dot.ends_with("}\n"), "{dot}");
        assert!(dot.contains("rank=source; \"x\""), "named input: {dot}");
        assert_eq!(dot.matches("shape=rectangle").count(), 2, "two pending ops: {dot}");
        assert!(dot.contains("[label=\"add\"") && dot.contains("[label=\"exp\""), "{dot}");
        assert!(dot.contains("\"x\" -> \"op "), "edge from the named input: {dot}");
        assert_eq!(dot.matches("rank=sink").count(), 1, "only the result nothing uses is a sink: {dot}");
        assert!(dot.contains("(2,) float32"), "shapes and dtypes label arrays: {dot}");
        d.eval().unwrap();
        let evaluated = to_dot(std::slice::from_ref(&d), &[]);
        assert_eq!(evaluated.matches("shape=rectangle").count(), 0, "nothing left to run: {evaluated}");
        assert!(evaluated.contains("rank=source; \"A0\""), "{evaluated}");
    }
}
