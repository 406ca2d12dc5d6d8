//! Unary, binary, comparison, logical, bitwise and `where` ops against float64 / i128 references
//! on random inputs: every accepted dtype, every layout (contiguous, transposed, negative-stride,
//! sliced), broadcasting, 0-d and empty arrays, the threaded path, and bad input.
#![allow(clippy::type_complexity)] // tables of (name, op, reference) cases
mod common;

use common::*;
use kiln::ops::{self, SliceSpec};
use kiln::{Array, Dtype, ErrorKind};

const FLOATS: [Dtype; 4] = [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64];
const INTS: [Dtype; 8] =
    [Dtype::U8, Dtype::U16, Dtype::U32, Dtype::U64, Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64];

/// erfinv by bisection on [`common::erf_reference`].
fn erfinv_reference(y: f64) -> f64 {
    let (mut lo, mut hi) = (-6.0, 6.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if erf_reference(mid) < y {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

type UnaryFn = fn(&Array) -> kiln::Result<Array>;

/// Every float unary op: the kiln op, its float64 reference and an input range inside its domain
/// and away from poles, so that the rounding of the input does not dominate the comparison.
fn float_unary_cases() -> Vec<(&'static str, UnaryFn, fn(f64) -> f64, f64, f64)> {
    vec![
        ("abs", |x| ops::abs(x), f64::abs, -5.0, 5.0),
        ("negative", |x| ops::negative(x), |v| -v, -5.0, 5.0),
        ("sign", |x| ops::sign(x), |v| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 }, -5.0, 5.0),
        ("exp", |x| ops::exp(x), f64::exp, -10.0, 10.0),
        ("expm1", |x| ops::expm1(x), f64::exp_m1, -3.0, 3.0),
        ("log", |x| ops::log(x), f64::ln, 0.01, 100.0),
        ("log1p", |x| ops::log1p(x), f64::ln_1p, -0.9, 10.0),
        ("log2", |x| ops::log2(x), f64::log2, 0.01, 100.0),
        ("log10", |x| ops::log10(x), f64::log10, 0.01, 100.0),
        ("sqrt", |x| ops::sqrt(x), f64::sqrt, 0.0, 100.0),
        ("rsqrt", |x| ops::rsqrt(x), |v| 1.0 / v.sqrt(), 0.01, 100.0),
        ("square", |x| ops::square(x), |v| v * v, -10.0, 10.0),
        ("reciprocal", |x| ops::reciprocal(x), |v| 1.0 / v, 0.1, 10.0),
        ("sin", |x| ops::sin(x), f64::sin, -1.5, 1.5),
        ("cos", |x| ops::cos(x), f64::cos, -1.5, 1.5),
        ("tan", |x| ops::tan(x), f64::tan, -1.2, 1.2),
        ("arcsin", |x| ops::arcsin(x), f64::asin, -0.95, 0.95),
        ("arccos", |x| ops::arccos(x), f64::acos, -0.95, 0.95),
        ("arctan", |x| ops::arctan(x), f64::atan, -5.0, 5.0),
        ("sinh", |x| ops::sinh(x), f64::sinh, -4.0, 4.0),
        ("cosh", |x| ops::cosh(x), f64::cosh, -4.0, 4.0),
        ("tanh", |x| ops::tanh(x), f64::tanh, -5.0, 5.0),
        ("arcsinh", |x| ops::arcsinh(x), f64::asinh, -5.0, 5.0),
        ("arccosh", |x| ops::arccosh(x), f64::acosh, 1.1, 10.0),
        ("arctanh", |x| ops::arctanh(x), f64::atanh, -0.9, 0.9),
        ("erf", |x| ops::erf(x), erf_reference, -4.0, 4.0),
        ("erfinv", |x| ops::erfinv(x), erfinv_reference, -0.95, 0.95),
        ("sigmoid", |x| ops::sigmoid(x), |v| 1.0 / (1.0 + (-v).exp()), -20.0, 20.0),
        ("floor", |x| ops::floor(x), f64::floor, -5.0, 5.0),
        ("ceil", |x| ops::ceil(x), f64::ceil, -5.0, 5.0),
        ("round", |x| ops::round(x), f64::round_ties_even, -5.0, 5.0),
    ]
}

/// The reference applied to `inputs` rounded to `dtype`, then rounded to `dtype` again: what a
/// correctly rounded kernel returns.
fn reference_in(dtype: Dtype, inputs: &[f64], shape: &[usize], f: impl Fn(f64) -> f64) -> Vec<f64> {
    let want: Vec<f64> = rounded(inputs, shape, dtype).into_iter().map(f).collect();
    rounded(&want, shape, dtype)
}

#[test]
fn float_unary_ops_match_float64_in_every_float_dtype_and_layout() {
    let mut rng = Rng::new(1);
    let shape = [3, 5, 7];
    for (name, op, reference, lo, hi) in float_unary_cases() {
        let mut values = rng.vec(105, lo, hi);
        values[0] = if lo <= 0.0 && hi >= 0.0 { 0.0 } else { lo }; // an exact edge of the domain
        values[1] = 0.5 * (lo + hi).round();
        for dtype in FLOATS {
            let want = reference_in(dtype, &values, &shape, reference);
            // A few ulp of the dtype: float32 transcendentals are written for speed (<= 8 ulp).
            let rtol = 4.0 * rtol_for(dtype);
            for layout in LAYOUTS {
                let x = with_layout(&values, &shape, dtype, layout);
                let y = op(&x).unwrap();
                assert_eq!((y.dtype(), y.shape()), (dtype, &shape[..]), "{name} {dtype}");
                let what = format!("{name} {dtype} {layout:?}");
                assert_close(&y.to_f64_vec().unwrap(), &want, rtol, rtol, &what);
            }
        }
    }
}

#[test]
fn float_ops_on_integers_and_bools_compute_in_float32() {
    let mut rng = Rng::new(2);
    for dtype in INTS.into_iter().chain([Dtype::Bool]) {
        let values = random_values(&mut rng, 24, dtype, -20.0, 20.0);
        let x = array(&values, &[4, 6], dtype);
        for (name, op, reference) in [
            ("exp", (|x| ops::exp(x)) as UnaryFn, f64::exp as fn(f64) -> f64),
            ("sqrt", |x| ops::sqrt(x), f64::sqrt),
            ("sin", |x| ops::sin(x), f64::sin),
            ("sigmoid", |x| ops::sigmoid(x), |v| 1.0 / (1.0 + (-v).exp())),
        ] {
            let y = op(&x).unwrap();
            assert_eq!(y.dtype(), Dtype::F32, "{name} of {dtype}");
            let want = rounded(&values.iter().map(|&v| reference(v)).collect::<Vec<_>>(), &[4, 6], Dtype::F32);
            assert_close(&y.to_f64_vec().unwrap(), &want, 1e-6, 0.0, &format!("{name} of {dtype}"));
        }
    }
}

#[test]
fn integer_unary_ops_keep_the_dtype_and_wrap() {
    let mut rng = Rng::new(3);
    for dtype in INTS {
        let values = random_values(&mut rng, 30, dtype, -100.0, 100.0);
        for layout in LAYOUTS {
            let x = with_layout(&values, &[5, 6], dtype, layout);
            let cases: [(&str, UnaryFn, fn(i128) -> i128); 7] = [
                ("abs", |x| ops::abs(x), |v| v.abs()),
                ("negative", |x| ops::negative(x), |v| -v),
                ("sign", |x| ops::sign(x), |v| v.signum()),
                ("square", |x| ops::square(x), |v| v * v),
                ("floor", |x| ops::floor(x), |v| v),
                ("round", |x| ops::round(x), |v| v),
                ("bitwise_invert", |x| ops::bitwise_invert(x), |v| !v),
            ];
            for (name, op, reference) in cases {
                let y = op(&x).unwrap();
                assert_eq!(y.dtype(), dtype, "{name} {dtype}");
                let want: Vec<f64> = values.iter().map(|&v| wrap_to(reference(v as i128), dtype)).collect();
                assert_eq!(y.to_f64_vec().unwrap(), want, "{name} {dtype} {layout:?}");
            }
        }
    }
    // Unsigned abs is the identity (a peer once returned garbage for it).
    let u = Array::from_slice(&[200u8, 0, 255], &[3]).unwrap();
    assert_eq!(ops::abs(&u).unwrap().to_vec::<u8>().unwrap(), vec![200, 0, 255]);
    let b = Array::from_slice(&[true, false], &[2]).unwrap();
    assert_eq!(ops::bitwise_invert(&b).unwrap().to_vec::<bool>().unwrap(), vec![false, true]);
}

#[test]
fn predicates_classify_special_values_in_every_dtype() {
    let specials = [0.0, -0.0, 1.5, -2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let cases: [(&str, UnaryFn, fn(f64) -> bool); 6] = [
        ("isnan", |x| ops::isnan(x), f64::is_nan),
        ("isinf", |x| ops::isinf(x), f64::is_infinite),
        ("isposinf", |x| ops::isposinf(x), |v| v == f64::INFINITY),
        ("isneginf", |x| ops::isneginf(x), |v| v == f64::NEG_INFINITY),
        ("isfinite", |x| ops::isfinite(x), f64::is_finite),
        ("logical_not", |x| ops::logical_not(x), |v| v == 0.0),
    ];
    for dtype in Dtype::REAL {
        let values: Vec<f64> = if dtype.is_float() { specials.to_vec() } else { vec![0.0, 1.0, 0.0, 1.0] };
        let n = values.len();
        for layout in LAYOUTS {
            let x = with_layout(&values, &[n], dtype, layout);
            for (name, op, reference) in cases {
                let y = op(&x).unwrap();
                assert_eq!(y.dtype(), Dtype::Bool, "{name} {dtype}");
                let want: Vec<bool> = values.iter().map(|&v| reference(v)).collect();
                assert_eq!(y.to_vec::<bool>().unwrap(), want, "{name} {dtype} {layout:?}");
            }
        }
    }
}

type BinaryFn = fn(&Array, &Array) -> kiln::Result<Array>;

/// Python's a % b for floats: the result takes the sign of b.
fn py_mod(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a.rem_euclid(b)
    } else {
        -(-a).rem_euclid(-b)
    }
}

#[test]
fn float_binary_ops_broadcast_and_match_float64() {
    let mut rng = Rng::new(4);
    let (sa, sb, so) = ([3, 1, 6], [4, 6], [3, 4, 6]);
    let cases: [(&str, BinaryFn, fn(f64, f64) -> f64, (f64, f64), (f64, f64)); 10] = [
        ("add", |a, b| ops::add(a, b), |a, b| a + b, (-10.0, 10.0), (-10.0, 10.0)),
        ("subtract", |a, b| ops::subtract(a, b), |a, b| a - b, (-10.0, 10.0), (-10.0, 10.0)),
        ("multiply", |a, b| ops::multiply(a, b), |a, b| a * b, (-10.0, 10.0), (-10.0, 10.0)),
        ("divide", |a, b| ops::divide(a, b), |a, b| a / b, (-10.0, 10.0), (0.5, 4.0)),
        ("power", |a, b| ops::power(a, b), f64::powf, (0.1, 4.0), (-2.0, 2.0)),
        ("maximum", |a, b| ops::maximum(a, b), f64::max, (-3.0, 3.0), (-3.0, 3.0)),
        ("minimum", |a, b| ops::minimum(a, b), f64::min, (-3.0, 3.0), (-3.0, 3.0)),
        ("arctan2", |a, b| ops::arctan2(a, b), f64::atan2, (-3.0, 3.0), (-3.0, 3.0)),
        ("logaddexp", |a, b| ops::logaddexp(a, b), |a, b| a.max(b) + (-(a - b).abs()).exp().ln_1p(), (-10.0, 10.0), (-10.0, 10.0)),
        ("remainder", |a, b| ops::remainder(a, b), py_mod, (-10.0, 10.0), (0.5, 3.0)),
    ];
    for (name, op, reference, (alo, ahi), (blo, bhi)) in cases {
        let a = rng.vec(18, alo, ahi);
        let mut b = rng.vec(24, blo, bhi);
        if name == "remainder" {
            // Both signs of the divisor.
            b.iter_mut().step_by(2).for_each(|v| *v = -*v);
        }
        for dtype in FLOATS {
            let (ra, rb) = (rounded(&a, &sa, dtype), rounded(&b, &sb, dtype));
            let want: Vec<f64> = (0..72)
                .map(|i| {
                    let (p, q, r) = (i / 24, (i / 6) % 4, i % 6);
                    reference(ra[p * 6 + r], rb[q * 6 + r])
                })
                .collect();
            let want = rounded(&want, &so, dtype);
            for (la, lb) in LAYOUTS.into_iter().zip(LAYOUTS.into_iter().rev()) {
                let y = op(&with_layout(&a, &sa, dtype, la), &with_layout(&b, &sb, dtype, lb)).unwrap();
                assert_eq!((y.dtype(), y.shape()), (dtype, &so[..]), "{name} {dtype}");
                let rtol = 4.0 * rtol_for(dtype);
                // remainder loses relative precision when the result is near 0 or near b.
                let atol = if name == "remainder" { 4.0 * rtol * bhi } else { rtol };
                assert_close(&y.to_f64_vec().unwrap(), &want, rtol, atol, &format!("{name} {dtype} {la:?}/{lb:?}"));
            }
        }
    }
}

#[test]
fn float_floor_divide_rounds_toward_negative_infinity() {
    let mut rng = Rng::new(5);
    for dtype in FLOATS {
        // a = (q + f) * b with f in [0.1, 0.9]: the quotient is well away from an integer.
        let b: Vec<f64> = (0..40).map(|i| rng.uniform(1.0, 3.0) * if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
        let b = rounded(&b, &[40], dtype);
        let a: Vec<f64> = b.iter().map(|&b| (rng.uniform(-5.0, 5.0).floor() + rng.uniform(0.1, 0.9)) * b).collect();
        let a = rounded(&a, &[40], dtype);
        let want: Vec<f64> = a.iter().zip(&b).map(|(a, b)| (a / b).floor()).collect();
        let y = ops::floor_divide(array(&a, &[40], dtype), array(&b, &[40], dtype)).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), want, "{dtype}");
    }
}

#[test]
fn integer_binary_ops_match_i128_references() {
    let mut rng = Rng::new(6);
    let cases: [(&str, BinaryFn, fn(i128, i128, u32) -> Option<i128>); 13] = [
        ("add", |a, b| ops::add(a, b), |a, b, _| Some(a + b)),
        ("subtract", |a, b| ops::subtract(a, b), |a, b, _| Some(a - b)),
        ("multiply", |a, b| ops::multiply(a, b), |a, b, _| Some(a * b)),
        // Python semantics: floor division, remainder with the sign of the divisor; by zero: 0.
        ("floor_divide", |a, b| ops::floor_divide(a, b), |a, b, _| {
            Some(if b == 0 { 0 } else { (a as f64 / b as f64).floor() as i128 })
        }),
        ("remainder", |a, b| ops::remainder(a, b), |a, b, _| {
            Some(if b == 0 { 0 } else { a - b * (a as f64 / b as f64).floor() as i128 })
        }),
        ("power", |a, b| ops::power(a, b), |a, b, _| (b >= 0).then(|| (0..b).fold(1i128, |p, _| p * a))),
        ("maximum", |a, b| ops::maximum(a, b), |a, b, _| Some(a.max(b))),
        ("minimum", |a, b| ops::minimum(a, b), |a, b, _| Some(a.min(b))),
        ("bitwise_and", |a, b| ops::bitwise_and(a, b), |a, b, _| Some(a & b)),
        ("bitwise_or", |a, b| ops::bitwise_or(a, b), |a, b, _| Some(a | b)),
        ("bitwise_xor", |a, b| ops::bitwise_xor(a, b), |a, b, _| Some(a ^ b)),
        // Shifts by the bit width or more (or by a negative amount) shift everything out.
        ("left_shift", |a, b| ops::left_shift(a, b), |a, b, bits| {
            Some(if b < 0 || b >= bits as i128 { 0 } else { a << b })
        }),
        ("right_shift", |a, b| ops::right_shift(a, b), |a, b, bits| {
            Some(if b < 0 || b >= bits as i128 { if a < 0 { -1 } else { 0 } } else { a >> b })
        }),
    ];
    for dtype in INTS {
        let bits = 8 * dtype.size() as u32;
        let a = random_values(&mut rng, 20, dtype, -120.0, 120.0);
        for (name, op, reference) in cases {
            let b: Vec<f64> = match name {
                "power" => random_values(&mut rng, 4, dtype, -1.0, 6.0),
                "left_shift" | "right_shift" => (0..4).map(|i| [1.0, 3.0, bits as f64 - 1.0, bits as f64 + 2.0][i]).collect(),
                _ => {
                    let mut b = random_values(&mut rng, 4, dtype, -9.0, 9.0);
                    b[0] = 0.0; // division and remainder by zero
                    b
                }
            };
            // a: [5, 4] transposed view; b: [4] broadcast along the rows.
            for layout in LAYOUTS {
                let y = op(&with_layout(&a, &[5, 4], dtype, layout), &array(&b, &[4], dtype)).unwrap();
                assert_eq!(y.dtype(), dtype, "{name} {dtype}");
                let got = y.to_f64_vec().unwrap();
                for (i, g) in got.iter().enumerate() {
                    let (x, s) = (a[i] as i128, b[i % 4] as i128);
                    if let Some(w) = reference(x, s, bits) {
                        assert_eq!(*g, wrap_to(w, dtype), "{name} {dtype} {layout:?}: {x} and {s}");
                    }
                }
            }
        }
    }
}

/// A negative integer exponent gives 0 whatever the base, as in mlx (1 and -1 included).
#[test]
fn integer_power_with_negative_exponents() {
    let base = Array::from_slice(&[2i32, 1, -1, -1, 0, 3], &[6]).unwrap();
    let exp = Array::from_slice(&[-1i32, -3, -3, -2, 2, 3], &[6]).unwrap();
    assert_eq!(ops::power(&base, &exp).unwrap().to_vec::<i32>().unwrap(), vec![0, 0, 0, 0, 0, 27]);
}

#[test]
fn comparisons_and_logical_ops_in_every_dtype() {
    let mut rng = Rng::new(7);
    let cases: [(&str, BinaryFn, fn(f64, f64) -> bool); 8] = [
        ("equal", |a, b| ops::equal(a, b), |a, b| a == b),
        ("not_equal", |a, b| ops::not_equal(a, b), |a, b| a != b),
        ("less", |a, b| ops::less(a, b), |a, b| a < b),
        ("less_equal", |a, b| ops::less_equal(a, b), |a, b| a <= b),
        ("greater", |a, b| ops::greater(a, b), |a, b| a > b),
        ("greater_equal", |a, b| ops::greater_equal(a, b), |a, b| a >= b),
        ("logical_and", |a, b| ops::logical_and(a, b), |a, b| a != 0.0 && b != 0.0),
        ("logical_or", |a, b| ops::logical_or(a, b), |a, b| a != 0.0 || b != 0.0),
    ];
    for dtype in Dtype::REAL {
        // Small integers (so equal values occur), plus NaN for floats.
        let mut a = random_values(&mut rng, 12, dtype, -2.0, 3.0).iter().map(|v| v.floor()).collect::<Vec<_>>();
        let b = random_values(&mut rng, 4, dtype, -2.0, 3.0).iter().map(|v| v.floor()).collect::<Vec<_>>();
        if dtype.is_float() {
            a[5] = f64::NAN;
        }
        for (name, op, reference) in cases {
            for layout in LAYOUTS {
                let y = op(&with_layout(&a, &[3, 4], dtype, layout), &array(&b, &[4], dtype)).unwrap();
                assert_eq!(y.dtype(), Dtype::Bool, "{name} {dtype}");
                let want: Vec<bool> = (0..12).map(|i| reference(a[i], b[i % 4])).collect();
                assert_eq!(y.to_vec::<bool>().unwrap(), want, "{name} {dtype} {layout:?}");
            }
        }
    }
}

#[test]
fn maximum_and_minimum_propagate_nan_from_either_side() {
    let a = Array::from_slice(&[f32::NAN, 1.0, 2.0], &[3]).unwrap();
    let b = Array::from_slice(&[1.0f32, f32::NAN, 3.0], &[3]).unwrap();
    for op in [(|a, b| ops::maximum(a, b)) as BinaryFn, |a, b| ops::minimum(a, b)] {
        let v = op(&a, &b).unwrap().to_vec::<f32>().unwrap();
        assert!(v[0].is_nan() && v[1].is_nan() && !v[2].is_nan(), "{v:?}");
    }
}

#[test]
fn where_broadcasts_all_three_and_promotes() {
    let mut rng = Rng::new(8);
    let cond: Vec<f64> = (0..4).map(|_| (rng.next_u64() & 1) as f64).collect();
    let a = rng.vec(12, -5.0, 5.0);
    for dtype in Dtype::REAL {
        let b = random_values(&mut rng, 3, dtype, -5.0, 5.0);
        for layout in LAYOUTS {
            // cond [4] (as float: nonzero is true), a [3, 4] float32, b [3, 1] of `dtype`.
            let x = with_layout(&a, &[3, 4], Dtype::F32, layout);
            let y = ops::where_(array(&cond, &[4], Dtype::F32), &x, array(&b, &[3, 1], dtype)).unwrap();
            assert_eq!(y.dtype(), kiln::promote_types(Dtype::F32, dtype));
            let (ra, rb) = (rounded(&a, &[3, 4], Dtype::F32), rounded(&b, &[3, 1], dtype));
            let want: Vec<f64> = (0..12).map(|i| if cond[i % 4] != 0.0 { ra[i] } else { rb[i / 4] }).collect();
            let want = rounded(&want, &[3, 4], y.dtype());
            assert_eq!(y.to_f64_vec().unwrap(), want, "{dtype} {layout:?}");
        }
    }
}

#[test]
fn clip_limits_either_or_both_sides() {
    let x = Array::from_slice(&[-3.0f32, 0.5, 7.0], &[3]).unwrap();
    let lo: &dyn ops::AsArray = &0.0;
    let hi: &dyn ops::AsArray = &1.0;
    assert_eq!(ops::clip(&x, Some(lo), Some(hi)).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 1.0]);
    assert_eq!(ops::clip(&x, None, Some(hi)).unwrap().to_vec::<f32>().unwrap(), vec![-3.0, 0.5, 1.0]);
    assert_eq!(ops::clip(&x, Some(lo), None).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.5, 7.0]);
    assert_eq!(ops::clip(&x, None, None).unwrap_err().kind, ErrorKind::Value);
}

