//! Random numbers: determinism, independence and distributions, with bounds derived from the
//! sample size (about 6 standard errors, so a correct sampler fails with negligible probability).
use kiln::{ops, random, Array, Dtype, ErrorKind};

const N: usize = 200_000;

fn stats(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0))
}

#[test]
fn same_key_same_numbers_and_split_halves_differ() {
    let k = random::key(42);
    let a = random::uniform(0.0, 1.0, &[1000], Dtype::F32, Some(&k)).unwrap().to_vec::<f32>().unwrap();
    let b = random::uniform(0.0, 1.0, &[1000], Dtype::F32, Some(&k)).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    let ks = random::split(&k, 2).unwrap();
    assert_eq!(ks.shape(), &[2, 2]);
    let k0 = ops::reshape(ops::slice_axis(&ks, 0, 0, 1).unwrap(), &[2]).unwrap();
    let k1 = ops::reshape(ops::slice_axis(&ks, 0, 1, 2).unwrap(), &[2]).unwrap();
    let x = random::uniform(0.0, 1.0, &[N], Dtype::F64, Some(&k0)).unwrap().to_f64_vec().unwrap();
    let y = random::uniform(0.0, 1.0, &[N], Dtype::F64, Some(&k1)).unwrap().to_f64_vec().unwrap();
    let (mx, vx) = stats(&x);
    let (my, vy) = stats(&y);
    let cov = x.iter().zip(&y).map(|(a, b)| (a - mx) * (b - my)).sum::<f64>() / N as f64;
    let corr = cov / (vx * vy).sqrt();
    assert!(corr.abs() < 6.0 / (N as f64).sqrt(), "correlation {corr}");
    // The global state: seeding twice replays the same sequence, and draws advance it.
    random::seed(7);
    let s1 = random::normal(&[5], Dtype::F32, 0.0, 1.0, None).unwrap().to_vec::<f32>().unwrap();
    let s2 = random::normal(&[5], Dtype::F32, 0.0, 1.0, None).unwrap().to_vec::<f32>().unwrap();
    random::seed(7);
    let s3 = random::normal(&[5], Dtype::F32, 0.0, 1.0, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(s1, s3);
    assert_ne!(s1, s2);
    let st = random::state();
    assert_eq!((st.dtype(), st.shape()), (Dtype::U32, &[2usize][..]));
    // set_state replays from a captured state.
    let a = random::bits(&[4], 4, None).unwrap().to_vec::<u32>().unwrap();
    random::set_state(&st).unwrap();
    assert_eq!(random::bits(&[4], 4, None).unwrap().to_vec::<u32>().unwrap(), a);
    // Threads drawing from the global state at once each get their own subkey.
    let draws: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..50).map(|_| random::bits(&[4], 4, None).unwrap().to_vec::<u32>().unwrap()).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut unique = draws.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), draws.len(), "two draws from the global state repeated a subkey");
}

#[test]
fn every_sampler_is_deterministic_for_a_key() {
    let k = random::key(77);
    let draw = || -> Vec<Vec<f64>> {
        vec![
            random::normal(&[64], Dtype::F32, 1.0, 2.0, Some(&k)).unwrap().to_f64_vec().unwrap(),
            random::truncated_normal(-1.0, 2.0, &[64], Dtype::F64, Some(&k)).unwrap().to_f64_vec().unwrap(),
            random::bernoulli(0.5, Some(&[64]), Some(&k)).unwrap().to_f64_vec().unwrap(),
            random::randint(0, 100, &[64], Dtype::I64, Some(&k)).unwrap().to_f64_vec().unwrap(),
            random::gumbel(&[64], Dtype::F64, Some(&k)).unwrap().to_f64_vec().unwrap(),
            random::permutation(64, Some(&k)).unwrap().to_f64_vec().unwrap(),
        ]
    };
    assert_eq!(draw(), draw());
    // A small draw is the prefix of a large one (the bits do not depend on how work is split).
    let small = random::bits(&[10], 4, Some(&k)).unwrap().to_vec::<u32>().unwrap();
    let large = random::bits(&[300_000], 4, Some(&k)).unwrap().to_vec::<u32>().unwrap();
    assert_eq!(&large[..10], &small[..]);
}

