//! View ops: values against index arithmetic done in the test, zero-copy where strides allow,
//! and errors for bad shapes and axes.
mod common;
use common::*;
use kiln::ops::{self, SliceSpec};
use kiln::{Array, Dtype, ErrorKind};

fn iota(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_slice(&(0..n as i32).collect::<Vec<_>>(), shape).unwrap()
}

#[test]
fn reshape_infers_and_shares_memory() {
    let x = iota(&[2, 3, 4]);
    let r = ops::reshape(&x, &[4, -1]).unwrap();
    assert_eq!(r.shape(), &[4, 6]);
    assert_eq!(r.to_vec::<i32>().unwrap(), (0..24).collect::<Vec<_>>());
    assert!(r.shares_memory(&x));
    let e = ops::reshape(&x, &[5, -1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert!(e.to_string().starts_with("reshape: cannot reshape array of shape (2, 3, 4)"), "{e}");
    assert!(ops::reshape(&x, &[-1, -1]).is_err());
}

#[test]
fn reshape_of_a_transpose_copies_only_when_needed() {
    let x = iota(&[4, 6]);
    let t = ops::transpose(&x, None).unwrap(); // (6, 4), strides (1, 6)
    let flat = ops::reshape(&t, &[24]).unwrap();
    let want: Vec<i32> = (0..6).flat_map(|j| (0..4).map(move |i| i * 6 + j)).collect();
    assert_eq!(flat.to_vec::<i32>().unwrap(), want);
    assert!(!flat.shares_memory(&x));
    let split = ops::reshape(&t, &[2, 3, 4]).unwrap();
    assert_eq!(split.to_vec::<i32>().unwrap(), want);
    assert!(split.shares_memory(&x));
}

#[test]
fn transpose_swapaxes_moveaxis_follow_index_maps() {
    let x = iota(&[2, 3, 4]);
    let t = ops::transpose(&x, Some(&[2, 0, 1])).unwrap();
    assert_eq!(t.shape(), &[4, 2, 3]);
    let v = t.to_vec::<i32>().unwrap();
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(v[k * 6 + i * 3 + j], (i * 12 + j * 4 + k) as i32);
            }
        }
    }
    assert!(t.shares_memory(&x));
    assert_eq!(ops::swapaxes(&x, 0, -1).unwrap().shape(), &[4, 3, 2]);
    assert_eq!(ops::moveaxis(&x, 0, -1).unwrap().shape(), &[3, 4, 2]);
    assert_eq!(ops::transpose(&x, Some(&[0, 0, 1])).unwrap_err().kind, ErrorKind::Axis);
    assert_eq!(ops::transpose(&x, Some(&[0, 1])).unwrap_err().kind, ErrorKind::Axis);
    assert_eq!(ops::swapaxes(&x, 0, 3).unwrap_err().kind, ErrorKind::Axis);
}

#[test]
fn squeeze_expand_flatten_unflatten() {
    let x = iota(&[1, 3, 1, 2]);
    assert_eq!(ops::squeeze(&x, None).unwrap().shape(), &[3, 2]);
    assert_eq!(ops::squeeze(&x, Some(&[-2])).unwrap().shape(), &[1, 3, 2]);
    assert_eq!(ops::squeeze(&x, Some(&[1])).unwrap_err().kind, ErrorKind::Shape);
    assert_eq!(ops::expand_dims(&x, &[0, -1]).unwrap().shape(), &[1, 1, 3, 1, 2, 1]);
    assert_eq!(ops::flatten(&x, 1, 2).unwrap().shape(), &[1, 3, 2]);
    assert_eq!(ops::flatten(&x, 0, -1).unwrap().shape(), &[6]);
    assert_eq!(ops::flatten(Array::scalar(1.0f32), 0, -1).unwrap().shape(), &[1]);
    let u = ops::unflatten(iota(&[2, 12]), 1, &[3, -1]).unwrap();
    assert_eq!(u.shape(), &[2, 3, 4]);
    assert_eq!(u.to_vec::<i32>().unwrap(), (0..24).collect::<Vec<_>>());
    assert!(ops::unflatten(iota(&[2, 12]), 1, &[5, -1]).is_err());
}

#[test]
fn broadcast_to_is_a_zero_stride_view() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1]).unwrap();
    let b = ops::broadcast_to(&x, &[2, 3, 4]).unwrap();
    let v = b.to_vec::<f32>().unwrap();
    for (i, &e) in v.iter().enumerate() {
        assert_eq!(e, ((i / 4) % 3 + 1) as f32);
    }
    assert!(b.shares_memory(&x));
    let e = ops::broadcast_to(&x, &[2, 3]).unwrap_err();
    assert!(e.to_string().contains("broadcast_to"), "{e}");
}

/// Python-slicing reference: the indices selected by start:stop:step on an axis of size n.
fn py_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<i64> {
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = vec![];
    if step > 0 {
        let mut i = start.map_or(0, |s| norm(s).clamp(0, n));
        let end = stop.map_or(n, |s| norm(s).clamp(0, n));
        while i < end {
            out.push(i);
            i += step;
        }
    } else {
        let mut i = start.map_or(n - 1, |s| norm(s).clamp(-1, n - 1));
        let end = stop.map_or(-1, |s| norm(s).clamp(-1, n - 1));
        while i > end {
            out.push(i);
            i += step;
        }
    }
    out
}

