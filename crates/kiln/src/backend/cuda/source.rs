//! Prints a kernel of the fused IR ([`crate::fused`]) as CUDA C: the one CUDA lowering of the IR.
//! An eager elementwise op is a one-instruction kernel printed here, and compile's fused groups
//! go through the same printer, so an op's GPU meaning is written once.
//!
//! Each thread computes whole elements of the iteration space (a grid-stride loop), with every
//! instruction's value in a register. Values compute as the CPU computes them (the meaning of
//! each op per dtype is the CPU's `scalar.rs`): float16/bfloat16 in float32, rounded to their
//! dtype after every instruction; integers wrap; conversions follow Rust's `as`.
//!
//! Inputs are read through one of four access patterns chosen per call ([`Access`]), after
//! adjacent axes that every input walks contiguously are merged: contiguous (the element's own
//! index), one value everywhere (in device memory, or in the parameter block for a host scalar),
//! or strided (the index unravelled over the merged axes, shared by all strided inputs). Indices
//! are 32-bit when every offset fits, else 64-bit. Kernels whose inputs are all contiguous or
//! one value read and write 16 bytes per access.

use crate::dtype::{Category, Dtype};
use crate::error::{Error, Result};
use crate::fused::{InstOp, Kernel, Level};
use crate::primitive::{BinaryOp, UnaryOp};
use std::fmt::Write as _;

/// The helpers every kernel starts with: the CUDA prelude, then the integer semantics shared
/// with the CPU's C prelude.
pub const PRELUDE: &str = concat!(include_str!("prelude.cu"), include_str!("../integer_ops.h"));

/// The kernel's entry point.
pub const ENTRY: &str = "kiln_elementwise";

/// Threads per block of elementwise kernels.
pub const BLOCK: u32 = 256;

/// How a kernel reads one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Element `i` of the space is element `i` of the input.
    Contiguous,
    /// One value for every element.
    Scalar,
    /// Element `i` is at the dot product of its coordinates and the input's strides.
    Strided,
    /// One value for every element, passed in the parameter block itself (a scalar that lives on
    /// the host: no copy to the GPU, no read of device memory).
    Immediate,
}

/// The call-dependent shape of a kernel's source: merged rank, each input's access, index width.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Axes after merging (the parameter block holds this many sizes and strides per input).
    pub rank: usize,
    /// Per input.
    pub access: Vec<Access>,
    /// 64-bit indices.
    pub wide: bool,
    /// Elements each thread reads and writes per access (1: one at a time).
    pub vector: usize,
}

/// The CUDA type of a dtype's compute values.
pub(super) fn compute_type(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool => "bool",
        Dtype::U8 => "u8",
        Dtype::U16 => "u16",
        Dtype::U32 => "u32",
        Dtype::U64 => "u64",
        Dtype::I8 => "i8",
        Dtype::I16 => "i16",
        Dtype::I32 => "i32",
        Dtype::I64 => "i64",
        Dtype::F16 | Dtype::BF16 | Dtype::F32 => "float",
        Dtype::F64 => "double",
        // Never printed: complex64 is refused before any GPU kernel (`backend::run`).
        Dtype::C64 => "float2",
    }
}

/// The CUDA type of a dtype's stored values.
pub(super) fn storage_type(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool => "u8",
        Dtype::F16 => "f16",
        Dtype::BF16 => "bf16",
        _ => compute_type(d),
    }
}

/// The expression of stored value `v` as a compute value.
pub(super) fn load_expr(d: Dtype, v: &str) -> String {
    match d {
        Dtype::Bool => format!("({v} != 0)"),
        Dtype::F16 => format!("k_f16_load({v})"),
        Dtype::BF16 => format!("k_bf16_load({v})"),
        _ => v.to_string(),
    }
}

/// The expression of compute value `v` as a stored value.
pub(super) fn store_expr(d: Dtype, v: &str) -> String {
    match d {
        Dtype::Bool => format!("(u8)({v})"),
        Dtype::F16 => format!("k_f16_store({v})"),
        Dtype::BF16 => format!("k_bf16_store({v})"),
        _ => v.to_string(),
    }
}

