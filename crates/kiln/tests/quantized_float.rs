//! mlx's float quantization formats (mxfp4, mxfp8, nvfp4) against a float64 reference written
//! here from the formats' definitions: e2m1 and e4m3 values found by searching their tables
//! (nearest, ties to the even code), e8m0 scales as the smallest power of two that keeps a
//! group in range, codes read back from the words bit by bit; products against float64 loops;
//! qqmm's vjp against its defining formula.

mod common;

use common::{array, assert_close, check_err, Rng};
use kiln::ops::{FloatFormat, Scheme};
use kiln::transforms::vjp;
use kiln::{ops, Array, Dtype, ErrorKind};

const FORMATS: [FloatFormat; 3] = [FloatFormat::Mxfp4, FloatFormat::Mxfp8, FloatFormat::Nvfp4];

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// e2m1's non-negative values by code.
fn e2m1_table() -> Vec<f64> {
    vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
}

/// e4m3's non-negative finite values by code (0 to 0x7E), from the definition.
fn e4m3_table() -> Vec<f64> {
    (0u32..0x7F)
        .map(|c| {
            let (e, m) = ((c >> 3) as i32, (c & 7) as f64);
            if e == 0 {
                m / 8.0 * 2f64.powi(-6)
            } else {
                (1.0 + m / 8.0) * 2f64.powi(e - 7)
            }
        })
        .collect()
}

/// The code of the table value nearest |x|: ties go to the even code, beyond the end saturates.
fn nearest(table: &[f64], x: f64) -> usize {
    let x = x.abs();
    let mut best = 0;
    for (c, &v) in table.iter().enumerate() {
        let (d, db) = ((x - v).abs(), (x - table[best]).abs());
        if d < db || (d == db && c % 2 == 0) {
            best = c;
        }
    }
    best
}

/// The reference quantization of one group: the scale's value and each element's code (sign
/// bit at `table.len()`), and the dequantized values.
struct Reference {
    scale: f64,
    codes: Vec<usize>,
    dequantized: Vec<f64>,
}

fn reference_group(group: &[f64], format: FloatFormat, global_scale: Option<f64>) -> Reference {
    let (table, largest) = if format == FloatFormat::Mxfp8 { (e4m3_table(), 448.0) } else { (e2m1_table(), 6.0) };
    let amax = group.iter().fold(0f64, |m, v| m.max(v.abs()));
    let ideal = amax / largest;
    let scale = if format == FloatFormat::Nvfp4 {
        let encoding = global_scale.map_or(1.0, |g| 448.0 * 6.0 / g);
        e4m3_table()[nearest(&e4m3_table(), ideal * encoding)] / encoding
    } else if ideal == 0.0 {
        1.0
    } else {
        2f64.powi(ideal.log2().ceil() as i32)
    };
    let codes: Vec<usize> = group
        .iter()
        .map(|&v| {
            let c = if scale == 0.0 { 0 } else { nearest(&table, v / scale) };
            c + if v < 0.0 { table.len() } else { 0 }
        })
        .collect();
    let dequantized = codes
        .iter()
        .map(|&c| {
            let (sign, c) = if c >= table.len() { (-1.0, c - table.len()) } else { (1.0, c) };
            sign * table[c] * scale
        })
        .collect();
    Reference { scale, codes, dequantized }
}

/// Code `i` of a row of little-endian packed words, `bits` wide, read bit by bit.
fn code_at(words: &[u32], i: usize, bits: usize) -> usize {
    (0..bits).map(|b| (((words[(i * bits + b) / 32] >> ((i * bits + b) % 32)) & 1) as usize) << b).sum()
}

