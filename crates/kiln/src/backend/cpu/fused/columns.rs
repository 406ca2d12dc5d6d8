//! Column kernels: fused kernels whose reduced axes have kept axes after them
//! ([`Kernel::inner`]), such as a sum over axis 0 of a matrix or a softmax over the middle axis of
//! (batch, sequence, features).
//!
//! The space is read as (rows, len, width), the middle axis reduced. A task takes one row and a
//! block of adjacent columns and runs every pass over it, each pass walking all `len` reduced
//! positions. Each column folds its values in order into its own accumulator, as the eager column
//! reduction does, so compiled and eager results agree bit for bit.
//!
//! Native code, where every element input is read in place with unit steps along the columns
//! ([`column_affine`]), runs each pass over a block as one call of its column function
//! ([`crate::backend::cpu::native`]'s `columns`), which walks the positions itself, prefetching
//! rows ahead: no tile copies, row values read per column, the same folds. Its blocks are
//! [`NATIVE_BLOCK`] columns wide, narrower where that leaves threads without blocks.
//!
//! The interpreter takes blocks narrow enough that the block's values at every reduced position
//! stay in L2 ([`BLOCK_BYTES`]): the passes after the first read them from there. Each pass walks
//! the positions a tile at a time: a tile holds the block's values at several consecutive
//! positions (copied together from their rows where the block is not the whole width), so the
//! interpreter's vector loops stay long however narrow the block. Row values (a column's max, its
//! sum) are one per column: a tile of them, repeated for each position a tile holds, which
//! element instructions read where a row kernel splats one value.

use super::{compute, compute_size, fill_tile, finish, identity, prepare_loads, read, store, Acc, Load, Program, TILE};
use crate::backend::cpu::native::{Loaded, Read, RowPath, Write, COLUMN_PADDING};
use crate::backend::cpu::elementwise::InputScratch;
use crate::backend::cpu::parallel::for_items_with;
use crate::backend::cpu::reduce::{fold_columns, Int64};
use crate::backend::cpu::strided::alloc;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::fused::{InstOp, Kernel, Level};
use crate::primitive::ReduceOp;
use crate::shape::collapse_dims;
use std::sync::Mutex;

/// The bytes of one block's values at every reduced position (a float32 value each) aimed at:
/// half of a 1 MiB L2.
const BLOCK_BYTES: usize = 1 << 19;

/// The fewest columns a block takes, however long the reduction: a few 64-byte lines per row.
const BLOCK_MIN: usize = 64;

/// Columns per block for a reduction of `len` positions over `width` columns, interpreted.
fn block_width(len: usize, width: usize) -> usize {
    let fitting = BLOCK_BYTES / (4 * len.max(1)) / BLOCK_MIN * BLOCK_MIN;
    fitting.clamp(BLOCK_MIN, TILE).min(width)
}

/// Columns per block of native column functions: a kilobyte of float32 per position, whatever
/// the length (the functions prefetch each position's lines ahead, so a block need not stay in
/// L2). Measured on the 2-core Zen 4, softmax over axis 0 of 4096², 1024×16384 and 16384×1024:
/// 256 and 512 columns within 3% of each other, 64 columns 1.5 to 2x slower, 1024 up to 40%.
const NATIVE_BLOCK: usize = 256;

/// Columns per native block over `rows` rows of `width` columns: [`NATIVE_BLOCK`], halved (down
/// to [`BLOCK_MIN`]) until every thread gets two blocks.
fn native_block_width(rows: usize, width: usize) -> usize {
    let mut block = NATIVE_BLOCK;
    while block > BLOCK_MIN && rows * width.div_ceil(block) < 2 * rayon::current_num_threads() {
        block /= 2;
    }
    block.min(width)
}

/// One accumulator per column of a block, in a reduction's accumulation domain.
enum Columns {
    F(Vec<f64>),
    I(Vec<i64>),
    U(Vec<u64>),
}