/// A constant's bits (one element of `d`) as an exact CUDA literal of its compute type.
fn const_expr(bits: u64, d: Dtype) -> String {
    let f32_bits = |f: f32| format!("__uint_as_float(0x{:08x}u)", f.to_bits());
    match d {
        Dtype::Bool => (if bits & 0xff != 0 { "true" } else { "false" }).into(),
        Dtype::F16 => f32_bits(half::f16::from_bits(bits as u16).to_f32()),
        Dtype::BF16 => f32_bits(half::bf16::from_bits(bits as u16).to_f32()),
        Dtype::F32 => format!("__uint_as_float(0x{:08x}u)", bits as u32),
        Dtype::F64 => format!("__longlong_as_double(0x{bits:016x}ll)"),
        _ => {
            let mask = if d.size() == 8 { u64::MAX } else { (1u64 << (8 * d.size())) - 1 };
            format!("(({})0x{:x}ull)", compute_type(d), bits & mask)
        }
    }
}

/// The error for an op the CPU does not define on a dtype either.
fn undefined(op: &str, d: Dtype) -> Error {
    Error::dtype(op, format!("not defined for arrays of dtype {d}"))
}

/// A unary op's expression on `x` of dtype `d` (the result's dtype is `d` or bool).
fn unary(u: UnaryOp, d: Dtype, x: &str) -> Result<String> {
    use UnaryOp::*;
    let t = compute_type(d);
    let f32_math = d != Dtype::F64;
    let pick = |single: &str, double: &str| format!("{}({x})", if f32_math { single } else { double });
    Ok(match d.category() {
        Category::Complex => return Err(undefined(u.name(), d)),
        Category::Float => match u {
            Abs => format!("fabs({x})"),
            Negative => format!("(-{x})"),
            Sign => format!("k_sign({x})"),
            Exp => pick("k_exp_f32", "exp"),
            Expm1 => pick("k_expm1_f32", "expm1"),
            Log => pick("k_log_f32", "log"),
            Log1p => pick("k_log1p_f32", "log1p"),
            Tanh => pick("k_tanh_f32", "tanh"),
            Erf => pick("k_erf_f32", "k_erf_f64"),
            ErfInv => pick("k_erfinv_f32", "k_erfinv_f64"),
            Sigmoid => pick("k_sigmoid_f32", "k_sigmoid_f64"),
            Log2 => format!("log2({x})"),
            Log10 => format!("log10({x})"),
            Sqrt => format!("sqrt({x})"),
            Rsqrt => format!("(({t})1 / sqrt({x}))"),
            Square => format!("({x} * {x})"),
            Reciprocal => format!("(({t})1 / {x})"),
            Sin => format!("sin({x})"),
            Cos => format!("cos({x})"),
            Tan => format!("tan({x})"),
            ArcSin => format!("asin({x})"),
            ArcCos => format!("acos({x})"),
            ArcTan => format!("atan({x})"),
            Sinh => format!("sinh({x})"),
            Cosh => format!("cosh({x})"),
            ArcSinh => format!("asinh({x})"),
            ArcCosh => format!("acosh({x})"),
            ArcTanh => format!("atanh({x})"),
            Floor => format!("floor({x})"),
            Ceil => format!("ceil({x})"),
            Round => format!("rint({x})"),
            LogicalNot => format!("({x} == 0)"),
            IsNan => format!("({x} != {x})"),
            IsInf => format!("isinf({x})"),
            IsPosInf => format!("({x} == ({t})K_INF)"),
            IsNegInf => format!("({x} == -({t})K_INF)"),
            IsFinite => format!("isfinite({x})"),
            BitwiseInvert | Conjugate | Real | Imag => return Err(undefined(u.name(), d)),
        },
        Category::Signed | Category::Unsigned => {
            let signed = d.category() == Category::Signed;
            match u {
                Abs if signed => format!("({x} < 0 ? ({t})(0ull - (u64){x}) : {x})"),
                Abs | Floor | Ceil | Round => x.to_string(),
                Negative => format!("(({t})(0ull - (u64){x}))"),
                Sign => format!("({x} > 0 ? ({t})1 : {x} == 0 ? ({t})0 : ({t})-1)"),
                Square => format!("(({t})((u64){x} * (u64){x}))"),
                BitwiseInvert => format!("(({t})~{x})"),
                LogicalNot => format!("({x} == 0)"),
                IsFinite => "true".into(),
                IsNan | IsInf | IsPosInf | IsNegInf => "false".into(),
                _ => return Err(undefined(u.name(), d)),
            }
        }
        Category::Bool => match u {
            Abs | Floor | Ceil | Round | Square => x.to_string(),
            BitwiseInvert | LogicalNot => format!("(!{x})"),
            IsFinite => "true".into(),
            IsNan | IsInf | IsPosInf | IsNegInf => "false".into(),
            _ => return Err(undefined(u.name(), d)),
        },
    })
}

