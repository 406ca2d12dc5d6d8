//! The CPU executor of the fused-kernel IR ([`crate::fused`]): a tile interpreter.
//!
//! Each instruction runs as one vectorised loop over a tile of [`TILE`] elements held in L1
//! (the same loops eager kernels use, from [`super::scalar`]), so a fused chain reads its inputs
//! and writes its outputs once while the intermediates never leave the cache. Inputs are read in
//! place when row-major, and otherwise gathered per tile (broadcast, transposed, sliced,
//! reversed), exactly as eager kernels read them. float16/bfloat16 values compute in float32 and
//! are rounded to their dtype after every instruction, so results match eager bit for bit.
//!
//! Elementwise kernels split the space across the thread pool in runs; kernels with reductions
//! split it by rows and make one pass over each row per phase; a few long rows of a single-pass
//! kernel are split across threads and their partial results combined; kernels folding columns
//! (reduced axes with kept axes after them) split it by blocks of columns ([`columns`]). Floats
//! accumulate in float64 and integers in 64 bits, as eager reductions do.

use super::elementwise::{elements_of, InputScratch, Source};
use super::native::{Loaded, Native, Read, RowPath, RowsFn, Write, STREAM_BITS};
use super::parallel::{for_chunks_with, for_items_with, for_runs, MIN_TASK, SERIAL_BELOW};
use super::reduce::{fold, Domain, Int64};
use super::scalar::{CastTo, Compute, Scalar};
use super::stream::{self, stream_copy, STREAM_ABOVE};
use super::strided::{alloc, run_layout};
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::fused::{operands, InstOp, Kernel, Level};
use crate::primitive::ReduceOp;
use crate::shape::{collapse_dims, numel, Shape, Strides};
use half::{bf16, f16};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

/// Elements per tile: a few float64 registers of this size stay in L1.
pub const TILE: usize = 1024;

/// Elements per call of a native elementwise pass whose inputs are all read in place: its
/// values stay in registers, so only the call overhead bounds the run.
const NATIVE_SPAN: usize = 16 * TILE;

/// Runs `f` with `$T` bound to the type `dtype` computes in (float32 for the half types). complex64
/// never reaches a fused kernel (fusion leaves its ops single); its arm only completes the match.
macro_rules! with_compute {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            Dtype::Bool => { type $T = bool; $body }
            Dtype::U8 => { type $T = u8; $body }
            Dtype::U16 => { type $T = u16; $body }
            Dtype::U32 => { type $T = u32; $body }
            Dtype::U64 => { type $T = u64; $body }
            Dtype::I8 => { type $T = i8; $body }
            Dtype::I16 => { type $T = i16; $body }
            Dtype::I32 => { type $T = i32; $body }
            Dtype::I64 => { type $T = i64; $body }
            Dtype::F16 | Dtype::BF16 | Dtype::F32 => { type $T = f32; $body }
            Dtype::F64 => { type $T = f64; $body }
            Dtype::C64 => { type $T = crate::Complex64; $body }
        }
    };
}

mod columns;

/// The per-kernel schedule: which instructions each pass runs, and which tile slot each uses.
struct Program {
    /// Per pass: element instructions in order, with their slots (recomputing what earlier
    /// passes computed).
    passes: Vec<Pass>,
    /// The same with values later passes need kept in a row cache (for rows up to
    /// `cache_max`).
    cached_passes: Vec<Pass>,
    /// How many values the row cache holds, and which.
    cache_values: usize,
    /// The longest rows that use the row cache: longer where it spares a costly instruction.
    cache_max: usize,
    cached: Vec<bool>,
    /// Row instructions (other than reductions) known before pass `k`, for k in 0..=passes.
    row_steps: Vec<Vec<usize>>,
    /// Reductions finishing at the end of pass `k`.
    folds: Vec<Vec<usize>>,
    /// Slot count.
    slots: usize,
    /// Compute-type bits of each constant.
    consts: Vec<u64>,
    /// Per binary instruction with an element-level constant or broadcast operand: that operand
    /// and whether it comes first. The loop then reads it as one value, not as a tile.
    scalar_operand: Vec<Option<(usize, bool)>>,
    /// Per element-level constant or broadcast: whether any instruction or output reads it as a
    /// tile (otherwise its tile is never filled).
    tile_needed: Vec<bool>,
    /// The passes as native code (variant 0 without the row cache, 1 with it).
    native: Native,
}

/// One pass's schedule: which element instructions it runs, where their tiles live, what it
/// stores (the native lowering prints the same schedule as one loop).
pub(super) struct Pass {
    /// The element instructions, in order.
    pub(super) insts: Vec<usize>,
    slot: Vec<usize>,
    /// (output index, instruction) stored at the end of each tile.
    pub(super) stores: Vec<(usize, usize)>,
    /// Per instruction: read from the row cache instead of computed (made in an earlier pass).
    pub(super) from_cache: Vec<bool>,
    /// Per instruction: copied into the row cache once computed (a later pass reads it).
    pub(super) to_cache: Vec<bool>,
}

/// Rows up to this many elements keep element values that later passes need in a per-task row
/// cache (softmax's exp(x - max) is computed once, not once per pass).
const ROW_CACHE_MAX: usize = 16384;

/// Rows up to this many elements (a row of float32 then fills a quarter of a 1 MiB L2) still
/// keep them where the cache spares a costly instruction ([`costly`]); longer rows recompute.
/// Measured on the 2-core Zen 4 at rows of 20000 to 50257 values: softmax 22-25% faster with the
/// cache, layer norm (whose cache spares only `x - mean`) 4-18% slower.
const COSTLY_ROW_CACHE_MAX: usize = 1 << 16;

/// Whether `op` costs many vector operations per value: a transcendental or a root (a polynomial
/// or a division inside), or a division, power or the like.
fn costly(op: &InstOp) -> bool {
    use crate::primitive::{BinaryOp as B, UnaryOp as U};
    match op {
        InstOp::Unary(u, _) => !matches!(
            u,
            U::Abs | U::Negative | U::Sign | U::Square | U::Floor | U::Ceil | U::Round | U::LogicalNot | U::IsNan
                | U::IsInf | U::IsPosInf | U::IsNegInf | U::IsFinite | U::BitwiseInvert | U::Conjugate | U::Real
                | U::Imag
        ),
        InstOp::Binary(b, ..) => matches!(b, B::Divide | B::FloorDivide | B::Remainder | B::Power | B::ArcTan2 | B::LogAddExp),
        _ => false,
    }
}

