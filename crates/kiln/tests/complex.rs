//! complex64 through the core, against references computed here in float64 from the real
//! functions (e^{x+iy} = e^x (cos y + i sin y), products by the schoolbook formula, sums by
//! loops) and gradients against central differences of the real and imaginary parts.

mod common;

use common::{assert_close, check_err, Rng};
use kiln::{ops, Array, Complex64, Dtype, ErrorKind};

fn complex_array(parts: &[(f64, f64)], shape: &[usize]) -> Array {
    let values: Vec<Complex64> = parts.iter().map(|&(re, im)| Complex64::new(re as f32, im as f32)).collect();
    Array::from_slice(&values, shape).unwrap()
}

fn random_parts(rng: &mut Rng, n: usize) -> Vec<(f64, f64)> {
    // Values exact in float32, so references start from the array's own numbers.
    (0..n).map(|_| ((rng.uniform(-2.0, 2.0) as f32) as f64, (rng.uniform(-2.0, 2.0) as f32) as f64)).collect()
}

/// The parts of a complex64 array, flattened as (re0, im0, re1, im1, ...).
fn flat(a: &Array) -> Vec<f64> {
    a.to_vec::<Complex64>().unwrap().iter().flat_map(|z| [z.re as f64, z.im as f64]).collect()
}

fn flat_parts(parts: &[(f64, f64)]) -> Vec<f64> {
    parts.iter().flat_map(|&(re, im)| [re, im]).collect()
}

fn mul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

#[test]
fn promotion_puts_complex64_above_every_dtype() {
    for d in Dtype::ALL {
        assert_eq!(kiln::promote_types(d, Dtype::C64), Dtype::C64, "{d}");
    }
    let z = complex_array(&[(1.0, 2.0)], &[1]);
    assert_eq!(ops::add(&z, 1.5).unwrap().dtype(), Dtype::C64);
    assert_eq!(ops::add(Array::from_slice(&[1.0f64], &[1]).unwrap(), &z).unwrap().dtype(), Dtype::C64);
    assert_eq!(ops::exp(&z).unwrap().dtype(), Dtype::C64);
    assert_eq!(ops::abs(&z).unwrap().dtype(), Dtype::F32);
    assert_eq!(ops::real(&z).unwrap().dtype(), Dtype::F32);
    assert_eq!(Dtype::from_name("complex64"), Some(Dtype::C64));
    assert_eq!(Dtype::C64.size(), 8);
}

