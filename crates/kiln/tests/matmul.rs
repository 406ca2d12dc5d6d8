//! matmul against a float64 triple loop: dtypes, transposed/sliced operands, batch broadcasting,
//! 1-d operands, empty inner dimension and errors.
mod common;
use common::*;
use kiln::ops;
use kiln::{Dtype, ErrorKind};

/// Reference product of row-major (batch, m, k) and (batch, k, n) with batch broadcasting done by
/// the caller (equal batch counts).
fn reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[p * m * n + i * n + j] =
                    (0..k).map(|q| a[p * m * k + i * k + q] * b[p * k * n + q * n + j]).sum();
            }
        }
    }
    out
}

#[test]
fn matches_reference_for_float_dtypes_and_layouts() {
    let mut rng = Rng::new(3);
    let (m, k, n) = (17, 33, 9);
    for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let av = rng.vec(m * k, -1.0, 1.0);
        let bv = rng.vec(k * n, -1.0, 1.0);
        let want = reference(&rounded(&av, &[m, k], dtype), &rounded(&bv, &[k, n], dtype), 1, m, k, n);
        for layout in LAYOUTS {
            let a = with_layout(&av, &[m, k], dtype, layout);
            let b = with_layout(&bv, &[k, n], dtype, layout);
            let c = ops::matmul(&a, &b).unwrap();
            assert_eq!((c.shape(), c.dtype()), (&[m, n][..], dtype));
            let tol = rtol_for(dtype) * (k as f64).sqrt() * 4.0;
            assert_close(&c.to_f64_vec().unwrap(), &want, tol, tol, &format!("{dtype} {layout:?}"));
        }
    }
}

#[test]
fn half_type_products_round_once() {
    // Sums of 48 products in float32, rounded to the half type once: within half a unit in the
    // last place of the float64 product of the same (rounded) inputs, plus float32's own error
    // where the sum cancels to near zero. Sums kept in float16 along the way miss this.
    let mut rng = Rng::new(6);
    let (m, k, n) = (4, 48, 33);
    for (dtype, half_ulp) in [(Dtype::F16, 2f64.powi(-11)), (Dtype::BF16, 2f64.powi(-8))] {
        let av = rounded(&rng.vec(m * k, -1.0, 1.0), &[m, k], dtype);
        let bv = rounded(&rng.vec(k * n, -1.0, 1.0), &[k, n], dtype);
        let want = reference(&av, &bv, 1, m, k, n);
        for rows in [1, m] {
            let a = if rows == 1 { array(&av[..k], &[k], dtype) } else { array(&av, &[m, k], dtype) };
            let c = ops::matmul(&a, array(&bv, &[k, n], dtype)).unwrap();
            assert_close(&c.to_f64_vec().unwrap(), &want[..rows * n], half_ulp * 1.01, 1e-5, &format!("{dtype} with {rows} rows"));
        }
    }
}

/// Integer reference: row-major (m, k) @ (k, n) summed exactly, then wrapped into `dtype` (ORs of
/// ANDs for bool).
fn integer_reference(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, dtype: Dtype) -> Vec<f64> {
    (0..m * n)
        .map(|o| {
            let (i, j) = (o / n, o % n);
            let terms = (0..k).map(|q| a[i * k + q] as i128 * b[q * n + j] as i128);
            if dtype == Dtype::Bool { f64::from(u8::from(terms.clone().any(|t| t != 0))) } else { wrap_to(terms.sum(), dtype) }
        })
        .collect()
}