/// The narrowest values a native pass function streams into an output itself: their vectors
/// fill whole streaming stores at every x86 level, and the pass starts its vectors where the
/// stores are aligned (rows of any length and offset). Narrower outputs go through a tile and
/// [`stream_copy`] in the per-row loop, and are stored plainly by rows functions.
const STREAMED_SIZE: usize = 4;

/// Whether a native function streams write or output `index`, of `dtype` values, itself when
/// streaming is on: its bit fits the stream mask and its values are [`STREAMED_SIZE`] or wider.
fn streams_itself(index: usize, dtype: Dtype) -> bool {
    index < STREAM_BITS && dtype.size() >= STREAMED_SIZE
}

impl Pass {
    /// The schedule of pass `p`; `cached` marks values kept in the row cache.
    fn new(k: &Kernel, p: usize, cached: &[bool]) -> Pass {
        let element = |i: usize| k.insts[i].level == Level::Element;
        let mut need = vec![false; k.insts.len()];
        for inst in &k.insts {
            if let InstOp::Reduce(_, v) = inst.op {
                need[v] |= k.insts[v].phase == p;
            }
        }
        for (i, inst) in k.insts.iter().enumerate() {
            let stored = k.outputs.contains(&i) && element(i);
            need[i] |= inst.phase == p && (stored || cached[i]);
        }
        let mut from_cache = vec![false; k.insts.len()];
        for i in (0..k.insts.len()).rev() {
            if !need[i] || !element(i) {
                continue;
            }
            if cached[i] && k.insts[i].phase < p {
                from_cache[i] = true;
                continue;
            }
            for j in operands(&k.insts[i].op) {
                need[j] |= element(j);
            }
        }
        let insts: Vec<usize> = (0..k.insts.len()).filter(|&i| need[i] && element(i)).collect();
        let to_cache = (0..k.insts.len()).map(|i| cached[i] && need[i] && !from_cache[i]).collect();
        let mut last = vec![0usize; k.insts.len()];
        for (pos, &i) in insts.iter().enumerate() {
            if !from_cache[i] {
                for j in operands(&k.insts[i].op) {
                    last[j] = pos;
                }
            }
        }
        // Values folded or stored stay live to the end of the tile.
        for (i, inst) in k.insts.iter().enumerate() {
            if let InstOp::Reduce(_, v) = inst.op {
                if k.insts[v].phase == p {
                    last[v] = usize::MAX;
                }
            }
            if k.outputs.contains(&i) {
                last[i] = usize::MAX;
            }
        }
        let mut slot = vec![usize::MAX; k.insts.len()];
        let mut free: Vec<usize> = Vec::new();
        let mut used = 0;
        for (pos, &i) in insts.iter().enumerate() {
            if from_cache[i] {
                continue;
            }
            slot[i] = free.pop().unwrap_or_else(|| {
                used += 1;
                used - 1
            });
            for j in operands(&k.insts[i].op) {
                if element(j) && last[j] == pos && slot[j] != usize::MAX {
                    free.push(slot[j]);
                    last[j] = usize::MAX - 1; // freed once
                }
            }
        }
        let stores = k
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, &o)| element(o) && k.insts[o].phase == p)
            .map(|(n, &o)| (n, o))
            .collect();
        Pass { insts, slot, stores, from_cache, to_cache }
    }

    fn slots(&self) -> usize {
        self.slot.iter().filter(|&&s| s != usize::MAX).map(|&s| s + 1).max().unwrap_or(0)
    }
}

impl Program {
    fn new(k: &Kernel) -> Program {
        let none = vec![false; k.insts.len()];
        let passes: Vec<Pass> = (0..k.passes).map(|p| Pass::new(k, p, &none)).collect();
        // Arithmetic element values that a later pass needs again are worth caching.
        let mut cached = vec![false; k.insts.len()];
        for (p, pass) in passes.iter().enumerate() {
            for &i in &pass.insts {
                let arithmetic = !matches!(k.insts[i].op, InstOp::Load(_) | InstOp::Const(_) | InstOp::Broadcast(_));
                cached[i] |= arithmetic && k.insts[i].phase < p;
            }
        }
        // Of those, keep the ones a later pass still reads once the others come from the cache
        // (softmax's x - max is needed again only to recompute exp(x - max), which is cached).
        let first: Vec<Pass> = (0..k.passes).map(|p| Pass::new(k, p, &cached)).collect();
        let cached: Vec<bool> = (0..k.insts.len()).map(|i| first.iter().any(|pass| pass.from_cache[i])).collect();
        let cached_passes: Vec<Pass> = (0..k.passes).map(|p| Pass::new(k, p, &cached)).collect();
        let slots = passes.iter().chain(&cached_passes).map(Pass::slots).max().unwrap_or(0);
        let cache_values = cached.iter().filter(|&&c| c).count();
        // What the cache spares: instructions a pass computes without it and reads from it (or
        // no longer needs) with it.
        let spares_costly = passes.iter().zip(&cached_passes).any(|(plain, with)| {
            let spared = |i: usize| with.from_cache[i] || !with.insts.contains(&i);
            plain.insts.iter().any(|&i| spared(i) && costly(&k.insts[i].op))
        });
        let cache_max = if spares_costly { COSTLY_ROW_CACHE_MAX } else { ROW_CACHE_MAX };
        let mut row_steps = vec![Vec::new(); k.passes + 1];
        let mut folds = vec![Vec::new(); k.passes + 1];
        for (i, inst) in k.insts.iter().enumerate() {
            if inst.level == Level::Row {
                match inst.op {
                    InstOp::Reduce(..) => folds[inst.phase - 1].push(i),
                    _ => row_steps[inst.phase].push(i),
                }
            }
        }
        let consts = k
            .insts
            .iter()
            .map(|inst| match inst.op {
                InstOp::Const(bits) => compute_bits(bits, inst.dtype),
                _ => 0,
            })
            .collect();
        let splat = |j: usize| {
            k.insts[j].level == Level::Element && matches!(k.insts[j].op, InstOp::Const(_) | InstOp::Broadcast(_))
        };
        let scalar_operand: Vec<Option<(usize, bool)>> = k
            .insts
            .iter()
            .map(|inst| match inst.op {
                InstOp::Binary(_, _, y) if splat(y) => Some((y, false)),
                InstOp::Binary(_, x, _) if splat(x) => Some((x, true)),
                _ => None,
            })
            .collect();
        let mut tile_needed = vec![false; k.insts.len()];
        for (inst, scalar) in k.insts.iter().zip(&scalar_operand) {
            match (inst.op, scalar) {
                // Only the other operand is read as a tile (itself a splat when both are).
                (InstOp::Binary(_, x, y), Some((_, first))) => tile_needed[if *first { y } else { x }] = true,
                _ => operands(&inst.op).into_iter().for_each(|j| tile_needed[j] = true),
            }
        }
        for &o in &k.outputs {
            tile_needed[o] = true;
        }
        let mut lowered: Vec<(usize, usize, &Pass, &[usize])> =
            passes.iter().enumerate().map(|(p, pass)| (0, p, pass, folds[p].as_slice())).collect();
        // Column kernels recompute what later passes need (their blocks are read from L2).
        if cache_values > 0 && k.passes > 1 && k.inner == 0 {
            lowered.extend(cached_passes.iter().enumerate().map(|(p, pass)| (1, p, pass, folds[p].as_slice())));
        }
        let native = Native::new(k, &lowered, &row_steps);
        Program {
            passes,
            cached_passes,
            cache_values,
            cache_max,
            cached,
            row_steps,
            folds,
            slots,
            consts,
            scalar_operand,
            tile_needed,
            native,
        }
    }
}

