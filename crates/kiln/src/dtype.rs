//! Element types and the type-promotion rules of mlx.core.
//!
//! Promotion follows mlx's table (itself after JAX): booleans give way to anything, unsigned and
//! signed integers meet in the next wider signed type (uint64 with a signed type gives float32),
//! integers with floats give the float, float16 with bfloat16 gives float32, float64 wins over
//! every real dtype and complex64 over everything (float64 with complex64 gives complex64, as mlx).
//! Rust and Python scalars are *weak*: they take the dtype of the array they meet (see [`promote`]).

use half::{bf16, f16};
use std::fmt;

/// The element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    /// Complex numbers of two float32 parts (real, imaginary), as numpy's and mlx's complex64.
    C64,
}

/// The coarse category of a dtype, used by promotion and by op validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Bool,
    Unsigned,
    Signed,
    Float,
    Complex,
}

impl Dtype {
    /// Every real dtype (all but complex64), in promotion-table order: what the GPU's kernels
    /// and fused kernels handle, and what values read as one f64 each.
    pub const REAL: [Dtype; 13] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::F16,
        Dtype::BF16,
        Dtype::F32,
        Dtype::F64,
    ];

    /// Every dtype, in promotion-table order: the real ones, then complex64.
    pub const ALL: [Dtype; 14] = {
        let mut all = [Dtype::C64; 14];
        let mut i = 0;
        while i < Dtype::REAL.len() {
            all[i] = Dtype::REAL[i];
            i += 1;
        }
        all
    };

    /// The `<stdint.h>` name of an integer dtype (`uint8_t` ... `int64_t`), which the C and
    /// CUDA printers share; `None` for bool and floats.
    pub fn stdint_name(self) -> Option<&'static str> {
        Some(match self {
            Dtype::U8 => "uint8_t",
            Dtype::U16 => "uint16_t",
            Dtype::U32 => "uint32_t",
            Dtype::U64 => "uint64_t",
            Dtype::I8 => "int8_t",
            Dtype::I16 => "int16_t",
            Dtype::I32 => "int32_t",
            Dtype::I64 => "int64_t",
            Dtype::Bool | Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64 | Dtype::C64 => return None,
        })
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 | Dtype::C64 => 8,
        }
    }

    /// The mlx.core name (`float32`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::U8 => "uint8",
            Dtype::U16 => "uint16",
            Dtype::U32 => "uint32",
            Dtype::U64 => "uint64",
            Dtype::I8 => "int8",
            Dtype::I16 => "int16",
            Dtype::I32 => "int32",
            Dtype::I64 => "int64",
            Dtype::F16 => "float16",
            Dtype::BF16 => "bfloat16",
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::C64 => "complex64",
        }
    }

    /// Parses an mlx.core dtype name.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The dtype's category.
    pub fn category(self) -> Category {
        match self {
            Dtype::Bool => Category::Bool,
            Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64 => Category::Unsigned,
            Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 => Category::Signed,
            Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64 => Category::Float,
            Dtype::C64 => Category::Complex,
        }
    }

    /// True for the four floating-point dtypes.
    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    /// True for signed and unsigned integers (not bool).
    pub fn is_integer(self) -> bool {
        matches!(self.category(), Category::Signed | Category::Unsigned)
    }

    /// True for complex64.
    pub fn is_complex(self) -> bool {
        self == Dtype::C64
    }

    /// True for floats and complex64 (numpy's "inexact"): what ops that need fractions compute in.
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// True for unsigned integers.
    pub fn is_unsigned(self) -> bool {
        self.category() == Category::Unsigned
    }

    /// Whether this integer dtype holds `v` exactly (true for every non-integer dtype).
    pub fn holds_integer(self, v: i64) -> bool {
        match self {
            Dtype::I8 => i8::try_from(v).is_ok(),
            Dtype::I16 => i16::try_from(v).is_ok(),
            Dtype::I32 => i32::try_from(v).is_ok(),
            Dtype::U8 => u8::try_from(v).is_ok(),
            Dtype::U16 => u16::try_from(v).is_ok(),
            Dtype::U32 => u32::try_from(v).is_ok(),
            Dtype::U64 => v >= 0,
            _ => true,
        }
    }

    /// The dtype an op that needs floats (exp, divide, mean...) computes an input of this dtype in:
    /// floats and complex64 keep their dtype, everything else becomes float32, as in mlx.
    pub fn to_float(self) -> Dtype {
        if self.is_inexact() {
            self
        } else {
            Dtype::F32
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Promotes two strong dtypes with mlx.core's table.
pub fn promote_types(a: Dtype, b: Dtype) -> Dtype {
    use Category::{Float, Signed, Unsigned};
    use Dtype::{BF16, F16, F32, F64};
    if a == b {
        return a;
    }
    if a.is_complex() || b.is_complex() {
        return Dtype::C64;
    }
    match (a.category(), b.category()) {
        (Category::Bool, _) => b,
        (_, Category::Bool) => a,
        (Float, Float) => {
            if a == F64 || b == F64 {
                F64
            } else if a == F32 || b == F32 || (a == F16 && b == BF16) || (a == BF16 && b == F16) {
                F32
            } else {
                a
            }
        }
        (Float, _) => a,
        (_, Float) => b,
        (Unsigned, Unsigned) | (Signed, Signed) => {
            if a.size() >= b.size() {
                a
            } else {
                b
            }
        }
        (Unsigned, Signed) => promote_mixed_int(a, b),
        (Signed, Unsigned) => promote_mixed_int(b, a),
        (Category::Complex, _) | (_, Category::Complex) => Dtype::C64,
    }
}

/// An unsigned meets a signed integer: the smallest signed type holding both, float32 past int64.
fn promote_mixed_int(unsigned: Dtype, signed: Dtype) -> Dtype {
    let need = (unsigned.size() * 2).max(signed.size());
    match need {
        1 | 2 => Dtype::I16,
        4 => Dtype::I32,
        8 => Dtype::I64,
        _ => Dtype::F32,
    }
}

/// Promotes two operands, each with a weak flag (a scalar written in Rust or Python).
///
/// A weak operand adopts the other's dtype when its category fits (a weak int meeting float16 stays
/// float16; a weak float meeting float16 stays float16); a weak float meeting an integer or bool gives
/// float32; a weak int meeting bool gives int32. Two weak operands promote normally.
pub fn promote(a: Dtype, a_weak: bool, b: Dtype, b_weak: bool) -> Dtype {
    match (a_weak, b_weak) {
        (true, false) => adopt_weak(a, b),
        (false, true) => adopt_weak(b, a),
        _ => promote_types(a, b),
    }
}

fn adopt_weak(weak: Dtype, strong: Dtype) -> Dtype {
    match (weak.category(), strong.category()) {
        (Category::Float, Category::Float | Category::Complex) => strong,
        (Category::Float, _) => Dtype::F32,
        (Category::Complex, _) => Dtype::C64,
        (Category::Bool, _) => strong,
        (_, Category::Bool) => Dtype::I32,
        _ => strong,
    }
}

/// A Rust type that can be stored as array elements.
pub trait Element: Copy + Send + Sync + Default + PartialEq + fmt::Debug + 'static {
    /// The dtype of this element type.
    const DTYPE: Dtype;
    /// Converts to f64 (exact for every type but the 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 the way `astype` does: floats round, integers truncate and saturate.
    fn from_f64(v: f64) -> Self;
}

macro_rules! element_prim {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
element_prim!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
    i64 => I64, f32 => F32, f64 => F64);

impl Element for bool {
    const DTYPE: Dtype = Dtype::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f16_to_f32(self) as f64
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f32(f64_to_f32_round_odd(v))
    }
}

