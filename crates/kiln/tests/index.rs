//! Index ops against plain-loop float64 references.
mod common;

use common::{check_err, random_values, rounded, with_layout, Rng, LAYOUTS};
use kiln::ops::{self, SliceSpec, SplitSpec};
use kiln::{Array, Dtype, ErrorKind};

const DTYPES: [Dtype; 13] = [
    Dtype::Bool, Dtype::U8, Dtype::U16, Dtype::U32, Dtype::U64, Dtype::I8, Dtype::I16, Dtype::I32,
    Dtype::I64, Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64,
];

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of row-major position `p`.
fn unravel(p: usize, shape: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    st.iter().zip(shape).map(|(&s, &d)| (p / s) % d.max(1)).collect()
}

fn ravel(ix: &[usize], shape: &[usize]) -> usize {
    ix.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

/// A scatter op's name and its float64 reference.
type Combine = (&'static str, fn(f64, f64) -> f64);

fn idx(v: &[i64], shape: &[usize]) -> Array {
    Array::from_slice(v, shape).unwrap()
}

#[test]
fn concatenate_all_dtypes_layouts_negative_axis() {
    let mut rng = Rng::new(1);
    for dt in DTYPES {
        for lay in LAYOUTS {
            let (sa, sb) = ([2, 3], [2, 4]);
            let va = random_values(&mut rng, 6, dt, -5.0, 5.0);
            let vb = random_values(&mut rng, 8, dt, -5.0, 5.0);
            let a = with_layout(&va, &sa, dt, lay);
            let b = with_layout(&vb, &sb, dt, lay);
            let got = ops::concatenate(&[a.clone(), b.clone()], -1).unwrap();
            assert_eq!(got.shape(), &[2, 7]);
            assert_eq!(got.dtype(), dt);
            let (ra, rb) = (rounded(&va, &sa, dt), rounded(&vb, &sb, dt));
            let mut want = vec![];
            for i in 0..2 {
                want.extend_from_slice(&ra[i * 3..i * 3 + 3]);
                want.extend_from_slice(&rb[i * 4..i * 4 + 4]);
            }
            assert_eq!(got.to_f64_vec().unwrap(), want, "{dt:?} {lay:?}");
            let got0 = ops::concatenate(&[a.clone(), a], 0).unwrap().to_f64_vec().unwrap();
            assert_eq!(got0, [ra.clone(), ra].concat());
        }
    }
}

#[test]
fn concatenate_promotes_and_handles_empty() {
    let a = Array::from_slice(&[1i32, 2], &[2]).unwrap();
    let b = Array::from_slice(&[0.5f32], &[1]).unwrap();
    let e = Array::from_slice::<f32>(&[], &[0]).unwrap();
    let c = ops::concatenate(&[a, e.clone(), b], 0).unwrap();
    assert_eq!(c.dtype(), Dtype::F32);
    assert_eq!(c.to_f64_vec().unwrap(), vec![1.0, 2.0, 0.5]);
    let ee = ops::concatenate(&[e.clone(), e], 0).unwrap();
    assert_eq!(ee.shape(), &[0]);
    assert!(ee.to_f64_vec().unwrap().is_empty());
}

#[test]
fn concatenate_and_stack_errors() {
    let a = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    let b = ops::zeros(&[3, 3], Dtype::F32).unwrap();
    check_err(ops::concatenate(&[a.clone(), b.clone()], 1), ErrorKind::Shape, "concatenate");
    check_err(ops::concatenate(&[a.clone(), a.clone()], 2), ErrorKind::Axis, "concatenate");
    check_err(ops::stack(&[a.clone(), b], 0), ErrorKind::Shape, "stack");
    check_err(ops::split(&a, SplitSpec::Sections(2), 1), ErrorKind::Value, "split");
    check_err(ops::split(&a, SplitSpec::Sections(2), -3), ErrorKind::Axis, "split");
    let f = Array::from_slice(&[0.0f32], &[1]).unwrap();
    check_err(ops::take(&a, &f, Some(0)), ErrorKind::Dtype, "take");
    check_err(ops::gather(&a, std::slice::from_ref(&f), &[0], &[1, 3]), ErrorKind::Dtype, "gather");
    check_err(ops::scatter_add(&a, &[f], 1.0, &[0]), ErrorKind::Dtype, "scatter_add");
    check_err(ops::pad(&a, &[(1, 1), (1, 1), (1, 1)], 0.0), ErrorKind::Value, "pad");
    check_err(ops::diagonal(&a, 0, 1, -1), ErrorKind::Axis, "diagonal");
    check_err(ops::tril(ops::zeros(&[3], Dtype::F32).unwrap(), 0), ErrorKind::Shape, "tril");
}

#[test]
fn stack_and_split() {
    let a = idx(&[1, 2, 3], &[3]);
    let b = idx(&[4, 5, 6], &[3]);
    let s = ops::stack(&[a.clone(), b.clone()], -1).unwrap();
    assert_eq!(s.shape(), &[3, 2]);
    assert_eq!(s.to_f64_vec().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let x = with_layout(&(0..12).map(|v| v as f64).collect::<Vec<_>>(), &[2, 6], Dtype::F32, common::Layout::Reversed);
    let parts = ops::split(&x, SplitSpec::Sections(3), -1).unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[1].to_f64_vec().unwrap(), vec![2.0, 3.0, 8.0, 9.0]);
    let parts = ops::split(&x, SplitSpec::Indices(vec![1, -1]), 1).unwrap();
    let sizes: Vec<usize> = parts.iter().map(|p| p.shape()[1]).collect();
    assert_eq!(sizes, vec![1, 4, 1]);
    assert_eq!(parts[2].to_f64_vec().unwrap(), vec![5.0, 11.0]);
}

#[test]
fn stack_every_dtype_and_axis_against_loops() {
    let mut rng = Rng::new(11);
    let shape = [2usize, 3];
    for dt in DTYPES {
        for (li, lay) in LAYOUTS.into_iter().enumerate() {
            let vals: Vec<Vec<f64>> = (0..3).map(|_| random_values(&mut rng, 6, dt, -9.0, 9.0)).collect();
            // Mixed layouts among the stacked arrays.
            let xs: Vec<Array> = vals.iter().enumerate().map(|(i, v)| with_layout(v, &shape, dt, LAYOUTS[(li + i) % 4])).collect();
            let rs: Vec<Vec<f64>> = vals.iter().map(|v| rounded(v, &shape, dt)).collect();
            for axis in -3i64..=2 {
                let got = ops::stack(&xs, axis).unwrap();
                let a = axis.rem_euclid(3) as usize;
                let mut out_shape = shape.to_vec();
                out_shape.insert(a, 3);
                assert_eq!((got.shape(), got.dtype()), (&out_shape[..], dt), "stack {dt} {lay:?} axis={axis}");
                let want: Vec<f64> = (0..18)
                    .map(|p| {
                        let mut ix = unravel(p, &out_shape);
                        let k = ix.remove(a);
                        rs[k][ravel(&ix, &shape)]
                    })
                    .collect();
                assert_eq!(got.to_f64_vec().unwrap(), want, "stack {dt} {lay:?} axis={axis}");
            }
            check_err(ops::stack(&xs, 3), ErrorKind::Axis, "stack");
            check_err(ops::stack(&xs, -4), ErrorKind::Axis, "stack");
        }
    }
    let s = ops::stack(&[Array::scalar(1u8), Array::scalar(2u8)], 0).unwrap();
    assert_eq!((s.shape(), s.to_f64_vec().unwrap()), (&[2usize][..], vec![1.0, 2.0]));
    check_err(ops::stack(&[], 0), ErrorKind::Value, "stack");
}

#[test]
fn split_sections_and_indices_every_axis_against_loops() {
    let mut rng = Rng::new(12);
    let shape = [2usize, 6, 4];
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let lay = LAYOUTS[n % 4];
        let v = random_values(&mut rng, 48, dt, -9.0, 9.0);
        let r = rounded(&v, &shape, dt);
        let x = with_layout(&v, &shape, dt, lay);
        for axis in [0i64, 1, 2, -1, -2, -3] {
            let a = axis.rem_euclid(3) as usize;
            let d = shape[a] as i64;
            let mut specs: Vec<SplitSpec> = (1..=d).filter(|s| d % s == 0).map(|s| SplitSpec::Sections(s as usize)).collect();
            // Python slice bounds: negative from the end, clamped; a decreasing pair gives an empty part.
            for v in [vec![], vec![1], vec![1, 3], vec![-1], vec![0, 0], vec![3, 1], vec![0, d], vec![-d - 2, d + 5]] {
                specs.push(SplitSpec::Indices(v));
            }
            for spec in specs {
                let what = format!("split {dt} {lay:?} axis={axis} {spec:?}");
                let cuts: Vec<i64> = match &spec {
                    SplitSpec::Sections(s) => (1..*s as i64).map(|i| i * d / *s as i64).collect(),
                    SplitSpec::Indices(v) => v.iter().map(|&i| if i < 0 { (i + d).max(0) } else { i.min(d) }).collect(),
                };
                let starts: Vec<i64> = [vec![0], cuts.clone()].concat();
                let stops: Vec<i64> = [cuts, vec![d]].concat();
                let parts = ops::split(&x, spec.clone(), axis).unwrap();
                assert_eq!(parts.len(), starts.len(), "{what}");
                for ((part, &lo), &hi) in parts.iter().zip(&starts).zip(&stops) {
                    let mut ps = shape.to_vec();
                    ps[a] = (hi - lo).max(0) as usize;
                    assert_eq!((part.shape(), part.dtype()), (&ps[..], dt), "{what} part {lo}..{hi}");
                    let want: Vec<f64> =
                        (0..48).filter(|&p| (lo..hi).contains(&(unravel(p, &shape)[a] as i64))).map(|p| r[p]).collect();
                    assert_eq!(part.to_f64_vec().unwrap(), want, "{what} part {lo}..{hi}");
                }
            }
            check_err(ops::split(&x, SplitSpec::Sections(0), axis), ErrorKind::Value, "split");
            check_err(ops::split(&x, SplitSpec::Sections(5), axis), ErrorKind::Value, "split");
        }
        check_err(ops::split(&x, SplitSpec::Sections(1), 3), ErrorKind::Axis, "split");
    }
}

/// Checks pad, tile (each of `tile_reps`) and repeat (each of `repeats`, along 0, -1 and None)
/// of a 2-d array of `shape` against index arithmetic, over several dtypes and every layout.
fn check_pad_tile_repeat(seed: u64, shapes: &[[usize; 2]], tile_reps: &[&[usize]], repeats: &[usize]) {
    let mut rng = Rng::new(seed);
    for dt in [Dtype::Bool, Dtype::U8, Dtype::I16, Dtype::I64, Dtype::F16, Dtype::BF16, Dtype::F64] {
        let fill = rounded(&[7.0], &[1], dt)[0];
        for (shape, lay) in shapes.iter().flat_map(|s| LAYOUTS.map(|l| (s, l))) {
            let n: usize = shape.iter().product();
            let v = random_values(&mut rng, n, dt, -9.0, 9.0);
            let r = rounded(&v, shape, dt);
            let x = with_layout(&v, shape, dt, lay);
            let what = format!("{dt} {lay:?} {shape:?}");
            // pad: the input in a frame of `fill`.
            let widths = [(1usize, 0usize), (2, 1)];
            let p = ops::pad(&x, &widths, 7.0).unwrap();
            let ps: Vec<usize> = shape.iter().zip(&widths).map(|(&d, &(b, e))| d + b + e).collect();
            assert_eq!((p.shape(), p.dtype()), (&ps[..], dt), "pad {what}");
            let want: Vec<f64> = (0..ps.iter().product())
                .map(|q| {
                    let ix = unravel(q, &ps);
                    let inside = ix.iter().zip(&widths).zip(shape).all(|((&i, &(b, _)), &d)| i >= b && i < b + d);
                    if inside { r[ravel(&[ix[0] - widths[0].0, ix[1] - widths[1].0], shape)] } else { fill }
                })
                .collect();
            assert_eq!(p.to_f64_vec().unwrap(), want, "pad {what}");
            // tile: output position i reads input position i mod the (1-padded) input shape.
            for &reps in tile_reps {
                let nd = reps.len().max(2);
                let pad1 = |s: &[usize]| -> Vec<usize> { [vec![1; nd - s.len()], s.to_vec()].concat() };
                let (xs, rs) = (pad1(shape), pad1(reps));
                let ts: Vec<usize> = xs.iter().zip(&rs).map(|(d, r)| d * r).collect();
                let t = ops::tile(&x, reps).unwrap();
                assert_eq!((t.shape(), t.dtype()), (&ts[..], dt), "tile {what} {reps:?}");
                let want: Vec<f64> = (0..ts.iter().product())
                    .map(|q| {
                        let ix: Vec<usize> = unravel(q, &ts).iter().zip(&xs).map(|(i, d)| i % d).collect();
                        r[ravel(&ix[nd - 2..], shape)]
                    })
                    .collect();
                assert_eq!(t.to_f64_vec().unwrap(), want, "tile {what} {reps:?}");
            }
            // repeat: each element `reps` times along the axis (of the flattened array for None).
            for (&reps, axis) in repeats.iter().flat_map(|k| [Some(0i64), Some(-1), None].map(|a| (k, a))) {
                let got = ops::repeat(&x, reps, axis).unwrap();
                let (src_shape, a) = match axis {
                    Some(ax) => (shape.to_vec(), ax.rem_euclid(2) as usize),
                    None => (vec![n], 0),
                };
                let mut rs = src_shape.clone();
                rs[a] *= reps;
                assert_eq!((got.shape(), got.dtype()), (&rs[..], dt), "repeat {what} {reps} axis={axis:?}");
                let want: Vec<f64> = (0..rs.iter().product())
                    .map(|q| {
                        let mut ix = unravel(q, &rs);
                        ix[a] /= reps;
                        r[ravel(&ix, &src_shape)]
                    })
                    .collect();
                assert_eq!(got.to_f64_vec().unwrap(), want, "repeat {what} {reps} axis={axis:?}");
            }
        }
    }
}

#[test]
fn pad_tile_repeat_int_bool_half_dtypes() {
    check_pad_tile_repeat(13, &[[2, 3]], &[&[2, 1], &[3], &[2, 1, 3]], &[1, 3]);
    // pad of empty inputs (tile/repeat of them: see the ignored test below)
    check_pad_tile_repeat(14, &[[0, 3], [2, 0]], &[], &[]);
}

#[test]
fn tile_repeat_empty_input_and_zero_repeats() {
    check_pad_tile_repeat(15, &[[2, 3], [0, 3], [2, 0]], &[&[0, 2], &[2, 1], &[3], &[2, 1, 3]], &[0, 1, 3]);
}

#[test]
fn take_put_along_axis_int_dtypes_and_array_values() {
    let mut rng = Rng::new(14);
    let shape = [3usize, 4];
    // Per-row (axis 1) and per-column (axis 0) indices, distinct within each lane; negatives wrap.
    let ind1 = [3i64, 0, 1, -2, -1, 0];
    let ind0 = [2i64, 0, 1, -1, 0, -2, 2, 0];
    let flat = [11i64, -12, 5, 6];
    for dt in [Dtype::Bool, Dtype::U8, Dtype::I8, Dtype::U32, Dtype::I64, Dtype::F16, Dtype::F64] {
        let v = random_values(&mut rng, 12, dt, -9.0, 9.0);
        let r = rounded(&v, &shape, dt);
        for (n, lay) in LAYOUTS.into_iter().enumerate() {
            let x = with_layout(&v, &shape, dt, lay);
            // Index dtypes, signed and unsigned (unsigned indices take the wrapped, non-negative form).
            let idt = [Dtype::U8, Dtype::I16, Dtype::I32, Dtype::U64][n];
            let as_idx = |ind: &[i64], d: i64, s: &[usize]| {
                let w: Vec<i64> = ind.iter().map(|&i| if idt.is_unsigned() { i.rem_euclid(d) } else { i }).collect();
                ops::astype(idx(&w, s), idt).unwrap()
            };
            // Values: an int32 array (cast to dt), non-negative so every dtype holds them.
            let upd: Vec<f64> = (0..8).map(|_| (rng.next_u64() % 9) as f64).collect();
            let upd_r = rounded(&upd, &[8], dt);
            let vals = |k: usize, s: &[usize]| ops::astype(common::array(&upd[..k], s, Dtype::F64), Dtype::I32).unwrap();
            let what = format!("{dt} {lay:?} index {idt}");
            for (axis, ind, is, vs) in [(Some(1i64), &ind1[..], [3usize, 2], [3usize, 2]), (Some(-2), &ind0[..], [2, 4], [1, 4])] {
                let a = axis.unwrap().rem_euclid(2) as usize;
                let i = as_idx(ind, shape[a] as i64, &is);
                let at = |p: usize| {
                    let mut ix = unravel(p, &is);
                    ix[a] = ind[p].rem_euclid(shape[a] as i64) as usize;
                    ravel(&ix, &shape)
                };
                let got = ops::take_along_axis(&x, &i, axis).unwrap();
                assert_eq!((got.shape(), got.dtype()), (&is[..], dt), "take_along_axis {what} axis={axis:?}");
                let want: Vec<f64> = (0..ind.len()).map(|p| r[at(p)]).collect();
                assert_eq!(got.to_f64_vec().unwrap(), want, "take_along_axis {what} axis={axis:?}");
                // Values broadcast from `vs` to the indices' shape.
                let put = ops::put_along_axis(&x, &i, vals(vs.iter().product(), &vs), axis).unwrap();
                assert_eq!((put.shape(), put.dtype()), (&shape[..], dt), "put_along_axis {what} axis={axis:?}");
                let mut want = r.clone();
                for p in 0..ind.len() {
                    let q = if vs[0] == 1 { p % vs[1] } else { p };
                    want[at(p)] = upd_r[q];
                }
                assert_eq!(put.to_f64_vec().unwrap(), want, "put_along_axis {what} axis={axis:?}");
            }
            // axis None: positions in the flattened array; put keeps x's shape (as mlx).
            let i = as_idx(&flat, 12, &[4]);
            let pos: Vec<usize> = flat.iter().map(|&f| f.rem_euclid(12) as usize).collect();
            let got = ops::take_along_axis(&x, &i, None).unwrap().to_f64_vec().unwrap();
            assert_eq!(got, pos.iter().map(|&p| r[p]).collect::<Vec<_>>(), "take_along_axis {what} axis=None");
            let put = ops::put_along_axis(&x, &i, vals(4, &[4]), None).unwrap();
            assert_eq!(put.shape(), &shape, "put_along_axis {what} axis=None");
            let mut want = r.clone();
            pos.iter().enumerate().for_each(|(k, &p)| want[p] = upd_r[k]);
            assert_eq!(put.to_f64_vec().unwrap(), want, "put_along_axis {what} axis=None");
        }
    }
}

#[test]
fn pad_tile_repeat_against_loops() {
    let mut rng = Rng::new(2);
    for lay in LAYOUTS {
        let shape = [2, 3];
        let v = random_values(&mut rng, 6, Dtype::F32, -5.0, 5.0);
        let r = rounded(&v, &shape, Dtype::F32);
        let x = with_layout(&v, &shape, Dtype::F32, lay);
        // pad
        let p = ops::pad(&x, &[(1, 2), (0, 1)], 7.0).unwrap();
        assert_eq!(p.shape(), &[5, 4]);
        let mut want = vec![7.0; 20];
        for i in 0..2 {
            for j in 0..3 {
                want[(i + 1) * 4 + j] = r[i * 3 + j];
            }
        }
        assert_eq!(p.to_f64_vec().unwrap(), want, "pad {lay:?}");
        let p1 = ops::pad(&x, &[(1, 1)], 0.0).unwrap();
        assert_eq!(p1.shape(), &[4, 5]);
        // tile with extra leading rep
        let t = ops::tile(&x, &[2, 1, 2]).unwrap();
        assert_eq!(t.shape(), &[2, 2, 6]);
        let tv = t.to_f64_vec().unwrap();
        for (p, &t) in tv.iter().enumerate() {
            let ix = unravel(p, &[2, 2, 6]);
            assert_eq!(t, r[ix[1] % 2 * 3 + ix[2] % 3], "tile {lay:?}");
        }
        // repeat
        let rp = ops::repeat(&x, 2, Some(-1)).unwrap();
        assert_eq!(rp.shape(), &[2, 6]);
        let rv = rp.to_f64_vec().unwrap();
        for p in 0..12 {
            assert_eq!(rv[p], r[(p / 6) * 3 + (p % 6) / 2]);
        }
        let rf = ops::repeat(&x, 3, None).unwrap().to_f64_vec().unwrap();
        assert_eq!(rf, (0..18).map(|p| r[p / 3]).collect::<Vec<_>>());
    }
}

#[test]
fn tril_triu_against_loops() {
    let mut rng = Rng::new(3);
    for lay in LAYOUTS {
        for dt in [Dtype::Bool, Dtype::U8, Dtype::I32, Dtype::F16, Dtype::BF16, Dtype::F64] {
            let shape = [2, 3, 4];
            let v = random_values(&mut rng, 24, dt, -5.0, 5.0);
            let r = rounded(&v, &shape, dt);
            let x = with_layout(&v, &shape, dt, lay);
            // k beyond the matrix (-3, 4 and further) keeps everything or nothing.
            for k in [-9i64, -3, -1, 0, 2, 4, 9] {
                let lo = ops::tril(&x, k).unwrap().to_f64_vec().unwrap();
                let up = ops::triu(&x, k).unwrap().to_f64_vec().unwrap();
                for p in 0..24 {
                    let ix = unravel(p, &shape);
                    let (i, j) = (ix[1] as i64, ix[2] as i64);
                    assert_eq!(lo[p], if j <= i + k { r[p] } else { 0.0 }, "tril {dt} {lay:?} k={k}");
                    assert_eq!(up[p], if j >= i + k { r[p] } else { 0.0 }, "triu {dt} {lay:?} k={k}");
                }
            }
        }
    }
}

#[test]
fn take_negative_and_clamped_indices_all_index_dtypes() {
    let mut rng = Rng::new(4);
    let shape = [3, 4];
    let v = random_values(&mut rng, 12, Dtype::F32, -5.0, 5.0);
    let r = rounded(&v, &shape, Dtype::F32);
    for lay in LAYOUTS {
        let x = with_layout(&v, &shape, Dtype::F32, lay);
        for idt in [Dtype::I8, Dtype::I32, Dtype::I64] {
            let ind = ops::astype(idx(&[-1, 0, 2, -4, 9], &[5]), idt).unwrap();
            // axis -1: result (3, 5); -4 wraps to 0, 9 clamps to 3.
            let got = ops::take(&x, &ind, Some(-1)).unwrap();
            assert_eq!(got.shape(), &[3, 5]);
            let cols = [3usize, 0, 2, 0, 3];
            let want: Vec<f64> = (0..15).map(|p| r[(p / 5) * 4 + cols[p % 5]]).collect();
            assert_eq!(got.to_f64_vec().unwrap(), want, "{idt:?} {lay:?}");
        }
        // axis 0 with 2-d indices: result (2, 2, 4)
        let ind = idx(&[2, -3, 1, 1], &[2, 2]);
        let got = ops::take(&x, &ind, Some(0)).unwrap();
        assert_eq!(got.shape(), &[2, 2, 4]);
        let rows = [2usize, 0, 1, 1];
        let want: Vec<f64> = (0..16).map(|p| r[rows[p / 4] * 4 + p % 4]).collect();
        assert_eq!(got.to_f64_vec().unwrap(), want);
        // flattened
        let got = ops::take(&x, idx(&[11, -12, 5], &[3]), None).unwrap();
        assert_eq!(got.to_f64_vec().unwrap(), vec![r[11], r[0], r[5]]);
        // empty indices
        let got = ops::take(&x, idx(&[], &[0]), Some(1)).unwrap();
        assert_eq!(got.shape(), &[3, 0]);
    }
    // unsigned indices
    let x = idx(&[10, 20, 30], &[3]);
    let u = Array::from_slice(&[2u8, 0], &[2]).unwrap();
    assert_eq!(ops::take(&x, &u, Some(0)).unwrap().to_f64_vec().unwrap(), vec![30.0, 10.0]);
}

#[test]
fn take_all_dtypes() {
    let mut rng = Rng::new(5);
    for dt in DTYPES {
        let v = random_values(&mut rng, 6, dt, -5.0, 5.0);
        let r = rounded(&v, &[6], dt);
        let x = with_layout(&v, &[6], dt, common::Layout::Reversed);
        let got = ops::take(&x, idx(&[5, -6, 3], &[3]), Some(0)).unwrap();
        assert_eq!(got.dtype(), dt);
        assert_eq!(got.to_f64_vec().unwrap(), vec![r[5], r[0], r[3]], "{dt:?}");
    }
}

#[test]
fn take_and_put_along_axis() {
    let mut rng = Rng::new(6);
    let shape = [3, 4];
    let v = random_values(&mut rng, 12, Dtype::F64, -5.0, 5.0);
    for lay in LAYOUTS {
        let x = with_layout(&v, &shape, Dtype::F64, lay);
        let ind = [3i64, -1, 0, 1, 2, 2];
        let i = idx(&ind, &[3, 2]);
        let got = ops::take_along_axis(&x, &i, Some(-1)).unwrap();
        assert_eq!(got.shape(), &[3, 2]);
        let want: Vec<f64> = (0..6).map(|p| v[(p / 2) * 4 + ind[p].rem_euclid(4) as usize]).collect();
        assert_eq!(got.to_f64_vec().unwrap(), want);
        // broadcasting indices along axis 0
        let i0 = idx(&[2, 0, 1, -1], &[1, 4]);
        let got = ops::take_along_axis(&x, &i0, Some(0)).unwrap();
        let want: Vec<f64> = (0..4).map(|j| v[[2usize, 0, 1, 2][j] * 4 + j]).collect();
        assert_eq!(got.to_f64_vec().unwrap(), want);
        let put = ops::put_along_axis(&x, &i, 100.0, Some(1)).unwrap().to_f64_vec().unwrap();
        let mut want = v.clone();
        for p in 0..6 {
            want[(p / 2) * 4 + ind[p].rem_euclid(4) as usize] = 100.0;
        }
        assert_eq!(put, want);
    }
    let x = idx(&[1, 2, 3, 4], &[2, 2]);
    let got = ops::take_along_axis(&x, idx(&[3, 0], &[2]), None).unwrap();
    assert_eq!(got.to_f64_vec().unwrap(), vec![4.0, 1.0]);
    // An empty array has nothing to write into: it comes back as it is, whatever the indices'
    // dtype (as mlx), while a non-empty one still refuses float indices.
    let empty = Array::from_slice::<f32>(&[], &[0]).unwrap();
    let put = ops::put_along_axis(&empty, &empty, &empty, None).unwrap();
    assert_eq!((put.shape(), put.dtype()), (&[0usize][..], Dtype::F32));
    let float_index = Array::from_slice(&[0.0f32], &[1]).unwrap();
    check_err(ops::put_along_axis(&float_index, &float_index, 1.0, None), ErrorKind::Dtype, "put_along_axis");
}

#[test]
fn scatter_family_with_duplicates() {
    let shape = [4, 3];
    let base: Vec<f64> = (0..12).map(|v| v as f64).collect();
    let ind = [1i64, -3, 3, 0, 9];
    let upd: Vec<f64> = (0..15).map(|v| (v as f64) - 7.0).collect();
    for dt in [Dtype::I32, Dtype::I64, Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        for lay in LAYOUTS {
            let x = with_layout(&base, &shape, dt, lay);
            let u = with_layout(&upd, &[5, 1, 3], dt, lay);
            let i = idx(&ind, &[5]);
            let ops_: [Combine; 5] = [
                ("set", |_, b| b),
                ("add", |a, b| a + b),
                ("prod", |a, b| a * b),
                ("max", f64::max),
                ("min", f64::min),
            ];
            for (name, f) in ops_ {
                let got = match name {
                    "set" => ops::scatter(&x, std::slice::from_ref(&i), &u, &[0]),
                    "add" => ops::scatter_add(&x, std::slice::from_ref(&i), &u, &[0]),
                    "prod" => ops::scatter_prod(&x, std::slice::from_ref(&i), &u, &[0]),
                    "max" => ops::scatter_max(&x, std::slice::from_ref(&i), &u, &[0]),
                    _ => ops::scatter_min(&x, std::slice::from_ref(&i), &u, &[0]),
                }
                .unwrap();
                let mut want = base.clone();
                for (b, &r) in ind.iter().enumerate() {
                    let row = (if r < 0 { r + 4 } else { r }).clamp(0, 3) as usize;
                    for j in 0..3 {
                        want[row * 3 + j] = f(want[row * 3 + j], upd[b * 3 + j]);
                    }
                }
                assert_eq!(got.dtype(), dt);
                assert_eq!(got.to_f64_vec().unwrap(), rounded(&want, &shape, dt), "{name} {dt:?} {lay:?}");
            }
        }
    }
}

#[test]
fn scatter_add_all_dtypes_and_empty() {
    for dt in DTYPES {
        let x = ops::zeros(&[3], dt).unwrap();
        let i = idx(&[2, 2, 0], &[3]);
        let u = ops::ones(&[3, 1], dt).unwrap();
        let got = ops::scatter_add(&x, &[i], &u, &[0]).unwrap().to_f64_vec().unwrap();
        let want = if dt == Dtype::Bool { vec![1.0, 0.0, 1.0] } else { vec![1.0, 0.0, 2.0] };
        assert_eq!(got, want, "{dt:?}");
    }
    let x = idx(&[1, 2], &[2]);
    let got = ops::scatter_add(&x, &[idx(&[], &[0])], ops::zeros(&[0, 1], Dtype::I64).unwrap(), &[0]).unwrap();
    assert_eq!(got.to_f64_vec().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn gather_general() {
    let shape = [3, 4, 2];
    let v: Vec<f64> = (0..24).map(|v| v as f64 * 1.5).collect();
    for (dt, lay) in DTYPES.iter().flat_map(|&d| LAYOUTS.map(|l| (d, l))) {
        let x = with_layout(&v, &shape, dt, lay);
        let r = rounded(&v, &shape, dt);
        let i0 = idx(&[0, 2, -1], &[3, 1]);
        let i1 = idx(&[1, 3], &[1, 2]);
        let got = ops::gather(&x, &[i0, i1], &[0, -2], &[1, 2, 2]).unwrap();
        assert_eq!((got.shape(), got.dtype()), (&[3usize, 2, 1, 2, 2][..], dt));
        let gv = got.to_f64_vec().unwrap();
        let rows = [0usize, 2, 2];
        let cols = [1usize, 2]; // 3 clamps to 4 - 2 = 2
        for (p, &g) in gv.iter().enumerate() {
            let ix = unravel(p, &[3, 2, 1, 2, 2]);
            let src = [rows[ix[0]] + ix[2], cols[ix[1]] + ix[3], ix[4]];
            assert_eq!(g, r[ravel(&src, &shape)], "gather {dt} {lay:?} {ix:?}");
        }
    }
}

#[test]
fn slice_update_and_flip() {
    let shape = [3, 5];
    let v: Vec<f64> = (0..15).map(|v| v as f64).collect();
    for lay in LAYOUTS {
        let x = with_layout(&v, &shape, Dtype::I32, lay);
        let specs = [SliceSpec::range(1, 3), SliceSpec { start: None, stop: None, step: -2 }];
        let upd = with_layout(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], &[2, 3], Dtype::I32, lay);
        let got = ops::slice_update(&x, &upd, &specs).unwrap().to_f64_vec().unwrap();
        let mut want = v.clone();
        for i in 0..2 {
            for j in 0..3 {
                want[(1 + i) * 5 + (4 - 2 * j)] = -((i * 3 + j + 1) as f64);
            }
        }
        assert_eq!(got, want, "{lay:?}");
        let sc = ops::slice_update(&x, 9, &[SliceSpec::ALL, SliceSpec::range(-1, 5)]).unwrap().to_f64_vec().unwrap();
        let want: Vec<f64> = (0..15).map(|p| if p % 5 == 4 { 9.0 } else { v[p] }).collect();
        assert_eq!(sc, want);
        let f = ops::flip(&x, Some(&[-1])).unwrap().to_f64_vec().unwrap();
        assert_eq!(f, (0..15).map(|p| v[(p / 5) * 5 + 4 - p % 5]).collect::<Vec<_>>());
        let fa = ops::flip(&x, None).unwrap().to_f64_vec().unwrap();
        assert_eq!(fa, v.iter().rev().copied().collect::<Vec<_>>());
    }
    check_err(ops::slice_update(ops::zeros(&[3], Dtype::F32).unwrap(), ops::zeros(&[2], Dtype::F32).unwrap(), &[]), ErrorKind::Shape, "slice_update");
}

#[test]
fn roll_diag_diagonal() {
    let shape = [3, 4];
    let v: Vec<f64> = (0..12).map(|v| v as f64).collect();
    for lay in LAYOUTS {
        let x = with_layout(&v, &shape, Dtype::F64, lay);
        for s in [-5i64, -1, 0, 2, 9] {
            let got = ops::roll(&x, s, Some(-1)).unwrap().to_f64_vec().unwrap();
            let want: Vec<f64> = (0..12).map(|p| v[(p / 4) * 4 + ((p % 4) as i64 - s).rem_euclid(4) as usize]).collect();
            assert_eq!(got, want, "roll {s}");
            let got = ops::roll(&x, s, None).unwrap();
            assert_eq!(got.shape(), &shape);
            let want: Vec<f64> = (0..12).map(|p| v[(p as i64 - s).rem_euclid(12) as usize]).collect();
            assert_eq!(got.to_f64_vec().unwrap(), want);
        }
        for k in [-2i64, -1, 0, 1, 3, 5] {
            let d = ops::diag(&x, k).unwrap().to_f64_vec().unwrap();
            let mut want = vec![];
            for i in 0..3i64 {
                let j = i + k;
                if (0..4).contains(&j) {
                    want.push(v[(i * 4 + j) as usize]);
                }
            }
            assert_eq!(d, want, "diag k={k}");
        }
    }
    let y: Vec<f64> = (0..24).map(|v| v as f64).collect();
    let x3 = with_layout(&y, &[2, 3, 4], Dtype::F32, common::Layout::Transposed);
    let d = ops::diagonal(&x3, 1, -1, 0).unwrap();
    assert_eq!(d.shape(), &[3, 1]);
    // axis1 = 2 (rows), axis2 = 0 (cols): element [c, k, r] with c = r + 1.
    let want: Vec<f64> = (0..3).map(|k| y[12 + k * 4]).collect();
    assert_eq!(d.to_f64_vec().unwrap(), want);
    let m = ops::diag(idx(&[1, 2], &[2]), -1).unwrap();
    assert_eq!(m.shape(), &[3, 3]);
    assert_eq!(m.to_f64_vec().unwrap(), vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0]);
    check_err(ops::diag(ops::zeros(&[1, 1, 1], Dtype::F32).unwrap(), 0), ErrorKind::Shape, "diag");
}

#[test]
fn large_inputs_take_the_parallel_paths() {
    let n = 300_000usize;
    let v: Vec<f64> = (0..n).map(|i| (i % 1000) as f64).collect();
    let x = with_layout(&v, &[n], Dtype::F32, common::Layout::Reversed);
    let ind: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % n as i64 - (i % 3) * n as i64 / 2).collect();
    let got = ops::take(&x, idx(&ind, &[n]), Some(0)).unwrap().to_f64_vec().unwrap();
    for (p, &i) in ind.iter().enumerate() {
        let j = if i < 0 { i + n as i64 } else { i }.clamp(0, n as i64 - 1) as usize;
        assert_eq!(got[p], v[j]);
    }
    let col = with_layout(&v, &[n, 1], Dtype::F32, common::Layout::Transposed);
    let c = ops::concatenate(&[col.clone(), col], -1).unwrap().to_f64_vec().unwrap();
    for p in 0..2 * n {
        assert_eq!(c[p], v[p / 2]);
    }
}