#[test]
fn arithmetic_and_functions_match_float64_formulas() {
    let mut rng = Rng::new(3);
    let (av, bv) = (random_parts(&mut rng, 40), random_parts(&mut rng, 40));
    let (a, b) = (complex_array(&av, &[5, 8]), complex_array(&bv, &[5, 8]));
    let each = |f: &dyn Fn((f64, f64), (f64, f64)) -> (f64, f64)| -> Vec<f64> {
        flat_parts(&av.iter().zip(&bv).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>())
    };
    let tol = 2e-6;
    assert_close(&flat(&ops::add(&a, &b).unwrap()), &each(&|x, y| (x.0 + y.0, x.1 + y.1)), tol, 1e-6, "add");
    assert_close(&flat(&ops::subtract(&a, &b).unwrap()), &each(&|x, y| (x.0 - y.0, x.1 - y.1)), tol, 1e-6, "subtract");
    assert_close(&flat(&ops::multiply(&a, &b).unwrap()), &each(&|x, y| mul(x, y)), tol, 1e-6, "multiply");
    let div = |x: (f64, f64), y: (f64, f64)| {
        let d = y.0 * y.0 + y.1 * y.1;
        ((x.0 * y.0 + x.1 * y.1) / d, (x.1 * y.0 - x.0 * y.1) / d)
    };
    assert_close(&flat(&ops::divide(&a, &b).unwrap()), &each(&div), 1e-5, 1e-5, "divide");
    let exp = |x: (f64, f64)| (x.0.exp() * x.1.cos(), x.0.exp() * x.1.sin());
    assert_close(&flat(&ops::exp(&a).unwrap()), &each(&|x, _| exp(x)), tol, 1e-6, "exp");
    let log = |x: (f64, f64)| (x.0.hypot(x.1).ln(), x.1.atan2(x.0));
    assert_close(&flat(&ops::log(&a).unwrap()), &each(&|x, _| log(x)), tol, 1e-6, "log");
    // sqrt(z)² = z, with the principal root's non-negative real part.
    let root = ops::sqrt(&a).unwrap();
    assert!(root.to_vec::<Complex64>().unwrap().iter().all(|z| z.re >= 0.0));
    assert_close(&flat(&ops::square(&root).unwrap()), &flat_parts(&av), 1e-5, 1e-5, "sqrt squared");
    let sin = |x: (f64, f64)| (x.0.sin() * x.1.cosh(), x.0.cos() * x.1.sinh());
    assert_close(&flat(&ops::sin(&a).unwrap()), &each(&|x, _| sin(x)), tol, 1e-6, "sin");
    let cosh = |x: (f64, f64)| (x.0.cosh() * x.1.cos(), x.0.sinh() * x.1.sin());
    assert_close(&flat(&ops::cosh(&a).unwrap()), &each(&|x, _| cosh(x)), tol, 1e-6, "cosh");
    // a^b = exp(b log a)
    assert_close(&flat(&ops::power(&a, &b).unwrap()), &each(&|x, y| exp(mul(y, log(x)))), 1e-4, 1e-5, "power");
    let abs: Vec<f64> = av.iter().map(|x| x.0.hypot(x.1)).collect();
    assert_close(&ops::abs(&a).unwrap().to_f64_vec().unwrap(), &abs, tol, 0.0, "abs");
    let re: Vec<f64> = av.iter().map(|x| x.0).collect();
    let im: Vec<f64> = av.iter().map(|x| x.1).collect();
    assert_close(&ops::real(&a).unwrap().to_f64_vec().unwrap(), &re, 0.0, 0.0, "real");
    assert_close(&ops::imag(&a).unwrap().to_f64_vec().unwrap(), &im, 0.0, 0.0, "imag");
    let conj = ops::conjugate(&a).unwrap();
    assert_close(&flat(&conj), &each(&|x, _| (x.0, -x.1)), 0.0, 0.0, "conjugate");
    // On real arrays: real is the array, imag zeros, conjugate the array.
    let r = Array::from_slice(&[1.5f32, -2.0], &[2]).unwrap();
    assert_eq!(ops::imag(&r).unwrap().to_f64_vec().unwrap(), vec![0.0, 0.0]);
    assert_eq!(ops::conjugate(&r).unwrap().to_f64_vec().unwrap(), vec![1.5, -2.0]);
}

