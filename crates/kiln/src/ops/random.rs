//! Random numbers from counter-based threefry2x32 keys, as in JAX and mlx.
//!
//! A key is a uint32 array of shape (2,). Every sampler takes an optional key; without one it
//! draws a fresh subkey from the global random state, which is itself an explicit key array (see
//! [`state`]) so that a compiled function can capture and advance it like any other state.

use super::shape::{reshape, slice_axis};
use super::{cast, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::Shape;
use std::cell::RefCell;
use std::sync::Mutex;

static STATE: Mutex<Option<Array>> = Mutex::new(None);

thread_local! {
    /// A state this thread draws from instead of the global one while replaying earlier draws
    /// (see [`with_replayed_state`]).
    static REPLAY: RefCell<Option<Array>> = const { RefCell::new(None) };
}

/// This thread's replayed state, if one is set.
fn replayed() -> Option<Array> {
    REPLAY.with(|r| r.borrow().clone())
}

/// Runs `f` with this thread's draws without a key taken from `state` instead of the global
/// state, which stays untouched: checkpoint's recomputation replays the forward pass's random
/// numbers without disturbing other threads or later draws.
pub(crate) fn with_replayed_state<T>(state: &Array, f: impl FnOnce() -> T) -> T {
    let previous = REPLAY.with(|r| r.replace(Some(state.clone())));
    let out = f();
    REPLAY.with(|r| *r.borrow_mut() = previous);
    out
}

/// A key from a seed: its high and low 32 bits.
pub fn key(seed: u64) -> Array {
    Array::from_slice(&[(seed >> 32) as u32, seed as u32], &[2]).expect("two words fill shape (2,)")
}

/// Reseeds the global random state.
pub fn seed(s: u64) {
    *lock_state() = Some(key(s));
}

/// The global random state: the key the next draw without an explicit key splits. It starts from
/// the clock, as mlx's does; call [`seed`] for reproducible runs.
pub fn state() -> Array {
    if let Some(replayed) = replayed() {
        return replayed;
    }
    current_state(&mut lock_state())
}

/// The state lock; a panic elsewhere while holding it leaves a valid key, so poison is ignored.
fn lock_state() -> std::sync::MutexGuard<'static, Option<Array>> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The state behind `guard`, seeded from the clock on first use.
fn current_state(guard: &mut Option<Array>) -> Array {
    guard
        .get_or_insert_with(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            key(t)
        })
        .clone()
}

/// Replaces the global random state with `key` (for example one captured from [`state`]).
pub fn set_state(key: &Array) -> Result<()> {
    check_key("set_state", key)?;
    *lock_state() = Some(key.clone());
    Ok(())
}

fn check_key(op: &str, key: &Array) -> Result<()> {
    if key.dtype() != Dtype::U32 || key.shape() != [2] {
        return Err(Error::value(
            op,
            format!(
                "a key must be a uint32 array of shape (2,), got {} of shape {}; make one with random::key(seed)",
                key.dtype(),
                crate::shape::fmt_shape(key.shape())
            ),
        ));
    }
    Ok(())
}

/// `num` new keys (shape (num, 2)) derived from `key`.
pub fn split(key: &Array, num: usize) -> Result<Array> {
    check_key("split", key)?;
    bits_from(key, &[num, 2], 4)
}

/// Row `i` of a (num, 2) array of keys.
fn key_row(keys: &Array, i: i64) -> Result<Array> {
    reshape(slice_axis(keys, 0, i, i + 1)?, &[2])
}

/// The key a sampler uses: the given one, or a fresh subkey split off the global state (which
/// advances to the other half), or off this thread's replayed state while one is set. The lock
/// is held from read to write-back, so threads drawing at once each get their own subkey.
fn key_or_next(op: &str, key: Option<&Array>) -> Result<Array> {
    if let Some(k) = key {
        check_key(op, k)?;
        return Ok(k.clone());
    }
    if let Some(replayed) = replayed() {
        let (next, sub) = advance(&replayed)?;
        REPLAY.with(|r| *r.borrow_mut() = Some(next));
        return Ok(sub);
    }
    let mut guard = lock_state();
    let (next, sub) = advance(&current_state(&mut guard))?;
    *guard = Some(next);
    Ok(sub)
}

/// The state after `state` and the subkey a draw uses, evaluated.
fn advance(state: &Array) -> Result<(Array, Array)> {
    let keys = split(state, 2)?;
    let (next, sub) = (key_row(&keys, 0)?, key_row(&keys, 1)?);
    // Inside a compile trace the state may be a placeholder: it stays a graph there.
    if !crate::transforms::compile::is_compile_tracing() {
        crate::eval(&[&next, &sub])?;
    }
    Ok((next, sub))
}

