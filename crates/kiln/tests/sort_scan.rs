//! Scans, sorts, partitions and topk against straightforward references in this file.
mod common;
use common::*;
use kiln::{ops, Array, Dtype, ErrorKind};

/// Reference scan of one lane.
fn scan_ref(lane: &[f64], op: &str, reverse: bool, inclusive: bool) -> Vec<f64> {
    let n = lane.len();
    let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
    let (init, f): (f64, fn(f64, f64) -> f64) = match op {
        "cumsum" => (0.0, |a, b| a + b),
        "cumprod" => (1.0, |a, b| a * b),
        "cummax" => (f64::NEG_INFINITY, f64::max),
        _ => (f64::INFINITY, f64::min),
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

#[test]
fn scans_along_each_axis_with_every_flag() {
    let mut rng = Rng::new(21);
    let shape = [3usize, 5];
    for dtype in Dtype::ALL {
        let vals = random_values(&mut rng, 15, dtype, -3.0, 3.0);
        let exact = rounded(&vals, &shape, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &shape, dtype, layout);
            for op in ["cumsum", "cumprod", "cummax", "cummin"] {
                for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
                    for axis in [0i64, -1] {
                        let f = match op {
                            "cumsum" => ops::cumsum,
                            "cumprod" => ops::cumprod,
                            "cummax" => ops::cummax,
                            _ => ops::cummin,
                        };
                        let got = f(&x, Some(axis), reverse, inclusive).unwrap();
                        let mut want = vec![0.0; 15];
                        let a = if axis == 0 { 0 } else { 1 };
                        for lane in 0..shape[1 - a] {
                            let idx = |k: usize| if a == 0 { k * 5 + lane } else { lane * 5 + k };
                            let l: Vec<f64> = (0..shape[a]).map(|k| exact[idx(k)]).collect();
                            for (k, v) in scan_ref(&l, op, reverse, inclusive).into_iter().enumerate() {
                                want[idx(k)] = v;
                            }
                        }
                        let dt = got.dtype();
                        if dt == Dtype::Bool {
                            // Exclusive max/min start from false/true, the bool extremes.
                            want.iter_mut().filter(|v| v.is_infinite()).for_each(|v| *v = (*v > 0.0) as u8 as f64);
                        }
                        // Elsewhere -inf/+inf become the dtype's extremes, as astype saturates.
                        let want = rounded(&want, &[15], dt);
                        let tol = if dt.is_float() { rtol_for(dt) * 4.0 } else { 0.0 };
                        let what = format!("{op} {dtype} {layout:?} axis={axis} rev={reverse} incl={inclusive}");
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
fn sort_argsort_are_correct_and_stable_with_nans_last() {
    let x = Array::from_slice(&[3.0f32, f32::NAN, -1.0, 3.0, 0.0, -1.0], &[6]).unwrap();
    let s = ops::sort(&x, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(&s[..5], &[-1.0, -1.0, 0.0, 3.0, 3.0]);
    assert!(s[5].is_nan());
    assert_eq!(ops::argsort(&x, None).unwrap().to_vec::<u32>().unwrap(), vec![2, 5, 4, 0, 3, 1]);
    let mut rng = Rng::new(5);
    for dtype in [Dtype::I64, Dtype::U16, Dtype::F16, Dtype::F64] {
        let vals = random_values(&mut rng, 24, dtype, -50.0, 50.0);
        let exact = rounded(&vals, &[4, 6], dtype);
        for layout in LAYOUTS {
            let v = with_layout(&vals, &[4, 6], dtype, layout);
            for axis in [0usize, 1] {
                let got = ops::sort(&v, Some(axis as i64)).unwrap().to_f64_vec().unwrap();
                let idx = ops::argsort(&v, Some(axis as i64)).unwrap().to_vec::<u32>().unwrap();
                let (n, lanes) = if axis == 0 { (4, 6) } else { (6, 4) };
                for lane in 0..lanes {
                    let at = |k: usize| if axis == 0 { k * 6 + lane } else { lane * 6 + k };
                    let mut want: Vec<f64> = (0..n).map(|k| exact[at(k)]).collect();
                    want.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    let g: Vec<f64> = (0..n).map(|k| got[at(k)]).collect();
                    assert_eq!(g, want, "sort {dtype} {layout:?} axis {axis}");
                    let via_idx: Vec<f64> = (0..n).map(|k| exact[at(idx[at(k)] as usize)]).collect();
                    assert_eq!(via_idx, want, "argsort {dtype} {layout:?} axis {axis}");
                }
            }
        }
    }
}

#[test]
fn partition_and_topk_properties() {
    let mut rng = Rng::new(8);
    let vals = rng.vec(40, -10.0, 10.0);
    let x = array(&vals, &[4, 10], Dtype::F64);
    for kth in [0i64, 3, 9, -1] {
        let p = ops::partition(&x, kth, Some(1)).unwrap().to_f64_vec().unwrap();
        let pi = ops::argpartition(&x, kth, Some(1)).unwrap().to_vec::<u32>().unwrap();
        let k = if kth < 0 { (kth + 10) as usize } else { kth as usize };
        for r in 0..4 {
            let row = &p[r * 10..r * 10 + 10];
            let mut sorted: Vec<f64> = vals[r * 10..r * 10 + 10].to_vec();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert_eq!(row[k], sorted[k]);
            assert!(row[..k].iter().all(|&v| v <= row[k]) && row[k + 1..].iter().all(|&v| v >= row[k]));
            assert_eq!(vals[r * 10 + pi[r * 10 + k] as usize], sorted[k]);
        }
    }
    let t = ops::topk(&x, 3, Some(-1)).unwrap();
    assert_eq!(t.shape(), &[4, 3]);
    let tv = t.to_f64_vec().unwrap();
    for r in 0..4 {
        let mut got = tv[r * 3..r * 3 + 3].to_vec();
        got.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut sorted: Vec<f64> = vals[r * 10..r * 10 + 10].to_vec();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(got, sorted[7..].to_vec());
    }
    assert_eq!(ops::topk(&x, 11, Some(1)).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::partition(&x, 10, Some(1)).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::sort(&x, Some(2)).unwrap_err().kind, ErrorKind::Axis);
    let e = ops::zeros(&[0], Dtype::F32).unwrap();
    assert_eq!(ops::sort(&e, None).unwrap().shape(), &[0]);
}
