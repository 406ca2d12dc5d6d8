//! `ops::fast`: the layer ops against float64 loops written here from their definitions, their
//! gradients against finite differences, their kernel counts, and their argument checks.

mod common;

use common::{array, assert_close, check_err, Rng};
use kiln::ops::fast::{self, AttentionMask, Rope};
use kiln::{compile, ops, Array, Dtype, ErrorKind};

/// A layer op applied to the test's arrays.
type LayerOp<'a> = Box<dyn Fn(&[Array]) -> kiln::Result<Array> + Send + Sync + 'a>;
/// Which (query, key) scores a mask hides.
type Hidden = Box<dyn Fn(usize, usize) -> bool>;

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// Row-wise reference over the last axis of length `n`.
fn per_row(x: &[f64], n: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    x.chunks(n).flat_map(f).collect()
}

#[test]
fn norms_match_float64_loops_in_every_float_dtype() {
    let mut rng = Rng::new(1);
    let (rows, n) = (6, 37);
    let x64 = rng.vec(rows * n, -3.0, 3.0);
    let w64 = rng.vec(n, 0.5, 1.5);
    let b64 = rng.vec(n, -1.0, 1.0);
    for (dtype, tol) in [(Dtype::F32, 2e-5), (Dtype::F64, 1e-12), (Dtype::F16, 4e-3), (Dtype::BF16, 3e-2)] {
        let (x, w, b) = (array(&x64, &[2, 3, n], dtype), array(&w64, &[n], dtype), array(&b64, &[n], dtype));
        // The reference reads the inputs as rounded to the dtype, then computes in float64.
        let (xr, wr, br) = (values(&x), values(&w), values(&b));
        let rms = |r: &[f64]| {
            let scale = 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / n as f64 + 1e-5).sqrt();
            r.iter().zip(&wr).map(|(v, w)| v * scale * w).collect()
        };
        let got = fast::rms_norm(&x, Some(&w), 1e-5).unwrap();
        assert_eq!((got.shape(), got.dtype()), (&[2, 3, n][..], dtype));
        assert_close(&values(&got), &per_row(&xr, n, rms), tol, tol, &format!("rms_norm {dtype}"));
        let layer = |r: &[f64]| {
            let mean = r.iter().sum::<f64>() / n as f64;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
            r.iter().zip(wr.iter().zip(&br)).map(|(v, (w, b))| (v - mean) / (var + 1e-5).sqrt() * w + b).collect()
        };
        let got = fast::layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap();
        assert_close(&values(&got), &per_row(&xr, n, layer), tol, tol, &format!("layer_norm {dtype}"));
    }
    // Parameters are optional, and promote: float16 x with float32 weights gives float32.
    let x = array(&x64, &[rows, n], Dtype::F16);
    let plain = fast::layer_norm(&x, None, None, 1e-5).unwrap();
    assert_eq!(plain.dtype(), Dtype::F16);
    let promoted = fast::rms_norm(&x, Some(&array(&w64, &[n], Dtype::F32)), 1e-5).unwrap();
    assert_eq!(promoted.dtype(), Dtype::F32);
}

/// Rotary embedding by definition: pairs (i, i + dims/2), or (2i, 2i + 1) when `traditional`,
/// rotated by (offset + position) · scale · base^(-2i/dims).
fn rope_reference(x: &[f64], shape: [usize; 3], dims: usize, traditional: bool, base: f64, scale: f64, offsets: &[f64]) -> Vec<f64> {
    let [batch, length, n] = shape;
    let mut out = x.to_vec();
    for b in 0..batch {
        let offset = offsets[if offsets.len() == 1 { 0 } else { b }];
        for p in 0..length {
            let row = (b * length + p) * n;
            for i in 0..dims / 2 {
                let theta = (offset + p as f64) * scale * base.powf(-2.0 * i as f64 / dims as f64);
                let (j, k) = if traditional { (2 * i, 2 * i + 1) } else { (i, i + dims / 2) };
                let (u, v) = (x[row + j], x[row + k]);
                out[row + j] = u * theta.cos() - v * theta.sin();
                out[row + k] = u * theta.sin() + v * theta.cos();
            }
        }
    }
    out
}