#[test]
fn scalars_and_empty_arrays() {
    // 0-d with 0-d and with a vector.
    let s = ops::add(Array::scalar(2.0f32), Array::scalar(3.0f32)).unwrap();
    assert_eq!((s.shape(), s.item::<f32>().unwrap()), (&[][..], 5.0));
    let v = ops::multiply(Array::scalar(2i16), Array::from_slice(&[1i16, -2, 3], &[3]).unwrap()).unwrap();
    assert_eq!(v.to_vec::<i16>().unwrap(), vec![2, -4, 6]);
    // Empty arrays broadcast to empty results of the right shape and dtype.
    for dtype in Dtype::REAL {
        let e = ops::zeros(&[0, 3], dtype).unwrap();
        let r = ops::maximum(&e, ops::ones(&[1, 3], dtype).unwrap()).unwrap();
        assert_eq!((r.shape(), r.dtype(), r.to_f64_vec().unwrap().len()), (&[0, 3][..], dtype, 0));
        let n = ops::isfinite(&e).unwrap();
        assert_eq!((n.shape(), n.size()), (&[0, 3][..], 0));
    }
    let sliced = ops::slice(ops::ones(&[4, 3], Dtype::F32).unwrap(), &[SliceSpec { start: Some(2), stop: Some(2), step: 1 }]).unwrap();
    assert_eq!(ops::exp(&sliced).unwrap().shape(), &[0, 3]);
}

