//! Reductions against float64 references computed with index arithmetic in this file.
mod common;
use common::*;
use kiln::{ops, Array, Dtype, ErrorKind};

/// Groups the row-major `values` of `shape` by their index with `axes` removed, in output order.
fn groups(values: &[f64], shape: &[usize], axes: &[usize]) -> Vec<Vec<f64>> {
    let out_dims: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let out_n: usize = out_dims.iter().map(|&a| shape[a]).product();
    let mut g = vec![Vec::new(); out_n];
    for (flat, &v) in values.iter().enumerate() {
        let mut rem = flat;
        let mut idx = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            idx[a] = rem % shape[a];
            rem /= shape[a];
        }
        let mut o = 0;
        for &a in &out_dims {
            o = o * shape[a] + idx[a];
        }
        g[o].push(v);
    }
    g
}

fn reference(op: &str, g: &[f64]) -> f64 {
    match op {
        "sum" => g.iter().sum(),
        "prod" => g.iter().product(),
        "max" => g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "min" => g.iter().copied().fold(f64::INFINITY, f64::min),
        "mean" => g.iter().sum::<f64>() / g.len() as f64,
        "var" => {
            let m = g.iter().sum::<f64>() / g.len() as f64;
            g.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (g.len() as f64 - 1.0)
        }
        "logsumexp" => {
            let m = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            m + g.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
        }
        "all" => g.iter().all(|&v| v != 0.0) as u8 as f64,
        "any" => g.iter().any(|&v| v != 0.0) as u8 as f64,
        _ => unreachable!(),
    }
}

fn run(op: &str, x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Array {
    match op {
        "sum" => ops::sum(x, axes, keepdims),
        "prod" => ops::prod(x, axes, keepdims),
        "max" => ops::max(x, axes, keepdims),
        "min" => ops::min(x, axes, keepdims),
        "mean" => ops::mean(x, axes, keepdims),
        "var" => ops::var(x, axes, keepdims, 1),
        "logsumexp" => ops::logsumexp(x, axes, keepdims),
        "all" => ops::all(x, axes, keepdims),
        "any" => ops::any(x, axes, keepdims),
        _ => unreachable!(),
    }
    .unwrap()
}

#[test]
fn every_reduction_over_axis_sets_layouts_and_dtypes() {
    let mut rng = Rng::new(11);
    let shape = [3usize, 4, 5];
    let axis_sets: [Option<&[i64]>; 6] = [None, Some(&[0]), Some(&[-1]), Some(&[0, 2]), Some(&[1]), Some(&[])];
    for dtype in Dtype::REAL {
        let vals = random_values(&mut rng, 60, dtype, -3.0, 3.0);
        let exact = rounded(&vals, &shape, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &shape, dtype, layout);
            for axes in axis_sets {
                let ax: Vec<usize> = match axes {
                    None => vec![0, 1, 2],
                    Some(a) => a.iter().map(|&v| if v < 0 { (v + 3) as usize } else { v as usize }).collect(),
                };
                for op in ["sum", "prod", "max", "min", "mean", "var", "logsumexp", "all", "any"] {
                    if dtype == Dtype::Bool && matches!(op, "var") {
                        continue;
                    }
                    for keepdims in [false, true] {
                        let got = run(op, &x, axes, keepdims);
                        let want_shape: Vec<usize> = (0..3)
                            .filter_map(|i| if ax.contains(&i) { keepdims.then_some(1) } else { Some(shape[i]) })
                            .collect();
                        assert_eq!(got.shape(), &want_shape[..], "{op} {dtype} {axes:?} keepdims={keepdims}");
                        let want: Vec<f64> = groups(&exact, &shape, &ax).iter().map(|g| reference(op, g)).collect();
                        let (out_dt, g) = (got.dtype(), got.to_f64_vec().unwrap());
                        let want = rounded(&want, &[want.len()], out_dt);
                        let tol = if out_dt.is_float() { rtol_for(out_dt) * 8.0 } else { 0.0 };
                        assert_close(&g, &want, tol, tol, &format!("{op} {dtype} {layout:?} {axes:?}"));
                    }
                }
            }
        }
    }
}