fn bits_from(key: &Array, shape: &[usize], width: usize) -> Result<Array> {
    Array::from_op(Op::RandomBits { shape: Shape::from_slice(shape), width }, vec![key.clone()])
}

/// Raw random bits: `shape` elements of `width` bytes (1, 2 or 4: uint8, uint16, uint32).
pub fn bits(shape: &[usize], width: usize, key: Option<&Array>) -> Result<Array> {
    if !matches!(width, 1 | 2 | 4) {
        return Err(Error::value("bits", format!("width must be 1, 2 or 4 bytes, got {width}")));
    }
    bits_from(&key_or_next("bits", key)?, shape, width)
}

fn check_float(op: &str, dtype: Dtype) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("needs a floating-point dtype, got {dtype}")));
    }
    Ok(())
}

/// The largest value of `dtype` strictly below `v` (so uniform never returns its upper bound).
fn below(v: f64, dtype: Dtype) -> f64 {
    let r = cast_value(v, dtype);
    if r < v {
        return r;
    }
    match dtype {
        Dtype::F64 => f64_step_down(v),
        Dtype::F32 => f32_step_down(r as f32) as f64,
        Dtype::F16 => { let h = half::f16::from_f64(r); step_down_bits(h.to_bits(), |b| half::f16::from_bits(b).to_f64()) }
        _ => { let h = half::bf16::from_f64(r); step_down_bits(h.to_bits(), |b| half::bf16::from_bits(b).to_f64()) }
    }
}

fn cast_value(v: f64, dtype: Dtype) -> f64 {
    crate::with_dtype!(dtype, T => <T as crate::Element>::to_f64(<T as crate::Element>::from_f64(v)))
}

fn f64_step_down(v: f64) -> f64 {
    if v > 0.0 { f64::from_bits(v.to_bits() - 1) } else if v == 0.0 { -f64::from_bits(1) } else { f64::from_bits(v.to_bits() + 1) }
}

fn f32_step_down(v: f32) -> f32 {
    if v > 0.0 { f32::from_bits(v.to_bits() - 1) } else if v == 0.0 { -f32::from_bits(1) } else { f32::from_bits(v.to_bits() + 1) }
}

fn step_down_bits(bits: u16, value: impl Fn(u16) -> f64) -> f64 {
    let v = value(bits);
    if v > 0.0 { value(bits - 1) } else if v == 0.0 { value(0x8001) } else { value(bits + 1) }
}

/// Uniform in [0, 1) with 24 random bits (float32 and narrower) or 32 (float64).
fn unit(shape: &[usize], dtype: Dtype, key: &Array) -> Result<Array> {
    let b = bits_from(key, shape, 4)?;
    if dtype == Dtype::F64 {
        super::multiply(cast(&b, Dtype::F64)?, 2f64.powi(-32))
    } else {
        super::multiply(cast(&super::right_shift(&b, 8)?, Dtype::F32)?, 2f64.powi(-24))
    }
}

/// Uniform samples in [low, high) of `shape` and float `dtype`; with low == high every sample
/// is low (as mlx's; the key is still drawn, so later draws don't shift).
pub fn uniform(low: f64, high: f64, shape: &[usize], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    check_float("uniform", dtype)?;
    if !low.is_finite() || !high.is_finite() || low > high {
        return Err(Error::value("uniform", format!("needs finite low <= high, got low={low}, high={high}")));
    }
    let k = key_or_next("uniform", key)?;
    if low == high {
        return super::full(shape, low, Some(dtype));
    }
    let u = unit(shape, dtype, &k)?;
    let x = cast(&super::add(super::multiply(&u, high - low)?, low)?, dtype)?;
    // Rounding can reach `high`; keep the interval half-open.
    let top = cast(&Array::scalar(below(high, dtype)), dtype)?;
    super::minimum(&x, &top)
}

/// Refuses distribution parameters that would not broadcast to the samples' `shape` without
/// growing it (mlx's rule: the shape is the caller's, parameters fit into it).
fn check_parameters(op: &str, shape: &[usize], parameters: &[&[usize]]) -> Result<()> {
    for p in parameters {
        if crate::shape::broadcast_shapes(op, p, shape).ok().as_deref() != Some(shape) {
            return Err(Error::value(
                op,
                format!(
                    "a parameter of shape {} does not broadcast to the sample shape {}; pass a shape it broadcasts to",
                    crate::shape::fmt_shape(p),
                    crate::shape::fmt_shape(shape)
                ),
            ));
        }
    }
    Ok(())
}

