//! mlx's `hadamard_transform`: the Walsh-Hadamard transform of the last axis, for sizes
//! m·2^k with m in 1, 12, 20, 28. The 2^k factor is a butterfly in natural (Sylvester) order,
//! the m factor a product with a fixed Hadamard matrix of that order; both are composites of
//! lazy ops, so gradients (with the transposed matrix, which mlx's rule skips for m = 20 and
//! 28), vmap and compile come from the ops they are made of.

use super::elementwise::{add, astype, multiply, subtract};
use super::index::concatenate;
use super::linalg::matmul;
use super::shape::{reshape, slice_axis};
use super::AsArray;
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// Hadamard matrices of the orders besides powers of two (rows of signs; Sloane's library).
const H12: [&str; 12] = [
    "+-++++++++++",
    "--+-+-+-+-+-",
    "+++-++----++",
    "+---+--+-++-",
    "+++++-++----",
    "+-+---+--+-+",
    "++--+++-++--",
    "+--++---+--+",
    "++----+++-++",
    "+--+-++---+-",
    "++++----+++-",
    "+-+--+-++---",
];
const H20: [&str; 20] = [
    "+----+----++--++-++-",
    "-+----+---+++---+-++",
    "--+----+---+++-+-+-+",
    "---+----+---+++++-+-",
    "----+----++--++-++-+",
    "-+++++-----+--+++--+",
    "+-+++-+---+-+--+++--",
    "++-++--+---+-+--+++-",
    "+++-+---+---+-+--+++",
    "++++-----++--+-+--++",
    "--++-+-++-+-----++++",
    "---++-+-++-+---+-+++",
    "+---++-+-+--+--++-++",
    "++---++-+----+-+++-+",
    "-++---++-+----+++++-",
    "-+--+--++-+----+----",
    "+-+-----++-+----+---",
    "-+-+-+---+--+----+--",
    "--+-+++------+----+-",
    "+--+--++------+----+",
];
const H28: [&str; 28] = [
    "+------++----++-+--+-+--++--",
    "-+-----+++-----+-+--+-+--++-",
    "--+-----+++---+-+-+----+--++",
    "---+-----+++---+-+-+-+--+--+",
    "----+-----+++---+-+-+++--+--",
    "-----+-----++++--+-+--++--+-",
    "------++----++-+--+-+--++--+",
    "--++++-+-------++--+++-+--+-",
    "---++++-+-----+-++--+-+-+--+",
    "+---+++--+----++-++--+-+-+--",
    "++---++---+----++-++--+-+-+-",
    "+++---+----+----++-++--+-+-+",
    "++++--------+-+--++-++--+-+-",
    "-++++--------+++--++--+--+-+",
    "-+-++-++--++--+--------++++-",
    "+-+-++--+--++--+--------++++",
    "-+-+-++--+--++--+----+---+++",
    "+-+-+-++--+--+---+---++---++",
    "++-+-+-++--+------+--+++---+",
    "-++-+-+-++--+------+-++++---",
    "+-++-+---++--+------+-++++--",
    "-++--++-+-++-+++----++------",
    "+-++--++-+-++-+++-----+-----",
    "++-++---+-+-++-+++-----+----",
    "-++-++-+-+-+-+--+++-----+---",
    "--++-++++-+-+----+++-----+--",
    "+--++-+-++-+-+----+++-----+-",
    "++--++-+-++-+-+----++------+",
];

/// The transform of the last axis of `a` (size n = m·2^k, m in 1, 12, 20, 28) times `scale`
/// (default 1/√n). Floating inputs keep their dtype (float16 and bfloat16 compute in float32);
/// integer and boolean ones give float32. A 0-d array or a last axis of size 1 is its own
/// transform: with scale 1 the input comes back unchanged (its dtype too), as in mlx.
pub fn hadamard_transform(a: impl AsArray, scale: Option<f64>) -> Result<Array> {
    const OP: &str = "hadamard_transform";
    let a = a.as_array();
    if a.size() == 0 {
        return Err(Error::value(OP, format!("needs a non-empty array, got shape {}", crate::shape::fmt_shape(a.shape()))));
    }
    if a.dtype().is_complex() {
        return Err(Error::dtype(OP, "complex inputs are not supported; transform the real and imaginary parts"));
    }
    let n = a.shape().last().copied().unwrap_or(1);
    let scale = scale.unwrap_or(1.0 / (n as f64).sqrt());
    let dtype = if a.dtype().is_float() { a.dtype() } else { Dtype::F32 };
    if n == 1 {
        return if scale == 1.0 { Ok(a) } else { multiply(astype(&a, dtype)?, scale).and_then(|y| astype(y, dtype)) };
    }
    let (m, table) = factor(n).ok_or_else(|| {
        Error::value(OP, format!("the last axis has size {n}; supported sizes are m·2^k with m in 1, 12, 20, 28 (pad the axis)"))
    })?;
    let compute = if matches!(dtype, Dtype::F16 | Dtype::BF16) { Dtype::F32 } else { dtype };
    let lead: Vec<i64> = a.shape()[..a.ndim() - 1].iter().map(|&d| d as i64).collect();
    let n2 = n / m;
    let mut x = astype(&a, compute)?;
    // Butterflies over the 2^k part: pairs (i, i + h) of each block of 2h.
    let mut h = 1;
    while h < n2 {
        let blocks = [&lead[..], &[m as i64, (n2 / (2 * h)) as i64, 2, h as i64]].concat();
        let y = reshape(&x, &blocks)?;
        let (low, high) = (slice_axis(&y, -2, 0, 1)?, slice_axis(&y, -2, 1, 2)?);
        x = concatenate(&[add(&low, &high)?, subtract(&low, &high)?], -2)?;
        h *= 2;
    }
    let mut x = reshape(&x, &[&lead[..], &[m as i64, n2 as i64]].concat())?;
    if let Some(rows) = table {
        let signs: Vec<f32> = rows.iter().flat_map(|r| r.bytes().map(|c| if c == b'+' { 1.0 } else { -1.0 })).collect();
        x = matmul(astype(Array::from_slice(&signs, &[m, m])?, compute)?, &x)?;
    }
    let shape: Vec<i64> = a.shape().iter().map(|&d| d as i64).collect();
    astype(multiply(reshape(&x, &shape)?, scale)?, dtype)
}

/// n as m·2^k: m and its matrix (`None` for m = 1), or `None` when n has no such form.
fn factor(n: usize) -> Option<(usize, Option<&'static [&'static str]>)> {
    if n.is_power_of_two() {
        return Some((1, None));
    }
    [(12, &H12[..]), (20, &H20[..]), (28, &H28[..])]
        .into_iter()
        .find(|&(m, _)| n.is_multiple_of(m) && (n / m).is_power_of_two())
        .map(|(m, rows)| (m, Some(rows)))
}