/// The compute-type bits of a constant stored as `dtype` bits.
fn compute_bits(bits: u64, dtype: Dtype) -> u64 {
    let b = bits.to_le_bytes();
    let mut out = 0u64;
    crate::with_dtype!(dtype, T => {
        // Safety: `bits` holds one element of T in its low bytes; the compute type fits in 8.
        unsafe {
            let v: T = std::ptr::read_unaligned(b.as_ptr() as *const T);
            let c: <T as Compute>::C = to_compute(v);
            std::ptr::write_unaligned(&mut out as *mut u64 as *mut <T as Compute>::C, c);
        }
    });
    out
}

fn to_compute<T: Compute>(v: T) -> T::C {
    let mut c = std::mem::MaybeUninit::<T::C>::uninit();
    // Safety: one element in, one out.
    unsafe {
        T::load(&v, c.as_mut_ptr(), 1);
        c.assume_init()
    }
}

/// The kernel's schedule, built on first use and kept with the kernel.
fn program(k: &Kernel) -> Arc<Program> {
    let any = k.lowered.cpu.get_or_init(|| Arc::new(Program::new(k)) as Arc<dyn std::any::Any + Send + Sync>);
    any.clone().downcast::<Program>().expect("the CPU program of a kernel")
}

/// How one load instruction reads its input.
struct Load {
    source: Source,
    dtype: Dtype,
}

/// Everything the tasks share.
struct Shared<'a> {
    k: &'a Kernel,
    prog: &'a Program,
    loads: Vec<Option<Load>>,
    outs: Vec<usize>,
    /// Per instruction: the output it may be computed straight into (a freshly allocated output of
    /// a dtype that needs no conversion), so the tile is not copied again.
    direct: Vec<Option<usize>>,
    len: usize,
    /// Elements per tile buffer: [`TILE`], or fewer when the whole run has fewer elements (a
    /// call on a tiny input then allocates and zeroes a few words, not kilobytes per buffer).
    tile: usize,
    /// Whether rows are short enough for the row cache.
    use_cache: bool,
    /// Whether element outputs are large enough to be written with streaming stores.
    streaming: bool,
    /// The native pass functions, when they run this kernel.
    native: Option<&'a Loaded>,
    /// Whether the native pass functions stream element outputs straight into the outputs
    /// (streaming, no output donated) where they can ([`STREAMED_SIZE`]): one write of each
    /// byte instead of a tile and a copy.
    native_streams: bool,
}

/// Per-task state: tile slots, gather scratch per load, row values, accumulators.
struct Task {
    slots: Vec<Vec<u64>>,
    /// A full tile per element-level constant and broadcast that some instruction reads as a tile
    /// (`Program::tile_needed`; empty otherwise), filled once (broadcasts again only when their
    /// row value changes), so tiles read it in place.
    consts: Vec<Vec<u64>>,
    /// Per broadcast: the row value bits its tile holds now.
    filled: Vec<Option<u64>>,
    scratch: Vec<InputScratch>,
    row: Vec<u64>,
    acc: Vec<Acc>,
    half: Vec<u16>,
    ptrs: Vec<*const u8>,
    /// Row cache: one row of values per cached instruction (empty otherwise).
    cache: Vec<Vec<u64>>,
    /// Native runs: the argument arrays of a pass function, and a tile per write that is stored
    /// after the call (streamed, or into a donated input).
    reads: Vec<*const u8>,
    writes: Vec<*mut u8>,
    acc_bits: Vec<u64>,
    written: Vec<Vec<u64>>,
}

/// A reduction's running value in its accumulation domain.
#[derive(Clone, Copy)]
enum Acc {
    F(f64),
    I(i64),
    U(u64),
}

impl<'a> Shared<'a> {
    fn task(&self) -> Task {
        let k = self.k;
        let words = || vec![0u64; self.tile];
        // Native code has constants as literals and broadcasts in registers: no tiles of them.
        let tile_needed = |i: usize| self.native.is_none() && self.prog.tile_needed[i];
        let consts = k
            .insts
            .iter()
            .enumerate()
            .map(|(i, inst)| match (inst.op, inst.level) {
                (InstOp::Const(_) | InstOp::Broadcast(_), Level::Element) if tile_needed(i) => words(),
                _ => Vec::new(),
            })
            .collect::<Vec<_>>();
        let native_writes = if self.native.is_some() { self.prog.native.max_writes() } else { 0 };
        let mut t = Task {
            slots: (0..if self.native.is_some() { 0 } else { self.prog.slots }).map(|_| words()).collect(),
            consts,
            filled: vec![None; k.insts.len()],
            scratch: k
                .insts
                .iter()
                .map(|i| if let InstOp::Load(_) = i.op { InputScratch::new(8, self.tile) } else { InputScratch::default() })
                .collect(),
            row: vec![0; k.insts.len()],
            acc: vec![Acc::U(0); k.insts.len()],
            half: vec![0; self.tile],
            ptrs: vec![std::ptr::null(); k.insts.len()],
            cache: self
                .prog
                .cached
                .iter()
                .map(|&c| if c && self.use_cache { vec![0u64; self.len] } else { Vec::new() })
                .collect(),
            reads: vec![std::ptr::null(); k.insts.len()],
            writes: vec![std::ptr::null_mut(); native_writes],
            acc_bits: vec![0; k.insts.len()],
            written: (0..native_writes).map(|_| words()).collect(),
        };
        for (i, inst) in k.insts.iter().enumerate() {
            if let InstOp::Const(_) = inst.op {
                let c = self.prog.consts[i];
                if inst.level == Level::Element && tile_needed(i) {
                    fill_tile(&mut t.consts[i], c, inst.dtype, self.tile);
                } else {
                    t.row[i] = c;
                }
            }
        }
        t
    }

