//! Window functions of mlx.core, float32 by numpy's definitions over `n = 0 .. M-1`:
//! `bartlett`, `blackman`, `hamming`, `hanning`. `M < 1` gives an empty window, `M = 1` `[1]`.

use super::*;
use std::f64::consts::PI;

/// `shape(n, M - 1)` over `n = 0 .. M-1`, computed in float64 and rounded to float32 once.
fn window(m: usize, shape: impl Fn(&Array, f64) -> Result<Array>) -> Result<Array> {
    match m {
        0 => zeros(&[0], Dtype::F32),
        1 => ones(&[1], Dtype::F32),
        _ => astype(shape(&arange(0.0, m as f64, 1.0, Dtype::F64)?, (m - 1) as f64)?, Dtype::F32),
    }
}

/// The triangular window of `m` points.
pub fn bartlett(m: usize) -> Result<Array> {
    window(m, |n, last| subtract(1.0, abs(subtract(multiply(n, 2.0 / last)?, 1.0)?)?))
}

/// The Hann window of `m` points.
pub fn hanning(m: usize) -> Result<Array> {
    window(m, |n, last| square(sin(multiply(n, PI / last)?)?))
}

/// The Hamming window of `m` points.
pub fn hamming(m: usize) -> Result<Array> {
    window(m, |n, last| subtract(0.54, multiply(cos(multiply(n, 2.0 * PI / last)?)?, 0.46)?))
}

/// The Blackman window of `m` points.
pub fn blackman(m: usize) -> Result<Array> {
    window(m, |n, last| {
        let first = multiply(cos(multiply(n, 2.0 * PI / last)?)?, 0.5)?;
        let second = multiply(cos(multiply(n, 4.0 * PI / last)?)?, 0.08)?;
        add(subtract(0.42, first)?, second)
    })
}
