//! Convolutions against direct float64 loops written from the definitions: a correlation over the
//! dilated and padded input for `conv_general`, a scatter of each input element for the
//! transposed ones, numpy's sum for `convolve`; gradients against finite differences.
mod common;

use common::derivatives;
use common::{assert_close, Rng};
use kiln::ops::{self, ConvParams, ConvolveMode};
use kiln::{Array, Dtype, ErrorKind};

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Every multi-index of `shape`, row-major.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &d in shape {
        out = out.into_iter().flat_map(|p| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    out
}

/// The settings of one reference convolution, one value per spatial axis.
struct Setting {
    stride: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    kdil: Vec<i64>,
    idil: Vec<i64>,
    groups: usize,
    flip: bool,
}

/// `conv_general` by its definition: out[n, o, co] = sum over taps k and the group's channels c of
/// x at padded position o * stride + k * kdil (zero between dilated elements and in the padding)
/// times w[co, k (flipped if asked), c].
fn reference_conv(x: &[f64], xs: &[usize], w: &[f64], ws: &[usize], s: &Setting) -> (Vec<f64>, Vec<usize>) {
    let d = xs.len() - 2;
    let (c_in, c_out) = (xs[d + 1], ws[0]);
    let (cg, og) = (c_in / s.groups, c_out / s.groups);
    let mut os = vec![xs[0]];
    for a in 0..d {
        let dilated = (xs[a + 1] as i64 - 1) * s.idil[a] + 1;
        let span = (ws[a + 1] as i64 - 1) * s.kdil[a] + 1;
        os.push(((dilated + s.lo[a] + s.hi[a] - span) / s.stride[a] + 1) as usize);
    }
    os.push(c_out);
    let (xst, wst, ost) = (strides(xs), strides(ws), strides(&os));
    let mut out = vec![0.0; os.iter().product()];
    for o in indices(&os) {
        let (n, co) = (o[0], o[d + 1]);
        let g = co / og;
        let mut acc = 0.0;
        for k in indices(&ws[1..=d]) {
            let mut xi = xst[0] * n;
            let mut inside = true;
            for a in 0..d {
                let pos = o[a + 1] as i64 * s.stride[a] + k[a] as i64 * s.kdil[a] - s.lo[a];
                if pos < 0 || pos % s.idil[a] != 0 || pos / s.idil[a] >= xs[a + 1] as i64 {
                    inside = false;
                    break;
                }
                xi += xst[a + 1] * (pos / s.idil[a]) as usize;
            }
            if !inside {
                continue;
            }
            let mut wi = wst[0] * co;
            for a in 0..d {
                let t = if s.flip { ws[a + 1] - 1 - k[a] } else { k[a] };
                wi += wst[a + 1] * t;
            }
            for c in 0..cg {
                acc += x[xi + g * cg + c] * w[wi + c];
            }
        }
        let oi: usize = o.iter().zip(&ost).map(|(i, s)| i * s).sum();
        out[oi] = acc;
    }
    (out, os)
}

/// A transposed convolution by scattering: each input element x[n, i, ci] adds x * w[co, k, ci]
/// to out[n, i * stride + k * dilation - padding, co] for the output channels of its group.
#[allow(clippy::too_many_arguments)]
fn reference_transpose(
    x: &[f64],
    xs: &[usize],
    w: &[f64],
    ws: &[usize],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    output_padding: &[i64],
    groups: usize,
) -> (Vec<f64>, Vec<usize>) {
    let d = xs.len() - 2;
    let (c_in, c_out) = (xs[d + 1], ws[0]);
    let (cg, og) = (c_in / groups, c_out / groups);
    let mut os = vec![xs[0]];
    for a in 0..d {
        os.push(((xs[a + 1] as i64 - 1) * stride[a] - 2 * padding[a] + dilation[a] * (ws[a + 1] as i64 - 1) + 1 + output_padding[a]) as usize);
    }
    os.push(c_out);
    let (xst, wst, ost) = (strides(xs), strides(ws), strides(&os));
    let mut out = vec![0.0; os.iter().product()];
    for i in indices(xs) {
        let (n, ci) = (i[0], i[d + 1]);
        let g = ci / cg;
        let xv = x[i.iter().zip(&xst).map(|(a, b)| a * b).sum::<usize>()];
        for k in indices(&ws[1..=d]) {
            let mut oi = ost[0] * n;
            let mut inside = true;
            for a in 0..d {
                let pos = i[a + 1] as i64 * stride[a] + k[a] as i64 * dilation[a] - padding[a];
                if pos < 0 || pos >= os[a + 1] as i64 {
                    inside = false;
                    break;
                }
                oi += ost[a + 1] * pos as usize;
            }
            if !inside {
                continue;
            }
            for co in g * og..(g + 1) * og {
                let wi = wst[0] * co + k.iter().zip(&wst[1..=d]).map(|(a, b)| a * b).sum::<usize>() + (ci - g * cg);
                out[oi + co] += xv * w[wi];
            }
        }
    }
    (out, os)
}

fn random(rng: &mut Rng, shape: &[usize]) -> (Vec<f64>, Array) {
    let v = rng.vec(shape.iter().product(), -1.0, 1.0);
    let a = Array::from_slice(&v, shape).unwrap();
    (v, a)
}

#[test]
fn conv_general_matches_the_definition_over_1_to_3_axes() {
    let mut rng = Rng::new(11);
    // (input shape, weight shape, stride, lo, hi, kernel dilation, input dilation, groups, flip)
    type Case = (Vec<usize>, Vec<usize>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, usize, bool);
    let cases: Vec<Case> = vec![
        (vec![2, 9, 3], vec![4, 3, 3], vec![1], vec![0], vec![0], vec![1], vec![1], 1, false),
        (vec![2, 9, 4], vec![6, 3, 2], vec![2], vec![1], vec![2], vec![2], vec![1], 2, true),
        (vec![1, 7, 2], vec![3, 2, 2], vec![3], vec![-1], vec![1], vec![1], vec![2], 1, false),
        (vec![2, 6, 5, 3], vec![4, 3, 2, 3], vec![1, 2], vec![1, 0], vec![1, 2], vec![1, 2], vec![1, 1], 1, false),
        (vec![1, 5, 6, 4], vec![6, 2, 3, 2], vec![2, 1], vec![0, 2], vec![1, 0], vec![2, 1], vec![2, 1], 2, true),
        (vec![1, 5, 6, 4], vec![4, 1, 1, 1], vec![1, 1], vec![0, 0], vec![0, 0], vec![1, 1], vec![1, 1], 4, false),
        (vec![1, 4, 5, 3, 2], vec![3, 2, 2, 2, 2], vec![1, 2, 1], vec![1, 0, 1], vec![0, 1, 1], vec![1, 1, 2], vec![1, 2, 1], 1, true),
    ];
    for (xs, ws, stride, lo, hi, kdil, idil, groups, flip) in cases {
        let (xv, x) = random(&mut rng, &xs);
        let (wv, w) = random(&mut rng, &ws);
        let s = Setting { stride, lo, hi, kdil, idil, groups, flip };
        let (want, want_shape) = reference_conv(&xv, &xs, &wv, &ws, &s);
        let params = ConvParams {
            stride: s.stride.clone(),
            padding_lo: s.lo.clone(),
            padding_hi: s.hi.clone(),
            kernel_dilation: s.kdil.clone(),
            input_dilation: s.idil.clone(),
            groups: groups as i64,
            flip,
        };
        let got = ops::conv_general(&x, &w, &params).unwrap();
        let what = format!("conv_general {xs:?} * {ws:?}");
        assert_eq!(got.shape(), &want_shape[..], "{what}");
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, &what);
    }
}