#[test]
fn output_dtypes_follow_mlx() {
    let b = ops::astype(Array::from_vec(vec![1i32, 0, 1]), Dtype::Bool).unwrap();
    assert_eq!(ops::sum(&b, None, false).unwrap().dtype(), Dtype::I32);
    assert_eq!(ops::sum(&b, None, false).unwrap().item::<i32>().unwrap(), 2);
    let u = ops::astype(Array::from_vec(vec![200i32, 100]), Dtype::U8).unwrap();
    assert_eq!(ops::sum(&u, None, false).unwrap().item::<u32>().unwrap(), 300);
    assert_eq!(ops::max(&u, None, false).unwrap().dtype(), Dtype::U8);
    assert_eq!(ops::mean(&u, None, false).unwrap().dtype(), Dtype::F32);
    assert_eq!(ops::all(&u, None, false).unwrap().dtype(), Dtype::Bool);
    let big = Array::from_vec(vec![i64::MAX - 5, 3]);
    assert_eq!(ops::sum(&big, None, false).unwrap().item::<i64>().unwrap(), i64::MAX - 2);
}

#[test]
fn large_full_and_row_reductions_use_threads() {
    let n = 1 << 20;
    let x = ops::arange(0.0, n as f64, 1.0, Dtype::F32).unwrap();
    let s = ops::sum(&x, None, false).unwrap().item::<f32>().unwrap() as f64;
    assert_eq!(s, (n as f64) * (n as f64 - 1.0) / 2.0);
    let m = ops::reshape(&x, &[1024, 1024]).unwrap();
    let rows = ops::max(&m, Some(&[1]), false).unwrap().to_vec::<f32>().unwrap();
    assert!(rows.iter().enumerate().all(|(i, &v)| v == (i * 1024 + 1023) as f32));
    let cols = ops::sum(&m, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(cols[3] as f64, (0..1024).map(|r| (r * 1024 + 3) as f64).sum::<f64>());
}

#[test]
fn nan_and_empty_cases() {
    let x = Array::from_vec(vec![1.0f32, f32::NAN, 3.0]);
    assert!(ops::max(&x, None, false).unwrap().item::<f32>().unwrap().is_nan());
    assert_eq!(ops::argmax(&x, None, false).unwrap().item::<u32>().unwrap(), 1);
    let e = ops::zeros(&[0, 3], Dtype::F32).unwrap();
    assert_eq!(ops::sum(&e, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(ops::prod(&e, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap(), vec![1.0; 3]);
    assert_eq!(ops::sum(&e, Some(&[1]), false).unwrap().shape(), &[0]);
    let err = ops::max(&e, Some(&[0]), false).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value);
    assert!(err.to_string().starts_with("max: zero-size array"), "{err}");
    assert_eq!(ops::argmax(&e, Some(0), false).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::sum(&e, Some(&[2]), false).unwrap_err().kind, ErrorKind::Axis);
    assert_eq!(ops::sum(&e, Some(&[0, 0]), false).unwrap_err().kind, ErrorKind::Axis);
    let s = Array::scalar(4.0f32);
    assert_eq!(ops::sum(&s, None, false).unwrap().item::<f32>().unwrap(), 4.0);
}

#[test]
fn argmax_argmin_first_occurrence_along_axes() {
    let x = Array::from_slice(&[3i32, 7, 7, 1, 0, 0, 9, 9, 5], &[3, 3]).unwrap();
    assert_eq!(ops::argmax(&x, Some(1), false).unwrap().to_vec::<u32>().unwrap(), vec![1, 0, 0]);
    assert_eq!(ops::argmin(&x, Some(0), true).unwrap().to_vec::<u32>().unwrap(), vec![1, 1, 1]);
    assert_eq!(ops::argmin(&x, Some(0), true).unwrap().shape(), &[1, 3]);
    assert_eq!(ops::argmax(&x, None, false).unwrap().item::<u32>().unwrap(), 6);
    let t = ops::transpose(&x, None).unwrap();
    assert_eq!(ops::argmax(&t, Some(-1), false).unwrap().to_vec::<u32>().unwrap(), vec![2, 2, 0]);
}

#[test]
fn softmax_logsumexp_are_stable() {
    let x = Array::from_slice(&[1000.0f32, 1001.0, 1002.0, -1000.0, 0.0, 1000.0], &[2, 3]).unwrap();
    let s = ops::softmax(&x, Some(&[-1]), false).unwrap().to_f64_vec().unwrap();
    let row = |r: &[f64]| -> Vec<f64> {
        let m = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = r.iter().map(|v| (v - m).exp()).sum();
        r.iter().map(|v| (v - m).exp() / z).collect()
    };
    let want: Vec<f64> = [row(&[1000.0, 1001.0, 1002.0]), row(&[-1000.0, 0.0, 1000.0])].concat();
    assert_close(&s, &want, 1e-6, 1e-7, "softmax");
    let l = ops::logsumexp(&x, Some(&[1]), false).unwrap().to_f64_vec().unwrap();
    assert_close(&l, &[1002.0 + (1.0 + (-1f64).exp() + (-2f64).exp()).ln(), 1000.0], 1e-6, 0.0, "logsumexp");
    let inf = Array::from_vec(vec![f32::NEG_INFINITY, f32::NEG_INFINITY]);
    assert_eq!(ops::logsumexp(&inf, None, false).unwrap().item::<f32>().unwrap(), f32::NEG_INFINITY);
    let h = ops::softmax(ops::astype(&x, Dtype::F16).unwrap(), None, true).unwrap();
    assert_eq!(h.dtype(), Dtype::F16);
    let total: f64 = h.to_f64_vec().unwrap().iter().sum();
    assert!((total - 1.0).abs() < 1e-2);
    let v = ops::std(Array::from_vec(vec![1.0f64, 2.0, 3.0, 4.0]), None, false, 0).unwrap();
    assert!((v.item::<f64>().unwrap() - 1.25f64.sqrt()).abs() < 1e-15);
}

/// Reference of softmax over one group.
fn softmax_ref(g: &[f64]) -> Vec<f64> {
    let m = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = g.iter().map(|v| (v - m).exp()).sum();
    g.iter().map(|v| (v - m).exp() / z).collect()
}

#[test]
fn softmax_over_axis_sets_layouts_and_float_dtypes() {
    let mut rng = Rng::new(13);
    let shape = [3usize, 4, 5];
    let vals = rng.vec(60, -4.0, 4.0);
    for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let exact = rounded(&vals, &shape, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &shape, dtype, layout);
            for (axes, ax) in [(Some(&[-1i64][..]), vec![2]), (Some(&[0, 1][..]), vec![0, 1]), (None, vec![0, 1, 2])] {
                for precise in [false, true] {
                    let got = ops::softmax(&x, axes, precise).unwrap();
                    assert_eq!((got.shape(), got.dtype()), (&shape[..], dtype));
                    // Scatter each group's softmax back to its positions (groups() lists them in order).
                    let mut want = vec![0.0; 60];
                    let positions = groups(&(0..60).map(|i| i as f64).collect::<Vec<_>>(), &shape, &ax);
                    for (g, pos) in groups(&exact, &shape, &ax).iter().zip(&positions) {
                        for (v, p) in softmax_ref(g).into_iter().zip(pos) {
                            want[*p as usize] = v;
                        }
                    }
                    let tol = 4.0 * rtol_for(dtype);
                    let what = format!("softmax {dtype} {layout:?} {axes:?} precise={precise}");
                    assert_close(&got.to_f64_vec().unwrap(), &rounded(&want, &shape, dtype), tol, tol, &what);
                }
            }
        }
    }
    let empty = ops::softmax(ops::zeros(&[0, 3], Dtype::F32).unwrap(), Some(&[0]), false).unwrap();
    assert_eq!(empty.shape(), &[0, 3]);
    let e = ops::softmax(ops::zeros(&[2], Dtype::F32).unwrap(), Some(&[1]), false).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("softmax", ErrorKind::Axis), "{e}");
}