#[test]
fn scalars_and_more_bad_input() {
    let s = Array::scalar(5.0f32);
    assert_eq!(ops::take(&s, idx(&[0, -1], &[2]), None).unwrap().to_f64_vec().unwrap(), vec![5.0, 5.0]);
    assert_eq!(ops::flip(&s, None).unwrap().to_f64_vec().unwrap(), vec![5.0]);
    assert_eq!(ops::pad(&s, &[], 0.0).unwrap().to_f64_vec().unwrap(), vec![5.0]);
    assert_eq!(ops::repeat(&s, 3, None).unwrap().to_f64_vec().unwrap(), vec![5.0; 3]);
    assert_eq!(ops::tile(&s, &[2]).unwrap().to_f64_vec().unwrap(), vec![5.0; 2]);
    check_err(ops::concatenate(&[s.clone(), s.clone()], 0), ErrorKind::Shape, "concatenate");
    let a = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    check_err(ops::take(&a, idx(&[0], &[1]), Some(2)), ErrorKind::Axis, "take");
    check_err(ops::scatter(&a, &[idx(&[0, 1], &[2])], ops::ones(&[3, 1, 3], Dtype::F32).unwrap(), &[0]), ErrorKind::Shape, "scatter");
    check_err(ops::scatter(&a, &[idx(&[0], &[1])], ops::ones(&[1, 3, 3], Dtype::F32).unwrap(), &[0]), ErrorKind::Shape, "scatter");
    check_err(ops::scatter(&a, &[idx(&[0], &[1])], ops::ones(&[1, 1, 3], Dtype::F32).unwrap(), &[0, 1]), ErrorKind::Value, "scatter");
    check_err(ops::put_along_axis(&a, idx(&[0], &[1]), 1.0, Some(0)), ErrorKind::Shape, "put_along_axis");
    check_err(ops::take_along_axis(&a, idx(&[0, 0, 0, 0], &[2, 2]), Some(0)), ErrorKind::Shape, "take_along_axis");
    check_err(ops::gather(&a, &[idx(&[0], &[1])], &[0], &[1, 4]), ErrorKind::Shape, "gather");
    check_err(ops::flip(&a, Some(&[0, -2])), ErrorKind::Axis, "flip");
    check_err(ops::roll(&a, 1, Some(5)), ErrorKind::Axis, "roll");
}