#[test]
fn float_formats_quantize_to_the_nearest_codes_under_their_scales() {
    let mut rng = Rng::new(11);
    for format in FORMATS {
        let (rows, k) = (6, 96);
        // Groups of very different magnitudes, and one group of zeros.
        let mut w: Vec<f64> = (0..rows * k).map(|i| rng.uniform(-1.0, 1.0) * 10f64.powi((i / 16 % 5) as i32 - 2)).collect();
        w[..16].iter_mut().for_each(|v| *v = 0.0);
        let w = common::rounded(&w, &[rows, k], Dtype::F32);
        let (words, scales) = ops::quantize_float(array(&w, &[rows, k], Dtype::F32), format, None).unwrap();
        let group = format.group_size();
        assert_eq!(words.shape(), &[rows, k * format.bits() as usize / 32], "{format:?}");
        assert_eq!((scales.shape(), scales.dtype()), (&[rows, k / group][..], Dtype::U8), "{format:?}");
        let words_row = words.shape()[1];
        let (word_values, dequantized) = (values(&words), values(&ops::dequantize(&words, &scales, Scheme::Float { format, global_scale: None }, Some(Dtype::F32)).unwrap()));
        for (g, chunk) in w.chunks(group).enumerate() {
            let r = reference_group(chunk, format, None);
            let (row, start) = (g * group / k, g * group % k);
            let row_words: Vec<u32> = word_values[row * words_row..(row + 1) * words_row].iter().map(|&v| v as u32).collect();
            for (j, &want) in r.codes.iter().enumerate() {
                let got = code_at(&row_words, start + j, format.bits() as usize);
                // e4m3 codes carry the sign in bit 7; e2m1 codes in bit 3.
                let want = if format == FloatFormat::Mxfp8 && want >= 127 { want - 127 + 0x80 } else { want };
                assert_eq!(got, want, "{format:?}: code of element {j} of group {g} ({})", chunk[j]);
            }
            assert_eq!(&dequantized[g * group..(g + 1) * group], &r.dequantized[..], "{format:?}: group {g} (scale {})", r.scale);
        }
    }
}

#[test]
fn scale_codes_are_e8m0_exponents_or_e4m3_values() {
    // One group per row whose largest magnitude picks the scale.
    let amax = [6.0, 12.0, 0.75, 3.0 * 2f64.powi(-20), 448.0, 1000.0];
    let k = 32;
    let w: Vec<f64> = amax.iter().flat_map(|&a| std::iter::once(a).chain(std::iter::repeat_n(a / 7.0, k - 1))).collect();
    let (_, scales) = ops::quantize_float(array(&w, &[amax.len(), k], Dtype::F32), FloatFormat::Mxfp4, None).unwrap();
    let want: Vec<f64> = amax.iter().map(|a| (a / 6.0f64).log2().ceil() + 127.0).collect();
    assert_eq!(values(&scales), want, "mxfp4 e8m0 scale codes");
    let (_, scales) = ops::quantize_float(array(&w, &[amax.len(), k], Dtype::F32), FloatFormat::Nvfp4, None).unwrap();
    let table = e4m3_table();
    let want: Vec<f64> = amax.iter().flat_map(|a| [nearest(&table, a / 6.0) as f64, nearest(&table, a / 42.0) as f64]).collect();
    assert_eq!(values(&scales), want, "nvfp4 e4m3 scale codes");
}

#[test]
fn nvfp4_global_scale_widens_the_range_of_small_matrices() {
    let mut rng = Rng::new(5);
    let (rows, k) = (4, 32);
    let w = common::rounded(&rng.vec(rows * k, -1e-3, 1e-3), &[rows, k], Dtype::F32);
    let global = w.iter().fold(0f64, |m, v| m.max(v.abs()));
    let g = Array::from_slice(&[global as f32], &[]).unwrap();
    let wa = array(&w, &[rows, k], Dtype::F32);
    let (words, scales) = ops::quantize_float(&wa, FloatFormat::Nvfp4, Some(&g)).unwrap();
    let scheme = Scheme::Float { format: FloatFormat::Nvfp4, global_scale: Some(&g) };
    let got = values(&ops::dequantize(&words, &scales, scheme, Some(Dtype::F32)).unwrap());
    let want: Vec<f64> = w.chunks(16).flat_map(|c| reference_group(c, FloatFormat::Nvfp4, Some(global as f32 as f64)).dequantized).collect();
    assert_close(&got, &want, 1e-6, 1e-12, "nvfp4 with a global scale");
    // Without it the same matrix loses its smallest groups' precision to e4m3's subnormals.
    let (words, scales) = ops::quantize_float(&wa, FloatFormat::Nvfp4, None).unwrap();
    let plain = values(&ops::dequantize(&words, &scales, Scheme::Float { format: FloatFormat::Nvfp4, global_scale: None }, Some(Dtype::F32)).unwrap());
    let error = |d: &[f64]| d.iter().zip(&w).map(|(a, b)| (a - b).abs()).sum::<f64>();
    assert!(error(&got) < error(&plain), "global scale {} vs none {}", error(&got), error(&plain));
}

