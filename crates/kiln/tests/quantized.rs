//! Affine quantization against references written here: the packed bit stream read back bit by
//! bit, mlx's choice of scale and bias in float64, products against float64 loops over the
//! dequantized matrix, and GGUF's Q4_0, Q4_1 and Q8_0 blocks against their formulas.

mod common;

use common::{array, assert_close, check_err, Rng};
use kiln::ops::Scheme;
use kiln::transforms::vjp;
use kiln::{ops, Array, Dtype, ErrorKind};

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// Value `i` of the little-endian bit stream in `words`, `bits` wide.
fn read_stream(words: &[u32], i: usize, bits: usize) -> u32 {
    (0..bits).map(|b| ((words[(i * bits + b) / 32] >> ((i * bits + b) % 32)) & 1) << b).sum()
}

/// mlx's scale and bias of one group, in float64: the edge of larger magnitude kept exact.
fn scale_and_bias(group: &[f64], bits: u32) -> (f64, f64) {
    let (low, high) = group.iter().fold((f64::MAX, f64::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    let levels = ((1u32 << bits) - 1) as f64;
    let spread = ((high - low) / levels).max(1e-7);
    let (scale, edge) = if low.abs() > high.abs() { (spread, low) } else { (-spread, high) };
    let q0 = (edge / scale).round_ties_even();
    if q0 != 0.0 { (edge / q0, edge) } else { (scale, 0.0) }
}

#[test]
fn quantize_packs_each_group_as_its_scale_and_bias_say() {
    let mut rng = Rng::new(1);
    for bits in [2u32, 3, 4, 5, 6, 8] {
        for group_size in [32usize, 64, 128] {
            let (rows, k) = (3, 256);
            let w64 = rng.vec(rows * k, -2.0, 3.0);
            let w = array(&w64, &[rows, k], Dtype::F32);
            let (words, scales, biases) = ops::quantize(&w, group_size, bits).unwrap();
            let what = format!("bits {bits}, group {group_size}");
            assert_eq!(words.shape(), &[rows, k * bits as usize / 32], "{what}");
            assert_eq!((scales.shape(), biases.dtype()), (&[rows, k / group_size][..], Dtype::F32), "{what}");
            let (words_v, scales_v, biases_v) = (words.to_vec::<u32>().unwrap(), values(&scales), values(&biases));
            let row_words = k * bits as usize / 32;
            let wf: Vec<f64> = values(&w);
            for r in 0..rows {
                for g in 0..k / group_size {
                    let group = &wf[r * k + g * group_size..][..group_size];
                    let (s, b) = scale_and_bias(group, bits);
                    let at = r * (k / group_size) + g;
                    assert_close(&[scales_v[at], biases_v[at]], &[s, b], 1e-5, 1e-6, &format!("{what} group {at}"));
                    for (j, &v) in group.iter().enumerate() {
                        let q = read_stream(&words_v[r * row_words..][..row_words], g * group_size + j, bits as usize);
                        let want = ((v - biases_v[at]) / scales_v[at]).round_ties_even().clamp(0.0, ((1 << bits) - 1) as f64);
                        // float32 rounding may move a value sitting on a half step by one level.
                        assert!((q as f64 - want).abs() <= 1.0, "{what}: value {j} of group {at}: {q} against {want}");
                    }
                }
            }
            // Dequantizing gives each value's nearest level of its group (values past the far
            // edge clip to it: the near edge is the exact one), up to one level where float32
            // rounding moves a value sitting on a half step.
            let back = values(&ops::dequantize(&words, &scales, Scheme::affine(&biases, group_size, bits), None).unwrap());
            for (i, (&got, &v)) in back.iter().zip(&wf).enumerate() {
                let (s, b) = (scales_v[i / group_size], biases_v[i / group_size]);
                let want = s * ((v - b) / s).round_ties_even().clamp(0.0, ((1 << bits) - 1) as f64) + b;
                assert!((got - want).abs() <= s.abs() * 1.001 + 1e-6, "{what}: element {i}: {got} against {want}");
                assert!((got - want).abs() <= 1e-5 || (got - want).abs() >= s.abs() * 0.999, "{what}: element {i}: {got} against {want}");
            }
        }
    }
}

#[test]
fn dequantize_reads_the_bit_stream_in_the_scales_dtype() {
    let mut rng = Rng::new(2);
    for bits in [3u32, 4, 8] {
        let (rows, k, group) = (2, 64, 32);
        let words: Vec<u32> = (0..rows * k * bits as usize / 32).map(|_| rng.next_u64() as u32).collect();
        let scales = rng.vec(rows * k / group, 0.1, 1.0);
        let biases = rng.vec(rows * k / group, -1.0, 1.0);
        let w = Array::from_slice(&words, &[rows, k * bits as usize / 32]).unwrap();
        let (s, b) = (array(&scales, &[rows, k / group], Dtype::F16), array(&biases, &[rows, k / group], Dtype::F16));
        let got = ops::dequantize(&w, &s, Scheme::affine(&b, group, bits), None).unwrap();
        assert_eq!(got.dtype(), Dtype::F16);
        let (sv, bv) = (values(&s), values(&b));
        let row_words = k * bits as usize / 32;
        let want: Vec<f64> = (0..rows * k)
            .map(|i| {
                let (r, c) = (i / k, i % k);
                let q = read_stream(&words[r * row_words..][..row_words], c, bits as usize) as f64;
                sv[i / group] * q + bv[i / group]
            })
            .collect();
        assert_close(&values(&got), &want, 1e-3, 1e-3, &format!("bits {bits}"));
    }
}

#[test]
fn quantized_products_equal_products_with_the_dequantized_matrix() {
    let mut rng = Rng::new(3);
    let (n, k) = (5, 64);
    let w = array(&rng.vec(n * k, -1.0, 1.0), &[n, k], Dtype::F32);
    let (words, scales, biases) = ops::quantize(&w, 32, 4).unwrap();
    let wd = values(&ops::dequantize(&words, &scales, Scheme::affine(&biases, 32, 4), None).unwrap());
    let x64 = rng.vec(3 * k, -1.0, 1.0);
    let x = array(&x64, &[3, k], Dtype::F32);
    let got = ops::quantized_matmul(&x, &words, &scales, Scheme::affine(&biases, 32, 4), true).unwrap();
    assert_eq!(got.shape(), &[3, n]);
    let want: Vec<f64> = (0..3 * n).map(|p| (0..k).map(|j| x64[(p / n) * k + j] * wd[(p % n) * k + j]).sum()).collect();
    assert_close(&values(&got), &want, 1e-5, 1e-5, "x @ w.T");
    // Not transposed: w is (k, n') quantized along n'.
    let wt = array(&rng.vec(k * 32, -1.0, 1.0), &[k, 32], Dtype::F32);
    let (words, scales, biases) = ops::quantize(&wt, 32, 8).unwrap();
    let wtd = values(&ops::dequantize(&words, &scales, Scheme::affine(&biases, 32, 8), None).unwrap());
    let got = ops::quantized_matmul(&x, &words, &scales, Scheme::affine(&biases, 32, 8), false).unwrap();
    let want: Vec<f64> = (0..3 * 32).map(|p| (0..k).map(|j| x64[(p / 32) * k + j] * wtd[j * 32 + p % 32]).sum()).collect();
    assert_close(&values(&got), &want, 1e-5, 1e-5, "x @ w");
    // gather_qmm picks a matrix of a quantized stack per index.
    let stack = array(&rng.vec(3 * n * k, -1.0, 1.0), &[3, n, k], Dtype::F32);
    let (words, scales, biases) = ops::quantize(&stack, 64, 6).unwrap();
    let sd = values(&ops::dequantize(&words, &scales, Scheme::affine(&biases, 64, 6), None).unwrap());
    let rhs = Array::from_slice(&[2u32, 0, 2], &[3]).unwrap();
    let xs = ops::reshape(&x, &[3, 1, k as i64]).unwrap();
    let got = ops::gather_qmm(&xs, &words, &scales, Scheme::affine(&biases, 64, 6), None, Some(&rhs), true).unwrap();
    assert_eq!(got.shape(), &[3, 1, n]);
    let want: Vec<f64> = (0..3 * n)
        .map(|p| {
            let (i, o) = (p / n, p % n);
            let m = [2, 0, 2][i];
            (0..k).map(|j| x64[i * k + j] * sd[(m * n + o) * k + j]).sum()
        })
        .collect();
    assert_close(&values(&got), &want, 1e-5, 1e-5, "gather_qmm");
}

#[test]
fn bad_quantization_arguments_are_errors_naming_the_op() {
    let w = Array::from_slice(&[0.5f32; 2 * 64], &[2, 64]).unwrap();
    check_err(ops::quantize(&w, 48, 4), ErrorKind::Value, "quantize");
    check_err(ops::quantize(&w, 64, 7), ErrorKind::Value, "quantize");
    check_err(ops::quantize(ops::reshape(&w, &[128]).unwrap(), 64, 4), ErrorKind::Shape, "quantize");
    check_err(ops::quantize(ops::astype(&w, Dtype::I32).unwrap(), 64, 4), ErrorKind::Dtype, "quantize");
    check_err(ops::quantize(ops::reshape(&w, &[4, 32]).unwrap(), 64, 4), ErrorKind::Shape, "quantize");
    let (words, scales, biases) = ops::quantize(&w, 64, 4).unwrap();
    check_err(ops::dequantize(&words, &scales, Scheme::affine(&biases, 32, 4), None), ErrorKind::Shape, "dequantize");
    check_err(ops::dequantize(&ops::astype(&words, Dtype::I32).unwrap(), &scales, Scheme::affine(&biases, 64, 4), None), ErrorKind::Dtype, "dequantize");
    let x = Array::from_slice(&[1.0f32; 32], &[1, 32]).unwrap();
    check_err(ops::quantized_matmul(&x, &words, &scales, Scheme::affine(&biases, 64, 4), true), ErrorKind::Shape, "quantized_matmul");
    check_err(ops::dequantize(&words, &scales, Scheme::affine(&biases, 64, 3), None), ErrorKind::Shape, "dequantize");
    check_err(ops::dequantize(&words, &scales, Scheme::affine(&biases, 64, 4), Some(Dtype::I32)), ErrorKind::Dtype, "dequantize");
}

#[test]
fn quantized_results_take_the_promoted_dtype_as_mlx() {
    let w = Array::from_slice(&[0.25f32; 4 * 64], &[4, 64]).unwrap();
    let (words, scales, biases) = ops::quantize(&w, 64, 4).unwrap();
    let half_scales = ops::astype(&scales, Dtype::F16).unwrap();
    assert_eq!(ops::dequantize(&words, &half_scales, Scheme::affine(&biases, 64, 4), None).unwrap().dtype(), Dtype::F32);
    let x = Array::from_slice(&[1.0f32; 64], &[1, 64]).unwrap();
    let x16 = ops::astype(&x, Dtype::F16).unwrap();
    let product = ops::quantized_matmul(&x16, &words, &scales, Scheme::affine(&biases, 64, 4), true).unwrap();
    assert_eq!(product.dtype(), Dtype::F32);
    assert_close(&values(&product), &[64.0 * 0.25; 4], 1e-3, 1e-3, "float16 x, float32 scales");
}

#[test]
fn gguf_quantized_tensors_of_no_rows_and_huge_columns_are_no_crash() {
    use kiln::gguf::gguf_from_bytes;
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    f.extend(0u64.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    f.extend(b"w");
    f.extend(2u32.to_le_bytes());
    f.extend((1u64 << 62).to_le_bytes());
    f.extend(0u64.to_le_bytes());
    f.extend(8u32.to_le_bytes());
    f.extend(0u64.to_le_bytes());
    f.resize(f.len().next_multiple_of(32), 0);
    if let Ok((arrays, _)) = gguf_from_bytes(&f, "empty.gguf") {
        assert!(arrays.iter().all(|(_, a)| a.size() == 0));
    }
}

#[test]
fn gguf_quantized_blocks_load_as_words_scales_and_biases() {
    use kiln::gguf::gguf_from_bytes;
    let mut rng = Rng::new(4);
    let (rows, cols) = (2usize, 64usize);
    let blocks = rows * cols / 32;
    // (ggml type, block bytes, the block's values from its bytes)
    let d = half::f16::from_f32(0.75);
    let m = half::f16::from_f32(-1.5);
    let q4: Vec<u8> = (0..blocks * 16).map(|_| rng.next_u64() as u8).collect();
    let q8: Vec<i8> = (0..blocks * 32).map(|_| rng.next_u64() as i8).collect();
    let nibble = |b: usize, j: usize| -> f64 {
        let byte = q4[b * 16 + j % 16];
        (if j < 16 { byte & 15 } else { byte >> 4 }) as f64
    };
    let d64 = d.to_f64();
    let cases: Vec<(u32, Vec<u8>, Vec<f64>, u32)> = vec![
        (2, (0..blocks).flat_map(|b| d.to_le_bytes().into_iter().chain(q4[b * 16..][..16].iter().copied())).collect(), (0..blocks * 32).map(|i| d64 * (nibble(i / 32, i % 32) - 8.0)).collect(), 4),
        (3, (0..blocks).flat_map(|b| d.to_le_bytes().into_iter().chain(m.to_le_bytes()).chain(q4[b * 16..][..16].iter().copied())).collect(), (0..blocks * 32).map(|i| d64 * nibble(i / 32, i % 32) + m.to_f64()).collect(), 4),
        (8, (0..blocks).flat_map(|b| d.to_le_bytes().into_iter().chain(q8[b * 32..][..32].iter().map(|&v| v as u8))).collect(), q8.iter().map(|&v| d64 * v as f64).collect(), 8),
    ];
    for (code, data, want, bits) in cases {
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(1u64.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        let name = b"blk.0.attn.weight";
        f.extend((name.len() as u64).to_le_bytes());
        f.extend(name);
        f.extend(2u32.to_le_bytes());
        f.extend((cols as u64).to_le_bytes());
        f.extend((rows as u64).to_le_bytes());
        f.extend(code.to_le_bytes());
        f.extend(0u64.to_le_bytes());
        f.resize(f.len().next_multiple_of(32), 0);
        f.extend(&data);
        let (arrays, _) = gguf_from_bytes(&f, "q.gguf").unwrap();
        let get = |n: &str| arrays.iter().find(|(k, _)| k == n).unwrap_or_else(|| panic!("type {code}: no {n}")).1.clone();
        let (words, scales, biases) = (get("blk.0.attn.weight"), get("blk.0.attn.scales"), get("blk.0.attn.biases"));
        assert_eq!((words.dtype(), words.shape()), (Dtype::U32, &[rows, cols * bits as usize / 32][..]), "type {code}");
        assert_eq!((scales.dtype(), scales.shape()), (Dtype::F16, &[rows, cols / 32][..]), "type {code}");
        let back = ops::dequantize(&words, &scales, Scheme::affine(&biases, 32, bits), Some(Dtype::F32)).unwrap();
        assert_eq!(values(&back), want, "type {code}");
    }
}

#[test]
fn host_kernel_products_and_gradients_equal_the_float64_composition() {
    // float32 products on the CPU run the blocked host kernel; float64 ones the composition
    // (dequantize, then matmul), which serves as the reference.
    let mut rng = Rng::new(17);
    let f64s = |a: &Array| ops::astype(a, Dtype::F64).unwrap();
    let shapes = [(40, 256, 32, 3), (7, 4096, 64, 5), (33, 128, 128, 6), (300, 64, 32, 2), (5, 96, 32, 8), (2100, 512, 64, 4)];
    for (rows, cols, group, bits) in shapes {
        let w = array(&rng.vec(rows * cols, -1.0, 1.0), &[rows, cols], Dtype::F32);
        let (words, scales, biases) = ops::quantize(&w, group, bits).unwrap();
        for transpose in [true, false] {
            let inner = if transpose { cols } else { rows };
            for m in [1, 3, 9, 70] {
                let x = array(&rng.vec(m * inner, -1.0, 1.0), &[m, inner], Dtype::F32);
                let scheme = Scheme::affine(&biases, group, bits);
                let got = ops::quantized_matmul(&x, &words, &scales, scheme, transpose).unwrap();
                let (s64, b64) = (f64s(&scales), f64s(&biases));
                let want = ops::quantized_matmul(f64s(&x), &words, &s64, Scheme::affine(&b64, group, bits), transpose).unwrap();
                let what = format!("rows {rows} cols {cols} bits {bits} transpose {transpose} m {m}");
                assert_eq!(got.shape(), want.shape(), "{what}");
                assert_close(&values(&got), &values(&want), 1e-4, 1e-4, &what);
                if m != 9 {
                    continue;
                }
                // Gradients of x, the scales and the biases.
                let c = array(&rng.vec(got.size(), -1.0, 1.0), got.shape(), Dtype::F32);
                let (wd, t) = (words.clone(), transpose);
                let f = move |a: &[Array]| Ok(vec![ops::quantized_matmul(&a[0], &wd, &a[1], Scheme::affine(&a[2], group, bits), t)?]);
                let (_, grads) = vjp(f.clone(), &[x.clone(), scales.clone(), biases.clone()], std::slice::from_ref(&c)).unwrap();
                let (_, want) = vjp(f, &[f64s(&x), s64.clone(), b64.clone()], &[f64s(&c)]).unwrap();
                for (name, g, w) in [("x", &grads[0], &want[0]), ("scales", &grads[1], &want[1]), ("biases", &grads[2], &want[2])] {
                    assert_close(&values(g), &values(w), 1e-4, 1e-4, &format!("{what}: d{name}"));
                }
            }
        }
    }
}

#[test]
fn shapeless_compiled_quantized_products_follow_new_batch_sizes() {
    // A shapeless trace builds the composition (a host kernel's output shape is fixed), so one
    // trace serves every number of rows; a plain compile uses the kernel.
    let mut rng = Rng::new(23);
    let w = array(&rng.vec(48 * 64, -1.0, 1.0), &[48, 64], Dtype::F32);
    let (words, scales, biases) = ops::quantize(&w, 32, 4).unwrap();
    let f = move |a: &[Array]| Ok(vec![ops::quantized_matmul(&a[0], &words, &scales, Scheme::affine(&biases, 32, 4), true)?]);
    let shapeless = kiln::compile_with(f.clone(), kiln::CompileOptions::new().shapeless(true));
    let plain = kiln::compile(f.clone());
    for rows in [3, 7, 1] {
        let x = array(&rng.vec(rows * 64, -1.0, 1.0), &[rows, 64], Dtype::F32);
        let want = values(&f(std::slice::from_ref(&x)).unwrap()[0]);
        assert_close(&values(&shapeless.call(std::slice::from_ref(&x)).unwrap()[0]), &want, 1e-5, 1e-5, "shapeless");
        assert_close(&values(&plain.call(std::slice::from_ref(&x)).unwrap()[0]), &want, 1e-5, 1e-5, "compiled");
    }
    assert_eq!(shapeless.trace_count(), 1);
}
