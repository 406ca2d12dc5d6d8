//! linspace/eye/identity/meshgrid and outer/inner/tensordot/einsum against plain loops.
mod common;

use common::{assert_close, with_layout, Rng, LAYOUTS};
use kiln::ops::{self, TensordotAxes};
use kiln::{Array, Dtype, ErrorKind};

/// Naive (m, k) x (k, n) product.
fn mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

#[test]
fn linspace_eye_identity() {
    let l = ops::linspace(-1.0, 2.0, 7, Dtype::F64).unwrap().to_f64_vec().unwrap();
    let want: Vec<f64> = (0..7).map(|i| -1.0 + 0.5 * i as f64).collect();
    assert_close(&l, &want, 1e-12, 1e-12, "linspace");
    assert_eq!(ops::linspace(3.0, 5.0, 1, Dtype::F32).unwrap().to_f64_vec().unwrap(), vec![3.0]);
    assert_eq!(ops::linspace(0.0, 1.0, 0, Dtype::F32).unwrap().shape(), &[0]);
    assert_eq!(ops::linspace(0.0, 10.0, 3, Dtype::I32).unwrap().to_f64_vec().unwrap(), vec![0.0, 5.0, 10.0]);
    // Without the endpoint: numpy's linspace(0, 1, 4, endpoint=False).
    assert_eq!(ops::linspace_with(0.0, 1.0, 4, false, Dtype::F64).unwrap().to_f64_vec().unwrap(), vec![0.0, 0.25, 0.5, 0.75]);
    assert_eq!(ops::linspace_with(2.0, 3.0, 1, false, Dtype::F64).unwrap().to_f64_vec().unwrap(), vec![2.0]);
    for k in [-2i64, 0, 1, 4] {
        let e = ops::eye(3, Some(4), k, Dtype::F16).unwrap();
        assert_eq!(e.shape(), &[3, 4]);
        assert_eq!(e.dtype(), Dtype::F16);
        let want: Vec<f64> = (0..12).map(|p| ((p % 4) as i64 == (p / 4) as i64 + k) as i32 as f64).collect();
        assert_eq!(e.to_f64_vec().unwrap(), want, "eye k={k}");
    }
    let i = ops::identity(3, Dtype::I32).unwrap().to_f64_vec().unwrap();
    assert_eq!(i, (0..9).map(|p| (p % 4 == 0) as i32 as f64).collect::<Vec<_>>());
}

