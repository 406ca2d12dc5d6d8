//! Prints a fused kernel with reductions (softmax, layernorm, logsumexp, a sum with its
//! prologue and epilogue) as one CUDA kernel: a block per row of the iteration space, making
//! the kernel's passes over the row one after another.
//!
//! In each pass every thread walks the row's elements with a stride of the block, computes the
//! element values that pass needs (recomputing earlier passes' values from the inputs rather
//! than keeping them: later passes then read the row from L2), folds the reductions that end in
//! that pass into per-thread accumulators, and stores the element outputs the pass finishes.
//! Between passes the block combines each accumulator (warp shuffles, then one value per warp
//! in shared memory) and every thread takes the row value, so the row arithmetic and the next
//! pass see it. Row outputs are written by thread 0 at the end. Accumulators are float64 for
//! floats and 64-bit integers otherwise, as on the CPU; the order of the fold differs, so float
//! sums may differ from the CPU's in the last bits.
//!
//! Rows of up to [`ROW_CACHE_VECTORS`] 16-byte vectors per thread whose inputs are contiguous
//! or one value per row keep the row in registers: each thread reads its vectors of each input
//! once, in the first pass that needs them, and later passes compute from those registers; the
//! element outputs are written as vectors too (softmax and layer norm of rows up to 8192 float32
//! elements read their input once).
//!
//! Inputs are read at a per-row offset (the row's coordinates over the merged leading axes)
//! plus an offset along the row: the element's index when the input walks the row contiguously,
//! nothing when it is one value per row, or the element's coordinates over the merged trailing
//! axes times the input's strides.

use super::reduce::{accumulator, accumulator_dtype, fold_parts};
use super::source::{cast, compute_type, inst_expr, rounded, storage_type, store_expr, PRELUDE};
use crate::error::Result;
use crate::fused::{operands, InstOp, Kernel, Level};
use std::fmt::Write as _;

/// The row kernel's entry point.
pub const ROW_ENTRY: &str = "kiln_rows";

/// The most threads per block a row kernel is launched with.
pub const ROW_BLOCK_MAX: u32 = 256;

/// The most 16-byte vectors per thread and input the row cache keeps in registers.
pub const ROW_CACHE_VECTORS: usize = 8;

/// How a row kernel reads one input along a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowAccess {
    /// Element `e` of the row is `e` elements past the row's start.
    Contiguous,
    /// One value for the whole row.
    PerRow,
    /// Element `e` is at its coordinates over the trailing axes times the input's strides.
    Strided,
}

/// How a row kernel's blocks cover the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowSplit {
    /// A block per row: its passes, its row arithmetic and its outputs.
    Whole,
    /// For a kernel of one pass over few long rows: a block per part of a row, storing the
    /// element outputs and each fold's result over the part in the workspace.
    Parts,
    /// After [`RowSplit::Parts`], a block per row: the folds of the parts' results, the row
    /// arithmetic and the row outputs.
    Finish,
}

/// The call-dependent shape of a row kernel's source.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowVariant {
    /// Leading (kept) axes after merging, at least 1.
    pub lead: usize,
    /// Trailing (reduced) axes after merging, at least 1.
    pub trail: usize,
    /// Per input.
    pub access: Vec<RowAccess>,
    /// 64-bit indices.
    pub wide: bool,
    /// Elements each thread reads per access (16 bytes of the widest dtype) with the row cache
    /// or in the parts of a split row; 1 otherwise.
    pub vector: usize,
    /// Vectors each thread keeps per input with the row cache; 0 for no row cache (every pass
    /// reads its inputs again, an element at a time).
    pub per_thread: usize,
    /// Whole rows, or one of the two kernels of a split row (no row cache then).
    pub split: RowSplit,
}

