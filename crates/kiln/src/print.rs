//! numpy/mlx-style printing: `array([[1, 2],\n       [3, 4]], dtype=int32)`. Large arrays are
//! summarised with `...` (first and last three entries per axis beyond 1000 elements).

use crate::array::Array;
use crate::dtype::Dtype;
use std::fmt;

const SUMMARIZE_ABOVE: usize = 1000;
const EDGE: usize = 3;

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = match self.to_f64_vec() {
            Ok(v) => v,
            Err(e) => return write!(f, "array(<unavailable: {e}>, dtype={})", self.dtype()),
        };
        let dtype = self.dtype();
        let summarize = values.len() > SUMMARIZE_ABOVE;
        let mut body = String::new();
        write_axis(&mut body, &values, self.shape(), dtype, summarize, "array(".len() + 1);
        write!(f, "array({body}, dtype={dtype})")
    }
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

fn write_axis(out: &mut String, values: &[f64], shape: &[usize], dtype: Dtype, summarize: bool, indent: usize) {
    if shape.is_empty() {
        out.push_str(&format_value(values[0], dtype));
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
            Some(i) => write_axis(out, &values[i * inner..(i + 1) * inner], &shape[1..], dtype, summarize, indent + 1),
        }
    }
    out.push(']');
}
