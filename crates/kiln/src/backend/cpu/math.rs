//! Scalar math for floats that std lacks (erf, erfinv) and float32 versions of the hot
//! transcendentals written without calls or data-dependent branches (every `if` here is a select
//! of two computed values), so loops over them vectorise; std's float32 functions are libm calls
//! that block vectorisation. Polynomial steps go through [`MulAdd`]: one fused multiply-add in
//! the loops built for AVX2+FMA, a multiply and an add in the baseline loops (where `mul_add` would
//! be a slow library call).
//! Accuracy is measured by the tests at the bottom against float64 references.
// Published polynomial coefficients keep all their digits; clamps are written as selects so
// NaN passes through and the loops stay branch-free.
#![allow(clippy::excessive_precision, clippy::manual_clamp)]

/// erf(x) for f64: the Maclaurin series below 2 and erfc's continued fraction (Lentz) above,
/// accurate to a few ulp. Scalar (not vectorised): float64 erf is not a hot path.
pub fn erf_f64(x: f64) -> f64 {
    let ax = x.abs();
    if x.is_nan() {
        x
    } else if ax < 2.0 {
        // Maclaurin series: erf x = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = x * x;
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            // `<=` so that zero and subnormal x (whose terms underflow to 0) stop too.
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if ax < 6.0 {
        // erfc via Lentz continued fraction.
        let erfc = erfc_cf(ax);
        (1.0 - erfc).copysign(x)
    } else {
        1.0f64.copysign(x)
    }
}

fn erfc_cf(x: f64) -> f64 {
    // erfc x = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    let mut f = x;
    let tiny = 1e-300;
    let mut c = x;
    let mut d = 0.0;
    for k in 1..200 {
        let a = k as f64 / 2.0;
        d = x + a * d;
        d = if d.abs() < tiny { tiny } else { d };
        c = x + a / c;
        c = if c.abs() < tiny { tiny } else { c };
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / (f * std::f64::consts::PI.sqrt())
}

/// Inverse error function for f64 by Newton iterations on erf.
pub fn erfinv_f64(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    // Initial guess (Giles), then Newton steps.
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.81022636e-08;
        for c in [3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
            -0.00417768164, 0.246640727, 1.50140941] {
            p = c + p * w;
        }
        p * y
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000200214257;
        for c in [0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
            0.00943887047, 1.00167406, 2.83297682] {
            p = c + p * w;
        }
        p * y
    };
    for _ in 0..3 {
        let err = erf_f64(x) - y;
        x -= err / (std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp());
    }
    x
}

/// ln(e^x + e^y), shifted by the larger operand so neither exponential overflows; infinities
/// and NaN pass through as numpy's `logaddexp` gives them. Elementwise `logaddexp` and the
/// `logcumsumexp` scan share it.
pub trait LogSpaceAdd {
    /// ln(e^self + e^y).
    fn log_add_exp(self, y: Self) -> Self;
}

macro_rules! log_add_exp {
    ($($t:ty),*) => {$(
        impl LogSpaceAdd for $t {
            #[inline]
            fn log_add_exp(self, y: $t) -> $t {
                let x = self;
                let m = if x > y { x } else { y };
                if m == <$t>::NEG_INFINITY || m == <$t>::INFINITY || m.is_nan() {
                    if x.is_nan() || y.is_nan() { <$t>::NAN } else { m }
                } else {
                    m + (-(x - y).abs()).exp().ln_1p()
                }
            }
        }
    )*};
}
log_add_exp!(f32, f64);

/// How a polynomial step computes `a * b + c`.
pub trait MulAdd {
    /// `a * b + c`.
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// `a * b + c` with one rounding: a single instruction where the loop is built with FMA.
pub struct Fused;

/// `a * b + c` as a multiply and an add: for loops built without FMA.
pub struct Unfused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// Horner's rule: `((c[0] x + c[1]) x + ...) + c[last]`.
#[inline(always)]
fn horner<M: MulAdd>(x: f32, c: &[f32]) -> f32 {
    let mut p = c[0];
    for &k in &c[1..] {
        p = M::mul_add(p, x, k);
    }
    p
}

/// n = x log2(e) rounded to the nearest integer (ties to even), by adding 1.5 * 2^23 in the same
/// multiply-add (valid for |n| < 2^22), as a float and as an integer read from the mantissa bits.
/// The integer is not `n as i32`: Rust's saturating float-to-int conversion compiles to per-lane
/// scalar code and keeps the loop from vectorising. NaN gives a NaN float and a meaningless
/// integer.
#[inline(always)]
fn round_log2e<M: MulAdd>(x: f32) -> (f32, i32) {
    const MAGIC: f32 = 12_582_912.0;
    let t = M::mul_add(x, std::f32::consts::LOG2_E, MAGIC);
    (t - MAGIC, (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32))
}

/// 2^e for an integer e in [-126, 127], built from the exponent bits.
#[inline(always)]
fn pow2i(e: i32) -> f32 {
    f32::from_bits((e.wrapping_add(127) as u32) << 23)
}

/// e^x for f32 (within 0.9 ulp with FMA, 1.17 without, over every float32): x = n ln2 + r with
/// |r| <= ln2/2, e^r by a degree-6 polynomial `1 + r + r^2 q(r)` (q fitted for least maximum
/// relative error on |r| <= 0.354, its coefficients rounded to float32: 6.2e-9, where Taylor's
/// of degree 6 is off by 1.9e-7), scaled by 2^n in two steps so subnormal results are right.
/// x is clamped to [-104, 89], just outside the range of finite non-zero results, so the scaling
/// itself overflows to infinity and underflows to zero there (no selects after the fact); NaN
/// passes the clamp.
#[inline(always)]
pub fn exp_f32<M: MulAdd>(x: f32) -> f32 {
    let xc = if x > 89.0 { 89.0 } else if x < -104.0 { -104.0 } else { x };
    let (n, ni) = round_log2e::<M>(xc);
    // n times the high part of ln 2 is exact, so the first step rounds once either way.
    let r = M::mul_add(n, -1.428_606_8e-6, xc - n * 0.693_145_75);
    let p = horner::<M>(r, &[1.381_145e-3, 8.370_237e-3, 4.166_853_8e-2, 1.666_650_8e-1, 4.999_999_4e-1, 1.0, 1.0]);
    let e1 = ni >> 1;
    p * pow2i(e1) * pow2i(ni.wrapping_sub(e1))
}

/// ln(x) for f32 (about 1 ulp): x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with
/// s = (m - 1) / (m + 1) by its odd series.
#[inline(always)]
pub fn log_f32<M: MulAdd>(x: f32) -> f32 {
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 127 - if sub { 23 } else { 0 };
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    let big = m > std::f32::consts::SQRT_2;
    m = if big { m * 0.5 } else { m };
    e += big as i32;
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let s2 = s * s;
    let q = horner::<M>(s2, &[2.0 / 9.0, 2.0 / 7.0, 2.0 / 5.0, 2.0 / 3.0]);
    let lm = f - s * (f - s2 * q); // 2s + s^3 q rewritten as f - s(f - s^2 q), since 2s = f - s f
    let ef = e as f32;
    let y = ef * 0.693_145_75 + (lm + ef * 1.428_606_8e-6);
    if x.is_nan() || x < 0.0 {
        f32::NAN
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        f32::INFINITY
    } else {
        y
    }
}

/// e^x - 1 for f32, accurate near 0 (Taylor below 0.5 in magnitude, exp(x) - 1 above).
#[inline(always)]
pub fn expm1_f32<M: MulAdd>(x: f32) -> f32 {
    let p = horner::<M>(x, &[1.0 / 362_880.0, 1.0 / 40_320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0,
        1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0]);
    let small = p * x;
    if x.abs() < 0.5 { small } else { exp_f32::<M>(x) - 1.0 }
}

/// ln(1 + x) for f32, accurate near 0: ln(u) * x / (u - 1) with u = 1 + x corrects the rounding
/// of u (Goldberg's method).
#[inline(always)]
pub fn log1p_f32<M: MulAdd>(x: f32) -> f32 {
    let u = 1.0 + x;
    let d = u - 1.0;
    let y = log_f32::<M>(u) * (x / d);
    if d == 0.0 { x } else if u == f32::INFINITY { f32::INFINITY } else { y }
}

/// tanh for f32: e / (e + 2) with e = expm1(2x), x clamped to +-9 where tanh rounds to +-1.
#[inline(always)]
pub fn tanh_f32<M: MulAdd>(x: f32) -> f32 {
    let xc = if x > 9.0 { 9.0 } else if x < -9.0 { -9.0 } else { x };
    let e = expm1_f32::<M>(2.0 * xc);
    e / (e + 2.0)
}

/// The logistic function 1 / (1 + e^-x) for f32, stable on both sides: with e = e^-|x|,
/// 1 / (1 + e) for x >= 0 and e / (1 + e) below (so tiny results do not underflow early).
#[inline(always)]
pub fn sigmoid_f32<M: MulAdd>(x: f32) -> f32 {
    let e = exp_f32::<M>(-x.abs());
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 { r } else { e * r }
}

/// erf for f32 (within 6 ulp with FMA, 7 without): one rational function x P(x^2) / Q(x^2)
/// (degrees 6 and 5 in x^2, fitted on [0, 4]) with x clamped to +-4, where erf rounds to +-1.
/// One branch and one division, no exp: the fused GELU is compute-bound on this function, and
/// the two-branch erfc form cost three times as much for 2 ulp less error.
#[inline(always)]
pub fn erf_f32<M: MulAdd>(x: f32) -> f32 {
    let xc = if x > 4.0 { 4.0 } else if x < -4.0 { -4.0 } else { x };
    let z = xc * xc;
    let p = horner::<M>(z, &[-1.833_376_5e-8, 6.569_834_6e-6, 5.350_914_4e-4, 5.436_628e-3, 7.685_24e-2,
        2.621_096e-1, 1.598_301_2]);
    let q = horner::<M>(z, &[8.877_450_5e-5, 1.845_353_6e-3, 2.185_968_5e-2, 1.612_759_2e-1, 7.044_412e-1,
        1.416_457_5]);
    let r = xc * p / q;
    if r > 1.0 { 1.0 } else if r < -1.0 { -1.0 } else { r }
}

/// erfinv for f32 (a few ulp): Giles' single-precision approximation ("Approximating the erfinv
/// function", GPU Computing Gems, 2011), one polynomial in w = -ln(1 - x^2) on each side of w = 5.
#[inline(always)]
pub fn erfinv_f32<M: MulAdd>(x: f32) -> f32 {
    let w = -log_f32::<M>((1.0 - x) * (1.0 + x));
    let p = horner::<M>(w - 2.5, &[2.810_226_4e-8, 3.432_739_4e-7, -3.523_387_7e-6, -4.391_506_5e-6,
        0.000_218_580_87, -0.001_253_725, -0.004_177_681_6, 0.246_640_73, 1.501_409_4]);
    let q = horner::<M>(w.sqrt() - 3.0, &[-0.000_200_214_26, 0.000_100_950_56, 0.001_349_343_2,
        -0.003_673_428_4, 0.005_739_507_7, -0.007_622_461, 0.009_438_870_5, 1.001_674_1, 2.832_976_8]);
    let y = if w < 5.0 { p } else { q } * x;
    if x.abs() > 1.0 || x.is_nan() {
        f32::NAN
    } else if x == 1.0 {
        f32::INFINITY
    } else if x == -1.0 {
        f32::NEG_INFINITY
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between an f32 result and an f64 reference.
    fn ulps(got: f32, want: f64) -> f64 {
        if got.is_nan() && want.is_nan() || got == want as f32 {
            return 0.0;
        }
        let w = want as f32;
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()).max(f32::from_bits(1)) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// The largest ulp error of `f` against `reference` over every 1009th bit pattern in [lo, hi].
    fn max_ulps(f: fn(f32) -> f32, reference: impl Fn(f64) -> f64, lo: f32, hi: f32) -> (f64, f32) {
        let mut worst = (0.0, 0.0);
        for bits in (0..u32::MAX).step_by(1009) {
            let x = f32::from_bits(bits);
            if !(x >= lo && x <= hi) {
                continue;
            }
            let e = ulps(f(x), reference(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
        }
        worst
    }

    /// Every float32 function, with polynomial steps computed by `M`, within a few ulp of its
    /// float64 reference.
    #[allow(clippy::type_complexity)]
    fn check_accuracy<M: MulAdd>(erf_ulps: f64) {
        let cases: [(&str, fn(f32) -> f32, fn(f64) -> f64, f32, f32, f64); 8] = [
            ("exp", exp_f32::<M>, f64::exp, -104.0, 89.0, 1.25),
            ("log", log_f32::<M>, f64::ln, 0.0, f32::MAX, 2.0),
            ("expm1", expm1_f32::<M>, f64::exp_m1, -104.0, 89.0, 3.0),
            ("log1p", log1p_f32::<M>, f64::ln_1p, -1.0, f32::MAX, 3.0),
            ("tanh", tanh_f32::<M>, f64::tanh, -20.0, 20.0, 4.0),
            ("sigmoid", sigmoid_f32::<M>, |x| 1.0 / (1.0 + (-x).exp()), -104.0, 104.0, 4.0),
            ("erf", erf_f32::<M>, erf_f64, -10.0, 10.0, erf_ulps),
            ("erfinv", erfinv_f32::<M>, erfinv_f64, -1.0, 1.0, 8.0),
        ];
        for (name, f, r, lo, hi, bound) in cases {
            for sign in [1.0f32, -1.0] {
                let (lo, hi) = if sign > 0.0 { (lo.max(0.0), hi) } else { (lo, hi.min(0.0)) };
                let (e, at) = max_ulps(f, r, lo, hi);
                assert!(e <= bound, "{name}: {e:.2} ulp at {at:e} (bound {bound})");
            }
        }
    }

    #[test]
    fn float32_functions_are_accurate_to_a_few_ulp_unfused() {
        check_accuracy::<Unfused>(7.0);
    }

    #[test]
    fn float32_functions_are_accurate_to_a_few_ulp_fused() {
        check_accuracy::<Fused>(6.0);
    }

    /// NaN, infinities and signed zeros through every float32 function computed with `M`.
    fn check_special_values<M: MulAdd>() {
        for f in [exp_f32::<M>, log_f32::<M>, expm1_f32::<M>, log1p_f32::<M>, tanh_f32::<M>, sigmoid_f32::<M>,
            erf_f32::<M>, erfinv_f32::<M>] {
            assert!(f(f32::NAN).is_nan());
        }
        assert_eq!(exp_f32::<M>(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32::<M>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32::<M>(-0.0), 1.0);
        assert_eq!(exp_f32::<M>(88.8), f32::INFINITY);
        assert_eq!(exp_f32::<M>(1e30), f32::INFINITY);
        assert_eq!(exp_f32::<M>(-104.0), 0.0);
        assert_eq!(exp_f32::<M>(-1e30), 0.0);
        assert_eq!(exp_f32::<M>(-103.0), (-103.0f64).exp() as f32);
        assert_eq!(log_f32::<M>(0.0), f32::NEG_INFINITY);
        assert_eq!(log_f32::<M>(f32::INFINITY), f32::INFINITY);
        assert!(log_f32::<M>(-1.0).is_nan());
        assert_eq!(log1p_f32::<M>(-1.0), f32::NEG_INFINITY);
        assert_eq!(tanh_f32::<M>(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32::<M>(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf_f32::<M>(f32::INFINITY), 1.0);
        assert_eq!(erf_f32::<M>(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(erfinv_f32::<M>(1.0), f32::INFINITY);
        assert!(erfinv_f32::<M>(1.5).is_nan());
        assert_eq!(sigmoid_f32::<M>(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn special_values_match_std() {
        check_special_values::<Unfused>();
        check_special_values::<Fused>();
        assert!((erf_f64(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert_eq!(erf_f64(0.0), 0.0);
        assert_eq!(erf_f64(f64::from_bits(1)), f64::from_bits(1) * std::f64::consts::FRAC_2_SQRT_PI);
        assert!(erf_f64(f64::NAN).is_nan());
        assert_eq!(erfinv_f64(0.0), 0.0);
    }
}
