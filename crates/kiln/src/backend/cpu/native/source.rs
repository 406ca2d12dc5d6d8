//! Prints the C of one kernel: a function per pass (and per row-cache variant) that computes
//! every element instruction of the pass for a tile in one loop, with the values in registers,
//! writes the pass's stores and row-cache values, and folds its reductions.
//!
//! Elementwise kernels keep the tile loop, loads and stores with the interpreter
//! ([`super::super::fused`]): a pass function replaces the per-instruction loops over a tile.
//! Row kernels get a rows function too, which runs all passes over a run of rows, with the row
//! steps (the row-level instructions between passes), accumulator resets and finishes in C: for
//! short rows that per-row work, done in Rust, took most of the time.
//!
//! The C means what the interpreter does, operation for operation: the same float32 functions
//! (`prelude.c`), the same conversions, and reductions folded with sixteen accumulators per tile
//! in the same order (max and min fold four contiguous parts of a tile side by side and combine
//! them in order, which gives the same bits, ties of signed zeros and NaNs included), so native
//! and interpreted results are equal bit for bit (tested). Instructions C cannot express
//! that way (float16/bfloat16, float64 erf/erfinv, Rust's own inverse hyperbolics) make the kernel
//! stay interpreted.
//!
//! A pass function writes its stores to where `out` points: a tile buffer, or the output itself.
//! Bit `j` of its `stream` argument asks for output write `j` to go out with streaming stores
//! (whole vectors, where the target has them): large outputs of row kernels are then written
//! once, straight to memory, instead of into a tile that the interpreter then streams out. The
//! loop's whole vectors start where the first streamed store is aligned to a streaming store, so
//! rows of any length and offset stream; the values before and after go out as partial vectors.

use super::STREAM_BITS;
use crate::backend::cpu::fused::Pass;
use crate::dtype::Dtype;
use crate::fused::{operands, InstOp, Kernel, Level};
use crate::primitive::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::Write as _;

/// A pointer a pass function reads `n` values from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Read {
    /// The elements of a load instruction for the tile.
    Load(usize),
    /// A value an earlier pass left in the row cache.
    Cache(usize),
    /// Broadcast instruction `i` of a column kernel: its row value differs per column, so it
    /// is read as a vector of the block's row values (see [`super::columns`]).
    Column(usize),
}

/// A pointer a pass function writes `n` values to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Write {
    /// Output `output`, the value of instruction `inst`.
    Store { output: usize, inst: usize },
    /// The row cache of instruction `inst`.
    Cache(usize),
}

/// The argument lists of one pass function, in order.
#[derive(Clone, Debug, Default)]
pub(in crate::backend::cpu) struct Layout {
    /// `in[j]`.
    pub reads: Vec<Read>,
    /// `out[j]`.
    pub writes: Vec<Write>,
    /// `acc[j]`: the reductions the pass folds (their accumulator bits, updated in place).
    pub folds: Vec<usize>,
}

/// The C type of a dtype's compute values, when C computes it.
pub(super) fn c_type(d: Dtype) -> Option<&'static str> {
    match d {
        Dtype::Bool => Some("uint8_t"),
        Dtype::F32 => Some("float"),
        Dtype::F64 => Some("double"),
        _ => d.stdint_name(),
    }
}

/// The prelude's type of the `K_A64` values of a narrow dtype a fold reads before widening them
/// to its accumulator lanes (the dtypes [`widen_function`] widens).
fn narrow_type(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool | Dtype::U8 => "k_lu8",
        Dtype::U16 => "k_lu16",
        Dtype::U32 => "k_lu32",
        Dtype::I8 => "k_li8",
        Dtype::I16 => "k_li16",
        Dtype::I32 => "k_li32",
        _ => "k_lf32",
    }
}

/// The prelude's type of `K_LANES` values of a dtype's compute type (the element loop's values).
pub(super) fn vector_type(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool | Dtype::U8 => "k_vu8",
        Dtype::U16 => "k_vu16",
        Dtype::U32 => "k_vu32",
        Dtype::U64 => "k_vu64",
        Dtype::I8 => "k_vi8",
        Dtype::I16 => "k_vi16",
        Dtype::I32 => "k_vi32",
        Dtype::I64 => "k_vi64",
        Dtype::F64 => "k_vf64",
        _ => "k_vf32",
    }
}

/// The type of a comparison mask of `d`'s vectors: signed lanes of the same width.
fn mask_type(d: Dtype) -> &'static str {
    match d.size() {
        1 => "k_vi8",
        2 => "k_vi16",
        4 => "k_vi32",
        _ => "k_vi64",
    }
}

/// `K_LANES` copies of the value whose bits (as an unsigned integer of `d`'s width) are `bits`:
/// through the bits, so a float constant such as -0.0 or a NaN keeps them exactly.
fn splat_bits(d: Dtype, bits: &str) -> String {
    let width = 8 * d.size();
    format!("(({})K_SPLAT(k_vu{width}, (uint{width}_t){bits}))", vector_type(d))
}

/// The prelude's function that widens eight values of `d` to 64-bit lanes (`k_widen_*`), for the
/// dtypes narrower than 64 bits.
fn widen_function(d: Dtype) -> Option<&'static str> {
    Some(match d {
        Dtype::F32 => "k_widen_f32",
        Dtype::I32 => "k_widen_i32",
        Dtype::U32 => "k_widen_u32",
        Dtype::I16 => "k_widen_i16",
        Dtype::U16 => "k_widen_u16",
        Dtype::I8 => "k_widen_i8",
        Dtype::Bool | Dtype::U8 => "k_widen_u8",
        _ => return None,
    })
}