#[test]
fn conv_in_float32_and_float16_is_close_to_float64() {
    let mut rng = Rng::new(5);
    let (xs, ws) = ([2usize, 8, 8, 3], [5usize, 3, 3, 3]);
    let (xv, x) = random(&mut rng, &xs);
    let (wv, w) = random(&mut rng, &ws);
    let s = Setting { stride: vec![1, 1], lo: vec![1, 1], hi: vec![1, 1], kdil: vec![1, 1], idil: vec![1, 1], groups: 1, flip: false };
    let (want, _) = reference_conv(&xv, &xs, &wv, &ws, &s);
    for (dtype, tol) in [(Dtype::F32, 1e-5), (Dtype::F16, 2e-2), (Dtype::BF16, 1e-1)] {
        let got = ops::conv(ops::astype(&x, dtype).unwrap(), ops::astype(&w, dtype).unwrap(), &[1], &[1], &[1], 1).unwrap();
        assert_eq!(got.dtype(), dtype);
        assert_close(&got.to_f64_vec().unwrap(), &want, tol, tol, &format!("conv2d {dtype}"));
    }
}

#[test]
fn conv_transpose_matches_scattering_each_input_element() {
    let mut rng = Rng::new(3);
    // (input shape, weight shape, stride, padding, dilation, output padding, groups)
    type Case = (Vec<usize>, Vec<usize>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, usize);
    let cases: Vec<Case> = vec![
        (vec![2, 5, 3], vec![4, 3, 3], vec![1], vec![0], vec![1], vec![0], 1),
        (vec![2, 5, 4], vec![6, 3, 2], vec![2], vec![1], vec![1], vec![1], 2),
        (vec![1, 4, 2], vec![3, 2, 2], vec![3], vec![2], vec![2], vec![0], 1),
        (vec![1, 3, 4, 2], vec![3, 3, 2, 2], vec![2, 1], vec![1, 0], vec![1, 2], vec![1, 0], 1),
        (vec![1, 2, 3, 2, 2], vec![2, 2, 2, 2, 2], vec![2, 1, 2], vec![0, 1, 0], vec![1, 1, 1], vec![0, 0, 1], 1),
    ];
    for (xs, ws, stride, padding, dilation, output_padding, groups) in cases {
        let (xv, x) = random(&mut rng, &xs);
        let (wv, w) = random(&mut rng, &ws);
        let (want, want_shape) = reference_transpose(&xv, &xs, &wv, &ws, &stride, &padding, &dilation, &output_padding, groups);
        let got = ops::conv_transpose(&x, &w, &stride, &padding, &dilation, &output_padding, groups as i64).unwrap();
        let what = format!("conv_transpose {xs:?} * {ws:?} stride {stride:?} padding {padding:?}");
        assert_eq!(got.shape(), &want_shape[..], "{what}");
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, &what);
    }
}