#[test]
fn large_strided_inputs_take_the_threaded_path() {
    // 300 x 700 = 210 000 elements: several parallel chunks, with a transposed and a broadcast input.
    let mut rng = Rng::new(9);
    let a = rng.vec(300 * 700, -2.0, 2.0);
    let b = rng.vec(700, -2.0, 2.0);
    let x = with_layout(&a, &[300, 700], Dtype::F32, Layout::Transposed);
    let y = ops::multiply(ops::exp(&x).unwrap(), array(&b, &[700], Dtype::F32)).unwrap();
    let ra = rounded(&a, &[300, 700], Dtype::F32);
    let rb = rounded(&b, &[700], Dtype::F32);
    let want: Vec<f64> = (0..ra.len()).map(|i| ra[i].exp() * rb[i % 700]).collect();
    assert_close(&y.to_f64_vec().unwrap(), &want, 1e-6, 1e-6, "exp(x.T.T) * b");
    // The same walk in block order for converting dtypes, reversed views, and plain copies.
    for dtype in [Dtype::F16, Dtype::I8, Dtype::F64] {
        let v = random_values(&mut rng, 300 * 700, dtype, -50.0, 50.0);
        let rv = rounded(&v, &[300, 700], dtype);
        let t = with_layout(&v, &[300, 700], dtype, Layout::Transposed);
        let r = ops::slice(&t, &[SliceSpec { start: None, stop: None, step: -1 }]).unwrap();
        let sum = ops::add(&t, &r).unwrap().to_f64_vec().unwrap();
        let want: Vec<f64> = (0..rv.len()).map(|i| rv[i] + rv[(299 - i / 700) * 700 + i % 700]).collect();
        assert_close(&sum, &rounded(&want, &[300, 700], dtype), rtol_for(dtype), 0.0, &format!("x.T + x.T[::-1] {dtype}"));
        assert_eq!(ops::copy(&t).unwrap().to_f64_vec().unwrap(), rv, "copy of a transposed view, {dtype}");
        // Rows spanning two axes: (700, 2, 150) viewed as (2, 150, 700).
        let t3 = ops::transpose(array(&v, &[700, 2, 150], dtype), Some(&[1, 2, 0])).unwrap();
        let want3: Vec<f64> = (0..rv.len()).map(|p| rv[(p % 700) * 300 + p / 700]).collect();
        assert_eq!(ops::negative(&t3).unwrap().to_f64_vec().unwrap().iter().map(|v| -v).collect::<Vec<_>>(), want3, "-(x.transpose(1, 2, 0)), {dtype}");
        // Reducing axis 0 first makes it the contiguous axis: a transposing copy of its own.
        let x = array(&v, &[300, 700], dtype);
        let cols = ops::sum(&x, Some(&[0]), false).unwrap().to_f64_vec().unwrap();
        let want_c: Vec<f64> = (0..700).map(|c| (0..300).map(|r| rv[r * 700 + c]).sum()).collect();
        let want_c = rounded(&want_c, &[700], ops::sum(&x, Some(&[0]), false).unwrap().dtype());
        assert_close(&cols, &want_c, rtol_for(dtype), 0.0, &format!("sum over axis 0, {dtype}"));
    }
}

