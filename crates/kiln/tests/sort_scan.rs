//! Scans, sorts, partitions and topk against straightforward references in this file.
mod common;
use common::*;
use kiln::{ops, Array, Dtype, ErrorKind};
use std::cmp::Ordering;

/// The 3-d shape most tests use, and the axes every op is checked along (None: flattened).
const SHAPE: [usize; 3] = [3, 4, 5];
const AXES: [Option<i64>; 4] = [Some(0), Some(1), Some(-1), None];

/// Row-major positions of each lane of `shape` along `axis`; one lane of everything for None.
fn lanes(shape: &[usize], axis: Option<i64>) -> Vec<Vec<usize>> {
    let Some(a) = axis else { return vec![(0..shape.iter().product()).collect()] };
    let a = a.rem_euclid(shape.len() as i64) as usize;
    let (outer, n, inner) = (shape[..a].iter().product::<usize>(), shape[a], shape[a + 1..].iter().product::<usize>());
    (0..outer).flat_map(|o| (0..inner).map(move |i| (0..n).map(|k| (o * n + k) * inner + i).collect())).collect()
}

/// The sort order of numpy and mlx: NaN after every number, NaNs equal to each other.
fn nan_last(a: &f64, b: &f64) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// A stable argsort of `lane` (std's sort_by is stable).
fn argsort_ref(lane: &[f64]) -> Vec<usize> {
    let mut i: Vec<usize> = (0..lane.len()).collect();
    i.sort_by(|&a, &b| nan_last(&lane[a], &lane[b]));
    i
}

fn sorted_ref(lane: &[f64]) -> Vec<f64> {
    argsort_ref(lane).into_iter().map(|i| lane[i]).collect()
}

/// Random values for `dtype` with many ties (floats on a 0.5 grid) and, for floats, NaNs at
/// positions 20, 21 (same last-axis lane of SHAPE) and 40.
fn test_values(rng: &mut Rng, n: usize, dtype: Dtype) -> Vec<f64> {
    let mut v = random_values(rng, n, dtype, -8.0, 8.0);
    if dtype.is_float() {
        v.iter_mut().for_each(|x| *x = (*x * 2.0).round() / 2.0);
        for p in [20, 21, 40].into_iter().filter(|&p| p < n) {
            v[p] = f64::NAN;
        }
    }
    v
}

/// A row-major (not broadcast) empty array.
fn empty(shape: &[usize], dtype: Dtype) -> Array {
    ops::astype(Array::from_slice::<f32>(&[], shape).unwrap(), dtype).unwrap()
}

/// Reference scan of one lane; max/min propagate NaN, as mlx does.
fn scan_ref(lane: &[f64], op: &str, reverse: bool, inclusive: bool) -> Vec<f64> {
    let n = lane.len();
    let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
    let nan_or = |a: f64, b: f64, f: fn(f64, f64) -> f64| if a.is_nan() || b.is_nan() { f64::NAN } else { f(a, b) };
    let (init, f): (f64, Box<dyn Fn(f64, f64) -> f64>) = match op {
        "cumsum" => (0.0, Box::new(|a, b| a + b)),
        "cumprod" => (1.0, Box::new(|a, b| a * b)),
        "cummax" => (f64::NEG_INFINITY, Box::new(move |a, b| nan_or(a, b, f64::max))),
        "logcumsumexp" => (f64::NEG_INFINITY, Box::new(|a: f64, b: f64| (a.exp() + b.exp()).ln())),
        _ => (f64::INFINITY, Box::new(move |a, b| nan_or(a, b, f64::min))),
    };
    let mut out = vec![0.0; n];
    let mut acc = init;
    for i in order {
        if inclusive {
            acc = f(acc, lane[i]);
            out[i] = acc;
        } else {
            out[i] = acc;
            acc = f(acc, lane[i]);
        }
    }
    out
}