#[test]
fn casts_comparisons_and_special_values_follow_numpy() {
    let z = complex_array(&[(1.5, -2.0), (0.0, 0.0), (f64::NAN, 1.0), (f64::INFINITY, 0.0), (-3.0, 0.5)], &[5]);
    // complex -> real drops the imaginary part; -> bool is "either part non-zero".
    assert_eq!(ops::astype(&z, Dtype::F32).unwrap().to_f64_vec().unwrap()[..2], [1.5, 0.0]);
    assert_eq!(ops::astype(&z, Dtype::I32).unwrap().to_f64_vec().unwrap()[4], -3.0);
    assert_eq!(ops::astype(&z, Dtype::Bool).unwrap().to_f64_vec().unwrap(), vec![1.0, 0.0, 1.0, 1.0, 1.0]);
    // real -> complex has a zero imaginary part.
    let back = ops::astype(Array::from_slice(&[2.5f64, -1.0], &[2]).unwrap(), Dtype::C64).unwrap();
    assert_eq!(flat(&back), vec![2.5, 0.0, -1.0, 0.0]);
    assert_eq!(ops::isnan(&z).unwrap().to_f64_vec().unwrap(), vec![0.0, 0.0, 1.0, 0.0, 0.0]);
    assert_eq!(ops::isinf(&z).unwrap().to_f64_vec().unwrap(), vec![0.0, 0.0, 0.0, 1.0, 0.0]);
    assert_eq!(ops::isfinite(&z).unwrap().to_f64_vec().unwrap(), vec![1.0, 1.0, 0.0, 0.0, 1.0]);
    // Lexicographic order: (1.5-2j) > (1.5-3j) > (-3+0.5j).
    let w = complex_array(&[(1.5, -3.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0), (-3.0, 0.5)], &[5]);
    assert_eq!(ops::greater(&z, &w).unwrap().to_f64_vec().unwrap()[0], 1.0);
    assert_eq!(ops::equal(&z, &w).unwrap().to_f64_vec().unwrap(), vec![0.0, 1.0, 0.0, 0.0, 1.0]);
    let sorted = ops::sort(complex_array(&[(1.0, 2.0), (-1.0, 5.0), (1.0, -1.0)], &[3]), Some(0)).unwrap();
    assert_eq!(flat(&sorted), vec![-1.0, 5.0, 1.0, -1.0, 1.0, 2.0]);
    // maximum/minimum and the max/min reductions return the NaN operand itself (numpy), the
    // first one where both are NaN: its other part tells which.
    let x = complex_array(&[(f64::NAN, 1.0), (2.0, 0.0), (f64::NAN, 3.0), (1.0, 1.0)], &[4]);
    let y = complex_array(&[(0.0, 0.0), (f64::NAN, 2.0), (f64::NAN, 4.0), (1.0, 2.0)], &[4]);
    let parts = |a: Array| flat(&a).chunks(2).map(|p| (p[0].is_nan(), p[1])).collect::<Vec<_>>();
    let want = vec![(true, 1.0), (true, 2.0), (true, 3.0), (false, 2.0)];
    assert_eq!(parts(ops::maximum(&x, &y).unwrap()), want, "maximum");
    let want = vec![(true, 1.0), (true, 2.0), (true, 3.0), (false, 1.0)];
    assert_eq!(parts(ops::minimum(&x, &y).unwrap()), want, "minimum");
    let row = complex_array(&[(1.0, 0.0), (f64::NAN, 7.0), (5.0, 0.0)], &[3]);
    assert_eq!(parts(ops::max(&row, None, false).unwrap()), vec![(true, 7.0)], "max reduction");
    assert_eq!(parts(ops::min(&row, None, false).unwrap()), vec![(true, 7.0)], "min reduction");
}

#[test]
fn reductions_and_matmul_match_float64_loops() {
    let mut rng = Rng::new(5);
    let av = random_parts(&mut rng, 6 * 7);
    let a = complex_array(&av, &[6, 7]);
    let sums: Vec<(f64, f64)> = (0..6).map(|i| av[i * 7..(i + 1) * 7].iter().fold((0.0, 0.0), |s, x| (s.0 + x.0, s.1 + x.1))).collect();
    assert_close(&flat(&ops::sum(&a, Some(&[1]), false).unwrap()), &flat_parts(&sums), 1e-6, 1e-6, "row sums");
    let col: Vec<(f64, f64)> = (0..7).map(|j| (0..6).fold((1.0, 0.0), |p, i| mul(p, av[i * 7 + j]))).collect();
    assert_close(&flat(&ops::prod(&a, Some(&[0]), false).unwrap()), &flat_parts(&col), 1e-5, 1e-6, "column products");
    let mean = ops::mean(&a, None, false).unwrap();
    let total = sums.iter().fold((0.0, 0.0), |s, x| (s.0 + x.0, s.1 + x.1));
    assert_close(&flat(&mean), &[total.0 / 42.0, total.1 / 42.0], 1e-6, 1e-6, "mean");
    // var: the mean squared magnitude of the deviations, a real number (numpy's).
    let var = ops::var(&a, None, false, 0).unwrap();
    assert_eq!(var.dtype(), Dtype::F32);
    let (mr, mi) = (total.0 / 42.0, total.1 / 42.0);
    let want = av.iter().map(|x| (x.0 - mr).powi(2) + (x.1 - mi).powi(2)).sum::<f64>() / 42.0;
    assert_close(&var.to_f64_vec().unwrap(), &[want], 1e-5, 0.0, "var");
    let cs = ops::cumsum(&a, Some(1), false, true).unwrap();
    assert_close(&flat(&cs)[12..14], &[av[..7].iter().map(|x| x.0).sum(), av[..7].iter().map(|x| x.1).sum()], 1e-6, 1e-6, "cumsum");
    // (6 × 7) @ (7 × 3), and with a transposed right operand (strided read).
    let bv = random_parts(&mut rng, 7 * 3);
    let b = complex_array(&bv, &[7, 3]);
    let want: Vec<(f64, f64)> = (0..18)
        .map(|e| (0..7).fold((0.0, 0.0), |s, t| { let p = mul(av[(e / 3) * 7 + t], bv[t * 3 + e % 3]); (s.0 + p.0, s.1 + p.1) }))
        .collect();
    assert_close(&flat(&ops::matmul(&a, &b).unwrap()), &flat_parts(&want), 1e-5, 1e-5, "matmul");
    let bt = ops::transpose(ops::copy(ops::transpose(&b, None).unwrap()).unwrap(), None).unwrap();
    assert_close(&flat(&ops::matmul(&a, &bt).unwrap()), &flat_parts(&want), 1e-5, 1e-5, "matmul of a transposed view");
    // Mixed with a real matrix: promoted.
    let r = Array::from_slice(&[1.0f32; 21], &[7, 3]).unwrap();
    assert_eq!(ops::matmul(&a, &r).unwrap().dtype(), Dtype::C64);
}

