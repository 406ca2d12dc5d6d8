//! Elementwise ops: unary math, broadcasting binary ops, `where`, `astype`, `clip`.

use super::{cast, promote_pair, AsArray};
use crate::array::Array;
use crate::dtype::{Category, Dtype};
use crate::error::{Error, Result};
use crate::primitive::{BinaryOp, Op, UnaryOp};

/// Builds a unary op node after mlx's input rules: float-only ops compute integers and bools in
/// float32; bitwise_invert takes integers and bools only; negative and sign reject bool.
pub fn unary(op: UnaryOp, x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    let dt = x.dtype();
    let x = match op {
        _ if op.needs_float() => cast(&x, dt.to_float())?,
        UnaryOp::BitwiseInvert if dt.is_float() => {
            return Err(Error::dtype(op.name(), format!("needs an integer or bool array, got {dt}")))
        }
        UnaryOp::Negative | UnaryOp::Sign if dt == Dtype::Bool => {
            return Err(Error::dtype(
                op.name(),
                "not supported for bool arrays; use logical_not instead",
            ))
        }
        _ => x,
    };
    Array::from_op(Op::Unary(op), vec![x])
}

/// The complex conjugate; real inputs are returned unchanged.
pub fn conjugate(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if !x.dtype().is_complex() {
        return Ok(x);
    }
    unary(UnaryOp::Conjugate, x)
}

/// The real part, as float32 for complex64; real inputs are returned unchanged.
pub fn real(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if !x.dtype().is_complex() {
        return Ok(x);
    }
    unary(UnaryOp::Real, x)
}

/// The imaginary part, as float32 for complex64; zeros of the input's dtype for real inputs.
pub fn imag(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if !x.dtype().is_complex() {
        return super::zeros_like(&x);
    }
    unary(UnaryOp::Imag, x)
}

macro_rules! unary_fns {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(x: impl AsArray) -> Result<Array> {
            unary(UnaryOp::$op, x)
        }
    )*};
}

unary_fns! {
    /// Absolute value.
    abs => Abs,
    /// `-x` (not for bool).
    negative => Negative,
    /// -1, 0 or 1 by sign (NaN stays NaN).
    sign => Sign,
    /// e^x.
    exp => Exp,
    /// e^x - 1, accurate near 0.
    expm1 => Expm1,
    /// Natural logarithm.
    log => Log,
    /// ln(1 + x), accurate near 0.
    log1p => Log1p,
    /// Base-2 logarithm.
    log2 => Log2,
    /// Base-10 logarithm.
    log10 => Log10,
    /// Square root.
    sqrt => Sqrt,
    /// 1 / sqrt(x).
    rsqrt => Rsqrt,
    /// x * x.
    square => Square,
    /// 1 / x.
    reciprocal => Reciprocal,
    /// Sine.
    sin => Sin,
    /// Cosine.
    cos => Cos,
    /// Tangent.
    tan => Tan,
    /// Inverse sine.
    arcsin => ArcSin,
    /// Inverse cosine.
    arccos => ArcCos,
    /// Inverse tangent.
    arctan => ArcTan,
    /// Hyperbolic sine.
    sinh => Sinh,
    /// Hyperbolic cosine.
    cosh => Cosh,
    /// Hyperbolic tangent.
    tanh => Tanh,
    /// Inverse hyperbolic sine.
    arcsinh => ArcSinh,
    /// Inverse hyperbolic cosine.
    arccosh => ArcCosh,
    /// Inverse hyperbolic tangent.
    arctanh => ArcTanh,
    /// The error function.
    erf => Erf,
    /// The inverse error function.
    erfinv => ErfInv,
    /// 1 / (1 + e^-x).
    sigmoid => Sigmoid,
    /// Round toward -inf.
    floor => Floor,
    /// Round toward +inf.
    ceil => Ceil,
    /// Round to nearest, ties to even.
    round => Round,
    /// `x == 0`, as bool.
    logical_not => LogicalNot,
    /// Whether each element is NaN.
    isnan => IsNan,
    /// Whether each element is +inf or -inf.
    isinf => IsInf,
    /// Whether each element is +inf.
    isposinf => IsPosInf,
    /// Whether each element is -inf.
    isneginf => IsNegInf,
    /// Whether each element is finite.
    isfinite => IsFinite,
    /// Bitwise not (integers and bool).
    bitwise_invert => BitwiseInvert,
}