#[test]
fn rope_matches_a_float64_loop_for_both_layouts_partial_dims_and_offsets() {
    let mut rng = Rng::new(2);
    let shape = [3, 5, 12];
    let x64 = rng.vec(shape.iter().product(), -2.0, 2.0);
    let x = array(&x64, &shape, Dtype::F32);
    for traditional in [false, true] {
        for dims in [12, 8] {
            for offsets in [vec![0.0], vec![7.0], vec![1.0, 4.0, 9.0]] {
                let as_ints: Vec<i32> = offsets.iter().map(|&o| o as i32).collect();
                let offset = if offsets.len() == 1 { Array::scalar(as_ints[0]) } else { Array::from_slice(&as_ints, &[3]).unwrap() };
                let settings = Rope { dims, traditional, base: Some(10000.0), scale: 0.5 };
                let got = fast::rope(&x, settings, &offset, None).unwrap();
                let want = rope_reference(&x64, shape, dims as usize, traditional, 10000.0, 0.5, &offsets);
                assert_close(&values(&got), &want, 1e-5, 1e-5, &format!("rope dims {dims} traditional {traditional} offsets {offsets:?}"));
            }
        }
    }
    // Frequencies given directly: base^(2i/dims) as freqs is the same rotation.
    let freqs: Vec<f64> = (0..4).map(|i| 100f64.powf(2.0 * i as f64 / 8.0)).collect();
    let settings = Rope { dims: 8, traditional: false, base: None, scale: 1.0 };
    let got = fast::rope(&x, settings, 3, Some(&array(&freqs, &[4], Dtype::F32))).unwrap();
    assert_close(&values(&got), &rope_reference(&x64, shape, 8, false, 100.0, 1.0, &[3.0]), 1e-5, 1e-5, "rope with freqs");
}

