//! The op enum: every kind of graph node, with its parameters and its output shape and dtype
//! inference. Ops are plain data with structural `Hash`/`Eq` (float parameters compare by bits),
//! so compile can hash-cons graphs, and `match` proves every op is handled by every backend and
//! transform. Constructors in [`crate::ops`] validate and normalise arguments (promotion, axes,
//! broadcasting of batch dimensions) and then build nodes through [`Op::infer`], so inference lives
//! in exactly one place and can be re-run on new input shapes (shapeless compile).

use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::ops::AxisBound;
use crate::shape::{broadcast_shapes, Shape};
pub use crate::transforms::custom::CustomCall;

/// Elementwise ops of one input.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Abs, Negative, Sign, Exp, Expm1, Log, Log1p, Log2, Log10, Sqrt, Rsqrt, Square, Reciprocal,
    Sin, Cos, Tan, ArcSin, ArcCos, ArcTan, Sinh, Cosh, Tanh, ArcSinh, ArcCosh, ArcTanh,
    Erf, ErfInv, Sigmoid, Floor, Ceil, Round, LogicalNot, IsNan, IsInf, IsPosInf, IsNegInf,
    IsFinite, BitwiseInvert,
    /// The complex conjugate (complex64 only: the constructor returns real inputs unchanged).
    Conjugate,
    /// The real part of a complex64 input, as float32.
    Real,
    /// The imaginary part of a complex64 input, as float32.
    Imag,
}

impl UnaryOp {
    /// The mlx.core name of the op.
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Abs => "abs", Negative => "negative", Sign => "sign", Exp => "exp", Expm1 => "expm1",
            Log => "log", Log1p => "log1p", Log2 => "log2", Log10 => "log10", Sqrt => "sqrt",
            Rsqrt => "rsqrt", Square => "square", Reciprocal => "reciprocal", Sin => "sin",
            Cos => "cos", Tan => "tan", ArcSin => "arcsin", ArcCos => "arccos", ArcTan => "arctan",
            Sinh => "sinh", Cosh => "cosh", Tanh => "tanh", ArcSinh => "arcsinh",
            ArcCosh => "arccosh", ArcTanh => "arctanh", Erf => "erf", ErfInv => "erfinv",
            Sigmoid => "sigmoid", Floor => "floor", Ceil => "ceil", Round => "round",
            LogicalNot => "logical_not", IsNan => "isnan", IsInf => "isinf",
            IsPosInf => "isposinf", IsNegInf => "isneginf", IsFinite => "isfinite",
            BitwiseInvert => "bitwise_invert", Conjugate => "conjugate", Real => "real", Imag => "imag",
        }
    }

    /// The output dtype on an input of `input`: bool for predicates; float32 for the magnitude and
    /// parts of complex64 (abs, real, imag); the input's dtype otherwise.
    pub fn out_dtype(self, input: Dtype) -> Dtype {
        use UnaryOp::*;
        match self {
            _ if self.is_predicate() => Dtype::Bool,
            Abs | Real | Imag if input.is_complex() => Dtype::F32,
            _ => input,
        }
    }

    /// Whether the op is defined on complex64 (see [`Op::check_complex`]).
    pub fn takes_complex(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Abs | Negative | Sign | Exp | Log | Log1p | Log2 | Log10 | Sqrt | Rsqrt | Square | Reciprocal | Sin | Cos
                | Tan | Sinh | Cosh | Tanh | ArcSin | ArcCos | ArcTan | Round | LogicalNot | IsNan | IsInf | IsPosInf
                | IsNegInf | IsFinite | Conjugate | Real | Imag
        )
    }

    /// Ops whose result is boolean whatever the input dtype.
    pub fn is_predicate(self) -> bool {
        use UnaryOp::*;
        matches!(self, LogicalNot | IsNan | IsInf | IsPosInf | IsNegInf | IsFinite)
    }

    /// Ops defined only on floats: integer and bool inputs are first cast to float32, as in mlx.
    pub fn needs_float(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Expm1 | Log | Log1p | Log2 | Log10 | Sqrt | Rsqrt | Reciprocal | Sin | Cos | Tan
                | ArcSin | ArcCos | ArcTan | Sinh | Cosh | Tanh | ArcSinh | ArcCosh | ArcTanh | Erf
                | ErfInv | Sigmoid
        )
    }
}