/// The dtype samples of float `dtype` are computed in: float64 for float64, else float32.
fn work_dtype(dtype: Dtype) -> Dtype {
    if dtype == Dtype::F64 { Dtype::F64 } else { Dtype::F32 }
}

/// Uniform samples in the open interval (-1, 1) of `work` dtype.
fn open_unit_interval(op: &str, shape: &[usize], work: Dtype, key: Option<&Array>) -> Result<Array> {
    let k = key_or_next(op, key)?;
    uniform(f64_next_up(-1.0, work), 1.0, shape, work, Some(&k))
}

/// Normal samples with mean `loc` and standard deviation `scale` (numbers or arrays that
/// broadcast to `shape`): sqrt(2) * erfinv(u) for u uniform in (-1, 1). A complex64 `dtype`
/// draws mlx's standard complex normal.
pub fn normal(shape: &[usize], dtype: Dtype, loc: impl AsArray, scale: impl AsArray, key: Option<&Array>) -> Result<Array> {
    let (loc, scale) = (loc.as_array(), scale.as_array());
    check_parameters("normal", shape, &[loc.shape(), scale.shape()])?;
    if !dtype.is_complex() && (loc.dtype().is_complex() || scale.dtype().is_complex()) {
        return Err(Error::dtype("normal", format!("a complex loc or scale needs dtype=complex64, got dtype={dtype}")));
    }
    let z = if dtype.is_complex() {
        standard_complex_normal(shape, key)?
    } else {
        check_float("normal", dtype)?;
        let u = open_unit_interval("normal", shape, work_dtype(dtype), key)?;
        super::multiply(super::erfinv(&u)?, std::f64::consts::SQRT_2)?
    };
    cast(&super::add(super::multiply(&z, &scale)?, &loc)?, dtype)
}

/// Laplace samples with location `loc` and scale `scale` (numbers or arrays that broadcast to
/// `shape`), by the inverse CDF: -sign(u)·ln(1 - |u|) for u uniform in (-1, 1).
pub fn laplace(shape: &[usize], dtype: Dtype, loc: impl AsArray, scale: impl AsArray, key: Option<&Array>) -> Result<Array> {
    let (loc, scale) = (loc.as_array(), scale.as_array());
    check_float("laplace", dtype)?;
    check_parameters("laplace", shape, &[loc.shape(), scale.shape()])?;
    let u = open_unit_interval("laplace", shape, work_dtype(dtype), key)?;
    let x = super::negative(super::multiply(super::sign(&u)?, super::log1p(super::negative(super::abs(&u)?)?)?)?)?;
    cast(&super::add(super::multiply(&x, &scale)?, &loc)?, dtype)
}

/// Standard complex normal samples, as mlx: real and imaginary parts independent normals of
/// variance 1/2 each (so E|z|² = 1), drawn as the two halves of one float32 draw.
fn standard_complex_normal(shape: &[usize], key: Option<&Array>) -> Result<Array> {
    let mut pairs: Vec<usize> = shape.to_vec();
    pairs.push(2);
    let z = normal(&pairs, Dtype::F32, 0.0, std::f64::consts::FRAC_1_SQRT_2, key)?;
    let part = |i: i32| super::astype(super::take(&z, Array::scalar(i), Some(-1))?, Dtype::C64);
    // (b + 0i)·i = 0 + bi exactly, for the finite b drawn here.
    let imaginary = super::multiply(part(1)?, Array::scalar(crate::Complex64::new(0.0, 1.0)))?;
    super::add(part(0)?, imaginary)
}

fn f64_next_up(v: f64, dtype: Dtype) -> f64 {
    if dtype == Dtype::F64 { -f64_step_down(-v) } else { -(f32_step_down(-v as f32) as f64) }
}