fn scan_fn(op: &str) -> fn(&Array, Option<i64>, bool, bool) -> kiln::Result<Array> {
    match op {
        "cumsum" => |x, a, r, i| ops::cumsum(x, a, r, i),
        "cumprod" => |x, a, r, i| ops::cumprod(x, a, r, i),
        "cummax" => |x, a, r, i| ops::cummax(x, a, r, i),
        "logcumsumexp" => |x, a, r, i| ops::logcumsumexp(x, a, r, i),
        _ => |x, a, r, i| ops::cummin(x, a, r, i),
    }
}

const SCANS: [&str; 5] = ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"];

#[test]
fn scans_along_each_axis_with_every_flag() {
    let mut rng = Rng::new(21);
    let shape = [2usize, 3, 4];
    for dtype in Dtype::REAL {
        // Integers in -2..=2 keep cumprod of 24 elements within int32; floats get a NaN.
        let mut vals = random_values(&mut rng, 24, dtype, -2.0, 3.0);
        if dtype.is_float() {
            vals[17] = f64::NAN;
        }
        let exact = rounded(&vals, &shape, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &shape, dtype, layout);
            for op in SCANS {
                for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
                    for axis in AXES {
                        let got = scan_fn(op)(&x, axis, reverse, inclusive).unwrap();
                        let mut want = vec![0.0; 24];
                        for lane in lanes(&shape, axis) {
                            let l: Vec<f64> = lane.iter().map(|&p| exact[p]).collect();
                            for (&p, v) in lane.iter().zip(scan_ref(&l, op, reverse, inclusive)) {
                                want[p] = v;
                            }
                        }
                        let dt = got.dtype();
                        if dt == Dtype::Bool {
                            // Exclusive max/min start from false/true, the bool extremes.
                            want.iter_mut().filter(|v| v.is_infinite()).for_each(|v| *v = (*v > 0.0) as u8 as f64);
                        }
                        // Elsewhere -inf/+inf become the dtype's extremes, as astype saturates.
                        let want = rounded(&want, &[24], dt);
                        let what = format!("{op} {dtype} {layout:?} axis={axis:?} rev={reverse} incl={inclusive}");
                        let want_shape: &[usize] = if axis.is_some() { &shape } else { &[24] };
                        assert_eq!(got.shape(), want_shape, "{what}");
                        let tol = if dt.is_float() { rtol_for(dt) * 4.0 } else { 0.0 };
                        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, &what);
                    }
                }
            }
        }
    }
    let flat = ops::cumsum(Array::from_slice(&[1i8, 2, 3, 4], &[2, 2]).unwrap(), None, false, true).unwrap();
    assert_eq!((flat.dtype(), flat.to_vec::<i32>().unwrap()), (Dtype::I32, vec![1, 3, 6, 10]));
}

#[test]
fn logcumsumexp_neither_overflows_nor_loses_infinities() {
    let inf = f64::INFINITY;
    // (input, inclusive forward result); the references are by hand, as numpy's logaddexp.accumulate.
    let cases: [(&[f64], &[f64]); 4] = [
        (&[-inf; 4], &[-inf; 4]),
        (&[-inf, 0.0, -inf], &[-inf, 0.0, 0.0]),
        (&[-inf, inf, -inf], &[-inf, inf, inf]),
        (&[1000.0, 1000.0, -1000.0], &[1000.0, 1000.0 + std::f64::consts::LN_2, 1000.0 + std::f64::consts::LN_2]),
    ];
    for (v, want) in cases {
        for dtype in [Dtype::F32, Dtype::F64] {
            let got = ops::logcumsumexp(array(v, &[v.len()], dtype), Some(0), false, true).unwrap();
            assert_close(&got.to_f64_vec().unwrap(), want, rtol_for(dtype), 0.0, &format!("{v:?} {dtype}"));
        }
    }
    // Exclusive scans start at -inf, the identity of log-space addition.
    let got = ops::logcumsumexp(Array::from_slice(&[0.0f32, 0.0], &[2]).unwrap(), None, true, false).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), vec![0.0, f32::NEG_INFINITY]);
    // Integers compute in float32; float16 keeps its dtype.
    let ints = ops::logcumsumexp(Array::from_slice(&[0i32, 0, 0], &[3]).unwrap(), None, false, true).unwrap();
    assert_eq!(ints.dtype(), Dtype::F32);
    assert_close(&ints.to_f64_vec().unwrap(), &[0.0, 2f64.ln(), 3f64.ln()], 1e-6, 0.0, "int32");
    let half = ops::logcumsumexp(array(&[1.0, 2.0], &[2], Dtype::F16), None, false, true).unwrap();
    assert_eq!(half.dtype(), Dtype::F16);
    // Complex inputs (computed on the CPU): ln Σ exp(z), against the sums of the exponentials in
    // float64.
    kiln::with_stream(kiln::Stream::default_for(kiln::Device::cpu()), complex_logcumsumexp_matches_float64_sums).unwrap();
}