/// Elementwise ops of two broadcasting inputs of one dtype.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add, Subtract, Multiply, Divide, FloorDivide, Remainder, Power, Maximum, Minimum, ArcTan2,
    LogAddExp, Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, LogicalAnd, LogicalOr,
    BitwiseAnd, BitwiseOr, BitwiseXor, LeftShift, RightShift,
}

impl BinaryOp {
    /// The mlx.core name of the op.
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add", Subtract => "subtract", Multiply => "multiply", Divide => "divide",
            FloorDivide => "floor_divide", Remainder => "remainder", Power => "power",
            Maximum => "maximum", Minimum => "minimum", ArcTan2 => "arctan2",
            LogAddExp => "logaddexp", Equal => "equal", NotEqual => "not_equal", Less => "less",
            LessEqual => "less_equal", Greater => "greater", GreaterEqual => "greater_equal",
            LogicalAnd => "logical_and", LogicalOr => "logical_or", BitwiseAnd => "bitwise_and",
            BitwiseOr => "bitwise_or", BitwiseXor => "bitwise_xor", LeftShift => "left_shift",
            RightShift => "right_shift",
        }
    }

    /// Comparisons and logical ops: the result is boolean.
    pub fn is_predicate(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr
        )
    }

    /// Whether the op is defined on complex64: arithmetic and the power, and comparisons, which
    /// order complex numbers by real part, then imaginary part, as numpy (maximum and minimum too).
    pub fn takes_complex(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Add | Subtract | Multiply | Divide | Power | LogAddExp | Maximum | Minimum | Equal | NotEqual | Less | LessEqual
                | Greater | GreaterEqual | LogicalAnd | LogicalOr
        )
    }
}

/// Kinds of reduction over axes.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp { Sum, Prod, Max, Min, All, Any }

impl ReduceOp {
    /// The dtype a reduction of `input` yields: sums and products of bool and narrow integers
    /// accumulate in 32 bits as in mlx; all/any give bool; max/min keep the dtype.
    pub fn out_dtype(self, input: Dtype) -> Dtype {
        match self {
            ReduceOp::All | ReduceOp::Any => Dtype::Bool,
            ReduceOp::Max | ReduceOp::Min => input,
            ReduceOp::Sum | ReduceOp::Prod => accumulate_dtype(input),
        }
    }
}

/// Sums and products of bool and narrow integers accumulate in (u)int32, as in mlx.
pub fn accumulate_dtype(input: Dtype) -> Dtype {
    match input {
        Dtype::Bool | Dtype::I8 | Dtype::I16 => Dtype::I32,
        Dtype::U8 | Dtype::U16 => Dtype::U32,
        d => d,
    }
}

/// argmax / argmin.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgReduceOp { ArgMax, ArgMin }

/// Kinds of cumulative scan.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanOp { Sum, Prod, Max, Min, LogAddExp }

impl ScanOp {
    /// The reduction whose running value the scan writes; none for the running log-sum-exp,
    /// which kiln computes as a scan only (its reduction is `logsumexp`, a composite).
    pub fn as_reduce(self) -> Option<ReduceOp> {
        match self {
            ScanOp::Sum => Some(ReduceOp::Sum),
            ScanOp::Prod => Some(ReduceOp::Prod),
            ScanOp::Max => Some(ReduceOp::Max),
            ScanOp::Min => Some(ReduceOp::Min),
            ScanOp::LogAddExp => None,
        }
    }
}

/// Which discrete Fourier transform an [`Op::Fft`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftKind {
    /// Complex to complex, unnormalised: X[k] = Σ x[j] e^{-2πijk/n}.
    Forward,
    /// Complex to complex, the inverse of `Forward` (scaled by 1/n on each axis).
    Inverse,
    /// Real to complex: `Forward` of a real input, keeping n/2 + 1 entries of the last axis.
    RealForward,
    /// Complex to real: the inverse of `RealForward`, giving `n` real values along the last axis
    /// from its n/2 + 1 (the rest follow by Hermitian symmetry).
    RealInverse(usize),
}

