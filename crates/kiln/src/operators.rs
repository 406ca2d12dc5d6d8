//! Operator overloads (`+ - * / % & | ^ << >>`, unary `-` and `!`) on arrays and Rust numbers.
//!
//! # Panics
//! Operators cannot return `Result`, so they panic with kiln's error message (for example
//! "add: cannot broadcast shapes (2, 3) and (4,)") when the op fails. Use the functions in
//! [`crate::ops`] for the fallible form.

use crate::array::Array;
use crate::ops::{self, AsArray};
use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Rem, Shl, Shr, Sub};

fn expect(r: crate::Result<Array>) -> Array {
    r.unwrap_or_else(|e| panic!("{e}"))
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $f:path) => {
        impl<R: AsArray> $trait<R> for &Array {
            type Output = Array;
            fn $method(self, rhs: R) -> Array {
                expect($f(self, rhs))
            }
        }
        impl<R: AsArray> $trait<R> for Array {
            type Output = Array;
            fn $method(self, rhs: R) -> Array {
                expect($f(&self, rhs))
            }
        }
        binary_operator!(@scalar $trait, $method, $f, f64, f32, i64, i32);
    };
    (@scalar $trait:ident, $method:ident, $f:path, $($t:ty),*) => {$(
        impl $trait<&Array> for $t {
            type Output = Array;
            fn $method(self, rhs: &Array) -> Array {
                expect($f(self, rhs))
            }
        }
        impl $trait<Array> for $t {
            type Output = Array;
            fn $method(self, rhs: Array) -> Array {
                expect($f(self, &rhs))
            }
        }
    )*};
}

binary_operator!(Add, add, ops::add);
binary_operator!(Sub, sub, ops::subtract);
binary_operator!(Mul, mul, ops::multiply);
binary_operator!(Div, div, ops::divide);
binary_operator!(Rem, rem, ops::remainder);
binary_operator!(BitAnd, bitand, ops::bitwise_and);
binary_operator!(BitOr, bitor, ops::bitwise_or);
binary_operator!(BitXor, bitxor, ops::bitwise_xor);
binary_operator!(Shl, shl, ops::left_shift);
binary_operator!(Shr, shr, ops::right_shift);

impl Neg for &Array {
    type Output = Array;
    fn neg(self) -> Array {
        expect(ops::negative(self))
    }
}

impl Neg for Array {
    type Output = Array;
    fn neg(self) -> Array {
        expect(ops::negative(&self))
    }
}

/// `!x` is logical not for bool arrays and bitwise invert for integers.
impl Not for &Array {
    type Output = Array;
    fn not(self) -> Array {
        expect(if self.dtype() == crate::Dtype::Bool { ops::logical_not(self) } else { ops::bitwise_invert(self) })
    }
}
