//! Prints the C of one kernel: a function per pass (and per row-cache variant) that computes
//! every element instruction of the pass for a tile in one loop, with the values in registers,
//! writes the pass's stores and row-cache values, and folds its reductions.
//!
//! The tile loop, loads, stores and row steps stay with the interpreter ([`super::super::fused`]);
//! a pass function replaces only the per-instruction loops over a tile. Its meaning is the
//! interpreter's, operation for operation: the same float32 functions (`prelude.c`), the same
//! conversions, and reductions folded with sixteen accumulators per tile in the same order, so
//! native and interpreted results are equal bit for bit (tested). Instructions C cannot express
//! that way (float16/bfloat16, float64 erf/erfinv, Rust's own inverse hyperbolics) make the kernel
//! stay interpreted.

use crate::backend::cpu::fused::Pass;
use crate::dtype::Dtype;
use crate::fused::{InstOp, Kernel, Level};
use crate::primitive::{BinaryOp, ReduceOp, UnaryOp};
use std::fmt::Write as _;

/// A pointer a pass function reads `n` values from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Read {
    /// The elements of a load instruction for the tile.
    Load(usize),
    /// A value an earlier pass left in the row cache.
    Cache(usize),
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
fn c_type(d: Dtype) -> Option<&'static str> {
    Some(match d {
        Dtype::Bool | Dtype::U8 => "uint8_t",
        Dtype::U16 => "uint16_t",
        Dtype::U32 => "uint32_t",
        Dtype::U64 => "uint64_t",
        Dtype::I8 => "int8_t",
        Dtype::I16 => "int16_t",
        Dtype::I32 => "int32_t",
        Dtype::I64 => "int64_t",
        Dtype::F32 => "float",
        Dtype::F64 => "double",
        Dtype::F16 | Dtype::BF16 => return None,
    })
}

/// The prelude's type of eight values of a dtype's compute type.
fn vector_type(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool | Dtype::U8 => "k_u8x8",
        Dtype::U16 => "k_u16x8",
        Dtype::U32 => "k_u32x8",
        Dtype::U64 => "k_u64x8",
        Dtype::I8 => "k_i8x8",
        Dtype::I16 => "k_i16x8",
        Dtype::I32 => "k_i32x8",
        Dtype::I64 => "k_i64x8",
        Dtype::F64 => "k_f64x8",
        _ => "k_f32x8",
    }
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

/// The smallest and largest value of an integer dtype, as C expressions.
fn int_range(d: Dtype) -> (&'static str, &'static str) {
    match d {
        Dtype::U8 => ("0", "UINT8_MAX"),
        Dtype::U16 => ("0", "UINT16_MAX"),
        Dtype::U32 => ("0", "UINT32_MAX"),
        Dtype::U64 => ("0", "UINT64_MAX"),
        Dtype::I8 => ("INT8_MIN", "INT8_MAX"),
        Dtype::I16 => ("INT16_MIN", "INT16_MAX"),
        Dtype::I32 => ("INT32_MIN", "INT32_MAX"),
        _ => ("INT64_MIN", "INT64_MAX"),
    }
}

/// A constant of `dtype` from its bits, exactly.
fn literal(bits: u64, d: Dtype, t: &str) -> String {
    match d {
        Dtype::F32 => format!("k_float(0x{:08x}u)", bits as u32),
        Dtype::F64 => format!("k_double(0x{bits:016x}ull)"),
        _ => {
            let mask = if d.size() == 8 { u64::MAX } else { (1u64 << (8 * d.size())) - 1 };
            format!("(({t})0x{:x}ull)", bits & mask)
        }
    }
}