    /// Runs element pass `p` over positions `pos..pos+n` (one tile), folding and storing.
    unsafe fn tile(&self, t: &mut Task, p: usize, pos: usize, off: usize, n: usize) -> Result<()> {
        if let Some(loaded) = self.native {
            self.native_tile(t, loaded, p, pos, off, n);
            return Ok(());
        }
        let k = self.k;
        let pass = if self.use_cache { &self.prog.cached_passes[p] } else { &self.prog.passes[p] };
        for &i in &pass.insts {
            let inst = &k.insts[i];
            let size = compute_size(inst.dtype);
            if pass.from_cache[i] {
                t.ptrs[i] = (t.cache[i].as_ptr() as *const u8).add(off * size);
                continue;
            }
            // A value a later pass reads again is computed straight into the row cache.
            let into_cache = pass.to_cache[i] && self.direct[i].is_none();
            let out = match self.direct[i] {
                Some(o) => (self.outs[o] as *mut u8).add(pos * inst.dtype.size()),
                None if into_cache => (t.cache[i].as_mut_ptr() as *mut u8).add(off * size),
                None => t.slots[pass.slot[i]].as_mut_ptr() as *mut u8,
            };
            let ptr = match inst.op {
                InstOp::Load(_) => {
                    let load = self.loads[i].as_ref().expect("loads are prepared");
                    read(load, pos, n, &mut t.scratch[i], out)
                }
                InstOp::Const(_) => t.consts[i].as_ptr() as *const u8,
                InstOp::Broadcast(a) => {
                    let v = t.row[a];
                    if self.prog.tile_needed[i] && t.filled[i] != Some(v) {
                        fill_tile(&mut t.consts[i], v, inst.dtype, self.tile);
                        t.filled[i] = Some(v);
                    }
                    t.consts[i].as_ptr() as *const u8
                }
                _ => {
                    let scalar = self.prog.scalar_operand[i].map(|(j, first)| (self.splat_bits(t, j), first));
                    compute(k, i, &t.ptrs, scalar, out, n, &mut t.half)?;
                    out as *const u8
                }
            };
            t.ptrs[i] = ptr;
            if pass.to_cache[i] && !into_cache {
                std::ptr::copy_nonoverlapping(ptr, (t.cache[i].as_mut_ptr() as *mut u8).add(off * size), n * size);
            }
        }
        for &r in &self.prog.folds[p] {
            if let InstOp::Reduce(op, v) = k.insts[r].op {
                t.acc[r] = fold_tile(op, k.insts[v].dtype, t.ptrs[v], n, t.acc[r]);
            }
        }
        for &(o, i) in &pass.stores {
            if self.direct[i].is_none() {
                store(k.insts[i].dtype, t.ptrs[i], self.outs[o], pos, n, self.streaming);
            }
        }
        Ok(())
    }

    /// [`Shared::tile`] by the pass's native function: the same reads, one call, the same stores.
    unsafe fn native_tile(&self, t: &mut Task, loaded: &Loaded, p: usize, pos: usize, off: usize, n: usize) {
        let k = self.k;
        let (f, layout) = self.prog.native.pass(loaded, usize::from(self.use_cache), p);
        debug_assert!(n <= TILE || layout.folds.is_empty(), "folding pass functions take at most a tile");
        let cached = |t: &mut Task, i: usize| (t.cache[i].as_mut_ptr() as *mut u8).add(off * compute_size(k.insts[i].dtype));
        for (j, r) in layout.reads.iter().enumerate() {
            t.reads[j] = match *r {
                Read::Load(i) => {
                    let load = self.loads[i].as_ref().expect("loads are prepared");
                    read(load, pos, n, &mut t.scratch[i], std::ptr::null_mut())
                }
                Read::Cache(i) => cached(t, i),
                Read::Column(_) => unreachable!("row kernels read no per-column row values"),
            };
        }
        let mut stream = 0u64;
        for (j, w) in layout.writes.iter().enumerate() {
            t.writes[j] = match *w {
                Write::Store { output, inst } => {
                    let size = k.insts[inst].dtype.size();
                    let to = (self.outs[output] as *mut u8).add(pos * size);
                    if self.native_streams && streams_itself(j, k.insts[inst].dtype) {
                        stream |= 1 << j;
                        to
                    } else if self.direct[inst] == Some(output) {
                        to
                    } else {
                        t.written[j].as_mut_ptr() as *mut u8
                    }
                }
                Write::Cache(i) => cached(t, i),
            };
        }
        for (j, &r) in layout.folds.iter().enumerate() {
            t.acc_bits[j] = match t.acc[r] {
                Acc::F(a) => a.to_bits(),
                Acc::I(a) => a as u64,
                Acc::U(a) => a,
            };
        }
        f(t.reads.as_ptr(), t.writes.as_ptr(), t.row.as_ptr(), t.acc_bits.as_mut_ptr(), n, stream);
        for (j, &r) in layout.folds.iter().enumerate() {
            let bits = t.acc_bits[j];
            t.acc[r] = match t.acc[r] {
                Acc::F(_) => Acc::F(f64::from_bits(bits)),
                Acc::I(_) => Acc::I(bits as i64),
                Acc::U(_) => Acc::U(bits),
            };
        }
        for (j, w) in layout.writes.iter().enumerate() {
            if let Write::Store { output, inst } = *w {
                let streamed = j < STREAM_BITS && stream >> j & 1 == 1;
                if !streamed && self.direct[inst] != Some(output) {
                    store(k.insts[inst].dtype, t.written[j].as_ptr() as *const u8, self.outs[output], pos, n, self.streaming);
                }
            }
        }
    }

    /// Ends a task's share of the work: its streaming stores become visible to the thread that
    /// joins it.
    fn finish_task(&self) {
        if self.streaming {
            stream::fence();
        }
    }

