//! The benchmark suite behind `scripts/bench`.
//!
//! Every case is timed in this one process: warm-up runs, then repeated runs whose median is
//! reported, as milliseconds and as achieved GB/s (bytes that must move at least once) or GFLOP/s.
//! `memcpy` (a plain copy of the same size) and `gemm_direct` (the GEMM crate called directly) are
//! measured in the same run as references, so ratios are meaningful on a noisy machine.
//!
//! `mlp_grad` times a training step's value_and_grad against the forward pass alone (matmul
//! work doubles, as the input needs no gradient: the ideal is about 2x).
//!
//! The compile cases (module [`compiled`]) time one function run eagerly against the same
//! function through `kiln::compile`, paired: `gelu`, `silu` (32x1000x4096), `layernorm`,
//! `softmax` (4096x4096, written with primitive ops), `mlp_step` (a whole SGD-with-momentum
//! training step of a 784-256-10 MLP, with steps/s), `first_compile` (a fresh compiled GELU's
//! first call: trace, simplify, fuse and run on 1000x1000) and `tiny_call` (per-call overhead on
//! a 4-element input, in microseconds). `gelu` adds `handwritten`: one loop written by hand over
//! the same formula and erf approximation, split across the cores (what register-level code
//! generation could reach), which `compiled` is read against. The compile cases wait for the
//! background builds of native kernel code after the first call, and `gelu`, `silu`,
//! `layernorm` and `softmax` add `interpreted`: the same compiled plan run by the tile
//! interpreter, without native code.
//!
//! `conv2d` times a 3x3 convolution (8x56x56x64, channels last) eagerly, compiled, and its vjp,
//! against the GEMM of its patches called directly, and its depthwise form (64 groups) in GB/s.
//! `qmatmul` (module [`quantized`]) times quantized matrix products against float32 ones.
//!
//! Usage: `kiln-bench [--json] [--reps N] [--device cpu|gpu] [CASE...]`; CPU cases: memcpy copy add
//! gelu silu layernorm softmax sum matmul conv2d qmatmul mlp_grad mlp_step first_compile tiny_call; GPU cases (module
//! [`gpu`]): d2d_copy copy add gelu sum sum_rows tiny_op matmul argsort cumsum take to_device
//! to_host compiled first_compiled tiny_call mlp_step qmatmul loop_shapes (tiny_call, mlp_step and
//! qmatmul are the CPU cases, each call or step waited for on the GPU). `KILN_BENCH_PROFILE=FILE` samples where
//! the process's CPU time goes (module [`sampler`]).

mod compiled;
mod gpu;
mod loop_shapes;
mod quantized;
mod sampler;

use kiln::{ops, Array, Dtype};
use std::time::Instant;

/// Elements of the large elementwise and reduction cases: 32 x 1000 x 4096 float32.
const SHAPE: [usize; 3] = [32, 1000, 4096];
/// Side of the square matmul case.
const MATMUL_N: usize = 2048;
/// Batch, input, hidden and output widths of the `mlp_grad` case.
const MLP: [usize; 4] = [512, 1024, 1024, 16];
/// Batch, side and channels of the `conv2d` case: a ResNet stage's 3x3 convolution, channels last.
const CONV: [usize; 3] = [8, 56, 64];
const ALL_CASES: [&str; 17] = [
    "memcpy", "copy", "add", "gelu", "silu", "layernorm", "softmax", "batchnorm", "softmax_axis0", "sum", "matmul",
    "conv2d", "qmatmul", "mlp_grad", "mlp_step", "first_compile", "tiny_call",
];