/// How C computes an instruction on the `K_LANES` values of one step of the element loop.
enum Form {
    /// One expression on whole vectors (named `v{i}`).
    Vector(String),
    /// An expression on lane `j` (operands `v{i}[j]`), computed lane by lane: for the ops with
    /// no vector form (libm functions, integer division, saturating casts).
    Lanes(String),
}

/// A vector of bools (0 or 1 in each byte lane) from a comparison mask of any width.
fn bool_of(mask: &str) -> Form {
    Form::Vector(format!("__builtin_convertvector(-({mask}), k_vu8)"))
}

/// `mask ? a : b` on vectors of dtype `d`.
fn select(d: Dtype, mask: &str, a: &str, b: &str) -> String {
    format!("K_SEL({}, {}, {mask}, {a}, {b})", mask_type(d), vector_type(d))
}

/// How C computes a unary op on `x` of dtype `d` (compute type `t`), if it computes it exactly
/// as the interpreter does.
fn unary(u: UnaryOp, d: Dtype, t: &str, x: &str) -> Option<Form> {
    use UnaryOp::*;
    let f32 = d == Dtype::F32;
    let lane = format!("{x}[j]");
    let libm = |name: &str| Some(Form::Lanes(format!("{name}{}({lane})", if f32 { "f" } else { "" })));
    let vector = |text: String| Some(Form::Vector(text));
    let splat = |c: &str| format!("K_SPLAT({}, ({t}){c})", vector_type(d));
    if d.is_float() {
        let abs = if f32 { format!("k_abs_f32({x})") } else { format!("((k_vf64)((k_vu64){x} & 0x7fffffffffffffffull))") };
        return match u {
            Abs => vector(abs),
            Negative => vector(format!("(-{x})")),
            Sign => vector(select(d, &format!("{x} > 0"), &splat("1"), &select(d, &format!("{x} < 0"), &splat("-1"), x))),
            Exp | Expm1 | Log | Log1p | Tanh | Erf | ErfInv | Sigmoid | Sqrt if f32 => vector(format!("k_{}_f32({x})", u.name())),
            Sigmoid => Some(Form::Lanes(format!("k_sigmoid_f64({lane})"))),
            Exp => libm("exp"),
            Expm1 => libm("expm1"),
            Log => libm("log"),
            Log1p => libm("log1p"),
            Tanh => libm("tanh"),
            Log2 => libm("log2"),
            Log10 => libm("log10"),
            Sqrt => libm("sqrt"),
            Rsqrt if f32 => vector(format!("(1.0f / k_sqrt_f32({x}))")),
            Rsqrt => Some(Form::Lanes(format!("(1.0 / sqrt({lane}))"))),
            Square => vector(format!("({x} * {x})")),
            Reciprocal => vector(format!("(({t})1 / {x})")),
            Sin => libm("sin"),
            Cos => libm("cos"),
            Tan => libm("tan"),
            ArcSin => libm("asin"),
            ArcCos => libm("acos"),
            ArcTan => libm("atan"),
            Sinh => libm("sinh"),
            Cosh => libm("cosh"),
            Floor => libm("floor"),
            Ceil => libm("ceil"),
            // Ties to even, as Rust's round_ties_even, in the default rounding mode.
            Round => libm("rint"),
            LogicalNot => Some(bool_of(&format!("{x} == 0"))),
            IsNan => Some(bool_of(&format!("{x} != {x}"))),
            IsInf => Some(bool_of(&format!("{abs} == INFINITY"))),
            IsPosInf => Some(bool_of(&format!("{x} == INFINITY"))),
            IsNegInf => Some(bool_of(&format!("{x} == -INFINITY"))),
            IsFinite => Some(bool_of(&format!("{abs} < INFINITY"))),
            // float64 erf/erfinv are scalar series in Rust, and std's inverse hyperbolics are
            // its own formulas, not libm's.
            Erf | ErfInv | ArcSinh | ArcCosh | ArcTanh | BitwiseInvert | Conjugate | Real | Imag => None,
        };
    }
    let signed = d.category() == crate::dtype::Category::Signed;
    match u {
        LogicalNot => Some(bool_of(&format!("{x} == 0"))),
        IsFinite => vector("K_SPLAT(k_vu8, 1)".into()),
        IsNan | IsInf | IsPosInf | IsNegInf => vector("K_SPLAT(k_vu8, 0)".into()),
        Abs | Floor | Ceil | Round | Square if d == Dtype::Bool => vector(x.into()),
        BitwiseInvert if d == Dtype::Bool => Some(bool_of(&format!("{x} == 0"))),
        _ if d == Dtype::Bool => None,
        Abs if signed => vector(select(d, &format!("{x} < 0"), &format!("(-{x})"), x)),
        Abs | Floor | Ceil | Round => vector(x.into()),
        Negative => vector(format!("(-{x})")),
        Sign => vector(select(d, &format!("{x} > 0"), &splat("1"), &select(d, &format!("{x} == 0"), &splat("0"), &splat("-1")))),
        Square => vector(format!("({x} * {x})")),
        BitwiseInvert => vector(format!("(~{x})")),
        _ => None,
    }
}