    /// Notes for [`super::native::Status`] how a native run of this row kernel goes over its rows.
    fn note_rows(&self, path: RowPath) {
        if self.native.is_some() {
            self.prog.native.note_rows(path);
        }
    }

    /// The compute-type bits of element-level constant or broadcast `j`.
    fn splat_bits(&self, t: &Task, j: usize) -> u64 {
        match self.k.insts[j].op {
            InstOp::Broadcast(a) => t.row[a],
            _ => self.prog.consts[j],
        }
    }

    /// Starts loading the input elements of the element positions `pos..pos+n`: the next tile
    /// into L1 when `near`, else the next row into L2.
    fn prefetch(&self, pos: usize, n: usize, near: bool) {
        // Native loops are fast enough for the hardware prefetcher to keep up within a run.
        if near && self.native.is_some() {
            return;
        }
        for (load, inst) in self.loads.iter().zip(&self.k.insts) {
            if let (Some(load), Level::Element) = (load, inst.level) {
                crate::with_dtype!(load.dtype, S => load.source.prefetch::<S>(pos, n, near));
            }
        }
    }

    /// Row instructions known before pass `p`, for row `r`.
    unsafe fn row_step(&self, t: &mut Task, p: usize, r: usize) -> Result<()> {
        let k = self.k;
        if p > 0 {
            for &i in &self.prog.folds[p - 1] {
                t.row[i] = finish(k.insts[i].dtype, t.acc[i]);
            }
        }
        for (j, inst) in k.insts.iter().enumerate() {
            if inst.level == Level::Row {
                t.ptrs[j] = &t.row[j] as *const u64 as *const u8;
            }
        }
        for &i in &self.prog.row_steps[p] {
            let out = &mut t.row[i] as *mut u64 as *mut u8;
            match k.insts[i].op {
                InstOp::Load(_) => {
                    let load = self.loads[i].as_ref().expect("loads are prepared");
                    let p = read(load, r, 1, &mut t.scratch[i], out);
                    if !std::ptr::eq(p, out) {
                        std::ptr::copy_nonoverlapping(p, out, compute_size(k.insts[i].dtype));
                    }
                }
                InstOp::Const(_) => {}
                _ => {
                    let mut tmp = [0u16; 1];
                    compute(k, i, &t.ptrs, None, out, 1, &mut tmp)?;
                }
            }
        }
        Ok(())
    }

    /// Resets the accumulators of the reductions pass `p` folds.
    fn reset(&self, t: &mut Task, p: usize) {
        for &r in &self.prog.folds[p] {
            if let InstOp::Reduce(op, v) = self.k.insts[r].op {
                t.acc[r] = identity(op, self.k.insts[v].dtype);
            }
        }
    }

    /// All passes over row `r`.
    unsafe fn row(&self, t: &mut Task, r: usize) -> Result<()> {
        for p in 0..self.k.passes {
            self.row_step(t, p, r)?;
            self.reset(t, p);
            let base = r * self.len;
            let mut off = 0;
            while off < self.len {
                let n = TILE.min(self.len - off);
                if p + 1 == self.k.passes.min(2) {
                    // The next row streams in during this row's second pass, its first that
                    // reads only what is already cached: the next row's first pass then reads
                    // from L2 instead of waiting on memory. Not the last pass: that is often a
                    // short one (a scale), over before a row of loads arrives (measured: softmax
                    // 4096² 11% faster on a Zen 4).
                    self.prefetch(base + self.len + off, n, false);
                }
                self.tile(t, p, base + off, off, n)?;
                off += n;
            }
        }
        self.row_step(t, self.k.passes, r)?;
        self.store_row(t, r);
        Ok(())
    }

    fn store_row(&self, t: &Task, r: usize) {
        for (o, &i) in self.k.outputs.iter().enumerate() {
            if self.k.insts[i].level == Level::Row {
                unsafe { store(self.k.insts[i].dtype, &t.row[i] as *const u64 as *const u8, self.outs[o], r, 1, false) };
            }
        }
    }
}

fn compute_size(d: Dtype) -> usize {
    match d {
        Dtype::F16 | Dtype::BF16 => 4,
        d => d.size(),
    }
}

/// A pointer to `n` compute-type values of a load at `pos`, converting into `slot` if needed.
unsafe fn read(load: &Load, pos: usize, n: usize, scratch: &mut InputScratch, slot: *mut u8) -> *const u8 {
    crate::with_dtype!(load.dtype, S => {
        let p = load.source.read::<S>(pos, n, scratch);
        if <S as Compute>::CONVERTS {
            S::load(p, slot as *mut <S as Compute>::C, n);
            slot as *const u8
        } else {
            p.cast()
        }
    })
}

/// Writes `n` compute values at `src` as `dtype` to `dst` at element `pos`, with streaming
/// stores when `streaming` (see [`super::stream`]).
unsafe fn store(dtype: Dtype, src: *const u8, dst: usize, pos: usize, n: usize, streaming: bool) {
    crate::with_dtype!(dtype, O => {
        let d = (dst as *mut O).add(pos);
        if <O as Compute>::CONVERTS {
            O::store(src as *const <O as Compute>::C, d, n);
        } else if std::ptr::eq(src as *const O, d) {
            // An output that is a donated input read in place is already there.
        } else if streaming {
            stream_copy(src, d.cast(), n * std::mem::size_of::<O>());
        } else {
            std::ptr::copy(src as *const O, d, n);
        }
    })
}