#[test]
fn nvfp4_products_with_a_global_scale_equal_the_float64_reference() {
    let mut rng = Rng::new(6);
    let (rows, k) = (8, 64);
    let w = common::rounded(&rng.vec(rows * k, -1e-3, 1e-3), &[rows, k], Dtype::F32);
    let global = w.iter().fold(0f64, |m, v| m.max(v.abs()));
    let g = Array::from_slice(&[global as f32], &[]).unwrap();
    let (words, scales) = ops::quantize_float(array(&w, &[rows, k], Dtype::F32), FloatFormat::Nvfp4, Some(&g)).unwrap();
    let scheme = Scheme::Float { format: FloatFormat::Nvfp4, global_scale: Some(&g) };
    let wd: Vec<f64> = w.chunks(16).flat_map(|c| reference_group(c, FloatFormat::Nvfp4, Some(global as f32 as f64)).dequantized).collect();
    // One row (the matrix-vector loop) and three (the blocked kernel), both orientations.
    for m in [1, 3] {
        let xt = rng.vec(m * k, -1.0, 1.0);
        let got = ops::quantized_matmul(array(&xt, &[m, k], Dtype::F32), &words, &scales, scheme, true).unwrap();
        let want: Vec<f64> = (0..m * rows).map(|p| (0..k).map(|j| xt[(p / rows) * k + j] * wd[(p % rows) * k + j]).sum()).collect();
        assert_close(&values(&got), &want, 1e-5, 1e-9, &format!("{m} rows @ w.T"));
        let xn = rng.vec(m * rows, -1.0, 1.0);
        let got = ops::quantized_matmul(array(&xn, &[m, rows], Dtype::F32), &words, &scales, scheme, false).unwrap();
        let want: Vec<f64> = (0..m * k).map(|p| (0..rows).map(|r| xn[(p / k) * rows + r] * wd[r * k + p % k]).sum()).collect();
        assert_close(&values(&got), &want, 1e-5, 1e-9, &format!("{m} rows @ w"));
    }
    // x's gradient of sum(x @ w.T) is every row's column sums of the matrix; the global scale
    // has none (it encodes the codes).
    let product = |x: &Array, g: &Array| {
        let scheme = Scheme::Float { format: FloatFormat::Nvfp4, global_scale: Some(g) };
        ops::sum(ops::quantized_matmul(x, &words, &scales, scheme, true)?, None, false)
    };
    let x = array(&rng.vec(2 * k, -1.0, 1.0), &[2, k], Dtype::F32);
    let (_, dx) = vjp(|a: &[Array]| Ok(vec![product(&a[0], &g)?]), std::slice::from_ref(&x), &[Array::scalar(1f32)]).unwrap();
    let want: Vec<f64> = (0..2 * k).map(|p| (0..rows).map(|r| wd[r * k + p % k]).sum()).collect();
    assert_close(&values(&dx[0]), &want, 1e-5, 1e-9, "x's gradient");
    let err = vjp(|a: &[Array]| Ok(vec![product(&x, &a[0])?]), std::slice::from_ref(&g), &[Array::scalar(1f32)]).unwrap_err();
    assert!(err.to_string().contains("no gradient"), "{err}");
}

