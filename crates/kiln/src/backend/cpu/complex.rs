//! complex64 on the CPU: the scalar loops of the elementwise ops numpy defines for complex numbers,
//! conversions to and from the real dtypes, and the float64 accumulator of complex reductions.
//!
//! Every op goes through [`Complex64`]'s float64 arithmetic. Ops that are not defined for complex
//! numbers are refused by the op layer ([`crate::primitive::Op::infer`]); the errors here are a
//! second guard.

use super::reduce::{Domain, Int64};
use super::scalar::{against_scalar, compare_ops, not_defined, CastTo, Compute, Scalar};
use super::simd::{map1, map2};
use crate::complex::{Complex64, Wide};
use crate::dtype::Element;
use crate::error::Result;
use crate::primitive::{BinaryOp, ReduceOp, UnaryOp};


/// Runs `$apply!(closure)` with the closure of complex binary op `$op`.
macro_rules! complex_binary_ops {
    ($t:ty, $op:expr, $apply:ident) => {{
        use BinaryOp::*;
        match $op {
            Add => $apply!(|x: $t, y: $t| x + y),
            Subtract => $apply!(|x: $t, y: $t| x - y),
            Multiply => $apply!(|x: $t, y: $t| x * y),
            Divide => $apply!(|x: $t, y: $t| x / y),
            Power => $apply!(|x: $t, y: $t| x.powc(y)),
            LogAddExp => $apply!(|x: $t, y: $t| x.logaddexp(y)),
            // Lexicographic, as numpy's maximum and minimum of complex numbers: a NaN operand
            // (the first if both are) is the result.
            Maximum => $apply!(|x: $t, y: $t| if x.is_nan() || (!y.is_nan() && x >= y) { x } else { y }),
            Minimum => $apply!(|x: $t, y: $t| if x.is_nan() || (!y.is_nan() && x <= y) { x } else { y }),
            _ => return Err(not_defined($op.name(), <$t>::DTYPE)),
        }
    }};
}

impl Scalar for Complex64 {
    unsafe fn unary(op: UnaryOp, x: *const Complex64, o: *mut Complex64, n: usize) -> Result<()> {
        use UnaryOp::*;
        match op {
            Negative => map1(x, o, n, |v: Complex64| -v),
            Sign => map1(x, o, n, Complex64::sign),
            Exp => map1(x, o, n, Complex64::exp),
            Log => map1(x, o, n, Complex64::ln),
            Log1p => map1(x, o, n, Complex64::ln_1p),
            Log2 => map1(x, o, n, |v: Complex64| v.log_base(2.0)),
            Log10 => map1(x, o, n, |v: Complex64| v.log_base(10.0)),
            Sqrt => map1(x, o, n, Complex64::sqrt),
            Rsqrt => map1(x, o, n, Complex64::rsqrt),
            Square => map1(x, o, n, Complex64::square),
            Reciprocal => map1(x, o, n, Complex64::recip),
            Sin => map1(x, o, n, Complex64::sin),
            Cos => map1(x, o, n, Complex64::cos),
            Tan => map1(x, o, n, Complex64::tan),
            Sinh => map1(x, o, n, Complex64::sinh),
            Cosh => map1(x, o, n, Complex64::cosh),
            Tanh => map1(x, o, n, Complex64::tanh),
            ArcSin => map1(x, o, n, Complex64::asin),
            ArcCos => map1(x, o, n, Complex64::acos),
            ArcTan => map1(x, o, n, Complex64::atan),
            Round => map1(x, o, n, Complex64::round),
            Conjugate => map1(x, o, n, Complex64::conj),
            _ => return Err(not_defined(op.name(), Complex64::DTYPE)),
        }
        Ok(())
    }

    unsafe fn predicate(op: UnaryOp, x: *const Complex64, o: *mut bool, n: usize) -> Result<()> {
        match op {
            UnaryOp::LogicalNot => map1(x, o, n, |v: Complex64| v == Complex64::default()),
            UnaryOp::IsNan => map1(x, o, n, Complex64::is_nan),
            UnaryOp::IsInf => map1(x, o, n, Complex64::is_infinite),
            UnaryOp::IsFinite => map1(x, o, n, Complex64::is_finite),
            // Infinite, and above (below) zero in numpy's lexicographic order, as mlx.
            UnaryOp::IsPosInf => map1(x, o, n, |v: Complex64| v.is_infinite() && v > Complex64::default()),
            UnaryOp::IsNegInf => map1(x, o, n, |v: Complex64| v.is_infinite() && v < Complex64::default()),
            _ => return Err(not_defined(op.name(), Complex64::DTYPE)),
        }
        Ok(())
    }

    unsafe fn binary(op: BinaryOp, a: *const Complex64, b: *const Complex64, o: *mut Complex64, n: usize) -> Result<()> {
        macro_rules! arrays { ($f:expr) => { map2(a, b, o, n, $f) } }
        complex_binary_ops!(Complex64, op, arrays);
        Ok(())
    }

