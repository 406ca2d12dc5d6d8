//! The ops built from other ops (`ops::derived`, `ops::windows`) against references written
//! here from their definitions, in float64.

mod common;

use common::{array, assert_close, check_err, Rng};
use kiln::{ops, Array, Dtype, ErrorKind};
use std::f64::consts::PI;

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

#[test]
fn median_takes_the_middle_of_each_sorted_lane() {
    let mut rng = Rng::new(1);
    let v = rng.vec(4 * 5 * 6, -10.0, 10.0);
    let x = array(&v, &[4, 5, 6], Dtype::F64);
    let middle = |mut lane: Vec<f64>| {
        lane.sort_by(f64::total_cmp);
        let n = lane.len();
        if n % 2 == 1 { lane[n / 2] } else { (lane[n / 2 - 1] + lane[n / 2]) / 2.0 }
    };
    // Over axis 1 (odd length) and over axes (0, 2) (even length).
    let want: Vec<f64> = (0..4).flat_map(|i| (0..6).map(move |k| (i, k))).map(|(i, k)| middle((0..5).map(|j| v[(i * 5 + j) * 6 + k]).collect())).collect();
    assert_close(&values(&ops::median(&x, Some(&[1]), false).unwrap()), &want, 0.0, 0.0, "median axis 1");
    let v = &v;
    let want: Vec<f64> = (0..5).map(|j| middle((0..4).flat_map(|i| (0..6).map(move |k| v[(i * 5 + j) * 6 + k])).collect())).collect();
    let got = ops::median(&x, Some(&[0, 2]), true).unwrap();
    assert_eq!(got.shape(), &[1, 5, 1]);
    assert_close(&values(&got), &want, 1e-15, 0.0, "median axes (0, 2)");
    // Integers give float32; a NaN makes its lane NaN.
    let ints = Array::from_slice(&[3i32, 1, 2, 8], &[4]).unwrap();
    assert_eq!(ops::median(&ints, None, false).unwrap().dtype(), Dtype::F32);
    assert_eq!(values(&ops::median(&ints, None, false).unwrap()), vec![2.5]);
    let with_nan = Array::from_slice(&[1.0f32, f32::NAN, 3.0], &[3]).unwrap();
    assert!(values(&ops::median(&with_nan, None, false).unwrap())[0].is_nan());
    check_err(ops::median(&x, Some(&[0, -3]), false), ErrorKind::Axis, "median");
}

#[test]
fn searchsorted_counts_entries_before_each_value() {
    let seq = [1.0f64, 2.0, 2.0, 5.0, f64::NAN];
    let probes = [0.0, 2.0, 3.0, 5.0, 9.0, f64::NAN];
    let s = Array::from_slice(&seq, &[5]).unwrap();
    let p = Array::from_slice(&probes, &[2, 3]).unwrap();
    // NaN sorts after every number and equal to NaN.
    let before = |x: f64, y: f64| if y.is_nan() { !x.is_nan() } else { x < y };
    let at_or_before = |x: f64, y: f64| y.is_nan() || x <= y;
    for (right, rule) in [(false, &before as &dyn Fn(f64, f64) -> bool), (true, &at_or_before)] {
        let got = ops::searchsorted(&s, &p, right).unwrap();
        assert_eq!((got.shape(), got.dtype()), (&[2, 3][..], Dtype::U32));
        let want: Vec<f64> = probes.iter().map(|&y| seq.iter().filter(|&&x| rule(x, y)).count() as f64).collect();
        assert_eq!(values(&got), want, "right = {right}");
    }
    check_err(ops::searchsorted(&p, &s, false), ErrorKind::Shape, "searchsorted");
}