#[test]
fn convolve_matches_numpys_sum_in_every_mode() {
    let mut rng = Rng::new(9);
    for (m, n) in [(1usize, 1usize), (7, 3), (6, 4), (3, 8), (5, 5)] {
        let (a, av) = random(&mut rng, &[m]);
        let (v, vv) = random(&mut rng, &[n]);
        let full: Vec<f64> = (0..m + n - 1)
            .map(|j| (0..m).filter(|&i| j >= i && j - i < n).map(|i| a[i] * v[j - i]).sum())
            .collect();
        let (long, short) = (m.max(n), m.min(n));
        let same_start = (short - 1) / 2;
        for (mode, want) in [
            (ConvolveMode::Full, full.clone()),
            (ConvolveMode::Same, full[same_start..same_start + long].to_vec()),
            (ConvolveMode::Valid, full[short - 1..long].to_vec()),
        ] {
            let got = ops::convolve(&av, &vv, mode).unwrap().to_f64_vec().unwrap();
            assert_close(&got, &want, 1e-12, 1e-12, &format!("convolve {m} {n} {mode:?}"));
        }
    }
}

#[test]
fn conv_gradients_match_finite_differences() {
    let mut rng = Rng::new(21);
    let (_, x) = random(&mut rng, &[2, 5, 4, 4]);
    let (_, w) = random(&mut rng, &[6, 3, 2, 2]);
    let conv = |a: &[Array]| {
        let p = ConvParams { stride: vec![2, 1], padding_lo: vec![1], padding_hi: vec![0, 1], groups: 2, ..ConvParams::default() };
        ops::conv_general(&a[0], &a[1], &p)
    };
    derivatives::check("conv_general", &conv, &[x, w], 1);
    let (_, x) = random(&mut rng, &[1, 4, 3]);
    let (_, w) = random(&mut rng, &[2, 3, 3]);
    let transposed = |a: &[Array]| ops::conv_transpose(&a[0], &a[1], &[2], &[1], &[1], &[1], 1);
    derivatives::check("conv_transpose", &transposed, &[x, w], 2);
}