#[test]
fn float_quantized_products_equal_products_with_the_dequantized_matrix() {
    let mut rng = Rng::new(8);
    for format in FORMATS {
        let (m, n, k) = (3, 5, 64);
        let scheme = Scheme::Float { format, global_scale: None };
        let x64 = rng.vec(m * k, -1.0, 1.0);
        let x = array(&x64, &[m, k], Dtype::F32);
        let w = array(&rng.vec(n * k, -1.0, 1.0), &[n, k], Dtype::F32);
        let (words, scales) = ops::quantize_float(&w, format, None).unwrap();
        let wd = values(&ops::dequantize(&words, &scales, scheme, Some(Dtype::F32)).unwrap());
        let got = ops::quantized_matmul(&x, &words, &scales, scheme, true).unwrap();
        assert_eq!((got.shape(), got.dtype()), (&[m, n][..], Dtype::F32));
        let want: Vec<f64> = (0..m * n).map(|p| (0..k).map(|j| x64[(p / n) * k + j] * wd[(p % n) * k + j]).sum()).collect();
        assert_close(&values(&got), &want, 1e-5, 1e-5, &format!("{format:?} x @ w.T"));
        // One row: the host kernel's matrix-vector loop, which decodes the codes from their bits.
        let one = ops::quantized_matmul(array(&x64[..k], &[1, k], Dtype::F32), &words, &scales, scheme, true).unwrap();
        assert_close(&values(&one), &want[..n], 1e-5, 1e-5, &format!("{format:?} one row @ w.T"));
        // Not transposed, and gathered from a stack: (2, k, 32) quantized along its last axis.
        let stack = array(&rng.vec(2 * k * 32, -1.0, 1.0), &[2, k, 32], Dtype::F32);
        let (words, scales) = ops::quantize_float(&stack, format, None).unwrap();
        let sd = values(&ops::dequantize(&words, &scales, scheme, Some(Dtype::F32)).unwrap());
        let rhs = Array::from_slice(&[1u32, 0, 1], &[3]).unwrap();
        let xs = ops::reshape(&x, &[3, 1, k as i64]).unwrap();
        let got = ops::gather_qmm(&xs, &words, &scales, scheme, None, Some(&rhs), false).unwrap();
        let want: Vec<f64> = (0..3 * 32).map(|p| (0..k).map(|j| x64[(p / 32) * k + j] * sd[([1, 0, 1][p / 32] * k + j) * 32 + p % 32]).sum()).collect();
        assert_close(&values(&got), &want, 1e-5, 1e-5, &format!("{format:?} gather_qmm"));
        // The result takes x's dtype; dequantize defaults to bfloat16, as mlx's.
        let half = ops::quantized_matmul(ops::astype(&x, Dtype::F16).unwrap(), &words, &scales, scheme, false).unwrap();
        assert_eq!(half.dtype(), Dtype::F16);
        assert_eq!(ops::dequantize(&words, &scales, scheme, None).unwrap().dtype(), Dtype::BF16);
    }
}