/// One measured result.
struct Row {
    case: &'static str,
    variant: &'static str,
    ms: f64,
    gbps: Option<f64>,
    gflops: Option<f64>,
    /// A case-specific figure, as its JSON key and value (`steps_per_s`, `us`).
    extra: Option<(&'static str, f64)>,
}

impl Row {
    fn new(case: &'static str, variant: &'static str, ms: f64) -> Row {
        Row { case, variant, ms, gbps: None, gflops: None, extra: None }
    }
    /// With the GB/s of moving `bytes`.
    fn bytes(self, bytes: usize) -> Row {
        Row { gbps: gbps(bytes, self.ms), ..self }
    }
    /// With the GFLOP/s of `flops`.
    fn flops(self, flops: f64) -> Row {
        Row { gflops: Some(flops / (self.ms * 1e-3) / 1e9), ..self }
    }
    fn extra(self, key: &'static str, value: f64) -> Row {
        Row { extra: Some((key, value)), ..self }
    }
}

/// Median wall time in ms of `f` over `reps` runs after two warm-ups.
fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    f();
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// Median wall times in ms of `f` and `g`, run alternately so that machine noise (frequency
/// changes, other processes) hits both alike; used where one case is the other's reference.
fn paired_median_ms(reps: usize, mut f: impl FnMut(), mut g: impl FnMut()) -> (f64, f64) {
    let mut times = (Vec::new(), Vec::new());
    for i in 0..reps + 2 {
        let t = Instant::now();
        f();
        let tf = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        g();
        let tg = t.elapsed().as_secs_f64() * 1e3;
        if i >= 2 {
            times.0.push(tf);
            times.1.push(tg);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    (median(times.0), median(times.1))
}

fn gbps(bytes: usize, ms: f64) -> Option<f64> {
    Some(bytes as f64 / (ms * 1e-3) / 1e9)
}

fn random_input(shape: &[usize]) -> Array {
    let key = kiln::random::key(0);
    let x = kiln::random::uniform(-3.0, 3.0, shape, Dtype::F32, Some(&key)).expect("uniform");
    x.eval().expect("eval");
    x
}

fn run_case(case: &str, reps: usize) -> Vec<Row> {
    let n: usize = SHAPE.iter().product();
    let bytes = n * 4;
    match case {
        "memcpy" => {
            let src = vec![1.0f32; n];
            let mut dst = vec![0.0f32; n];
            let ms = median_ms(reps, || dst.copy_from_slice(std::hint::black_box(&src)));
            vec![Row::new("memcpy", "reference", ms).bytes(2 * bytes)]
        }
        "copy" => {
            let x = random_input(&SHAPE);
            let ms = median_ms(reps, || ops::copy(&x).unwrap().eval().unwrap());
            vec![Row::new("copy", "eager", ms).bytes(2 * bytes)]
        }
        "add" => {
            let (x, y) = (random_input(&SHAPE), random_input(&SHAPE));
            let ms = median_ms(reps, || ops::add(&x, &y).unwrap().eval().unwrap());
            vec![Row::new("add", "eager", ms).bytes(3 * bytes)]
        }
        "gelu" | "silu" | "layernorm" | "softmax" | "batchnorm" | "softmax_axis0" => compiled::elementwise(case, reps),
        "sum" => {
            let x = random_input(&SHAPE);
            let ms = median_ms(reps, || ops::sum(&x, None, false).unwrap().eval().unwrap());
            vec![Row::new("sum", "eager", ms).bytes(bytes)]
        }
        "matmul" => {
            let m = MATMUL_N;
            let (a, b) = (random_input(&[m, m]), random_input(&[m, m]));
            let flops = 2.0 * (m as f64).powi(3);
            let (va, vb) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            let mut out = vec![0.0f32; m * m];
            let (kiln_ms, direct_ms) = paired_median_ms(
                reps,
                || ops::matmul(&a, &b).unwrap().eval().unwrap(),
                || unsafe {
                    gemm::gemm(
                        m, m, m,
                        out.as_mut_ptr(), 1, m as isize, false,
                        va.as_ptr(), 1, m as isize,
                        vb.as_ptr(), 1, m as isize,
                        0.0, 1.0, false, false, false,
                        gemm::Parallelism::Rayon(0),
                    )
                },
            );
            vec![
                Row::new("matmul", "eager", kiln_ms).flops(flops),
                Row::new("matmul", "gemm_direct", direct_ms).flops(flops),
            ]
        }
        "conv2d" => conv2d(reps),
        "qmatmul" => quantized::qmatmul(reps, |a| a.eval().expect("eval")),
        "mlp_grad" => mlp_grad(reps),
        "mlp_step" => compiled::mlp_step(reps),
        "first_compile" => compiled::first_compile(reps),
        "tiny_call" => compiled::tiny_call(reps),
        other => {
            eprintln!("unknown case {other:?}; cases are: {}", ALL_CASES.join(" "));
            std::process::exit(2);
        }
    }
}

/// A 3x3 convolution with padding 1 (`CONV`), eager, compiled and its vjp (both gradients),
/// against the GEMM it amounts to (`(N*H*W, 9*C) @ (9*C, C)`, the gemm crate called directly on
/// ready-made patches): the ceiling any im2col-style convolution reaches.
fn conv2d(reps: usize) -> Vec<Row> {
    let [n, side, c] = CONV;
    let (x, w) = (random_input(&[n, side, side, c]), random_input(&[c, 3, 3, c]));
    let conv = |a: &[Array]| -> kiln::Result<Vec<Array>> { Ok(vec![ops::conv(&a[0], &a[1], &[1], &[1], &[1], 1)?]) };
    let compiled = kiln::compile(conv);
    let args = [x, w];
    let (m, k) = (n * side * side, 9 * c);
    let flops = 2.0 * (m * k * c) as f64;
    let (patches, weight) = (vec![1.0f32; m * k], vec![1.0f32; k * c]);
    let mut out = vec![0.0f32; m * c];
    let (eager_ms, compiled_ms) = paired_median_ms(
        reps,
        || conv(&args).unwrap()[0].eval().unwrap(),
        || compiled.call(&args).unwrap()[0].eval().unwrap(),
    );
    let direct_ms = median_ms(reps, || unsafe {
        gemm::gemm(
            m, c, k,
            out.as_mut_ptr(), 1, c as isize, false,
            patches.as_ptr(), 1, k as isize,
            weight.as_ptr(), k as isize, 1,
            0.0, 1.0, false, false, false,
            gemm::Parallelism::Rayon(0),
        )
    });
    // The training step's part: both gradients (each one more GEMM of the forward's size).
    let cotangent = random_input(&[n, side, side, c]);
    let grads_ms = median_ms(reps, || {
        let (_, g) = kiln::vjp(conv, &args, std::slice::from_ref(&cotangent)).unwrap();
        kiln::eval(&[&g[0], &g[1]]).unwrap()
    });
    // The depthwise form (one input channel per group), which moves more bytes than it computes.
    let depthwise_w = random_input(&[c, 3, 3, 1]);
    let depthwise_ms = median_ms(reps, || ops::conv(&args[0], &depthwise_w, &[1], &[1], &[1], c as i64).unwrap().eval().unwrap());
    vec![
        Row::new("conv2d", "eager", eager_ms).flops(flops),
        Row::new("conv2d", "compiled", compiled_ms).flops(flops),
        Row::new("conv2d", "vjp", grads_ms).flops(2.0 * flops),
        Row::new("conv2d", "depthwise", depthwise_ms).bytes(2 * args[0].nbytes()),
        Row::new("conv2d", "gemm_direct", direct_ms).flops(flops),
    ]
}

/// A two-layer tanh MLP with a logsumexp loss: the forward pass alone against value_and_grad
/// with respect to both weight matrices, evaluated eagerly.
fn mlp_grad(reps: usize) -> Vec<Row> {
    let [b, d, h, o] = MLP;
    let x = random_input(&[b, d]);
    let (w1, w2) = (random_input(&[d, h]), random_input(&[h, o]));
    let loss = |a: &[Array]| -> kiln::Result<Vec<Array>> {
        let hidden = ops::tanh(ops::matmul(&a[2], ops::multiply(&a[0], 0.03)?)?)?;
        let logits = ops::matmul(&hidden, &a[1])?;
        Ok(vec![ops::mean(ops::logsumexp(&logits, Some(&[-1]), false)?, None, false)?])
    };
    let step = kiln::value_and_grad(loss, &[0, 1]);
    let args = [w1, w2, x];
    let (fwd_ms, grad_ms) = paired_median_ms(
        reps,
        || loss(&args).unwrap()[0].eval().unwrap(),
        || {
            let (v, g) = step(&args).unwrap();
            kiln::eval(&[&v[0], &g[0], &g[1]]).unwrap()
        },
    );
    // Forward: x·W1 and h·W2. Backward adds dW2 = hᵀ·dl, dh = dl·W2ᵀ and dW1 = xᵀ·dz (no dx).
    let forward_flops = 2.0 * (b * d * h + b * h * o) as f64;
    let grad_flops = forward_flops + 2.0 * (b * d * h + 2 * b * h * o) as f64;
    vec![
        Row::new("mlp_grad", "forward", fwd_ms).flops(forward_flops),
        Row::new("mlp_grad", "value_and_grad", grad_ms).flops(grad_flops),
    ]
}

fn json(r: &Row) -> String {
    // Per-call times (tiny_call) are far below a millisecond: keep their significant digits.
    let ms = if r.ms < 0.1 { format!("{:.6}", r.ms) } else { format!("{:.3}", r.ms) };
    let mut s = format!("{{\"case\": \"{}\", \"variant\": \"{}\", \"ms\": {ms}", r.case, r.variant);
    if let Some(g) = r.gbps {
        s += &format!(", \"gbps\": {g:.2}");
    }
    if let Some(g) = r.gflops {
        s += &format!(", \"gflops\": {g:.1}");
    }
    if let Some((key, v)) = r.extra {
        s += &format!(", \"{key}\": {v:.3}");
    }
    s + "}"
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let as_json = args.iter().any(|a| a == "--json");
    args.retain(|a| a != "--json");
    let mut reps = 7;
    if let Some(i) = args.iter().position(|a| a == "--reps") {
        reps = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("--reps needs a positive integer");
            std::process::exit(2)
        });
        args.drain(i..=i + 1);
    }
    let mut on_gpu = false;
    if let Some(i) = args.iter().position(|a| a == "--device") {
        on_gpu = match args.get(i + 1).map(String::as_str) {
            Some("gpu") => true,
            Some("cpu") => false,
            _ => {
                eprintln!("--device needs cpu or gpu");
                std::process::exit(2)
            }
        };
        args.drain(i..=i + 1);
    }
    let device = if on_gpu { kiln::Device::gpu(0) } else { kiln::Device::cpu() };
    if let Err(e) = kiln::set_default_device(device) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let (all, reference): (&[&str], &str) = if on_gpu { (&gpu::CASES, "d2d_copy") } else { (&ALL_CASES, "memcpy") };
    let mut cases: Vec<String> = if args.is_empty() { all.iter().map(|s| s.to_string()).collect() } else { args };
    // The copy reference every ratio is read against is always measured in the same run.
    if !cases.iter().any(|c| c == reference) {
        cases.insert(0, reference.into());
    }
    if as_json {
        println!("{{\"case\": \"native_target\", \"variant\": \"{}\"}}", kiln::backend::cpu::native::target_name());
    }
    let mut rows = Vec::new();
    let mut profile = None;
    for case in &cases {
        // The reference copy is not profiled: its time is the device's, not the host's.
        if case != reference && profile.is_none() {
            profile = sampler::start();
        }
        let case_rows = if on_gpu { gpu::run_case(case, reps) } else { run_case(case, reps) };
        for row in case_rows {
            if as_json {
                println!("{}", json(&row));
            }
            rows.push(row);
        }
    }
    if let Some(path) = profile {
        sampler::finish(&path);
    }
    if !as_json {
        print_table(&rows);
    }
}

fn print_table(rows: &[Row]) {
    let reference = rows.iter().find(|r| r.variant == "reference");
    let memcpy = reference.and_then(|r| r.gbps);
    let reference_name = reference.map_or("memcpy", |r| r.case);

    let forward = rows.iter().find(|r| r.case == "mlp_grad" && r.variant == "forward").map(|r| r.ms);
    println!("kiln benchmark ({} threads, float32, {:?} elements; matmul {n}x{n})", kiln_threads(), SHAPE, n = MATMUL_N);
    match kiln::default_device().kind {
        kiln::DeviceKind::Gpu => {
            let g = kiln::backend::cuda::context::gpu("bench", 0).expect("GPU 0");
            println!("device: GPU 0, {} ({}, {} SMs)", g.name, g.arch(), g.multiprocessors);
        }
        kiln::DeviceKind::Cpu => println!("native code built for: {}", kiln::backend::cpu::native::target_name()),
    }
    println!("{:<13} {:<14} {:>10} {:>10} {:>10}  ratio", "case", "variant", "ms", "GB/s", "GFLOP/s");
    for r in rows {
        let mut notes = Vec::new();
        let direct = rows.iter().find(|d| d.case == r.case && d.variant == "gemm_direct").and_then(|d| d.gflops);
        match (r.gbps, memcpy, r.gflops, direct) {
            _ if r.variant == "value_and_grad" => notes.extend(forward.map(|f| format!("{:.2}x forward", r.ms / f))),
            _ if r.case == "mlp_grad" => {}
            (Some(g), Some(m), _, _) => notes.push(format!("{:.0}% of {reference_name}", 100.0 * g / m)),
            (_, _, Some(g), Some(d)) => notes.push(format!("{:.0}% of gemm_direct", 100.0 * g / d)),
            _ => {}
        }
        match r.extra {
            Some(("steps_per_s", v)) => notes.push(format!("{v:.1} steps/s")),
            Some(("us", v)) => notes.push(format!("{v:.2} us/call")),
            Some((k, v)) => notes.push(format!("{k} {v:.3}")),
            None => {}
        }
        if matches!(r.variant, "compiled" | "native" | "interpreted") {
            if let Some(hand) = rows.iter().find(|h| h.case == r.case && h.variant == "handwritten") {
                notes.push(format!("{:.0}% of handwritten speed", 100.0 * hand.ms / r.ms));
            }
            if let Some(eager) = rows.iter().find(|e| e.case == r.case && e.variant == "eager") {
                let speedup = eager.ms / r.ms;
                notes.push(if speedup >= 1.0 {
                    format!("{speedup:.2}x faster than eager")
                } else {
                    format!("{:.2}x slower than eager", 1.0 / speedup)
                });
            }
        }
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let ms = if r.ms < 0.1 { format!("{:.5}", r.ms) } else { format!("{:.2}", r.ms) };
        println!("{:<13} {:<14} {:>10} {:>10} {:>10}  {}", r.case, r.variant, ms, fmt(r.gbps), fmt(r.gflops), notes.join(", "));
    }
}

fn kiln_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