fn complex_logcumsumexp_matches_float64_sums() {
    let z: [(f64, f64); 3] = [(1.0, 1.0), (2.0, 1.0), (3.0, -0.5)];
    let x = ops::add(
        Array::from_slice(&z.map(|(re, _)| re as f32), &[3]).unwrap(),
        ops::multiply(Array::from_slice(&z.map(|(_, im)| im as f32), &[3]).unwrap(), Array::scalar(kiln::Complex64::new(0.0, 1.0))).unwrap(),
    )
    .unwrap();
    let got = ops::logcumsumexp(&x, None, false, true).unwrap().to_vec::<kiln::Complex64>().unwrap();
    let (mut sum_re, mut sum_im) = (0.0f64, 0.0f64);
    for ((re, im), g) in z.iter().zip(&got) {
        (sum_re, sum_im) = (sum_re + re.exp() * im.cos(), sum_im + re.exp() * im.sin());
        let (want_re, want_im) = (sum_re.hypot(sum_im).ln(), sum_im.atan2(sum_re));
        assert!((g.re as f64 - want_re).abs() < 1e-5 && (g.im as f64 - want_im).abs() < 1e-5, "{g:?} against {want_re}+{want_im}i");
    }
}

#[test]
fn scans_nan_scalar_empty_and_bad_axis() {
    // NaN propagates through cummax/cummin (mlx), in both directions and for every float dtype.
    let v = [1.0, 3.0, f64::NAN, 5.0, 0.0];
    let n = f64::NAN;
    for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let x = array(&v, &[5], dtype);
        let cases: [(&str, bool, [f64; 5]); 4] = [
            ("cummax", false, [1.0, 3.0, n, n, n]),
            ("cummin", false, [1.0, 1.0, n, n, n]),
            ("cummax", true, [n, n, n, 5.0, 0.0]),
            ("cummin", true, [n, n, n, 0.0, 0.0]),
        ];
        for (op, reverse, want) in cases {
            let got = scan_fn(op)(&x, Some(0), reverse, true).unwrap().to_f64_vec().unwrap();
            assert_close(&got, &want, 0.0, 0.0, &format!("{op} {dtype} rev={reverse}"));
        }
    }
    let s = Array::scalar(3i16);
    for op in SCANS {
        // A scalar scans as a flattened 1-element array.
        let got = scan_fn(op)(&s, None, false, true).unwrap();
        assert_eq!((got.shape(), got.to_f64_vec().unwrap()), (&[1usize][..], vec![3.0]), "{op} scalar");
        check_err(scan_fn(op)(&s, Some(0), false, true), ErrorKind::Axis, op);
        for shape in [vec![0usize], vec![2, 0, 3]] {
            let x = empty(&shape, Dtype::F32);
            // (axis None on the 3-d empty shape: see flattening_empty_multidim_arrays)
            for axis in AXES.into_iter().filter(|&a| if shape.len() == 3 { a.is_some() } else { a != Some(1) }) {
                for inclusive in [true, false] {
                    let got = scan_fn(op)(&x, axis, true, inclusive).unwrap();
                    let want: &[usize] = if axis.is_some() { &shape } else { &[0] };
                    assert_eq!(got.shape(), want, "{op} empty {shape:?} axis={axis:?}");
                    assert!(got.to_f64_vec().unwrap().is_empty());
                }
            }
        }
        let x = ops::zeros(&SHAPE, Dtype::I32).unwrap();
        for axis in [3, -4] {
            check_err(scan_fn(op)(&x, Some(axis), false, true), ErrorKind::Axis, op);
        }
    }
}