#[test]
fn large_slice_update_and_pad() {
    let (r, c) = (700usize, 400usize);
    let v: Vec<f64> = (0..r * c).map(|i| (i % 977) as f64).collect();
    let x = with_layout(&v, &[r, c], Dtype::F32, common::Layout::Transposed);
    let p = ops::pad(&x, &[(2, 1), (3, 0)], -1.0).unwrap().to_f64_vec().unwrap();
    let w = c + 3;
    for (q, &g) in p.iter().enumerate() {
        let (i, j) = (q / w, q % w);
        let want = if (2..r + 2).contains(&i) && j >= 3 { v[(i - 2) * c + j - 3] } else { -1.0 };
        assert_eq!(g, want);
    }
    let z = ops::zeros(&[r, 2 * c], Dtype::F32).unwrap();
    let specs = [SliceSpec { start: None, stop: None, step: -1 }, SliceSpec { start: Some(1), stop: None, step: 2 }];
    let u = ops::slice_update(&z, &x, &specs).unwrap().to_f64_vec().unwrap();
    for (q, &g) in u.iter().enumerate() {
        let (i, j) = (q / (2 * c), q % (2 * c));
        let want = if j % 2 == 1 { v[(r - 1 - i) * c + j / 2] } else { 0.0 };
        assert_eq!(g, want);
    }
}


