//! The element type of complex64 arrays and its arithmetic.
//!
//! A `Complex64` is two float32s, real then imaginary, laid out as numpy's and mlx's complex64 (so
//! buffers cross to numpy and DLPack unchanged). Every operation computes in float64 and rounds
//! each part once to float32: products and quotients of float32 parts cannot overflow or lose
//! bits in float64 before that rounding, so no scaling tricks (Smith's division) are needed.

use crate::dtype::Element;
use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A complex number of two float32 parts: the element of complex64 arrays.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq)]
pub struct Complex64 {
    /// The real part.
    pub re: f32,
    /// The imaginary part.
    pub im: f32,
}

/// A float64 complex number: the precision every complex64 operation computes in, and the
/// accumulator of complex reductions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Wide {
    pub(crate) re: f64,
    pub(crate) im: f64,
}

impl Wide {
    /// `z` widened exactly.
    pub(crate) fn of(z: Complex64) -> Wide {
        Wide { re: z.re as f64, im: z.im as f64 }
    }
    /// Each part rounded to float32.
    pub(crate) fn narrow(self) -> Complex64 {
        Complex64::new(self.re as f32, self.im as f32)
    }
    pub(crate) fn add(self, o: Wide) -> Wide {
        Wide { re: self.re + o.re, im: self.im + o.im }
    }
    pub(crate) fn mul(self, o: Wide) -> Wide {
        Wide { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
    fn div(self, o: Wide) -> Wide {
        let d = o.re * o.re + o.im * o.im;
        Wide { re: (self.re * o.re + self.im * o.im) / d, im: (self.im * o.re - self.re * o.im) / d }
    }
    fn exp(self) -> Wide {
        let m = self.re.exp();
        // exp(x + 0i) is real even where exp(x) is infinite (inf * sin(0) would be NaN).
        if self.im == 0.0 {
            return Wide { re: m, im: self.im };
        }
        Wide { re: m * self.im.cos(), im: m * self.im.sin() }
    }
    fn ln(self) -> Wide {
        Wide { re: self.re.hypot(self.im).ln(), im: self.im.atan2(self.re) }
    }
    /// The principal square root (branch cut along the negative real axis, the sign of a zero
    /// imaginary part choosing the side, as C99's csqrt).
    fn sqrt(self) -> Wide {
        if self.re == 0.0 && self.im == 0.0 {
            return Wide { re: 0.0, im: self.im };
        }
        if self.im.is_infinite() {
            return Wide { re: f64::INFINITY, im: self.im };
        }
        let r = self.re.hypot(self.im);
        let t = ((r + self.re.abs()) / 2.0).sqrt();
        if self.re >= 0.0 {
            Wide { re: t, im: self.im / (2.0 * t) }
        } else {
            Wide { re: self.im.abs() / (2.0 * t), im: t.copysign(self.im) }
        }
    }
    fn sin(self) -> Wide {
        Wide { re: self.re.sin() * self.im.cosh(), im: self.re.cos() * self.im.sinh() }
    }
    fn cos(self) -> Wide {
        Wide { re: self.re.cos() * self.im.cosh(), im: -(self.re.sin() * self.im.sinh()) }
    }
    fn sinh(self) -> Wide {
        Wide { re: self.re.sinh() * self.im.cos(), im: self.re.cosh() * self.im.sin() }
    }
    fn cosh(self) -> Wide {
        Wide { re: self.re.cosh() * self.im.cos(), im: self.re.sinh() * self.im.sin() }
    }
    /// tan(x + iy) = (sin 2x + i sinh 2y) / (cos 2x + cosh 2y), which stays finite for large |y|
    /// where sin/cos would divide infinities.
    fn tan(self) -> Wide {
        let (x2, y2) = (2.0 * self.re, 2.0 * self.im);
        if y2.abs() > 700.0 {
            return Wide { re: 0.0, im: 1f64.copysign(y2) };
        }
        let d = x2.cos() + y2.cosh();
        Wide { re: x2.sin() / d, im: y2.sinh() / d }
    }
    /// arcsin z = -i ln(iz + sqrt(1 - z²)), numpy's principal value.
    fn asin(self) -> Wide {
        let one = Wide { re: 1.0, im: 0.0 };
        let root = one.sub(self.mul(self)).sqrt();
        let iz = Wide { re: -self.im, im: self.re };
        iz.add(root).ln().times_minus_i()
    }
    /// arccos z = -i ln(z + i sqrt(1 - z²)).
    fn acos(self) -> Wide {
        let one = Wide { re: 1.0, im: 0.0 };
        let root = one.sub(self.mul(self)).sqrt();
        self.add(Wide { re: -root.im, im: root.re }).ln().times_minus_i()
    }
    /// arctan z = (i/2) (ln(1 - iz) - ln(1 + iz)).
    fn atan(self) -> Wide {
        let one = Wide { re: 1.0, im: 0.0 };
        let iz = Wide { re: -self.im, im: self.re };
        let d = one.sub(iz).ln().sub(one.add(iz).ln());
        Wide { re: -d.im / 2.0, im: d.re / 2.0 }
    }
    fn times_minus_i(self) -> Wide {
        Wide { re: self.im, im: -self.re }
    }
    fn sub(self, o: Wide) -> Wide {
        Wide { re: self.re - o.re, im: self.im - o.im }
    }
    /// tanh(z) = -i tan(iz).
    fn tanh(self) -> Wide {
        let t = Wide { re: -self.im, im: self.re }.tan();
        Wide { re: t.im, im: -t.re }
    }
}

impl Complex64 {
    /// `re + im·i`.
    pub const fn new(re: f32, im: f32) -> Complex64 {
        Complex64 { re, im }
    }
    /// The complex conjugate `re - im·i`.
    pub fn conj(self) -> Complex64 {
        Complex64::new(self.re, -self.im)
    }
    /// The magnitude |z|, without overflow in the squares.
    pub fn abs(self) -> f32 {
        (self.re as f64).hypot(self.im as f64) as f32
    }
    /// ln(1 + z), accurate for small z (1 + z is exact in float64 for float32 parts of z).
    pub fn ln_1p(self) -> Complex64 {
        Wide { re: 1.0 + self.re as f64, im: self.im as f64 }.ln().narrow()
    }
    /// The principal logarithm in `base` (2 or 10 for log2, log10).
    pub fn log_base(self, base: f64) -> Complex64 {
        let l = Wide::of(self).ln();
        let k = base.ln();
        Complex64::new((l.re / k) as f32, (l.im / k) as f32)
    }
    /// 1 / sqrt(z).
    pub fn rsqrt(self) -> Complex64 {
        Wide { re: 1.0, im: 0.0 }.div(Wide::of(self).sqrt()).narrow()
    }
    /// 1 / z.
    pub fn recip(self) -> Complex64 {
        Wide { re: 1.0, im: 0.0 }.div(Wide::of(self)).narrow()
    }
    /// z².
    pub fn square(self) -> Complex64 {
        self * self
    }
    /// Each part rounded to the nearest integer, ties to even (numpy's `round` of complex).
    pub fn round(self) -> Complex64 {
        Complex64::new(self.re.round_ties_even(), self.im.round_ties_even())
    }
    /// z / |z| (0 for 0), numpy 2's and mlx's sign of a complex number.
    pub fn sign(self) -> Complex64 {
        let w = Wide::of(self);
        let m = w.re.hypot(w.im);
        if m == 0.0 || m.is_nan() {
            return if m == 0.0 { Complex64::default() } else { Complex64::new(f32::NAN, f32::NAN) };
        }
        Complex64::new((w.re / m) as f32, (w.im / m) as f32)
    }
    /// The principal value of `self` raised to `e`: exp(e·ln(self)), with 0^e = 0 for e of positive
    /// real part and 0^0 = 1, as numpy.
    pub fn powc(self, e: Complex64) -> Complex64 {
        if e.re == 0.0 && e.im == 0.0 {
            return Complex64::new(1.0, 0.0);
        }
        if self.re == 0.0 && self.im == 0.0 {
            return if e.re > 0.0 { Complex64::default() } else { Complex64::new(f32::NAN, f32::NAN) };
        }
        Wide::of(e).mul(Wide::of(self).ln()).exp().narrow()
    }
    /// ln(e^self + e^o), shifted by the operand of larger real part so the exponentials cannot
    /// overflow.
    pub fn logaddexp(self, o: Complex64) -> Complex64 {
        let (big, small) = if self.re >= o.re || o.is_nan() { (self, o) } else { (o, self) };
        if big.re.is_infinite() || big.is_nan() {
            return if self.is_nan() || o.is_nan() { Complex64::new(f32::NAN, f32::NAN) } else { big };
        }
        let (b, s) = (Wide::of(big), Wide::of(small));
        let e = s.sub(b).exp();
        Wide { re: 1.0 + e.re, im: e.im }.ln().add(b).narrow()
    }
    /// True when either part is NaN.
    pub fn is_nan(self) -> bool {
        self.re.is_nan() || self.im.is_nan()
    }
    /// True when either part is infinite.
    pub fn is_infinite(self) -> bool {
        self.re.is_infinite() || self.im.is_infinite()
    }
    /// True when both parts are finite.
    pub fn is_finite(self) -> bool {
        self.re.is_finite() && self.im.is_finite()
    }
}

/// Complex64 methods that compute a [`Wide`] function and round its parts once.
macro_rules! in_float64 {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        impl Complex64 {
            $(
                $(#[$doc])*
                pub fn $name(self) -> Complex64 {
                    Wide::of(self).$name().narrow()
                }
            )*
        }
    };
}

in_float64! {
    /// e^z.
    exp,
    /// The principal natural logarithm.
    ln,
    /// The principal square root.
    sqrt,
    /// sin z.
    sin,
    /// cos z.
    cos,
    /// tan z.
    tan,
    /// sinh z.
    sinh,
    /// cosh z.
    cosh,
    /// tanh z.
    tanh,
    /// arcsin z (principal value; branch cuts on the real axis beyond ±1).
    asin,
    /// arccos z (principal value; branch cuts on the real axis beyond ±1).
    acos,
    /// arctan z (principal value; branch cuts on the imaginary axis beyond ±i).
    atan,
}

impl Add for Complex64 {
    type Output = Complex64;
    fn add(self, o: Complex64) -> Complex64 {
        Complex64::new(self.re + o.re, self.im + o.im)
    }
}

impl Sub for Complex64 {
    type Output = Complex64;
    fn sub(self, o: Complex64) -> Complex64 {
        Complex64::new(self.re - o.re, self.im - o.im)
    }
}

impl Mul for Complex64 {
    type Output = Complex64;
    fn mul(self, o: Complex64) -> Complex64 {
        Wide::of(self).mul(Wide::of(o)).narrow()
    }
}

impl Div for Complex64 {
    type Output = Complex64;
    fn div(self, o: Complex64) -> Complex64 {
        Wide::of(self).div(Wide::of(o)).narrow()
    }
}

impl Neg for Complex64 {
    type Output = Complex64;
    fn neg(self) -> Complex64 {
        Complex64::new(-self.re, -self.im)
    }
}

/// Complex numbers order by real part, then imaginary part, as numpy sorts and compares them; a
/// NaN in either part is unordered.
/// numpy's lexicographic order (real parts first); a NaN in either part is unordered.
impl PartialOrd for Wide {
    fn partial_cmp(&self, o: &Wide) -> Option<std::cmp::Ordering> {
        if self.re.is_nan() || self.im.is_nan() || o.re.is_nan() || o.im.is_nan() {
            return None;
        }
        match self.re.partial_cmp(&o.re)? {
            std::cmp::Ordering::Equal => self.im.partial_cmp(&o.im),
            unequal => Some(unequal),
        }
    }
}

/// The order of the exactly widened values ([`Wide`]'s lexicographic order).
impl PartialOrd for Complex64 {
    fn partial_cmp(&self, o: &Complex64) -> Option<std::cmp::Ordering> {
        Wide::of(*self).partial_cmp(&Wide::of(*o))
    }
}

impl fmt::Debug for Complex64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:+}j", self.re, self.im)
    }
}