/// The C expression of a unary op on `x` of dtype `d` (compute type `t`), if C computes it
/// exactly as the interpreter does.
fn unary(u: UnaryOp, d: Dtype, t: &str, x: &str) -> Option<String> {
    use UnaryOp::*;
    let f32 = d == Dtype::F32;
    let libm = |name: &str| Some(format!("{name}{}({x})", if f32 { "f" } else { "" }));
    let own = |name: &str| Some(format!("k_{name}_{}({x})", if f32 { "f32" } else { "f64" }));
    if d.is_float() {
        return match u {
            Abs => libm("fabs"),
            Negative => Some(format!("(-{x})")),
            Sign => Some(format!("({x} > 0 ? ({t})1 : {x} < 0 ? ({t})-1 : {x})")),
            Exp | Expm1 | Log | Log1p | Tanh | Erf | ErfInv if f32 => own(u.name()),
            Sigmoid => own("sigmoid"),
            Exp => libm("exp"),
            Expm1 => libm("expm1"),
            Log => libm("log"),
            Log1p => libm("log1p"),
            Tanh => libm("tanh"),
            Log2 => libm("log2"),
            Log10 => libm("log10"),
            Sqrt => libm("sqrt"),
            Rsqrt => Some(format!("(({t})1 / {})", libm("sqrt")?)),
            Square => Some(format!("({x} * {x})")),
            Reciprocal => Some(format!("(({t})1 / {x})")),
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
            LogicalNot => Some(format!("(uint8_t)({x} == 0)")),
            IsNan => Some(format!("(uint8_t)({x} != {x})")),
            IsInf => Some(format!("(uint8_t)({} == INFINITY)", libm("fabs")?)),
            IsPosInf => Some(format!("(uint8_t)({x} == INFINITY)")),
            IsNegInf => Some(format!("(uint8_t)({x} == -INFINITY)")),
            IsFinite => Some(format!("(uint8_t)({} < INFINITY)", libm("fabs")?)),
            // float64 erf/erfinv are scalar series in Rust, and std's inverse hyperbolics are
            // its own formulas, not libm's.
            Erf | ErfInv | ArcSinh | ArcCosh | ArcTanh | BitwiseInvert => None,
        };
    }
    let signed = d.category() == crate::dtype::Category::Signed;
    Some(match u {
        LogicalNot => format!("(uint8_t)({x} == 0)"),
        IsFinite => "(uint8_t)1".into(),
        IsNan | IsInf | IsPosInf | IsNegInf => "(uint8_t)0".into(),
        Abs | Floor | Ceil | Round if d == Dtype::Bool => x.into(),
        Square if d == Dtype::Bool => x.into(),
        BitwiseInvert if d == Dtype::Bool => format!("(uint8_t)!{x}"),
        _ if d == Dtype::Bool => return None,
        Abs if signed => format!("({x} < 0 ? ({t})(0 - {x}) : {x})"),
        Abs | Floor | Ceil | Round => x.into(),
        Negative => format!("({t})(0 - {x})"),
        Sign => format!("({x} > 0 ? ({t})1 : {x} == 0 ? ({t})0 : ({t})-1)"),
        Square => format!("({t})({x} * {x})"),
        BitwiseInvert => format!("({t})~{x}"),
        _ => return None,
    })
}

/// The C expression of a binary op on `x`, `y` of dtype `d` (compute type `t`).
fn binary(b: BinaryOp, d: Dtype, t: &str, x: &str, y: &str) -> Option<String> {
    use BinaryOp::*;
    let compare = |op: &str| Some(format!("(uint8_t)({x} {op} {y})"));
    match b {
        Equal => return compare("=="),
        NotEqual => return compare("!="),
        Less => return compare("<"),
        LessEqual => return compare("<="),
        Greater => return compare(">"),
        GreaterEqual => return compare(">="),
        LogicalAnd => return Some(format!("(uint8_t)({x} != 0 && {y} != 0)")),
        LogicalOr => return Some(format!("(uint8_t)({x} != 0 || {y} != 0)")),
        _ => {}
    }
    if d == Dtype::Bool {
        return match b {
            Add | Maximum | BitwiseOr => Some(format!("({x} | {y})")),
            Multiply | Minimum | BitwiseAnd => Some(format!("({x} & {y})")),
            BitwiseXor => Some(format!("({x} ^ {y})")),
            _ => None,
        };
    }
    if d.is_float() {
        let suffix = if d == Dtype::F32 { ("f", "f32") } else { ("", "f64") };
        return Some(match b {
            Add => format!("({x} + {y})"),
            Subtract => format!("({x} - {y})"),
            Multiply => format!("({x} * {y})"),
            Divide => format!("({x} / {y})"),
            FloorDivide => format!("floor{}({x} / {y})", suffix.0),
            Remainder => format!("k_rem_{}({x}, {y})", suffix.1),
            Power => format!("pow{}({x}, {y})", suffix.0),
            Maximum => format!("(({x} > {y} || {x} != {x}) ? {x} : {y})"),
            Minimum => format!("(({x} < {y} || {x} != {x}) ? {x} : {y})"),
            ArcTan2 => format!("atan2{}({x}, {y})", suffix.0),
            LogAddExp => format!("k_logaddexp_{}({x}, {y})", suffix.1),
            _ => return None,
        });
    }
    let signed = u8::from(d.category() == crate::dtype::Category::Signed);
    let bits = 8 * d.size();
    let unsigned = format!("uint{bits}_t");
    Some(match b {
        Add => format!("({t})({x} + {y})"),
        Subtract => format!("({t})({x} - {y})"),
        Multiply => format!("({t})({x} * {y})"),
        FloorDivide => format!("K_INT_DIV({t}, {signed}, {x}, {y})"),
        Remainder => format!("K_INT_REM({t}, {signed}, {x}, {y})"),
        Power => format!("k_pow_{}{bits}({x}, {y})", if signed == 1 { "i" } else { "u" }),
        Maximum => format!("({x} > {y} ? {x} : {y})"),
        Minimum => format!("({x} < {y} ? {x} : {y})"),
        BitwiseAnd => format!("({t})({x} & {y})"),
        BitwiseOr => format!("({t})({x} | {y})"),
        BitwiseXor => format!("({t})({x} ^ {y})"),
        LeftShift => format!("(({y} < 0 || {y} >= {bits}) ? ({t})0 : ({t})(({unsigned}){x} << {y}))"),
        RightShift => format!("(({y} < 0 || {y} >= {bits}) ? ({x} < 0 ? ({t})-1 : ({t})0) : ({t})({x} >> {y}))"),
        _ => return None,
    })
}