/// Builds a binary op node after promotion, with mlx's input rules: divide, arctan2 and
/// logaddexp compute in float; logical ops work on bools; bitwise ops and shifts take integers
/// (and bool for and/or/xor) only.
pub fn binary(op: BinaryOp, a: impl AsArray, b: impl AsArray) -> Result<Array> {
    use BinaryOp::*;
    let (a, b) = promote_pair(op.name(), &a.as_array(), &b.as_array())?;
    let dt = a.dtype();
    let bad = |what: &str| {
        Err(Error::dtype(op.name(), format!("{what}, got {} and {}", a.dtype(), b.dtype())))
    };
    let (a, b) = match op {
        Divide | ArcTan2 | LogAddExp => (cast(&a, dt.to_float())?, cast(&b, dt.to_float())?),
        LogicalAnd | LogicalOr => (cast(&a, Dtype::Bool)?, cast(&b, Dtype::Bool)?),
        BitwiseAnd | BitwiseOr | BitwiseXor if dt.is_float() => {
            return bad("needs integer or bool arrays")
        }
        LeftShift | RightShift if !dt.is_integer() => return bad("needs integer arrays"),
        Subtract | FloorDivide | Remainder | Power if dt.category() == Category::Bool => {
            return bad("not supported for bool arrays")
        }
        _ => (a, b),
    };
    Array::from_op(Op::Binary(op), vec![a, b])
}

macro_rules! binary_fns {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: impl AsArray, b: impl AsArray) -> Result<Array> {
            binary(BinaryOp::$op, a, b)
        }
    )*};
}

binary_fns! {
    /// a + b.
    add => Add,
    /// a - b.
    subtract => Subtract,
    /// a * b.
    multiply => Multiply,
    /// a / b, true division (integers give float32).
    divide => Divide,
    /// floor(a / b); integer division by zero gives 0.
    floor_divide => FloorDivide,
    /// a mod b with the sign of b (Python's %); integer remainder by zero gives 0.
    remainder => Remainder,
    /// a ** b.
    power => Power,
    /// Elementwise max (NaN propagates).
    maximum => Maximum,
    /// Elementwise min (NaN propagates).
    minimum => Minimum,
    /// atan2(a, b).
    arctan2 => ArcTan2,
    /// log(e^a + e^b) without overflow.
    logaddexp => LogAddExp,
    /// a == b.
    equal => Equal,
    /// a != b.
    not_equal => NotEqual,
    /// a < b.
    less => Less,
    /// a <= b.
    less_equal => LessEqual,
    /// a > b.
    greater => Greater,
    /// a >= b.
    greater_equal => GreaterEqual,
    /// a and b, as bools.
    logical_and => LogicalAnd,
    /// a or b, as bools.
    logical_or => LogicalOr,
    /// Bitwise and.
    bitwise_and => BitwiseAnd,
    /// Bitwise or.
    bitwise_or => BitwiseOr,
    /// Bitwise xor.
    bitwise_xor => BitwiseXor,
    /// a << b (shifts of the bit width or more give 0).
    left_shift => LeftShift,
    /// a >> b, arithmetic for signed types.
    right_shift => RightShift,
}

/// `cond ? a : b` elementwise, broadcasting all three; `cond` is read as bool.
pub fn where_(cond: impl AsArray, a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let cond = cast(&cond.as_array(), Dtype::Bool)?;
    let (a, b) = promote_pair("where", &a.as_array(), &b.as_array())?;
    Array::from_op(Op::Select, vec![cond, a, b])
}

/// Converts to `dtype` (floats to integers truncate toward zero and saturate; NaN gives 0).
pub fn astype(x: impl AsArray, dtype: Dtype) -> Result<Array> {
    cast(&x.as_array(), dtype)
}

/// The bytes of `x`, in row-major order, read as `dtype` (numpy's and mlx's `view`): the last
/// axis scales by the ratio of the item sizes (it must hold a whole number of the new items),
/// and a 0-d array keeps its item size. A new dtype gives a copy with no gradient; the same
/// dtype gives `x` itself. Viewed as bool, a byte is true when it is not zero (bool values are
/// kept as 0 or 1).
pub fn view(x: impl AsArray, dtype: Dtype) -> Result<Array> {
    let x = x.as_array();
    if x.dtype() == dtype {
        return Ok(x);
    }
    if dtype == Dtype::Bool {
        return not_equal(view(&x, Dtype::U8)?, 0);
    }
    Array::from_op(Op::View(dtype), vec![x])
}

/// Limits values to `[min, max]`; either bound may be `None`.
pub fn clip(x: impl AsArray, min: Option<&dyn AsArray>, max: Option<&dyn AsArray>) -> Result<Array> {
    if min.is_none() && max.is_none() {
        return Err(Error::value("clip", "at least one of min and max must be given"));
    }
    let mut out = x.as_array();
    if let Some(lo) = min {
        out = maximum(&out, lo.as_array()).map_err(|e| e.in_op("clip"))?;
    }
    if let Some(hi) = max {
        out = minimum(&out, hi.as_array()).map_err(|e| e.in_op("clip"))?;
    }
    Ok(out)
}

/// A fresh row-major copy of `x` (never a view of it).
pub fn copy(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    let dt = x.dtype();
    Array::from_op(Op::AsType(dt), vec![x])
}