#[test]
fn var_and_std_with_every_ddof() {
    let mut rng = Rng::new(14);
    let vals = rng.vec(12, -3.0, 3.0);
    let x = with_layout(&vals, &[3, 4], Dtype::F64, Layout::Transposed);
    for ddof in 0..6 {
        let got = ops::var(&x, Some(&[1]), false, ddof).unwrap().to_f64_vec().unwrap();
        let sd = ops::std(&x, Some(&[1]), false, ddof).unwrap().to_f64_vec().unwrap();
        for (r, (g, s)) in got.iter().zip(&sd).enumerate() {
            let row = &vals[r * 4..r * 4 + 4];
            let m = row.iter().sum::<f64>() / 4.0;
            let ss: f64 = row.iter().map(|v| (v - m).powi(2)).sum();
            // numpy and mlx clamp the divisor at 0: ddof >= n gives inf.
            let want = ss / (4usize.saturating_sub(ddof)) as f64;
            assert_close(&[*g, *s], &[want, want.sqrt()], 1e-12, 0.0, &format!("var/std ddof={ddof}"));
        }
    }
    let e = ops::std(&x, Some(&[5]), false, 0).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("std", ErrorKind::Axis), "{e}");
}

#[test]
fn argmax_argmin_match_a_reference_in_every_dtype() {
    let mut rng = Rng::new(15);
    let shape = [4usize, 3, 5];
    for dtype in Dtype::REAL {
        let vals = random_values(&mut rng, 60, dtype, -4.0, 4.0);
        let exact = rounded(&vals, &shape, dtype);
        for layout in LAYOUTS {
            let x = with_layout(&vals, &shape, dtype, layout);
            for axis in [0usize, 1, 2] {
                for (name, better) in [("argmax", f64::gt as fn(&f64, &f64) -> bool), ("argmin", f64::lt)] {
                    let f = if name == "argmax" { ops::argmax } else { ops::argmin };
                    let got = f(&x, Some(axis as i64), false).unwrap();
                    // First occurrence of the extreme in each group.
                    let want: Vec<f64> = groups(&exact, &shape, &[axis])
                        .iter()
                        .map(|g| (0..g.len()).fold(0, |b, i| if better(&g[i], &g[b]) { i } else { b }) as f64)
                        .collect();
                    assert_eq!(got.to_f64_vec().unwrap(), want, "{name} {dtype} {layout:?} axis {axis}");
                }
            }
        }
    }
    let e = ops::argmax(ops::zeros(&[2, 2], Dtype::F32).unwrap(), Some(2), false).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("argmax", ErrorKind::Axis), "{e}");
}