#[test]
fn conv_refuses_bad_input_with_the_shapes() {
    let x = Array::from_slice(&[0.0f32; 24], &[1, 8, 3]).unwrap();
    let w = Array::from_slice(&[0.0f32; 18], &[2, 3, 3]).unwrap();
    let fails = |r: kiln::Result<Array>, kind: ErrorKind, needle: &str| {
        let e = r.expect_err(needle);
        assert_eq!(e.kind, kind, "{e}");
        let text = e.to_string();
        assert!(text.contains("conv") && text.contains(needle), "{text}");
    };
    let ints = ops::astype(&x, Dtype::I32).unwrap();
    fails(ops::conv(&ints, &w, &[1], &[0], &[1], 1), ErrorKind::Dtype, "floating point");
    let w4 = Array::from_slice(&[0.0f32; 24], &[2, 3, 4]).unwrap();
    fails(ops::conv(&x, &w4, &[1], &[0], &[1], 1), ErrorKind::Shape, "(2, 3, 4)");
    fails(ops::conv(&x, &w, &[1], &[0], &[1], 2), ErrorKind::Shape, "groups=2");
    fails(ops::conv(&x, &w, &[0], &[0], &[1], 1), ErrorKind::Value, "stride must be positive");
    fails(ops::conv(&x, &w, &[1, 1], &[0], &[1], 1), ErrorKind::Value, "stride [1, 1]");
    fails(ops::conv(&x, &w, &[1], &[0], &[5], 1), ErrorKind::Shape, "smaller than the kernel");
    let flat = Array::from_slice(&[0.0f32; 8], &[8]).unwrap();
    fails(ops::conv(&flat, &w, &[1], &[0], &[1], 1), ErrorKind::Shape, "(N, ..., C_in)");
    fails(ops::convolve(&x, &flat, ConvolveMode::Full), ErrorKind::Shape, "1-D");
}

#[test]
fn compiled_and_vmapped_conv_equal_eager() {
    let mut rng = Rng::new(4);
    let (_, x) = random(&mut rng, &[3, 2, 6, 5, 2]);
    let (_, w) = random(&mut rng, &[4, 3, 2, 2]);
    let f = |a: &[Array]| -> kiln::Result<Vec<Array>> {
        let p = ConvParams { stride: vec![1, 2], padding_lo: vec![1], padding_hi: vec![1], ..ConvParams::default() };
        Ok(vec![ops::conv_general(&a[0], &a[1], &p)?])
    };
    let x0 = ops::take(&x, Array::from_slice(&[0i32], &[]).unwrap(), Some(0)).unwrap();
    let eager = f(&[x0.clone(), w.clone()]).unwrap();
    let compiled = kiln::compile(f).call(&[x0, w.clone()]).unwrap();
    assert_close(&compiled[0].to_f64_vec().unwrap(), &eager[0].to_f64_vec().unwrap(), 1e-12, 1e-12, "compiled conv");
    // vmap over a leading axis of the input: each slice convolved alone.
    let batched = kiln::vmap(f, &[Some(0), None], &[Some(0)])(&[x.clone(), w.clone()]).unwrap();
    for i in 0..3i32 {
        let xi = ops::take(&x, Array::from_slice(&[i], &[]).unwrap(), Some(0)).unwrap();
        let want = f(&[xi, w.clone()]).unwrap()[0].to_f64_vec().unwrap();
        let got = ops::take(&batched[0], Array::from_slice(&[i], &[]).unwrap(), Some(0)).unwrap();
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, "vmapped conv");
    }
}