#[test]
fn meshgrid_ij_and_xy() {
    let a = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let b = Array::from_slice(&[10.0f32, 20.0, 30.0], &[3]).unwrap();
    let ij = ops::meshgrid(&[a.clone(), b.clone()], false).unwrap();
    assert_eq!(ij[0].shape(), &[2, 3]);
    assert_eq!(ij[0].to_f64_vec().unwrap(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    assert_eq!(ij[1].to_f64_vec().unwrap(), vec![10.0, 20.0, 30.0, 10.0, 20.0, 30.0]);
    let xy = ops::meshgrid(&[a, b], true).unwrap();
    assert_eq!(xy[0].shape(), &[3, 2]);
    assert_eq!(xy[0].to_f64_vec().unwrap(), vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    assert_eq!(xy[1].to_f64_vec().unwrap(), vec![10.0, 10.0, 20.0, 20.0, 30.0, 30.0]);
}

#[test]
fn outer_inner_tensordot() {
    let mut rng = Rng::new(7);
    for lay in LAYOUTS {
        let va = rng.vec(6, -1.0, 1.0);
        let vb = rng.vec(12, -1.0, 1.0);
        let a = with_layout(&va, &[2, 3], Dtype::F64, lay);
        let b = with_layout(&vb, &[3, 4], Dtype::F64, lay);
        let o = ops::outer(&a, &b).unwrap();
        assert_eq!(o.shape(), &[6, 12]);
        let want: Vec<f64> = (0..72).map(|p| va[p / 12] * vb[p % 12]).collect();
        assert_close(&o.to_f64_vec().unwrap(), &want, 1e-12, 0.0, "outer");
        let t = ops::tensordot(&a, &b, TensordotAxes::Count(1)).unwrap();
        assert_close(&t.to_f64_vec().unwrap(), &mm(&va, &vb, 2, 3, 4), 1e-12, 1e-12, "tensordot");
        // Contract a's axis 0 with b's axis -1 of a (4, 2) operand.
        let bt = with_layout(&vb[..8], &[4, 2], Dtype::F64, lay);
        let t = ops::tensordot(&a, &bt, TensordotAxes::Pairs(vec![0], vec![-1])).unwrap();
        assert_eq!(t.shape(), &[3, 4]);
        let mut want = vec![0.0; 12];
        for i in 0..3 {
            for j in 0..4 {
                for p in 0..2 {
                    want[i * 4 + j] += va[p * 3 + i] * vb[j * 2 + p];
                }
            }
        }
        assert_close(&t.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, "tensordot pairs");
        let c = with_layout(&vb[..9], &[3, 3], Dtype::F64, lay);
        let inn = ops::inner(&a, &c).unwrap();
        assert_eq!(inn.shape(), &[2, 3]);
        let mut want = vec![0.0; 6];
        for i in 0..2 {
            for j in 0..3 {
                for p in 0..3 {
                    want[i * 3 + j] += va[i * 3 + p] * vb[j * 3 + p];
                }
            }
        }
        assert_close(&inn.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, "inner");
    }
    let a = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    let e = ops::tensordot(&a, &a, TensordotAxes::Count(1)).unwrap_err();
    assert_eq!((e.kind, e.op.as_str()), (ErrorKind::Shape, "tensordot"));
    let e = ops::inner(&a, ops::zeros(&[2], Dtype::F32).unwrap()).unwrap_err();
    assert_eq!((e.kind, e.op.as_str()), (ErrorKind::Shape, "inner"));
}

#[test]
fn einsum_patterns() {
    let mut rng = Rng::new(8);
    for lay in LAYOUTS {
        let va = rng.vec(6, -1.0, 1.0);
        let vb = rng.vec(12, -1.0, 1.0);
        let a = with_layout(&va, &[2, 3], Dtype::F32, lay);
        let b = with_layout(&vb, &[3, 4], Dtype::F32, lay);
        let tol = 1e-5;
        let got = ops::einsum("ij,jk->ik", &[a.clone(), b.clone()]).unwrap();
        assert_close(&got.to_f64_vec().unwrap(), &mm(&va, &vb, 2, 3, 4), tol, tol, "ij,jk->ik");
        let got = ops::einsum("ij,jk", &[a.clone(), b.clone()]).unwrap();
        assert_close(&got.to_f64_vec().unwrap(), &mm(&va, &vb, 2, 3, 4), tol, tol, "implicit");
        let got = ops::einsum("ij->ji", std::slice::from_ref(&a)).unwrap();
        assert_eq!(got.shape(), &[3, 2]);
        let want: Vec<f64> = (0..6).map(|p| va[(p % 2) * 3 + p / 2]).collect();
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, "ij->ji");
        let got = ops::einsum("ij->", std::slice::from_ref(&a)).unwrap();
        assert_eq!(got.shape(), &[] as &[usize]);
        assert_close(&got.to_f64_vec().unwrap(), &[va.iter().sum()], tol, tol, "ij->");
        let got = ops::einsum("ij->j", std::slice::from_ref(&a)).unwrap();
        let want: Vec<f64> = (0..3).map(|j| va[j] + va[3 + j]).collect();
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, "ij->j");
        let x = with_layout(&va[..3], &[3], Dtype::F32, lay);
        let y = with_layout(&vb[..4], &[4], Dtype::F32, lay);
        let got = ops::einsum("i,j->ij", &[x, y]).unwrap();
        let want: Vec<f64> = (0..12).map(|p| va[p / 4] * vb[p % 4]).collect();
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, "i,j->ij");
        // Batched: (2, 2, 3) x (2, 3, 2).
        let bv = rng.vec(12, -1.0, 1.0);
        let cv = rng.vec(12, -1.0, 1.0);
        let bb = with_layout(&bv, &[2, 2, 3], Dtype::F32, lay);
        let cc = with_layout(&cv, &[2, 3, 2], Dtype::F32, lay);
        let got = ops::einsum("bij,bjk->bik", &[bb.clone(), cc.clone()]).unwrap();
        let want = [mm(&bv[..6], &cv[..6], 2, 3, 2), mm(&bv[6..], &cv[6..], 2, 3, 2)].concat();
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, "bij,bjk->bik");
        // Output order differing from the natural one, and three operands.
        let got = ops::einsum("bij,bjk->kib", &[bb, cc]).unwrap();
        assert_eq!(got.shape(), &[2, 2, 2]);
        let gv = got.to_f64_vec().unwrap();
        for k in 0..2 {
            for i in 0..2 {
                for bi in 0..2 {
                    let w = want[bi * 4 + i * 2 + k];
                    assert!((gv[k * 4 + i * 2 + bi] - w).abs() < tol);
                }
            }
        }
        let got = ops::einsum("ij,jk,k->i", &[a.clone(), b.clone(), with_layout(&vb[..4], &[4], Dtype::F32, lay)]).unwrap();
        let ab = mm(&va, &vb, 2, 3, 4);
        let want: Vec<f64> = (0..2).map(|i| (0..4).map(|k| ab[i * 4 + k] * vb[k]).sum()).collect();
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, "three operands");
    }
    let sq = ops::zeros(&[3, 3], Dtype::F32).unwrap();
    let e = ops::einsum("ij,jk->ik", &[sq.clone(), ops::zeros(&[2, 2], Dtype::F32).unwrap()]).unwrap_err();
    assert_eq!((e.kind, e.op.as_str()), (ErrorKind::Shape, "einsum"));
    for (bad, what) in [("ij,jk->ik", "operand terms"), ("i...j...->ij", "more than one ellipsis"), ("ij->ii", "repeated"), ("i2->i", "letters")] {
        let e = ops::einsum(bad, std::slice::from_ref(&sq)).unwrap_err();
        assert_eq!((e.kind, e.op.as_str()), (ErrorKind::Value, "einsum"), "{bad}");
        assert!(e.message.contains(what), "{bad}: {e}");
    }
}

