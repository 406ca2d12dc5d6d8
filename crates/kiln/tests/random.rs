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
fn bad_arguments_are_clear_errors() {
    let bad_key = Array::from_vec(vec![1i32, 2]);
    let e = random::uniform(0.0, 1.0, &[2], Dtype::F32, Some(&bad_key)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.to_string().contains("uniform: a key must be a uint32 array of shape (2,)"), "{e}");
    assert_eq!(random::uniform(1.0, 1.0, &[2], Dtype::F32, None).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(random::uniform(0.0, 1.0, &[2], Dtype::I32, None).unwrap_err().kind, ErrorKind::Dtype);
    assert_eq!(random::randint(5, 5, &[2], Dtype::I32, None).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(random::randint(0, 5, &[2], Dtype::F32, None).unwrap_err().kind, ErrorKind::Dtype);
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