/// How C computes a binary op on `x`, `y` of dtype `d` (compute type `t`).
fn binary(b: BinaryOp, d: Dtype, t: &str, x: &str, y: &str) -> Option<Form> {
    use BinaryOp::*;
    let vector = |text: String| Some(Form::Vector(text));
    let compare = |op: &str| Some(bool_of(&format!("{x} {op} {y}")));
    match b {
        Equal => return compare("=="),
        NotEqual => return compare("!="),
        Less => return compare("<"),
        LessEqual => return compare("<="),
        Greater => return compare(">"),
        GreaterEqual => return compare(">="),
        LogicalAnd => return Some(bool_of(&format!("({x} != 0) & ({y} != 0)"))),
        LogicalOr => return Some(bool_of(&format!("({x} != 0) | ({y} != 0)"))),
        _ => {}
    }
    if d == Dtype::Bool {
        return match b {
            Add | Maximum | BitwiseOr => vector(format!("({x} | {y})")),
            Multiply | Minimum | BitwiseAnd => vector(format!("({x} & {y})")),
            BitwiseXor => vector(format!("({x} ^ {y})")),
            _ => None,
        };
    }
    let (xl, yl) = (format!("{x}[j]"), format!("{y}[j]"));
    let lanes = |text: String| Some(Form::Lanes(text));
    if d.is_float() {
        let suffix = if d == Dtype::F32 { ("f", "f32") } else { ("", "f64") };
        return match b {
            Add => vector(format!("({x} + {y})")),
            Subtract => vector(format!("({x} - {y})")),
            Multiply => vector(format!("({x} * {y})")),
            Divide => vector(format!("({x} / {y})")),
            Maximum => vector(select(d, &format!("({x} > {y}) | ({x} != {x})"), x, y)),
            Minimum => vector(select(d, &format!("({x} < {y}) | ({x} != {x})"), x, y)),
            FloorDivide => lanes(format!("floor{}({xl} / {yl})", suffix.0)),
            Remainder => lanes(format!("k_rem_{}({xl}, {yl})", suffix.1)),
            Power => lanes(format!("pow{}({xl}, {yl})", suffix.0)),
            ArcTan2 => lanes(format!("atan2{}({xl}, {yl})", suffix.0)),
            LogAddExp => lanes(format!("k_logaddexp_{}({xl}, {yl})", suffix.1)),
            _ => None,
        };
    }
    let signed = u8::from(d.category() == crate::dtype::Category::Signed);
    let bits = 8 * d.size();
    let unsigned = format!("uint{bits}_t");
    match b {
        Add | Subtract | Multiply | BitwiseAnd | BitwiseOr | BitwiseXor => {
            let op = match b {
                Add => "+",
                Subtract => "-",
                Multiply => "*",
                BitwiseAnd => "&",
                BitwiseOr => "|",
                _ => "^",
            };
            // Vector lanes wrap in their own width (no promotion to int).
            return vector(format!("({x} {op} {y})"));
        }
        Maximum | Minimum => {
            let op = if b == Maximum { ">" } else { "<" };
            return vector(select(d, &format!("{x} {op} {y}"), x, y));
        }
        _ => {}
    }
    let (x, y) = (xl.as_str(), yl.as_str());
    match b {
        FloorDivide => lanes(format!("K_INT_DIV({t}, {signed}, {x}, {y})")),
        Remainder => lanes(format!("K_INT_REM({t}, {signed}, {x}, {y})")),
        Power => lanes(format!("k_pow_{}{bits}({x}, {y})", if signed == 1 { "i" } else { "u" })),
        LeftShift => lanes(format!("(({y} < 0 || {y} >= {bits}) ? ({t})0 : ({t})(({unsigned}){x} << {y}))")),
        RightShift => lanes(format!("(({y} < 0 || {y} >= {bits}) ? ({x} < 0 ? ({t})-1 : ({t})0) : ({t})({x} >> {y}))")),
        _ => None,
    }
}

/// How C converts `x` of dtype `from` to `to` (compute type `t`) with astype semantics.
fn cast(from: Dtype, to: Dtype, t: &str, x: &str) -> Form {
    if from == to {
        Form::Vector(x.into())
    } else if to == Dtype::Bool {
        bool_of(&format!("{x} != 0"))
    } else if from.is_float() && to.is_integer() {
        let (lo, hi) = crate::backend::c_int_range(to);
        Form::Lanes(format!("K_SATURATE({t}, {lo}, {hi}, {x}[j])"))
    } else {
        Form::Vector(format!("__builtin_convertvector({x}, {})", vector_type(to)))
    }
}

/// How a reduction folds in C: accumulator type, how an element enters it, identity, combine.
pub(super) struct Fold {
    pub(super) acc: &'static str,
    load: fn(&str) -> String,
    identity: &'static str,
    op: ReduceOp,
    /// Whether the tile's result widens to the float64 accumulator (float32 max and min).
    widen: bool,
}

impl Fold {
    /// The fold of a reduction `op` over values of `d`, as the interpreter's `fold_tile` does it.
    fn new(op: ReduceOp, d: Dtype) -> Fold {
        let (acc, load): (&'static str, fn(&str) -> String) = if d.is_float() {
            if matches!(op, ReduceOp::Max | ReduceOp::Min) && d == Dtype::F32 {
                ("float", |v| v.to_string())
            } else {
                ("double", |v| format!("(double){v}"))
            }
        } else if d.is_unsigned() {
            ("uint64_t", |v| format!("(uint64_t){v}"))
        } else {
            ("int64_t", |v| format!("(int64_t){v}"))
        };
        let float = d.is_float();
        let identity = match op {
            ReduceOp::Sum | ReduceOp::Any => "0",
            ReduceOp::Prod | ReduceOp::All => "1",
            ReduceOp::Max if float => "-INFINITY",
            ReduceOp::Min if float => "INFINITY",
            ReduceOp::Max if d.is_unsigned() => "0",
            ReduceOp::Min if d.is_unsigned() => "UINT64_MAX",
            ReduceOp::Max => "INT64_MIN",
            ReduceOp::Min => "INT64_MAX",
        };
        Fold { acc, load, identity, op, widen: acc == "float" }
    }