#[test]
fn slices_match_python_semantics() {
    let n = 7i64;
    let x = iota(&[7]);
    let bounds = [None, Some(-9), Some(-3), Some(0), Some(2), Some(6), Some(9)];
    for start in bounds {
        for stop in bounds {
            for step in [-3i64, -1, 1, 2, 5] {
                let s = ops::slice(&x, &[SliceSpec { start, stop, step }]).unwrap();
                let want: Vec<i32> = py_slice(n, start, stop, step).into_iter().map(|i| i as i32).collect();
                assert_eq!(s.to_vec::<i32>().unwrap(), want, "{start:?}:{stop:?}:{step}");
            }
        }
    }
    assert_eq!(ops::slice(&x, &[SliceSpec { start: None, stop: None, step: 0 }]).unwrap_err().kind, ErrorKind::Value);
    assert!(ops::slice(&x, &[SliceSpec::ALL, SliceSpec::ALL]).is_err());
}

#[test]
fn slices_of_slices_compose_in_2d() {
    let x = iota(&[5, 6]);
    let a = ops::slice(&x, &[SliceSpec { start: Some(4), stop: None, step: -2 }, SliceSpec::range(1, 5)]).unwrap();
    let b = ops::slice(&a, &[SliceSpec::ALL, SliceSpec { start: None, stop: None, step: -3 }]).unwrap();
    // rows 4, 2, 0; columns 1..5 reversed with step 3: 4, 1.
    let want: Vec<i32> = [4, 2, 0].iter().flat_map(|r| [4, 1].map(|c| r * 6 + c)).collect();
    assert_eq!(b.to_vec::<i32>().unwrap(), want);
    assert!(b.shares_memory(&x));
    let e = ops::slice_axis(&x, 1, 2, 100).unwrap();
    assert_eq!(e.shape(), &[5, 4]);
    let empty = ops::slice_axis(&x, 0, 3, 1).unwrap();
    assert_eq!(empty.shape(), &[0, 6]);
    assert_eq!(empty.to_vec::<i32>().unwrap(), Vec::<i32>::new());
}

#[test]
fn views_feed_kernels_in_every_dtype() {
    let mut rng = Rng::new(7);
    for dtype in [Dtype::U8, Dtype::I16, Dtype::I64, Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let vals = random_values(&mut rng, 24, dtype, -50.0, 50.0);
        let want = rounded(&vals, &[4, 6], dtype);
        for layout in LAYOUTS {
            let v = with_layout(&vals, &[4, 6], dtype, layout);
            assert_eq!(v.to_f64_vec().unwrap(), want, "{dtype} {layout:?}");
            let c = ops::copy(&v).unwrap();
            assert_eq!(c.to_f64_vec().unwrap(), want, "copy {dtype} {layout:?}");
        }
    }
}

#[test]
fn broadcast_arrays_share_memory_and_follow_numpy() {
    let a = iota(&[3, 1]);
    let b = iota(&[4]);
    let out = ops::broadcast_arrays(&[a.clone(), b.clone()]).unwrap();
    assert_eq!((out[0].shape(), out[1].shape()), (&[3, 4][..], &[3, 4][..]));
    let want0: Vec<i32> = (0..12).map(|p| p / 4).collect();
    let want1: Vec<i32> = (0..12).map(|p| p % 4).collect();
    assert_eq!((out[0].to_vec::<i32>().unwrap(), out[1].to_vec::<i32>().unwrap()), (want0, want1));
    assert!(out[0].shares_memory(&a) && out[1].shares_memory(&b)); // (once evaluated)
    let e = ops::broadcast_arrays(&[iota(&[2, 3]), iota(&[4])]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert!(e.to_string().contains("(2, 3)") && e.to_string().contains("(4,)"), "{e}");
}

#[test]
fn view_ops_reject_bad_axes_and_handle_zero_size() {
    let x = iota(&[2, 3]);
    for (result, op) in [
        (ops::expand_dims(&x, &[3]), "expand_dims"),
        (ops::expand_dims(&x, &[0, 0]), "expand_dims"),
        (ops::moveaxis(&x, 2, 0), "moveaxis"),
        (ops::swapaxes(&x, 0, -3), "swapaxes"),
        (ops::squeeze(&x, Some(&[0])), "squeeze"),
        (ops::flatten(&x, 1, 0), "flatten"),
        (ops::transpose(&x, Some(&[0, 0])), "transpose"),
    ] {
        let e = result.unwrap_err();
        assert_eq!(e.op, op, "{e}");
        assert!(matches!(e.kind, ErrorKind::Axis | ErrorKind::Shape | ErrorKind::Value), "{e}");
    }
    let z = ops::zeros(&[0, 4], Dtype::F32).unwrap();
    // -1 next to a 0 is ambiguous (numpy refuses it too).
    assert_eq!(ops::reshape(&z, &[2, 0, -1]).unwrap_err().kind, ErrorKind::Shape);
    assert_eq!(ops::reshape(&z, &[0, 3]).unwrap().shape(), &[0, 3]);
    assert_eq!(ops::transpose(&z, None).unwrap().shape(), &[4, 0]);
    assert_eq!(ops::flatten(&z, 0, -1).unwrap().shape(), &[0]);
}

#[test]
fn empty_arrays_reshape_and_flatten() {
    for shape in [[2usize, 0], [0, 3]] {
        let z = ops::zeros(&shape, Dtype::F32).unwrap();
        let fresh = ops::add(&z, 1.0).unwrap(); // a computed (not broadcast) empty buffer
        for x in [&z, &fresh] {
            assert_eq!(ops::reshape(x, &[0]).unwrap().to_vec::<f32>().unwrap(), Vec::<f32>::new());
            assert_eq!(ops::flatten(x, 0, -1).unwrap().shape(), &[0]);
            let r = ops::reshape(x, &[3, 0, 1]).unwrap();
            assert_eq!((r.shape(), r.to_vec::<f32>().unwrap().len()), (&[3, 0, 1][..], 0));
        }
    }
}
