//! Fourier transforms against a direct O(n²) DFT written here in float64, over one and several
//! axes, with cropping and padding, the real transforms and their inverses, the three
//! normalisations, gradients against finite differences, vmap and compile.

mod common;

use common::{assert_close, Rng};
use kiln::ops::fft::{fftn, ifftn, irfftn, rfftn, FftNorm};
use kiln::{ops, Array, Complex64, Dtype};

type Z = (f64, f64);

fn complex_array(v: &[Z], shape: &[usize]) -> Array {
    let values: Vec<Complex64> = v.iter().map(|&(re, im)| Complex64::new(re as f32, im as f32)).collect();
    Array::from_slice(&values, shape).unwrap()
}

fn flat(a: &Array) -> Vec<f64> {
    a.to_vec::<Complex64>().unwrap().iter().flat_map(|z| [z.re as f64, z.im as f64]).collect()
}

fn flat_parts(v: &[Z]) -> Vec<f64> {
    v.iter().flat_map(|&(re, im)| [re, im]).collect()
}

fn random(rng: &mut Rng, n: usize) -> Vec<Z> {
    (0..n).map(|_| ((rng.uniform(-1.0, 1.0) as f32) as f64, (rng.uniform(-1.0, 1.0) as f32) as f64)).collect()
}

/// The DFT of row-major `v` (shape `shape`) along `axis`, forward or inverse (with 1/n).
fn dft_axis(v: &[Z], shape: &[usize], axis: usize, inverse: bool) -> Vec<Z> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![(0.0, 0.0); v.len()];
    for (idx, o) in out.iter_mut().enumerate() {
        let (outer, k, i) = (idx / (n * inner), (idx / inner) % n, idx % inner);
        let mut acc = (0.0, 0.0);
        for j in 0..n {
            let x = v[(outer * n + j) * inner + i];
            let t = sign * 2.0 * std::f64::consts::PI * (j * k) as f64 / n as f64;
            acc.0 += x.0 * t.cos() - x.1 * t.sin();
            acc.1 += x.0 * t.sin() + x.1 * t.cos();
        }
        let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
        *o = (acc.0 * scale, acc.1 * scale);
    }
    out
}

#[test]
fn transforms_match_a_direct_dft_on_every_axis() {
    let mut rng = Rng::new(1);
    let shape = [3, 5, 6];
    let v = random(&mut rng, 90);
    let x = complex_array(&v, &shape);
    for axes in [vec![2], vec![0], vec![1, 2], vec![2, 0], vec![0, 1, 2]] {
        let mut want = v.clone();
        for &a in &axes {
            want = dft_axis(&want, &shape, a, false);
        }
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let got = fftn(&x, None, Some(&ax), FftNorm::Backward).unwrap();
        assert_close(&flat(&got), &flat_parts(&want), 1e-5, 1e-5, &format!("fftn over {axes:?}"));
        // The inverse undoes it.
        let back = ifftn(&got, None, Some(&ax), FftNorm::Backward).unwrap();
        assert_close(&flat(&back), &flat_parts(&v), 1e-5, 1e-5, &format!("ifftn over {axes:?}"));
    }
    // Prime and composite lengths.
    for n in [1usize, 2, 7, 12, 97, 128] {
        let v = random(&mut rng, n);
        let got = fftn(complex_array(&v, &[n]), None, None, FftNorm::Backward).unwrap();
        assert_close(&flat(&got), &flat_parts(&dft_axis(&v, &[n], 0, false)), 1e-5, 1e-4, &format!("length {n}"));
    }
}

#[test]
fn lengths_crop_and_pad_and_norms_scale() {
    let mut rng = Rng::new(2);
    let v = random(&mut rng, 10);
    let x = complex_array(&v, &[10]);
    // Cropped to 6, padded to 13.
    let cropped = dft_axis(&v[..6], &[6], 0, false);
    assert_close(&flat(&fftn(&x, Some(&[6]), None, FftNorm::Backward).unwrap()), &flat_parts(&cropped), 1e-5, 1e-5, "cropped");
    let mut padded = v.clone();
    padded.resize(13, (0.0, 0.0));
    let want = dft_axis(&padded, &[13], 0, false);
    assert_close(&flat(&fftn(&x, Some(&[13]), None, FftNorm::Backward).unwrap()), &flat_parts(&want), 1e-5, 1e-5, "padded");
    let full = dft_axis(&v, &[10], 0, false);
    let scaled = |s: f64| flat_parts(&full.iter().map(|z| (z.0 * s, z.1 * s)).collect::<Vec<_>>());
    assert_close(&flat(&fftn(&x, None, None, FftNorm::Ortho).unwrap()), &scaled(1.0 / 10f64.sqrt()), 1e-5, 1e-5, "ortho");
    assert_close(&flat(&fftn(&x, None, None, FftNorm::Forward).unwrap()), &scaled(0.1), 1e-5, 1e-5, "forward");
    let y = complex_array(&full, &[10]);
    assert_close(&flat(&ifftn(&y, None, None, FftNorm::Forward).unwrap()), &flat_parts(&v).iter().map(|x| x * 10.0).collect::<Vec<_>>(), 1e-5, 1e-4, "inverse with norm=forward");
}