impl Element for Complex64 {
    const DTYPE: crate::Dtype = crate::Dtype::C64;
    /// The real part, as numpy's conversion of complex to real does (dropping the imaginary part).
    fn to_f64(self) -> f64 {
        self.re as f64
    }
    fn from_f64(v: f64) -> Self {
        Complex64::new(v as f32, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Complex64, re: f64, im: f64) -> bool {
        let tol = |x: f64| 1e-6 * x.abs().max(1.0);
        (a.re as f64 - re).abs() <= tol(re) && (a.im as f64 - im).abs() <= tol(im)
    }

    #[test]
    fn arithmetic_and_functions_match_closed_forms() {
        let z = Complex64::new(3.0, -4.0);
        assert_eq!(z.abs(), 5.0);
        assert!(close(z * z, -7.0, -24.0));
        assert!(close(z / Complex64::new(0.0, 1.0), -4.0, -3.0));
        assert!(close(z.sqrt() * z.sqrt(), 3.0, -4.0));
        assert!(close(Complex64::new(-4.0, 0.0).sqrt(), 0.0, 2.0));
        assert!(close(Complex64::new(-4.0, -0.0).sqrt(), 0.0, -2.0));
        // e^{iπ} = -1; ln(-1) = iπ
        assert!(close(Complex64::new(0.0, std::f32::consts::PI).exp(), -1.0, 0.0));
        assert!(close(Complex64::new(-1.0, 0.0).ln(), 0.0, std::f64::consts::PI));
        // sin² + cos² = 1 off the real line
        let w = Complex64::new(0.7, 1.3);
        let one = w.sin() * w.sin() + w.cos() * w.cos();
        assert!(close(one, 1.0, 0.0), "{one:?}");
        assert!(close(w.tan(), (w.sin() / w.cos()).re as f64, (w.sin() / w.cos()).im as f64));
        assert!(close(w.tanh(), (w.sinh() / w.cosh()).re as f64, (w.sinh() / w.cosh()).im as f64));
        assert!(close(Complex64::new(0.0, 1.0).powc(Complex64::new(2.0, 0.0)), -1.0, 0.0));
        assert!(close(Complex64::new(0.0, 1000.0).tan(), 0.0, 1.0));
        // sin(arcsin w) = w, cos(arccos w) = w, tan(arctan w) = w; numpy's values on branch cuts.
        for f in [|v: Complex64| v.asin().sin(), |v: Complex64| v.acos().cos(), |v: Complex64| v.atan().tan()] {
            assert!(close(f(w), 0.7, 1.3));
        }
        assert!(close(Complex64::new(-8.0, 0.0).asin(), -std::f64::consts::FRAC_PI_2, 2.768659383));
        assert!(close(Complex64::new(-8.0, 0.0).acos(), std::f64::consts::PI, -2.768659383));
        assert!(close(Complex64::new(0.0, 9.0).atan(), std::f64::consts::FRAC_PI_2, 0.111571776));
    }
}