/// Computes arithmetic instruction `i` over `n` values into `out`; `scalar` is the bits of a
/// binary op's operand that is one value everywhere, and whether it comes first (see
/// `Program::scalar_operand`).
unsafe fn compute(
    k: &Kernel,
    i: usize,
    ptrs: &[*const u8],
    scalar: Option<(u64, bool)>,
    out: *mut u8,
    n: usize,
    half: &mut [u16],
) -> Result<()> {
    let inst = &k.insts[i];
    match inst.op {
        InstOp::Binary(b, x, y) if scalar.is_some() => {
            let (bits, first) = scalar.expect("checked");
            let a = if first { y } else { x };
            with_compute!(k.insts[a].dtype, C => {
                let s: C = std::ptr::read_unaligned(&bits as *const u64 as *const C);
                let a = ptrs[a] as *const C;
                if b.is_predicate() {
                    C::compare_scalar(b, a, s, first, out as *mut bool, n)?
                } else {
                    C::binary_scalar(b, a, s, first, out as *mut C, n)?
                }
            })
        }
        InstOp::Unary(u, a) => with_compute!(k.insts[a].dtype, C => {
            let x = ptrs[a] as *const C;
            if u.is_predicate() { C::predicate(u, x, out as *mut bool, n)? } else { C::unary(u, x, out as *mut C, n)? }
        }),
        InstOp::Binary(b, x, y) => with_compute!(k.insts[x].dtype, C => {
            let (x, y) = (ptrs[x] as *const C, ptrs[y] as *const C);
            if b.is_predicate() { C::compare(b, x, y, out as *mut bool, n)? } else { C::binary(b, x, y, out as *mut C, n)? }
        }),
        InstOp::Select(c, a, b) => with_compute!(inst.dtype, C => {
            super::simd::map3(ptrs[c] as *const bool, ptrs[a] as *const C, ptrs[b] as *const C, out as *mut C, n,
                |c: bool, x: C, y: C| if c { x } else { y });
        }),
        // float64 to a half type rounds once, through the same conversion eager astype uses
        // (half's own from_f64 goes through float32 and can round twice).
        InstOp::Cast(a) if k.insts[a].dtype == Dtype::F64 && matches!(inst.dtype, Dtype::F16 | Dtype::BF16) => {
            let round: fn(f64) -> f32 = if inst.dtype == Dtype::F16 {
                |v| <f16 as Element>::from_f64(v).to_f32()
            } else {
                |v| <bf16 as Element>::from_f64(v).to_f32()
            };
            super::simd::map1(ptrs[a] as *const f64, out as *mut f32, n, round);
            return Ok(());
        }
        InstOp::Cast(a) => with_compute!(k.insts[a].dtype, A => with_compute!(inst.dtype, B => {
            super::simd::map1(ptrs[a] as *const A, out as *mut B, n, |v: A| -> B { v.cast() });
        })),
        InstOp::Load(_) | InstOp::Const(_) | InstOp::Reduce(..) | InstOp::Broadcast(_) => {
            unreachable!("handled by the caller")
        }
    }
    round_half(inst.dtype, out as *mut f32, n, half);
    Ok(())
}

/// Rounds float32 values to `dtype` when it is a half type, so fused results equal eager ones.
unsafe fn round_half(dtype: Dtype, p: *mut f32, n: usize, tmp: &mut [u16]) {
    use half::slice::HalfFloatSliceExt;
    match dtype {
        Dtype::F16 => {
            let v = std::slice::from_raw_parts_mut(p, n);
            let h: &mut [f16] = bytemuck_f16(&mut tmp[..n]);
            h.convert_from_f32_slice(v);
            h.convert_to_f32_slice(v);
        }
        Dtype::BF16 => super::simd::map1(p as *const f32, p, n, |v: f32| bf16::from_f32(v).to_f32()),
        _ => {}
    }
}

fn bytemuck_f16(s: &mut [u16]) -> &mut [f16] {
    // Safety: f16 is a transparent u16.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut f16, s.len()) }
}

/// The neutral accumulator of `op` over values of `dtype`.
fn identity(op: ReduceOp, dtype: Dtype) -> Acc {
    if dtype.is_float() {
        Acc::F(f64::identity(op))
    } else if dtype.is_unsigned() {
        Acc::U(u64::identity(op))
    } else {
        Acc::I(i64::identity(op))
    }
}

/// Folds `n` compute values of `dtype` at `p` into `acc`.
unsafe fn fold_tile(op: ReduceOp, dtype: Dtype, p: *const u8, n: usize, acc: Acc) -> Acc {
    match acc {
        // Max and min of float32 values are exact in float32, where the loop is twice as wide.
        Acc::F(a) if matches!(op, ReduceOp::Max | ReduceOp::Min) && compute_size(dtype) == 4 => {
            Acc::F(f64::combine(op, a, fold(op, p as *const f32, n, |v: f32| v) as f64))
        }
        Acc::F(a) => with_compute!(dtype, C => Acc::F(f64::combine(op, a, fold(op, p as *const C, n, |v: C| v.to_f64())))),
        Acc::U(a) => with_compute!(dtype, C => Acc::U(u64::combine(op, a, fold(op, p as *const C, n, |v: C| Int64::to_u64(v))))),
        Acc::I(a) => with_compute!(dtype, C => Acc::I(i64::combine(op, a, fold(op, p as *const C, n, |v: C| Int64::to_i64(v))))),
    }
}

fn combine(op: ReduceOp, a: Acc, b: Acc) -> Acc {
    match (a, b) {
        (Acc::F(x), Acc::F(y)) => Acc::F(f64::combine(op, x, y)),
        (Acc::U(x), Acc::U(y)) => Acc::U(u64::combine(op, x, y)),
        (Acc::I(x), Acc::I(y)) => Acc::I(i64::combine(op, x, y)),
        _ => unreachable!("partials of one reduction share a domain"),
    }
}

/// The compute-type bits of a finished accumulator as `dtype`.
fn finish(dtype: Dtype, acc: Acc) -> u64 {
    let mut out = 0u64;
    crate::with_dtype!(dtype, O => {
        let v: O = match acc {
            Acc::F(a) => O::from_f64(a),
            Acc::U(a) => <O as Int64>::from_u64(a),
            Acc::I(a) => <O as Int64>::from_i64(a),
        };
        let c: <O as Compute>::C = to_compute(v);
        // Safety: compute types are at most 8 bytes.
        unsafe { std::ptr::write_unaligned(&mut out as *mut u64 as *mut <O as Compute>::C, c) };
    });
    out
}

/// How the CPU runs kernel `k` now: as native code, or interpreted and why.
pub fn engine(k: &Kernel) -> super::native::Status {
    program(k).native.status()
}

/// Runs `kernel` over the space `space` on `inputs`; returns one buffer per kernel output
/// (element outputs of shape `space`, row outputs with the reduced axes kept as size 1).
pub fn run(k: &Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    for inst in k.outputs.iter().map(|&o| &k.insts[o]).filter(|i| i.level == Level::Element) {
        crate::buffer::check_host_allocation("compiled kernel", space, inst.dtype)?;
    }
    let prog = program(k);
    let choice = prog.native.select();
    let start = std::time::Instant::now();
    let result = run_with(k, &prog, choice.loaded, inputs, space);
    if result.is_ok() {
        prog.native.record(&choice, numel(space), start.elapsed());
    }
    result
}

