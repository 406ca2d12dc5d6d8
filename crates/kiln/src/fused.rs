//! The fused-kernel IR shared by every backend: one typed SSA program over scalars per fused
//! group. Fusion decides *what* goes into a kernel once; a backend only decides *how* to run it
//! (the CPU runs it over L1-sized tiles; a CUDA backend prints it as CUDA C).
//!
//! A kernel iterates over a space of shape `S` whose last `reduced` axes may be folded by
//! reductions. Every value lives at one of two levels: **element** values have one scalar per
//! position of `S`; **row** values one per position of `S` with the reduced axes removed (the
//! results of reductions and the scalar arithmetic on them). Element values that need a row value
//! a reduction produces run in a later *pass* over the row: softmax is max (pass 0), then
//! sum(exp(x - max)) (pass 1), then exp(x - max) / sum (pass 2), one kernel.

use crate::dtype::Dtype;
use crate::shape::Shape;
use crate::primitive::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt;

/// Where a value lives: one per element of the space, or one per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// One scalar per position of the iteration space.
    Element,
    /// One scalar per row (the space with its reduced axes removed).
    Row,
}

/// What an instruction computes. Operands are earlier instruction indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstOp {
    /// External input `k`, broadcast to the instruction's level.
    Load(usize),
    /// A scalar constant: the bits of one element of the instruction's dtype.
    Const(u64),
    /// An elementwise op of one operand.
    Unary(UnaryOp, usize),
    /// An elementwise op of two operands of one dtype.
    Binary(BinaryOp, usize, usize),
    /// `cond ? a : b`.
    Select(usize, usize, usize),
    /// Conversion to the instruction's dtype (astype semantics).
    Cast(usize),
    /// A row value folding an element value over the reduced axes.
    Reduce(ReduceOp, usize),
    /// A row value used at element level.
    Broadcast(usize),
}

/// One SSA instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Inst {
    /// What it computes.
    pub op: InstOp,
    /// The result's dtype.
    pub dtype: Dtype,
    /// The result's level.
    pub level: Level,
    /// For element values, the pass that computes it first; for row values, the pass before which
    /// it is known (`passes` for values known only at the end).
    pub phase: usize,
}

/// A fused kernel.
pub struct Kernel {
    /// A readable name (the member ops).
    pub name: String,
    /// Axes of the space folded by reductions (0 for a purely elementwise kernel): the trailing
    /// ones, or the block just before the last `inner` axes.
    pub reduced: usize,
    /// Kept axes of the space after the reduced ones: 0 for row reductions (softmax over the last
    /// axis), more for column reductions (a sum over axis 0 of a matrix, a batch norm's mean over
    /// the batch). Only the CPU runs kernels with inner axes, over blocks of columns (native code
    /// or the interpreter); fusion for a GPU never makes them.
    pub inner: usize,
    /// The dtypes of the external inputs.
    pub inputs: Vec<Dtype>,
    /// The program, in dependency order.
    pub insts: Vec<Inst>,
    /// The instructions written out, in output order.
    pub outputs: Vec<usize>,
    /// Passes over each row (1 when no element value needs a reduction's result).
    pub passes: usize,
    /// Each backend's prepared form of the kernel, built on first run and kept with it.
    pub lowered: Lowered,
}

/// A backend's prepared form of a kernel (its own type, behind `Any`).
pub type Prepared = std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>;

/// Each backend's prepared form of a kernel: a compiled plan's kernels run on the CPU and on a
/// GPU alike (whichever device a call's stream is on).
#[derive(Default)]
pub struct Lowered {
    /// The CPU's schedule of the kernel.
    pub cpu: Prepared,
    /// The GPU's last loaded function for it.
    pub gpu: Prepared,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Kernel {
    /// Whether an output may be written into a donated input buffer: only single-pass
    /// elementwise kernels, which read every input position before writing it and never again.
    pub fn may_donate(&self) -> bool {
        self.reduced == 0
    }

    /// The reduced axes of a space of `nd` axes: the block before the last `inner` ones.
    pub fn reduced_axes(&self, nd: usize) -> std::ops::Range<usize> {
        let end = nd - self.inner.min(nd);
        end - self.reduced.min(end)..end
    }

    /// The space's shape as (rows, reduced length, inner width): the products of the axes
    /// before, inside and after the reduced block.
    pub fn split_space(&self, space: &[usize]) -> (usize, usize, usize) {
        let axes = self.reduced_axes(space.len());
        (space[..axes.start].iter().product(), space[axes.clone()].iter().product(), space[axes.end..].iter().product())
    }

    /// The shape of the kernel's row values and row outputs over `space`: the reduced axes kept
    /// with size 1.
    pub fn row_shape(&self, space: &[usize]) -> Shape {
        let mut shape: Shape = space.into();
        shape[self.reduced_axes(space.len())].iter_mut().for_each(|d| *d = 1);
        shape
    }
}

/// The operands of an instruction.
pub fn operands(op: &InstOp) -> Vec<usize> {
    match *op {
        InstOp::Load(_) | InstOp::Const(_) => vec![],
        InstOp::Unary(_, a) | InstOp::Cast(a) | InstOp::Reduce(_, a) | InstOp::Broadcast(a) => vec![a],
        InstOp::Binary(_, a, b) => vec![a, b],
        InstOp::Select(c, a, b) => vec![c, a, b],
    }
}

/// The value of constant bits of `dtype`, for printing.
fn const_text(bits: u64, dtype: Dtype) -> String {
    let b = bits.to_le_bytes();
    crate::with_dtype!(dtype, T => {
        // Safety: `bits` holds one element of `dtype` in its low bytes.
        let v: T = unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) };
        format!("{}", crate::dtype::Element::to_f64(v))
    })
}