impl Columns {
    /// `n` copies of `acc`, and more up to a multiple of [`COLUMN_PADDING`] (for a column
    /// function's whole vectors).
    fn filled(acc: Acc, n: usize) -> Columns {
        let n = n.next_multiple_of(COLUMN_PADDING);
        match acc {
            Acc::F(a) => Columns::F(vec![a; n]),
            Acc::I(a) => Columns::I(vec![a; n]),
            Acc::U(a) => Columns::U(vec![a; n]),
        }
    }

    /// Column `j`'s running value.
    fn get(&self, j: usize) -> Acc {
        match self {
            Columns::F(a) => Acc::F(a[j]),
            Columns::I(a) => Acc::I(a[j]),
            Columns::U(a) => Acc::U(a[j]),
        }
    }

    /// The accumulators, for a column function to update in place.
    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Columns::F(a) => a.as_mut_ptr() as *mut u8,
            Columns::I(a) => a.as_mut_ptr() as *mut u8,
            Columns::U(a) => a.as_mut_ptr() as *mut u8,
        }
    }

    /// Folds the first `n` compute values of `dtype` at `p`, one into each column.
    unsafe fn fold(&mut self, op: ReduceOp, dtype: Dtype, p: *const u8, n: usize) {
        with_compute!(dtype, C => {
            let row = std::slice::from_raw_parts(p as *const C, n);
            match self {
                Columns::F(a) => fold_columns(op, &mut a[..n], row, |v: C| v.to_f64()),
                Columns::I(a) => fold_columns(op, &mut a[..n], row, |v: C| Int64::to_i64(v)),
                Columns::U(a) => fold_columns(op, &mut a[..n], row, |v: C| Int64::to_u64(v)),
            }
        })
    }
}

/// What the tasks share.
struct Shared<'a> {
    k: &'a Kernel,
    prog: &'a Program,
    loads: Vec<Option<Load>>,
    outs: Vec<usize>,
    len: usize,
    width: usize,
    /// The loaded column functions, with where each element load reads, when native code runs.
    native: Option<(&'a Loaded, Vec<Affine>)>,
}

/// Where an element load reads in a column kernel's space (rows, len, width): element `(r, s, c)`
/// at `base + (r * row + s * position + c * column) * size` bytes, `column` 1 or 0 (a value the
/// same in every column).
#[derive(Clone, Copy, Default)]
struct Affine {
    base: usize,
    row: i64,
    position: i64,
    column: i64,
}

/// How column kernel `k` reads `input` over `space` at element level, when it reads it in place
/// with unit steps along the columns (or one value for them all) and one step per row and per
/// reduced position (its view's first element, offset counted, as the base); None otherwise
/// (transposed, strided along the columns, axes that don't collapse).
fn column_affine(k: &Kernel, input: &Input, space: &[usize]) -> Option<Affine> {
    let axes = k.reduced_axes(space.len());
    let (start, end) = (axes.start, axes.end);
    let strides = input.strides_for(space);
    let step = |from: usize, to: usize| -> Option<i64> {
        let (_, collapsed) = collapse_dims(&space[from..to], &[&strides[from..to]]);
        match collapsed[0].as_slice() {
            [] => Some(0),
            &[s] => Some(s as i64),
            _ => None,
        }
    };
    let column = step(end, space.len())?;
    if !matches!(column, 0 | 1) {
        return None;
    }
    let base = input.buffer.start_address(input.dtype.size());
    Some(Affine { base, row: step(0, start)?, position: step(start, end)?, column })
}

/// Per-task state: tile slots, a tile of each element-level constant, a tile of row values per
/// row instruction (one per column), the columns' accumulators, gather scratch.
struct Task {
    slots: Vec<Vec<u64>>,
    consts: Vec<Vec<u64>>,
    rows: Vec<Vec<u64>>,
    acc: Vec<Option<Columns>>,
    scratch: Vec<InputScratch>,
    ptrs: Vec<*const u8>,
    half: Vec<u16>,
}

// Safety: a task moves into the pool's per-worker state; its raw pointers point into its own
// tiles or into buffers that outlive the run.
unsafe impl Send for Task {}