/// A binary op's expression on `x` and `y` of dtype `d` (the result's dtype is `d` or bool).
fn binary(b: BinaryOp, d: Dtype, x: &str, y: &str) -> Result<String> {
    use BinaryOp::*;
    let t = compute_type(d);
    let compare = |op: &str| format!("({x} {op} {y})");
    match b {
        Equal => return Ok(compare("==")),
        NotEqual if d != Dtype::Bool => return Ok(compare("!=")),
        Less => return Ok(compare("<")),
        LessEqual => return Ok(compare("<=")),
        Greater => return Ok(compare(">")),
        GreaterEqual => return Ok(compare(">=")),
        LogicalAnd => return Ok(format!("({x} != 0 && {y} != 0)")),
        LogicalOr => return Ok(format!("({x} != 0 || {y} != 0)")),
        _ => {}
    }
    Ok(match d.category() {
        Category::Complex => return Err(undefined(b.name(), d)),
        Category::Float => match b {
            Add => format!("({x} + {y})"),
            Subtract => format!("({x} - {y})"),
            Multiply => format!("({x} * {y})"),
            Divide => format!("({x} / {y})"),
            FloorDivide => format!("floor({x} / {y})"),
            Remainder => format!("k_rem({x}, {y})"),
            Power => format!("pow({x}, {y})"),
            Maximum => format!("k_max({x}, {y})"),
            Minimum => format!("k_min({x}, {y})"),
            ArcTan2 => format!("atan2({x}, {y})"),
            LogAddExp => format!("k_logaddexp({x}, {y})"),
            _ => return Err(undefined(b.name(), d)),
        },
        Category::Signed | Category::Unsigned => {
            let signed = d.category() == Category::Signed;
            let wrap = |op: &str| format!("(({t})((u64){x} {op} (u64){y}))");
            match b {
                Add => wrap("+"),
                Subtract => wrap("-"),
                Multiply => wrap("*"),
                FloorDivide => format!("K_INT_DIV({t}, {signed}, {x}, {y})"),
                Remainder => format!("K_INT_REM({t}, {signed}, {x}, {y})"),
                Power => format!("k_pow_int<{t}>({x}, {y})"),
                Maximum => format!("({x} > {y} ? {x} : {y})"),
                Minimum => format!("({x} < {y} ? {x} : {y})"),
                BitwiseAnd => format!("(({t})({x} & {y}))"),
                BitwiseOr => format!("(({t})({x} | {y}))"),
                BitwiseXor => format!("(({t})({x} ^ {y}))"),
                LeftShift => format!("K_SHL({t}, {x}, {y})"),
                RightShift => format!("K_SHR({t}, {x}, {y})"),
                _ => return Err(undefined(b.name(), d)),
            }
        }
        Category::Bool => match b {
            Add | Maximum | BitwiseOr => format!("({x} | {y})"),
            Multiply | Minimum | BitwiseAnd => format!("({x} & {y})"),
            BitwiseXor | NotEqual => format!("({x} ^ {y})"),
            _ => return Err(undefined(b.name(), d)),
        },
    })
}

/// Conversion of `x` from `from` to `to` with `astype` semantics.
pub(super) fn cast(from: Dtype, to: Dtype, x: &str) -> String {
    let t = compute_type(to);
    if from == Dtype::F64 && matches!(to, Dtype::F16 | Dtype::BF16) {
        // Rounded once, as the CPU's astype does: to float32 by rounding to odd, then to the half
        // dtype (by the caller's rounding).
        format!("k_f32_round_odd({x})")
    } else if from == to || compute_type(from) == t && to.is_float() {
        x.to_string()
    } else if to == Dtype::Bool {
        format!("({x} != 0)")
    } else if from.is_float() && to.is_integer() {
        let (lo, hi) = crate::backend::c_int_range(to);
        format!("K_SATURATE({t}, {lo}, {hi}, {x})")
    } else {
        format!("(({t}){x})")
    }
}

