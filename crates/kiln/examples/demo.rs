//! kiln's quick-start demo: compiles GELU and softmax, shows eager against compiled time and the
//! fused kernels compile made, then tours the eager core (laziness, promotion, views, reductions).
//!
//! `cargo run --release --example demo`

use kiln::{compile, ops, random, Array, Dtype};
use std::time::Instant;

fn time_ms(f: impl Fn() -> Array) -> (Array, f64) {
    f().eval().unwrap(); // warm the buffer cache
    let t = Instant::now();
    let out = f();
    out.eval().unwrap();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

/// Median time in ms of `f` over five runs after a warm-up.
fn median_ms(f: impl Fn() -> kiln::Result<()>) -> kiln::Result<f64> {
    f()?;
    let mut t: Vec<f64> = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[2])
}

fn gelu(a: &[Array]) -> kiln::Result<Vec<Array>> {
    let x = &a[0];
    let inner = ops::erf(ops::divide(x, std::f64::consts::SQRT_2)?)?;
    Ok(vec![ops::divide(ops::multiply(x, ops::add(inner, 1.0)?)?, 2.0)?])
}

fn softmax(a: &[Array]) -> kiln::Result<Vec<Array>> {
    let x = &a[0];
    let e = ops::exp(ops::subtract(x, ops::max(x, Some(&[-1]), true)?)?)?;
    Ok(vec![ops::divide(&e, ops::sum(&e, Some(&[-1]), true)?)?])
}

/// Eager against compiled for one function: times, speedup, kernel counts, the fused IR and how
/// each kernel runs.
fn compare(name: &str, f: fn(&[Array]) -> kiln::Result<Vec<Array>>, x: &Array) -> kiln::Result<()> {
    let compiled = compile(f);
    let args = std::slice::from_ref(x);
    let eager_ms = median_ms(|| f(args)?[0].eval())?;
    // The first call queues the kernels' native builds in the background; once they are loaded,
    // the next runs time native code against the interpreter. Time what runs after.
    compiled.call(args)?;
    kiln::backend::cpu::native::wait_for_builds();
    for _ in 0..2 * kiln::backend::cpu::native::TRIAL_RUNS {
        compiled.call(args)?;
    }
    let compiled_ms = median_ms(|| compiled.call(args).map(|_| ()))?;
    let diff = ops::max(ops::abs(ops::subtract(&f(args)?[0], &compiled.call(args)?[0])?)?, None, false)?;
    let report = compiled.inspect(args, &[])?;
    println!(
        "{name:8} eager {eager_ms:7.1} ms ({} kernels)   compiled {compiled_ms:7.1} ms ({} kernel{})   {:.1}x faster   max |diff| {:.1e}",
        report.eager_kernels,
        report.compiled_kernels,
        if report.compiled_kernels == 1 { "" } else { "s" },
        eager_ms / compiled_ms,
        diff.item::<f32>()?
    );
    for g in &report.groups {
        println!("{}\nruns as: {}", g.ir, g.engine);
    }
    Ok(())
}

fn main() -> kiln::Result<()> {
    println!("== compile: trace once, fuse, replay ==");
    let key = random::key(0);
    let big = random::uniform(-3.0, 3.0, &[32, 1000, 4096], Dtype::F32, Some(&key))?;
    big.eval()?;
    compare("gelu", gelu, &big)?;
    let rows = random::normal(&[4096, 4096], Dtype::F32, 0.0, 1.0, Some(&key))?;
    rows.eval()?;
    compare("softmax", softmax, &rows)?;

    println!("== arrays are lazy handles to a graph ==");
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let y = ops::exp(ops::negative(&x)?)? + 2.0;
    println!("y = exp(-x) + 2   evaluated yet? {}", y.is_evaluated());
    println!("{y}");

    println!("\n== weak scalars keep the array's dtype (as in mlx) ==");
    let h = ops::astype(&x, Dtype::F16)? * 2.0;
    println!("float16 * 2.0 -> {}", h.dtype());
    println!("int32 / 2     -> {}", (Array::from_vec(vec![3i32, 4]) / 2).dtype());

    println!("\n== views are zero-copy ==");
    let t = ops::transpose(&x, None)?;
    let r = ops::slice(&t, &[ops::SliceSpec { start: None, stop: None, step: -1 }])?;
    // Evaluated first: only an evaluated array has a buffer to share.
    r.eval()?;
    println!("x.T[::-1] =\n{r}\nshares memory with x: {}", r.shares_memory(&x));

    println!("\n== reductions and matmul ==");
    println!("sum over axis 1: {}", ops::sum(&x, Some(&[1]), false)?);
    println!("softmax rows:    {}", ops::softmax(&x, Some(&[-1]), false)?);
    println!("x @ x.T:\n{}", ops::matmul(&x, &t)?);

    println!("\n== eager speed: 32 x 1000 x 4096 float32 (131 M elements, 524 MB) ==");
    let (_, ms) = time_ms(|| ops::add(&big, 1.0).unwrap());
    println!("add 1.0      {ms:8.1} ms  {:6.1} GB/s", 2.0 * big.nbytes() as f64 / ms / 1e6);
    let (_, ms) = time_ms(|| ops::exp(&big).unwrap());
    println!("exp          {ms:8.1} ms  {:6.1} GB/s", 2.0 * big.nbytes() as f64 / ms / 1e6);
    let (s, ms) = time_ms(|| ops::sum(&big, None, false).unwrap());
    println!("sum          {ms:8.1} ms  {:6.1} GB/s   (= {:.1})", big.nbytes() as f64 / ms / 1e6, s.item::<f32>()?);
    let a = random::normal(&[1024, 1024], Dtype::F32, 0.0, 1.0, Some(&key))?;
    let (_, ms) = time_ms(|| ops::matmul(&a, &a).unwrap());
    println!("matmul 1024² {ms:8.1} ms  {:6.1} GFLOP/s", 2.0 * 1024f64.powi(3) / ms / 1e6);
    Ok(())
}