/// Normal samples truncated to [lower, upper] (numbers or arrays that broadcast to `shape`), by
/// the inverse CDF in float64 (so tails up to about 8 standard deviations keep their spread),
/// rounded once to `dtype`. Where `lower >= upper` the sample is `lower`, as in mlx.
pub fn truncated_normal(lower: impl AsArray, upper: impl AsArray, shape: &[usize], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    check_float("truncated_normal", dtype)?;
    let work = Dtype::F64;
    let (lower, upper) = (cast(&lower.as_array(), work)?, cast(&upper.as_array(), work)?);
    check_parameters("truncated_normal", shape, &[lower.shape(), upper.shape()])?;
    let cdf = |v: &Array| super::erf(super::multiply(v, std::f64::consts::FRAC_1_SQRT_2)?);
    let (lo, hi) = (cdf(&lower)?, cdf(&upper)?);
    let k = key_or_next("truncated_normal", key)?;
    let u = super::add(&lo, super::multiply(super::subtract(&hi, &lo)?, unit(shape, work, &k)?)?)?;
    // Never ±1, where erfinv is infinite.
    let edge = f64_next_up(-1.0, work);
    let u = super::clip(&u, Some(&edge), Some(&-edge))?;
    let z = super::multiply(super::erfinv(&u)?, std::f64::consts::SQRT_2)?;
    cast(&super::maximum(super::minimum(&z, &upper)?, &lower)?, dtype)
}

/// True with probability `p` (a float, broadcast to `shape`, or p's shape when `None`).
pub fn bernoulli(p: impl AsArray, shape: Option<&[usize]>, key: Option<&Array>) -> Result<Array> {
    let p = p.as_array();
    if !p.dtype().is_float() {
        return Err(Error::dtype(
            "bernoulli",
            format!("the probability p must be a floating-point number or array, got {}; pass 0.0 for 0", p.dtype()),
        ));
    }
    let p = match shape {
        Some(s) => super::broadcast_to(&p, s).map_err(|e| e.in_op("bernoulli"))?,
        None => p,
    };
    let k = key_or_next("bernoulli", key)?;
    super::less(unit(p.shape(), Dtype::F32, &k)?, &p)
}

/// Integers uniform in [low, high) (integers, or integer arrays that broadcast to `shape`) of an
/// integer or bool `dtype`: low + ⌊b·(high - low) / 2⁶⁴⌋ for 64 random bits b, computed exactly
/// in 32-bit halves (bias at most range / 2⁶⁴, any int64 range). Where `high <= low` the sample
/// is `low`, as in mlx.
pub fn randint(low: impl AsArray, high: impl AsArray, shape: &[usize], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    let op = "randint";
    if !dtype.is_integer() && dtype != Dtype::Bool {
        return Err(Error::dtype(op, format!("needs an integer or bool dtype, got {dtype}")));
    }
    let (low, high) = (low.as_array(), high.as_array());
    if let Some(d) = [low.dtype(), high.dtype()].into_iter().find(|d| !d.is_integer() && *d != Dtype::Bool) {
        return Err(Error::dtype(op, format!("the bounds must be integers, got {d}; round them first")));
    }
    let (low, high) = (cast(&low, Dtype::I64)?, cast(&high, Dtype::I64)?);
    check_parameters(op, shape, &[low.shape(), high.shape()])?;
    // high - low as an unsigned 64-bit count: the wrapped int64 difference's bits.
    let range = super::where_(super::greater(&high, &low)?, super::view(&super::subtract(&high, &low)?, Dtype::U64)?, Array::scalar(0u64))?;
    let mut words_shape = shape.to_vec();
    words_shape.push(2);
    let k = key_or_next(op, key)?;
    let words = cast(&bits_from(&k, &words_shape, 4)?, Dtype::U64)?;
    let word = |i: i32| super::take(&words, Array::scalar(i), Some(-1));
    let (b_high, b_low) = (word(0)?, word(1)?);
    let mask = Array::scalar(u64::from(u32::MAX));
    let (r_high, r_low) = (super::right_shift(&range, 32)?, super::bitwise_and(&range, &mask)?);
    // ⌊(bₕ·2³² + bₗ)(rₕ·2³² + rₗ) / 2⁶⁴⌋ from four 32 × 32-bit products, none overflowing.
    let (cross_a, cross_b) = (super::multiply(&b_high, &r_low)?, super::multiply(&b_low, &r_high)?);
    let low_product_top = super::right_shift(super::multiply(&b_low, &r_low)?, 32)?;
    let middle = super::add(super::add(super::bitwise_and(&cross_a, &mask)?, super::bitwise_and(&cross_b, &mask)?)?, low_product_top)?;
    let tops = super::add(super::right_shift(&cross_a, 32)?, super::right_shift(&cross_b, 32)?)?;
    let offset = super::add(super::add(super::multiply(&b_high, &r_high)?, tops)?, super::right_shift(middle, 32)?)?;
    cast(&super::add(super::view(&offset, Dtype::I64)?, &low)?, dtype)
}