    /// The fold of a row's accumulator, into which each tile's result combines: float reductions
    /// accumulate in float64 (float32 max and min too, widened from their tiles).
    pub(super) fn of_row(op: ReduceOp, d: Dtype) -> Fold {
        Fold::new(op, if d.is_float() { Dtype::F64 } else { d })
    }

    /// The vector type of a register's worth of the sixteen accumulators.
    fn vector(&self) -> &'static str {
        match self.acc {
            "float" => "k_vf32",
            "double" => "k_af64",
            "uint64_t" => "k_au64",
            _ => "k_ai64",
        }
    }

    /// How the fold reads values of `d`, a [`Fold::vector`]'s worth `x` at a time: the type of `x`,
    /// and `x` as an accumulator vector (widened to 64-bit lanes where it is narrower).
    pub(super) fn widening(&self, d: Dtype) -> (&'static str, String) {
        let vec = self.vector();
        match widen_function(d) {
            Some(widen) if self.acc != "float" => (narrow_type(d), format!("({vec}){widen}(x)")),
            _ => (vec, "x".to_string()),
        }
    }

    /// How many accumulators one [`Fold::vector`] holds (a prelude macro).
    fn lanes(&self) -> &'static str {
        if self.acc == "float" {
            "K_LANES"
        } else {
            "K_A64"
        }
    }

    /// The accumulators' register vector and its comparison mask type.
    pub(super) fn registers(&self) -> (&'static str, &'static str) {
        (self.vector(), if self.acc == "float" { "k_vi32" } else { "k_ai64" })
    }

    /// `a` combined with `b`, as the reduction domains of `reduce.rs` combine: on scalars of
    /// type `acc`, or lane by lane on vectors when `lanes` names their type and comparison mask
    /// type (there a select is a blend through the mask).
    pub(super) fn combine(&self, a: &str, b: &str, lanes: Option<(&str, &str)>) -> String {
        let (vec, mask) = lanes.unwrap_or(("", ""));
        let select = |cond: String| {
            if lanes.is_some() {
                format!("K_SEL({mask}, {vec}, {cond}, {a}, {b})")
            } else {
                format!("({cond}) ? {a} : {b}")
            }
        };
        // A comparison's truth as 1 or 0 of the accumulator type (vector masks are -1 or 0).
        let truth = |cond: String| {
            if lanes.is_some() {
                format!("__builtin_convertvector(-({cond}), {vec})")
            } else {
                format!("({})({cond})", self.acc)
            }
        };
        let float = matches!(self.acc, "float" | "double");
        match self.op {
            ReduceOp::Sum => format!("{a} + {b}"),
            ReduceOp::Prod => format!("{a} * {b}"),
            ReduceOp::Max if float => select(format!("({a} > {b}) | ({a} != {a})")),
            ReduceOp::Min if float => select(format!("({a} < {b}) | ({a} != {a})")),
            ReduceOp::Max => select(format!("{a} > {b}")),
            ReduceOp::Min => select(format!("{a} < {b}")),
            ReduceOp::All => truth(format!("({a} != 0) & ({b} != 0)")),
            ReduceOp::Any => truth(format!("({a} != 0) | ({b} != 0)")),
        }
    }
}

/// Per reduction of `folds`, its fold (`fold` of its op and its operand's dtype) and the
/// instruction it folds; None when the operand has no C type.
pub(super) fn fold_plans(k: &Kernel, folds: &[usize], fold: fn(ReduceOp, Dtype) -> Fold) -> Option<Vec<(Fold, usize)>> {
    folds
        .iter()
        .map(|&r| match k.insts[r].op {
            InstOp::Reduce(op, v) => c_type(k.insts[v].dtype).map(|_| (fold(op, k.insts[v].dtype), v)),
            _ => None,
        })
        .collect()
}

/// Contiguous parts of a tile that a max or min fold runs side by side (see `pass_function`).
const FOLD_SEGMENTS: usize = 4;

/// The length placeholder of a loop body: `K_LANES` in the main loop, the rest in the tail.
pub(super) const LEN: &str = "@N";

/// The C statement computing element instruction `i` into the vector `v{i}` (`LEN` values read
/// when it is a read), or None when C can't.
pub(super) fn statement(k: &Kernel, i: usize, reads: &[Read]) -> Option<String> {
    let inst = &k.insts[i];
    let t = c_type(inst.dtype)?;
    let vt = vector_type(inst.dtype);
    let v = |j: usize| format!("v{j}");
    let operand_type = |j: usize| c_type(k.insts[j].dtype);
    if let Some(j) = reads.iter().position(|r| matches!(*r, Read::Cache(j) | Read::Load(j) | Read::Column(j) if j == i)) {
        return Some(format!("{vt} v{i} = {{0}}; memcpy(&v{i}, r{j} + e, {LEN} * sizeof *r{j});"));
    }
    let form = match inst.op {
        InstOp::Load(_) => unreachable!("loads are reads"),
        InstOp::Const(bits) => {
            let mask = if inst.dtype.size() == 8 { u64::MAX } else { (1u64 << (8 * inst.dtype.size())) - 1 };
            Form::Vector(splat_bits(inst.dtype, &format!("0x{:x}ull", bits & mask)))
        }
        InstOp::Broadcast(_) => Form::Vector(splat_bits(inst.dtype, &format!("b{i}"))),
        InstOp::Unary(u, a) => unary(u, k.insts[a].dtype, operand_type(a)?, &v(a))?,
        InstOp::Binary(b, x, y) => binary(b, k.insts[x].dtype, operand_type(x)?, &v(x), &v(y))?,
        InstOp::Select(c, a, b) => {
            let mask = format!("__builtin_convertvector({}, {}) != 0", v(c), mask_type(inst.dtype));
            Form::Vector(select(inst.dtype, &mask, &v(a), &v(b)))
        }
        InstOp::Cast(a) => {
            operand_type(a)?;
            cast(k.insts[a].dtype, inst.dtype, t, &v(a))
        }
        InstOp::Reduce(..) => unreachable!("reductions are row values"),
    };
    Some(match form {
        Form::Vector(e) => format!("const {vt} v{i} = {e};"),
        Form::Lanes(e) => format!("{vt} v{i}; for (int j = 0; j < K_LANES; j++) v{i}[j] = {e};"),
    })
}

