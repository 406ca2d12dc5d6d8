//! Discrete Fourier transforms with mlx.core's (and numpy's) arguments: `s` crops or zero-pads
//! each transformed axis to a length, `axes` picks the axes (default: the last `len(s)` axes, or
//! every axis), `norm` picks where the 1/n goes. The real transforms treat the last of `axes` as
//! the real axis. Inputs become complex64 (float32 for the real forward transform) first.

use super::shape::{slice, SliceSpec};
use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::{FftKind, Op};
use crate::shape::{fmt_shape, normalize_axis};

/// Where the normalisation of a transform pair goes (numpy's and mlx's `norm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FftNorm {
    /// No scaling forward, 1/n on the inverse (the default).
    Backward,
    /// 1/sqrt(n) both ways, so the transform is unitary.
    Ortho,
    /// 1/n forward, none on the inverse.
    Forward,
}

impl FftNorm {
    /// Parses `"backward"`, `"ortho"` or `"forward"`.
    pub fn from_name(op: &str, name: &str) -> Result<FftNorm> {
        match name {
            "backward" => Ok(FftNorm::Backward),
            "ortho" => Ok(FftNorm::Ortho),
            "forward" => Ok(FftNorm::Forward),
            _ => Err(Error::value(op, format!("invalid norm {name:?}; use \"backward\", \"ortho\" or \"forward\""))),
        }
    }
}

/// The n-dimensional transform over `axes`, each cropped or padded to `s`.
pub fn fftn(x: impl AsArray, s: Option<&[i64]>, axes: Option<&[i64]>, norm: FftNorm) -> Result<Array> {
    transform("fftn", x.as_array(), s, axes, false, false, norm)
}

/// The n-dimensional inverse transform.
pub fn ifftn(x: impl AsArray, s: Option<&[i64]>, axes: Option<&[i64]>, norm: FftNorm) -> Result<Array> {
    transform("ifftn", x.as_array(), s, axes, false, true, norm)
}

/// The n-dimensional transform of a real array: the last of `axes` keeps n/2 + 1 values.
pub fn rfftn(x: impl AsArray, s: Option<&[i64]>, axes: Option<&[i64]>, norm: FftNorm) -> Result<Array> {
    transform("rfftn", x.as_array(), s, axes, true, false, norm)
}

/// The inverse of [`rfftn`]: a real array whose last transformed axis has `s`'s last length
/// (default 2·(m - 1) for m input values there).
pub fn irfftn(x: impl AsArray, s: Option<&[i64]>, axes: Option<&[i64]>, norm: FftNorm) -> Result<Array> {
    transform("irfftn", x.as_array(), s, axes, true, true, norm)
}

fn transform(op: &str, x: Array, s: Option<&[i64]>, axes: Option<&[i64]>, real: bool, inverse: bool, norm: FftNorm) -> Result<Array> {
    let nd = x.ndim();
    if nd == 0 {
        return Err(Error::value(op, "needs an array of at least one dimension, got a 0-d array"));
    }
    let axes: Vec<usize> = match (axes, s) {
        (Some(a), _) => a.iter().map(|&a| normalize_axis(op, a, nd)).collect::<Result<_>>()?,
        (None, Some(s)) if s.len() > nd => {
            return Err(Error::value(op, format!("s has {} lengths for an array of {nd} dimensions", s.len())))
        }
        (None, Some(s)) => (nd - s.len()..nd).collect(),
        (None, None) => (0..nd).collect(),
    };
    if let Some(&a) = axes.iter().enumerate().find(|&(i, a)| axes[..i].contains(a)).map(|(_, a)| a) {
        return Err(Error::value(op, format!("axis {a} is given twice")));
    }
    if s.is_some_and(|s| s.len() != axes.len()) {
        return Err(Error::value(op, format!("s has {} lengths for {} axes", s.map_or(0, |s| s.len()), axes.len())));
    }
    if axes.is_empty() {
        return Ok(x);
    }
    let shape = x.shape().to_vec();
    let mut n: Vec<i64> = match s {
        Some(s) => s.to_vec(),
        None => axes.iter().map(|&a| shape[a] as i64).collect(),
    };
    if real && inverse && s.is_none() {
        *n.last_mut().expect("axes are not empty") = 2 * (shape[*axes.last().expect("axes are not empty")] as i64 - 1);
    }
    if let Some(bad) = n.iter().find(|&&v| v <= 0) {
        return Err(Error::value(
            op,
            format!("invalid transform length {bad} (lengths {n:?} over axes {axes:?} of shape {}); every length must be positive", fmt_shape(&shape)),
        ));
    }
    let n: Vec<usize> = n.iter().map(|&v| v as usize).collect();
    let last = *axes.last().expect("axes are not empty");
    let mut in_shape = shape.clone();
    for (&a, &len) in axes.iter().zip(&n) {
        in_shape[a] = len;
    }
    if real && inverse {
        in_shape[last] = n[n.len() - 1] / 2 + 1;
    }
    let x = fit(&x, &in_shape)?;
    let (x, kind) = match (real, inverse) {
        (false, false) => (cast(&x, Dtype::C64)?, FftKind::Forward),
        (false, true) => (cast(&x, Dtype::C64)?, FftKind::Inverse),
        (true, false) => {
            if x.dtype().is_complex() {
                return Err(Error::dtype(op, "needs a real input, got complex64; take its real part (mx.real) or use fftn"));
            }
            (if x.dtype() == Dtype::F64 { x } else { cast(&x, Dtype::F32)? }, FftKind::RealForward)
        }
        (true, true) => (cast(&x, Dtype::C64)?, FftKind::RealInverse(n[n.len() - 1])),
    };
    let out = Array::from_op(Op::Fft { axes, kind }, vec![x])?;
    let count: f64 = n.iter().map(|&v| v as f64).product();
    let scale = match (norm, inverse) {
        (FftNorm::Backward, _) => 1.0,
        (FftNorm::Ortho, false) => 1.0 / count.sqrt(),
        (FftNorm::Ortho, true) => count.sqrt(),
        (FftNorm::Forward, false) => 1.0 / count,
        (FftNorm::Forward, true) => count,
    };
    if scale == 1.0 { Ok(out) } else { super::multiply(out, scale) }
}

/// `x` cropped (from the start) and zero-padded (at the end) to `shape`.
fn fit(x: &Array, shape: &[usize]) -> Result<Array> {
    let cropped = if x.shape().iter().zip(shape).any(|(&have, &want)| have > want) {
        let specs: Vec<SliceSpec> = shape.iter().map(|&len| SliceSpec::range(0, len as i64)).collect();
        slice(x, &specs)?
    } else {
        x.clone()
    };
    if cropped.shape() == shape {
        return Ok(cropped);
    }
    let widths: Vec<(usize, usize)> = cropped.shape().iter().zip(shape).map(|(&have, &want)| (0, want - have)).collect();
    super::pad(&cropped, &widths, 0.0)
}
