//! mlx-style printing: `array([[1, 2],\n       [3, 4]], dtype=int32)`. Floats print as C's `%g`
//! with 6 significant digits (`1.12346`, `1e-05`), or with a fixed number of decimals once
//! [`set_print_precision`] asks for one; an axis longer than six entries shows its first and
//! last three around `...`, at every size, as mlx prints.

use crate::array::Array;
use crate::complex::Complex64;
use crate::dtype::Dtype;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

/// Entries shown at each end of a summarised axis (an axis of more than twice this many).
const EDGE: usize = 3;

/// The fixed decimals floats print with; negative: `%g` with 6 significant digits.
static PRECISION: AtomicI64 = AtomicI64::new(-1);

/// Sets how many decimals floats print with (None: mlx's default, 6 significant digits as C's
/// `%g`); returns the previous setting. Process-wide, as mlx's `set_printoptions`.
pub fn set_print_precision(decimals: Option<usize>) -> Option<usize> {
    let previous = PRECISION.swap(decimals.map_or(-1, |d| d as i64), Ordering::Relaxed);
    usize::try_from(previous).ok()
}

/// The decimals floats print with (None: 6 significant digits).
pub fn print_precision() -> Option<usize> {
    usize::try_from(PRECISION.load(Ordering::Relaxed)).ok()
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtype = self.dtype();
        let mut body = String::new();
        let written = if dtype.is_complex() {
            self.to_vec::<Complex64>().map(|v| write_axis(&mut body, &v, self.shape(), &format_complex, 0))
        } else {
            let format = |v: f64| format_value(v, dtype);
            self.to_f64_vec().map(|v| write_axis(&mut body, &v, self.shape(), &format, 0))
        };
        match written {
            Ok(()) => write!(f, "array({body}, dtype={dtype})"),
            Err(e) => write!(f, "array(<unavailable: {e}>, dtype={dtype})"),
        }
    }
}

/// A complex64 value as mlx prints it: `1+2j`, `0-1.5j`, `nan+nanj`.
fn format_complex(z: Complex64) -> String {
    let re = format_float(z.re as f64);
    if z.im >= 0.0 || z.im.is_nan() {
        format!("{re}+{}j", format_float(z.im as f64))
    } else {
        format!("{re}-{}j", format_float(-z.im as f64))
    }
}

fn format_value(v: f64, dtype: Dtype) -> String {
    match dtype {
        Dtype::Bool => if v != 0.0 { "True".into() } else { "False".into() },
        d if d.is_float() => format_float(v),
        _ => format!("{v}"),
    }
}

/// A float with the current precision: fixed decimals, or `%g` with 6 significant digits.
fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match print_precision() {
        Some(decimals) => format!("{v:.decimals$}"),
        None => format_general(v, 6),
    }
}

/// C's `%.{significant}g`: scientific when the exponent is below -4 or at least `significant`,
/// fixed otherwise, trailing zeros (and a trailing point) dropped, exponents of two digits or more.
fn format_general(v: f64, significant: usize) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // The exponent after rounding to the significant digits (9.999995 rounds up to 10).
    let scientific = format!("{:.*e}", significant - 1, v);
    let (mantissa, exponent) = scientific.split_once('e').expect("Rust's {:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("Rust's exponent is an integer");
    let trim = |s: &str| -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.to_string() }
    };
    if exponent < -4 || exponent >= significant as i32 {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.abs())
    } else {
        let decimals = (significant as i32 - 1 - exponent).max(0) as usize;
        trim(&format!("{v:.decimals$}"))
    }
}

/// Writes the axis `depth` of `values` (shaped `shape`): rows of a matrix on their own lines,
/// indented under the first, and an axis of more than six entries summarised.
fn write_axis<T: Copy>(out: &mut String, values: &[T], shape: &[usize], format: &dyn Fn(T) -> String, depth: usize) {
    if shape.is_empty() {
        out.push_str(&format(values[0]));
        return;
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    let shown: Vec<Option<usize>> = if n > 2 * EDGE {
        (0..EDGE).map(Some).chain([None]).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    for (k, item) in shown.iter().enumerate() {
        if k > 0 {
            if shape.len() > 1 {
                out.push_str(",\n");
                out.push_str(&" ".repeat("array([".len() + depth));
            } else {
                out.push_str(", ");
            }
        }
        match item {
            None => out.push_str("..."),
            Some(i) => write_axis(out, &values[i * inner..(i + 1) * inner], &shape[1..], format, depth + 1),
        }
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::format_general;

    #[test]
    fn general_format_follows_c() {
        // Expected strings are C's printf("%g") of each value.
        let cases = [
            (1.123456789, "1.12346"),
            (1.0, "1"),
            (2.5, "2.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (9.9999996, "10"),
            (-0.000123456789, "-0.000123457"),
            (1e100, "1e+100"),
            (0.9016, "0.9016"),
        ];
        for (v, want) in cases {
            assert_eq!(format_general(v, 6), want, "{v}");
        }
    }
}