#[test]
fn sort_argsort_every_dtype_layout_axis_stable_nans_last() {
    let x = Array::from_slice(&[3.0f32, f32::NAN, -1.0, 3.0, 0.0, -1.0], &[6]).unwrap();
    let s = ops::sort(&x, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&s[..5], &[-1.0, -1.0, 0.0, 3.0, 3.0]);
    assert!(s[5].is_nan());
    assert_eq!(ops::argsort(&x, None).unwrap().to_vec::<u32>().unwrap(), vec![2, 5, 4, 0, 3, 1]);
    let mut rng = Rng::new(5);
    for dtype in Dtype::REAL {
        let vals = test_values(&mut rng, 60, dtype);
        let exact = rounded(&vals, &SHAPE, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &SHAPE, dtype, layout);
            for axis in AXES {
                let what = format!("{dtype} {layout:?} axis={axis:?}");
                let (s, i) = (ops::sort(&x, axis).unwrap(), ops::argsort(&x, axis).unwrap());
                let want_shape: &[usize] = if axis.is_some() { &SHAPE } else { &[60] };
                assert_eq!((s.shape(), s.dtype()), (want_shape, dtype), "sort {what}");
                assert_eq!((i.shape(), i.dtype()), (want_shape, Dtype::U32), "argsort {what}");
                let (s, i) = (s.to_f64_vec().unwrap(), i.to_vec::<u32>().unwrap());
                for lane in lanes(&SHAPE, axis) {
                    let l: Vec<f64> = lane.iter().map(|&p| exact[p]).collect();
                    let got: Vec<f64> = lane.iter().map(|&p| s[p]).collect();
                    assert_close(&got, &sorted_ref(&l), 0.0, 0.0, &format!("sort {what}"));
                    // Stable: ties (NaNs included) keep their original order, so the indices are unique.
                    let got: Vec<usize> = lane.iter().map(|&p| i[p] as usize).collect();
                    assert_eq!(got, argsort_ref(&l), "argsort {what}");
                }
            }
        }
    }
}

#[test]
fn sort_family_on_empty_inputs() {
    for dtype in [Dtype::I32, Dtype::F16, Dtype::F64] {
        for shape in [vec![0usize], vec![2, 0, 3]] {
            let x = empty(&shape, dtype);
            // (axis None on the 3-d empty shape: see flattening_empty_multidim_arrays)
            for axis in AXES.into_iter().filter(|&a| if shape.len() == 3 { a.is_some() } else { a != Some(1) }) {
                let what = format!("{dtype} {shape:?} axis={axis:?}");
                let want: &[usize] = if axis.is_some() { &shape } else { &[0] };
                for r in [ops::sort(&x, axis), ops::argsort(&x, axis)] {
                    let r = r.unwrap();
                    assert_eq!(r.shape(), want, "sort/argsort {what}");
                    assert!(r.to_f64_vec().unwrap().is_empty(), "sort/argsort {what}");
                }
            }
        }
        // Partition and topk along a non-empty axis of an empty array; kth of an empty axis is out of range.
        let x = ops::zeros(&[2, 0, 3], dtype).unwrap(); // a broadcast view
        assert_eq!(ops::partition(&x, 1, Some(-1)).unwrap().shape(), &[2, 0, 3]);
        assert_eq!(ops::argpartition(&x, -1, Some(0)).unwrap().shape(), &[2, 0, 3]);
        let t = ops::topk(&x, 2, Some(-1)).unwrap();
        assert_eq!((t.shape(), t.to_f64_vec().unwrap().len()), (&[2usize, 0, 2][..], 0));
        check_err(ops::partition(&x, 0, Some(1)), ErrorKind::Value, "partition");
        check_err(ops::topk(&x, 1, None), ErrorKind::Value, "topk");
    }
}