#[test]
fn integer_and_boolean_products_wrap_in_their_dtype_as_numpy() {
    let mut rng = Rng::new(8);
    let (m, k, n) = (7, 33, 9);
    for dtype in [Dtype::Bool, Dtype::I8, Dtype::U8, Dtype::I16, Dtype::U16, Dtype::I32, Dtype::U32, Dtype::I64, Dtype::U64] {
        // Narrow dtypes overflow (wrapping is checked); 64-bit sums stay exact in a float64.
        let (lo, hi) = match dtype {
            Dtype::Bool => (0.0, 2.0),
            Dtype::I64 => (-1e6, 1e6),
            d if d.is_unsigned() => (0.0, 2f64.powi(8 * d.size().min(4) as i32).min(1e6)),
            d => (-(2f64.powi(8 * d.size() as i32 - 1)), 2f64.powi(8 * d.size() as i32 - 1)),
        };
        let av: Vec<f64> = random_values(&mut rng, m * k, dtype, lo, hi);
        let bv: Vec<f64> = random_values(&mut rng, k * n, dtype, lo, hi);
        let want = integer_reference(&av, &bv, m, k, n, dtype);
        for layout in LAYOUTS {
            let c = ops::matmul(with_layout(&av, &[m, k], dtype, layout), with_layout(&bv, &[k, n], dtype, layout)).unwrap();
            assert_eq!((c.shape(), c.dtype()), (&[m, n][..], dtype));
            assert_eq!(c.to_f64_vec().unwrap(), want, "{dtype} {layout:?}");
        }
    }
    // int64 products that overflow wrap modulo 2^64.
    let big = [3_000_000_000i64, -7, 5_000_000_000, 11];
    let a = kiln::Array::from_slice(&big, &[2, 2]).unwrap();
    let got = ops::matmul(&a, &a).unwrap().to_vec::<i64>().unwrap();
    let want: Vec<i64> = (0..4).map(|o| (0..2).fold(0i64, |acc, q| acc.wrapping_add(big[o / 2 * 2 + q].wrapping_mul(big[q * 2 + o % 2])))).collect();
    assert_eq!(got, want);
    // Batches broadcast as for floats: (2, 1, m, k) @ (3, k, n).
    let (av, bv) = (random_values(&mut rng, 2 * m * k, Dtype::I32, -50.0, 50.0), random_values(&mut rng, 3 * k * n, Dtype::I32, -50.0, 50.0));
    let c = ops::matmul(array(&av, &[2, 1, m, k], Dtype::I32), array(&bv, &[3, k, n], Dtype::I32)).unwrap();
    assert_eq!(c.shape(), &[2, 3, m, n]);
    let got = c.to_f64_vec().unwrap();
    for p in 0..2 {
        for q in 0..3 {
            let want = integer_reference(&av[p * m * k..][..m * k], &bv[q * k * n..][..k * n], m, k, n, Dtype::I32);
            assert_eq!(got[(p * 3 + q) * m * n..][..m * n], want[..], "batch ({p}, {q})");
        }
    }
}

#[test]
fn large_product_uses_threads_and_stays_exact_enough() {
    let mut rng = Rng::new(4);
    let (m, k, n) = (300, 200, 257);
    let av = rng.vec(m * k, -1.0, 1.0);
    let bv = rng.vec(k * n, -1.0, 1.0);
    let c = ops::matmul(array(&av, &[m, k], Dtype::F64), array(&bv, &[k, n], Dtype::F64)).unwrap();
    assert_close(&c.to_f64_vec().unwrap(), &reference(&av, &bv, 1, m, k, n), 1e-12, 1e-12, "f64 300x200x257");
}

/// Mid-sized products are split into blocks of rows and columns, one per thread: strips of the
/// longer side on two threads, a grid of blocks (2x4 and 4x2 here) on sixteen. Each block must
/// address its part of every layout.
#[test]
fn products_split_into_blocks_match_the_reference_in_every_layout() {
    let mut rng = Rng::new(5);
    for threads in [2, 16] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
        for (m, k, n) in [(70, 64, 130), (130, 64, 70)] {
            let av = rng.vec(m * k, -1.0, 1.0);
            let bv = rng.vec(k * n, -1.0, 1.0);
            let want = reference(&av, &bv, 1, m, k, n);
            for dtype in [Dtype::F32, Dtype::F64] {
                for layout in LAYOUTS {
                    let (a, b) = (with_layout(&av, &[m, k], dtype, layout), with_layout(&bv, &[k, n], dtype, layout));
                    let c = pool.install(|| ops::matmul(a, b).unwrap().to_f64_vec().unwrap());
                    let tol = rtol_for(dtype) * (k as f64).sqrt() * 4.0;
                    assert_close(&c, &want, tol, tol, &format!("{threads} threads, {m}x{k}x{n} {dtype} {layout:?}"));
                }
            }
        }
    }
}

