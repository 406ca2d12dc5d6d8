//! Arrays of more than 2^31 elements (uint8, so each is a little over 2 GiB): elementwise ops,
//! reductions, gathers and scatters at indices past 2^31 (64-bit index arrays), sort, and compiled
//! kernels (interpreted and native) must index them without 32-bit overflow. Each needs several
//! GiB of memory and seconds of time, so they are `#[ignore]`d in the ordinary run; `bash
//! scripts/fuzz huge` runs them (`cargo test --release --test huge -- --ignored`).

use kiln::ops::{self, SliceSpec};
use kiln::{compile, Array, Dtype};

/// 2^31 + 1,000 elements: past every signed 32-bit index.
const N: usize = (1 << 31) + 1000;

/// x[i] = i mod 251 as uint8 (251 is prime, so positions past 2^31 differ from their wrapped ones).
fn pattern() -> Array {
    let i = ops::arange(0.0, N as f64, 1.0, Dtype::I64).unwrap();
    let x = ops::astype(ops::remainder(i, 251).unwrap(), Dtype::U8).unwrap();
    x.eval().unwrap();
    x
}

/// The values at `positions` of `a` (a 1-D array), read through a 64-bit gather.
fn at(a: &Array, positions: &[usize]) -> Vec<f64> {
    let idx: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
    let idx = Array::from_slice(&idx, &[idx.len()]).unwrap();
    ops::take(a, idx, Some(0)).unwrap().to_f64_vec().unwrap()
}

fn expected(positions: &[usize], f: impl Fn(usize) -> f64) -> Vec<f64> {
    positions.iter().map(|&p| f(p)).collect()
}

const PROBES: [usize; 6] = [0, 1, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, N - 1];

#[test]
#[ignore = "needs ~10 GiB and tens of seconds: bash scripts/fuzz huge"]
fn elementwise_reductions_and_gathers_past_two_to_the_31() {
    let x = pattern();
    assert_eq!(at(&x, &PROBES), expected(&PROBES, |p| (p % 251) as f64), "gather with 64-bit indices");
    let y = ops::add(&x, 3).unwrap();
    assert_eq!(at(&y, &PROBES), expected(&PROBES, |p| ((p % 251 + 3) % 256) as f64), "elementwise add");
    // Sum over all (uint8 sums to uint32 as mlx; the exact total fits): sum of i mod 251.
    let full_cycles = (N / 251) as u64;
    let rest = (N % 251) as u64;
    let want = full_cycles * (250 * 251 / 2) + rest * (rest - 1) / 2;
    let total = ops::sum(ops::astype(&x, Dtype::U64).unwrap(), None, false).unwrap();
    assert_eq!(total.item::<u64>().unwrap(), want, "sum over 2^31 + 1000 elements");
    let top = ops::argmax(ops::equal(&x, 250).unwrap(), None, false).unwrap();
    assert_eq!(top.to_f64_vec().unwrap(), vec![250.0], "argmax");
    // The last maximum: reversed, a flip with a negative stride over the whole array.
    let flipped = ops::flip(&x, None).unwrap();
    assert_eq!(at(&flipped, &[0, N - 1]), vec![((N - 1) % 251) as f64, 0.0], "flip");
}

#[test]
#[ignore = "needs ~10 GiB and tens of seconds: bash scripts/fuzz huge"]
fn scatters_past_two_to_the_31() {
    let x = pattern();
    let idx = Array::from_slice(&[(N - 1) as i64, (1i64 << 31) + 7], &[2]).unwrap();
    let vals = Array::from_slice(&[9u8, 8], &[2]).unwrap();
    let y = ops::put_along_axis(&x, idx, vals, Some(0)).unwrap();
    assert_eq!(at(&y, &[N - 1, (1 << 31) + 7, (1 << 31) + 6]), vec![9.0, 8.0, (((1usize << 31) + 6) % 251) as f64], "put_along_axis");
    let spec = [SliceSpec { start: Some((N - 3) as i64), stop: None, step: 1 }];
    let z = ops::slice_update(&x, Array::from_slice(&[1u8, 2, 3], &[3]).unwrap(), &spec).unwrap();
    assert_eq!(at(&z, &[N - 3, N - 2, N - 1, N - 4]), vec![1.0, 2.0, 3.0, ((N - 4) % 251) as f64], "slice_update");
}

#[test]
#[ignore = "needs ~10 GiB and tens of seconds: bash scripts/fuzz huge"]
fn sort_past_two_to_the_31() {
    let sorted = ops::sort(pattern(), Some(0)).unwrap();
    // Counts of each value: 251 values in turn, the first `rest` of them once more.
    let per = N / 251;
    let rest = N % 251;
    let first_of = |v: usize| v * per + v.min(rest);
    let probes: Vec<usize> = [0usize, 1, 100, 200, 250].iter().flat_map(|&v| [first_of(v), first_of(v + 1) - 1]).collect();
    let want: Vec<f64> = [0usize, 1, 100, 200, 250].iter().flat_map(|&v| [v as f64, v as f64]).collect();
    assert_eq!(at(&sorted, &probes), want, "sort");
}

#[test]
#[ignore = "needs ~10 GiB and tens of seconds: bash scripts/fuzz huge"]
fn compiled_kernels_past_two_to_the_31() {
    use kiln::backend::cpu::native::{with_engine, Engine};
    let x = pattern();
    let f = compile(|a: &[Array]| Ok(vec![ops::add(ops::multiply(&a[0], 2)?, 1)?, ops::max(&a[0], None, false)?]));
    for engine in [Engine::Interpreter, Engine::NativeNow] {
        let out = with_engine(engine, || f.call(std::slice::from_ref(&x))).unwrap();
        assert_eq!(at(&out[0], &PROBES), expected(&PROBES, |p| ((p % 251 * 2 + 1) % 256) as f64), "{engine:?}: fused elementwise");
        assert_eq!(out[1].to_f64_vec().unwrap(), vec![250.0], "{engine:?}: fused max");
    }
}