/// The C function `name` of one pass, and its argument layout; None when some instruction has
/// no exact C form.
pub(in crate::backend::cpu) fn pass_function(k: &Kernel, pass: &Pass, folds: &[usize], name: &str) -> Option<(String, Layout)> {
    let mut layout = Layout { folds: folds.to_vec(), ..Layout::default() };
    for &i in &pass.insts {
        if pass.from_cache[i] {
            layout.reads.push(Read::Cache(i));
        } else if let InstOp::Load(_) = k.insts[i].op {
            layout.reads.push(Read::Load(i));
        }
    }
    for &i in &pass.insts {
        for &(output, inst) in &pass.stores {
            if inst == i {
                layout.writes.push(Write::Store { output, inst });
            }
        }
        if pass.to_cache[i] {
            layout.writes.push(Write::Cache(i));
        }
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "void {name}(const void *const *restrict in, void *const *restrict out, const uint64_t *restrict row, \
         uint64_t *restrict acc, size_t n, uint64_t stream) {{"
    );
    for (j, r) in layout.reads.iter().enumerate() {
        let (Read::Load(i) | Read::Cache(i) | Read::Column(i)) = *r;
        let _ = writeln!(s, "    const {} *restrict r{j} = in[{j}];", c_type(k.insts[i].dtype)?);
    }
    // Stores that may stream (write `j` under bit `j` of `stream`), with their vector types.
    let mut streamable = Vec::new();
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let _ = writeln!(s, "    {} *restrict w{j} = out[{j}];", c_type(k.insts[i].dtype)?);
        if matches!(w, Write::Store { .. }) && j < STREAM_BITS {
            streamable.push((j, vector_type(k.insts[i].dtype)));
        }
    }
    // Whole vectors start `h` values in, where the first store that streams meets a block
    // boundary; the values before go with the tail. Stores aligned differently don't stream.
    let head = streamable.iter().rev().fold("0".to_string(), |rest, (j, vt)| {
        format!("K_STREAMABLE((stream >> {j}) & 1, {vt}) ? K_HEAD(w{j}) : {rest}")
    });
    let _ = writeln!(s, "    size_t h = {head};\n    if (h > n) h = n;");
    for (j, vt) in &streamable {
        let _ = writeln!(s, "    const int s{j} = K_STREAMS((stream >> {j}) & 1, {vt}, w{j} + h);");
    }
    let mut body = String::new();
    for &i in &pass.insts {
        if let InstOp::Broadcast(a) = k.insts[i].op {
            c_type(k.insts[i].dtype)?;
            let _ = writeln!(s, "    uint{}_t b{i}; memcpy(&b{i}, &row[{a}], sizeof b{i});", 8 * k.insts[i].dtype.size());
        }
        debug_assert_eq!(k.insts[i].level, Level::Element);
        let _ = writeln!(body, "{}", statement(k, i, &layout.reads)?);
    }
    // Whole vectors of a streamed store go out with streaming stores, partial ones normally.
    let mut whole_stores = String::new();
    let mut partial_stores = String::new();
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let store = format!("memcpy(w{j} + e, &v{i}, {LEN} * sizeof *w{j});");
        match w {
            Write::Store { .. } if j < STREAM_BITS => {
                let _ = writeln!(whole_stores, "if (s{j}) k_stream(w{j} + e, &v{i}, sizeof v{i}); else {store}");
            }
            _ => {
                let _ = writeln!(whole_stores, "{store}");
            }
        }
        let _ = writeln!(partial_stores, "{store}");
    }
    let indent = |text: &str, depth: usize| -> String {
        text.lines().map(|l| format!("{}{l}\n", "    ".repeat(depth))).collect()
    };
    let plans = fold_plans(k, folds, Fold::new)?;
    // What each reduction folds: a read in place, what the loop wrote to the row cache, or a
    // tile buffer the element loop fills.
    let mut sources = Vec::new();
    for (f, (_, v)) in plans.iter().enumerate() {
        let read = layout.reads.iter().position(|r| matches!(*r, Read::Load(i) | Read::Cache(i) if i == *v));
        let cached = layout.writes.iter().position(|w| *w == Write::Cache(*v));
        match (read, cached) {
            (Some(j), _) => sources.push(format!("r{j}")),
            (None, Some(j)) => sources.push(format!("w{j}")),
            (None, None) => {
                let _ = writeln!(s, "    {} fv{f}[KILN_TILE];", c_type(k.insts[*v].dtype)?);
                let _ = writeln!(body, "memcpy(fv{f} + e, &v{v}, {LEN} * sizeof *fv{f});");
                sources.push(format!("fv{f}"));
            }
        }
    }
    // Whole vectors from `h`, then the values before `h` and after the last whole vector, each
    // as one partly filled vector (the lanes past `m` compute on zeros and are never stored).
    // Values are independent of where the vectors fall: folds read the tile afterwards.
    let _ = write!(
        s,
        "    size_t e = h;\n    for (; e + K_LANES <= n; e += K_LANES) {{\n{}    }}\n    const size_t end = e;\n    \
         for (int part = 0; part < 2; part++) {{\n        const size_t e = part ? end : 0, m = part ? n - end : h;\n        \
         if (m == 0) continue;\n{}    }}\n",
        indent(&format!("{body}{whole_stores}").replace(LEN, "K_LANES"), 2),
        indent(&format!("{body}{partial_stores}").replace(LEN, "m"), 2)
    );
    // Sixteen accumulators (lane j folds elements 16 m + j), combined in order, then the tail:
    // the order of `reduce::fold`, in vectors of the register width so the fold vectorises.
    for (f, ((fold, v), src)) in plans.iter().zip(&sources).enumerate() {
        let (acc, vec, lanes) = (fold.acc, fold.vector(), fold.lanes());
        let (element, widened) = fold.widening(k.insts[*v].dtype);
        let fold_block = |target: &str, block: &str| {
            format!(
                "for (int q = 0; q < 16 / {lanes}; q++) {{ {element} x; memcpy(&x, {src} + ({block}) * 16 + q * {lanes}, sizeof x); {vec} y = {widened}; {target}[q] = {}; }}",
                fold.combine(&format!("{target}[q]"), "y", Some(fold.registers()))
            )
        };
        // Max and min (exact, and whose combine of an earlier and a later part keeps the
        // sequential fold's bits, NaNs and signed zeros included) fold contiguous segments of
        // the blocks side by side, then combine them in order: independent dependency chains.
        let segments = if matches!(fold.op, ReduceOp::Max | ReduceOp::Min) { FOLD_SEGMENTS } else { 1 };
        let _ = writeln!(s, "    {vec} f{f}[{segments}][16 / {lanes}];");
        let _ = writeln!(
            s,
            "    for (int g = 0; g < {segments}; g++) for (int q = 0; q < 16 / {lanes}; q++) f{f}[g][q] = ({vec}){{0}} + ({acc}){};",
            fold.identity
        );
        let _ = writeln!(s, "    const size_t nb{f} = n / 16, per{f} = nb{f} / {segments};");
        let _ = writeln!(s, "    for (size_t m = 0; m < per{f}; m++) {{");
        for g in 0..segments {
            let _ = writeln!(s, "        {}", fold_block(&format!("f{f}[{g}]"), &format!("{g} * per{f} + m")));
        }
        let _ = writeln!(s, "    }}");
        let last = segments - 1;
        let _ = writeln!(s, "    for (size_t m = {segments} * per{f}; m < nb{f}; m++) {}", fold_block(&format!("f{f}[{last}]"), "m"));
        for g in 1..segments {
            let _ = writeln!(
                s,
                "    for (int q = 0; q < 16 / {lanes}; q++) f{f}[0][q] = {};",
                fold.combine(&format!("f{f}[0][q]"), &format!("f{f}[{g}][q]"), Some(fold.registers()))
            );
        }
        let _ = writeln!(s, "    size_t i{f} = nb{f} * 16;");
        let _ = writeln!(s, "    {acc} g{f} = {};", fold.identity);
        let _ = writeln!(
            s,
            "    for (int q = 0; q < 16 / {lanes}; q++) for (int j = 0; j < {lanes}; j++) g{f} = {};",
            fold.combine(&format!("g{f}"), &format!("f{f}[0][q][j]"), None)
        );
        let _ = writeln!(s, "    for (; i{f} < n; i{f}++) g{f} = {};", fold.combine(&format!("g{f}"), &(fold.load)(&format!("{src}[i{f}]")), None));
        // float32 max and min fold in float32 and widen the tile's result.
        let whole = Fold::of_row(fold.op, k.insts[*v].dtype);
        let part = if fold.widen { format!("(double)g{f}") } else { format!("g{f}") };
        let (acc, combined) = (whole.acc, whole.combine(&format!("a{f}"), &part, None));
        let _ = writeln!(
            s,
            "    {{ {acc} a{f}; memcpy(&a{f}, &acc[{f}], sizeof a{f}); a{f} = {combined}; memcpy(&acc[{f}], &a{f}, sizeof a{f}); }}"
        );
    }
    s.push_str("}\n");
    Some((s, layout))
}