/// How a scatter combines updates with the destination.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterOp { Set, Add, Prod, Max, Min }

/// An f64 parameter stored by its bits so ops hash and compare exactly (NaN, -0.0 included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct F64Bits(pub u64);

impl F64Bits {
    /// Wraps a value.
    pub fn new(v: f64) -> F64Bits {
        F64Bits(v.to_bits())
    }
    /// The value.
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// Every kind of graph node. Arrays with data (leaves) have no op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `start + i * step` for i in 0..len, in `dtype`. No inputs.
    Arange { start: F64Bits, step: F64Bits, len: usize, dtype: Dtype },
    /// Elementwise op of one input.
    Unary(UnaryOp),
    /// Elementwise op of two inputs of equal dtype, broadcast together.
    Binary(BinaryOp),
    /// `where(cond, a, b)`: inputs [cond (bool), a, b], broadcast; a and b share a dtype.
    Select,
    /// Elementwise conversion to a dtype.
    AsType(Dtype),
    /// The input's bytes, in row-major order, read as another dtype (numpy's and mlx's `view`):
    /// the last axis scales by the ratio of the item sizes.
    View(Dtype),
    /// View with a new shape of equal size (copies only when strides cannot express it). The axis
    /// given as -1, if any, is `inferred`: its size follows the input's size (in shapeless
    /// compile too, as in mlx), while the other sizes stay fixed.
    Reshape { shape: Shape, inferred: Option<usize> },
    /// View with permuted axes.
    Transpose(Vec<usize>),
    /// View broadcast to a shape (zero strides on new or size-1 axes).
    BroadcastTo(Shape),
    /// View of the first input broadcast against the shapes of the other inputs (whose data is
    /// never read), its last `kept` axes left as they are (a matmul's matrix axes, while its
    /// batch axes broadcast). Unlike `BroadcastTo` it follows shapes, so broadcasts derived
    /// from inputs (gradients of reductions, `broadcast_arrays`, batched matmul) stay correct
    /// under shapeless compile.
    BroadcastLike { kept: usize },
    /// The first input summed down to the second input's shape (whose data is never read), over
    /// the axes a broadcast from that shape added or stretched: the cotangent of a broadcast.
    /// The summed axes follow each run's shapes, so a shapeless compiled gradient stays right
    /// when which axes broadcast changes; compile's simplification turns it into a plain
    /// reduction at concrete shapes, where it fuses.
    SumLike,
    /// Strided slice view: per axis a start, a step (non-zero, may be negative) and a length.
    /// `written`: the bounds as the caller wrote them, kept while compile traces so a shapeless
    /// replay resolves them again at new shapes ([`crate::ops::slice_written`]); `None`: fixed.
    Slice { start: Vec<usize>, step: Vec<isize>, len: Vec<usize>, written: Option<Vec<AxisBound>> },
    /// Joins inputs of equal dtype and equal shape except along `axis`.
    Concatenate { axis: usize },
    /// Inputs [dst, update]: a copy of dst with the strided region (start, step per axis, of
    /// update's shape) replaced by update. `written` as for [`Op::Slice`].
    SliceUpdate { start: Vec<usize>, step: Vec<isize>, written: Option<Vec<AxisBound>> },
    /// Reduction over `axes` (sorted), which are kept with size 1. Max and min over an empty
    /// axis are an error unless `identity_if_empty`, which composites set (softmax, logsumexp)
    /// whose results are right with the identity (-inf for max) there.
    Reduce { op: ReduceOp, axes: Vec<usize>, identity_if_empty: bool },
    /// Index of the max/min along `axis`, kept with size 1; uint32.
    ArgReduce { op: ArgReduceOp, axis: usize },
    /// Cumulative op along `axis`.
    Scan { op: ScanOp, axis: usize, reverse: bool, inclusive: bool },
    /// Sorted along `axis` (NaNs last).
    Sort { axis: usize },
    /// Indices (uint32) that sort along `axis`; stable.
    ArgSort { axis: usize },
    /// Partially sorted so the element at `kth` is in its sorted place, smaller before, larger after.
    Partition { kth: usize, axis: usize },
    /// Indices (uint32) of a partition.
    ArgPartition { kth: usize, axis: usize },
    /// Inputs [a, idx_0 ... idx_k] (integer, broadcast together to B): output B ++ slice_sizes, where
    /// slice j starts at idx_i along axes[i] and at 0 elsewhere.
    Gather { axes: Vec<usize>, slice_sizes: Vec<usize> },
    /// Inputs [a, idx_0 ... idx_k, updates]: a copy of a with updates (shape B ++ a.ndim slice dims)
    /// combined into the slices indexed as in Gather.
    Scatter { axes: Vec<usize>, op: ScatterOp },
    /// Batched matrix product of [a (..., M, K), b (..., K, N)] with equal batch shapes; floats only.
    Matmul,
    /// The input unchanged, with a zero derivative: `stop_gradient`. Evaluates as a view.
    StopGradient,
    /// Output `index` of one call of a function with user-supplied derivatives (custom_function,
    /// checkpoint). Inputs are the call's outputs followed by its arguments; it evaluates as a
    /// view of input `index`, while transforms apply the call's own rules.
    Custom { index: usize, call: CustomCall },
    /// Merges axes `start..=end` of the input into one (a view when strides allow). Unlike a
    /// reshape to a fixed shape, it re-infers its output shape from any input shape, so it serves
    /// every shape in shapeless compile.
    Flatten { start: usize, end: usize },
    /// Removes the size-1 axes `axes` (sorted) of the input; a view. Re-infers from any input
    /// shape (shapeless compile), where a reshape would hold a fixed shape.
    Squeeze(Vec<usize>),
    /// Inserts size-1 axes at `axes` (sorted positions in the output); a view that re-infers from
    /// any input shape, like [`Op::Squeeze`].
    ExpandDims(Vec<usize>),
    /// A scalar of `dtype`: the number of elements of the input along `axes`, minus `ddof`
    /// (clamped at 0). The divisor of mean and var, as a node rather than a number, so a
    /// shapeless compiled function computes it from each call's shapes.
    Count { axes: Vec<usize>, ddof: usize, dtype: Dtype },
    /// Output `index` of a user kernel call (see [`crate::custom_kernel`]): opaque to fusion.
    Kernel { call: crate::kernel::KernelCall, index: usize },
    /// A discrete Fourier transform over `axes` (distinct, in the caller's order: the real
    /// transforms treat the last one as the real axis). Inputs are complex64, or real for
    /// `RealForward`; the output is complex64, or float32 for `RealInverse`.
    Fft { axes: Vec<usize>, kind: FftKind },
    /// Random bits from threefry2x32 keys (input [key], uint32 of shape (..., 2)): for each key,
    /// `shape` elements of `width` bytes (1, 2 or 4); the output is the key batch ++ `shape`.
    RandomBits { shape: Shape, width: usize },
}

