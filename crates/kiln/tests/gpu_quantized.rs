//! The fused GPU kernels of the quantized products against the float64 composition on the CPU
//! (dequantize, then matmul): every affine bit width, the float formats, float32 and half `x`,
//! both orientations, a few rows and the most the kernels take, gradients and compiled calls.
//! Tests print one line and return where there is no GPU.

mod common;

use common::gpu::gpu;
use common::{array, assert_close, Rng};
use kiln::ops::{self, FloatFormat, Scheme};
use kiln::primitive::Op;
use kiln::transforms::vjp;
use kiln::{with_device, Array, Dtype};
use std::collections::HashSet;

/// Rows of `x` the kernels take at most (`ops::quantized::gpu::MAX_ROWS`); one more runs the
/// composition.
const MAX_ROWS: usize = 32;

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

fn f64s(a: &Array) -> Array {
    ops::astype(a, Dtype::F64).unwrap()
}

/// The names of the kernels in `a`'s (small) graph.
fn kernels_in(a: &Array) -> HashSet<String> {
    let (mut stack, mut visits, mut names) = (vec![a.clone()], 0, HashSet::new());
    while let Some(a) = stack.pop() {
        visits += 1;
        assert!(visits < 100_000, "the graph is larger than a product's");
        if let Some((op, inputs)) = a.op_and_inputs() {
            if let Op::Kernel { call, .. } = &op {
                names.insert(call.name().to_string());
            }
            stack.extend(inputs);
        }
    }
    names
}

/// Tolerances of a result in `dtype` (its rounding, on sums of up to a few thousand terms).
fn tolerance(dtype: Dtype) -> (f64, f64) {
    match dtype {
        Dtype::F32 => (1e-4, 1e-3),
        Dtype::F16 => (4e-3, 2e-2),
        _ => (1.6e-2, 5e-2),
    }
}

/// A quantized matrix: words, scales and how they read.
struct Quantized {
    words: Array,
    scales: Array,
    biases: Option<Array>,
    group_size: usize,
    bits: u32,
    format: Option<(FloatFormat, Option<Array>)>,
}

impl Quantized {
    fn affine(w: &Array, group_size: usize, bits: u32) -> Quantized {
        let (words, scales, biases) = ops::quantize(w, group_size, bits).unwrap();
        Quantized { words, scales, biases: Some(biases), group_size, bits, format: None }
    }

    fn float(w: &Array, format: FloatFormat, global_scale: Option<Array>) -> Quantized {
        let (words, scales) = ops::quantize_float(w, format, global_scale.as_ref()).unwrap();
        Quantized { words, scales, biases: None, group_size: format.group_size(), bits: format.bits(), format: Some((format, global_scale)) }
    }

    /// The scheme, with the scales and biases as given (the reference passes float64 ones).
    fn scheme<'a>(&'a self, biases: Option<&'a Array>) -> Scheme<'a> {
        match &self.format {
            None => Scheme::affine(biases.expect("affine biases"), self.group_size, self.bits),
            Some((format, global_scale)) => Scheme::Float { format: *format, global_scale: global_scale.as_ref() },
        }
    }

    fn product(&self, x: &Array, transpose: bool) -> kiln::Result<Array> {
        ops::quantized_matmul(x, &self.words, &self.scales, self.scheme(self.biases.as_ref()), transpose)
    }

    /// The float64 composition on the CPU.
    fn reference(&self, x: &Array, transpose: bool) -> Array {
        let scales = if self.format.is_some() { self.scales.clone() } else { f64s(&self.scales) };
        let biases = self.biases.as_ref().map(f64s);
        ops::quantized_matmul(f64s(x), &self.words, &scales, self.scheme(biases.as_ref()), transpose).unwrap()
    }
}

/// The matrices every test multiplies by: (label, rows, cols, quantized in `dtype`).
fn matrices(rng: &mut Rng, dtype: Dtype) -> Vec<(String, Quantized)> {
    let mut out = Vec::new();
    let mut weight = |rows: usize, cols: usize| ops::astype(array(&rng.vec(rows * cols, -1.0, 1.0), &[rows, cols], Dtype::F32), dtype).unwrap();
    for (rows, cols, group, bits) in [(40, 256, 32, 3), (7, 4096, 64, 5), (33, 128, 128, 6), (300, 64, 32, 2), (5, 96, 32, 8), (64, 512, 64, 4)] {
        out.push((format!("affine {bits} bits, groups of {group}, {rows}x{cols}"), Quantized::affine(&weight(rows, cols), group, bits)));
    }
    for (format, rows, cols) in [(FloatFormat::Mxfp4, 48, 256), (FloatFormat::Mxfp8, 20, 96), (FloatFormat::Nvfp4, 24, 48)] {
        out.push((format!("{format:?} {rows}x{cols}"), Quantized::float(&weight(rows, cols), format, None)));
    }
    let global = Array::from_slice(&[0.37f32], &[]).unwrap();
    out.push(("Nvfp4 with a global scale 72x160".into(), Quantized::float(&weight(72, 160), FloatFormat::Nvfp4, Some(global))));
    out
}