    unsafe fn binary_scalar(op: BinaryOp, a: *const Complex64, s: Complex64, scalar_first: bool, o: *mut Complex64, n: usize)
        -> Result<()> {
        macro_rules! with_scalar { ($f:expr) => { against_scalar!(Complex64, a, s, scalar_first, o, n, $f) } }
        complex_binary_ops!(Complex64, op, with_scalar);
        Ok(())
    }

    unsafe fn compare_scalar(op: BinaryOp, a: *const Complex64, s: Complex64, scalar_first: bool, o: *mut bool, n: usize)
        -> Result<()> {
        macro_rules! with_scalar { ($f:expr) => { against_scalar!(Complex64, a, s, scalar_first, o, n, $f) } }
        compare_ops!(Complex64, op, with_scalar);
        Ok(())
    }
}

/// The ops of a complex64 input with a float32 result: the magnitude and the two parts.
///
/// # Safety
/// Pointers valid for n elements.
pub(super) unsafe fn to_real(op: UnaryOp, x: *const Complex64, o: *mut f32, n: usize) -> Result<()> {
    match op {
        UnaryOp::Abs => map1(x, o, n, Complex64::abs),
        UnaryOp::Real => map1(x, o, n, |v: Complex64| v.re),
        UnaryOp::Imag => map1(x, o, n, |v: Complex64| v.im),
        _ => return Err(not_defined(op.name(), Complex64::DTYPE)),
    }
    Ok(())
}

impl Compute for Complex64 {
    type C = Complex64;
    const CONVERTS: bool = false;
    unsafe fn load(src: *const Complex64, dst: *mut Complex64, n: usize) {
        std::ptr::copy(src, dst, n)
    }
    unsafe fn store(src: *const Complex64, dst: *mut Complex64, n: usize) {
        std::ptr::copy(src, dst, n)
    }
}

/// Real values become complex with a zero imaginary part; complex values become real by dropping
/// the imaginary part (numpy's `astype`, and mlx's) and then convert as float32 would.
macro_rules! complex_casts {
    ($($t:ty),*) => {$(
        impl CastTo<Complex64> for $t {
            #[inline(always)]
            fn cast(self) -> Complex64 { Complex64::new(CastTo::<f32>::cast(self), 0.0) }
        }
        impl CastTo<$t> for Complex64 {
            #[inline(always)]
            fn cast(self) -> $t { CastTo::<$t>::cast(self.re) }
        }
    )*};
}
complex_casts!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl CastTo<Complex64> for bool {
    fn cast(self) -> Complex64 {
        Complex64::new(self as u8 as f32, 0.0)
    }
}

/// A complex number is true when either part is non-zero, as in numpy.
impl CastTo<bool> for Complex64 {
    fn cast(self) -> bool {
        self != Complex64::default()
    }
}

impl CastTo<Complex64> for Complex64 {
    fn cast(self) -> Complex64 {
        self
    }
}

/// Only for the type checker: complex reductions accumulate in [`Wide`], never in 64-bit integers.
impl Int64 for Complex64 {
    fn to_i64(self) -> i64 {
        self.re as i64
    }
    fn to_u64(self) -> u64 {
        self.re as u64
    }
    fn from_i64(v: i64) -> Self {
        Complex64::new(v as f32, 0.0)
    }
    fn from_u64(v: u64) -> Self {
        Complex64::new(v as f32, 0.0)
    }
}

/// Complex sums and products accumulate in float64 parts; max and min order lexicographically,
/// NaN propagating; all and any test "non-zero" (either part).
impl Domain for Wide {
    fn identity(op: ReduceOp) -> Wide {
        let re = match op {
            ReduceOp::Sum | ReduceOp::Any => 0.0,
            ReduceOp::Prod | ReduceOp::All => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
        };
        // Below (above) every complex number in the lexicographic order.
        let im = if op == ReduceOp::Max || op == ReduceOp::Min { re } else { 0.0 };
        Wide { re, im }
    }
    #[inline(always)]
    fn combine(op: ReduceOp, a: Wide, b: Wide) -> Wide {
        let nan = |w: Wide| w.re.is_nan() || w.im.is_nan();
        let truth = |t: bool| Wide { re: t as u8 as f64, im: 0.0 };
        let nonzero = |w: Wide| w.re != 0.0 || w.im != 0.0;
        match op {
            ReduceOp::Sum => a.add(b),
            ReduceOp::Prod => a.mul(b),
            ReduceOp::Max => if nan(a) || b < a { a } else { b },
            ReduceOp::Min => if nan(a) || a < b { a } else { b },
            ReduceOp::All => truth(nonzero(a) && nonzero(b)),
            ReduceOp::Any => truth(nonzero(a) || nonzero(b)),
        }
    }
}