#[test]
fn batches_broadcast_and_vectors_promote() {
    let mut rng = Rng::new(5);
    let (m, k, n) = (3, 4, 5);
    let av = rng.vec(2 * m * k, -1.0, 1.0);
    let bv = rng.vec(k * n, -1.0, 1.0);
    let a = array(&av, &[2, 1, m, k], Dtype::F64);
    // One (k, n) matrix seen three times through a zero-stride batch axis.
    let b = ops::broadcast_to(array(&bv, &[1, k, n], Dtype::F64), &[3, k, n]).unwrap();
    let c = ops::matmul(&a, &b).unwrap();
    assert_eq!(c.shape(), &[2, 3, m, n]);
    let got = c.to_f64_vec().unwrap();
    let b0 = bv[..k * n].to_vec();
    for p in 0..2 {
        let want = reference(&av[p * m * k..(p + 1) * m * k], &b0, 1, m, k, n);
        for q in 0..3 {
            let off = (p * 3 + q) * m * n;
            assert_close(&got[off..off + m * n], &want, 1e-12, 1e-12, "batch");
        }
    }
    // 1-d operands: vector @ matrix and matrix @ vector.
    let v = array(&bv[..k], &[k], Dtype::F32);
    let mat = array(&av[..m * k], &[m, k], Dtype::F32);
    assert_eq!(ops::matmul(&mat, &v).unwrap().shape(), &[m]);
    assert_eq!(ops::matmul(&v, ops::transpose(&mat, None).unwrap()).unwrap().shape(), &[m]);
    assert_eq!(ops::matmul(&v, &v).unwrap().shape(), &[] as &[usize]);
}

#[test]
fn empty_inner_dimension_gives_zeros() {
    let a = ops::zeros(&[2, 0], Dtype::F32).unwrap();
    let b = ops::zeros(&[0, 3], Dtype::F32).unwrap();
    assert_eq!(ops::matmul(&a, &b).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 6]);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let a = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    let e = ops::matmul(&a, &a).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Shape);
    assert!(e.to_string().contains("(2, 3) and (2, 3)"), "{e}");
    assert_eq!(ops::matmul(kiln::Array::scalar(1.0f32), &a).unwrap_err().kind, ErrorKind::Shape);
    let e = ops::addmm(ops::ones(&[3], Dtype::F32).unwrap(), &a, ops::transpose(&a, None).unwrap(), 1.0, 1.0).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("addmm", ErrorKind::Shape), "{e}");
}

#[test]
fn addmm_scales_both_terms_and_broadcasts_c() {
    let mut rng = Rng::new(12);
    let (m, k, n) = (3, 4, 5);
    let (a, b, c) = (rng.vec(m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0), rng.vec(n, -1.0, 1.0));
    let (alpha, beta) = (2.5, -0.75);
    for dtype in [Dtype::F32, Dtype::F64] {
        let out = ops::addmm(array(&c, &[n], dtype), array(&a, &[m, k], dtype), array(&b, &[k, n], dtype), alpha, beta).unwrap();
        let ab = reference(&rounded(&a, &[m, k], dtype), &rounded(&b, &[k, n], dtype), 1, m, k, n);
        let rc = rounded(&c, &[n], dtype);
        let want: Vec<f64> = (0..m * n).map(|i| beta * rc[i % n] + alpha * ab[i]).collect();
        assert_eq!(out.shape(), &[m, n]);
        assert_close(&out.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, &format!("addmm {dtype}"));
    }
}