#[test]
fn flattening_empty_multidim_arrays() {
    // axis=None flattens (2, 0, 3) to (0,); both a row-major and a broadcast (zeros) input panic.
    for x in [empty(&[2, 0, 3], Dtype::F32), ops::zeros(&[2, 0, 3], Dtype::F32).unwrap()] {
        let rs = [
            ("sort", ops::sort(&x, None)),
            ("argsort", ops::argsort(&x, None)),
            ("cumsum", ops::cumsum(&x, None, false, true)),
            ("cummax", ops::cummax(&x, None, true, false)),
        ];
        for (name, r) in rs {
            let r = r.unwrap();
            assert_eq!((r.shape(), r.to_f64_vec().unwrap().len()), (&[0usize][..], 0), "{name}");
        }
    }
}

/// Checks that `got` is a partition of the lane whose sorted values are `sorted` around `k`:
/// the same multiset, the k-th sorted value at `k`, nothing greater before it, nothing less after.
fn check_partition(got: &[f64], sorted: &[f64], k: usize, what: &str) {
    assert_close(&sorted_ref(got), sorted, 0.0, 0.0, &format!("{what}: not a permutation"));
    assert_close(&got[k..k + 1], &sorted[k..k + 1], 0.0, 0.0, &format!("{what}: kth element"));
    assert!(got[..k].iter().all(|v| nan_last(v, &got[k]) != Ordering::Greater), "{what}: before kth {got:?}");
    assert!(got[k + 1..].iter().all(|v| nan_last(v, &got[k]) != Ordering::Less), "{what}: after kth {got:?}");
}