#[test]
fn samplers_with_array_arguments_and_float64() {
    let k = random::key(5);
    // bernoulli broadcasts an array p to the shape.
    let p = Array::from_slice(&[0.0f32, 1.0, 0.5], &[3, 1]).unwrap();
    let b = random::bernoulli(&p, Some(&[3, 1000]), Some(&k)).unwrap().to_vec::<bool>().unwrap();
    assert!(b[..1000].iter().all(|&x| !x) && b[1000..2000].iter().all(|&x| x));
    let half = b[2000..].iter().filter(|&&x| x).count() as f64 / 1000.0;
    assert!((half - 0.5).abs() < 0.1, "{half}");
    let e = random::bernoulli(&p, Some(&[2, 4]), Some(&k)).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("bernoulli", ErrorKind::Shape), "{e}");
    // gumbel in float64 keeps its dtype and its mean (the Euler-Mascheroni constant).
    let g = random::gumbel(&[N], Dtype::F64, Some(&k)).unwrap();
    assert_eq!(g.dtype(), Dtype::F64);
    assert!((stats(&g.to_f64_vec().unwrap()).0 - 0.577_215_66).abs() < 0.02);
    // categorical over axis 0 of a batch of float64 logits: one sample per column.
    let logits = ops::log(Array::from_slice(&[1e-9f64, 1.0, 1.0, 1e-9], &[2, 2]).unwrap()).unwrap();
    let c = random::categorical(&logits, 0, None, Some(&k)).unwrap();
    assert_eq!(c.to_vec::<u32>().unwrap(), vec![1, 0]);
    let e = random::categorical(&logits, 2, None, Some(&k)).unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("categorical", ErrorKind::Axis), "{e}");
}

#[test]
fn uniform_moments_and_bounds_in_every_float_dtype() {
    let k = random::key(1);
    for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32, Dtype::F64] {
        let x = random::uniform(-2.0, 3.0, &[N], dtype, Some(&k)).unwrap();
        assert_eq!(x.dtype(), dtype);
        let v = x.to_f64_vec().unwrap();
        assert!(v.iter().all(|&e| (-2.0..3.0).contains(&e)), "{dtype} out of [-2, 3)");
        let (m, var) = stats(&v);
        let se = (25.0 / 12.0 / N as f64).sqrt();
        assert!((m - 0.5).abs() < 6.0 * se + 0.01, "{dtype} mean {m}");
        assert!((var - 25.0 / 12.0).abs() < 0.05, "{dtype} var {var}");
    }
    // A range so narrow that rounding hits the top: it must still be excluded.
    let v = random::uniform(1.0, 1.0 + 2f64.powi(-20), &[10_000], Dtype::F32, Some(&k)).unwrap().to_vec::<f32>().unwrap();
    assert!(v.iter().all(|&e| e < 1.0 + 2f32.powi(-20)));
    // An empty range gives low (as mlx's); a reversed one is an error.
    let v = random::uniform(1.5, 1.5, &[3], Dtype::F32, Some(&k)).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(v, [1.5; 3]);
    assert!(random::uniform(2.0, 1.0, &[3], Dtype::F32, Some(&k)).is_err());
}

