//! Ops of mlx.core built from other ops, so autodiff, vmap and compile see only primitives:
//! `atleast_1d/2d/3d`, `degrees`, `radians`, `nan_to_num`, `trace`, `tri`, `kron`, `divmod`,
//! `diff`, `trunc`, `unstack`, `vecdot`, `logical_xor`, `count_nonzero`, `empty_like`, `median`,
//! `searchsorted` and `as_strided`.

use super::*;
use crate::complex::Complex64;
use crate::shape::{fmt_shape, normalize_axes, normalize_axis};

/// `x` with at least one dimension (a scalar becomes shape (1,)).
pub fn atleast_1d(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if x.ndim() >= 1 { Ok(x) } else { reshape(&x, &[1]) }
}

/// `x` with at least two dimensions (a vector becomes a row).
pub fn atleast_2d(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    match x.ndim() {
        0 => reshape(&x, &[1, 1]),
        1 => expand_dims(&x, &[0]),
        _ => Ok(x),
    }
}

/// `x` with at least three dimensions, as numpy: (n,) becomes (1, n, 1), (m, n) becomes (m, n, 1).
pub fn atleast_3d(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    match x.ndim() {
        0 => reshape(&x, &[1, 1, 1]),
        1 => expand_dims(&x, &[0, 2]),
        2 => expand_dims(&x, &[2]),
        _ => Ok(x),
    }
}

/// Radians to degrees.
pub fn degrees(x: impl AsArray) -> Result<Array> {
    multiply(x, 180.0 / std::f64::consts::PI)
}

/// Degrees to radians.
pub fn radians(x: impl AsArray) -> Result<Array> {
    multiply(x, std::f64::consts::PI / 180.0)
}

