//! The scalar meaning of every elementwise op, per compute type, applied over contiguous runs.
//!
//! This is the one place an elementwise op's semantics live on the CPU: eager kernels call these
//! on whole contiguous chunks or on gathered tiles, and compiled kernels call them on L1-sized
//! tiles. float16/bfloat16 are computed in float32 (see [`Compute`]). Integer arithmetic wraps;
//! integer division and remainder by zero give 0 (numpy gives 0 with a warning; Rust would panic).

use super::math::{
    self, erf_f32, erfinv_f32, exp_f32, expm1_f32, log1p_f32, log_f32, sigmoid_f32, tanh_f32, Fused, LogSpaceAdd, Unfused,
};
use super::simd::{map1, map1_inlined, map2};
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::primitive::{BinaryOp, UnaryOp};
use half::{bf16, f16};

/// A type elementwise kernels compute in, with the loops of every op it supports.
pub trait Scalar: Element + PartialOrd {
    /// `o = op(x)` over n elements for ops that keep the dtype.
    ///
    /// # Safety
    /// Pointers valid for n elements; `o` may alias `x`.
    unsafe fn unary(op: UnaryOp, x: *const Self, o: *mut Self, n: usize) -> Result<()>;
    /// `o = op(x)` over n elements for predicate ops (isnan, logical_not, ...).
    ///
    /// # Safety
    /// Pointers valid for n elements.
    unsafe fn predicate(op: UnaryOp, x: *const Self, o: *mut bool, n: usize) -> Result<()> {
        match op {
            UnaryOp::LogicalNot => map1(x, o, n, |v: Self| v == Self::default()),
            UnaryOp::IsFinite => map1(x, o, n, |_| true),
            UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => {
                map1(x, o, n, |_| false)
            }
            _ => return Err(not_defined(op.name(), Self::DTYPE)),
        }
        Ok(())
    }
    /// `o = op(a, b)` over n elements for ops that keep the dtype.
    ///
    /// # Safety
    /// Pointers valid for n elements; `o` may alias `a` or `b`.
    unsafe fn binary(op: BinaryOp, a: *const Self, b: *const Self, o: *mut Self, n: usize) -> Result<()>;
    /// `o = op(a, b)` over n elements for comparisons and logical ops.
    ///
    /// # Safety
    /// Pointers valid for n elements.
    unsafe fn compare(op: BinaryOp, a: *const Self, b: *const Self, o: *mut bool, n: usize) -> Result<()> {
        macro_rules! arrays { ($f:expr) => { map2(a, b, o, n, $f) } }
        compare_ops!(Self, op, arrays);
        Ok(())
    }
    /// `o = op(a, s)`, or `op(s, a)` when `scalar_first`, over n elements: a binary op whose
    /// other operand is one value everywhere (a constant, a row's reduced value). The value stays
    /// in a register instead of being read from a tile filled with it.
    ///
    /// # Safety
    /// Pointers valid for n elements; `o` may alias `a`.
    unsafe fn binary_scalar(op: BinaryOp, a: *const Self, s: Self, scalar_first: bool, o: *mut Self, n: usize)
        -> Result<()>;
    /// [`Scalar::compare`] with one operand a single value, as in [`Scalar::binary_scalar`].
    ///
    /// # Safety
    /// Pointers valid for n elements.
    unsafe fn compare_scalar(op: BinaryOp, a: *const Self, s: Self, scalar_first: bool, o: *mut bool, n: usize)
        -> Result<()> {
        macro_rules! with_scalar { ($f:expr) => { against_scalar!(Self, a, s, scalar_first, o, n, $f) } }
        compare_ops!(Self, op, with_scalar);
        Ok(())
    }
}

/// Runs `$apply!(closure)` with the closure of comparison or logical op `$op` on `$t`.
macro_rules! compare_ops {
    ($t:ty, $op:expr, $apply:ident) => {{
        let zero = <$t>::default();
        match $op {
            BinaryOp::Equal => $apply!(|x: $t, y: $t| x == y),
            BinaryOp::NotEqual => $apply!(|x: $t, y: $t| x != y),
            BinaryOp::Less => $apply!(|x: $t, y: $t| x < y),
            BinaryOp::LessEqual => $apply!(|x: $t, y: $t| x <= y),
            BinaryOp::Greater => $apply!(|x: $t, y: $t| x > y),
            BinaryOp::GreaterEqual => $apply!(|x: $t, y: $t| x >= y),
            BinaryOp::LogicalAnd => $apply!(|x: $t, y: $t| x != zero && y != zero),
            BinaryOp::LogicalOr => $apply!(|x: $t, y: $t| x != zero || y != zero),
            _ => return Err(not_defined($op.name(), <$t>::DTYPE)),
        }
    }};
}
pub(super) use compare_ops;