/// Binary op `b` of stored values `x` and `y` of `d` as a stored value of `d`, computed as an
/// elementwise kernel computes it (what a combining scatter applies).
pub(super) fn combine_stored(b: BinaryOp, d: Dtype, x: &str, y: &str) -> Result<String> {
    Ok(store_expr(d, &rounded(d, binary(b, d, &load_expr(d, x), &load_expr(d, y))?)))
}

/// The stored value of `to` that float64 expression `x` converts to with `astype` semantics (what
/// the CPU's `from_f64` gives, e.g. for arange).
pub(super) fn from_f64(to: Dtype, x: &str) -> String {
    store_expr(to, &rounded(to, cast(Dtype::F64, to, x)))
}

/// Rounds a float32 compute value to its half dtype (every instruction of a half dtype does).
pub(super) fn rounded(d: Dtype, expr: String) -> String {
    match d {
        Dtype::F16 => format!("k_f16_round({expr})"),
        Dtype::BF16 => format!("k_bf16_round({expr})"),
        _ => expr,
    }
}

/// The CUDA expression of element-level instruction `i` of `k` from the values `v<j>` of its
/// operands; `read(j)` is the stored value of input `j`.
pub(super) fn inst_expr(k: &Kernel, i: usize, read: &dyn Fn(usize) -> String) -> Result<String> {
    let inst = &k.insts[i];
    let d = inst.dtype;
    let v = |j: usize| format!("v{j}");
    let dt = |j: usize| k.insts[j].dtype;
    Ok(match inst.op {
        InstOp::Load(j) => load_expr(d, &read(j)),
        InstOp::Const(bits) => const_expr(bits, d),
        InstOp::Unary(u, a) => rounded(d, unary(u, dt(a), &v(a))?),
        InstOp::Binary(b, a, c) => rounded(d, binary(b, dt(a), &v(a), &v(c))?),
        InstOp::Select(c, a, b) => format!("({} ? {} : {})", v(c), v(a), v(b)),
        InstOp::Cast(a) => rounded(d, cast(dt(a), d, &v(a))),
        InstOp::Broadcast(a) => v(a),
        InstOp::Reduce(..) => unreachable!("reductions are folded by the row printer"),
    })
}

/// The instructions of `k` for one element, as lines of CUDA C: `read(j)` is the stored value of
/// input `j`, `write(o, value)` the statement that stores output `o`.
fn element_body(k: &Kernel, indent: &str, read: &dyn Fn(usize) -> String, write: &dyn Fn(usize, String) -> String) -> Result<String> {
    let mut s = String::new();
    for i in 0..k.insts.len() {
        let _ = writeln!(s, "{indent}const {} v{i} = {};", compute_type(k.insts[i].dtype), inst_expr(k, i, read)?);
    }
    for (o, &inst) in k.outputs.iter().enumerate() {
        let d = k.insts[inst].dtype;
        let _ = writeln!(s, "{indent}{}", write(o, store_expr(d, &format!("v{inst}"))));
    }
    Ok(s)
}

