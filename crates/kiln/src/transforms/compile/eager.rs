//! Eager fusion on the GPU: `eval` runs chains of pending elementwise ops as fused kernels.
//!
//! kiln's graph is lazy, so `eval(x * (1 + erf(x / √2)) / 2)` sees all five ops at once. Run one
//! by one (as PyTorch and mlx run eager code), they move five arrays' worth of bytes through the
//! GPU's memory; grouped by compile's fusion pass ([`super::fuse`]) into one kernel, the GPU reads
//! `x` and writes the result once. A value of the chain is written out only when something can
//! still read it: the targets of `eval`, arrays the user holds, and nodes that ops outside the
//! kernel read. The others never reach memory.
//!
//! Fusion changes speed only, never results: the kernel is printed by the same printer from the
//! same device functions as the one-op kernels, each value rounded to its op's dtype, so the
//! fused results are bit-for-bit those of the ops run one by one. Reductions stay single ops
//! here (a fused reduction may fold in another order), as does everything that is not
//! elementwise.
//!
//! A kernel seen for the first time would cost an NVRTC build (tens of milliseconds) on the
//! caller's time. It is built on another thread instead, and until it is ready the chain runs op
//! by op; a kernel in the disk cache is loaded at once.
//!
//! Only on the GPU, and only where every pending node runs on one stream: on the CPU, compiled
//! code has a C compiler's latency and the interpreter's gain is smaller, so eager stays op by op
//! there (compile is the way to fuse on the CPU). Under a transform's trace nothing is fused (the
//! trace keeps intermediate values). `KILN_EAGER_FUSION=0` or [`set_eager_fusion`] turns it off.

use super::fuse::{self, is_elementwise, Group, Target};
use super::trace::{Tape, TapeNode, Value};
use crate::array::{Array, Node, State};
use crate::backend::Input;
use crate::device::DeviceKind;
use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::primitive::Op;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Whether eager fusion is on: `KILN_EAGER_FUSION=0` starts it off, [`set_eager_fusion`] switches.
fn enabled() -> &'static AtomicBool {
    static ON: OnceLock<AtomicBool> = OnceLock::new();
    ON.get_or_init(|| AtomicBool::new(std::env::var("KILN_EAGER_FUSION").map_or(true, |v| v.trim() != "0")))
}

/// Turns eager fusion on the GPU on or off (on by default; `KILN_EAGER_FUSION=0` starts it off)
/// and returns the previous setting. Off, `eval` runs every op as its own kernel, as PyTorch and
/// mlx do eagerly; results are the same either way.
pub fn set_eager_fusion(on: bool) -> bool {
    enabled().swap(on, Ordering::AcqRel)
}

static FUSED_KERNELS: AtomicU64 = AtomicU64::new(0);
static FUSED_OPS: AtomicU64 = AtomicU64::new(0);
static WAITED_FOR_BUILD: AtomicU64 = AtomicU64::new(0);

/// What eager fusion did in this process (see [`eager_fusion_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EagerFusionStats {
    /// Fused kernels `eval` ran.
    pub kernels: u64,
    /// Ops those kernels computed (each would otherwise have been a kernel of its own).
    pub ops: u64,
    /// Chains run op by op because their kernel was still being built.
    pub while_building: u64,
}

/// Counts of eager fusion's work so far: how often `eval` fused, and how often a chain ran op by
/// op while its kernel was built.
pub fn eager_fusion_stats() -> EagerFusionStats {
    EagerFusionStats {
        kernels: FUSED_KERNELS.load(Ordering::Relaxed),
        ops: FUSED_OPS.load(Ordering::Relaxed),
        while_building: WAITED_FOR_BUILD.load(Ordering::Relaxed),
    }
}

/// The fewest elements of an op's result for fusion to be worth planning: below it a kernel's
/// memory traffic costs less than the host's grouping work (and launches are queued
/// asynchronously anyway), so small chains run op by op.
const MIN_ELEMENTS: usize = 1 << 20;

/// The most pending nodes one evaluation fuses: grouping tracks each node's ancestor groups, so
/// its cost grows faster than the graph; larger evaluations run op by op.
const MAX_NODES: usize = 2048;

/// The pending nodes of one evaluation as a tape, with where each tape node came from.
pub(crate) struct EagerTape {
    tape: Tape,
    /// For each tape node, the slot of `order` it came from (`None` for evaluated inputs).
    slot: Vec<Option<usize>>,
    /// Each tape node's graph node, to find its array among its consumers' inputs.
    node: Vec<*const Node>,
    /// The evaluated arrays the tape's inputs stand for.
    leaves: Vec<Array>,
}