/// Sets the first `n` compute values of `dtype` in `words` to the one whose compute-type bits
/// (in their low bytes) are `bits`: a constant's or a row value's tile.
fn fill_tile(words: &mut [u64], bits: u64, dtype: Dtype, n: usize) {
    with_compute!(dtype, C => {
        // Safety: the bits hold one compute value in their low bytes.
        let v: C = unsafe { std::ptr::read_unaligned(&bits as *const u64 as *const C) };
        elements_of::<C>(words, n).fill(v);
    });
}

/// How each load instruction of `k` reads its input: element loads over `space`, row loads over
/// `row_shape` (`blocked`: gathered in blocks, for transposed elementwise walks).
fn prepare_loads(k: &Kernel, inputs: &[Input], (space, row_shape): (&[usize], &[usize]), blocked: bool) -> Vec<Option<Load>> {
    k.insts
        .iter()
        .map(|inst| match inst.op {
            InstOp::Load(x) => {
                let shape = if inst.level == Level::Element { space } else { row_shape };
                let input = &inputs[x];
                let strides = input.strides_for(shape);
                let source = crate::with_dtype!(input.dtype, S => Source::new::<S>(input, shape, &strides, blocked));
                Some(Load { source, dtype: input.dtype })
            }
            _ => None,
        })
        .collect()
}

/// [`run`] with the engine chosen: native code when `native`, else the interpreter.
fn run_with(k: &Kernel, prog: &Program, native: Option<&Loaded>, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    if k.inner > 0 {
        return columns::run(k, prog, native, inputs, space);
    }
    let split = k.reduced_axes(space.len()).start;
    let (rows, len, _) = k.split_space(space);
    let row_shape = k.row_shape(space);
    let element_strides: Vec<Strides> = k
        .insts
        .iter()
        .filter_map(|i| match (i.op, i.level) {
            (InstOp::Load(x), Level::Element) => Some(inputs[x].strides_for(space)),
            _ => None,
        })
        .collect();
    let (runs, width, blocked) = if k.reduced == 0 {
        run_layout(space, &element_strides.iter().map(|s| s.as_slice()).collect::<Vec<_>>())
    } else {
        (rows, len, false)
    };
    let loads = prepare_loads(k, inputs, (space, &row_shape), blocked);
    let mut donors: Vec<Option<Buffer>> = inputs
        .iter()
        .map(|i| (k.may_donate() && i.donatable && i.is_contiguous_as(space) && i.buffer.offset == 0).then(|| i.buffer.clone()))
        .collect();
    let mut direct: Vec<Option<usize>> = vec![None; k.insts.len()];
    let mut any_donated = false;
    let buffers: Vec<Buffer> = k
        .outputs
        .iter()
        .enumerate()
        .map(|(n, &o)| {
            let inst = &k.insts[o];
            if inst.level == Level::Row {
                return alloc(&row_shape, inst.dtype);
            }
            let donor = inputs.iter().zip(donors.iter_mut()).find(|(i, d)| d.is_some() && i.dtype == inst.dtype);
            match donor {
                Some((_, d)) => {
                    any_donated = true;
                    d.take().expect("checked")
                }
                None => {
                    let arithmetic = !matches!(inst.op, InstOp::Load(_) | InstOp::Const(_) | InstOp::Broadcast(_));
                    if arithmetic && !matches!(inst.dtype, Dtype::F16 | Dtype::BF16) && direct[o].is_none() {
                        direct[o] = Some(n);
                    }
                    alloc(space, inst.dtype)
                }
            }
        })
        .collect();
    drop(donors);
    let element_bytes: usize =
        k.outputs.iter().filter(|&&o| k.insts[o].level == Level::Element).map(|&o| k.insts[o].dtype.size()).sum();
    // Blocked walks (transposed inputs) store runs of at most a block's width: too short for
    // whole-line streaming, and each would need its own fence. Native elementwise loops store
    // straight into the outputs: measured faster than computing into a tile and streaming it
    // out (which pays for the interpreter's slower loops, and for kernels with reductions).
    let streaming = !(native.is_some() && k.reduced == 0) && element_bytes * numel(space) >= STREAM_ABOVE && !(k.reduced == 0 && blocked);
    if any_donated || streaming {
        // A donated output aliases an input that later instructions of the tile may still read,
        // and streaming stores copy whole tiles: results then go through the tile slots and are
        // stored last.
        direct.iter_mut().for_each(|d| *d = None);
    }
    let outs: Vec<usize> = buffers.iter().map(|b| b.ptr::<u8>() as usize).collect();
    let use_cache = k.reduced > 0 && k.passes > 1 && len <= prog.cache_max && prog.cache_values > 0;
    let tile = TILE.min(numel(space)).max(1);
    let native_streams = streaming && !any_donated && native.is_some();
    let whole_rows = match native {
        Some(loaded) if !any_donated && k.reduced > 0 && len > 0 => {
            RowsCall::new(k, loaded, usize::from(use_cache), inputs, space, split, &outs, streaming)
        }
        _ => None,
    };
    let shared = Shared { k, prog, loads, outs, direct, len, tile, use_cache, streaming, native, native_streams };
    let error: Mutex<Option<crate::Error>> = Mutex::new(None);
    let record = |r: Result<()>| {
        if let Err(e) = r {
            *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        }
    };
    if numel(space) == 0 && (k.reduced == 0 || rows == 0) {
        return Ok(buffers);
    }
    // Native elementwise passes that read their inputs in place and write their outputs in
    // place (no tile-sized scratch either way) take longer runs per call.
    let in_place = shared.loads.iter().flatten().all(|l| matches!(l.source, Source::Direct(_)))
        && k.outputs.iter().enumerate().all(|(n, &o)| shared.direct[o] == Some(n));
    let span = if shared.native.is_some() && k.reduced == 0 && in_place { NATIVE_SPAN } else { TILE };
    let tiles = |t: &mut Task, start: usize, n: usize| {
        let mut pos = start;
        while pos < start + n {
            let m = span.min(start + n - pos);
            shared.prefetch(pos + m, TILE.min(start + n - pos - m), true);
            record(unsafe { shared.tile(t, 0, pos, 0, m) });
            pos += m;
        }
        shared.finish_task();
    };
    if k.reduced == 0 && blocked {
        for_runs(runs, width, blocked, || shared.task(), tiles);
    } else if k.reduced == 0 {
        // Large ranges, each with one set of tile buffers per worker: serial under SERIAL_BELOW
        // elements, else ranges of at least MIN_TASK, at most eight per thread.
        let total = numel(space);
        let parts = if total < SERIAL_BELOW { 1 } else { (total / MIN_TASK).clamp(1, 8 * rayon::current_num_threads()) };
        let size = total.div_ceil(parts);
        for_chunks_with(total, size, || shared.task(), tiles);
    } else if k.passes == 1 && rows < 2 * rayon::current_num_threads() && len >= SERIAL_BELOW {
        shared.note_rows(RowPath::Split);
        for r in 0..rows {
            record(unsafe { split_row(&shared, r) });
        }
    } else if let Some(call) = &whole_rows {
        shared.note_rows(RowPath::Whole);
        for_items_with(rows, len, || shared.task(), |t, start, n| {
            // Safety: the pointers and steps cover every row of every input and output, and
            // the task's row caches hold a row.
            unsafe { call.run(t, start, start + n, len) };
            shared.finish_task();
        });
    } else {
        // (Empty rows have nothing to run either way.)
        if len > 0 {
            let has_rows_function = native.is_some_and(|loaded| loaded.rows(usize::from(use_cache)).is_some());
            shared.note_rows(if has_rows_function { RowPath::Layout } else { RowPath::NoRowsFunction });
        }
        for_items_with(rows, len, || shared.task(), |t, start, n| {
            for r in start..start + n {
                record(unsafe { shared.row(t, r) });
            }
            shared.finish_task();
        });
    }
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(buffers),
    }
}