#[test]
fn fused_quantized_products_match_the_float64_composition() {
    let Some((g, _one)) = gpu("fused_quantized_products_match_the_float64_composition") else { return };
    let mut rng = Rng::new(31);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let (rtol, atol) = tolerance(dtype);
        // Each layout and dtype builds its own kernels: the half types on three layouts only.
        let matrices = matrices(&mut rng, dtype);
        let half_types = ["affine 4 bits", "affine 3 bits", "Nvfp4 with"];
        let wanted = |label: &str| dtype == Dtype::F32 || half_types.iter().any(|h| label.starts_with(h));
        for (label, q) in matrices.into_iter().filter(|(label, _)| wanted(label)) {
            let (rows, cols) = (q.words.shape()[0], q.words.shape()[1] * 32 / q.bits as usize);
            for transpose in [true, false] {
                let inner = if transpose { cols } else { rows };
                // The kernels take 1, 4 (3 used) or 8 rows of x per warp or thread.
                for m in [1, 3, MAX_ROWS, MAX_ROWS + 1] {
                    let what = format!("{label}, x {dtype} of {m} rows, transpose {transpose}");
                    let x = ops::astype(array(&rng.vec(m * inner, -1.0, 1.0), &[m, inner], Dtype::F32), dtype).unwrap();
                    let got = with_device(g, || q.product(&x, transpose)).unwrap().unwrap();
                    let kernel = if transpose { "quantized_rows" } else { "quantized_columns" };
                    assert_eq!(kernels_in(&got).contains(kernel), m <= MAX_ROWS, "{what}: kernels {:?}", kernels_in(&got));
                    assert_eq!(got.dtype(), dtype, "{what}");
                    let want = q.reference(&x, transpose);
                    assert_eq!(got.shape(), want.shape(), "{what}");
                    assert_close(&values(&got), &values(&want), rtol, atol, &what);
                    if m == 3 && transpose {
                        // The same x one element into its buffer (sliced on the GPU): the rows
                        // kernel's 16-byte loads of x must give way to single ones.
                        let flat = ops::reshape(&x, &[-1]).unwrap();
                        let padded = ops::concatenate(&[ops::zeros(&[1], dtype).unwrap(), flat], 0).unwrap();
                        let got = with_device(g, || {
                            let view = ops::slice(&padded, &[ops::SliceSpec::range(1, (m * inner + 1) as i64)])?;
                            q.product(&ops::reshape(view, &[m as i64, inner as i64])?, transpose)
                        });
                        assert_close(&values(&got.unwrap().unwrap()), &values(&want), rtol, atol, &format!("{what}, x offset by one element"));
                    }
                }
            }
        }
    }
}

#[test]
fn fused_products_of_batched_x_differentiate_and_compile_on_the_gpu() {
    let Some((g, _one)) = gpu("fused_products_of_batched_x_differentiate_and_compile_on_the_gpu") else { return };
    let mut rng = Rng::new(37);
    let w = array(&rng.vec(96 * 256, -1.0, 1.0), &[96, 256], Dtype::F32);
    for q in [Quantized::affine(&w, 64, 4), Quantized::float(&w, FloatFormat::Mxfp4, None)] {
        let q = std::sync::Arc::new(q);
        for transpose in [true, false] {
            let inner = if transpose { 256 } else { 96 };
            // Leading axes: 2 x 3 rows of x.
            let x = array(&rng.vec(6 * inner, -1.0, 1.0), &[2, 3, inner], Dtype::F32);
            let want = q.reference(&x, transpose);
            let (qf, t) = (q.clone(), transpose);
            let f = move |a: &[Array]| Ok(vec![qf.product(&a[0], t)?]);
            let what = format!("{:?} transpose {transpose}", q.format.as_ref().map(|f| f.0));
            let eager = with_device(g, || f(std::slice::from_ref(&x))).unwrap().unwrap().remove(0);
            assert_close(&values(&eager), &values(&want), 1e-4, 1e-3, &format!("{what}: eager"));
            let compiled = kiln::compile(f.clone());
            let got = with_device(g, || compiled.call(std::slice::from_ref(&x))).unwrap().unwrap().remove(0);
            assert_close(&values(&got), &values(&want), 1e-4, 1e-3, &format!("{what}: compiled"));
            // x's gradient runs the kernel of the other orientation.
            let c = array(&rng.vec(want.size(), -1.0, 1.0), want.shape(), Dtype::F32);
            let (_, grads) = with_device(g, || vjp(f.clone(), std::slice::from_ref(&x), std::slice::from_ref(&c))).unwrap().unwrap();
            let other = if transpose { "quantized_columns" } else { "quantized_rows" };
            assert!(kernels_in(&grads[0]).contains(other), "{what}: dx ran {:?}", kernels_in(&grads[0]));
            let (qr, t) = (q.clone(), transpose);
            let reference = move |a: &[Array]| Ok(vec![qr.reference(&a[0], t)]);
            let (_, want_grads) = vjp(reference, &[f64s(&x)], &[f64s(&c)]).unwrap();
            assert_close(&values(&grads[0]), &values(&want_grads[0]), 1e-4, 1e-3, &format!("{what}: dx"));
        }
    }
}