#[test]
fn batch_broadcasting_and_vector_operands_in_every_float_dtype() {
    let mut rng = Rng::new(6);
    let (m, k, n) = (3, 5, 4);
    for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let tol = rtol_for(dtype) * 8.0;
        // (2, 1, m, k) @ (3, k, n) -> (2, 3, m, n): both batch axes broadcast.
        let (av, bv) = (rng.vec(2 * m * k, -1.0, 1.0), rng.vec(3 * k * n, -1.0, 1.0));
        let (ra, rb) = (rounded(&av, &[2 * m * k], dtype), rounded(&bv, &[3 * k * n], dtype));
        let c = ops::matmul(array(&av, &[2, 1, m, k], dtype), array(&bv, &[3, k, n], dtype)).unwrap();
        assert_eq!((c.shape(), c.dtype()), (&[2, 3, m, n][..], dtype));
        let got = c.to_f64_vec().unwrap();
        for p in 0..2 {
            for q in 0..3 {
                let want = reference(&ra[p * m * k..][..m * k], &rb[q * k * n..][..k * n], 1, m, k, n);
                let off = (p * 3 + q) * m * n;
                assert_close(&got[off..off + m * n], &want, tol, tol, &format!("batch {dtype} ({p}, {q})"));
            }
        }
        // Vector operands: (k,) @ (k, n) -> (n,), (m, k) @ (k,) -> (m,), (k,) @ (k,) -> ().
        let v = &ra[..k];
        let vm = ops::matmul(array(v, &[k], dtype), array(&rb[..k * n], &[k, n], dtype)).unwrap();
        assert_close(&vm.to_f64_vec().unwrap(), &reference(v, &rb[..k * n], 1, 1, k, n), tol, tol, &format!("v@M {dtype}"));
        let mv = ops::matmul(array(&ra[..m * k], &[m, k], dtype), array(v, &[k], dtype)).unwrap();
        assert_close(&mv.to_f64_vec().unwrap(), &reference(&ra[..m * k], v, 1, m, k, 1), tol, tol, &format!("M@v {dtype}"));
        let dot = ops::matmul(array(v, &[k], dtype), array(v, &[k], dtype)).unwrap();
        assert_close(&dot.to_f64_vec().unwrap(), &[v.iter().map(|x| x * x).sum()], tol, tol, &format!("v@v {dtype}"));
    }
}

#[test]
fn mixed_dtypes_promote_and_empty_outputs_keep_their_shape() {
    let a = ops::ones(&[2, 3], Dtype::F16).unwrap();
    let b = ops::ones(&[3, 2], Dtype::F32).unwrap();
    let c = ops::matmul(&a, &b).unwrap();
    assert_eq!((c.dtype(), c.to_vec::<f32>().unwrap()), (Dtype::F32, vec![3.0; 4]));
    let bf = ops::matmul(ops::ones(&[2, 3], Dtype::BF16).unwrap(), ops::ones(&[3, 2], Dtype::F16).unwrap()).unwrap();
    assert_eq!(bf.dtype(), Dtype::F32);
    for (sa, sb, so) in [([0, 3], [3, 2], [0, 2]), ([2, 3], [3, 0], [2, 0])] {
        let out = ops::matmul(ops::ones(&sa, Dtype::F32).unwrap(), ops::ones(&sb, Dtype::F32).unwrap()).unwrap();
        assert_eq!((out.shape(), out.size()), (&so[..], 0));
    }
}