/// For each pass, the element instructions it computes, in order: the operands of the folds
/// that end in it and the element outputs it stores, with everything they need at element level.
fn pass_schedule(k: &Kernel, p: usize) -> Vec<usize> {
    let element = |i: usize| k.insts[i].level == Level::Element;
    let mut need = vec![false; k.insts.len()];
    for (i, inst) in k.insts.iter().enumerate() {
        if let InstOp::Reduce(_, v) = inst.op {
            need[v] |= k.insts[v].phase == p;
        }
        need[i] |= element(i) && inst.phase == p && k.outputs.contains(&i);
    }
    for i in (0..k.insts.len()).rev() {
        if need[i] && element(i) {
            for j in operands(&k.insts[i].op) {
                need[j] |= element(j);
            }
        }
    }
    (0..k.insts.len()).filter(|&i| need[i] && element(i)).collect()
}

/// Whether input `j` is read at element level (not only once per row).
pub fn read_per_element(k: &Kernel, j: usize) -> bool {
    k.insts.iter().any(|inst| inst.op == InstOp::Load(j) && inst.level == Level::Element)
}

/// The inputs read at element level and contiguously along the row (the row cache keeps them).
pub fn loaded_contiguous(k: &Kernel, variant: &RowVariant) -> Vec<usize> {
    (0..k.inputs.len()).filter(|&j| variant.access[j] == RowAccess::Contiguous && read_per_element(k, j)).collect()
}

/// The fold helpers of reduction `i`: its combination, and its block-wide fold whose result
/// every thread receives.
fn fold_functions(k: &Kernel, i: usize) -> String {
    let InstOp::Reduce(op, v) = k.insts[i].op else { unreachable!("called for reductions") };
    let (acc, identity, combine) = fold_parts(op, k.insts[v].dtype);
    format!(
        "__device__ __forceinline__ {acc} k_c{i}({acc} a, {acc} b) {{ return {combine}; }}\n\
         __device__ {acc} k_fold{i}({acc} a) {{\n\
         \x20 __shared__ {acc} part[32];\n  __shared__ {acc} total;\n\
         \x20 const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n\
         \x20 for (int o = 16; o > 0; o >>= 1) a = k_c{i}(a, __shfl_down_sync(0xffffffffu, a, o));\n\
         \x20 if (lane == 0) part[warp] = a;\n  __syncthreads();\n\
         \x20 if (warp == 0) {{\n\
         \x20   a = lane < (blockDim.x >> 5) ? part[lane] : ({acc})({identity});\n\
         \x20   for (int o = 16; o > 0; o >>= 1) a = k_c{i}(a, __shfl_down_sync(0xffffffffu, a, o));\n\
         \x20   if (lane == 0) total = a;\n  }}\n\
         \x20 __syncthreads();\n  return total;\n}}\n"
    )
}

