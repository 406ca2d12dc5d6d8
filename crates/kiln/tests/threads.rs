//! Threads, all at once: 8 threads for a fixed number of rounds each call one shared compiled
//! function, call compiled functions of their own, create and drop compiled functions, and
//! evaluate lazy graphs they share (the same pending nodes evaluated from several threads at
//! once). Every result is checked against a float64 computation made here; any deadlock shows up
//! as the test's watchdog failing, any panic as a thread's failure.
//!
//! `KILN_STRESS_ROUNDS` sets the rounds per thread (`scripts/fuzz threads` runs long ones).

mod common;

use common::Rng;
use kiln::{compile, ops, Array, Compiled, Dtype, Result};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

const THREADS: usize = 8;

fn rounds() -> usize {
    std::env::var("KILN_STRESS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

/// tanh(x) * 2 + sum(x over the last axis): a fused elementwise part and a reduction.
fn shared_fn(a: &[Array]) -> Result<Vec<Array>> {
    let x = &a[0];
    let s = ops::sum(x, Some(&[-1]), true)?;
    Ok(vec![ops::add(ops::multiply(ops::tanh(x)?, 2.0)?, s)?])
}

fn shared_want(x: &[f64], last: usize) -> Vec<f64> {
    x.chunks(last).flat_map(|row| {
        let s: f64 = row.iter().sum();
        row.iter().map(move |v| v.tanh() * 2.0 + s)
    }).collect()
}

/// x * k + exp(-|x|): a compiled function of one thread's own, with its own constant `k`.
fn own_fn(k: f64) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static {
    move |a: &[Array]| Ok(vec![ops::add(ops::multiply(&a[0], k)?, ops::exp(ops::negative(ops::abs(&a[0])?)?)?)?])
}

/// Values in [-2, 2), exact in float32 (multiples of 1/64), from the tests' own generator.
fn values(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(256) as f64 / 64.0 - 2.0).collect()
}

fn close(got: &Array, want: &[f64], what: &str) {
    let got = got.to_f64_vec().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}: element {i} is {g}, expected {w}");
    }
}

/// One thread's rounds: each round does all four kinds of work.
fn worker(t: usize, shared: &Compiled, lazy: &[(Array, Vec<f64>)], start: &Barrier) {
    let own = compile(own_fn(t as f64 + 0.5));
    start.wait();
    for round in 0..rounds() {
        let seed = (t * 1_000_003 + round) as u64;
        // 1. The shared compiled function, at one of three shapes.
        let shape: &[usize] = [&[5, 7][..], &[3, 16], &[64]][(t + round) % 3];
        let n: usize = shape.iter().product();
        let xv = values(seed, n);
        let x = ops::astype(Array::from_slice(&xv, shape).unwrap(), Dtype::F32).unwrap();
        let got = shared.call(std::slice::from_ref(&x)).unwrap();
        close(&got[0], &shared_want(&xv, *shape.last().unwrap()), &format!("thread {t} round {round}: shared compiled"));
        // 2. This thread's own compiled function.
        let k = t as f64 + 0.5;
        let got = own.call(&[x]).unwrap();
        close(&got[0], &xv.iter().map(|v| v * k + (-v.abs()).exp()).collect::<Vec<_>>(), &format!("thread {t} round {round}: own compiled"));
        // 3. A compiled function created, called and dropped within the round.
        let scale = (round % 5) as f64;
        let once = compile(move |a: &[Array]| Ok(vec![ops::subtract(ops::square(&a[0])?, scale)?]));
        let y = Array::from_slice(&xv[..4], &[4]).unwrap();
        let got = once.call(&[y]).unwrap();
        close(&got[0], &xv[..4].iter().map(|v| v * v - scale).collect::<Vec<_>>(), &format!("thread {t} round {round}: fresh compiled"));
        drop(once);
        // 4. Shared lazy graphs: every thread evaluates the same pending nodes, and builds on them.
        let (graph, want) = &lazy[round % lazy.len()];
        let derived = ops::add(graph, 1.0).unwrap();
        close(&derived, &want.iter().map(|v| v + 1.0).collect::<Vec<_>>(), &format!("thread {t} round {round}: shared lazy graph"));
        close(graph, want, &format!("thread {t} round {round}: shared lazy graph itself"));
    }
}

#[test]
fn eight_threads_compile_call_drop_and_evaluate_shared_graphs_at_once() {
    kiln::with_device(kiln::Device::cpu(), stress).unwrap();
}

fn stress() {
    let shared = compile(shared_fn);
    // Lazy graphs nobody has evaluated yet: chains over a common base, so threads race on the
    // same pending nodes (each graph is evaluated by several threads at once).
    let base_v = values(7, 4096);
    let base = Array::from_slice(&base_v, &[64, 64]).unwrap();
    let lazy: Vec<(Array, Vec<f64>)> = (0..rounds().max(1))
        .map(|i| {
            let c = i as f64;
            let mut g = ops::multiply(&base, c).unwrap();
            g = ops::sin(ops::add(&g, &base).unwrap()).unwrap();
            let g = ops::sum(&g, Some(&[-1]), false).unwrap();
            let want = base_v.chunks(64).map(|row| row.iter().map(|v| (v * c + v).sin()).sum()).collect();
            (g, want)
        })
        .collect();
    let start = Arc::new(Barrier::new(THREADS));
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (shared, lazy, start, done) = (&shared, &lazy, start.clone(), done_tx.clone());
            scope.spawn(move || {
                worker(t, shared, lazy, &start);
                done.send(t).unwrap();
            });
        }
        drop(done_tx);
        // The watchdog: every thread must finish in time (a deadlock would hang here forever).
        for _ in 0..THREADS {
            if let Err(e) = done_rx.recv_timeout(Duration::from_secs(600)) {
                // A disconnected channel means a thread panicked: the scope reports its panic.
                assert!(matches!(e, mpsc::RecvTimeoutError::Disconnected), "a thread did not finish in 600 s: deadlock?");
                break;
            }
        }
    });
    assert_eq!(shared.cache_len(), 3, "one cache entry per shape");
}
