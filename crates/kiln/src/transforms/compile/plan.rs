//! The prepared execution plan a cache hit replays: a list of steps over numbered value slots
//! (fused kernels and single ops), with each slot freed right after its last use and an input
//! offered for donation when the step is its last reader. Replay touches no graph: it runs the
//! steps on buffers.

use super::fuse::{Group, Grouping};
use super::trace::{Tape, Value};
use crate::backend::{self, Input};
use crate::buffer::Buffer;
use crate::device::Stream;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::fused::Kernel;
use crate::kernel::KernelCall;
use crate::primitive::Op;
use crate::shape::Shape;
use crate::backend::cuda::graph::PlanGraph;
use crate::device::DeviceKind;
use std::sync::{Arc, Mutex};

/// One step of a plan.
#[derive(Debug)]
pub(crate) enum Step {
    /// One op on the backend (matmul, sort, views, ... and anything not fused).
    Single { node: usize, op: Op, inputs: Vec<usize> },
    /// A user kernel call: one run fills every output the graph uses, as (index, slot).
    Kernel { call: KernelCall, inputs: Vec<usize>, outputs: Vec<(usize, usize)> },
    /// A fused kernel: reads `inputs` (slots), writes `outputs` (slots); slot `space` has the
    /// shape of its iteration space.
    Fused { kernel: Arc<Kernel>, inputs: Vec<usize>, outputs: Vec<usize>, space: usize },
}

impl Step {
    fn reads(&self) -> &[usize] {
        match self {
            Step::Single { inputs, .. } | Step::Fused { inputs, .. } | Step::Kernel { inputs, .. } => inputs,
        }
    }
}

/// A ready-to-run plan for one input signature.
pub(crate) struct Plan {
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// For each step, the slots whose last reader it is (freed after it; donatable to it).
    last_reads: Vec<Vec<usize>>,
    /// Constant slots and their data.
    constants: Vec<(usize, Buffer)>,
    /// The slots returned, in output order.
    pub outputs: Vec<usize>,
    /// Slot count.
    slots: usize,
    /// On a GPU, the CUDA graph the plan replays as (see [`crate::backend::cuda::graph`]).
    graph: Mutex<PlanGraph>,
}

