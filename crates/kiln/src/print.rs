//! numpy/mlx-style printing: `array([[1, 2],\n       [3, 4]], dtype=int32)`. Large arrays are
//! summarised with `...` (first and last three entries per axis beyond 1000 elements).

use crate::array::Array;
use crate::complex::Complex64;
use crate::dtype::Dtype;
use std::fmt;

const SUMMARIZE_ABOVE: usize = 1000;
const EDGE: usize = 3;

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtype = self.dtype();
        let summarize = self.size() > SUMMARIZE_ABOVE;
        let indent = "array(".len() + 1;
        let mut body = String::new();
        let written = if dtype.is_complex() {
            self.to_vec::<Complex64>().map(|v| write_axis(&mut body, &v, self.shape(), &format_complex, summarize, indent))
        } else {
            let format = |v: f64| format_value(v, dtype);
            self.to_f64_vec().map(|v| write_axis(&mut body, &v, self.shape(), &format, summarize, indent))
        };
        match written {
            Ok(()) => write!(f, "array({body}, dtype={dtype})"),
            Err(e) => write!(f, "array(<unavailable: {e}>, dtype={dtype})"),
        }
    }
}

/// A complex64 value as numpy prints it: `1+2j`, `0-1.5j`, `nan+infj`.
fn format_complex(z: Complex64) -> String {
    let re = format_value(z.re as f64, Dtype::F32);
    let im = format_value(z.im as f64, Dtype::F32);
    let sign = if im.starts_with('-') { "" } else { "+" };
    format!("{re}{sign}{im}j")
}

fn format_value(v: f64, dtype: Dtype) -> String {
    match dtype {
        Dtype::Bool => if v != 0.0 { "True".into() } else { "False".into() },
        d if d.is_float() => {
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 { "inf".into() } else { "-inf".into() }
            } else if v == v.trunc() && v.abs() < 1e16 {
                format!("{v:.0}")
            } else {
                let digits = if d == Dtype::F64 { 17 } else { 6 };
                let s = format!("{:.*}", digits, v);
                let s = s.trim_end_matches('0');
                if v.abs() >= 1e6 || v.abs() < 1e-4 { format!("{v:e}") } else { s.to_string() }
            }
        }
        _ => format!("{v}"),
    }
}

fn write_axis<T: Copy>(out: &mut String, values: &[T], shape: &[usize], format: &dyn Fn(T) -> String, summarize: bool, indent: usize) {
    if shape.is_empty() {
        out.push_str(&format(values[0]));
        return;
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    out.push('[');
    let shown: Vec<Option<usize>> = if summarize && n > 2 * EDGE {
        (0..EDGE).map(Some).chain([None]).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    };
    for (k, item) in shown.iter().enumerate() {
        if k > 0 {
            out.push(',');
            if shape.len() > 1 {
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(indent));
            } else {
                out.push(' ');
            }
        }
        match item {
            None => out.push_str("..."),
            Some(i) => write_axis(out, &values[i * inner..(i + 1) * inner], &shape[1..], format, summarize, indent + 1),
        }
    }
    out.push(']');
}