/// The largest finite value of a float dtype (its negation is the most negative one).
pub(crate) fn largest_finite(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 65504.0,
        Dtype::BF16 => 3.3895313892515355e38,
        Dtype::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

/// NaN replaced by `nan` and infinities by `posinf`/`neginf` (default: the dtype's largest and
/// smallest finite values); a complex number's parts each on their own, as numpy. Integer and
/// bool arrays come back as they are.
pub fn nan_to_num(x: impl AsArray, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Array> {
    let x = x.as_array();
    if x.dtype().is_complex() {
        let fix = |part: Array| nan_to_num(part, nan, posinf, neginf);
        let imaginary = multiply(fix(imag(&x)?)?, Array::scalar(Complex64::new(0.0, 1.0)))?;
        return add(fix(real(&x)?)?, imaginary);
    }
    if !x.dtype().is_float() {
        return Ok(x);
    }
    let big = largest_finite(x.dtype());
    let out = where_(isnan(&x)?, nan, &x)?;
    let out = where_(isposinf(&out)?, posinf.unwrap_or(big), &out)?;
    where_(isneginf(&out)?, neginf.unwrap_or(-big), &out)
}

/// The sum of diagonal `offset` of the plane (`axis1`, `axis2`), in `dtype` when given.
pub fn trace(x: impl AsArray, offset: i64, axis1: i64, axis2: i64, dtype: Option<Dtype>) -> Result<Array> {
    let d = diagonal(x, offset, axis1, axis2)?;
    let d = match dtype {
        Some(t) => astype(&d, t)?,
        None => d,
    };
    sum(&d, Some(&[-1]), false)
}

/// An `n` by `m` (default `n`) matrix of `dtype` with ones at and below diagonal `k`.
pub fn tri(n: usize, m: Option<usize>, k: i64, dtype: Dtype) -> Result<Array> {
    tril(ones(&[n, m.unwrap_or(n)], dtype)?, k)
}

/// The Kronecker product of two non-empty arrays (as mlx): the axes of each pair interleaved,
/// then merged.
pub fn kron(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let (a, b) = (a.as_array(), b.as_array());
    if a.size() == 0 || b.size() == 0 {
        return Err(Error::shape("kron", format!("inputs cannot be empty, got shapes {} and {}", fmt_shape(a.shape()), fmt_shape(b.shape()))));
    }
    let nd = a.ndim().max(b.ndim());
    let padded = |x: &Array| -> Vec<i64> {
        std::iter::repeat_n(1, nd - x.ndim()).chain(x.shape().iter().map(|&d| d as i64)).collect()
    };
    let (sa, sb) = (padded(&a), padded(&b));
    let a_axes: Vec<i64> = sa.iter().flat_map(|&d| [d, 1]).collect();
    let b_axes: Vec<i64> = sb.iter().flat_map(|&d| [1, d]).collect();
    let product = multiply(reshape(&a, &a_axes)?, reshape(&b, &b_axes)?)?;
    reshape(product, &sa.iter().zip(&sb).map(|(x, y)| x * y).collect::<Vec<_>>())
}

/// `(floor_divide(a, b), remainder(a, b))`.
pub fn divmod(a: impl AsArray, b: impl AsArray) -> Result<(Array, Array)> {
    let (a, b) = (a.as_array(), b.as_array());
    Ok((floor_divide(&a, &b)?, remainder(&a, &b)?))
}

/// The `n`-th difference along `axis`: `x[1:] - x[:-1]`, `n` times.
pub fn diff(x: impl AsArray, n: usize, axis: i64) -> Result<Array> {
    let mut x = x.as_array();
    if x.ndim() == 0 {
        return Err(Error::shape("diff", "the array must have at least one dimension, got a scalar"));
    }
    let ax = normalize_axis("diff", axis, x.ndim())?;
    // Past the axis's length every further difference is empty too: stop there.
    for _ in 0..n.min(x.shape()[ax]) {
        let len = x.shape()[ax] as i64;
        x = subtract(slice_axis(&x, ax as i64, 1, len)?, slice_axis(&x, ax as i64, 0, len - 1)?)?;
    }
    Ok(x)
}

/// Each element rounded toward zero (integers and bools unchanged).
pub fn trunc(x: impl AsArray) -> Result<Array> {
    let x = x.as_array();
    if !x.dtype().is_inexact() {
        return Ok(x);
    }
    if x.dtype().is_complex() {
        return Err(Error::dtype("trunc", "complex numbers have no rounding toward zero; truncate real(x) and imag(x)"));
    }
    where_(less(&x, 0.0)?, ceil(&x)?, floor(&x)?)
}

/// The slices of `x` along `axis`, that axis removed (the inverse of `stack`).
pub fn unstack(x: impl AsArray, axis: i64) -> Result<Vec<Array>> {
    let x = x.as_array();
    if x.ndim() == 0 {
        return Err(Error::shape("unstack", "the array must have at least one dimension, got a scalar"));
    }
    let ax = normalize_axis("unstack", axis, x.ndim())?;
    (0..x.shape()[ax] as i64).map(|i| squeeze(slice_axis(&x, ax as i64, i, i + 1)?, Some(&[ax as i64]))).collect()
}

/// The dot products of `a` and `b` along `axis` (other axes broadcast), `a` conjugated as
/// numpy's `vecdot` (a no-op for real inputs).
pub fn vecdot(a: impl AsArray, b: impl AsArray, axis: i64) -> Result<Array> {
    let (a, b) = (a.as_array(), b.as_array());
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::shape("vecdot", "the inputs must have at least one dimension"));
    }
    let (aa, ab) = (normalize_axis("vecdot", axis, a.ndim())?, normalize_axis("vecdot", axis, b.ndim())?);
    if a.shape()[aa] != b.shape()[ab] {
        let (sa, sb) = (fmt_shape(a.shape()), fmt_shape(b.shape()));
        return Err(Error::shape("vecdot", format!("a and b differ in size along axis {axis}: {sa} and {sb}")));
    }
    sum(multiply(conjugate(&a)?, &b)?, Some(&[axis]), false)
}

/// True where exactly one of `a` and `b` is nonzero.
pub fn logical_xor(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    not_equal(not_equal(a, 0.0)?, not_equal(b, 0.0)?)
}

/// How many elements are nonzero along `axes` (all when None), as int32.
pub fn count_nonzero(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let x = x.as_array();
    if let Some(a) = axes {
        normalize_axes("count_nonzero", a, x.ndim())?;
    }
    let zero = zeros(&[], x.dtype())?;
    sum(astype(not_equal(&x, zero)?, Dtype::I32)?, axes, keepdims)
}

/// An array of `x`'s shape and of `dtype` (default: `x`'s), zero-filled: kiln has no
/// uninitialised memory.
pub fn empty_like(x: impl AsArray, dtype: Option<Dtype>) -> Result<Array> {
    let x = x.as_array();
    zeros(x.shape(), dtype.unwrap_or(x.dtype()))
}