/// gather_mm picks matrices from each operand's flattened batch by index arrays (broadcast
/// together; an omitted one picks in order) and multiplies them: against a float64 loop over
/// the picked pairs, with clear errors for bad dtypes and shapes.
#[test]
fn gather_mm_multiplies_the_picked_matrices() {
    let mut rng = Rng::new(31);
    let (m, k, n) = (3, 4, 2);
    // a: batch (2, 3) of (m, k); b: batch (4,) of (k, n).
    let (av, bv) = (rng.vec(6 * m * k, -1.0, 1.0), rng.vec(4 * k * n, -1.0, 1.0));
    let a = array(&av, &[2, 3, m, k], Dtype::F64);
    let b = array(&bv, &[4, k, n], Dtype::F64);
    let pairs = |lhs: &[usize], rhs: &[usize]| -> Vec<f64> {
        lhs.iter()
            .zip(rhs)
            .flat_map(|(&i, &j)| {
                reference(&av[i * m * k..(i + 1) * m * k], &bv[j * k * n..(j + 1) * k * n], 1, m, k, n)
            })
            .collect()
    };
    let lhs = kiln::Array::from_slice(&[5i32, 0, 2], &[3, 1]).unwrap();
    let rhs = kiln::Array::from_slice(&[3u32, 1], &[2]).unwrap();
    let out = ops::gather_mm(&a, &b, Some(&lhs), Some(&rhs), false).unwrap();
    assert_eq!(out.shape(), &[3, 2, m, n]);
    let (li, ri) = ([5, 5, 0, 0, 2, 2], [3, 1, 3, 1, 3, 1]);
    assert_close(&out.to_f64_vec().unwrap(), &pairs(&li, &ri), 1e-12, 1e-12, "broadcast indices");
    // An omitted index array picks its operand's matrices in order (a's batch of 6 here).
    let rhs6 = kiln::Array::from_slice(&[0u32, 1, 2, 3, 0, 1], &[2, 3]).unwrap();
    let out = ops::gather_mm(&a, &b, None, Some(&rhs6), true).unwrap();
    assert_eq!(out.shape(), &[2, 3, m, n]);
    assert_close(
        &out.to_f64_vec().unwrap(),
        &pairs(&[0, 1, 2, 3, 4, 5], &[0, 1, 2, 3, 0, 1]),
        1e-12,
        1e-12,
        "lhs in order",
    );
    // A 1-d right operand is a column, removed again.
    let v = array(&bv[..k], &[k], Dtype::F64);
    let out = ops::gather_mm(&a, &v, Some(&rhs), None, false).unwrap();
    assert_eq!(out.shape(), &[2, m]);
    let col: Vec<f64> =
        [3usize, 1].iter().flat_map(|&i| reference(&av[i * m * k..(i + 1) * m * k], &bv[..k], 1, m, k, 1)).collect();
    assert_close(&out.to_f64_vec().unwrap(), &col, 1e-12, 1e-12, "vector operand");
    let ints = array(&[1.0; 4], &[1, 2, 2], Dtype::I32);
    check_err(ops::gather_mm(&ints, &ints, Some(&rhs), None, false), ErrorKind::Dtype, "gather_mm");
    check_err(ops::gather_mm(&a, &a, Some(&rhs), None, false), ErrorKind::Shape, "gather_mm");
    check_err(
        ops::gather_mm(&a, &b, Some(&array(&[0.0], &[1], Dtype::F32)), None, false),
        ErrorKind::Dtype,
        "gather_mm",
    );
}