#[test]
fn roll_over_several_axes() {
    let shape = [2usize, 3, 4];
    let v: Vec<f64> = (0..24).map(|v| v as f64).collect();
    for lay in LAYOUTS {
        let x = with_layout(&v, &shape, Dtype::I32, lay);
        // (shifts, axes) and the total shift each axis gets.
        for (shifts, axes, total) in [
            (vec![1i64, -2], vec![0i64, 2], [1i64, 0, -2]),
            (vec![5], vec![1, -1], [0, 5, 5]),
            (vec![1, 2], vec![2, 2], [0, 0, 3]),
        ] {
            let got = ops::roll_axes(&x, &shifts, &axes).unwrap().to_f64_vec().unwrap();
            let want: Vec<f64> = (0..24)
                .map(|p| {
                    let idx = unravel(p, &shape);
                    let src: Vec<usize> =
                        (0..3).map(|a| (idx[a] as i64 - total[a]).rem_euclid(shape[a] as i64) as usize).collect();
                    v[ravel(&src, &shape)]
                })
                .collect();
            assert_eq!(got, want, "roll {shifts:?} over {axes:?} {lay:?}");
        }
    }
    let x = ops::zeros(&shape, Dtype::F32).unwrap();
    check_err(ops::roll_axes(&x, &[1, 2, 3], &[0, 1]), ErrorKind::Value, "roll");
    check_err(ops::roll_axes(&x, &[1], &[3]), ErrorKind::Axis, "roll");
}