/// A row value's C statement: `row[i]` of row instruction `i` computed from the row values of
/// its operands, each splatted to a vector so that [`statement`] prints the element loop's own
/// form of the op (the same bits as the interpreter's row step). None when C has no exact form.
fn row_statement(k: &Kernel, i: usize) -> Option<String> {
    let inst = &k.insts[i];
    let t = c_type(inst.dtype)?;
    let mut block = String::new();
    let mut seen = Vec::new();
    for a in operands(&inst.op) {
        if !seen.contains(&a) {
            seen.push(a);
            let d = k.insts[a].dtype;
            let _ = write!(block, "const {} v{a} = {}; ", vector_type(d), splat_bits(d, &format!("row[{a}]")));
        }
    }
    let _ = write!(block, "{} {{ {t} x = v{i}[0]; memcpy(&row[{i}], &x, sizeof x); }}", statement(k, i, &[])?);
    Some(format!("{{ {block} }}"))
}

/// The C statement finishing reduction `i` from its accumulator bits `acc`: the value as the
/// reduction's dtype, into `row[i]` (the interpreter's `finish`). None where that conversion has
/// no plain C cast (a float accumulator into integers or bool, an integer one into bool).
fn finish_statement(k: &Kernel, i: usize, acc: &str) -> Option<String> {
    let InstOp::Reduce(op, v) = k.insts[i].op else { return None };
    let (from, to) = (k.insts[v].dtype, k.insts[i].dtype);
    let whole = Fold::of_row(op, from);
    let plain = if from.is_float() { to.is_float() } else { to.is_integer() && from != Dtype::Bool };
    let t = c_type(to).filter(|_| plain)?;
    Some(format!(
        "{{ {a} a; memcpy(&a, &{acc}, sizeof a); {t} x = ({t})a; memcpy(&row[{i}], &x, sizeof x); }}",
        a = whole.acc
    ))
}