/// block_masked_mm against a float64 loop that masks each element by its block's entry: boolean
/// and float masks on operands and result, partial edge blocks, broadcast batches, 1-d operands.
#[test]
fn block_masked_mm_masks_whole_blocks() {
    let mut rng = Rng::new(41);
    let bs = 2;
    let blocks = |d: usize| d.div_ceil(bs);
    // a: (2, 1, m, k) against b: (1, 3, k, n); masks per block, some broadcast over the batch.
    let (m, k, n) = (5, 3, 4);
    let (av, bv) = (rng.vec(2 * m * k, -1.0, 1.0), rng.vec(3 * k * n, -1.0, 1.0));
    let lhs: Vec<f64> = (0..2 * blocks(m) * blocks(k)).map(|_| rng.uniform(0.0, 2.0).floor()).collect();
    let rhs: Vec<f64> = (0..blocks(k) * blocks(n)).map(|_| rng.uniform(0.0, 2.0)).collect();
    let out: Vec<f64> = (0..3 * blocks(m) * blocks(n)).map(|_| rng.uniform(0.0, 2.0)).collect();
    let a = array(&av, &[2, 1, m, k], Dtype::F64);
    let b = array(&bv, &[1, 3, k, n], Dtype::F64);
    let want = |lhs_on: bool, out_float: bool| -> Vec<f64> {
        let mut res = Vec::new();
        for p in 0..2 {
            for q in 0..3 {
                for i in 0..m {
                    for j in 0..n {
                        let mut s = 0.0;
                        for t in 0..k {
                            let ml = if lhs_on { lhs[p * blocks(m) * blocks(k) + (i / bs) * blocks(k) + t / bs] } else { 1.0 };
                            let mr = rhs[(t / bs) * blocks(n) + j / bs];
                            s += av[p * m * k + i * k + t] * ml * bv[q * k * n + t * n + j] * mr;
                        }
                        let mo = out[q * blocks(m) * blocks(n) + (i / bs) * blocks(n) + j / bs];
                        res.push(if out_float { s * mo } else if mo >= 1.0 { s } else { 0.0 });
                    }
                }
            }
        }
        res
    };
    let lhs_mask = array(&lhs, &[2, 1, blocks(m), blocks(k)], Dtype::F64);
    let rhs_mask = array(&rhs, &[blocks(k), blocks(n)], Dtype::F32);
    let out_float = array(&out, &[3, blocks(m), blocks(n)], Dtype::F32);
    let out_bool = ops::greater_equal(&out_float, 1.0).unwrap();
    let got = ops::block_masked_mm(&a, &b, bs, Some(&out_float), Some(&lhs_mask), Some(&rhs_mask)).unwrap();
    assert_eq!(got.shape(), &[2, 3, m, n]);
    assert_close(&got.to_f64_vec().unwrap(), &want(true, true), 1e-6, 1e-6, "float masks");
    let got = ops::block_masked_mm(&a, &b, bs, Some(&out_bool), None, Some(&rhs_mask)).unwrap();
    assert_close(&got.to_f64_vec().unwrap(), &want(false, false), 1e-6, 1e-6, "boolean out mask");
    // A 1-d left operand: its mask has one row of blocks fewer axes.
    let v = array(&av[..k], &[k], Dtype::F64);
    let vmask = array(&[1.0, 0.0], &[blocks(k)], Dtype::F64);
    let got = ops::block_masked_mm(&v, array(&bv[..k * n], &[k, n], Dtype::F64), bs, None, Some(&vmask), None).unwrap();
    let row: Vec<f64> = (0..n).map(|j| (0..k).map(|t| av[t] * [1.0, 0.0][t / bs] * bv[t * n + j]).sum()).collect();
    assert_eq!(got.shape(), &[n]);
    assert_close(&got.to_f64_vec().unwrap(), &row, 1e-12, 1e-12, "1-d operand");
    let wrong = array(&[1.0; 4], &[2, 2], Dtype::F32);
    check_err(ops::block_masked_mm(&a, &b, bs, Some(&wrong), None, None), ErrorKind::Shape, "block_masked_mm");
    check_err(ops::block_masked_mm(&a, &b, 0, Some(&out_bool), None, None), ErrorKind::Value, "block_masked_mm");
}