/// Inputs large enough that the CPU kernels cut the output rows into several blocks shared by the
/// threads, and a 1x1 convolution whose patches are the input itself, against the definition:
/// the convolution and its weight's gradient.
#[test]
fn large_and_pointwise_convs_match_the_definition() {
    let mut rng = Rng::new(17);
    let same = |n: usize| vec![n as i64; 2];
    for (xs, ws, padding, groups) in [
        (vec![4usize, 24, 24, 16], vec![8usize, 3, 3, 16], 1, 1),
        (vec![4, 24, 24, 16], vec![8, 1, 1, 16], 0, 1),
        (vec![3, 20, 22, 12], vec![6, 3, 3, 4], 1, 3),
        // Depthwise, with one and with two outputs per channel.
        (vec![2, 30, 30, 8], vec![8, 3, 3, 1], 1, 8),
        (vec![3, 20, 22, 6], vec![12, 3, 3, 1], 1, 6),
    ] {
        let (xv, x) = random(&mut rng, &xs);
        let (wv, w) = random(&mut rng, &ws);
        let s = Setting { stride: same(1), lo: same(padding), hi: same(padding), kdil: same(1), idil: same(1), groups, flip: false };
        let (want, want_shape) = reference_conv(&xv, &xs, &wv, &ws, &s);
        let what = format!("conv2d {xs:?} * {ws:?}");
        let got = ops::conv(&x, &w, &[1], &[padding as i64], &[1], groups as i64).unwrap();
        assert_eq!(got.shape(), &want_shape[..], "{what}");
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, &what);
        let single = ops::conv(ops::astype(&x, Dtype::F32).unwrap(), ops::astype(&w, Dtype::F32).unwrap(), &[1], &[padding as i64], &[1], groups as i64);
        assert_close(&single.unwrap().to_f64_vec().unwrap(), &want, 1e-4, 1e-4, &format!("{what} in float32"));
        // The weight's gradient: dw[o, i, j, c] = sum of cotangent[n, y, z, o] times the input
        // the tap (i, j) of output (y, z) reads, channel c of o's group.
        let (cv, cot) = random(&mut rng, &want_shape);
        let conv = |a: &[Array]| Ok(vec![ops::conv(&a[0], &a[1], &[1], &[padding as i64], &[1], groups as i64)?]);
        let (_, grads) = kiln::vjp(conv, &[x.clone(), w.clone()], &[cot]).unwrap();
        let (c_out, kh, kw, cg) = (ws[0], ws[1], ws[2], ws[3]);
        let (oh, ow) = (want_shape[1], want_shape[2]);
        let mut dw = vec![0.0; c_out * kh * kw * cg];
        for (n, y, z, o) in (0..xs[0]).flat_map(|n| (0..oh).flat_map(move |y| (0..ow).flat_map(move |z| (0..c_out).map(move |o| (n, y, z, o))))) {
            let g = o / (c_out / groups);
            for (i, j, c) in (0..kh).flat_map(|i| (0..kw).flat_map(move |j| (0..cg).map(move |c| (i, j, c)))) {
                let (r, q) = ((y + i) as i64 - padding as i64, (z + j) as i64 - padding as i64);
                if r < 0 || q < 0 || r >= xs[1] as i64 || q >= xs[2] as i64 {
                    continue;
                }
                let xi = ((n * xs[1] + r as usize) * xs[2] + q as usize) * xs[3] + g * cg + c;
                dw[((o * kh + i) * kw + j) * cg + c] += cv[((n * oh + y) * ow + z) * c_out + o] * xv[xi];
            }
        }
        assert_close(&grads[1].to_f64_vec().unwrap(), &dw, 1e-10, 1e-10, &format!("{what}: weight gradient"));
    }
}