#[test]
fn normal_and_truncated_normal_distributions() {
    let k = random::key(2);
    for dtype in [Dtype::F32, Dtype::F64, Dtype::BF16] {
        let v = random::normal(&[N], dtype, 1.0, 2.0, Some(&k)).unwrap().to_f64_vec().unwrap();
        let (m, var) = stats(&v);
        assert!((m - 1.0).abs() < 6.0 * 2.0 / (N as f64).sqrt() + 0.01, "{dtype} mean {m}");
        assert!((var / 4.0 - 1.0).abs() < 0.03, "{dtype} var {var}");
        let within = v.iter().filter(|&&x| (x - 1.0).abs() < 2.0).count() as f64 / N as f64;
        assert!((within - 0.682_689).abs() < 0.01, "{dtype} within one sigma {within}");
        assert!(v.iter().all(|x| x.is_finite()));
    }
    let t = random::truncated_normal(-0.5, 1.5, &[N], Dtype::F32, Some(&k)).unwrap().to_f64_vec().unwrap();
    assert!(t.iter().all(|&x| (-0.5..=1.5).contains(&x)));
    // Mean of a standard normal truncated to [a, b]: (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
    let phi = |x: f64| (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |x: f64| 0.5 * (1.0 + kiln::backend::cpu::math::erf_f64(x / std::f64::consts::SQRT_2));
    let want = (phi(-0.5) - phi(1.5)) / (cdf(1.5) - cdf(-0.5));
    assert!((stats(&t).0 - want).abs() < 0.01, "truncated mean {} want {want}", stats(&t).0);
}

#[test]
fn bernoulli_randint_gumbel_categorical() {
    let k = random::key(3);
    let b = random::bernoulli(0.3, Some(&[N]), Some(&k)).unwrap();
    assert_eq!(b.dtype(), Dtype::Bool);
    let f = b.to_vec::<bool>().unwrap().iter().filter(|&&x| x).count() as f64 / N as f64;
    assert!((f - 0.3).abs() < 6.0 * (0.21 / N as f64).sqrt(), "bernoulli frequency {f}");

    let r = random::randint(-3, 7, &[N], Dtype::I16, Some(&k)).unwrap();
    assert_eq!(r.dtype(), Dtype::I16);
    let mut counts = [0f64; 10];
    for v in r.to_vec::<i16>().unwrap() {
        assert!((-3..7).contains(&v));
        counts[(v + 3) as usize] += 1.0;
    }
    let expected = N as f64 / 10.0;
    let chi2: f64 = counts.iter().map(|c| (c - expected).powi(2) / expected).sum();
    assert!(chi2 < 40.0, "chi-square {chi2} over 9 degrees of freedom");

    let g = random::gumbel(&[N], Dtype::F32, Some(&k)).unwrap().to_f64_vec().unwrap();
    assert!((stats(&g).0 - 0.577_215_66).abs() < 0.02, "gumbel mean {}", stats(&g).0);

    let logits = ops::log(Array::from_vec(vec![0.1f32, 0.2, 0.7])).unwrap();
    let c = random::categorical(&logits, -1, Some(N), Some(&k)).unwrap();
    assert_eq!((c.shape(), c.dtype()), (&[N][..], Dtype::U32));
    let c = c.to_vec::<u32>().unwrap();
    for (cat, p) in [0.1, 0.2, 0.7].iter().enumerate() {
        let f = c.iter().filter(|&&x| x as usize == cat).count() as f64 / N as f64;
        assert!((f - p).abs() < 0.01, "category {cat} frequency {f}");
    }
}

#[test]
fn parameters_given_as_arrays_broadcast_per_sample() {
    let k = random::key(5);
    // Per-row bounds: each row of 20,000 samples stays within its own interval.
    let low = Array::from_slice(&[-5i32, 100, 1 << 24], &[3, 1]).unwrap();
    let high = Array::from_slice(&[5i32, 103, (1 << 24) + 2], &[3, 1]).unwrap();
    let r = random::randint(&low, &high, &[3, 20_000], Dtype::I32, Some(&k)).unwrap().to_vec::<i32>().unwrap();
    for (row, (lo, hi)) in [(-5, 5), (100, 103), (1 << 24, (1 << 24) + 2)].into_iter().enumerate() {
        let mut seen: Vec<i32> = r[row * 20_000..(row + 1) * 20_000].to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, (lo..hi).collect::<Vec<_>>(), "row {row}");
    }
    // A range wider than 2^32, high <= low (gives low, as mlx), and bools.
    let wide = random::randint(-(1i64 << 40), 1i64 << 40, &[1000], Dtype::I64, Some(&k)).unwrap().to_vec::<i64>().unwrap();
    assert!(wide.iter().all(|v| (-(1i64 << 40)..1i64 << 40).contains(v)) && wide.iter().any(|&v| v < 0) && wide.iter().any(|&v| v > 0));
    assert_eq!(random::randint(10, -10, &[4], Dtype::I32, Some(&k)).unwrap().to_vec::<i32>().unwrap(), vec![10; 4]);
    let coins = random::randint(0, 2, &[1000], Dtype::Bool, Some(&k)).unwrap().to_vec::<bool>().unwrap();
    assert!(coins.iter().any(|&b| b) && coins.iter().any(|&b| !b));
    // normal and laplace with array loc and scale: the same draw, scaled and shifted per column.
    let loc = Array::from_slice(&[0.0f32, 10.0], &[2]).unwrap();
    let scale = Array::from_slice(&[1.0f32, 3.0], &[2]).unwrap();
    for (name, draw) in [("normal", random::normal as fn(_, _, _, _, _) -> _), ("laplace", random::laplace)] {
        let standard = draw(&[4, 2], Dtype::F32, Array::scalar(0f32), Array::scalar(1f32), Some(&k)).unwrap().to_f64_vec().unwrap();
        let shifted = draw(&[4, 2], Dtype::F32, loc.clone(), scale.clone(), Some(&k)).unwrap().to_f64_vec().unwrap();
        for (i, (z, x)) in standard.iter().zip(&shifted).enumerate() {
            let (l, s) = if i % 2 == 0 { (0.0, 1.0) } else { (10.0, 3.0) };
            assert!((x - (l + s * z)).abs() < 1e-5, "{name} {i}: {x} against {l} + {s}·{z}");
        }
    }
    // truncated_normal with bounds of shapes (1, 2) and (3, 1); lower > upper gives lower.
    let lower = Array::from_slice(&[-2.0f32, 0.0], &[1, 2]).unwrap();
    let upper = Array::from_slice(&[0.0f32, 1.0, 2.0], &[3, 1]).unwrap();
    let t = random::truncated_normal(&lower, &upper, &[3, 2], Dtype::F32, Some(&k)).unwrap().to_vec::<f32>().unwrap();
    for (i, v) in t.iter().enumerate() {
        let (lo, hi) = ([-2.0, 0.0][i % 2], [0.0, 1.0, 2.0][i / 2]);
        assert!(if lo < hi { (lo..=hi).contains(v) } else { *v == lo }, "{i}: {v} in [{lo}, {hi}]");
    }
}