/// The CUDA C of kernel `k` (with `k.reduced > 0`) for `variant`. The parameter block is one
/// struct of 8-byte words: input pointers, output pointers, the row count, the row length, the
/// merged leading then trailing sizes, then each input's leading strides and each input's
/// trailing strides, and for a split row the workspace and the parts per row ([`super::rows`]
/// fills it in this order). The workspace holds, for the `f`-th fold of the kernel, row `r` and
/// part `q`, the part's accumulator at `(f * rows + r) * parts + q`.
pub fn rows(k: &Kernel, variant: &RowVariant) -> Result<String> {
    let (ni, no) = (k.inputs.len().max(1), k.outputs.len());
    let (l, t) = (variant.lead.max(1), variant.trail.max(1));
    let idx = if variant.wide { "i64" } else { "i32" };
    let reductions: Vec<usize> = (0..k.insts.len()).filter(|&i| matches!(k.insts[i].op, InstOp::Reduce(..))).collect();
    let mut s = String::with_capacity(8192);
    s.push_str(PRELUDE);
    let _ = writeln!(s, "\n/* {} */", k.name);
    let _ = writeln!(
        s,
        "struct KParams {{ const void* in[{ni}]; void* out[{no}]; i64 rows; i64 len; i64 ldim[{l}]; i64 tdim[{t}]; i64 lst[{ni}][{l}]; i64 tst[{ni}][{t}];{} }};",
        if variant.split == RowSplit::Whole { "" } else { " void* work; i64 parts;" }
    );
    if variant.vector > 1 {
        let vec = variant.vector;
        for j in loaded_contiguous(k, variant) {
            let _ = writeln!(s, "struct __align__({}) KIn{j} {{ {} e[{vec}]; }};", k.inputs[j].size() * vec, storage_type(k.inputs[j]));
        }
        for (o, &i) in k.outputs.iter().enumerate().filter(|&(_, &i)| k.insts[i].level == Level::Element) {
            let d = k.insts[i].dtype;
            let _ = writeln!(s, "struct __align__({}) KOut{o} {{ {} e[{vec}]; }};", d.size() * vec, storage_type(d));
        }
    }
    for &i in &reductions {
        s.push_str(&fold_functions(k, i));
    }
    let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__({ROW_BLOCK_MAX}) {ROW_ENTRY}(const KParams p) {{");
    let _ = writeln!(s, "  const {idx} len = ({idx})p.len;");
    if variant.split == RowSplit::Parts {
        let _ = writeln!(s, "  for ({idx} blk = blockIdx.x; blk < ({idx})p.rows * ({idx})p.parts; blk += gridDim.x) {{");
        let _ = writeln!(s, "    const {idx} row = blk / ({idx})p.parts, part = blk % ({idx})p.parts;");
        // Parts are whole vectors long, so that every part's vectors stay aligned.
        let vec = variant.vector;
        let _ = writeln!(s, "    const {idx} chunk = ((len + ({idx})p.parts - 1) / ({idx})p.parts + {vec} - 1) / {vec} * {vec}, lo = part * chunk;");
        let _ = writeln!(s, "    const {idx} hi = lo + chunk < len ? lo + chunk : len;");
    } else {
        let _ = writeln!(s, "  for ({idx} row = blockIdx.x; row < ({idx})p.rows; row += gridDim.x) {{");
    }
    let _ = writeln!(s, "    {idx} lc[{l}]; {{ {idx} rest = row;");
    let _ = writeln!(s, "      for (int d = {l} - 1; d > 0; d--) {{ lc[d] = rest % ({idx})p.ldim[d]; rest /= ({idx})p.ldim[d]; }}");
    let _ = writeln!(s, "      lc[0] = rest; }}");
    for j in 0..k.inputs.len() {
        let sum: Vec<String> = (0..l).map(|d| format!("lc[{d}] * ({idx})p.lst[{j}][{d}]")).collect();
        let _ = writeln!(s, "    const {idx} ro{j} = {};", sum.join(" + "));
    }
    let in_type = |j: usize| storage_type(k.inputs[j]);
    let row_read = |j: usize| format!("((const {}*)p.in[{j}])[ro{j}]", in_type(j));
    let element_read = |j: usize| {
        let along = match variant.access[j] {
            RowAccess::Contiguous => "e".to_string(),
            RowAccess::PerRow => "0".to_string(),
            RowAccess::Strided => (0..t).map(|d| format!("tc[{d}] * ({idx})p.tst[{j}][{d}]")).collect::<Vec<_>>().join(" + "),
        };
        format!("((const {}*)p.in[{j}])[ro{j} + {along}]", in_type(j))
    };
    let row_step = |s: &mut String, q: usize| -> Result<()> {
        for &i in reductions.iter().filter(|&&i| k.insts[i].phase == q) {
            let InstOp::Reduce(_, v) = k.insts[i].op else { unreachable!("filtered") };
            let d = k.insts[i].dtype;
            let value = rounded(d, cast(accumulator_dtype(k.insts[v].dtype), d, &format!("k_fold{i}(a{i})")));
            let _ = writeln!(s, "    const {} v{i} = {value};", compute_type(d));
        }
        for (i, inst) in k.insts.iter().enumerate() {
            if inst.level == Level::Row && inst.phase == q && !matches!(inst.op, InstOp::Reduce(..)) {
                let _ = writeln!(s, "    const {} v{i} = {};", compute_type(inst.dtype), inst_expr(k, i, &row_read)?);
            }
        }
        Ok(())
    };
    let cached = variant.per_thread > 0;
    let vec = variant.vector;
    if cached {
        // The row's vectors of each contiguous input, as stored, in the order of `e0` below.
        for j in loaded_contiguous(k, variant) {
            let _ = writeln!(s, "    {} c{j}[{}];", in_type(j), variant.per_thread * vec);
        }
    }
    let strided = variant.access.contains(&RowAccess::Strided);
    let mut first_read = vec![true; k.inputs.len()];
    for p in 0..k.passes {
        row_step(&mut s, p)?;
        let folds: Vec<usize> = reductions.iter().copied().filter(|&i| k.insts[i].phase == p + 1).collect();
        for &i in &folds {
            let InstOp::Reduce(op, v) = k.insts[i].op else { unreachable!("filtered") };
            let (acc, identity, _) = fold_parts(op, k.insts[v].dtype);
            let _ = writeln!(s, "    {acc} a{i} = ({acc})({identity});");
        }
        if variant.split == RowSplit::Finish {
            // The parts' results stand for the pass over the elements.
            for &i in &folds {
                let InstOp::Reduce(_, v) = k.insts[i].op else { unreachable!("filtered") };
                let f = reductions.iter().position(|&r| r == i).expect("a fold of the kernel");
                let _ = writeln!(
                    s,
                    "    for ({idx} q = threadIdx.x; q < ({idx})p.parts; q += blockDim.x) a{i} = k_c{i}(a{i}, ((const {}*)p.work)[({f} * ({idx})p.rows + row) * ({idx})p.parts + q]);",
                    accumulator(k.insts[v].dtype)
                );
            }
            continue;
        }
        let schedule = pass_schedule(k, p);
        let stores: Vec<(usize, usize)> = k
            .outputs
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, i)| k.insts[i].level == Level::Element && k.insts[i].phase == p)
            .collect();
        let body = |s: &mut String, indent: &str, read: &dyn Fn(usize) -> String, store: &dyn Fn(usize, usize, String) -> String| -> Result<()> {
            for &i in &schedule {
                let _ = writeln!(s, "{indent}const {} v{i} = {};", compute_type(k.insts[i].dtype), inst_expr(k, i, read)?);
            }
            for &i in &folds {
                let InstOp::Reduce(_, v) = k.insts[i].op else { unreachable!("filtered") };
                let _ = writeln!(s, "{indent}a{i} = k_c{i}(a{i}, ({})v{v});", accumulator(k.insts[v].dtype));
            }
            for &(o, i) in &stores {
                let _ = writeln!(s, "{indent}{}", store(o, i, store_expr(k.insts[i].dtype, &format!("v{i}"))));
            }
            Ok(())
        };
        // The vector at element `e0` of the row, at `indent`: each lane's element values (lane `q`
        // of a contiguous input read through `lane`), then the element outputs stored as vectors.
        let vector_step = |s: &mut String, indent: &str, lane: &dyn Fn(usize) -> String| -> Result<()> {
            for &(o, _) in &stores {
                let _ = writeln!(s, "{indent}KOut{o} r{o};");
            }
            let _ = writeln!(s, "{indent}#pragma unroll\n{indent}for (int q = 0; q < {vec}; q++) {{");
            let read = |j: usize| match variant.access[j] {
                RowAccess::Contiguous => lane(j),
                _ => row_read(j),
            };
            body(s, &format!("{indent}  "), &read, &|o, _, value| format!("r{o}.e[q] = {value};"))?;
            let _ = writeln!(s, "{indent}}}");
            for &(o, i) in &stores {
                let out = storage_type(k.insts[i].dtype);
                let _ = writeln!(s, "{indent}*(KOut{o}*)(({out}*)p.out[{o}] + row * len + e0) = r{o};");
            }
            Ok(())
        };
        if cached {
            let _ = writeln!(s, "    #pragma unroll\n    for (int it = 0; it < {}; it++) {{", variant.per_thread);
            let _ = writeln!(s, "      const {idx} e0 = (({idx})it * blockDim.x + threadIdx.x) * {vec};");
            s.push_str("      if (e0 < len) {\n");
            for j in loaded_contiguous(k, variant) {
                if first_read[j] && schedule.iter().any(|&i| k.insts[i].op == InstOp::Load(j)) {
                    first_read[j] = false;
                    let _ = writeln!(s, "        {{ const KIn{j} w = *(const KIn{j}*)((const {}*)p.in[{j}] + ro{j} + e0);", in_type(j));
                    let _ = writeln!(s, "          #pragma unroll\n          for (int q = 0; q < {vec}; q++) c{j}[it * {vec} + q] = w.e[q]; }}");
                }
            }
            vector_step(&mut s, "        ", &|j| format!("c{j}[it * {vec} + q]"))?;
            s.push_str("      }\n    }\n");
        } else if variant.split == RowSplit::Parts && vec > 1 {
            // A part of a split row, a vector per thread at a time (rows are whole vectors).
            let _ = writeln!(s, "    for ({idx} v = lo / {vec} + threadIdx.x; v < hi / {vec}; v += blockDim.x) {{");
            let _ = writeln!(s, "      const {idx} e0 = v * {vec};");
            for j in loaded_contiguous(k, variant) {
                if schedule.iter().any(|&i| k.insts[i].op == InstOp::Load(j)) {
                    let _ = writeln!(s, "      const KIn{j} w{j} = *(const KIn{j}*)((const {}*)p.in[{j}] + ro{j} + e0);", in_type(j));
                }
            }
            vector_step(&mut s, "      ", &|j| format!("w{j}.e[q]"))?;
            s.push_str("    }\n");
        } else {
            let (lo, hi) = if variant.split == RowSplit::Parts { ("lo + ", "hi") } else { ("", "len") };
            let _ = writeln!(s, "    for ({idx} e = {lo}threadIdx.x; e < {hi}; e += blockDim.x) {{");
            if strided {
                let _ = writeln!(s, "      {idx} tc[{t}]; {{ {idx} rest = e;");
                let _ = writeln!(s, "        for (int d = {t} - 1; d > 0; d--) {{ tc[d] = rest % ({idx})p.tdim[d]; rest /= ({idx})p.tdim[d]; }}");
                let _ = writeln!(s, "        tc[0] = rest; }}");
            }
            let store = |o: usize, i: usize, value: String| format!("(({}*)p.out[{o}])[row * len + e] = {value};", storage_type(k.insts[i].dtype));
            body(&mut s, "      ", &element_read, &store)?;
            s.push_str("    }\n");
        }
    }
    if variant.split == RowSplit::Parts {
        for (f, &i) in reductions.iter().enumerate() {
            let InstOp::Reduce(_, v) = k.insts[i].op else { unreachable!("reductions") };
            let acc = accumulator(k.insts[v].dtype);
            let _ = writeln!(
                s,
                "    {{ const {acc} t = k_fold{i}(a{i}); if (threadIdx.x == 0) (({acc}*)p.work)[({f} * ({idx})p.rows + row) * ({idx})p.parts + part] = t; }}"
            );
        }
        s.push_str("  }\n}\n");
        return Ok(s);
    }
    row_step(&mut s, k.passes)?;
    let row_outputs: Vec<(usize, usize)> =
        k.outputs.iter().copied().enumerate().filter(|&(_, i)| k.insts[i].level == Level::Row).collect();
    if !row_outputs.is_empty() {
        s.push_str("    if (threadIdx.x == 0) {\n");
        for (o, i) in row_outputs {
            let d = k.insts[i].dtype;
            let _ = writeln!(s, "      (({}*)p.out[{o}])[row] = {};", storage_type(d), store_expr(d, &format!("v{i}")));
        }
        s.push_str("    }\n");
    }
    s.push_str("  }\n}\n");
    Ok(s)
}