#[test]
fn partition_argpartition_topk_against_sorted_reference() {
    let mut rng = Rng::new(8);
    for dtype in [Dtype::U8, Dtype::I32, Dtype::I64, Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let vals = test_values(&mut rng, 60, dtype);
        let exact = rounded(&vals, &SHAPE, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &SHAPE, dtype, layout);
            for axis in AXES {
                let n = axis.map_or(60, |a| SHAPE[a.rem_euclid(3) as usize]) as i64;
                let lanes_in = lanes(&SHAPE, axis);
                for kth in [0, 1, n / 2, n - 1, -1, -n] {
                    let what = format!("{dtype} {layout:?} axis={axis:?} kth={kth}");
                    let p = ops::partition(&x, kth, axis).unwrap();
                    let pi = ops::argpartition(&x, kth, axis).unwrap();
                    assert_eq!((p.dtype(), pi.dtype()), (dtype, Dtype::U32), "{what}");
                    let (p, pi) = (p.to_f64_vec().unwrap(), pi.to_vec::<u32>().unwrap());
                    let k = kth.rem_euclid(n) as usize;
                    for lane in &lanes_in {
                        let l: Vec<f64> = lane.iter().map(|&q| exact[q]).collect();
                        let sorted = sorted_ref(&l);
                        let got: Vec<f64> = lane.iter().map(|&q| p[q]).collect();
                        check_partition(&got, &sorted, k, &format!("partition {what}"));
                        let mut idx: Vec<usize> = lane.iter().map(|&q| pi[q] as usize).collect();
                        let via: Vec<f64> = idx.iter().map(|&i| l[i]).collect();
                        check_partition(&via, &sorted, k, &format!("argpartition {what}"));
                        idx.sort_unstable();
                        assert!(idx.iter().enumerate().all(|(j, &i)| i == j), "argpartition {what}: not a permutation");
                    }
                }
                for k in [0, 1, 2, n as usize] {
                    let what = format!("topk {dtype} {layout:?} axis={axis:?} k={k}");
                    let t = ops::topk(&x, k, axis).unwrap();
                    let mut out_shape = SHAPE.to_vec();
                    match axis {
                        Some(a) => out_shape[a.rem_euclid(3) as usize] = k,
                        None => out_shape = vec![k],
                    }
                    assert_eq!((t.shape(), t.dtype()), (&out_shape[..], dtype), "{what}");
                    let tv = t.to_f64_vec().unwrap();
                    for (lane, lane_out) in lanes_in.iter().zip(lanes(&out_shape, axis)) {
                        let l: Vec<f64> = lane.iter().map(|&q| exact[q]).collect();
                        let got: Vec<f64> = lane_out.iter().map(|&q| tv[q]).collect();
                        // The k largest as a multiset; NaN counts as largest, as in sort.
                        assert_close(&sorted_ref(&got), &sorted_ref(&l)[n as usize - k..], 0.0, 0.0, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn sort_family_errors_name_the_op() {
    let x = ops::zeros(&SHAPE, Dtype::F32).unwrap();
    for (k, axis) in [(6, Some(-1)), (4, Some(0)), (61, None)] {
        check_err(ops::topk(&x, k, axis), ErrorKind::Value, "topk");
    }
    for (kth, axis) in [(5, Some(-1)), (-6, Some(-1)), (3, Some(0)), (60, None), (-61, None)] {
        check_err(ops::partition(&x, kth, axis), ErrorKind::Value, "partition");
        check_err(ops::argpartition(&x, kth, axis), ErrorKind::Value, "argpartition");
    }
    for axis in [3, -4] {
        check_err(ops::sort(&x, Some(axis)), ErrorKind::Axis, "sort");
        check_err(ops::argsort(&x, Some(axis)), ErrorKind::Axis, "argsort");
        check_err(ops::partition(&x, 0, Some(axis)), ErrorKind::Axis, "partition");
        check_err(ops::argpartition(&x, 0, Some(axis)), ErrorKind::Axis, "argpartition");
        check_err(ops::topk(&x, 1, Some(axis)), ErrorKind::Axis, "topk");
    }
    let s = Array::scalar(2.0f32);
    check_err(ops::sort(&s, Some(0)), ErrorKind::Axis, "sort");
    assert_eq!(ops::sort(&s, None).unwrap().to_f64_vec().unwrap(), vec![2.0]);
    assert_eq!(ops::topk(&s, 1, None).unwrap().to_f64_vec().unwrap(), vec![2.0]);
}

#[test]
fn views_that_start_inside_their_buffer() {
    // Row-sliced views start at an element offset: kernels must scale it by the element size.
    for dtype in [kiln::Dtype::F32, kiln::Dtype::F64, kiln::Dtype::I16, kiln::Dtype::U8] {
        let values: Vec<f64> = (0..35).map(|i| ((i * 11) % 35) as f64).collect();
        let big = common::array(&values, &[7, 5], dtype);
        for start in [1, 2, 3] {
            let view = ops::slice_axis(&big, 0, start, 7).unwrap();
            let copy = ops::copy(&view).unwrap();
            type ViewCase = (&'static str, fn(&Array) -> kiln::Result<Array>);
            let cases: Vec<ViewCase> = vec![
                ("sort", |x| ops::sort(x, Some(-1))),
                ("argsort", |x| ops::argsort(x, Some(0))),
                ("partition", |x| ops::partition(x, 2, Some(-1))),
                ("argmax", |x| ops::argmax(x, Some(1), false)),
                ("argmin", |x| ops::argmin(x, Some(0), false)),
                ("cumsum", |x| ops::cumsum(x, Some(-1), false, true)),
                ("cummax", |x| ops::cummax(x, Some(0), true, true)),
                ("topk", |x| ops::topk(x, 2, None)),
            ];
            for (name, f) in cases {
                let got = f(&view).unwrap().to_f64_vec().unwrap();
                let want = f(&copy).unwrap().to_f64_vec().unwrap();
                assert_eq!(got, want, "{name} of rows {start}.. in {dtype}");
            }
        }
    }
}

#[test]
fn argpartition_breaks_ties_by_position() {
    // Equal values keep their order around kth: the k-th position holds the k-th (value,
    // position) pair, as numpy's result for these rows.
    let x = ops::broadcast_to(Array::from_slice(&[1i32, 2, 3], &[3]).unwrap(), &[2, 3]).unwrap();
    let got = ops::argpartition(&x, 1, Some(0)).unwrap().to_vec::<u32>().unwrap();
    assert_eq!(got, vec![0, 0, 0, 1, 1, 1]);
    let got = ops::argpartition(Array::from_slice(&[5.0f32, 5.0, 5.0, 5.0, 1.0], &[5]).unwrap(), 1, Some(0)).unwrap();
    assert_eq!(got.to_vec::<u32>().unwrap()[..2], [4, 0]);
}