impl Kernel {
    /// Instruction `i` as a line of IR text: `%i: dtype level @phase = op operands`.
    pub fn inst_text(&self, i: usize) -> String {
        let inst = &self.insts[i];
        let v = |j: usize| format!("%{j}");
        let rhs = match inst.op {
            InstOp::Load(k) => format!("load in{k}"),
            InstOp::Const(bits) => format!("const {}", const_text(bits, inst.dtype)),
            InstOp::Unary(u, a) => format!("{} {}", u.name(), v(a)),
            InstOp::Binary(b, x, y) => format!("{} {}, {}", b.name(), v(x), v(y)),
            InstOp::Select(c, a, b) => format!("where {}, {}, {}", v(c), v(a), v(b)),
            InstOp::Cast(a) => format!("astype {}", v(a)),
            InstOp::Reduce(r, a) => format!("reduce_{} {}", crate::primitive::Op::Reduce { op: r, axes: vec![], identity_if_empty: true }.name(), v(a)),
            InstOp::Broadcast(a) => format!("broadcast {}", v(a)),
        };
        let level = match inst.level {
            Level::Element => "elem",
            Level::Row => "row",
        };
        format!("%{i}: {} {level} @{} = {rhs}", inst.dtype, inst.phase)
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inputs: Vec<String> = self.inputs.iter().enumerate().map(|(i, d)| format!("in{i}: {d}")).collect();
        write!(f, "kernel {}({}) reduced_axes={} ", self.name, inputs.join(", "), self.reduced)?;
        if self.inner > 0 {
            write!(f, "inner_axes={} ", self.inner)?;
        }
        writeln!(f, "passes={} {{", self.passes)?;
        for i in 0..self.insts.len() {
            writeln!(f, "  {}", self.inst_text(i))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| format!("%{o}")).collect();
        writeln!(f, "  store {}", outs.join(", "))?;
        write!(f, "}}")
    }
}

/// Blocks per multiprocessor a GPU fold of few rows aims for.
const SPLIT_BLOCKS_PER_SM: usize = 8;
/// The fewest elements one block folds of a split row.
const SPLIT_PART: usize = 4096;
/// Rows of at most this many elements are never split.
const SPLIT_ROWS_ABOVE: usize = 2 * SPLIT_PART;
/// A fused group keeps to one pass (so its kernel may split rows) when a block per row would use
/// at most this fraction (1 / n) of the blocks a split uses.
const FUSED_SPLIT_GAIN: usize = 32;

/// Into how many parts, each folded by its own block, a GPU with `multiprocessors` splits each
/// of `rows` rows of `len` elements: enough blocks to fill the GPU, each part at least 4096
/// elements; 1 (a block per row) when the rows alone fill the GPU or are short. The one rule for
/// both the reduction kernels and fusion (see [`fuses_split_rows`]).
pub fn gpu_parts_per_row(multiprocessors: usize, rows: usize, len: usize) -> usize {
    let blocks = SPLIT_BLOCKS_PER_SM * multiprocessors;
    if rows < blocks && len > SPLIT_ROWS_ABOVE { blocks.div_ceil(rows.max(1)).min(len.div_ceil(SPLIT_PART)) } else { 1 }
}

/// Whether fusion keeps a reduction of `rows` rows of `len` elements on such a GPU to a group of
/// one pass over the elements (nothing at element level uses a row value), so that its kernel
/// can split the rows: worth it where [`gpu_parts_per_row`] splits each row in at least 32 parts.
/// A group of several passes runs a block per row.
pub fn fuses_split_rows(multiprocessors: usize, rows: usize, len: usize) -> bool {
    gpu_parts_per_row(multiprocessors, rows, len) >= FUSED_SPLIT_GAIN
}