/// d/dx + i d/dy of a real loss of one complex input, by central differences per part.
fn finite_difference(loss: &dyn Fn(&Array) -> f64, parts: &[(f64, f64)], shape: &[usize]) -> Vec<f64> {
    let h = 1e-2;
    let mut out = Vec::new();
    for e in 0..parts.len() {
        for part in 0..2 {
            let at = |d: f64| {
                let mut p = parts.to_vec();
                if part == 0 { p[e].0 += d } else { p[e].1 += d }
                loss(&complex_array(&p, shape))
            };
            out.push((at(h) - at(-h)) / (2.0 * h));
        }
    }
    out
}

#[test]
fn gradients_of_real_losses_are_the_partials_of_both_parts() {
    let mut rng = Rng::new(9);
    let zv = random_parts(&mut rng, 6);
    let wv = random_parts(&mut rng, 6);
    let w = complex_array(&wv, &[6]);
    // |exp(z)·w|² summed, plus the real and imaginary parts and the magnitude through a product
    // and a division: real-valued, built from holomorphic and non-holomorphic ops.
    let f = move |z: &Array| -> kiln::Result<Array> {
        let u = ops::multiply(ops::exp(z)?, &w)?;
        let sq = ops::real(ops::multiply(&u, ops::conjugate(&u)?)?)?;
        let parts = ops::add(ops::multiply(ops::real(z)?, 2.0)?, ops::imag(ops::divide(z, ops::add(&w, 3.0)?)?)?)?;
        let mag = ops::abs(ops::sin(z)?)?;
        ops::sum(ops::add(ops::add(sq, parts)?, mag)?, None, false)
    };
    let f2 = f.clone();
    let g = kiln::grad(move |x: &[Array]| Ok(vec![f2(&x[0])?]), &[0])(&[complex_array(&zv, &[6])]).unwrap();
    assert_eq!(g[0].dtype(), Dtype::C64);
    let loss = |z: &Array| f(z).unwrap().item::<f32>().unwrap() as f64;
    assert_close(&flat(&g[0]), &finite_difference(&loss, &zv, &[6]), 2e-2, 2e-2, "grad of a real loss");
    // A matmul and a product reduction in the loss.
    let m = complex_array(&random_parts(&mut rng, 6), &[3, 2]);
    let h = move |z: &Array| -> kiln::Result<Array> {
        let p = ops::matmul(ops::reshape(z, &[2, 3])?, &m)?;
        ops::sum(ops::abs(ops::prod(&p, Some(&[0]), false)?)?, None, false)
    };
    let h2 = h.clone();
    let g = kiln::grad(move |x: &[Array]| Ok(vec![h2(&x[0])?]), &[0])(&[complex_array(&zv, &[6])]).unwrap();
    let loss = |z: &Array| h(z).unwrap().item::<f32>().unwrap() as f64;
    assert_close(&flat(&g[0]), &finite_difference(&loss, &zv, &[6]), 2e-2, 2e-2, "grad through matmul and prod");
}