/// Whether eager fusion applies to `order`: it is on, no transform traces, and the nodes run on
/// a GPU.
fn applies(order: &[Option<Array>]) -> bool {
    let on_gpu = order.first().and_then(|a| a.as_ref()).is_some_and(|a| a.stream().device.kind == DeviceKind::Gpu);
    on_gpu && enabled().load(Ordering::Relaxed) && !crate::transforms::is_tracing()
}

/// `order` (a schedule of pending nodes, inputs first) as a tape whose outputs are the nodes
/// something outside the schedule can read, or `None` when the nodes run on several streams or
/// fewer than two elementwise ops are pending.
fn tape_of(order: &[Option<Array>]) -> Option<EagerTape> {
    let stream = order.first()?.as_ref()?.stream();
    if order.len() > MAX_NODES {
        return None;
    }
    let mut large_elementwise = 0;
    for a in order {
        let a = a.as_ref()?;
        let State::Pending { op, .. } = &*a.lock() else { return None };
        if a.stream() != stream {
            return None;
        }
        large_elementwise += usize::from(is_elementwise(op) && a.size() >= MIN_ELEMENTS);
    }
    if large_elementwise < 2 {
        return None;
    }
    let ops: Vec<(Op, Vec<*const Node>)> = order
        .iter()
        .map(|a| match &*a.as_ref().expect("checked above").lock() {
            State::Pending { op, inputs } => (op.clone(), inputs.iter().map(|i| Arc::as_ptr(&i.0)).collect()),
            _ => unreachable!("checked pending above"),
        })
        .collect();
    let mut id_of: FastMap<*const Node, usize> = FastMap::default();
    let mut uses: FastMap<*const Node, usize> = FastMap::default();
    let (mut nodes, mut slot, mut node, mut leaves) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (s, (a, (op, inputs))) in order.iter().zip(ops).enumerate() {
        let a = a.as_ref().expect("checked above");
        let mut idx = Vec::with_capacity(inputs.len());
        for &p in &inputs {
            *uses.entry(p).or_default() += 1;
            let id = *id_of.entry(p).or_insert_with(|| {
                // Not scheduled: an evaluated input, found in this node's input list.
                let State::Pending { inputs: held, .. } = &*a.lock() else { unreachable!("checked pending above") };
                let leaf = held.iter().find(|i| Arc::as_ptr(&i.0) == p).expect("an input of this node").clone();
                nodes.push(TapeNode { value: Value::Input(leaves.len()), shape: leaf.shape().into(), dtype: leaf.dtype() });
                leaves.push(leaf);
                slot.push(None);
                node.push(p);
                nodes.len() - 1
            });
            idx.push(id);
        }
        let p = Arc::as_ptr(&a.0);
        id_of.insert(p, nodes.len());
        nodes.push(TapeNode { value: Value::Op(op, idx), shape: a.shape().into(), dtype: a.dtype() });
        slot.push(Some(s));
        node.push(p);
    }
    // A node is read from outside when more than its schedule slot and its scheduled consumers'
    // input lists hold it: a user's handle, an eval target, or a graph beyond this evaluation.
    let outputs = (0..nodes.len())
        .filter(|&t| slot[t].is_some_and(|s| {
            let a = order[s].as_ref().expect("checked above");
            Arc::strong_count(&a.0) > 1 + uses.get(&node[t]).copied().unwrap_or(0)
        }))
        .collect();
    let inputs = leaves.len();
    Some(EagerTape { tape: Tape { nodes, outputs, inputs }, slot, node, leaves })
}

/// Runs the schedule `order` with its elementwise chains fused (see the module doc); returns
/// `false`, having run nothing, when eager fusion does not apply or finds nothing to fuse.
/// `run_node` runs one node as eval does.
pub(crate) fn run(order: &mut [Option<Array>], run_node: impl Fn(&Array) -> Result<()>) -> Result<bool> {
    if !applies(order) {
        return Ok(false);
    }
    let Some((eager, grouping)) = plan(order) else { return Ok(false) };
    let stream = order[0].as_ref().expect("scheduled").stream();
    for unit in &grouping.order {
        let group = match unit {
            Group::Single(t) => {
                let node = order[eager.slot[*t].expect("ops are scheduled")].take().expect("each node runs once");
                run_node(&node)?;
                continue;
            }
            Group::Fused(k) => &grouping.kernels[*k],
        };
        let members: Vec<Array> = group.members.iter().map(|&m| order[eager.slot[m].expect("ops are scheduled")].take().expect("each node runs once")).collect();
        let inputs = group.inputs.iter().map(|&t| kernel_input(&eager, t, &members)).collect::<Vec<_>>();
        let space = &eager.tape.nodes[group.space].shape;
        match crate::backend::cuda::run_fused_when_built(stream, &group.kernel, &inputs, space)? {
            Some(buffers) => {
                for (&t, buffer) in group.outputs.iter().zip(buffers) {
                    let at = group.members.iter().position(|&m| m == t).expect("outputs are members");
                    *members[at].lock() = State::Ready(buffer);
                }
                FUSED_KERNELS.fetch_add(1, Ordering::Relaxed);
                FUSED_OPS.fetch_add(members.len() as u64, Ordering::Relaxed);
            }
            None => {
                drop(inputs);
                WAITED_FOR_BUILD.fetch_add(1, Ordering::Relaxed);
                for node in members {
                    run_node(&node)?;
                }
            }
        }
    }
    Ok(true)
}