impl Element for bf16 {
    const DTYPE: Dtype = Dtype::BF16;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f32::from_bits((self.to_bits() as u32) << 16) as f64
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f32(f64_to_f32_round_odd(v))
    }
}

/// float16 to float32 with bit operations and one multiply, no branches or calls, so loops over
/// it (reductions, sorts) vectorise; `half`'s per-element conversion checks the CPU on every call.
/// The exponent and mantissa shifted into float32 position and scaled by 2^112 give every finite
/// value, subnormals included; infinities and NaNs keep an all-ones exponent.
#[inline(always)]
pub fn f16_to_f32(h: f16) -> f32 {
    let bits = h.to_bits() as u32;
    let sign = (bits & 0x8000) << 16;
    let magnitude = (bits & 0x7fff) << 13;
    let finite = f32::from_bits(magnitude) * f32::from_bits(0x7780_0000); // 2^112
    let special = f32::from_bits(magnitude | 0x7f80_0000);
    let v = if bits & 0x7c00 == 0x7c00 { special } else { finite };
    f32::from_bits(v.to_bits() | sign)
}

/// Rounds f64 to f32 *to odd* (truncate, then set the last bit if anything was cut off), so that
/// a second rounding to a type at least two bits narrower (float16, bfloat16) equals one direct
/// rounding. (The `half` crate's f64 conversions round twice or truncate first, which can turn a
/// value just above a tie into a tie.)
pub fn f64_to_f32_round_odd(v: f64) -> f32 {
    let t = v as f32;
    if !v.is_finite() || t as f64 == v {
        return t;
    }
    let mut bits = t.to_bits();
    if (t as f64).abs() > v.abs() {
        bits -= 1; // step toward zero: truncation
    }
    f32::from_bits(bits | 1)
}