#[test]
fn bad_input_names_the_op_shapes_and_dtypes() {
    let f = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    let i = ops::zeros(&[2, 3], Dtype::I32).unwrap();
    let t = ops::zeros(&[2, 3], Dtype::Bool).unwrap();
    let e = ops::add(&f, ops::zeros(&[4], Dtype::F32).unwrap()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert_eq!(e.to_string(), "add: cannot broadcast shapes (2, 3) and (4,)");
    let e = ops::where_(ops::zeros(&[5], Dtype::Bool).unwrap(), &f, &f).unwrap_err();
    assert!(e.to_string().contains("(5,)") && e.to_string().contains("(2, 3)"), "{e}");
    for (result, op, kind, mentions) in [
        (ops::bitwise_and(&f, &f), "bitwise_and", ErrorKind::Dtype, "float32"),
        (ops::left_shift(&t, &t), "left_shift", ErrorKind::Dtype, "bool"),
        (ops::right_shift(&f, &i), "right_shift", ErrorKind::Dtype, "float32"),
        (ops::subtract(&t, &t), "subtract", ErrorKind::Dtype, "bool"),
        (ops::negative(&t), "negative", ErrorKind::Dtype, "logical_not"),
        (ops::bitwise_invert(&f), "bitwise_invert", ErrorKind::Dtype, "float32"),
    ] {
        let e = result.unwrap_err();
        assert_eq!((e.op.as_str(), e.kind), (op, kind), "{e}");
        assert!(e.to_string().starts_with(op) && e.to_string().contains(mentions), "{e}");
    }
}