/// segmented_mm: one product per [start, end) slice of the inner axis, against a float64 loop;
/// empty and reversed segments give zeros.
#[test]
fn segmented_mm_multiplies_each_segment() {
    let mut rng = Rng::new(43);
    let (m, k, n) = (3, 7, 2);
    let (av, bv) = (rng.vec(m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
    let segs = [0i32, 3, 3, 7, 2, 2, 5, 1];
    let got = ops::segmented_mm(
        array(&av, &[m, k], Dtype::F32),
        array(&bv, &[k, n], Dtype::F32),
        kiln::Array::from_slice(&segs, &[2, 2, 2]).unwrap(),
    )
    .unwrap();
    assert_eq!(got.shape(), &[2, 2, m, n]);
    let (ar, br) = (rounded(&av, &[m * k], Dtype::F32), rounded(&bv, &[k * n], Dtype::F32));
    let want: Vec<f64> = segs
        .chunks(2)
        .flat_map(|s| {
            let (lo, hi) = (s[0] as usize, s[1] as usize);
            let (ar, br) = (&ar, &br);
            (0..m).flat_map(move |i| (0..n).map(move |j| (lo..hi.max(lo)).map(|t| ar[i * k + t] * br[t * n + j]).sum::<f64>()))
        })
        .collect();
    assert_close(&got.to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "segments");
    let segs2 = kiln::Array::from_slice(&[0i32, 1], &[2]).unwrap();
    check_err(ops::segmented_mm(array(&av, &[1, m, k], Dtype::F32), array(&bv, &[k, n], Dtype::F32), &segs2), ErrorKind::Shape, "segmented_mm");
    check_err(ops::segmented_mm(array(&av, &[m, k], Dtype::F32), array(&bv, &[k, n], Dtype::F32), array(&[0.0, 1.0], &[2], Dtype::F32)), ErrorKind::Dtype, "segmented_mm");
}

/// addmm's c must broadcast to the product's shape, as mlx: a larger c is an error naming both.
#[test]
fn addmm_refuses_a_c_larger_than_the_product() {
    let c = array(&[0.0; 8], &[2, 2, 2], Dtype::F32);
    let a = array(&[1.0; 4], &[2, 2], Dtype::F32);
    let e = ops::addmm(&c, &a, &a, 1.0, 1.0).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("addmm", ErrorKind::Shape), "{e}");
    assert!(e.message.contains("(2, 2, 2)") && e.message.contains("(2, 2)"), "{e}");
}

/// hadamard_transform against the product with the Sylvester matrix (built here by its
/// recursion) for powers of two; for orders 12, 20 and 28 times a power of two, the transform's
/// matrix is checked to be orthogonal with ±1/√n entries and laid out as kron(H_m, H_2^k).
#[test]
fn hadamard_transform_matches_the_kronecker_matrix() {
    let mut rng = Rng::new(47);
    fn sylvester(n: usize) -> Vec<f64> {
        if n == 1 {
            return vec![1.0];
        }
        let h = sylvester(n / 2);
        let half = n / 2;
        (0..n * n).map(|p| { let (i, j) = (p / n, p % n); h[(i % half) * half + j % half] * if i >= half && j >= half { -1.0 } else { 1.0 } }).collect()
    }
    for n in [2usize, 8, 64] {
        let x = rng.vec(3 * n, -1.0, 1.0);
        let got = ops::hadamard_transform(array(&x, &[3, n], Dtype::F64), Some(0.5)).unwrap();
        let h = sylvester(n);
        let want: Vec<f64> = (0..3).flat_map(|r| { let (h, x) = (&h, &x); (0..n).map(move |i| 0.5 * (0..n).map(|j| h[i * n + j] * x[r * n + j]).sum::<f64>()) }).collect();
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, &format!("n = {n}"));
    }
    // Orders 12·4, 20·2, 28: the transform's matrix (its columns are the transforms of the unit
    // vectors) is orthogonal after the default 1/√n scale: H·Hᵀ = I.
    for (n, m) in [(48usize, 12usize), (40, 20), (28, 28)] {
        let eye: Vec<f64> = (0..n * n).map(|p| if p / n == p % n { 1.0 } else { 0.0 }).collect();
        let cols = ops::hadamard_transform(array(&eye, &[n, n], Dtype::F64), None).unwrap().to_f64_vec().unwrap();
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..n).map(|t| cols[i * n + t] * cols[j * n + t]).sum();
                assert!((dot - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12, "n = {n}: rows {i}, {j} give {dot}");
            }
            assert!(cols[i * n..(i + 1) * n].iter().all(|v| (v.abs() - 1.0 / (n as f64).sqrt()).abs() < 1e-12), "±1/√n entries");
        }
        // kron(H_m, H_2^k): its first row is constant over each run of 2^k entries (the first
        // row of H_m, each entry repeated), not periodic in m as kron(H_2^k, H_m) would be.
        let n2 = n / m;
        let first: Vec<f64> = (0..n).map(|i| cols[i * n]).collect();
        assert!(first.chunks(n2).all(|run| run.iter().all(|&v| v == run[0])), "n = {n}: {first:?}");
    }
    // Integers give float32; size 1 with scale 1 is the input itself.
    let ints = kiln::Array::from_slice(&[1i32, 2, 3, 4], &[4]).unwrap();
    assert_eq!(ops::hadamard_transform(&ints, None).unwrap().dtype(), Dtype::F32);
    let one = kiln::Array::from_slice(&[5i32], &[1]).unwrap();
    assert!(ops::hadamard_transform(&one, None).unwrap().same_node(&one));
    check_err(ops::hadamard_transform(array(&[0.0; 36], &[36], Dtype::F32), None), ErrorKind::Value, "hadamard_transform");
    check_err(ops::hadamard_transform(array(&[], &[0], Dtype::F32), None), ErrorKind::Value, "hadamard_transform");
}