/// `$o[i] = f($a[i], $s)` (or `f($s, $a[i])` when `$first`) for i < `$n`, with `f` the closure
/// `$f` over `$t`: the loop of a binary op against one value.
macro_rules! against_scalar {
    ($t:ty, $a:expr, $s:expr, $first:expr, $o:expr, $n:expr, $f:expr) => {{
        let (f, s) = ($f, $s);
        if $first {
            map1($a, $o, $n, #[inline(always)] move |y: $t| f(s, y))
        } else {
            map1($a, $o, $n, #[inline(always)] move |x: $t| f(x, s))
        }
    }};
}
pub(super) use against_scalar;

/// The `binary` and `binary_scalar` methods of [`Scalar`] from one table, `$table!($t, extra..,
/// op, apply)`, that hands each op's closure to `apply`.
macro_rules! binary_methods {
    ($t:ty, $table:ident $(, $extra:expr)*) => {
        unsafe fn binary(op: BinaryOp, a: *const $t, b: *const $t, o: *mut $t, n: usize) -> Result<()> {
            macro_rules! arrays { ($f:expr) => { map2(a, b, o, n, $f) } }
            $table!($t, $($extra,)* op, arrays);
            Ok(())
        }

        unsafe fn binary_scalar(op: BinaryOp, a: *const $t, s: $t, scalar_first: bool, o: *mut $t, n: usize)
            -> Result<()> {
            macro_rules! with_scalar { ($f:expr) => { against_scalar!($t, a, s, scalar_first, o, n, $f) } }
            $table!($t, $($extra,)* op, with_scalar);
            Ok(())
        }
    };
}

/// The error for an op a dtype does not support (constructors normally prevent this).
pub fn not_defined(op: &str, dtype: crate::Dtype) -> Error {
    Error::dtype(op, format!("not defined for arrays of dtype {dtype}"))
}

/// Runs `$apply!(closure)` with the closure of float binary op `$op` on `$t`.
macro_rules! float_binary_ops {
    ($t:ty, $op:expr, $apply:ident) => {{
        use BinaryOp::*;
        match $op {
            Add => $apply!(|x: $t, y: $t| x + y),
            Subtract => $apply!(|x: $t, y: $t| x - y),
            Multiply => $apply!(|x: $t, y: $t| x * y),
            Divide => $apply!(|x: $t, y: $t| x / y),
            FloorDivide => $apply!(|x: $t, y: $t| (x / y).floor()),
            Remainder => $apply!(|x: $t, y: $t| {
                let r = x % y;
                if r != 0.0 && ((r < 0.0) != (y < 0.0)) { r + y } else { r }
            }),
            Power => $apply!(|x: $t, y: $t| x.powf(y)),
            Maximum => $apply!(|x: $t, y: $t| if x > y || x.is_nan() { x } else { y }),
            Minimum => $apply!(|x: $t, y: $t| if x < y || x.is_nan() { x } else { y }),
            ArcTan2 => $apply!(|x: $t, y: $t| x.atan2(y)),
            LogAddExp => $apply!(|x: $t, y: $t| x.log_add_exp(y)),
            _ => return Err(not_defined($op.name(), <$t>::DTYPE)),
        }
    }};
}

macro_rules! float_scalar {
    // Each transcendental comes as two paths: for baseline loops, and for loops built with FMA.
    ($t:ty, $exp:path | $exp_fma:path, $expm1:path | $expm1_fma:path, $log:path | $log_fma:path, $log1p:path | $log1p_fma:path, $tanh:path | $tanh_fma:path, $sigmoid:path | $sigmoid_fma:path, $erf:path | $erf_fma:path, $erfinv:path | $erfinv_fma:path) => {
        impl Scalar for $t {
            unsafe fn unary(op: UnaryOp, x: *const $t, o: *mut $t, n: usize) -> Result<()> {
                use UnaryOp::*;
                match op {
                    Abs => map1(x, o, n, |v: $t| v.abs()),
                    Negative => map1(x, o, n, |v: $t| -v),
                    Sign => map1(x, o, n, |v: $t| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { v }),
                    Exp => map1_inlined!($t, x, o, n, $exp, $exp_fma),
                    Expm1 => map1_inlined!($t, x, o, n, $expm1, $expm1_fma),
                    Log => map1_inlined!($t, x, o, n, $log, $log_fma),
                    Log1p => map1_inlined!($t, x, o, n, $log1p, $log1p_fma),
                    Log2 => map1(x, o, n, |v: $t| v.log2()),
                    Log10 => map1(x, o, n, |v: $t| v.log10()),
                    Sqrt => map1(x, o, n, |v: $t| v.sqrt()),
                    Rsqrt => map1(x, o, n, |v: $t| 1.0 / v.sqrt()),
                    Square => map1(x, o, n, |v: $t| v * v),
                    Reciprocal => map1(x, o, n, |v: $t| 1.0 / v),
                    Sin => map1(x, o, n, |v: $t| v.sin()),
                    Cos => map1(x, o, n, |v: $t| v.cos()),
                    Tan => map1(x, o, n, |v: $t| v.tan()),
                    ArcSin => map1(x, o, n, |v: $t| v.asin()),
                    ArcCos => map1(x, o, n, |v: $t| v.acos()),
                    ArcTan => map1(x, o, n, |v: $t| v.atan()),
                    Sinh => map1(x, o, n, |v: $t| v.sinh()),
                    Cosh => map1(x, o, n, |v: $t| v.cosh()),
                    Tanh => map1_inlined!($t, x, o, n, $tanh, $tanh_fma),
                    ArcSinh => map1(x, o, n, |v: $t| v.asinh()),
                    ArcCosh => map1(x, o, n, |v: $t| v.acosh()),
                    ArcTanh => map1(x, o, n, |v: $t| v.atanh()),
                    Erf => map1_inlined!($t, x, o, n, $erf, $erf_fma),
                    ErfInv => map1_inlined!($t, x, o, n, $erfinv, $erfinv_fma),
                    Sigmoid => map1_inlined!($t, x, o, n, $sigmoid, $sigmoid_fma),
                    Floor => map1(x, o, n, |v: $t| v.floor()),
                    Ceil => map1(x, o, n, |v: $t| v.ceil()),
                    Round => map1(x, o, n, |v: $t| v.round_ties_even()),
                    BitwiseInvert | LogicalNot | IsNan | IsInf | IsPosInf | IsNegInf | IsFinite | Conjugate | Real | Imag => {
                        return Err(not_defined(op.name(), <$t>::DTYPE))
                    }
                }
                Ok(())
            }

            unsafe fn predicate(op: UnaryOp, x: *const $t, o: *mut bool, n: usize) -> Result<()> {
                use UnaryOp::*;
                match op {
                    LogicalNot => map1(x, o, n, |v: $t| v == 0.0),
                    IsNan => map1(x, o, n, |v: $t| v.is_nan()),
                    IsInf => map1(x, o, n, |v: $t| v.is_infinite()),
                    IsPosInf => map1(x, o, n, |v: $t| v == <$t>::INFINITY),
                    IsNegInf => map1(x, o, n, |v: $t| v == <$t>::NEG_INFINITY),
                    IsFinite => map1(x, o, n, |v: $t| v.is_finite()),
                    _ => return Err(not_defined(op.name(), <$t>::DTYPE)),
                }
                Ok(())
            }

            binary_methods!($t, float_binary_ops);
        }
    };
}

float_scalar!(f32, exp_f32::<Unfused> | exp_f32::<Fused>, expm1_f32::<Unfused> | expm1_f32::<Fused>,
    log_f32::<Unfused> | log_f32::<Fused>, log1p_f32::<Unfused> | log1p_f32::<Fused>,
    tanh_f32::<Unfused> | tanh_f32::<Fused>, sigmoid_f32::<Unfused> | sigmoid_f32::<Fused>,
    erf_f32::<Unfused> | erf_f32::<Fused>, erfinv_f32::<Unfused> | erfinv_f32::<Fused>);
float_scalar!(f64, f64::exp | f64::exp, f64::exp_m1 | f64::exp_m1, f64::ln | f64::ln, f64::ln_1p | f64::ln_1p,
    f64::tanh | f64::tanh, sigmoid_f64 | sigmoid_f64, math::erf_f64 | math::erf_f64,
    math::erfinv_f64 | math::erfinv_f64);

/// The logistic function for f64, stable on both sides (see `math::sigmoid_f32`).
fn sigmoid_f64(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 { r } else { e * r }
}

/// Runs `$apply!(closure)` with the closure of integer binary op `$op` on `$t` (`$signed` says
/// whether `$t` is signed).
macro_rules! int_binary_ops {
    ($t:ty, $signed:expr, $op:expr, $apply:ident) => {{
        use BinaryOp::*;
        const BITS: $t = (std::mem::size_of::<$t>() * 8) as $t;
        match $op {
            Add => $apply!(|x: $t, y: $t| x.wrapping_add(y)),
            Subtract => $apply!(|x: $t, y: $t| x.wrapping_sub(y)),
            Multiply => $apply!(|x: $t, y: $t| x.wrapping_mul(y)),
            FloorDivide => $apply!(|x: $t, y: $t| {
                if y == (0 as $t) { return 0 as $t; }
                let q = x.wrapping_div(y);
                if $signed && (x.wrapping_rem(y) != (0 as $t)) && ((x < (0 as $t)) != (y < (0 as $t))) {
                    q.wrapping_sub(1)
                } else { q }
            }),
            Remainder => $apply!(|x: $t, y: $t| {
                if y == (0 as $t) { return 0 as $t; }
                let r = x.wrapping_rem(y);
                if $signed && r != (0 as $t) && ((r < (0 as $t)) != (y < (0 as $t))) { r.wrapping_add(y) } else { r }
            }),
            Power => $apply!(|x: $t, y: $t| int_pow(x, y)),
            Maximum => $apply!(|x: $t, y: $t| if x > y { x } else { y }),
            Minimum => $apply!(|x: $t, y: $t| if x < y { x } else { y }),
            BitwiseAnd => $apply!(|x: $t, y: $t| x & y),
            BitwiseOr => $apply!(|x: $t, y: $t| x | y),
            BitwiseXor => $apply!(|x: $t, y: $t| x ^ y),
            LeftShift => $apply!(|x: $t, y: $t| {
                if y < (0 as $t) || y >= BITS { 0 as $t } else { x << y }
            }),
            RightShift => $apply!(|x: $t, y: $t| {
                if y < (0 as $t) || y >= BITS {
                    if x < (0 as $t) { (0 as $t).wrapping_sub(1) } else { 0 as $t }
                } else { x >> y }
            }),
            _ => return Err(not_defined($op.name(), <$t>::DTYPE)),
        }
    }};
}

macro_rules! int_scalar {
    ($t:ty, $signed:expr) => {
        impl Scalar for $t {
            unsafe fn unary(op: UnaryOp, x: *const $t, o: *mut $t, n: usize) -> Result<()> {
                use UnaryOp::*;
                match op {
                    Abs => map1(x, o, n, |v: $t| if $signed && v < (0 as $t) { v.wrapping_neg() } else { v }),
                    Negative => map1(x, o, n, |v: $t| v.wrapping_neg()),
                    Sign => map1(x, o, n, |v: $t| {
                        if v > (0 as $t) { 1 as $t } else if v == (0 as $t) { 0 as $t } else { (0 as $t).wrapping_sub(1) }
                    }),
                    Square => map1(x, o, n, |v: $t| v.wrapping_mul(v)),
                    Floor | Ceil | Round => map1(x, o, n, |v: $t| v),
                    BitwiseInvert => map1(x, o, n, |v: $t| !v),
                    _ => return Err(not_defined(op.name(), <$t>::DTYPE)),
                }
                Ok(())
            }

            binary_methods!($t, int_binary_ops, $signed);
        }
    };
}

/// Integer power by squaring with wrapping; a negative exponent gives 0, as in mlx.
#[inline(always)]
fn int_pow<T>(base: T, exp: T) -> T
where
    T: Copy + PartialOrd + From<bool> + WrappingInt,
{
    let zero = T::from(false);
    let one = T::from(true);
    if exp < zero {
        return zero;
    }
    let mut result = one;
    let mut b = base;
    let mut e = exp;
    while e > zero {
        if e.odd() {
            result = result.wmul(b);
        }
        b = b.wmul(b);
        e = e.half();
    }
    result
}

/// The integer operations [`int_pow`] needs.
pub trait WrappingInt {
    /// Wrapping multiply.
    fn wmul(self, o: Self) -> Self;
    /// Whether odd.
    fn odd(self) -> bool;
    /// Shift right by one.
    fn half(self) -> Self;
}

macro_rules! impl_ints {
    ($($t:ty => $signed:expr),*) => {$(
        impl WrappingInt for $t {
            #[inline(always)]
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn odd(self) -> bool { self & 1 == 1 }
            #[inline(always)]
            fn half(self) -> Self { self >> 1 }
        }
        int_scalar!($t, $signed);
    )*};
}
// `0 - 1` on unsigned types in int_pow is only reached when `exp < 0`, impossible for unsigned.
impl_ints!(i8 => true, i16 => true, i32 => true, i64 => true, u8 => false, u16 => false, u32 => false, u64 => false);

/// Runs `$apply!(closure)` with the closure of boolean binary op `$op`.
macro_rules! bool_binary_ops {
    ($t:ty, $op:expr, $apply:ident) => {{
        use BinaryOp::*;
        match $op {
            Add | Maximum | BitwiseOr => $apply!(|x: bool, y: bool| x | y),
            Multiply | Minimum | BitwiseAnd => $apply!(|x: bool, y: bool| x & y),
            BitwiseXor | NotEqual => $apply!(|x: bool, y: bool| x ^ y),
            _ => return Err(not_defined($op.name(), crate::Dtype::Bool)),
        }
    }};
}

impl Scalar for bool {
    unsafe fn unary(op: UnaryOp, x: *const bool, o: *mut bool, n: usize) -> Result<()> {
        match op {
            UnaryOp::Abs | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Square => {
                map1(x, o, n, |v: bool| v)
            }
            UnaryOp::BitwiseInvert => map1(x, o, n, |v: bool| !v),
            _ => return Err(not_defined(op.name(), crate::Dtype::Bool)),
        }
        Ok(())
    }

    binary_methods!(bool, bool_binary_ops);
}

/// A storage type and the type it is computed in: float16 and bfloat16 compute in float32, every
/// other type in itself.
pub trait Compute: Element {
    /// The compute type.
    type C: Scalar;
    /// Whether loads and stores convert (false when `C` is `Self`).
    const CONVERTS: bool;
    /// Converts `n` elements to the compute type.
    ///
    /// # Safety
    /// Pointers valid for n elements.
    unsafe fn load(src: *const Self, dst: *mut Self::C, n: usize);
    /// Converts `n` elements from the compute type.
    ///
    /// # Safety
    /// Pointers valid for n elements.
    unsafe fn store(src: *const Self::C, dst: *mut Self, n: usize);
}

macro_rules! compute_self {
    ($($t:ty),*) => {$(
        impl Compute for $t {
            type C = $t;
            const CONVERTS: bool = false;
            unsafe fn load(src: *const $t, dst: *mut $t, n: usize) { std::ptr::copy(src, dst, n) }
            unsafe fn store(src: *const $t, dst: *mut $t, n: usize) { std::ptr::copy(src, dst, n) }
        }
    )*};
}
compute_self!(bool, u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// float16 converts through `half`'s slice functions, which use the F16C instructions when the
/// CPU has them (checked at run time); element by element, the check and call cost 5x.
impl Compute for f16 {
    type C = f32;
    const CONVERTS: bool = true;
    unsafe fn load(src: *const f16, dst: *mut f32, n: usize) {
        use half::slice::HalfFloatSliceExt;
        std::slice::from_raw_parts(src, n).convert_to_f32_slice(std::slice::from_raw_parts_mut(dst, n))
    }
    unsafe fn store(src: *const f32, dst: *mut f16, n: usize) {
        use half::slice::HalfFloatSliceExt;
        std::slice::from_raw_parts_mut(dst, n).convert_from_f32_slice(std::slice::from_raw_parts(src, n))
    }
}

/// bfloat16 is the top half of a float32: its conversions are bit operations that vectorise.
impl Compute for bf16 {
    type C = f32;
    const CONVERTS: bool = true;
    unsafe fn load(src: *const bf16, dst: *mut f32, n: usize) {
        map1(src, dst, n, |v: bf16| v.to_f32())
    }
    unsafe fn store(src: *const f32, dst: *mut bf16, n: usize) {
        map1(src, dst, n, bf16::from_f32)
    }
}

/// Conversion between compute types with `astype` semantics: floats to integers truncate and
/// saturate (NaN gives 0), integers wrap, anything to bool is `!= 0`.
pub trait CastTo<U> {
    /// Converts one value.
    fn cast(self) -> U;
}

macro_rules! cast_numeric {
    ($($from:ty),*) => {$(
        cast_numeric!(@to $from; u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);
        impl CastTo<bool> for $from {
            #[inline(always)]
            fn cast(self) -> bool { self != (0 as $from) }
        }
        impl CastTo<$from> for bool {
            #[inline(always)]
            fn cast(self) -> $from { self as u8 as $from }
        }
    )*};
    (@to $from:ty; $($to:ty),*) => {$(
        impl CastTo<$to> for $from {
            #[inline(always)]
            fn cast(self) -> $to { self as $to }
        }
    )*};
}
cast_numeric!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl CastTo<bool> for bool {
    #[inline(always)]
    fn cast(self) -> bool {
        self
    }
}