/// The CUDA C of elementwise kernel `k` for `variant`. The parameter block is one struct of
/// 8-byte words: input pointers (or, for [`Access::Immediate`] inputs, the value's bits), output
/// pointers, the element count, the merged sizes, each input's strides, then the completion
/// word and sequence number of a signalling launch, or 0 ([`super::elementwise`] fills it in
/// this order).
///
/// With `variant.vector > 1` (every input contiguous or one value, every pointer aligned), each
/// thread reads and writes `vector` consecutive elements per access (16 bytes for the widest
/// dtype), then a scalar loop finishes the last `n % vector` elements.
pub fn elementwise(k: &Kernel, variant: &Variant) -> Result<String> {
    if k.reduced != 0 || k.insts.iter().any(|i| i.level != Level::Element) {
        return Err(Error::unsupported(&k.name, "the CUDA printer has no reductions yet"));
    }
    let (ni, no, r) = (k.inputs.len(), k.outputs.len(), variant.rank.max(1));
    let idx = if variant.wide { "i64" } else { "i32" };
    let in_type = |j: usize| storage_type(k.inputs[j]);
    let out_type = |o: usize| storage_type(k.insts[k.outputs[o]].dtype);
    let immediate = |j: usize| format!("(*(const {}*)&p.in[{j}])", in_type(j));
    let mut s = String::with_capacity(4096);
    s.push_str(PRELUDE);
    let _ = writeln!(s, "\n/* {} */", k.name);
    let _ = writeln!(
        s,
        "struct KParams {{ const void* in[{}]; void* out[{no}]; i64 n; i64 dim[{r}]; i64 st[{}][{r}]; unsigned* done; i64 seq; }};",
        ni.max(1),
        ni.max(1)
    );
    let vec = variant.vector;
    if vec > 1 {
        for j in 0..ni {
            let _ = writeln!(s, "struct __align__({}) KIn{j} {{ {} e[{vec}]; }};", k.inputs[j].size() * vec, in_type(j));
        }
        for o in 0..no {
            let _ = writeln!(s, "struct __align__({}) KOut{o} {{ {} e[{vec}]; }};", k.insts[k.outputs[o]].dtype.size() * vec, out_type(o));
        }
    }
    let _ = writeln!(s, "__device__ __forceinline__ void kiln_elements(const KParams& p) {{");
    let _ = writeln!(s, "  const {idx} n = ({idx})p.n;");
    if vec > 1 {
        // One vector per thread over as many blocks as it takes (measured faster on an H100 than
        // grid-stride loops: `kiln-bench --device gpu loop_shapes`); the threads past the last
        // vector take the tail's elements one each.
        let _ = writeln!(s, "  const {idx} t = ({idx})blockIdx.x * {BLOCK} + threadIdx.x;");
        let _ = writeln!(s, "  if (t < n / {vec}) {{");
        for (j, a) in variant.access.iter().enumerate() {
            if *a == Access::Contiguous {
                let _ = writeln!(s, "    const KIn{j} a{j} = ((const KIn{j}*)p.in[{j}])[t];");
            }
        }
        for o in 0..no {
            let _ = writeln!(s, "    KOut{o} r{o};");
        }
        let _ = writeln!(s, "    #pragma unroll\n    for (int e = 0; e < {vec}; e++) {{");
        let read = |j: usize| match variant.access[j] {
            Access::Contiguous => format!("a{j}.e[e]"),
            Access::Immediate => immediate(j),
            _ => format!("((const {}*)p.in[{j}])[0]", in_type(j)),
        };
        s.push_str(&element_body(k, "      ", &read, &|o, value| format!("r{o}.e[e] = {value};"))?);
        s.push_str("    }\n");
        for o in 0..no {
            let _ = writeln!(s, "    ((KOut{o}*)p.out[{o}])[t] = r{o};");
        }
        s.push_str("    return;\n  }\n");
        let _ = writeln!(s, "  const {idx} i = n / {vec} * {vec} + t - n / {vec};\n  if (i < n) {{");
    } else {
        let _ = writeln!(s, "  for ({idx} i = ({idx})blockIdx.x * {BLOCK} + threadIdx.x; i < n; i += ({idx})gridDim.x * {BLOCK}) {{");
    }
    if variant.access.contains(&Access::Strided) {
        let _ = writeln!(s, "    {idx} c[{r}]; {{ {idx} rest = i;");
        let _ = writeln!(s, "      for (int d = {r} - 1; d > 0; d--) {{ c[d] = rest % ({idx})p.dim[d]; rest /= ({idx})p.dim[d]; }}");
        let _ = writeln!(s, "      c[0] = rest; }}");
    }
    let offset = |j: usize| match variant.access[j] {
        Access::Contiguous => "i".to_string(),
        Access::Scalar | Access::Immediate => "0".to_string(),
        Access::Strided => (0..r).map(|d| format!("c[{d}] * ({idx})p.st[{j}][{d}]")).collect::<Vec<_>>().join(" + "),
    };
    let read = |j: usize| match variant.access[j] {
        Access::Immediate => immediate(j),
        _ => format!("((const {}*)p.in[{j}])[{}]", in_type(j), offset(j)),
    };
    let write = |o: usize, value: String| format!("(({}*)p.out[{o}])[i] = {value};", out_type(o));
    s.push_str(&element_body(k, "    ", &read, &write)?);
    s.push_str("  }\n}\n");
    // A one-block launch may end by writing its sequence number to its stream's completion word
    // (`completion.rs`): once every thread is past its stores.
    let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__({BLOCK}) {ENTRY}(const KParams p) {{");
    s.push_str("  kiln_elements(p);\n");
    s.push_str("  if (p.done) {\n    __syncthreads();\n");
    s.push_str("    if (threadIdx.x == 0) { __threadfence_system(); *(volatile unsigned*)p.done = (unsigned)p.seq; }\n  }\n}\n");
    Ok(s)
}