#[test]
fn empty_inputs_to_composite_reductions() {
    let e = ops::zeros(&[0, 3], Dtype::F32).unwrap();
    let mean = ops::mean(&e, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap();
    assert!(mean.len() == 3 && mean.iter().all(|v| v.is_nan()), "{mean:?}");
    let lse = ops::logsumexp(&e, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(lse, vec![f32::NEG_INFINITY; 3]);
    assert_eq!(ops::all(&e, Some(&[0]), false).unwrap().to_vec::<bool>().unwrap(), vec![true; 3]);
    assert_eq!(ops::any(&e, Some(&[0]), false).unwrap().to_vec::<bool>().unwrap(), vec![false; 3]);
    let v = ops::var(&e, None, false, 0).unwrap().item::<f32>().unwrap();
    assert!(v.is_nan());
    // A broadcast (stride-0) input reduces like its materialised copy.
    let b = ops::broadcast_to(Array::from_vec(vec![1.0f32, 2.0, 3.0]), &[4, 3]).unwrap();
    assert_eq!(ops::sum(&b, Some(&[0]), false).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 8.0, 12.0]);
}

#[test]
fn column_reductions_of_large_contiguous_arrays() {
    // Reducing a middle block of axes of a contiguous (3, 20, 30, 1100) array reads it in place by
    // columns, split over threads: compare with the float64 reference and with the same reduction
    // of a transposed copy (which moves the axes last instead).
    let mut rng = Rng::new(16);
    let shape = [3usize, 20, 30, 1100];
    let vals = rng.vec(shape.iter().product(), -1.0, 1.0);
    let x = array(&vals, &shape, Dtype::F32);
    let exact = rounded(&vals, &shape, Dtype::F32);
    for op in ["sum", "max", "min", "prod"] {
        let got = run(op, &x, Some(&[1, 2]), false);
        assert_eq!(got.shape(), &[3, 1100]);
        let want: Vec<f64> = groups(&exact, &shape, &[1, 2]).iter().map(|g| reference(op, g)).collect();
        let want = rounded(&want, &[want.len()], Dtype::F32);
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-6, 1e-6, &format!("{op} over axes (1, 2)"));
    }
    let ints = array(&random_values(&mut rng, 400 * 700, Dtype::I32, -9.0, 9.0), &[400, 700], Dtype::I32);
    let by_columns = ops::sum(&ints, Some(&[0]), true).unwrap().to_vec::<i32>().unwrap();
    let t = ops::transpose(&ints, None).unwrap();
    let by_rows = ops::sum(&t, Some(&[1]), false).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(by_columns, by_rows);
}