/// What shape inference reads of an input: its shape and dtype. Arrays have them, and so does a
/// bare `(shape, dtype)` pair, which shapeless compile re-infers with.
pub trait ShapeDtype {
    /// The shape.
    fn shape(&self) -> &[usize];
    /// The dtype.
    fn dtype(&self) -> Dtype;
    /// The number of elements.
    fn size(&self) -> usize {
        crate::shape::numel(self.shape())
    }
    /// The number of axes.
    fn ndim(&self) -> usize {
        self.shape().len()
    }
}

impl ShapeDtype for Array {
    fn shape(&self) -> &[usize] {
        Array::shape(self)
    }
    fn dtype(&self) -> Dtype {
        Array::dtype(self)
    }
}

impl ShapeDtype for (Shape, Dtype) {
    fn shape(&self) -> &[usize] {
        &self.0
    }
    fn dtype(&self) -> Dtype {
        self.1
    }
}

/// The output shape and dtype of an [`Op::Fft`] on `input`.
fn fft_output<A: ShapeDtype>(op: &str, input: &A, axes: &[usize], kind: FftKind) -> Result<(Shape, Dtype)> {
    let mut shape: Shape = input.shape().into();
    let last = *axes.last().expect("an fft has at least one axis");
    let wants_complex = kind != FftKind::RealForward;
    if input.dtype().is_complex() != wants_complex {
        let want = if wants_complex { "a complex64" } else { "a real" };
        return Err(Error::dtype(op, format!("needs {want} input, got {}", input.dtype())));
    }
    Ok(match kind {
        FftKind::Forward | FftKind::Inverse => (shape, Dtype::C64),
        FftKind::RealForward => {
            shape[last] = shape[last] / 2 + 1;
            (shape, Dtype::C64)
        }
        FftKind::RealInverse(n) => {
            if shape[last] != n / 2 + 1 {
                return Err(Error::shape(
                    op,
                    format!("an output of {n} along axis {last} needs {} input values there, got {}", n / 2 + 1, shape[last]),
                ));
            }
            shape[last] = n;
            (shape, Dtype::F32)
        }
    })
}

