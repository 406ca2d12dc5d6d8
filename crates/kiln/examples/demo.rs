//! kiln's quick-start demo: builds arrays, runs ops lazily, prints results and timings.
//!
//! `cargo run --release --example demo`
//!
//! (The compiled-vs-eager comparison with the fused kernels joins this demo when `compile` lands;
//! for now it shows the eager core: laziness, promotion, views, reductions and kernel speed.)

use kiln::{ops, random, Array, Dtype};
use std::time::Instant;

fn time_ms(f: impl Fn() -> Array) -> (Array, f64) {
    f().eval().unwrap(); // warm the buffer cache
    let t = Instant::now();
    let out = f();
    out.eval().unwrap();
    (out, t.elapsed().as_secs_f64() * 1e3)
}

fn main() -> kiln::Result<()> {
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
    println!("x.T[::-1] =\n{r}\nshares memory with x: {}", r.shares_memory(&x));

    println!("\n== reductions and matmul ==");
    println!("sum over axis 1: {}", ops::sum(&x, Some(&[1]), false)?);
    println!("softmax rows:    {}", ops::softmax(&x, Some(&[-1]), false)?);
    println!("x @ x.T:\n{}", ops::matmul(&x, &t)?);

    println!("\n== speed: 32 x 1000 x 4096 float32 (131 M elements, 524 MB) ==");
    let key = random::key(0);
    let big = random::uniform(-3.0, 3.0, &[32, 1000, 4096], Dtype::F32, Some(&key))?;
    big.eval()?;
    let (_, ms) = time_ms(|| ops::add(&big, 1.0).unwrap());
    println!("add 1.0      {ms:8.1} ms  {:6.1} GB/s", 2.0 * big.nbytes() as f64 / ms / 1e6);
    let (_, ms) = time_ms(|| ops::exp(&big).unwrap());
    println!("exp          {ms:8.1} ms  {:6.1} GB/s", 2.0 * big.nbytes() as f64 / ms / 1e6);
    let (s, ms) = time_ms(|| ops::sum(&big, None, false).unwrap());
    println!("sum          {ms:8.1} ms  {:6.1} GB/s   (= {:.1})", big.nbytes() as f64 / ms / 1e6, s.item::<f32>()?);
    let gelu = || {
        let inner = ops::erf(ops::divide(&big, std::f64::consts::SQRT_2).unwrap()).unwrap();
        ops::divide(ops::multiply(&big, ops::add(inner, 1.0).unwrap()).unwrap(), 2.0).unwrap()
    };
    let (_, ms) = time_ms(gelu);
    println!("gelu (eager) {ms:8.1} ms  (5 kernels; compile will fuse them into one)");
    let a = random::normal(&[1024, 1024], Dtype::F32, 0.0, 1.0, Some(&key))?;
    let (_, ms) = time_ms(|| ops::matmul(&a, &a).unwrap());
    println!("matmul 1024² {ms:8.1} ms  {:6.1} GFLOP/s", 2.0 * 1024f64.powi(3) / ms / 1e6);
    Ok(())
}