/// The median along `axes` (all when None): the middle of the sorted values, or the mean of
/// the two middle ones; NaN where a NaN is among them. Floats and complex numbers keep their
/// dtype (complex in numpy's lexicographic order); integers and bools give float32.
pub fn median(x: impl AsArray, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let x = x.as_array();
    let all: Vec<i64> = (0..x.ndim() as i64).collect();
    let mut axes = normalize_axes("median", axes.unwrap_or(&all), x.ndim())?;
    axes.sort_unstable();
    let rest: Vec<usize> = (0..x.ndim()).filter(|i| !axes.contains(i)).collect();
    let n: usize = axes.iter().map(|&i| x.shape()[i]).product();
    if n == 0 {
        return Err(Error::shape("median", format!("cannot take the median of no elements (shape {}, axes {axes:?})", fmt_shape(x.shape()))));
    }
    let inexact = x.dtype().is_inexact();
    let dtype = if inexact { x.dtype() } else { Dtype::F32 };
    let order: Vec<i64> = rest.iter().chain(&axes).map(|&i| i as i64).collect();
    let mut flat_shape: Vec<i64> = rest.iter().map(|&i| x.shape()[i] as i64).collect();
    flat_shape.push(-1);
    let flat = reshape(transpose(&x, Some(&order))?, &flat_shape)?;
    let ordered = sort(&flat, Some(-1))?;
    let pick = |i: usize| -> Result<Array> { astype(squeeze(slice_axis(&ordered, -1, i as i64, i as i64 + 1)?, Some(&[-1]))?, dtype) };
    let mut mid = pick(n / 2)?;
    if n.is_multiple_of(2) {
        mid = multiply(add(&mid, pick(n / 2 - 1)?)?, 0.5)?;
    }
    if inexact {
        mid = where_(any(isnan(&flat)?, Some(&[-1]), false)?, astype(Array::scalar(f64::NAN), dtype)?, &mid)?;
    }
    if keepdims {
        let kept: Vec<i64> = x.shape().iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d as i64 }).collect();
        mid = reshape(&mid, &kept)?;
    }
    Ok(mid)
}

/// For each value, where it would be inserted into the 1-d `sorted` to keep it sorted: before
/// equal entries, or after them when `right`; as uint32. NaN sorts after every number.
pub fn searchsorted(sorted: impl AsArray, values: impl AsArray, right: bool) -> Result<Array> {
    let (seq, values) = (sorted.as_array(), values.as_array());
    if seq.ndim() != 1 {
        return Err(Error::shape("searchsorted", format!("the sorted sequence must be 1-d, got shape {}", fmt_shape(seq.shape()))));
    }
    let v = expand_dims(&values, &[-1])?;
    let counted = if right {
        logical_or(less_equal(&seq, &v)?, isnan(&v)?)?
    } else {
        logical_or(less(&seq, &v)?, logical_and(isnan(&v)?, logical_not(isnan(&seq)?)?)?)?
    };
    sum(astype(counted, Dtype::U32)?, Some(&[-1]), false)
}

/// `x`'s elements, taken in row-major order, read as `shape` (default `x`'s) with element
/// `strides` (default row-major) from `offset`, as mlx's `as_strided`. kiln gathers them into
/// a new array (a copy, so overlapping windows are safe to write), and a view reaching outside
/// `x` is an error rather than a read of other memory.
pub fn as_strided(x: impl AsArray, shape: Option<&[usize]>, strides: Option<&[i64]>, offset: i64) -> Result<Array> {
    let x = x.as_array();
    let shape = shape.unwrap_or(x.shape()).to_vec();
    let strides: Vec<i64> = match strides {
        Some(s) => s.to_vec(),
        None => crate::shape::row_major_strides(&shape).iter().map(|&s| s as i64).collect(),
    };
    if strides.len() != shape.len() {
        return Err(Error::value(
            "as_strided",
            format!("{} strides for shape {}; give one stride per axis", strides.len(), fmt_shape(&shape)),
        ));
    }
    let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let count = count.ok_or_else(|| Error::shape("as_strided", format!("shape {} has more elements than memory can address", fmt_shape(&shape))))?;
    if count > 0 {
        // The reach of the view, in i128 so no stride or size overflows.
        let (mut low, mut high) = (offset as i128, offset as i128);
        for (&d, &s) in shape.iter().zip(&strides) {
            let span = (d as i128 - 1) * s as i128;
            if span < 0 { low += span } else { high += span }
        }
        if low < 0 || high >= x.size() as i128 {
            let reach = if low < 0 { low } else { high };
            return Err(Error::value(
                "as_strided",
                format!(
                    "shape {}, strides {strides:?} and offset {offset} reach element {reach}, outside the {} elements of the input",
                    fmt_shape(&shape),
                    x.size()
                ),
            ));
        }
    }
    // The gather index, built lazily (offset + Σ position · stride, broadcast over the axes), so
    // its memory is kiln's to allocate and refuse like any array's.
    let mut index = Array::scalar(offset);
    for (axis, (&d, &s)) in shape.iter().zip(&strides).enumerate() {
        let mut along = vec![1i64; shape.len()];
        along[axis] = d as i64;
        let positions = reshape(multiply(arange(0.0, d as f64, 1.0, Dtype::I64)?, Array::scalar(s))?, &along)?;
        index = add(index, positions)?;
    }
    let index = broadcast_to(index, &shape)?;
    take(reshape(&x, &[-1])?, index, None)
}