impl Shared<'_> {
    fn task(&self) -> Task {
        let k = self.k;
        let tile = TILE;
        let consts = k
            .insts
            .iter()
            .enumerate()
            .map(|(i, inst)| match inst.op {
                InstOp::Const(_) => {
                    let mut words = vec![0u64; tile];
                    fill_tile(&mut words, self.prog.consts[i], inst.dtype, tile);
                    words
                }
                _ => Vec::new(),
            })
            .collect::<Vec<_>>();
        let rows = k.insts.iter().map(|inst| if inst.level == Level::Row { vec![0u64; tile] } else { Vec::new() }).collect();
        let mut t = Task {
            slots: (0..self.prog.slots).map(|_| vec![0u64; tile]).collect(),
            rows,
            acc: k.insts.iter().map(|_| None).collect(),
            scratch: k
                .insts
                .iter()
                .map(|i| if let InstOp::Load(_) = i.op { InputScratch::new(8, tile) } else { InputScratch::default() })
                .collect(),
            ptrs: vec![std::ptr::null(); k.insts.len()],
            half: vec![0; tile],
            consts,
        };
        // Row-level constants are row values that never change.
        for (i, inst) in k.insts.iter().enumerate() {
            if inst.level == Level::Row && matches!(inst.op, InstOp::Const(_)) {
                t.rows[i] = std::mem::take(&mut t.consts[i]);
            }
        }
        t
    }

    /// Row instructions known before pass `p`, for the `n` columns from `col` (row-major
    /// position among the row values).
    unsafe fn row_step(&self, t: &mut Task, p: usize, col: usize, n: usize) -> Result<()> {
        let k = self.k;
        if p > 0 {
            for &i in &self.prog.folds[p - 1] {
                let acc = t.acc[i].take().expect("folded in the pass before");
                let size = compute_size(k.insts[i].dtype);
                let out = t.rows[i].as_mut_ptr() as *mut u8;
                for j in 0..n {
                    let bits = finish(k.insts[i].dtype, acc.get(j));
                    std::ptr::copy_nonoverlapping(&bits as *const u64 as *const u8, out.add(j * size), size);
                }
            }
        }
        for (j, inst) in k.insts.iter().enumerate() {
            if inst.level == Level::Row {
                t.ptrs[j] = t.rows[j].as_ptr() as *const u8;
            }
        }
        for &i in &self.prog.row_steps[p] {
            let out = t.rows[i].as_mut_ptr() as *mut u8;
            match k.insts[i].op {
                InstOp::Load(_) => {
                    let load = self.loads[i].as_ref().expect("loads are prepared");
                    let got = read(load, col, n, &mut t.scratch[i], out);
                    if !std::ptr::eq(got, out) {
                        std::ptr::copy_nonoverlapping(got, out, n * compute_size(k.insts[i].dtype));
                    }
                }
                InstOp::Const(_) => {}
                _ => compute(k, i, &t.ptrs, None, out, n, &mut t.half)?,
            }
        }
        Ok(())
    }

    /// Copies the first `n` values of every row value's tile `times - 1` more times after them,
    /// so that a tile of `times` reduced positions of `n` columns reads its column's value at
    /// each element.
    fn repeat_rows(&self, t: &mut Task, n: usize, times: usize) {
        for (i, inst) in self.k.insts.iter().enumerate() {
            if inst.level == Level::Row && times > 1 {
                let size = compute_size(inst.dtype);
                let bytes = n * size;
                // Safety: the tile holds TILE >= n * times words of at most 8 bytes.
                unsafe {
                    let base = t.rows[i].as_mut_ptr() as *mut u8;
                    for k in 1..times {
                        std::ptr::copy_nonoverlapping(base, base.add(k * bytes), bytes);
                    }
                }
            }
        }
    }

    /// A pointer to `m` rows of `n` compute values of load `j` from position `pos` (rows
    /// `width` apart), one after another: read in place where the block is the whole width (the
    /// rows are then consecutive), else copied row by row into `slot`.
    unsafe fn read_rows(&self, t: &mut Task, j: usize, pos: usize, (m, n): (usize, usize), slot: *mut u8) -> *const u8 {
        let load = self.loads[j].as_ref().expect("loads are prepared");
        if n == self.width || m == 1 {
            return read(load, pos, m * n, &mut t.scratch[j], slot);
        }
        let bytes = n * compute_size(self.k.insts[j].dtype);
        for s in 0..m {
            let to = slot.add(s * bytes);
            let got = read(load, pos + s * self.width, n, &mut t.scratch[j], to);
            if !std::ptr::eq(got, to) {
                std::ptr::copy_nonoverlapping(got, to, bytes);
            }
        }
        slot
    }

    /// Pass `p` over block `(r, c0, n)` by the interpreter, a tile of positions at a time.
    unsafe fn interpreted_pass(&self, t: &mut Task, p: usize, (r, c0, n): (usize, usize, usize)) -> Result<()> {
        let k = self.k;
        let per_tile = (TILE / n).max(1);
        self.repeat_rows(t, n, per_tile.min(self.len));
        let pass = &self.prog.passes[p];
        let mut i = 0;
        while i < self.len {
            let m = per_tile.min(self.len - i);
            let (pos, count) = ((r * self.len + i) * self.width + c0, m * n);
            for &j in &pass.insts {
                let out = t.slots[pass.slot[j]].as_mut_ptr() as *mut u8;
                t.ptrs[j] = match k.insts[j].op {
                    InstOp::Load(_) => self.read_rows(t, j, pos, (m, n), out),
                    InstOp::Const(_) => t.consts[j].as_ptr() as *const u8,
                    InstOp::Broadcast(a) => t.rows[a].as_ptr() as *const u8,
                    _ => {
                        // A broadcast operand differs per column here: only constants are
                        // read as one value.
                        let scalar = self.prog.scalar_operand[j]
                            .filter(|&(s, _)| matches!(k.insts[s].op, InstOp::Const(_)))
                            .map(|(s, first)| (self.prog.consts[s], first));
                        compute(k, j, &t.ptrs, scalar, out, count, &mut t.half)?;
                        out as *const u8
                    }
                };
            }
            for &f in &self.prog.folds[p] {
                if let InstOp::Reduce(op, v) = k.insts[f].op {
                    let (dtype, acc) = (k.insts[v].dtype, t.acc[f].as_mut().expect("reset before the pass"));
                    for s in 0..m {
                        acc.fold(op, dtype, t.ptrs[v].add(s * n * compute_size(dtype)), n);
                    }
                }
            }
            for &(o, j) in &pass.stores {
                let dtype = k.insts[j].dtype;
                if n == self.width {
                    store(dtype, t.ptrs[j], self.outs[o], pos, count, false);
                } else {
                    for s in 0..m {
                        let from = t.ptrs[j].add(s * n * compute_size(dtype));
                        store(dtype, from, self.outs[o], pos + s * self.width, n, false);
                    }
                }
            }
            i += m;
        }
        Ok(())
    }

    /// Pass `p` over block `(r, c0, n)` by its column function, in one call over every position.
    unsafe fn native_pass(&self, t: &mut Task, loaded: &Loaded, affine: &[Affine], p: usize, (r, c0, n): (usize, usize, usize)) {
        let k = self.k;
        let (f, layout) = self.prog.native.column(loaded, p);
        let (mut ins, mut steps) = (Vec::with_capacity(layout.reads.len()), Vec::with_capacity(2 * layout.reads.len()));
        for read in &layout.reads {
            let (ptr, position, column) = match *read {
                Read::Load(i) => {
                    let a = affine[i];
                    let offset = (r as i64 * a.row + c0 as i64 * a.column) * compute_size(k.insts[i].dtype) as i64;
                    ((a.base as i64 + offset) as *const u8, a.position, a.column)
                }
                Read::Column(i) => {
                    let InstOp::Broadcast(a) = k.insts[i].op else { unreachable!("column reads are broadcasts") };
                    (t.rows[a].as_ptr() as *const u8, 0, 1)
                }
                Read::Cache(_) => unreachable!("column kernels keep no row cache"),
            };
            ins.push(ptr);
            steps.extend([position, column]);
        }
        let first = r * self.len * self.width + c0;
        let outs: Vec<*mut u8> = layout
            .writes
            .iter()
            .map(|w| match *w {
                Write::Store { output, inst } => (self.outs[output] as *mut u8).add(first * k.insts[inst].dtype.size()),
                Write::Cache(_) => unreachable!("column kernels keep no row cache"),
            })
            .collect();
        let accs: Vec<*mut u8> =
            layout.folds.iter().map(|&i| t.acc[i].as_mut().expect("reset before the pass").as_mut_ptr()).collect();
        f(ins.as_ptr(), steps.as_ptr(), outs.as_ptr(), self.width, accs.as_ptr(), n, self.len);
    }

    /// Every pass over the `n` columns from column `c0` of row `r`, then the row outputs.
    unsafe fn block(&self, t: &mut Task, r: usize, c0: usize, n: usize) -> Result<()> {
        let k = self.k;
        let col = r * self.width + c0;
        for p in 0..k.passes {
            self.row_step(t, p, col, n)?;
            for &f in &self.prog.folds[p] {
                if let InstOp::Reduce(op, v) = k.insts[f].op {
                    t.acc[f] = Some(Columns::filled(identity(op, k.insts[v].dtype), n));
                }
            }
            match &self.native {
                Some((loaded, affine)) => self.native_pass(t, loaded, affine, p, (r, c0, n)),
                None => self.interpreted_pass(t, p, (r, c0, n))?,
            }
        }
        self.row_step(t, k.passes, col, n)?;
        for (o, &i) in k.outputs.iter().enumerate() {
            if k.insts[i].level == Level::Row {
                store(k.insts[i].dtype, t.rows[i].as_ptr() as *const u8, self.outs[o], col, n, false);
            }
        }
        Ok(())
    }
}