impl Plan {
    /// Builds the plan of a tape whose nodes were grouped into fused kernels by `grouping`.
    pub(crate) fn new(tape: &Tape, grouping: &Grouping) -> Plan {
        let mut steps = Vec::new();
        for unit in &grouping.order {
            match unit {
                Group::Single(node) => match &tape.nodes[*node].value {
                    Value::Op(Op::Kernel { call, index }, inputs) => {
                        let sibling = steps.iter_mut().find_map(|s| match s {
                            Step::Kernel { call: c, inputs: i, outputs } if c == call && i == inputs => Some(outputs),
                            _ => None,
                        });
                        match sibling {
                            Some(outputs) => outputs.push((*index, *node)),
                            None => steps.push(Step::Kernel {
                                call: call.clone(),
                                inputs: inputs.clone(),
                                outputs: vec![(*index, *node)],
                            }),
                        }
                    }
                    Value::Op(op, inputs) => {
                        steps.push(Step::Single { node: *node, op: op.clone(), inputs: inputs.clone() })
                    }
                    _ => {}
                },
                Group::Fused(k) => {
                    let f = &grouping.kernels[*k];
                    steps.push(Step::Fused {
                        kernel: f.kernel.clone(),
                        inputs: f.inputs.clone(),
                        outputs: f.outputs.clone(),
                        space: f.space,
                    });
                }
            }
        }
        let mut last: Vec<Option<usize>> = vec![None; tape.nodes.len()];
        for (s, step) in steps.iter().enumerate() {
            for &i in step.reads() {
                last[i] = Some(s);
            }
        }
        let mut last_reads = vec![Vec::new(); steps.len()];
        for (slot, l) in last.iter().enumerate() {
            if let Some(s) = l {
                if !tape.outputs.contains(&slot) {
                    last_reads[*s].push(slot);
                }
            }
        }
        let constants = tape
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.value {
                Value::Constant(a) => Some((i, a.buffer().expect("constants are evaluated when traced"))),
                _ => None,
            })
            .collect();
        Plan {
            steps,
            last_reads,
            constants,
            outputs: tape.outputs.clone(),
            slots: tape.nodes.len(),
            graph: Mutex::new(PlanGraph::default()),
        }
    }

    /// The steps that launch work (views excluded): the compiled kernel count.
    pub(crate) fn launches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| match s {
                Step::Single { op, .. } => !op.is_view(),
                Step::Fused { .. } | Step::Kernel { .. } => true,
            })
            .count()
    }

    /// How the plan last replayed on a GPU (for the report), if it ran there as several steps.
    pub(crate) fn gpu_replay(&self) -> Option<String> {
        self.graph.lock().unwrap_or_else(|e| e.into_inner()).describe()
    }

    /// Runs the plan on the input buffers (slots `0..inputs.len()`), with every slot's shape and
    /// dtype given by `shapes` and `dtypes` (the traced ones, or re-inferred in shapeless mode).
    /// On a GPU a plan of several steps goes through its CUDA graph.
    pub(crate) fn run(&self, stream: Stream, inputs: Vec<Buffer>, shapes: &[Shape], dtypes: &[Dtype]) -> Result<Vec<Buffer>> {
        use crate::backend::cuda::graph;
        // A plan run from inside another plan's recording (a host kernel calling a compiled
        // function) runs directly: the recording owns the stream, and this plan's lock may be held.
        if stream.device.kind != DeviceKind::Gpu || !graph::enabled() || graph::capturing() {
            return self.run_steps(stream, inputs, shapes, dtypes);
        }
        let launches = self.launches();
        if launches < 2 {
            return self.run_steps(stream, inputs, shapes, dtypes);
        }
        let output_bytes = self.outputs.iter().map(|&o| shapes[o].iter().product::<usize>() * dtypes[o].size()).sum();
        // A call while another holds the graph (another thread, or this plan re-entered from a
        // host kernel) launches kernel by kernel rather than wait.
        let Ok(mut graph) = self.graph.try_lock() else {
            return self.run_steps(stream, inputs, shapes, dtypes);
        };
        graph.run(stream, launches, output_bytes, shapes, inputs, |ins| self.run_steps(stream, ins, shapes, dtypes))
    }

    /// Runs the steps one by one.
    fn run_steps(&self, stream: Stream, inputs: Vec<Buffer>, shapes: &[Shape], dtypes: &[Dtype]) -> Result<Vec<Buffer>> {
        let mut slots: Vec<Option<Buffer>> = vec![None; self.slots];
        for (i, b) in inputs.into_iter().enumerate() {
            slots[i] = Some(b);
        }
        for (i, b) in &self.constants {
            slots[*i] = Some(b.clone());
        }
        for (step, last) in self.steps.iter().zip(&self.last_reads) {
            let input = |slots: &mut Vec<Option<Buffer>>, i: usize, once: bool| {
                // A last read that appears once in the step may be donated: take the slot's buffer,
                // so the storage count tells whether anybody else can still see it.
                let take = once && last.contains(&i);
                let buffer = if take { slots[i].take() } else { slots[i].clone() }.expect("slots are filled before use");
                let donatable = take && Arc::strong_count(&buffer.storage) == 1 && buffer.storage.host_only();
                Input { shape: shapes[i].clone(), dtype: dtypes[i], buffer, donatable }
            };
            match step {
                Step::Single { node, op, inputs } => {
                    let data: Vec<Input> = inputs
                        .iter()
                        .map(|&i| input(&mut slots, i, inputs.iter().filter(|&&j| j == i).count() == 1))
                        .collect();
                    let out = backend::run(stream, op, &data, &shapes[*node], dtypes[*node])?;
                    slots[*node] = Some(out);
                }
                Step::Kernel { call, inputs, outputs } => {
                    let data: Vec<Input> = inputs.iter().map(|&i| input(&mut slots, i, false)).collect();
                    let results = call.run_all(stream, &data)?;
                    for &(index, slot) in outputs {
                        slots[slot] = Some(results[index].clone());
                    }
                }
                Step::Fused { kernel, inputs, outputs, space } => {
                    let data: Vec<Input> = inputs
                        .iter()
                        .map(|&i| input(&mut slots, i, kernel.may_donate()))
                        .collect();
                    let results = crate::backend::run_fused(stream, kernel, &data, &shapes[*space])?;
                    for (&o, b) in outputs.iter().zip(results) {
                        slots[o] = Some(b);
                    }
                }
            }
            for &i in last {
                slots[i] = None;
            }
        }
        Ok(self.outputs.iter().map(|&o| slots[o].clone().expect("outputs are computed")).collect())
    }
}