#[test]
fn qqmm_multiplies_both_operands_rounded_and_its_vjp_is_mlx_s() {
    let mut rng = Rng::new(21);
    for format in [FloatFormat::Nvfp4, FloatFormat::Mxfp8, FloatFormat::Mxfp4] {
        let (m, n, k) = (64, 32, 96);
        let x64 = common::rounded(&rng.vec(m * k, -2.0, 2.0), &[m, k], Dtype::F32);
        let w64 = common::rounded(&rng.vec(n * k, -1.0, 1.0), &[n, k], Dtype::F32);
        let (x, w) = (array(&x64, &[m, k], Dtype::F32), array(&w64, &[n, k], Dtype::F32));
        // Rows rounded group by group (every row length here is a multiple of the group).
        let round_rows = |a: &[f64]| -> Vec<f64> { a.chunks(format.group_size()).flat_map(|g| reference_group(g, format, None).dequantized).collect() };
        let transpose = |a: &[f64], rows: usize, cols: usize| -> Vec<f64> { (0..rows * cols).map(|p| a[(p % rows) * cols + p / rows]).collect() };
        // (r × c) @ (q × c)ᵀ in float64.
        let product = |a: &[f64], b: &[f64], r: usize, q: usize, c: usize| -> Vec<f64> {
            (0..r * q).map(|p| (0..c).map(|j| a[(p / q) * c + j] * b[(p % q) * c + j]).sum()).collect()
        };
        let (xq, wq) = (round_rows(&x64), round_rows(&w64));
        let got = ops::qqmm(&x, &w, None, format, None, None).unwrap();
        assert_close(&values(&got), &product(&xq, &wq, m, n, k), 1e-5, 1e-5, &format!("{format:?} qqmm"));
        // A pre-quantized weight gives the same product.
        let (words, scales) = ops::quantize_float(&w, format, None).unwrap();
        let again = ops::qqmm(&x, &words, Some(&scales), format, None, None).unwrap();
        assert_eq!(values(&again), values(&got), "{format:?} pre-quantized weight");
        // vjp: dx = q(c) @ q(wᵀ)ᵀ, dw = q(cᵀ) @ q(xᵀ)ᵀ, each quantized along the inner axis.
        let c64 = common::rounded(&rng.vec(m * n, -1.0, 1.0), &[m, n], Dtype::F32);
        let f = move |a: &[Array]| Ok(vec![ops::qqmm(&a[0], &a[1], None, format, None, None)?]);
        let (_, grads) = vjp(f, &[x.clone(), w.clone()], &[array(&c64, &[m, n], Dtype::F32)]).unwrap();
        let (cq, ct) = (round_rows(&c64), round_rows(&transpose(&c64, m, n)));
        let dx = product(&cq, &round_rows(&transpose(&w64, n, k)), m, k, n);
        let dw = product(&ct, &round_rows(&transpose(&x64, m, k)), n, k, m);
        assert_close(&values(&grads[0]), &dx, 1e-5, 1e-5, &format!("{format:?} dx"));
        assert_close(&values(&grads[1]), &dw, 1e-5, 1e-5, &format!("{format:?} dw"));
    }
}

#[test]
fn bad_float_quantization_arguments_are_errors_naming_the_op() {
    let w = array(&[0.5; 64], &[2, 32], Dtype::F32);
    let (words, scales) = ops::quantize_float(&w, FloatFormat::Mxfp4, None).unwrap();
    let mx = Scheme::Float { format: FloatFormat::Mxfp4, global_scale: None };
    let g = Array::from_slice(&[1f32], &[1]).unwrap();
    check_err(ops::quantize_float(&w, FloatFormat::Mxfp4, Some(&g)), ErrorKind::Value, "quantize");
    check_err(ops::quantize_float(ops::astype(&w, Dtype::I32).unwrap(), FloatFormat::Mxfp8, None), ErrorKind::Dtype, "quantize");
    check_err(ops::quantize_float(array(&[0.5; 48], &[2, 24], Dtype::F32), FloatFormat::Nvfp4, None), ErrorKind::Shape, "quantize");
    let g64 = Array::from_slice(&[1f64], &[1]).unwrap();
    check_err(ops::quantize_float(&w, FloatFormat::Nvfp4, Some(&g64)), ErrorKind::Dtype, "quantize");
    check_err(ops::dequantize(&words, &ops::astype(&scales, Dtype::F32).unwrap(), mx, None), ErrorKind::Dtype, "dequantize");
    check_err(ops::dequantize(&words, &scales, mx, Some(Dtype::I32)), ErrorKind::Dtype, "dequantize");
    // mxfp8 reads the same words as twice as few 8-bit values: the scales no longer match.
    check_err(ops::dequantize(&words, &scales, Scheme::Float { format: FloatFormat::Mxfp8, global_scale: None }, None), ErrorKind::Shape, "dequantize");
    check_err(FloatFormat::Nvfp4.check_settings("quantize", Some(32), None), ErrorKind::Value, "quantize");
    check_err(FloatFormat::Mxfp8.check_settings("quantize", None, Some(4)), ErrorKind::Value, "quantize");
    let x = array(&[1.0; 64], &[2, 32], Dtype::F32);
    check_err(ops::qqmm(&x, &words, None, FloatFormat::Mxfp4, None, None), ErrorKind::Value, "qqmm");
    check_err(ops::qqmm(&x, &w, Some(&scales), FloatFormat::Mxfp4, None, None), ErrorKind::Value, "qqmm");
    check_err(ops::qqmm(&x, &w, None, FloatFormat::Nvfp4, Some(&g), None), ErrorKind::Value, "qqmm");
    check_err(ops::qqmm(ops::astype(&x, Dtype::F64).unwrap(), &w, None, FloatFormat::Mxfp4, None, None), ErrorKind::Dtype, "qqmm");
    // Scale codes have no gradient: asking for one is an error, not a silent zero.
    let f = move |a: &[Array]| Ok(vec![ops::sum(ops::quantized_matmul(&x, &words, &a[0], mx, true)?, None, false)?]);
    let err = vjp(f, std::slice::from_ref(&scales), &[Array::scalar(1f32)]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Value, "{err}");
    assert!(err.to_string().contains("no gradient"), "{err}");
}

