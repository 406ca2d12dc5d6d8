//! Shared helpers for the integration tests: a deterministic generator for random inputs, views
//! that exercise strided kernels, and comparison against float64 references.
#![allow(dead_code)]

pub mod derivatives;
pub mod gpu;

use kiln::ops::{self, SliceSpec};
use kiln::{Array, Dtype, ErrorKind};

/// splitmix64: a small deterministic generator, independent of the code under test.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n); 0 when n is 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// An array of `dtype` and `shape` from f64 values (converted as astype would).
pub fn array(values: &[f64], shape: &[usize], dtype: Dtype) -> Array {
    let a = Array::from_slice(values, shape).unwrap();
    ops::astype(&a, dtype).unwrap()
}

/// Random values suited to `dtype` (small integers for integer types, 0/1 for bool).
pub fn random_values(rng: &mut Rng, n: usize, dtype: Dtype, lo: f64, hi: f64) -> Vec<f64> {
    match dtype {
        Dtype::Bool => (0..n).map(|_| (rng.next_u64() & 1) as f64).collect(),
        d if d.is_unsigned() => (0..n).map(|_| rng.uniform(0.0, hi.max(1.0)).floor()).collect(),
        d if d.is_integer() => (0..n).map(|_| rng.uniform(lo, hi).floor()).collect(),
        _ => rng.vec(n, lo, hi),
    }
}

/// The values of `values` (row-major, `shape`) rounded to `dtype` precision, as f64.
pub fn rounded(values: &[f64], shape: &[usize], dtype: Dtype) -> Vec<f64> {
    array(values, shape, dtype).to_f64_vec().unwrap()
}

/// The kinds of layout a test input can have: each must give the same values.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Contiguous,
    Transposed,
    Reversed,
    Sliced,
}

pub const LAYOUTS: [Layout; 4] = [Layout::Contiguous, Layout::Transposed, Layout::Reversed, Layout::Sliced];

/// A view holding `values` (row-major of `shape`) laid out as `layout` in memory.
pub fn with_layout(values: &[f64], shape: &[usize], dtype: Dtype, layout: Layout) -> Array {
    match layout {
        Layout::Contiguous => array(values, shape, dtype),
        Layout::Transposed => {
            // Store the transpose, then transpose back: a non-contiguous view of the same values.
            let nd = shape.len();
            let t = ops::transpose(array(values, shape, dtype), None).unwrap();
            let stored = t.to_f64_vec().unwrap();
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let back = array(&stored, &rev, dtype);
            let out = ops::transpose(back, None).unwrap();
            assert_eq!(out.ndim(), nd);
            out
        }
        Layout::Reversed => {
            // Store reversed along the last axis, view it reversed again (negative stride).
            let specs = reverse_last(shape);
            let rev = ops::slice(array(values, shape, dtype), &specs).unwrap().to_f64_vec().unwrap();
            ops::slice(array(&rev, shape, dtype), &specs).unwrap()
        }
        Layout::Sliced => {
            // Embed in a larger array with every other element, then slice with step 2.
            let mut big_shape = shape.to_vec();
            if let Some(l) = big_shape.last_mut() {
                *l *= 2;
            }
            let mut big = vec![f64::NAN; values.len() * 2];
            for (i, v) in values.iter().enumerate() {
                big[2 * i] = *v;
            }
            if shape.is_empty() {
                return array(values, shape, dtype);
            }
            let mut specs = vec![SliceSpec::ALL; shape.len()];
            *specs.last_mut().unwrap() = SliceSpec { start: Some(0), stop: None, step: 2 };
            ops::slice(array(&big, &big_shape, dtype), &specs).unwrap()
        }
    }
}

fn reverse_last(shape: &[usize]) -> Vec<SliceSpec> {
    let mut specs = vec![SliceSpec::ALL; shape.len()];
    if let Some(s) = specs.last_mut() {
        *s = SliceSpec { start: None, stop: None, step: -1 };
    }
    specs
}

/// Asserts two float vectors agree within `rtol`/`atol` (NaN equals NaN, infinities must match).
pub fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g - w).abs() <= atol + rtol * w.abs();
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// `v` wrapped modulo 2^bits into an integer of that width, as two's complement arithmetic does.
pub fn wrap(v: i128, bits: u32, signed: bool) -> f64 {
    let m = 1i128 << bits;
    let mut r = v.rem_euclid(m);
    if signed && r >= m / 2 {
        r -= m;
    }
    r as f64
}

/// `v` wrapped into the integer `dtype`.
pub fn wrap_to(v: i128, dtype: Dtype) -> f64 {
    wrap(v, 8 * dtype.size() as u32, !dtype.is_unsigned())
}

/// Asserts that `r` is an error of `kind` reported by `op`.
pub fn check_err<T: std::fmt::Debug>(r: kiln::Result<T>, kind: ErrorKind, op: &str) {
    let e = r.expect_err(&format!("{op}: expected an error"));
    assert_eq!((e.kind, e.op.as_str()), (kind, op), "{e:?}");
}

/// Relative tolerance suited to a dtype's precision.
pub fn rtol_for(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 2e-3,
        Dtype::BF16 => 1.6e-2,
        Dtype::F32 => 2e-6,
        _ => 1e-12,
    }
}

/// erf by composite Simpson integration of 2/sqrt(pi) e^(-t^2): slow but independent of kiln's
/// series and continued fraction.
pub fn erf_reference(x: f64) -> f64 {
    let n = 2 * (100 + (x.abs() * 400.0) as usize);
    let h = x / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(x);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0 * std::f64::consts::FRAC_2_SQRT_PI
}