#[test]
fn randint_spans_wide_ranges_and_truncated_normal_keeps_its_tails() {
    let k = random::key(8);
    // 64 random bits per sample: a 2^40-wide range is not a lattice of 2^32 points, and the full
    // int64 range is neither constant nor out of range.
    let wide = random::randint(0i64, 1i64 << 40, &[4000], Dtype::I64, Some(&k)).unwrap().to_vec::<i64>().unwrap();
    assert!(wide.iter().any(|v| v % 256 != 0) && wide.iter().all(|v| (0..1i64 << 40).contains(v)));
    let full = random::randint(i64::MIN, i64::MAX, &[4000], Dtype::I64, Some(&k)).unwrap().to_vec::<i64>().unwrap();
    assert!(full.iter().any(|&v| v < -(1i64 << 62)) && full.iter().any(|&v| v > 1i64 << 62), "{:?}", &full[..4]);
    let e = random::randint(0.5f32, 3.0f32, &[2], Dtype::I32, None).unwrap_err();
    assert!(e.kind == ErrorKind::Dtype && e.message.contains("integers"), "{e}");
    // [6, 7]: mean (phi(6) - phi(7)) / (Phi(7) - Phi(6)) = 6.1568...; float32 CDFs collapsed it to 6.
    let t = random::truncated_normal(6.0, 7.0, &[N], Dtype::F32, Some(&k)).unwrap().to_f64_vec().unwrap();
    let phi = |x: f64| (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |x: f64| 0.5 * (1.0 + kiln::backend::cpu::math::erf_f64(x / std::f64::consts::SQRT_2));
    let want = (phi(6.0) - phi(7.0)) / (cdf(7.0) - cdf(6.0));
    assert!(t.iter().all(|&x| (6.0..=7.0).contains(&x)) && (stats(&t).0 - want).abs() < 0.01, "mean {} want {want}", stats(&t).0);
    // A complex loc needs complex samples.
    let e = random::normal(&[2], Dtype::F32, Array::scalar(kiln::Complex64::new(1.0, 1.0)), 1.0, None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Dtype);
}

#[test]
fn laplace_and_multivariate_normal_distributions() {
    let k = random::key(6);
    // Laplace(1, 2): mean 1, variance 2·2², P(|x - 1| < 2) = 1 - 1/e.
    let v = random::laplace(&[N], Dtype::F32, 1.0, 2.0, Some(&k)).unwrap().to_f64_vec().unwrap();
    let (m, var) = stats(&v);
    assert!((m - 1.0).abs() < 6.0 * (8.0 / N as f64).sqrt(), "laplace mean {m}");
    assert!((var / 8.0 - 1.0).abs() < 0.05, "laplace var {var}");
    let within = v.iter().filter(|&&x| (x - 1.0).abs() < 2.0).count() as f64 / N as f64;
    assert!((within - (1.0 - (-1f64).exp())).abs() < 0.01, "laplace within one scale {within}");
    // A 2-d normal with correlation 0.5, and a batch of means of shape (3, 2).
    let mean = Array::from_slice(&[0.0f32, 7.0, 1.0, 2.0, 3.0, 4.0], &[3, 2]).unwrap();
    let cov = Array::from_slice(&[1.0f32, 0.5, 0.5, 2.0], &[2, 2]).unwrap();
    let x = random::multivariate_normal(&mean, &cov, &[N / 3, 3], Dtype::F32, Some(&k)).unwrap();
    assert_eq!(x.shape(), &[N / 3, 3, 2]);
    let x = x.to_f64_vec().unwrap();
    for (b, means) in [[0.0, 7.0], [1.0, 2.0], [3.0, 4.0]].iter().enumerate() {
        let column = |c: usize| -> Vec<f64> { x.iter().skip(b * 2 + c).step_by(6).copied().collect() };
        let (a, d) = (column(0), column(1));
        let ((ma, va), (md, vd)) = (stats(&a), stats(&d));
        let cab = a.iter().zip(&d).map(|(p, q)| (p - ma) * (q - md)).sum::<f64>() / a.len() as f64;
        assert!((ma - means[0]).abs() < 0.03 && (md - means[1]).abs() < 0.04, "batch {b} means {ma} {md}");
        assert!((va - 1.0).abs() < 0.05 && (vd - 2.0).abs() < 0.1 && (cab - 0.5).abs() < 0.05, "batch {b} cov {va} {vd} {cab}");
    }
}

#[test]
fn bad_arguments_are_clear_errors() {
    let bad_key = Array::from_vec(vec![1i32, 2]);
    let e = random::uniform(0.0, 1.0, &[2], Dtype::F32, Some(&bad_key)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.to_string().contains("uniform: a key must be a uint32 array of shape (2,)"), "{e}");
    assert_eq!(random::uniform(1.0, 0.5, &[2], Dtype::F32, None).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(random::uniform(0.0, 1.0, &[2], Dtype::I32, None).unwrap_err().kind, ErrorKind::Dtype);
    assert_eq!(random::randint(0, 5, &[2], Dtype::F32, None).unwrap_err().kind, ErrorKind::Dtype);
    // Parameters must broadcast to the sample shape without growing it.
    let ten = ops::zeros(&[10], Dtype::F32).unwrap();
    let e = random::normal(&[2, 10, 2], Dtype::F32, &ten, 1.0, None).unwrap_err();
    assert!(e.kind == ErrorKind::Value && e.to_string().contains("(10,)") && e.to_string().contains("(2, 10, 2)"), "{e}");
    assert_eq!(random::bernoulli(0, Some(&[2]), None).unwrap_err().kind, ErrorKind::Dtype);
    let square = ops::zeros(&[2, 2], Dtype::F32).unwrap();
    for (mean, cov, shape) in [(vec![2, 2], vec![2, 2], vec![3]), (vec![3], vec![2, 2], vec![]), (vec![2], vec![2, 3], vec![])] {
        let (mean, cov) = (ops::zeros(&mean, Dtype::F32).unwrap(), ops::zeros(&cov, Dtype::F32).unwrap());
        let e = random::multivariate_normal(&mean, &cov, &shape, Dtype::F32, None).unwrap_err();
        assert_eq!((e.kind, e.op.as_str()), (ErrorKind::Value, "multivariate_normal"), "{e}");
    }
    let e = random::multivariate_normal(ops::zeros(&[2], Dtype::F32).unwrap(), &square, &[], Dtype::F16, None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Dtype);
    assert_eq!(random::bits(&[2], 3, None).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(random::split(&bad_key, 2).unwrap_err().kind, ErrorKind::Value);
}

#[test]
fn permutations_are_shuffles() {
    let k = random::key(9);
    let p = random::permutation(1000, Some(&k)).unwrap();
    assert_eq!(p.dtype(), Dtype::I32);
    let mut v = p.to_vec::<i32>().unwrap();
    assert_ne!(v, (0..1000).collect::<Vec<_>>());
    v.sort();
    assert_eq!(v, (0..1000).collect::<Vec<_>>());
    let x = Array::from_slice(&(0..12).collect::<Vec<i32>>(), &[3, 4]).unwrap();
    let s = random::permutation_of(&x, 1, Some(&k)).unwrap().to_vec::<i32>().unwrap();
    // Every row holds the same columns, shuffled the same way.
    let cols: Vec<i32> = s[..4].to_vec();
    for r in 0..3 {
        assert_eq!(s[r * 4..r * 4 + 4].iter().map(|v| v - 4 * r as i32).collect::<Vec<_>>(), cols);
    }
    let mut c = cols.clone();
    c.sort();
    assert_eq!(c, vec![0, 1, 2, 3]);
}