/// The tape of `order` and its grouping, when it has a fused kernel.
fn plan(order: &[Option<Array>]) -> Option<(EagerTape, fuse::Grouping)> {
    let eager = tape_of(order)?;
    let grouping = fuse::fuse(&eager.tape, true, Target { gpu_multiprocessors: None, gpu: false, elementwise_only: true });
    (!grouping.kernels.is_empty()).then_some((eager, grouping))
}

/// Kernel input `t` (a tape node) as the kernel reads it: an evaluated input, or a node evaluated
/// earlier in this run, found in a member's input list.
fn kernel_input(eager: &EagerTape, t: usize, members: &[Array]) -> Input {
    let array = match eager.tape.nodes[t].value {
        Value::Input(i) => eager.leaves[i].clone(),
        _ => members
            .iter()
            .find_map(|m| match &*m.lock() {
                State::Pending { inputs, .. } => inputs.iter().find(|i| Arc::as_ptr(&i.0) == eager.node[t]).cloned(),
                _ => None,
            })
            .expect("a kernel input is an input of one of its members"),
    };
    let buffer = array.buffer().expect("inputs run before their consumers");
    Input { shape: array.shape().into(), dtype: array.dtype(), buffer, donatable: false }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;

    /// The fused kernels `eval` would run for `targets` (their member counts and output counts).
    fn kernels(targets: &[Array]) -> Vec<(usize, usize)> {
        let order = crate::eval::schedule(targets).unwrap();
        plan(&order).map_or(Vec::new(), |(_, g)| g.kernels.iter().map(|k| (k.members.len(), k.outputs.len())).collect())
    }

    fn x() -> Array {
        let x = Array::from_vec((0..MIN_ELEMENTS).map(|i| i as f32 / MIN_ELEMENTS as f32).collect());
        x.eval().unwrap();
        x
    }

    fn gelu_parts(x: &Array) -> (Array, Array) {
        let inner = ops::erf(ops::divide(x, 2f64.sqrt()).unwrap()).unwrap();
        let y = ops::divide(ops::multiply(x, ops::add(&inner, 1.0).unwrap()).unwrap(), 2.0).unwrap();
        (inner, y)
    }

    #[test]
    fn a_chain_whose_intermediates_nobody_holds_is_one_kernel_with_one_output() {
        let (inner, y) = gelu_parts(&x());
        drop(inner);
        assert_eq!(kernels(&[y]), vec![(5, 1)]);
    }

    #[test]
    fn an_intermediate_the_user_holds_is_written_out_too() {
        let (inner, y) = gelu_parts(&x());
        assert_eq!(kernels(&[y]), vec![(5, 2)]);
        drop(inner);
    }

    #[test]
    fn reductions_stay_single_ops_between_fused_chains() {
        let x = x();
        let e = ops::add(ops::exp(&x).unwrap(), 1.0).unwrap();
        let s = ops::sum(&e, Some(&[0]), false).unwrap();
        let y = ops::multiply(ops::sqrt(&s).unwrap(), 3.0).unwrap();
        drop(e);
        assert_eq!(kernels(&[y]), vec![(2, 1), (2, 1)]);
    }

    #[test]
    fn a_single_elementwise_op_is_not_fused() {
        let y = ops::exp(x()).unwrap();
        assert_eq!(kernels(&[y]), Vec::new());
    }

    #[test]
    fn chains_on_small_arrays_run_op_by_op() {
        let small = Array::from_vec(vec![1.0f32; MIN_ELEMENTS - 1]);
        let (_, y) = gelu_parts(&small);
        assert_eq!(kernels(&[y]), Vec::new());
    }
}