#[test]
fn real_transforms_keep_half_the_spectrum_and_invert() {
    let mut rng = Rng::new(3);
    for (shape, axes) in [(vec![9usize], vec![0usize]), (vec![4, 8], vec![0, 1]), (vec![4, 7], vec![1, 0])] {
        let n: usize = shape.iter().product();
        let re: Vec<f64> = (0..n).map(|_| (rng.uniform(-1.0, 1.0) as f32) as f64).collect();
        let x = Array::from_slice(&re.iter().map(|&v| v as f32).collect::<Vec<_>>(), &shape).unwrap();
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let y = rfftn(&x, None, Some(&ax), FftNorm::Backward).unwrap();
        let last = *axes.last().unwrap();
        let mut want_shape = shape.clone();
        want_shape[last] = shape[last] / 2 + 1;
        assert_eq!(y.shape(), want_shape.as_slice());
        // The full transform, then the first n/2 + 1 along the real axis.
        let mut full: Vec<Z> = re.iter().map(|&v| (v, 0.0)).collect();
        for &a in &axes {
            full = dft_axis(&full, &shape, a, false);
        }
        let kept: Vec<Z> = (0..y.size())
            .map(|i| {
                let mut idx = vec![0; shape.len()];
                let mut r = i;
                for d in (0..shape.len()).rev() {
                    idx[d] = r % want_shape[d];
                    r /= want_shape[d];
                }
                full[idx.iter().zip(&shape).fold(0, |acc, (&k, &s)| acc * s + k)]
            })
            .collect();
        assert_close(&flat(&y), &flat_parts(&kept), 1e-5, 1e-5, &format!("rfftn {shape:?} {axes:?}"));
        let s: Vec<i64> = axes.iter().map(|&a| shape[a] as i64).collect();
        let back = irfftn(&y, Some(&s), Some(&ax), FftNorm::Backward).unwrap();
        assert_eq!((back.shape(), back.dtype()), (shape.as_slice(), Dtype::F32));
        assert_close(&back.to_f64_vec().unwrap(), &re, 1e-5, 1e-5, &format!("irfftn {shape:?} {axes:?}"));
    }
}

/// A real loss and its gradient by central differences over both parts of each input value.
fn check_grad(f: &dyn Fn(&Array) -> kiln::Result<Array>, x: &Array, what: &str) {
    let loss = |a: &Array| f(a).unwrap().item::<f32>().unwrap() as f64;
    let g = kiln::grad(|v: &[Array]| Ok(vec![f(&v[0])?]), &[0])(std::slice::from_ref(x)).unwrap().remove(0);
    let h = 1e-2;
    let complex = x.dtype().is_complex();
    let base: Vec<Z> = if complex {
        x.to_vec::<Complex64>().unwrap().iter().map(|z| (z.re as f64, z.im as f64)).collect()
    } else {
        x.to_f64_vec().unwrap().iter().map(|&v| (v, 0.0)).collect()
    };
    let make = |v: &[Z]| if complex { complex_array(v, x.shape()) } else {
        Array::from_slice(&v.iter().map(|z| z.0 as f32).collect::<Vec<_>>(), x.shape()).unwrap()
    };
    let mut fd = Vec::new();
    for e in 0..base.len() {
        for part in 0..if complex { 2 } else { 1 } {
            let at = |d: f64| {
                let mut p = base.clone();
                if part == 0 { p[e].0 += d } else { p[e].1 += d }
                loss(&make(&p))
            };
            fd.push((at(h) - at(-h)) / (2.0 * h));
        }
    }
    let got = if complex { flat(&g) } else { g.to_f64_vec().unwrap() };
    assert_close(&got, &fd, 1e-2, 1e-2, what);
}