/// The CPU kernels' rules: a weight batched under vmap (the composition's batching), and second
/// derivatives (each gradient, differentiated again) against finite differences.
#[test]
fn conv_with_a_batched_weight_and_second_derivatives() {
    let mut rng = Rng::new(8);
    let (_, x) = random(&mut rng, &[1, 5, 5, 2]);
    let (_, w) = random(&mut rng, &[2, 3, 2, 3, 2]);
    let f = |a: &[Array]| -> kiln::Result<Vec<Array>> { Ok(vec![ops::conv(&a[0], &a[1], &[1], &[1], &[1], 1)?]) };
    let batched = kiln::vmap(f, &[None, Some(0)], &[Some(0)])(&[x.clone(), w.clone()]).unwrap();
    for i in 0..2i32 {
        let wi = ops::take(&w, Array::from_slice(&[i], &[]).unwrap(), Some(0)).unwrap();
        let want = f(&[x.clone(), wi]).unwrap()[0].to_f64_vec().unwrap();
        let got = ops::take(&batched[0], Array::from_slice(&[i], &[]).unwrap(), Some(0)).unwrap();
        assert_close(&got.to_f64_vec().unwrap(), &want, 1e-12, 1e-12, "conv vmapped over its weight");
    }
    let (_, x) = random(&mut rng, &[1, 4, 4, 2]);
    let (_, w) = random(&mut rng, &[2, 2, 2, 2]);
    // The gradient with respect to the input of sum(conv(x, w)^2), itself differentiated.
    let input_grad = |a: &[Array]| {
        let loss = |b: &[Array]| {
            let y = ops::conv(&b[0], &b[1], &[1], &[1], &[1], 1)?;
            Ok(vec![ops::sum(ops::multiply(&y, &y)?, None, false)?])
        };
        Ok(kiln::grad(loss, &[0])(a)?.remove(0))
    };
    derivatives::check("grad of conv", &input_grad, &[x.clone(), w.clone()], 3);
    // The same for the gradient with respect to the weight (the CPU's weight-gradient kernel and
    // its own rules), with groups and a stride.
    let weight_grad = |a: &[Array]| {
        let loss = |b: &[Array]| {
            let y = ops::conv(&b[0], &b[1], &[2], &[1], &[1], 2)?;
            Ok(vec![ops::sum(ops::multiply(&y, &y)?, None, false)?])
        };
        Ok(kiln::grad(loss, &[1])(a)?.remove(0))
    };
    let (_, w2) = random(&mut rng, &[4, 2, 2, 1]);
    derivatives::check("grad of conv by its weight", &weight_grad, &[x.clone(), w2], 6);
    // Depthwise (each group one input channel, two outputs each), with a stride.
    let depthwise = |a: &[Array]| ops::conv(&a[0], &a[1], &[2, 1], &[1], &[1], 2);
    let (_, w3) = random(&mut rng, &[4, 3, 2, 1]);
    derivatives::check("depthwise conv", &depthwise, &[x, w3], 7);
    // Every setting at once, in 1 and 3 dimensions (the input's gradient is itself a convolution
    // with the settings rearranged).
    let p = ConvParams {
        stride: vec![2],
        padding_lo: vec![-1],
        padding_hi: vec![2],
        kernel_dilation: vec![2],
        input_dilation: vec![2],
        groups: 2,
        flip: true,
    };
    let (_, x) = random(&mut rng, &[2, 7, 4]);
    let (_, w) = random(&mut rng, &[4, 3, 2]);
    derivatives::check("conv_general with every setting", &|a: &[Array]| ops::conv_general(&a[0], &a[1], &p), &[x, w], 4);
    let p = ConvParams { stride: vec![1, 2, 1], padding_lo: vec![1, 0, 2], padding_hi: vec![0], kernel_dilation: vec![1, 1, 2], ..ConvParams::default() };
    let (_, x) = random(&mut rng, &[1, 3, 4, 4, 2]);
    let (_, w) = random(&mut rng, &[2, 2, 2, 2, 2]);
    derivatives::check("conv3d", &|a: &[Array]| ops::conv_general(&a[0], &a[1], &p), &[x, w], 5);
}