/// The C statement setting accumulator bits `acc` of reduction `i` to its identity.
fn identity_statement(k: &Kernel, i: usize, acc: &str) -> Option<String> {
    let InstOp::Reduce(op, v) = k.insts[i].op else { return None };
    let whole = Fold::of_row(op, k.insts[v].dtype);
    Some(format!("{{ {a} a = {}; memcpy(&{acc}, &a, sizeof a); }}", whole.identity, a = whole.acc))
}

/// The C function [`rows_symbol`] of row-cache variant `variant`, whose pass functions have
/// `layouts` (pass order): every pass of rows `r0..r1` of `n` elements, tile by tile, with the
/// row steps, accumulator resets and finishes, pointers, next-row prefetches and row outputs
/// that the interpreter's row loop does per row in Rust ([`super::super::fused`]'s
/// `Shared::row`, whose order it keeps). Short rows spent most of their time there (a row of 128
/// values is a few dozen vector operations per pass).
///
/// Arguments `(base, step, cache, outs, row, r0, r1, n, stream)`: per load instruction, its
/// base and its step per row in elements (element `e` of row `r` at `base + r * step + e`, a row
/// value at `base + r * step`); per cached instruction (variant 1), its row cache of `n` values
/// (for rows longer than a tile); per kernel output, its base; the task's row values (constants
/// set); stream bit `o` for element output `o`. None when a row step or a finish has no exact C form.
fn rows_function(k: &Kernel, variant: usize, layouts: &[&Layout], row_steps: &[Vec<usize>]) -> Option<String> {
    let size = |i: usize| k.insts[i].dtype.size();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "void {}(const char *const *restrict base, const int64_t *restrict step, char *const *restrict cache, \
         char *const *restrict outs, uint64_t *restrict row, size_t r0, size_t r1, size_t n, uint64_t stream) {{",
        rows_symbol(variant)
    );
    for (p, layout) in layouts.iter().enumerate() {
        let mut bits = String::new();
        for (j, w) in layout.writes.iter().enumerate() {
            if let Write::Store { output, .. } = *w {
                if j < STREAM_BITS && output < STREAM_BITS {
                    let _ = write!(bits, " | (((stream >> {output}) & 1) << {j})");
                }
            }
        }
        let _ = writeln!(s, "    const uint64_t st{p} = 0{bits};");
    }
    // Row caches: the task's (`n` values), or for rows of at most a tile an aligned one here.
    let mut cached: Vec<usize> = layouts
        .iter()
        .flat_map(|l| l.reads.iter().filter_map(|r| if let Read::Cache(i) = *r { Some(i) } else { None }))
        .collect();
    cached.sort_unstable();
    cached.dedup();
    for &i in &cached {
        let _ = writeln!(s, "    _Alignas(64) char t{i}[KILN_TILE * {}];", size(i));
        let _ = writeln!(s, "    char *const c{i} = n <= KILN_TILE ? t{i} : cache[{i}];");
    }
    // The next row's element inputs stream into L2 during the second pass (the interpreter's
    // choice, measured there): lines of the inputs that move with the row.
    let mut prefetch = String::new();
    for (i, inst) in k.insts.iter().enumerate() {
        if matches!(inst.op, InstOp::Load(_)) && inst.level == Level::Element {
            let _ = writeln!(
                prefetch,
                "if (n > KILN_TILE && step[{i}]) {{ const uintptr_t a = (uintptr_t)base[{i}] + (uintptr_t)(((int64_t)r + 1) * step[{i}] * {sz}) + off * {sz}; \
                 for (size_t b = 0; b < m * {sz}; b += 64) __builtin_prefetch((const void *)(a + b), 0, 2); }}",
                sz = size(i)
            );
        }
    }
    let prefetch_pass = layouts.len().min(2) - 1;
    let _ = writeln!(s, "    for (size_t r = r0; r < r1; r++) {{");
    let mut body = String::new();
    for p in 0..=layouts.len() {
        if p > 0 {
            for (j, &i) in layouts[p - 1].folds.iter().enumerate() {
                let _ = writeln!(body, "{}", finish_statement(k, i, &format!("acc{}[{j}]", p - 1))?);
            }
        }
        for &i in &row_steps[p] {
            match k.insts[i].op {
                InstOp::Load(_) => {
                    let _ = writeln!(body, "memcpy(&row[{i}], base[{i}] + (int64_t)r * step[{i}] * {}, {});", size(i), size(i));
                }
                InstOp::Const(_) => {}
                InstOp::Broadcast(_) | InstOp::Reduce(..) => return None,
                _ => {
                    let _ = writeln!(body, "{}", row_statement(k, i)?);
                }
            }
        }
        let Some(layout) = layouts.get(p) else { break };
        let _ = writeln!(body, "uint64_t acc{p}[{}];", layout.folds.len().max(1));
        for (j, &i) in layout.folds.iter().enumerate() {
            let _ = writeln!(body, "{}", identity_statement(k, i, &format!("acc{p}[{j}]"))?);
        }
        let reads: String = layout
            .reads
            .iter()
            .map(|r| match *r {
                Read::Load(i) => Some(format!("base[{i}] + ((int64_t)r * step[{i}] + (int64_t)off) * {}, ", size(i))),
                Read::Cache(i) => Some(format!("c{i} + off * {}, ", size(i))),
                Read::Column(_) => None,
            })
            .collect::<Option<_>>()?;
        let writes: String = layout
            .writes
            .iter()
            .map(|w| match *w {
                Write::Store { output, inst } => format!("outs[{output}] + (r * n + off) * {}, ", size(inst)),
                Write::Cache(i) => format!("c{i} + off * {}, ", size(i)),
            })
            .collect();
        let _ = writeln!(body, "for (size_t off = 0; off < n; off += KILN_TILE) {{");
        let _ = writeln!(body, "    const size_t m = n - off < KILN_TILE ? n - off : KILN_TILE;");
        if p == prefetch_pass {
            for line in prefetch.lines() {
                let _ = writeln!(body, "    {line}");
            }
        }
        let _ = writeln!(body, "    const void *in[] = {{ {reads}0 }};");
        let _ = writeln!(body, "    void *out[] = {{ {writes}0 }};");
        let _ = writeln!(body, "    {}(in, out, row, acc{p}, m, st{p});", symbol(variant, p));
        let _ = writeln!(body, "}}");
    }
    for (o, &i) in k.outputs.iter().enumerate() {
        if k.insts[i].level == Level::Row {
            let _ = writeln!(body, "memcpy(outs[{o}] + r * {}, &row[{i}], {});", size(i), size(i));
        }
    }
    for line in body.lines() {
        let _ = writeln!(s, "        {line}");
    }
    s.push_str("    }\n}\n");
    Some(s)
}