/// Samples of the multivariate normal with mean `mean` (…, n) and covariance `cov` (…, n, n),
/// of shape `shape` + (n,): mean + U·√S·z for standard normal z, where cov = U·S·Uᵀ by the SVD.
/// `cov` is taken to be symmetric positive semi-definite, as numpy assumes (numpy warns where it
/// is not; here a matrix that is not gives the covariance U·S·Uᵀ). The batch axes of both
/// broadcast to `shape`.
pub fn multivariate_normal(mean: impl AsArray, cov: impl AsArray, shape: &[usize], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    let op = "multivariate_normal";
    if !matches!(dtype, Dtype::F32 | Dtype::F64) {
        return Err(Error::dtype(op, format!("samples are float32 or float64, got {dtype}")));
    }
    let (mean, cov) = (cast(&mean.as_array(), dtype)?, cast(&cov.as_array(), dtype)?);
    let n = mean.shape().last().copied();
    if mean.ndim() < 1 || cov.ndim() < 2 || cov.shape()[cov.ndim() - 1] != cov.shape()[cov.ndim() - 2] || Some(cov.shape()[cov.ndim() - 1]) != n {
        return Err(Error::value(
            op,
            format!(
                "needs mean (..., n) and a square covariance (..., n, n), got {} and {}",
                crate::shape::fmt_shape(mean.shape()),
                crate::shape::fmt_shape(cov.shape())
            ),
        ));
    }
    check_parameters(op, shape, &[&mean.shape()[..mean.ndim() - 1], &cov.shape()[..cov.ndim() - 2]])?;
    let factors = crate::linalg::svd(&cov, true).map_err(|e| e.in_op(op))?;
    let root = super::multiply(&factors[0], super::expand_dims(super::sqrt(&factors[1])?, &[-2])?)?;
    let mut full = shape.to_vec();
    full.push(n.unwrap_or(0));
    let z = normal(&full, dtype, 0.0, 1.0, key)?;
    let spread = super::squeeze(super::matmul(root, super::expand_dims(&z, &[-1])?)?, Some(&[-1]))?;
    super::add(spread, &mean)
}

/// Standard Gumbel samples: -log(-log(u)), computed in float64 for float64 and in float32 below.
pub fn gumbel(shape: &[usize], dtype: Dtype, key: Option<&Array>) -> Result<Array> {
    check_float("gumbel", dtype)?;
    let k = key_or_next("gumbel", key)?;
    let (work, tiny) = if dtype == Dtype::F64 { (Dtype::F64, f64::MIN_POSITIVE) } else { (Dtype::F32, f32::MIN_POSITIVE as f64) };
    let u = uniform(tiny, 1.0, shape, work, Some(&k))?;
    cast(&super::negative(super::log(super::negative(super::log(&u)?)?)?)?, dtype)
}

/// Samples category indices (uint32) from unnormalised log-probabilities along `axis`
/// (Gumbel-max). The result has `logits`' shape without `axis`, with `num_samples` appended when
/// given.
pub fn categorical(logits: impl AsArray, axis: i64, num_samples: Option<usize>, key: Option<&Array>) -> Result<Array> {
    sample_categorical(logits.as_array(), axis, num_samples, key).map_err(|e| e.in_op("categorical"))
}

fn sample_categorical(logits: Array, axis: i64, num_samples: Option<usize>, key: Option<&Array>) -> Result<Array> {
    let logits = super::moveaxis(logits, axis, -1)?;
    let logits = match num_samples {
        Some(n) => {
            let mut s = logits.shape().to_vec();
            s.insert(s.len() - 1, n);
            super::broadcast_to(super::expand_dims(&logits, &[-2])?, &s)?
        }
        None => logits,
    };
    let work = if logits.dtype() == Dtype::F64 { Dtype::F64 } else { Dtype::F32 };
    let g = gumbel(logits.shape(), work, key)?;
    super::argmax(super::add(cast(&logits, work)?, g)?, Some(-1), false)
}

/// A random ordering of `0..n` (int32): argsort of random bits.
pub fn permutation(n: usize, key: Option<&Array>) -> Result<Array> {
    let order = random_order(n, "permutation", key)?;
    cast(&order, Dtype::I32)
}

/// `x` shuffled along `axis`.
pub fn permutation_of(x: impl AsArray, axis: i64, key: Option<&Array>) -> Result<Array> {
    let x = x.as_array();
    let a = crate::shape::normalize_axis("permutation", axis, x.ndim())?;
    let order = random_order(x.shape()[a], "permutation", key)?;
    super::take(&x, &order, Some(axis))
}

fn random_order(n: usize, op: &str, key: Option<&Array>) -> Result<Array> {
    let k = key_or_next(op, key)?;
    super::argsort(bits_from(&k, &[n], 4)?, Some(0))
}