#[test]
fn compiled_functions_of_complex_arrays_match_eager_ones() {
    let mut rng = Rng::new(11);
    let z = complex_array(&random_parts(&mut rng, 64), &[8, 8]);
    let f = |x: &[Array]| -> kiln::Result<Vec<Array>> {
        let y = ops::multiply(ops::exp(&x[0])?, ops::conjugate(&x[0])?)?;
        // A real tail after the complex part fuses on its own.
        let r = ops::tanh(ops::add(ops::abs(&y)?, ops::real(&x[0])?)?)?;
        Ok(vec![ops::sum(&y, Some(&[1]), false)?, r])
    };
    let eager = f(std::slice::from_ref(&z)).unwrap();
    let compiled = kiln::compile(f);
    for _ in 0..2 {
        let got = compiled.call(std::slice::from_ref(&z)).unwrap();
        assert_eq!(flat(&got[0]), flat(&eager[0]));
        assert_eq!(got[1].to_f64_vec().unwrap(), eager[1].to_f64_vec().unwrap());
    }
}

#[test]
fn ops_not_defined_for_complex_are_clear_errors() {
    let z = complex_array(&[(1.0, 2.0)], &[1]);
    check_err(ops::floor(&z), ErrorKind::Dtype, "floor");
    check_err(ops::erf(&z), ErrorKind::Dtype, "erf");
    check_err(ops::argmax(&z, Some(0), false), ErrorKind::Dtype, "argmax");
    check_err(ops::remainder(&z, &z), ErrorKind::Dtype, "remainder");
    check_err(ops::softmax(&z, None, false), ErrorKind::Dtype, "softmax");
    check_err(ops::logsumexp(&z, None, false), ErrorKind::Dtype, "logsumexp");
    check_err(kiln::linalg::det(ops::reshape(&z, &[1, 1]).unwrap()), ErrorKind::Dtype, "linalg.det");
    let msg = ops::floor(&z).unwrap_err().to_string();
    assert!(msg.contains("complex64") && msg.contains("real"), "{msg}");
    check_err(ops::arange(0.0, 3.0, 1.0, Dtype::C64), ErrorKind::Dtype, "arange");
    // to_f64_vec would drop the imaginary parts.
    assert!(z.to_f64_vec().is_err());
}

#[test]
fn printing_and_files_keep_both_parts() {
    let z = complex_array(&[(1.0, 2.0), (0.5, -1.5), (f64::NAN, f64::INFINITY)], &[3]);
    assert_eq!(z.to_string(), "array([1+2j, 0.5-1.5j, nan+infj], dtype=complex64)");
    let dir = std::env::temp_dir().join(format!("kiln-complex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("z.npy");
    kiln::io::save_npy(&path, &z).unwrap();
    let back = kiln::io::load_npy(&path).unwrap();
    assert_eq!(back.dtype(), Dtype::C64);
    assert_eq!(format!("{:?}", back.to_vec::<Complex64>().unwrap()), format!("{:?}", z.to_vec::<Complex64>().unwrap()));
    let path = dir.join("z.safetensors");
    kiln::io::save_safetensors(&path, &[("z".into(), z.clone())], &[]).unwrap();
    let back = kiln::io::load_safetensors(&path).unwrap().arrays.remove(0).1;
    assert_eq!(format!("{:?}", back.to_vec::<Complex64>().unwrap()), format!("{:?}", z.to_vec::<Complex64>().unwrap()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn complex_normal_samples_have_unit_mean_square() {
    let z = kiln::random::normal(&[20000], Dtype::C64, 0.0, 1.0, Some(&kiln::random::key(4))).unwrap();
    assert_eq!(z.dtype(), Dtype::C64);
    let v = z.to_vec::<Complex64>().unwrap();
    let n = v.len() as f64;
    let (mr, mi) = (v.iter().map(|z| z.re as f64).sum::<f64>() / n, v.iter().map(|z| z.im as f64).sum::<f64>() / n);
    let (vr, vi) = (v.iter().map(|z| (z.re as f64).powi(2)).sum::<f64>() / n, v.iter().map(|z| (z.im as f64).powi(2)).sum::<f64>() / n);
    assert!(mr.abs() < 0.03 && mi.abs() < 0.03, "{mr} {mi}");
    assert!((vr - 0.5).abs() < 0.03 && (vi - 0.5).abs() < 0.03, "{vr} {vi}");
}