// Safety: a task moves into the pool's per-worker state; its raw pointers point into its own
// slots or into buffers that outlive the run.
unsafe impl Send for Task {}

/// A native rows function with its arguments: a whole row kernel over runs of rows in one call
/// each, its row steps in C too, writing every output itself. Used where every load reads its
/// rows in place one stride apart and no output is donated; the per-row loop of [`Shared::row`]
/// otherwise (and [`split_row`] for a few long rows).
struct RowsCall {
    f: RowsFn,
    /// Per instruction: a load's base address and its step per row, in elements.
    bases: Vec<usize>,
    steps: Vec<i64>,
    outs: Vec<usize>,
    /// Bit `o`: element output `o` is streamed.
    stream: u64,
}

impl RowsCall {
    #[allow(clippy::too_many_arguments)]
    fn new(
        k: &Kernel,
        loaded: &Loaded,
        variant: usize,
        inputs: &[Input],
        space: &[usize],
        split: usize,
        outs: &[usize],
        streaming: bool,
    ) -> Option<RowsCall> {
        let f = loaded.rows(variant)?;
        let mut bases = vec![0usize; k.insts.len()];
        let mut steps = vec![0i64; k.insts.len()];
        for (i, inst) in k.insts.iter().enumerate() {
            if let InstOp::Load(x) = inst.op {
                (bases[i], steps[i]) = row_affine(&inputs[x], space, split, inst.level)?;
            }
        }
        // Outputs of narrower values are written with plain stores.
        let mut stream = 0u64;
        for (o, &i) in k.outputs.iter().enumerate() {
            if streaming && k.insts[i].level == Level::Element && streams_itself(o, k.insts[i].dtype) {
                stream |= 1 << o;
            }
        }
        Some(RowsCall { f, bases, steps, outs: outs.to_vec(), stream })
    }

    /// Rows `r0..r1` of `len` elements, with the row values and row caches of task `t`.
    unsafe fn run(&self, t: &mut Task, r0: usize, r1: usize, len: usize) {
        let (bases, outs) = (self.bases.as_ptr() as *const *const u8, self.outs.as_ptr() as *const *mut u8);
        let caches: Vec<*mut u8> = t.cache.iter_mut().map(|c| c.as_mut_ptr() as *mut u8).collect();
        (self.f)(bases, self.steps.as_ptr(), caches.as_ptr(), outs, t.row.as_mut_ptr(), r0, r1, len, self.stream);
    }
}

/// Where a row kernel's load of `input` at `level` reads row `r`, for [`RowsCall`]: `(base, step)`
/// with element `e` of row `r` (or the row value, at level Row) at `base + (r * step + e) * size`
/// bytes, `base` being the view's first element (its offset counted). None when the input is not
/// read in place along its rows, or its rows are not one stride apart.
fn row_affine(input: &Input, space: &[usize], split: usize, level: Level) -> Option<(usize, i64)> {
    let mut shape: Shape = space.into();
    if level == Level::Row {
        shape[split..].iter_mut().for_each(|d| *d = 1);
    }
    let strides = input.strides_for(&shape);
    let (_, within) = collapse_dims(&shape[split..], &[&strides[split..]]);
    if !matches!(within[0].as_slice(), [] | [1]) {
        return None;
    }
    let (_, across) = collapse_dims(&shape[..split], &[&strides[..split]]);
    let step = match across[0].as_slice() {
        [] => 0,
        &[s] => s as i64,
        _ => return None,
    };
    Some((input.buffer.start_address(input.dtype.size()), step))
}

/// One long row of a single-pass kernel, split across threads: each piece folds its own partial
/// accumulators, which are then combined.
unsafe fn split_row(s: &Shared, r: usize) -> Result<()> {
    const PIECE: usize = 1 << 16;
    let mut head = s.task();
    s.row_step(&mut head, 0, r)?;
    s.reset(&mut head, 0);
    let row0 = head.row.clone();
    let base = r * s.len;
    let partials: Vec<Result<Vec<Acc>>> = (0..s.len.div_ceil(PIECE))
        .into_par_iter()
        .map(|piece| {
            let mut t = s.task();
            t.row.clone_from(&row0);
            s.reset(&mut t, 0);
            let (start, end) = (piece * PIECE, ((piece + 1) * PIECE).min(s.len));
            let mut off = start;
            let mut result = Ok(());
            while off < end && result.is_ok() {
                let n = TILE.min(end - off);
                result = s.tile(&mut t, 0, base + off, off, n);
                off += n;
            }
            // Fenced on errors too: the outputs go back to the buffer cache either way.
            s.finish_task();
            result.map(|()| t.acc)
        })
        .collect();
    for part in partials {
        let part = part?;
        for &i in &s.prog.folds[0] {
            if let InstOp::Reduce(op, _) = s.k.insts[i].op {
                head.acc[i] = combine(op, head.acc[i], part[i]);
            }
        }
    }
    s.row_step(&mut head, 1, r)?;
    s.store_row(&head, r);
    Ok(())
}