/// The shape a reshape of an input of `input` shape to `shape` gives: `shape`, with the axis
/// `inferred` (written -1 by the caller) sized to fit the input's size.
fn reshaped(op: &str, input: &[usize], shape: &Shape, inferred: Option<usize>) -> Result<Shape> {
    let size = crate::shape::numel(input);
    let mut out = shape.clone();
    let fits = match inferred {
        Some(a) => {
            let known: usize = out.iter().enumerate().filter(|&(d, _)| d != a).map(|(_, &n)| n).product();
            let fits = known > 0 && size.is_multiple_of(known);
            if fits {
                out[a] = size / known;
            }
            fits
        }
        None => crate::shape::numel(&out) == size,
    };
    if !fits {
        let wanted: Vec<String> = out.iter().enumerate().map(|(d, n)| if Some(d) == inferred { "-1".into() } else { n.to_string() }).collect();
        return Err(Error::shape(
            op,
            format!("cannot reshape array of shape {} into shape ({})", crate::shape::fmt_shape(input), wanted.join(", ")),
        ));
    }
    Ok(out)
}

fn input_shapes_equal_except<A: ShapeDtype>(op: &str, inputs: &[&A], axis: usize) -> Result<Shape> {
    let first = inputs[0].shape();
    let mut out: Shape = first.into();
    out[axis] = 0;
    for a in inputs {
        let s = a.shape();
        let ok = s.len() == first.len()
            && s.iter().zip(first).enumerate().all(|(i, (x, y))| i == axis || x == y);
        if !ok {
            return Err(Error::shape(
                op,
                format!(
                    "all inputs must match except along axis {axis}, got {} and {}",
                    crate::shape::fmt_shape(first),
                    crate::shape::fmt_shape(s)
                ),
            ));
        }
        out[axis] += s[axis];
    }
    Ok(out)
}

/// The shape of `shape` (of `from` values) viewed as `to` values: the last axis scales by the
/// ratio of the item sizes, which a 0-d array cannot.
pub(crate) fn view_shape(shape: &[usize], from: Dtype, to: Dtype) -> Result<Shape> {
    let (a, b) = (from.size(), to.size());
    let mut out: Shape = shape.into();
    if a == b {
        return Ok(out);
    }
    let Some(last) = out.last_mut() else {
        return Err(Error::value(
            "view",
            format!("a 0-d {from} array cannot be viewed as {to}: the item sizes differ ({a} and {b} bytes)"),
        ));
    };
    if (*last * a) % b != 0 {
        return Err(Error::shape(
            "view",
            format!(
                "the last axis of shape {} holds {} bytes, not a whole number of {to} values ({b} bytes each)",
                crate::shape::fmt_shape(shape),
                *last * a
            ),
        ));
    }
    *last = *last * a / b;
    Ok(out)
}