/// einsum by definition: every assignment of the labels, the product of the operands' entries
/// (a size-1 axis reads its one entry), summed into the output's entry. `terms` name every axis.
fn einsum_by_loops(terms: &[&str], output: &str, operands: &[(Vec<f64>, Vec<usize>)]) -> Vec<f64> {
    let mut sizes = std::collections::BTreeMap::new();
    for (t, (_, shape)) in terms.iter().zip(operands) {
        for (c, &d) in t.chars().zip(shape) {
            let e = sizes.entry(c).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let labels: Vec<char> = sizes.keys().copied().collect();
    let total: usize = sizes.values().product();
    let mut out = vec![0.0; output.chars().map(|c| sizes[&c]).product()];
    for flat in 0..total {
        let mut rest = flat;
        let mut at = std::collections::BTreeMap::new();
        for c in labels.iter().rev() {
            at.insert(*c, rest % sizes[c]);
            rest /= sizes[c];
        }
        let offset = |t: &str, shape: &[usize]| t.chars().zip(shape).fold(0, |o, (c, &d)| o * d + at[&c].min(d - 1));
        let product: f64 = terms.iter().zip(operands).map(|(t, (v, shape))| v[offset(t, shape)]).product();
        let o = output.chars().fold(0, |o, c| o * sizes[&c] + at[&c]);
        out[o] += product;
    }
    out
}

#[test]
fn einsum_with_ellipses_diagonals_and_broadcasting_matches_loops() {
    let mut rng = Rng::new(12);
    // (subscripts, the same with every axis named, shapes)
    let cases: [(&str, &str, &[&[usize]]); 14] = [
        ("ii->i", "ii->i", &[&[4, 4]]),
        ("ii", "ii->", &[&[3, 3]]),
        ("iii->i", "iii->i", &[&[2, 2, 2]]),
        ("ijij->j", "ijij->j", &[&[2, 3, 2, 3]]),
        ("iijj->ij", "iijj->ij", &[&[2, 2, 3, 3]]),
        ("ab,bc->c", "ab,bc->c", &[&[5, 1], &[8, 2]]),
        ("abcd,cdab->abcd", "abcd,cdab->abcd", &[&[5, 1, 3, 1], &[1, 7, 1, 2]]),
        ("...ij,...jk->...ik", "zij,zjk->zik", &[&[1, 3, 4], &[2, 4, 5]]),
        ("...ij,...jk->...ik", "yzij,yzjk->yzik", &[&[5, 1, 3, 4], &[1, 2, 4, 5]]),
        ("...hh->...h", "abhh->abh", &[&[2, 3, 4, 4]]),
        ("...cd,c...->d...", "abcd,c->dab", &[&[2, 3, 4, 5], &[4]]),
        ("...c,cd", "bc,cd->bd", &[&[3, 4], &[4, 5]]),
        ("ij,jk,kl,lm->im", "ij,jk,kl,lm->im", &[&[2, 3], &[3, 4], &[4, 2], &[2, 3]]),
        ("dd,fb,be,cdb->cef", "dd,fb,be,cdb->cef", &[&[3, 3], &[2, 4], &[4, 5], &[2, 3, 4]]),
    ];
    for (subscripts, named, shapes) in cases {
        let values: Vec<(Vec<f64>, Vec<usize>)> =
            shapes.iter().map(|s| (rng.vec(s.iter().product(), -1.0, 1.0), s.to_vec())).collect();
        let arrays: Vec<Array> = values.iter().map(|(v, s)| Array::from_slice(v, s).unwrap()).collect();
        let (lhs, output) = named.split_once("->").unwrap();
        let want = einsum_by_loops(&lhs.split(',').collect::<Vec<_>>(), output, &values);
        let got = ops::einsum(subscripts, &arrays).unwrap();
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-4, 1e-5, subscripts);
    }
    // A size of 1 broadcasts against 0 too (numpy's result is empty).
    let e = ops::einsum("i,i->i", &[ops::zeros(&[0], Dtype::F32).unwrap(), ops::ones(&[1], Dtype::F32).unwrap()]).unwrap();
    assert_eq!(e.shape(), &[0]);
    // A size that neither matches nor is 1 is refused, naming both sizes.
    let e = ops::einsum("ij,jk", &[ops::zeros(&[2, 3], Dtype::F32).unwrap(), ops::zeros(&[2, 4], Dtype::F32).unwrap()]).unwrap_err();
    assert!(e.message.contains("size 3") && e.message.contains("but 2"), "{e}");
}

/// Subscripts, operands and the path numpy's greedy strategy takes.
type PathCase = (&'static str, Vec<Array>, Vec<Vec<usize>>);

#[test]
fn einsum_path_takes_the_pair_that_removes_the_most_elements_first() {
    let zeros = |s: &[usize]| ops::zeros(s, Dtype::F32).unwrap();
    let cases: [PathCase; 8] = [
        ("ii->i", vec![zeros(&[5, 5])], vec![vec![0]]),
        ("ij,jk", vec![zeros(&[5, 8]), zeros(&[8, 3])], vec![vec![0, 1]]),
        // (5x8)(8x3) first leaves 15 elements of 64 + 24; (8x3)(3x7) would leave 56 of 24 + 21.
        ("ij,jk,kl", vec![zeros(&[5, 8]), zeros(&[8, 3]), zeros(&[3, 7])], vec![vec![0, 1], vec![0, 1]]),
        // Here (8x10)(10x7) removes 80 + 70 - 56 = 94 elements, (5x8)(8x10) only 40 + 80 - 50 = 70.
        ("ij,jk,kl", vec![zeros(&[5, 8]), zeros(&[8, 10]), zeros(&[10, 7])], vec![vec![1, 2], vec![0, 1]]),
        // (j)(ij) removes 4 + 12 - 3 = 13 elements, (i)(ij) 3 + 12 - 4 = 11; (i)(j) share no index.
        ("i,j,ij->", vec![zeros(&[3]), zeros(&[4]), zeros(&[3, 4])], vec![vec![1, 2], vec![0, 1]]),
        // numpy 2.4's einsum_path gives (0, 3), (0, 2), (0, 1).
        ("dd,fb,be,cdb->cef", vec![zeros(&[3, 3]), zeros(&[2, 4]), zeros(&[4, 5]), zeros(&[2, 3, 4])], vec![vec![0, 3], vec![0, 2], vec![0, 1]]),
        // A repeated index counts twice in the memory limit, as numpy sizes its terms (numpy 2.4).
        ("cdca,d,dbc,d", vec![zeros(&[2, 5, 2, 3]), zeros(&[5]), zeros(&[5, 4, 2]), zeros(&[5])], vec![vec![0, 2], vec![0, 1], vec![0, 1]]),
        // Nothing summed: one step takes all.
        ("i,j,k->ijk", vec![zeros(&[2]), zeros(&[3]), zeros(&[4])], vec![vec![0, 1, 2]]),
    ];
    for (subscripts, operands, want) in cases {
        let (path, report) = ops::einsum_path(subscripts, &operands).unwrap();
        assert_eq!(path, want, "{subscripts}");
        assert!(report.contains("Naive FLOP count") && report.contains("step 1"), "{report}");
    }
    // The report's costs in numpy's model (numpy 2.4: 8.400e+03 and 1.681e+03, scalings 4 and 3).
    let (_, report) = ops::einsum_path("ij,jk,kl", &[zeros(&[5, 8]), zeros(&[8, 10]), zeros(&[10, 7])]).unwrap();
    for line in ["Naive scaling:  4", "Optimized scaling:  3", "Naive FLOP count:  8400", "Optimized FLOP count:  1681"] {
        assert!(report.contains(line), "{line} in {report}");
    }
    // Sizes whose products overflow 64 bits saturate in the cost model instead of panicking.
    let wide = zeros(&[1 << 22, 0]);
    let sum = ops::einsum("az,bz,cz->", &[wide.clone(), wide.clone(), wide]).unwrap();
    assert_eq!(sum.to_f64_vec().unwrap(), vec![0.0]);
}

#[test]
fn full_zeros_like_and_arange_edges() {
    // full from an array value broadcasts it; a value that cannot fill the shape is an error.
    let row = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let f = ops::full(&[2, 3], &row, Some(Dtype::F16)).unwrap();
    assert_eq!((f.dtype(), f.to_f64_vec().unwrap()), (Dtype::F16, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
    for bad_shape in [&[2usize, 4][..], &[3, 1]] {
        let e = ops::full(bad_shape, &row, None).unwrap_err();
        assert_eq!((e.op.as_str(), e.kind), ("full", ErrorKind::Shape), "{e}");
        assert!(e.to_string().contains("(3,)"), "{e}");
    }
    for dtype in Dtype::REAL {
        let x = ops::full(&[2, 2], 3.0, Some(dtype)).unwrap();
        let z = ops::zeros_like(&x).unwrap();
        assert_eq!((z.shape(), z.dtype(), z.to_f64_vec().unwrap()), (&[2, 2][..], dtype, vec![0.0; 4]));
        let l = ops::full_like(&x, 1.0).unwrap();
        assert_eq!((l.dtype(), l.to_f64_vec().unwrap()), (dtype, vec![1.0; 4]));
        for shape in [&[0usize][..], &[3, 0], &[]] {
            let n: usize = shape.iter().product();
            assert_eq!(ops::ones(shape, dtype).unwrap().to_f64_vec().unwrap(), vec![1.0; n], "ones {shape:?} {dtype}");
        }
    }
    assert_eq!(ops::eye(0, None, 0, Dtype::F32).unwrap().shape(), &[0, 0]);
    // Lengths as numpy computes them: ceil((stop - start) / step), never negative.
    for (start, stop, step, len) in [(0.0, 1.0, 0.1, 10), (0.0, 0.0, 1.0, 0), (5.0, 0.0, 1.0, 0), (0.0, -1.0, -0.25, 4), (0.5, 3.0, 1.0, 3)] {
        let a = ops::arange(start, stop, step, Dtype::F64).unwrap().to_f64_vec().unwrap();
        let want: Vec<f64> = (0..len).map(|i| start + i as f64 * step).collect();
        assert_close(&a, &want, 1e-12, 1e-12, &format!("arange({start}, {stop}, {step})"));
    }
    assert_eq!(ops::arange(0.0, 5.0, 2.0, Dtype::U8).unwrap().to_f64_vec().unwrap(), vec![0.0, 2.0, 4.0]);
    // Past a narrow integer dtype's bounds the range wraps, as int64 values narrowed would.
    let n = i32::MAX as f64;
    let wrapped = ops::arange(n - 1.0, n + 3.0, 1.0, Dtype::I32).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(wrapped, vec![i32::MAX - 1, i32::MAX, i32::MIN, i32::MIN + 1]);
    assert_eq!(ops::arange(254.0, 258.0, 1.0, Dtype::U8).unwrap().to_vec::<u8>().unwrap(), vec![254, 255, 0, 1]);
    assert_eq!(ops::arange(0.0, 1.0, 0.0, Dtype::F32).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::arange(0.0, f64::INFINITY, 1.0, Dtype::F32).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::arange(0.0, 2.0, 1.0, Dtype::Bool).unwrap_err().kind, ErrorKind::Dtype);
}

#[test]
fn meshgrid_of_one_and_three_inputs_and_errors() {
    let a = Array::from_slice(&[1i32, 2], &[2]).unwrap();
    let b = Array::from_slice(&[3i32, 4, 5], &[3]).unwrap();
    let c = Array::from_slice(&[6i32, 7, 8, 9], &[4]).unwrap();
    let one = ops::meshgrid(std::slice::from_ref(&a), false).unwrap();
    assert_eq!((one.len(), one[0].to_vec::<i32>().unwrap()), (1, vec![1, 2]));
    let g = ops::meshgrid(&[a.clone(), b.clone(), c.clone()], false).unwrap();
    for (axis, (grid, src)) in g.iter().zip([&a, &b, &c]).enumerate() {
        assert_eq!(grid.shape(), &[2, 3, 4]);
        let (v, s) = (grid.to_vec::<i32>().unwrap(), src.to_vec::<i32>().unwrap());
        for (p, got) in v.iter().enumerate() {
            let idx = [p / 12, (p / 4) % 3, p % 4];
            assert_eq!(*got, s[idx[axis]], "ij grid {axis} at {idx:?}");
        }
    }
    let xy = ops::meshgrid(&[a.clone(), b, c], true).unwrap();
    assert_eq!(xy[0].shape(), &[3, 2, 4]);
    let e = ops::meshgrid(&[ops::zeros(&[2, 2], Dtype::F32).unwrap()], false).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("meshgrid", ErrorKind::Shape), "{e}");
    assert!(e.to_string().contains("(2, 2)"), "{e}");
}

/// Arrays made by zeros, ones and full are ordinary arrays even when 0-d and filled from a
/// number: they promote with other arrays by their dtype, as mlx's do (a number alone stays weak).
#[test]
fn filled_scalars_promote_as_arrays_not_as_numbers() {
    let sum = ops::add(ops::zeros(&[], Dtype::I16).unwrap(), ops::zeros(&[], Dtype::I32).unwrap()).unwrap();
    assert_eq!(sum.dtype(), Dtype::I32);
    let scaled = ops::multiply(ops::ones(&[2], Dtype::F16).unwrap(), ops::full(&[], 2.0, None).unwrap()).unwrap();
    assert_eq!(scaled.dtype(), Dtype::F32);
    assert_eq!(scaled.to_f64_vec().unwrap(), vec![2.0, 2.0]);
    let number = ops::multiply(ops::ones(&[2], Dtype::F16).unwrap(), 2.0).unwrap();
    assert_eq!(number.dtype(), Dtype::F16, "a number stays weak");
    let bad = ops::full_like(ops::zeros(&[2, 3], Dtype::F32).unwrap(), ops::ones(&[4], Dtype::F32).unwrap()).unwrap_err();
    assert_eq!((bad.op.as_str(), bad.kind), ("full_like", ErrorKind::Shape), "{bad:?}");
    assert!(bad.message.contains("(4,) cannot fill shape (2, 3)"), "{}", bad.message);
}