#[test]
fn kron_diff_trace_and_tri_match_their_definitions() {
    let a = Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Array::from_slice(&[1.0f64, -1.0, 0.5, 2.0], &[2, 2]).unwrap();
    let (av, bv) = (values(&a), values(&b));
    let k = ops::kron(&a, &b).unwrap();
    assert_eq!(k.shape(), &[4, 6]);
    let want: Vec<f64> = (0..4).flat_map(|r| (0..6).map(move |c| (r, c))).map(|(r, c)| av[(r / 2) * 3 + c / 2] * bv[(r % 2) * 2 + c % 2]).collect();
    assert_eq!(values(&k), want);
    check_err(ops::kron(Array::from_slice::<f32>(&[], &[0]).unwrap(), &b), ErrorKind::Shape, "kron");
    // Second differences along each axis; past the axis length the result is empty.
    let d = ops::diff(&a, 2, 1).unwrap();
    assert_eq!((d.shape(), values(&d)), (&[2, 1][..], vec![0.0, 0.0]));
    assert_eq!(values(&ops::diff(&a, 1, 0).unwrap()), vec![3.0, 3.0, 3.0]);
    assert_eq!(ops::diff(&a, 1 << 40, 1).unwrap().shape(), &[2, 0]);
    assert_eq!(values(&ops::trace(&a, 1, 0, 1, None).unwrap()), vec![2.0 + 6.0]);
    assert_eq!(values(&ops::tri(2, Some(3), 0, Dtype::I32).unwrap()), vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
}

#[test]
fn nan_to_num_trunc_vecdot_and_counts_match_elementwise_rules() {
    let x = Array::from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -2.5, 2.5], &[5]).unwrap();
    assert_eq!(values(&ops::nan_to_num(&x, 0.0, None, None).unwrap()), vec![0.0, f32::MAX as f64, f32::MIN as f64, -2.5, 2.5]);
    assert_eq!(values(&ops::nan_to_num(&x, 7.0, Some(1.0), Some(-1.0)).unwrap()), vec![7.0, 1.0, -1.0, -2.5, 2.5]);
    assert_eq!(values(&ops::trunc(&x).unwrap())[3..], [-2.0, 2.0]);
    let a = Array::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(values(&ops::vecdot(&a, &a, -1).unwrap()), vec![14.0, 77.0]);
    assert_eq!(values(&ops::vecdot(&a, &a, 0).unwrap()), vec![17.0, 29.0, 45.0]);
    let z = Array::from_slice(&[0.0f64, 1.0, 0.0, -3.0, 0.0, 0.0], &[2, 3]).unwrap();
    assert_eq!(values(&ops::count_nonzero(&z, Some(&[1]), false).unwrap()), vec![1.0, 1.0]);
    assert_eq!(values(&ops::logical_xor(&z, &a).unwrap()), vec![1.0, 0.0, 1.0, 0.0, 1.0, 1.0]);
    let parts = ops::unstack(&a, 1).unwrap();
    assert_eq!(parts.iter().map(values).collect::<Vec<_>>(), vec![vec![1.0, 4.0], vec![2.0, 5.0], vec![3.0, 6.0]]);
}

#[test]
fn as_strided_reads_the_elements_its_strides_name() {
    let x = Array::from_slice(&(0..10).map(|i| i as f32).collect::<Vec<_>>(), &[10]).unwrap();
    // Overlapping windows of 3, every 2 elements, from element 1.
    let w = ops::as_strided(&x, Some(&[4, 3]), Some(&[2, 1]), 1).unwrap();
    let want: Vec<f64> = (0..4).flat_map(|r| (0..3).map(move |c| (1 + 2 * r + c) as f64)).collect();
    assert_eq!(values(&w), want);
    // Negative strides walk backwards; reaching outside the input is an error.
    assert_eq!(values(&ops::as_strided(&x, Some(&[3]), Some(&[-3]), 9).unwrap()), vec![9.0, 6.0, 3.0]);
    check_err(ops::as_strided(&x, Some(&[4, 3]), Some(&[2, 1]), 4), ErrorKind::Value, "as_strided");
    check_err(ops::as_strided(&x, Some(&[2]), Some(&[i64::MAX]), 0), ErrorKind::Value, "as_strided");
    // A view of more elements than memory holds is refused when its memory is asked for, as
    // any array's: an error, not an abort.
    let huge = ops::as_strided(&x, Some(&[1 << 40]), Some(&[0]), 0).unwrap();
    assert!(huge.eval().is_err());
}

#[test]
fn windows_follow_numpys_definitions() {
    let m = 7;
    let n = |i: usize| i as f64 / (m - 1) as f64;
    type Window = fn(usize) -> kiln::Result<Array>;
    type Formula = Box<dyn Fn(f64) -> f64>;
    let cases: [(&str, Window, Formula); 4] = [
        ("bartlett", ops::bartlett, Box::new(|t| 1.0 - (2.0 * t - 1.0).abs())),
        ("hanning", ops::hanning, Box::new(|t| 0.5 - 0.5 * (2.0 * PI * t).cos())),
        ("hamming", ops::hamming, Box::new(|t| 0.54 - 0.46 * (2.0 * PI * t).cos())),
        ("blackman", ops::blackman, Box::new(|t| 0.42 - 0.5 * (2.0 * PI * t).cos() + 0.08 * (4.0 * PI * t).cos())),
    ];
    for (name, window, formula) in &cases {
        let got = window(m).unwrap();
        assert_eq!(got.dtype(), Dtype::F32);
        assert_close(&values(&got), &(0..m).map(|i| formula(n(i))).collect::<Vec<_>>(), 1e-6, 1e-7, name);
        assert_eq!((window(0).unwrap().shape(), values(&window(1).unwrap())), (&[0usize][..], vec![1.0]), "{name}");
    }
}