/// `a[mask] = values` written as a loop: the k-th true position (row-major) takes row k of
/// `rows` (rows of `row_len` values; the last row repeats past the end).
fn masked_scatter_reference(a: &[f64], mask: &[bool], rows: &[f64], row_len: usize) -> Vec<f64> {
    let mut out = a.to_vec();
    let n_rows = rows.len() / row_len;
    let mut k = 0;
    for (p, &m) in mask.iter().enumerate() {
        if m {
            let r = k.min(n_rows - 1);
            out[p * row_len..(p + 1) * row_len].copy_from_slice(&rows[r * row_len..(r + 1) * row_len]);
            k += 1;
        }
    }
    out
}

#[test]
fn masked_scatter_writes_consecutive_rows_at_true_positions() {
    let mut rng = Rng::new(31);
    // (array shape, mask axes, values shape)
    let cases: [(&[usize], usize, &[usize]); 5] = [
        (&[6], 1, &[6]),
        (&[2, 3], 2, &[6]),
        (&[4, 3], 1, &[4, 3]),
        (&[4, 3], 1, &[4, 1]),
        (&[3, 2, 2], 1, &[2]),
    ];
    for (shape, k, vshape) in cases {
        let n: usize = shape.iter().product();
        let m: usize = shape[..k].iter().product();
        let row_len = n / m;
        let a: Vec<f64> = random_values(&mut rng, n, Dtype::F32, -5.0, 5.0).iter().map(|&x| x as f32 as f64).collect();
        let mask: Vec<bool> = (0..m).map(|i| (i * 7 + 3) % 3 != 0).collect();
        let v = random_values(&mut rng, vshape.iter().product(), Dtype::F32, -5.0, 5.0);
        let varr = Array::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), vshape).unwrap();
        // The values as rows of the remaining axes (broadcast as the op does).
        let rows_shape: Vec<usize> =
            std::iter::once(if vshape.len() == shape.len() - k + 1 { vshape[0] } else { m }).chain(shape[k..].iter().copied()).collect();
        let rows = ops::broadcast_to(&varr, &rows_shape).unwrap().to_f64_vec().unwrap();
        let got = ops::masked_scatter(
            Array::from_slice(&a.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape).unwrap(),
            Array::from_slice(&mask, &shape[..k]).unwrap(),
            &varr,
        )
        .unwrap();
        assert_eq!(got.shape(), shape);
        let want = masked_scatter_reference(&a, &mask, &rows, row_len);
        assert_eq!(got.to_f64_vec().unwrap(), want, "masked_scatter {shape:?} mask axes {k} values {vshape:?}");
    }
    // Gradients of both the array and the values, against finite differences.
    let mask = Array::from_slice(&[true, false, true, true, false], &[5]).unwrap();
    let f = move |x: &[Array]| ops::masked_scatter(&x[0], &mask, &x[1]);
    let x = Array::from_slice(&random_values(&mut rng, 5, Dtype::F64, -1.0, 1.0), &[5]).unwrap();
    let v = Array::from_slice(&random_values(&mut rng, 3, Dtype::F64, -1.0, 1.0), &[3]).unwrap();
    common::derivatives::check("masked_scatter", &f, &[x, v], 4);
    // Batched masks and values under vmap equal a loop over the batch.
    let a = Array::from_slice(&[10f32, 20.0, 30.0, 40.0], &[4]).unwrap();
    let masks = Array::from_slice(&[true, false, false, true, false, true, true, false], &[2, 4]).unwrap();
    let vals = Array::from_slice(&[1f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let batched = kiln::vmap(|x: &[Array]| Ok(vec![ops::masked_scatter(&x[0], &x[1], &x[2])?]), &[None, Some(0), Some(0)], &[Some(0)])(&[
        a, masks, vals,
    ])
    .unwrap();
    assert_eq!(batched[0].to_f64_vec().unwrap(), vec![1.0, 20.0, 30.0, 2.0, 10.0, 3.0, 4.0, 40.0]);
    // Errors: a non-boolean mask, a mask that is not the leading axes, too many value axes.
    let a = Array::from_slice(&[0f32; 6], &[2, 3]).unwrap();
    check_err(ops::masked_scatter(&a, Array::from_slice(&[1i32, 0], &[2]).unwrap(), 1.0), ErrorKind::Dtype, "masked_scatter");
    check_err(ops::masked_scatter(&a, Array::from_slice(&[true; 3], &[3]).unwrap(), 1.0), ErrorKind::Shape, "masked_scatter");
    let deep = Array::from_slice(&[0f32; 12], &[2, 2, 3]).unwrap();
    check_err(ops::masked_scatter(&a, Array::from_slice(&[true; 2], &[2]).unwrap(), &deep), ErrorKind::Shape, "masked_scatter");
}
