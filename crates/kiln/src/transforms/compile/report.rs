//! Introspection: what compile did with a function for one input signature. The graph as traced
//! and after simplification (as text and as Graphviz DOT), each fused group with its member ops
//! and its IR, the ops that stayed single (opaque boundaries such as matmul or user kernels), and
//! how many kernels an eager run would launch against the compiled run.

use super::fuse::{Group, Grouping};
use super::plan::{Plan, Step};
use super::trace::{Tape, Value};
use crate::shape::fmt_shape;
use std::fmt::{self, Write};

/// One fused kernel of a compiled function.
#[derive(Clone, Debug)]
pub struct GroupReport {
    /// The kernel's name.
    pub name: String,
    /// The member ops, in order, as `%id = op` lines of the simplified graph.
    pub members: Vec<String>,
    /// The kernel's fused IR as text.
    pub ir: String,
    /// How the CPU runs it: as native code (and where its C source is), or interpreted and why.
    pub engine: String,
    /// How it last ran on a GPU (CUDA source, launch shape, registers, shared memory), once the
    /// plan has run there.
    pub gpu: Option<crate::backend::cuda::launches::GpuLaunch>,
}

/// What compile did for one input signature.
#[derive(Clone, Debug)]
pub struct Report {
    /// The graph as traced, one node per line.
    pub graph_before: String,
    /// The graph after simplification.
    pub graph_after: String,
    /// The fused kernels.
    pub groups: Vec<GroupReport>,
    /// Ops that run alone (not fusible: matmul, sort, gather, user kernels, ...), by name.
    pub boundaries: Vec<String>,
    /// Kernels an eager run of the traced graph launches (views excluded).
    pub eager_kernels: usize,
    /// Kernels the compiled plan launches.
    pub compiled_kernels: usize,
    /// The simplified graph in Graphviz DOT, fused groups drawn as clusters.
    pub dot: String,
    /// How the plan replays on a GPU (as a CUDA graph or kernel by kernel), once it ran there
    /// as several steps.
    pub gpu_replay: Option<String>,
}

fn node_line(tape: &Tape, i: usize) -> String {
    let n = &tape.nodes[i];
    let what = match &n.value {
        Value::Input(k) => format!("input {k}"),
        Value::Constant(a) if a.size() == 1 => format!("constant {}", a.to_f64_vec().map_or(String::new(), |v| v[0].to_string())),
        Value::Constant(_) => "constant".to_string(),
        Value::Op(op, ins) => {
            let args: Vec<String> = ins.iter().map(|j| format!("%{j}")).collect();
            format!("{}({})", op.name(), args.join(", "))
        }
    };
    format!("%{i} = {what} : {} {}", n.dtype, fmt_shape(&n.shape))
}

fn graph_text(tape: &Tape) -> String {
    let mut s = String::new();
    for i in 0..tape.nodes.len() {
        let _ = writeln!(s, "{}", node_line(tape, i));
    }
    let outs: Vec<String> = tape.outputs.iter().map(|o| format!("%{o}")).collect();
    let _ = write!(s, "return {}", outs.join(", "));
    s
}

fn dot(tape: &Tape, grouping: &Grouping) -> String {
    let mut s = String::from("digraph compiled {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n");
    for (k, g) in grouping.kernels.iter().enumerate() {
        let _ = writeln!(s, "  subgraph cluster_{k} {{\n    label=\"kernel {k}: {}\";\n    style=filled; color=lightgrey;", g.kernel.name);
        for &m in &g.members {
            let _ = writeln!(s, "    n{m};");
        }
        s.push_str("  }\n");
    }
    for (i, n) in tape.nodes.iter().enumerate() {
        let label = node_line(tape, i).replace('"', "'");
        let _ = writeln!(s, "  n{i} [label=\"{label}\"];");
        if let Value::Op(_, ins) = &n.value {
            for j in ins {
                let _ = writeln!(s, "  n{j} -> n{i};");
            }
        }
    }
    for (k, o) in tape.outputs.iter().enumerate() {
        let _ = writeln!(s, "  out{k} [shape=ellipse, label=\"output {k}\"];\n  n{o} -> out{k};");
    }
    s.push('}');
    s
}

impl Report {
    pub(crate) fn new(traced: &Tape, simplified: &Tape, grouping: &Grouping, plan: &Plan) -> Report {
        let eager_kernels = traced
            .nodes
            .iter()
            .filter(|n| matches!(&n.value, Value::Op(op, _) if !op.is_view()))
            .count();
        let compiled_kernels = plan.launches();
        // The plan's own copy of each kernel is the one that ran (and whose launch was recorded).
        let planned = |name: &str| {
            plan.steps.iter().find_map(|s| match s {
                Step::Fused { kernel, .. } if kernel.name == name => Some(kernel),
                _ => None,
            })
        };
        let groups = grouping
            .kernels
            .iter()
            .map(|g| GroupReport {
                name: g.kernel.name.clone(),
                members: g.members.iter().map(|&m| node_line(simplified, m)).collect(),
                ir: g.kernel.to_string(),
                engine: crate::backend::cpu::fused::engine(&g.kernel).to_string(),
                gpu: planned(&g.kernel.name).and_then(|k| crate::backend::cuda::launches::last_launch(k)),
            })
            .collect();
        let boundaries = grouping
            .order
            .iter()
            .filter_map(|u| match u {
                Group::Single(i) => match &simplified.nodes[*i].value {
                    Value::Op(op, _) if !op.is_view() => Some(node_line(simplified, *i)),
                    _ => None,
                },
                Group::Fused(_) => None,
            })
            .collect();
        Report {
            graph_before: graph_text(traced),
            graph_after: graph_text(simplified),
            groups,
            boundaries,
            eager_kernels,
            compiled_kernels,
            dot: dot(simplified, grouping),
            gpu_replay: plan.gpu_replay(),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernels: {} eager -> {} compiled", self.eager_kernels, self.compiled_kernels)?;
        writeln!(f, "graph as traced:\n{}", self.graph_before)?;
        writeln!(f, "graph after simplification:\n{}", self.graph_after)?;
        for (k, g) in self.groups.iter().enumerate() {
            writeln!(f, "fused kernel {k} ({} ops):", g.members.len())?;
            for m in &g.members {
                writeln!(f, "  {m}")?;
            }
            writeln!(f, "{}", g.ir)?;
            match &g.gpu {
                Some(launch) => writeln!(f, "{launch}\nCUDA source:\n{}", launch.source)?,
                None => writeln!(f, "runs as: {}", g.engine)?,
            }
        }
        match &self.gpu_replay {
            Some(how) => writeln!(f, "GPU replay: {how}")?,
            None if self.groups.iter().any(|g| g.gpu.is_some()) => match self.compiled_kernels {
                1 => writeln!(f, "GPU replay: the plan's one kernel is launched directly (no CUDA graph needed)")?,
                _ => writeln!(f, "GPU replay: {}", crate::backend::cuda::graph::OFF)?,
            },
            None => {}
        }
        if !self.boundaries.is_empty() {
            writeln!(f, "single ops (not fused):")?;
            for b in &self.boundaries {
                writeln!(f, "  {b}")?;
            }
        }
        Ok(())
    }
}