/// Runs `$body` with the type alias `$T` bound to the Rust element type of `$dtype`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::Dtype::Bool => { type $T = bool; $body }
            $crate::Dtype::U8 => { type $T = u8; $body }
            $crate::Dtype::U16 => { type $T = u16; $body }
            $crate::Dtype::U32 => { type $T = u32; $body }
            $crate::Dtype::U64 => { type $T = u64; $body }
            $crate::Dtype::I8 => { type $T = i8; $body }
            $crate::Dtype::I16 => { type $T = i16; $body }
            $crate::Dtype::I32 => { type $T = i32; $body }
            $crate::Dtype::I64 => { type $T = i64; $body }
            $crate::Dtype::F16 => { type $T = half::f16; $body }
            $crate::Dtype::BF16 => { type $T = half::bf16; $body }
            $crate::Dtype::F32 => { type $T = f32; $body }
            $crate::Dtype::F64 => { type $T = f64; $body }
            $crate::Dtype::C64 => { type $T = $crate::Complex64; $body }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dtype::*;

    #[test]
    fn promotion_matches_mlx_table_samples() {
        assert_eq!(promote_types(U8, I8), I16);
        assert_eq!(promote_types(U16, I8), I32);
        assert_eq!(promote_types(U32, I32), I64);
        assert_eq!(promote_types(U64, I8), F32);
        assert_eq!(promote_types(F16, BF16), F32);
        assert_eq!(promote_types(I64, F16), F16);
        assert_eq!(promote_types(Bool, BF16), BF16);
        assert_eq!(promote_types(F64, BF16), F64);
        assert_eq!(promote_types(U64, U8), U64);
        for a in Dtype::ALL {
            for b in Dtype::ALL {
                assert_eq!(promote_types(a, b), promote_types(b, a), "{a} {b}");
            }
        }
    }

    #[test]
    fn float16_conversion_matches_half_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let (ours, theirs) = (f16_to_f32(h), h.to_f32());
            assert!(ours.to_bits() == theirs.to_bits() || ours.is_nan() && theirs.is_nan(), "{bits:#06x}: {ours} vs {theirs}");
        }
    }

    #[test]
    fn weak_scalars_adopt_the_array_dtype() {
        assert_eq!(promote(F16, false, F32, true), F16);
        assert_eq!(promote(I8, false, I32, true), I8);
        assert_eq!(promote(I8, false, F32, true), F32);
        assert_eq!(promote(Bool, false, I32, true), I32);
        assert_eq!(promote(I32, true, F32, true), F32);
    }
}