/// Attention by definition, one (batch, head, query) row at a time, grouped heads sharing keys.
fn attention_reference(q: &[f64], k: &[f64], v: &[f64], dims: [usize; 6], scale: f64, hidden: impl Fn(usize, usize) -> bool) -> Vec<f64> {
    let [batch, heads, kv_heads, length, keys, features] = dims;
    let value_features = v.len() / (batch * kv_heads * keys);
    let mut out = Vec::new();
    for b in 0..batch {
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            for i in 0..length {
                let qrow = &q[((b * heads + h) * length + i) * features..][..features];
                let scores: Vec<f64> = (0..keys)
                    .map(|j| {
                        let krow = &k[((b * kv_heads + g) * keys + j) * features..][..features];
                        if hidden(i, j) { f64::NEG_INFINITY } else { qrow.iter().zip(krow).map(|(a, c)| a * c).sum::<f64>() * scale }
                    })
                    .collect();
                let top = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = weights.iter().sum();
                for f in 0..value_features {
                    out.push((0..keys).map(|j| weights[j] / total * v[((b * kv_heads + g) * keys + j) * value_features + f]).sum());
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_a_float64_loop_with_masks_and_grouped_heads() {
    let mut rng = Rng::new(3);
    let (batch, heads, kv_heads, length, keys, features) = (2, 4, 2, 5, 7, 8);
    let q64 = rng.vec(batch * heads * length * features, -1.0, 1.0);
    let k64 = rng.vec(batch * kv_heads * keys * features, -1.0, 1.0);
    let v64 = rng.vec(batch * kv_heads * keys * 6, -1.0, 1.0);
    let q = array(&q64, &[batch, heads, length, features], Dtype::F32);
    let k = array(&k64, &[batch, kv_heads, keys, features], Dtype::F32);
    let v = array(&v64, &[batch, kv_heads, keys, 6], Dtype::F32);
    let dims = [batch, heads, kv_heads, length, keys, features];
    let hidden_by: Vec<bool> = (0..length * keys).map(|p| p % keys != 0 && rng.uniform(0.0, 1.0) < 0.3).collect();
    let boolean = Array::from_slice(&hidden_by.iter().map(|h| !h).collect::<Vec<_>>(), &[length, keys]).unwrap();
    let cases: Vec<(AttentionMask, Hidden)> = vec![
        (AttentionMask::None, Box::new(|_, _| false)),
        (AttentionMask::Causal, Box::new(move |i, j| j > i + keys - length)),
        (AttentionMask::Array(boolean), Box::new(move |i, j| hidden_by[i * keys + j])),
    ];
    for (mask, hidden) in cases {
        let got = fast::scaled_dot_product_attention(&q, &k, &v, 0.3, &mask, None).unwrap();
        assert_eq!(got.shape(), &[batch, heads, length, 6]);
        assert_close(&values(&got), &attention_reference(&q64, &k64, &v64, dims, 0.3, hidden), 1e-5, 1e-5, &format!("{mask:?}"));
    }
}

#[test]
fn norms_and_rope_are_one_fused_kernel_and_attention_three() {
    let x = Array::from_slice(&[0.5f32; 2 * 3 * 16], &[2, 3, 16]).unwrap();
    let w = Array::from_slice(&[1.5f32; 16], &[16]).unwrap();
    let kernels = |f: LayerOp<'static>, args: &[Array]| {
        let compiled = compile(move |a: &[Array]| Ok(vec![f(a)?]));
        compiled.inspect(args, &[]).unwrap().compiled_kernels
    };
    assert_eq!(kernels(Box::new(|a| fast::rms_norm(&a[0], Some(&a[1]), 1e-5)), &[x.clone(), w.clone()]), 1);
    assert_eq!(kernels(Box::new(|a| fast::layer_norm(&a[0], Some(&a[1]), Some(&a[1]), 1e-5)), &[x.clone(), w]), 1);
    let settings = Rope { dims: 16, traditional: false, base: Some(10000.0), scale: 1.0 };
    assert_eq!(kernels(Box::new(move |a| fast::rope(&a[0], settings, 2, None)), std::slice::from_ref(&x)), 1);
    let q = ops::reshape(&x, &[1, 2, 3, 16]).unwrap();
    let attention = |a: &[Array]| fast::scaled_dot_product_attention(&a[0], &a[0], &a[0], 0.25, &AttentionMask::Causal, None);
    assert_eq!(kernels(Box::new(attention), &[q]), 3);
}

#[test]
fn gradients_match_finite_differences() {
    let mut rng = Rng::new(4);
    let x64 = rng.vec(12, -1.0, 1.0);
    let w = array(&rng.vec(6, 0.5, 1.5), &[6], Dtype::F64);
    let cases: Vec<(&str, LayerOp)> = vec![
        ("rms_norm", Box::new(|t| fast::rms_norm(&t[0], Some(&w), 1e-5))),
        ("layer_norm", Box::new(|t| fast::layer_norm(&t[0], Some(&w), Some(&w), 1e-5))),
        ("rope", Box::new(|t| fast::rope(&ops::reshape(&t[0], &[1, 2, 6])?, Rope { dims: 4, traditional: true, base: Some(100.0), scale: 1.0 }, 1, None))),
        ("attention", Box::new(|t| {
            let q = ops::reshape(&t[0], &[1, 1, 2, 6])?;
            fast::scaled_dot_product_attention(&q, &q, &ops::multiply(&q, 2.0)?, 0.5, &AttentionMask::Causal, None)
        })),
    ];
    let weights = array(&(0..12).map(|i| i as f64 - 5.5).collect::<Vec<_>>(), &[12], Dtype::F64);
    for (name, f) in &cases {
        let loss = |t: &Array| -> kiln::Result<Array> { ops::sum(ops::multiply(ops::reshape(f(std::slice::from_ref(t))?, &[12])?, &weights)?, None, false) };
        let x = array(&x64, &[2, 6], Dtype::F64);
        let g = kiln::grad(|a: &[Array]| Ok(vec![loss(&a[0])?]), &[0])(&[x]).unwrap().remove(0);
        let h = 1e-6;
        let numeric: Vec<f64> = (0..12)
            .map(|i| {
                let shifted = |d: f64| {
                    let mut v = x64.clone();
                    v[i] += d;
                    loss(&array(&v, &[2, 6], Dtype::F64)).unwrap().item::<f64>().unwrap()
                };
                (shifted(h) - shifted(-h)) / (2.0 * h)
            })
            .collect();
        assert_close(&values(&g), &numeric, 1e-6, 1e-6, name);
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_op() {
    let x = Array::from_slice(&[1.0f32; 64], &[2, 4, 8]).unwrap();
    check_err(fast::rms_norm(&x, Some(&Array::from_slice(&[1.0f32; 7], &[7]).unwrap()), 1e-5), ErrorKind::Shape, "rms_norm");
    check_err(fast::layer_norm(&ops::astype(&x, Dtype::I32).unwrap(), None, None, 1e-5), ErrorKind::Dtype, "layer_norm");
    check_err(fast::rms_norm(&Array::scalar(1.0f32), None, 1e-5), ErrorKind::Shape, "rms_norm");
    for dims in [0, -2, 7, 10] {
        check_err(fast::rope(&x, Rope { dims, traditional: false, base: Some(1e4), scale: 1.0 }, 0, None), ErrorKind::Value, "rope");
    }
    let settings = Rope { dims: 8, traditional: false, base: None, scale: 1.0 };
    check_err(fast::rope(&x, settings, 0, None), ErrorKind::Value, "rope");
    let with_base = Rope { base: Some(1e4), ..settings };
    check_err(fast::rope(&x, with_base, Array::from_slice(&[1i32, 2, 3], &[3]).unwrap(), None), ErrorKind::Shape, "rope");
    let q = Array::from_slice(&[1.0f32; 96], &[1, 3, 4, 8]).unwrap();
    let kv = Array::from_slice(&[1.0f32; 64], &[1, 2, 4, 8]).unwrap();
    let op = "scaled_dot_product_attention";
    check_err(fast::scaled_dot_product_attention(&q, &kv, &kv, 1.0, &AttentionMask::None, None), ErrorKind::Shape, op);
    let wide_mask = AttentionMask::Array(Array::from_slice(&[true; 20], &[4, 5]).unwrap());
    check_err(fast::scaled_dot_product_attention(&q, &q, &q, 1.0, &wide_mask, None), ErrorKind::Shape, op);
    let sinks = Array::from_slice(&[0.0f32; 4], &[4]).unwrap();
    check_err(fast::scaled_dot_product_attention(&q, &q, &q, 1.0, &AttentionMask::None, Some(&sinks)), ErrorKind::Shape, op);
    // A float32 additive mask would turn a float16 result into float32: refused, as mlx.
    let half = ops::astype(&q, Dtype::F16).unwrap();
    let wide = AttentionMask::Array(Array::from_slice(&[0.0f32; 16], &[4, 4]).unwrap());
    check_err(fast::scaled_dot_product_attention(&half, &half, &half, 1.0, &wide, None), ErrorKind::Dtype, op);
    let other_batch = ops::concatenate(&[q.clone(), q.clone()], 0).unwrap();
    check_err(fast::scaled_dot_product_attention(&q, &other_batch, &other_batch, 1.0, &AttentionMask::None, None), ErrorKind::Shape, op);
    // base and freqs are exclusive; offsets are integers.
    let freqs = Array::from_slice(&[1.0f32; 4], &[4]).unwrap();
    check_err(fast::rope(&x, with_base, 0, Some(&freqs)), ErrorKind::Value, "rope");
    check_err(fast::rope(&x, with_base, 1.5, None), ErrorKind::Dtype, "rope");
    // An integer x normalises when a float weight makes the result floating point (as mlx).
    let ints = ops::astype(&x, Dtype::I32).unwrap();
    let w = Array::from_slice(&[2.0f32; 8], &[8]).unwrap();
    assert_eq!(fast::rms_norm(&ints, Some(&w), 1e-5).unwrap().dtype(), Dtype::F32);
    check_err(fast::rms_norm(&ints, None, 1e-5), ErrorKind::Dtype, "rms_norm");
}