/// The symbol of the rows function of row-cache variant `variant` (see [`rows_function`]).
pub(in crate::backend::cpu) fn rows_symbol(variant: usize) -> String {
    format!("kiln_rows_{variant}")
}

/// The C source of a kernel: the pass functions, and a rows function per row-cache variant
/// where the kernel reduces and its row steps have exact C forms.
pub(in crate::backend::cpu) struct KernelSource {
    pub text: String,
    /// The layout of each pass function, in the order given.
    pub layouts: Vec<Layout>,
    /// The variants that have a rows function.
    pub rows: Vec<usize>,
}

/// The whole C source of a kernel's pass functions: `kiln_p{pass}_{variant}` for each
/// `(variant, pass, schedule, folds)` (column functions for a column kernel), and a row
/// kernel's rows functions (whose row steps before each pass are `row_steps`); else the first
/// instruction with no exact C form.
pub(in crate::backend::cpu) fn kernel_source(
    k: &Kernel,
    passes: &[(usize, usize, &Pass, &[usize])],
    row_steps: &[Vec<usize>],
    fma: bool,
) -> Result<KernelSource, String> {
    let mut source = format!(
        "#define KILN_FMA {}\n#define KILN_TILE {}\n{}\n{}\n/* {} */\n",
        u8::from(fma),
        crate::backend::cpu::fused::TILE,
        include_str!("prelude.c"),
        include_str!("../../integer_ops.h"),
        k.name.replace("*/", "* /")
    );
    let mut layouts = Vec::new();
    let lower = if k.inner > 0 { super::columns::column_function } else { pass_function };
    for &(variant, p, pass, folds) in passes {
        let (text, layout) = lower(k, pass, folds, &symbol(variant, p)).ok_or_else(|| without_c_form(k))?;
        source.push_str(&text);
        layouts.push(layout);
    }
    let mut rows = Vec::new();
    let mut variants: Vec<usize> = passes.iter().map(|&(v, ..)| v).filter(|_| k.reduced > 0 && k.inner == 0).collect();
    variants.dedup();
    for v in variants {
        let of_variant: Vec<&Layout> =
            passes.iter().zip(&layouts).filter(|((variant, ..), _)| *variant == v).map(|(_, l)| l).collect();
        if let Some(text) = rows_function(k, v, &of_variant, row_steps) {
            source.push_str(&text);
            rows.push(v);
        }
    }
    Ok(KernelSource { text: source, layouts, rows })
}

/// The first instruction of `k` that C can't compute exactly, as IR text (why it stays
/// interpreted).
fn without_c_form(k: &Kernel) -> String {
    let expressible = |i: usize| match k.insts[i].op {
        InstOp::Load(_) | InstOp::Const(_) | InstOp::Broadcast(_) | InstOp::Reduce(..) => c_type(k.insts[i].dtype).is_some(),
        _ => statement(k, i, &[]).is_some(),
    };
    let first = (0..k.insts.len()).find(|&i| !expressible(i));
    first.map_or_else(|| "an instruction".to_string(), |i| format!("`{}`", k.inst_text(i)))
}

/// The symbol of pass `p` of row-cache variant `variant`.
pub(in crate::backend::cpu) fn symbol(variant: usize, p: usize) -> String {
    format!("kiln_p{p}_{variant}")
}