/// The C expression converting `x` of dtype `from` to `to` with astype semantics.
fn cast(from: Dtype, to: Dtype, t: &str, x: &str) -> String {
    if from == to {
        x.into()
    } else if to == Dtype::Bool {
        format!("(uint8_t)({x} != 0)")
    } else if from.is_float() && to.is_integer() {
        let (lo, hi) = int_range(to);
        format!("K_SATURATE({t}, {lo}, {hi}, {x})")
    } else {
        format!("({t}){x}")
    }
}

/// How a reduction folds in C: accumulator type, how an element enters it, identity, combine.
struct Fold {
    acc: &'static str,
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

    /// The vector type of eight of the sixteen accumulators.
    fn vector(&self) -> &'static str {
        match self.acc {
            "float" => "k_f32x8",
            "double" => "k_f64x8",
            "uint64_t" => "k_u64x8",
            _ => "k_i64x8",
        }
    }

    /// `a` combined with `b`, as the reduction domains of `reduce.rs` combine: on scalars of
    /// type `acc`, or lane by lane on vectors of [`Fold::vector`] type when `lanes` (there a
    /// select is a blend through the comparison mask).
    fn combine(&self, a: &str, b: &str, lanes: bool) -> String {
        let (vec, mask) = (self.vector(), if self.acc == "float" { "k_i32x8" } else { "k_i64x8" });
        let select = |cond: String| {
            if lanes {
                format!("K_SEL({mask}, {vec}, {cond}, {a}, {b})")
            } else {
                format!("({cond}) ? {a} : {b}")
            }
        };
        // A comparison's truth as 1 or 0 of the accumulator type (vector masks are -1 or 0).
        let truth = |cond: String| {
            if lanes {
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

/// The C statement computing element instruction `i` into `v{i}`, or None when C can't.
fn statement(k: &Kernel, i: usize, reads: &[Read]) -> Option<String> {
    let inst = &k.insts[i];
    let t = c_type(inst.dtype)?;
    let v = |j: usize| format!("v{j}");
    let operand_type = |j: usize| c_type(k.insts[j].dtype);
    let read = reads.iter().position(|r| *r == Read::Cache(i) || *r == Read::Load(i));
    let rhs = match inst.op {
        _ if read.is_some() => format!("r{}[e]", read.expect("checked")),
        InstOp::Load(_) => unreachable!("loads are reads"),
        InstOp::Const(bits) => literal(bits, inst.dtype, t),
        InstOp::Broadcast(_) => format!("b{i}"),
        InstOp::Unary(u, a) => unary(u, k.insts[a].dtype, operand_type(a)?, &v(a))?,
        InstOp::Binary(b, x, y) => binary(b, k.insts[x].dtype, operand_type(x)?, &v(x), &v(y))?,
        InstOp::Select(c, a, b) => format!("({} ? {} : {})", v(c), v(a), v(b)),
        InstOp::Cast(a) => {
            operand_type(a)?;
            cast(k.insts[a].dtype, inst.dtype, t, &v(a))
        }
        InstOp::Reduce(..) => unreachable!("reductions are row values"),
    };
    Some(format!("const {t} v{i} = {rhs};"))
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
         uint64_t *restrict acc, size_t n) {{"
    );
    for (j, r) in layout.reads.iter().enumerate() {
        let (Read::Load(i) | Read::Cache(i)) = *r;
        let _ = writeln!(s, "    const {} *restrict r{j} = in[{j}];", c_type(k.insts[i].dtype)?);
    }
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let _ = writeln!(s, "    {} *restrict w{j} = out[{j}];", c_type(k.insts[i].dtype)?);
    }
    let mut body = String::new();
    for &i in &pass.insts {
        if let InstOp::Broadcast(a) = k.insts[i].op {
            let t = c_type(k.insts[i].dtype)?;
            let _ = writeln!(s, "    {t} b{i}; memcpy(&b{i}, &row[{a}], sizeof b{i});");
        }
        debug_assert_eq!(k.insts[i].level, Level::Element);
        let _ = writeln!(body, "{}", statement(k, i, &layout.reads)?);
    }
    for (j, w) in layout.writes.iter().enumerate() {
        let (Write::Store { inst: i, .. } | Write::Cache(i)) = *w;
        let _ = writeln!(body, "w{j}[e] = v{i};");
    }
    let indent = |text: &str, depth: usize| -> String {
        text.lines().map(|l| format!("{}{l}\n", "    ".repeat(depth))).collect()
    };
    let plans: Vec<(Fold, usize)> = folds
        .iter()
        .map(|&r| match k.insts[r].op {
            InstOp::Reduce(op, v) => c_type(k.insts[v].dtype).map(|_| (Fold::new(op, k.insts[v].dtype), v)),
            _ => None,
        })
        .collect::<Option<_>>()?;
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
                let _ = writeln!(body, "fv{f}[e] = v{v};");
                sources.push(format!("fv{f}"));
            }
        }
    }
    let _ = write!(s, "    for (size_t e = 0; e < n; e++) {{\n{}    }}\n", indent(&body, 2));
    // Sixteen accumulators (lane j folds elements 16 m + j), combined in order, then the tail:
    // the order of `reduce::fold`, written with vector types so the fold vectorises.
    for (f, ((fold, v), src)) in plans.iter().zip(&sources).enumerate() {
        let (acc, vec) = (fold.acc, fold.vector());
        let element = vector_type(k.insts[*v].dtype);
        let widened = match widen_function(k.insts[*v].dtype) {
            _ if element == vec => "x".to_string(),
            Some(widen) => format!("({vec}){widen}(x)"),
            None => format!("__builtin_convertvector(x, {vec})"),
        };
        // Two vectors of eight lanes each: wider generic vectors are kept in memory by gcc.
        for half in ["l", "h"] {
            let _ = writeln!(s, "    {vec} f{f}{half} = ({vec}){{0}} + ({acc}){};", fold.identity);
        }
        let _ = writeln!(s, "    size_t i{f} = 0;");
        let _ = writeln!(s, "    for (; i{f} + 16 <= n; i{f} += 16) {{");
        for (half, at) in [("l", 0), ("h", 8)] {
            let _ = writeln!(
                s,
                "        {{ {element} x; memcpy(&x, {src} + i{f} + {at}, sizeof x); {vec} y = {widened}; f{f}{half} = {}; }}",
                fold.combine(&format!("f{f}{half}"), "y", true)
            );
        }
        let _ = writeln!(s, "    }}\n    {acc} g{f} = {};", fold.identity);
        for half in ["l", "h"] {
            let _ = writeln!(s, "    for (int j = 0; j < 8; j++) g{f} = {};", fold.combine(&format!("g{f}"), &format!("f{f}{half}[j]"), false));
        }
        let _ = writeln!(s, "    for (; i{f} < n; i{f}++) g{f} = {};", fold.combine(&format!("g{f}"), &(fold.load)(&format!("{src}[i{f}]")), false));
        // float32 max and min fold in float32 and widen the tile's result.
        let whole = Fold::new(fold.op, if fold.widen { Dtype::F64 } else { k.insts[*v].dtype });
        let part = if fold.widen { format!("(double)g{f}") } else { format!("g{f}") };
        let (acc, combined) = (whole.acc, whole.combine(&format!("a{f}"), &part, false));
        let _ = writeln!(
            s,
            "    {{ {acc} a{f}; memcpy(&a{f}, &acc[{f}], sizeof a{f}); a{f} = {combined}; memcpy(&acc[{f}], &a{f}, sizeof a{f}); }}"
        );
    }
    s.push_str("}\n");
    Some((s, layout))
}

/// The whole C source of a kernel's pass functions: `kiln_p{pass}_{variant}` for each
/// `(variant, pass, schedule, folds)`; else the first instruction with no exact C form.
pub(in crate::backend::cpu) fn kernel_source(
    k: &Kernel,
    passes: &[(usize, usize, &Pass, &[usize])],
    fma: bool,
) -> Result<(String, Vec<Layout>), String> {
    let mut source = format!(
        "#define KILN_FMA {}\n#define KILN_TILE {}\n{}\n/* {} */\n",
        u8::from(fma),
        crate::backend::cpu::fused::TILE,
        include_str!("prelude.c"),
        k.name.replace("*/", "* /")
    );
    let mut layouts = Vec::new();
    for &(variant, p, pass, folds) in passes {
        let (text, layout) = pass_function(k, pass, folds, &symbol(variant, p)).ok_or_else(|| without_c_form(k))?;
        source.push_str(&text);
        layouts.push(layout);
    }
    Ok((source, layouts))
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