#[test]
fn e2m1_midpoints_round_to_the_even_code() {
    // A group whose largest magnitude is 6 has scale 1, so its values are rounded as they are.
    let mut group = vec![6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -2.5, -5.0, 0.3, 2.6, 4.9, -0.2, 1.0];
    group.extend(group.clone());
    let (words, _) = ops::quantize_float(array(&group, &[1, 32], Dtype::F32), FloatFormat::Mxfp4, None).unwrap();
    let words: Vec<u32> = values(&words).iter().map(|&v| v as u32).collect();
    let want = reference_group(&group, FloatFormat::Mxfp4, None).codes;
    let got: Vec<usize> = (0..32).map(|i| code_at(&words, i, 4)).collect();
    assert_eq!(got, want);
    assert_eq!(&got[1..8], &[0, 2, 2, 4, 4, 6, 6], "ties go to the even code");
}

#[test]
fn qqmm_with_nvfp4_global_scales_rounds_each_operand_with_its_own() {
    let mut rng = Rng::new(31);
    let (m, n, k) = (3, 5, 32);
    let x64 = common::rounded(&rng.vec(m * k, -1e-2, 1e-2), &[m, k], Dtype::F32);
    let w64 = common::rounded(&rng.vec(n * k, -3.0, 3.0), &[n, k], Dtype::F32);
    let amax = |a: &[f64]| a.iter().fold(0f64, |s, v| s.max(v.abs())) as f32;
    let (gx, gw) = (amax(&x64), amax(&w64));
    let scalar = |g: f32| Array::from_slice(&[g], &[]).unwrap();
    let (x, w) = (array(&x64, &[m, k], Dtype::F32), array(&w64, &[n, k], Dtype::F32));
    let got = ops::qqmm(&x, &w, None, FloatFormat::Nvfp4, Some(&scalar(gx)), Some(&scalar(gw))).unwrap();
    let round = |a: &[f64], g: f32| -> Vec<f64> {
        a.chunks(16).flat_map(|c| reference_group(c, FloatFormat::Nvfp4, Some(g as f64)).dequantized).collect()
    };
    let (xq, wq) = (round(&x64, gx), round(&w64, gw));
    let want: Vec<f64> = (0..m * n).map(|p| (0..k).map(|j| xq[(p / n) * k + j] * wq[(p % n) * k + j]).sum()).collect();
    assert_close(&values(&got), &want, 1e-5, 1e-9, "qqmm with global scales");
}
