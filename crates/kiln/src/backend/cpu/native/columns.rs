//! Prints the C of one pass of a column kernel (a reduction with kept axes after the reduced
//! ones, see [`crate::backend::cpu::fused`]'s `columns`): for a block of adjacent columns, it
//! walks every reduced position, computes the pass's element instructions on the block's values
//! there in vectors across the columns, stores them, and folds each column into its own
//! accumulator.
//!
//! A column's row values (its max, its sum) differ from column to column, so the element loop
//! reads them as vectors ([`Read::Column`]) where a row kernel splats one value. Each column
//! folds its values in order, position after position, in the accumulation domain of the
//! interpreter's column fold (float64, int64, uint64), with the same combine: results equal the
//! interpreter's bit for bit.

use super::source::{c_type, fold_plans, statement, vector_type, Fold, Layout, Read, Write, LEN};
use crate::backend::cpu::fused::Pass;
use crate::fused::{InstOp, Kernel};
use std::fmt::Write as _;

/// How many positions ahead a column function prefetches its loads: each position's values lie
/// a row of the input apart, in lines the hardware prefetchers do not foresee. Measured on the
/// 2-core Zen 4 (softmax and layer norm over axis 0 of 4096², blocks of 256 columns): 5.7 and
/// 5.3 ms with 8 or more, 10.3 and 8.0 without.
const AHEAD: usize = 8;

/// Accumulators a column function may touch past a block's last column, as a multiple of which
/// the caller allocates them: the most lanes of any target's vectors.
pub(in crate::backend::cpu) const COLUMN_PADDING: usize = 16;

/// The C function `name` of one pass of column kernel `k`, folding `folds`, and its argument
/// layout; None when some instruction has no exact C form.
///
/// Arguments `(in, step, out, width, acc, n, count)`: per read `j`, a pointer to the block's
/// first value, its step per reduced position in elements (`step[2 j]`, 0 for a column's row
/// values) and per column (`step[2 j + 1]`: 1, or 0 for a value the same in every column, read
/// once and splatted); per write, a pointer to the block's first value, `width` elements apart
/// per position; per fold, its `n` accumulators, padded with room for whole vectors after them
/// (a multiple of [`COLUMN_PADDING`]); `n` columns and `count` positions.
pub(super) fn column_function(k: &Kernel, pass: &Pass, folds: &[usize], name: &str) -> Option<(String, Layout)> {
    let mut layout = Layout { folds: folds.to_vec(), ..Layout::default() };
    for &i in &pass.insts {
        match k.insts[i].op {
            InstOp::Load(_) => layout.reads.push(Read::Load(i)),
            InstOp::Broadcast(_) => layout.reads.push(Read::Column(i)),
            _ => {}
        }
        for &(output, inst) in &pass.stores {
            if inst == i {
                layout.writes.push(Write::Store { output, inst });
            }
        }
    }
    let plans = fold_plans(k, folds, Fold::of_row)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "void {name}(const void *const *restrict in, const int64_t *restrict step, void *const *restrict out, \
         size_t width, void *const *restrict acc, size_t n, size_t count) {{"
    );
    for (f, (fold, _)) in plans.iter().enumerate() {
        let _ = writeln!(s, "    {} *restrict a{f} = acc[{f}];", fold.acc);
    }
    let _ = writeln!(s, "    for (size_t s = 0; s < count; s++) {{");
    for (j, r) in layout.reads.iter().enumerate() {
        let (Read::Load(i) | Read::Column(i) | Read::Cache(i)) = *r;
        let t = c_type(k.insts[i].dtype)?;
        let _ = writeln!(s, "        const {t} *restrict r{j} = (const {t} *)in[{j}] + (int64_t)s * step[2 * {j}];");
        if let Read::Load(_) = r {
            // Every line of the values AHEAD positions on (addresses as integers: the pointer
            // itself is formed only in bounds).
            let _ = writeln!(
                s,
                "        if (s + {AHEAD} < count) {{ const uintptr_t lo = (uintptr_t)(r{j} + {AHEAD} * step[2 * {j}]), \
                 hi = lo + (step[2 * {j} + 1] ? n : 1) * sizeof *r{j}; \
                 for (uintptr_t a = lo & ~(uintptr_t)63; a < hi; a += 64) __builtin_prefetch((const void *)a, 0, 3); }}"
            );
        }
    }
    let mut body = String::new();
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let t = c_type(k.insts[i].dtype)?;
        let _ = writeln!(s, "        {t} *restrict w{j} = ({t} *)out[{j}] + s * width;");
    }
    for &i in &pass.insts {
        match layout.reads.iter().position(|r| *r == Read::Load(i)) {
            // A load's vector, or its one value in every lane where it is the same in every column.
            Some(j) => {
                let _ = writeln!(
                    body,
                    "{vt} v{i} = {{0}}; if (step[2 * {j} + 1]) memcpy(&v{i}, r{j} + e, {LEN} * sizeof *r{j}); \
                     else for (int q = 0; q < K_LANES; q++) v{i}[q] = r{j}[0];",
                    vt = vector_type(k.insts[i].dtype)
                );
            }
            None => {
                let _ = writeln!(body, "{}", statement(k, i, &layout.reads)?);
            }
        }
    }
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let _ = writeln!(body, "memcpy(w{j} + e, &v{i}, {LEN} * sizeof *w{j});");
    }
    // Column c's accumulator is a{f}[c]: the values' vector is folded a register of
    // accumulators at a time (widened where narrower), whole registers even in the tail (the
    // accumulators are padded, see the function's doc).
    for (f, (fold, v)) in plans.iter().enumerate() {
        let (element, widened) = fold.widening(k.insts[*v].dtype);
        let (vec, _) = fold.registers();
        let _ = writeln!(
            body,
            "{{ {t} xs[K_LANES]; memcpy(xs, &v{v}, sizeof xs); for (int q = 0; q < K_LANES / K_A64; q++) {{ \
             {element} x; memcpy(&x, xs + q * K_A64, sizeof x); {vec} y; memcpy(&y, a{f} + e + q * K_A64, sizeof y); \
             const {vec} w = {widened}; y = {}; memcpy(a{f} + e + q * K_A64, &y, sizeof y); }} }}",
            fold.combine("y", "w", Some(fold.registers())),
            t = c_type(k.insts[*v].dtype)?
        );
    }
    let indent = |text: &str| -> String { text.lines().map(|l| format!("            {l}\n")).collect() };
    let _ = write!(
        s,
        "        size_t e = 0;\n        for (; e + K_LANES <= n; e += K_LANES) {{\n{}        }}\n        \
         if (e < n) {{\n            const size_t m = n - e;\n{}        }}\n    }}\n}}\n",
        indent(&body.replace(LEN, "K_LANES")),
        indent(&body.replace(LEN, "m"))
    );
    Some((s, layout))
}