#[test]
fn gradients_match_finite_differences_for_every_kind() {
    let mut rng = Rng::new(4);
    let z = complex_array(&random(&mut rng, 12), &[3, 4]);
    let r = Array::from_slice(&(0..12).map(|_| rng.uniform(-1.0, 1.0) as f32).collect::<Vec<_>>(), &[3, 4]).unwrap();
    let w = complex_array(&random(&mut rng, 12), &[3, 4]);
    // A weighted sum of real parts after the transform, so every output value matters.
    let weighted = move |y: Array| -> kiln::Result<Array> {
        let wy = ops::multiply(&y, ops::slice(&w, &[])?)?;
        ops::sum(ops::add(ops::real(&wy)?, ops::abs(&y)?)?, None, false)
    };
    let w1 = weighted.clone();
    check_grad(&move |x| w1(fftn(x, None, None, FftNorm::Backward)?), &z, "fftn");
    let w2 = weighted.clone();
    check_grad(&move |x| w2(ifftn(x, None, Some(&[-1]), FftNorm::Ortho)?), &z, "ifft ortho");
    let w3 = weighted.clone();
    check_grad(&move |x| w3(ops::pad(rfftn(x, None, None, FftNorm::Backward)?, &[(0, 0), (0, 1)], 0.0)?), &r, "rfftn");
    // irfftn of a (3, 3) half spectrum gives (3, 4) real values; (3, 3) of odd length 5 too.
    let half = complex_array(&random(&mut rng, 9), &[3, 3]);
    check_grad(&|x| ops::sum(ops::square(irfftn(x, None, None, FftNorm::Backward)?)?, None, false), &half, "irfftn even");
    check_grad(&|x| ops::sum(ops::sin(irfftn(x, Some(&[5]), None, FftNorm::Backward)?)?, None, false), &half, "irfft odd");
}

#[test]
fn vmap_and_compile_agree_with_eager_transforms() {
    let mut rng = Rng::new(5);
    let z = complex_array(&random(&mut rng, 24), &[2, 3, 4]);
    let f = |x: &[Array]| -> kiln::Result<Vec<Array>> { Ok(vec![fftn(&x[0], None, Some(&[-1, 0]), FftNorm::Backward)?]) };
    let per_example: Vec<f64> = (0..2)
        .flat_map(|i| flat(&f(&[ops::take(&z, Array::scalar(i), Some(0)).unwrap()]).unwrap()[0]))
        .collect();
    let batched = kiln::vmap(f, &[Some(0)], &[Some(0)])(std::slice::from_ref(&z)).unwrap();
    assert_close(&flat(&batched[0]), &per_example, 1e-6, 1e-6, "vmapped fftn");
    let g = |x: &[Array]| -> kiln::Result<Vec<Array>> {
        let y = rfftn(ops::real(&x[0])?, None, None, FftNorm::Backward)?;
        Ok(vec![irfftn(ops::multiply(&y, 2.0)?, Some(&[3, 4]), Some(&[1, 2]), FftNorm::Backward)?])
    };
    let eager = g(std::slice::from_ref(&z)).unwrap();
    let compiled = kiln::compile(g);
    let got = compiled.call(std::slice::from_ref(&z)).unwrap();
    assert_eq!(got[0].to_f64_vec().unwrap(), eager[0].to_f64_vec().unwrap());
}

#[test]
fn bad_arguments_are_clear_errors() {
    let x = complex_array(&[(1.0, 0.0); 4], &[4]);
    let msg = |r: kiln::Result<Array>| r.unwrap_err().to_string();
    assert!(msg(fftn(Array::scalar(1.0f32), None, None, FftNorm::Backward)).contains("at least one dimension"));
    assert!(msg(fftn(&x, Some(&[0]), None, FftNorm::Backward)).contains("invalid transform length 0"));
    assert!(msg(fftn(&x, None, Some(&[0, 0]), FftNorm::Backward)).contains("twice"));
    assert!(msg(fftn(&x, None, Some(&[1]), FftNorm::Backward)).contains("axis"));
    assert!(msg(fftn(&x, Some(&[4, 4]), Some(&[0]), FftNorm::Backward)).contains("2 lengths for 1 axes"));
    assert!(msg(rfftn(&x, None, None, FftNorm::Backward)).contains("real input"));
    assert!(msg(irfftn(complex_array(&[(1.0, 0.0)], &[1]), None, None, FftNorm::Backward)).contains("invalid transform length 0"));
    assert!(FftNorm::from_name("fft", "sideways").unwrap_err().to_string().contains("backward"));
}