impl Op {
    /// Whether the op is defined on complex64 inputs. The ops that only move, select or combine
    /// elements are; of the rest, the arithmetic and functions numpy defines for complex numbers.
    fn takes_complex(&self) -> bool {
        match self {
            Op::Unary(u) => u.takes_complex(),
            Op::Binary(b) => b.takes_complex(),
            Op::Reduce { op, .. } => matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min | ReduceOp::All | ReduceOp::Any),
            Op::Scan { op, .. } => matches!(op, ScanOp::Sum | ScanOp::Prod | ScanOp::LogAddExp),
            Op::Scatter { op, .. } => matches!(op, ScatterOp::Set | ScatterOp::Add | ScatterOp::Prod),
            Op::Select | Op::AsType(_) | Op::View(_) | Op::Reshape { .. } | Op::Transpose(_) | Op::BroadcastTo(_) | Op::BroadcastLike { .. }
            | Op::Slice { .. } | Op::Concatenate { .. } | Op::SliceUpdate { .. } | Op::Gather { .. } | Op::Matmul
            | Op::StopGradient | Op::Custom { .. } | Op::Flatten { .. } | Op::Squeeze(_) | Op::ExpandDims(_)
            | Op::Count { .. } | Op::Kernel { .. } | Op::Sort { .. } | Op::ArgSort { .. } | Op::SumLike => true,
            // Real transforms read real inputs; the others need complex ones (checked in infer).
            Op::Fft { kind, .. } => *kind != FftKind::RealForward,
            Op::Arange { .. } | Op::ArgReduce { .. } | Op::Partition { .. } | Op::ArgPartition { .. }
            | Op::RandomBits { .. } => false,
        }
    }

    /// A clear error for an op given complex64 inputs it is not defined on, so no kernel ever
    /// sees a dtype it does not handle.
    fn check_complex<A: ShapeDtype>(&self, inputs: &[&A]) -> Result<()> {
        let complex = matches!(self, Op::Arange { dtype: Dtype::C64, .. }) || inputs.iter().any(|x| x.dtype().is_complex());
        if complex && !self.takes_complex() {
            return Err(Error::dtype(
                self.name(),
                "not defined for complex64 inputs; take the real part (mx.real) or the magnitude (mx.abs) first",
            ));
        }
        Ok(())
    }

    /// A short name for graphs, logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Arange { .. } => "arange",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Select => "where",
            Op::AsType(_) => "astype",
            Op::View(_) => "view",
            Op::Reshape { .. } => "reshape",
            Op::Transpose(_) => "transpose",
            Op::BroadcastTo(_) => "broadcast_to",
            Op::BroadcastLike { .. } => "broadcast_like",
            Op::SumLike => "sum_like",
            Op::Slice { .. } => "slice",
            Op::Concatenate { .. } => "concatenate",
            Op::SliceUpdate { .. } => "slice_update",
            Op::Reduce { op, .. } => match op {
                ReduceOp::Sum => "sum",
                ReduceOp::Prod => "prod",
                ReduceOp::Max => "max",
                ReduceOp::Min => "min",
                ReduceOp::All => "all",
                ReduceOp::Any => "any",
            },
            Op::ArgReduce { op: ArgReduceOp::ArgMax, .. } => "argmax",
            Op::ArgReduce { op: ArgReduceOp::ArgMin, .. } => "argmin",
            Op::Scan { op, .. } => match op {
                ScanOp::Sum => "cumsum",
                ScanOp::Prod => "cumprod",
                ScanOp::Max => "cummax",
                ScanOp::Min => "cummin",
                ScanOp::LogAddExp => "logcumsumexp",
            },
            Op::Sort { .. } => "sort",
            Op::ArgSort { .. } => "argsort",
            Op::Partition { .. } => "partition",
            Op::ArgPartition { .. } => "argpartition",
            Op::Gather { .. } => "gather",
            Op::Scatter { .. } => "scatter",
            Op::Matmul => "matmul",
            Op::RandomBits { .. } => "random_bits",
            Op::StopGradient => "stop_gradient",
            Op::Custom { .. } => "custom_function",
            Op::Flatten { .. } => "flatten",
            Op::Squeeze(_) => "squeeze",
            Op::ExpandDims(_) => "expand_dims",
            Op::Count { .. } => "count",
            Op::Kernel { .. } => "custom_kernel",
            Op::Fft { kind: FftKind::Forward, .. } => "fft",
            Op::Fft { kind: FftKind::Inverse, .. } => "ifft",
            Op::Fft { kind: FftKind::RealForward, .. } => "rfft",
            Op::Fft { kind: FftKind::RealInverse(_), .. } => "irfft",
        }
    }

    /// Whether the op's output is a view of its first input (no data is copied when strides allow).
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. }
                | Op::Transpose(_)
                | Op::BroadcastTo(_)
                | Op::BroadcastLike { .. }
                | Op::Slice { .. }
                | Op::StopGradient
                | Op::Custom { .. }
                | Op::Flatten { .. }
                | Op::Squeeze(_)
                | Op::ExpandDims(_)
        )
    }

    /// The output shape and dtype of this op on `inputs`. Constructors validate arguments before
    /// building a node; this re-checks what depends on input shapes, so it is safe to re-run on new
    /// shapes.
    pub fn infer<A: ShapeDtype>(&self, inputs: &[&A]) -> Result<(Shape, Dtype)> {
        let op = self.name();
        let first = || inputs[0];
        self.check_complex(inputs)?;
        Ok(match self {
            Op::Arange { len, dtype, .. } => (Shape::from_slice(&[*len]), *dtype),
            Op::Unary(u) => (first().shape().into(), u.out_dtype(first().dtype())),
            Op::Binary(b) => {
                let shape = broadcast_shapes(op, inputs[0].shape(), inputs[1].shape())?;
                let dt = if b.is_predicate() { Dtype::Bool } else { first().dtype() };
                (shape, dt)
            }
            Op::Select => {
                let s = broadcast_shapes(op, inputs[0].shape(), inputs[1].shape())?;
                (broadcast_shapes(op, &s, inputs[2].shape())?, inputs[1].dtype())
            }
            Op::AsType(d) => (first().shape().into(), *d),
            Op::View(d) => (view_shape(first().shape(), first().dtype(), *d)?, *d),
            Op::Reshape { shape, inferred } => (reshaped(op, first().shape(), shape, *inferred)?, first().dtype()),
            Op::Transpose(perm) => {
                let s = first().shape();
                (perm.iter().map(|&p| s[p]).collect(), first().dtype())
            }
            Op::BroadcastTo(target) => {
                if broadcast_shapes(op, first().shape(), target)?.as_slice() != target.as_slice() {
                    return Err(Error::shape(
                        op,
                        format!(
                            "cannot broadcast shape {} to {}",
                            crate::shape::fmt_shape(first().shape()),
                            crate::shape::fmt_shape(target)
                        ),
                    ));
                }
                (target.clone(), first().dtype())
            }
            Op::BroadcastLike { kept } => (broadcast_like_shape(inputs, *kept)?, first().dtype()),
            Op::SumLike => {
                let (from, to) = (first().shape(), inputs[1].shape());
                if broadcast_shapes(op, to, from)?.as_slice() != from {
                    return Err(Error::shape(
                        op,
                        format!(
                            "cannot sum shape {} down to {}: {} does not broadcast to it",
                            crate::shape::fmt_shape(from),
                            crate::shape::fmt_shape(to),
                            crate::shape::fmt_shape(to)
                        ),
                    ));
                }
                (to.into(), ReduceOp::Sum.out_dtype(first().dtype()))
            }
            Op::Slice { len, .. } => (len.iter().copied().collect(), first().dtype()),
            Op::Concatenate { axis } => (input_shapes_equal_except(op, inputs, *axis)?, first().dtype()),
            Op::SliceUpdate { .. } => (first().shape().into(), first().dtype()),
            Op::Reduce { op: r, axes, identity_if_empty } => {
                if matches!(r, ReduceOp::Max | ReduceOp::Min) && !identity_if_empty && axes.iter().any(|&a| first().shape()[a] == 0) {
                    return Err(Error::value(
                        op,
                        format!(
                            "zero-size array to reduction operation {op} which has no identity (shape {}, axes {axes:?})",
                            crate::shape::fmt_shape(first().shape())
                        ),
                    ));
                }
                let mut s: Shape = first().shape().into();
                for &a in axes {
                    s[a] = 1;
                }
                (s, r.out_dtype(first().dtype()))
            }
            Op::ArgReduce { axis, .. } => {
                if first().shape()[*axis] == 0 {
                    return Err(Error::value(
                        op,
                        format!("attempt to get {op} of an empty sequence (shape {})", crate::shape::fmt_shape(first().shape())),
                    ));
                }
                let mut s: Shape = first().shape().into();
                s[*axis] = 1;
                (s, Dtype::U32)
            }
            Op::Scan { op: ScanOp::Sum | ScanOp::Prod, .. } => {
                (first().shape().into(), accumulate_dtype(first().dtype()))
            }
            Op::Scan { .. } | Op::Sort { .. } | Op::Partition { .. } => {
                (first().shape().into(), first().dtype())
            }
            Op::ArgSort { .. } | Op::ArgPartition { .. } => (first().shape().into(), Dtype::U32),
            Op::Gather { slice_sizes, .. } => {
                let mut b: Shape = Shape::new();
                for idx in &inputs[1..] {
                    b = broadcast_shapes(op, &b, idx.shape())?;
                }
                b.extend_from_slice(slice_sizes);
                (b, first().dtype())
            }
            Op::Scatter { .. } => (first().shape().into(), first().dtype()),
            Op::Matmul => {
                let (a, b) = (inputs[0].shape(), inputs[1].shape());
                let n = a.len();
                if n < 2 || b.len() != n || a[..n - 2] != b[..n - 2] || a[n - 1] != b[n - 2] {
                    return Err(Error::shape(
                        op,
                        format!(
                            "last dimension of the first input must equal the second-to-last of \
                             the second, got {} and {}",
                            crate::shape::fmt_shape(a),
                            crate::shape::fmt_shape(b)
                        ),
                    ));
                }
                let mut s: Shape = a.into();
                s[n - 1] = b[n - 1];
                (s, first().dtype())
            }
            Op::StopGradient => (first().shape().into(), first().dtype()),
            Op::Custom { index, .. } => (inputs[*index].shape().into(), inputs[*index].dtype()),
            Op::Flatten { start, end } => {
                let s = first().shape();
                let mut out: Shape = s[..*start].into();
                out.push(s[*start..=*end].iter().product());
                out.extend_from_slice(&s[*end + 1..]);
                (out, first().dtype())
            }
            Op::Squeeze(axes) => {
                let s = first().shape();
                if let Some(&bad) = axes.iter().find(|&&a| s.get(a) != Some(&1)) {
                    return Err(Error::shape(
                        op,
                        format!("cannot squeeze axis {bad} of shape {}: it is not of size 1", crate::shape::fmt_shape(s)),
                    ));
                }
                let out = s.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
                (out, first().dtype())
            }
            Op::ExpandDims(axes) => {
                let mut rest = first().shape().iter();
                let nd = first().ndim() + axes.len();
                let out = (0..nd).map(|i| if axes.contains(&i) { 1 } else { *rest.next().expect("axes fit") }).collect();
                (out, first().dtype())
            }
            Op::Count { dtype, .. } => (Shape::new(), *dtype),
            Op::Kernel { call, index } => call.output(*index),
            Op::Fft { axes, kind } => fft_output(op, first(), axes, *kind)?,
            Op::RandomBits { shape, width } => {
                let dt = match width {
                    1 => Dtype::U8,
                    2 => Dtype::U16,
                    _ => Dtype::U32,
                };
                let mut out: Shape = first().shape()[..first().ndim().saturating_sub(1)].into();
                out.extend_from_slice(shape);
                (out, dt)
            }
        })
    }
}

/// The shape of [`Op::BroadcastLike`]: the broadcast of every input's shape but its last `kept`
/// axes, followed by the first input's last `kept` axes.
fn broadcast_like_shape<A: ShapeDtype>(inputs: &[&A], kept: usize) -> Result<Shape> {
    let lead = |s: &[usize]| -> Result<Shape> {
        if s.len() < kept {
            return Err(Error::shape(
                "broadcast_like",
                format!("shape {} has fewer than the {kept} trailing axes kept", crate::shape::fmt_shape(s)),
            ));
        }
        Ok(s[..s.len() - kept].into())
    };
    let mut out = lead(inputs[0].shape())?;
    for other in &inputs[1..] {
        out = broadcast_shapes("broadcast_like", &out, &lead(other.shape())?)?;
    }
    let x = inputs[0].shape();
    out.extend_from_slice(&x[x.len() - kept..]);
    Ok(out)
}