/// Runs column kernel `k` (its schedule `prog`) over `space`: element outputs of shape `space`,
/// row outputs with the reduced axes kept as size 1. With `native`, its column functions run the
/// passes where every element load is read in place ([`column_affine`]).
pub(super) fn run(k: &Kernel, prog: &Program, native: Option<&Loaded>, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    let (rows, len, width) = k.split_space(space);
    let row_shape = k.row_shape(space);
    let loads = prepare_loads(k, inputs, (space, &row_shape), false);
    let buffers: Vec<Buffer> = k
        .outputs
        .iter()
        .map(|&o| alloc(if k.insts[o].level == Level::Row { &row_shape } else { space }, k.insts[o].dtype))
        .collect();
    if rows == 0 || width == 0 {
        return Ok(buffers);
    }
    let outs = buffers.iter().map(|b| b.ptr::<u8>() as usize).collect();
    let in_place = |loaded| {
        let mut affine = vec![Affine::default(); k.insts.len()];
        for (i, inst) in k.insts.iter().enumerate() {
            if let (InstOp::Load(x), Level::Element) = (inst.op, inst.level) {
                affine[i] = column_affine(k, &inputs[x], space)?;
            }
        }
        Some((loaded, affine))
    };
    let given = native.is_some();
    let native = native.and_then(in_place);
    if given {
        prog.native.note_rows(if native.is_some() { RowPath::Columns } else { RowPath::ColumnsLayout });
    }
    let shared = Shared { k, prog, loads, outs, len, width, native };
    let block = if shared.native.is_some() { native_block_width(rows, width) } else { block_width(len, width) };
    let blocks = width.div_ceil(block);
    let error: Mutex<Option<crate::Error>> = Mutex::new(None);
    for_items_with(rows * blocks, len.max(1) * block, || shared.task(), |t, start, n| {
        for task in start..start + n {
            let (r, c0) = (task / blocks, task % blocks * block);
            // Safety: the block's positions lie inside every input's and output's extent.
            if let Err(e) = unsafe { shared.block(t, r, c0, block.min(width - c0)) } {
                *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    });
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(buffers),
    }
}
