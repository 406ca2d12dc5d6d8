//! The compile cases: each times a function run eagerly (a graph built and evaluated per call)
//! against the same function through `kiln::compile` (traced once, then the fused plan replayed),
//! with paired timing so that machine noise hits both alike.
//!
//! - `gelu`, `silu`: elementwise chains on 32x1000x4096 float32 (GB/s counts one read and one
//!   write).
//! - `layernorm`, `softmax`: last-axis reductions and elementwise work on 4096x4096 float32,
//!   written with primitive ops (no `ops::softmax`, no `ops::var`).
//! - `batchnorm`, `softmax_axis0`: the same over the first axis (column reductions): a batch
//!   norm's per-feature statistics over a batch of 4096, softmax over axis 0.
//! - `mlp_step`: a whole training step (value_and_grad, SGD with momentum) of a 784-256-10 relu
//!   MLP, state held in `ArrayList`s; the compiled step declares them as inputs and outputs.
//! - `first_compile`: a fresh compiled GELU's first call on 1000x1000 (trace, simplify, fuse,
//!   run), with the eager GELU on the same input as a reference.
//! - `tiny_call`: per-call overhead on a 4-element input, averaged over many calls.

use crate::{paired_median_ms, random_input, Row, SHAPE};
use kiln::backend::cpu::native;
use kiln::{ops, Array, ArrayList, CompileOptions, Dtype, Result};

/// Side of the square `layernorm` and `softmax` inputs.
const NORM_N: usize = 4096;
/// Batch, input, hidden and output widths of the `mlp_step` case.
const MLP_STEP: [usize; 4] = [128, 784, 256, 10];
/// SGD learning rate and momentum of the `mlp_step` case.
const LR: f64 = 0.1;
const MOMENTUM: f64 = 0.9;
/// Input of the `first_compile` case: small, so that the time is compile cost, not kernel time.
const FIRST_COMPILE_SHAPE: [usize; 2] = [1000, 1000];
/// Calls per repetition of the `tiny_call` case.
const TINY_CALLS: usize = 10_000;

/// x * (1 + erf(x / sqrt 2)) / 2.
pub(crate) fn gelu(a: &[Array]) -> Result<Array> {
    let x = &a[0];
    let inner = ops::erf(ops::divide(x, std::f64::consts::SQRT_2)?)?;
    ops::divide(ops::multiply(x, ops::add(inner, 1.0)?)?, 2.0)
}

/// x * sigmoid(x).
pub(crate) fn silu(a: &[Array]) -> Result<Array> {
    ops::multiply(&a[0], ops::sigmoid(&a[0])?)
}

/// Layer normalization over the last axis of a[0], scaled by a[1] and shifted by a[2].
pub(crate) fn layernorm(a: &[Array]) -> Result<Array> {
    let (x, w, b) = (&a[0], &a[1], &a[2]);
    let mean = ops::mean(x, Some(&[-1]), true)?;
    let dev = ops::subtract(x, &mean)?;
    let var = ops::mean(ops::square(&dev)?, Some(&[-1]), true)?;
    let normed = ops::multiply(&dev, ops::rsqrt(ops::add(var, 1e-5)?)?)?;
    ops::add(ops::multiply(normed, w)?, b)
}

/// Softmax over the last axis: exp(x - max) / sum.
pub(crate) fn softmax(a: &[Array]) -> Result<Array> {
    softmax_over(&a[0], -1)
}

/// Softmax over `axis` of `x`.
fn softmax_over(x: &Array, axis: i64) -> Result<Array> {
    let e = ops::exp(ops::subtract(x, ops::max(x, Some(&[axis]), true)?)?)?;
    ops::divide(&e, ops::sum(&e, Some(&[axis]), true)?)
}

/// Softmax over the first axis.
fn softmax_axis0(a: &[Array]) -> Result<Array> {
    softmax_over(&a[0], 0)
}

/// Batch normalization (training mode) of a[0], (batch, features): each feature normalized by
/// its mean and variance over the batch, scaled by a[1] and shifted by a[2].
fn batchnorm(a: &[Array]) -> Result<Array> {
    let (x, w, b) = (&a[0], &a[1], &a[2]);
    let mean = ops::mean(x, Some(&[0]), true)?;
    let dev = ops::subtract(x, &mean)?;
    let var = ops::mean(ops::square(&dev)?, Some(&[0]), true)?;
    let normed = ops::multiply(&dev, ops::rsqrt(ops::add(var, 1e-5)?)?)?;
    ops::add(ops::multiply(normed, w)?, b)
}

/// exp(-x) + x * 2.
fn tiny(a: &[Array]) -> Result<Array> {
    ops::add(ops::exp(ops::negative(&a[0])?)?, ops::multiply(&a[0], 2.0)?)
}

/// `f` compiled, as a function returning one array.
pub(crate) fn compile_one(f: fn(&[Array]) -> Result<Array>) -> kiln::Compiled {
    kiln::compile(move |a: &[Array]| Ok(vec![f(a)?]))
}

/// Uniform values in [-bound, bound), drawn from `seed`, evaluated.
fn uniform(shape: &[usize], bound: f64, seed: u64) -> Array {
    let key = kiln::random::key(seed);
    let x = kiln::random::uniform(-bound, bound, shape, Dtype::F32, Some(&key)).expect("uniform");
    x.eval().expect("eval");
    x
}

/// Warns (on stderr, so JSON output stays valid) where `compiled` is not close to `eager`:
/// a speedup of a wrong result is no speedup.
fn check_close(case: &str, eager: &[Array], compiled: &[Array], tol: f64) {
    for (i, (e, c)) in eager.iter().zip(compiled).enumerate() {
        let diff = ops::max(ops::abs(ops::subtract(e, c).unwrap()).unwrap(), None, false).unwrap();
        let scale = ops::max(ops::abs(e).unwrap(), None, false).unwrap();
        let (diff, scale) = (diff.item::<f32>().unwrap() as f64, scale.item::<f32>().unwrap() as f64);
        if diff.is_nan() || diff > tol * (1.0 + scale) {
            eprintln!("warning: {case}: compiled result {i} differs from eager by {diff:e} (largest |value| {scale:e})");
        }
    }
}

/// Evaluates `arrays` and, on a GPU, waits for it: a step is timed until its results exist.
fn finish(arrays: &[&Array]) {
    kiln::eval(arrays).unwrap();
    let device = kiln::default_device();
    if device.kind == kiln::DeviceKind::Gpu {
        kiln::synchronize(kiln::Stream::default_for(device)).unwrap();
    }
}

/// Calls `call` once (queueing its kernels' native builds), waits for the builds, then calls it
/// until the engines' timing trial has decided which runs each kernel: what follows is the
/// steady state. `1 + 2 * TRIAL_RUNS` calls in all.
fn steady(mut call: impl FnMut()) {
    call();
    native::wait_for_builds();
    for _ in 0..2 * native::TRIAL_RUNS {
        call();
    }
}

/// A benchmarked function of its arguments.
type CaseFn = fn(&[Array]) -> Result<Array>;

/// `gelu`, `silu`, `layernorm`, `softmax`, `batchnorm` or `softmax_axis0`, eager against compiled.
pub(crate) fn elementwise(case: &str, reps: usize) -> Vec<Row> {
    let square = [NORM_N, NORM_N];
    let (name, f, args): (&'static str, CaseFn, Vec<Array>) = match case {
        "gelu" => ("gelu", gelu, vec![random_input(&SHAPE)]),
        "silu" => ("silu", silu, vec![random_input(&SHAPE)]),
        "layernorm" | "batchnorm" => {
            let (w, b) = (uniform(&[NORM_N], 1.0, 1), uniform(&[NORM_N], 1.0, 2));
            let args = vec![random_input(&square), w, b];
            if case == "layernorm" { ("layernorm", layernorm, args) } else { ("batchnorm", batchnorm, args) }
        }
        "softmax" => ("softmax", softmax, vec![random_input(&square)]),
        "softmax_axis0" => ("softmax_axis0", softmax_axis0, vec![random_input(&square)]),
        other => unreachable!("not an elementwise compile case: {other}"),
    };
    // One read of the input and one write of the output (the (4096,) weights are negligible).
    let bytes = 2 * args[0].nbytes();
    let compiled = compile_one(f);
    check_close(name, &[f(&args).unwrap()], &compiled.call(&args).unwrap(), 1e-5);
    // The first call queued the kernels' native builds: time the steady state.
    steady(|| compiled.call(&args).unwrap()[0].eval().unwrap());
    let (eager_ms, compiled_ms) = paired_median_ms(
        reps,
        || f(&args).unwrap().eval().unwrap(),
        || compiled.call(&args).unwrap()[0].eval().unwrap(),
    );
    let interpreted_ms = native::with_engine(native::Engine::Interpreter, || {
        crate::median_ms(reps, || compiled.call(&args).unwrap()[0].eval().unwrap())
    });
    let native_ms = native::with_engine(native::Engine::NativeNow, || {
        crate::median_ms(reps, || compiled.call(&args).unwrap()[0].eval().unwrap())
    });
    let mut rows = vec![
        Row::new(name, "eager", eager_ms).bytes(bytes),
        Row::new(name, "compiled", compiled_ms).bytes(bytes),
        Row::new(name, "native", native_ms).bytes(bytes),
        Row::new(name, "interpreted", interpreted_ms).bytes(bytes),
    ];
    if name == "gelu" {
        rows.push(Row::new(name, "handwritten", gelu_handwritten_ms(&args[0], &f(&args).unwrap(), reps)).bytes(bytes));
    }
    rows
}

/// Median ms of GELU written by hand as one loop (the same formula and the same erf
/// approximation kiln's kernels use, built for AVX-512 or AVX2+FMA where the CPU has them),
/// split across the cores, into an output allocated once: what Rust's own vectoriser makes of
/// register-level fused code on this machine, the reference for how far `compiled` is from it
/// (native code, built by the C compiler with 512-bit vectors, can beat it). `eager` is the
/// result it is checked against.
fn gelu_handwritten_ms(x: &Array, eager: &Array, reps: usize) -> f64 {
    use kiln::backend::cpu::math::{erf_f32, Fused, MulAdd, Unfused};
    #[inline(always)]
    fn body<M: MulAdd>(x: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v * (1.0 + erf_f32::<M>(v / std::f32::consts::SQRT_2)) / 2.0;
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
    unsafe fn avx512(x: &[f32], out: &mut [f32]) {
        body::<Fused>(x, out)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(x: &[f32], out: &mut [f32]) {
        body::<Fused>(x, out)
    }
    fn chunk(x: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            use kiln::backend::cpu::simd::{has_avx2_fma, has_avx512};
            // Safety: each copy runs only where the CPU has its features.
            if has_avx512() {
                return unsafe { avx512(x, out) };
            } else if has_avx2_fma() {
                return unsafe { avx2(x, out) };
            }
        }
        body::<Unfused>(x, out)
    }
    let input = x.to_vec::<f32>().unwrap();
    let mut out = vec![0.0f32; input.len()];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = input.len().div_ceil(threads);
    let mut run = || {
        std::thread::scope(|s| {
            for (xs, os) in input.chunks(per).zip(out.chunks_mut(per)) {
                s.spawn(move || chunk(xs, os));
            }
        })
    };
    let ms = crate::median_ms(reps, &mut run);
    check_close("gelu handwritten", std::slice::from_ref(eager), &[Array::from_slice(&out, x.shape()).unwrap()], 1e-5);
    ms
}

/// Softmax cross-entropy of a relu MLP: args [w1, b1, w2, b2, x, one-hot labels].
fn mlp_loss(a: &[Array]) -> Result<Vec<Array>> {
    let hidden = ops::maximum(ops::add(ops::matmul(&a[4], &a[0])?, &a[1])?, 0.0)?;
    let logits = ops::add(ops::matmul(&hidden, &a[2])?, &a[3])?;
    let picked = ops::sum(ops::multiply(&logits, &a[5])?, Some(&[-1]), false)?;
    let per_example = ops::subtract(ops::logsumexp(&logits, Some(&[-1]), false)?, picked)?;
    Ok(vec![ops::mean(per_example, None, false)?])
}

/// One SGD-with-momentum step (mlx's `v = momentum * v + g; p = p - lr * v`) on the parameters
/// in `params` and the velocities in `velocity`, which it replaces. Returns the loss.
fn sgd_step(params: &ArrayList, velocity: &ArrayList, x: &Array, onehot: &Array) -> Result<Array> {
    let p = params.to_vec();
    let v = velocity.to_vec();
    let mut args = p.clone();
    args.extend([x.clone(), onehot.clone()]);
    let (loss, grads) = kiln::value_and_grad(mlp_loss, &[0, 1, 2, 3])(&args)?;
    let (mut new_p, mut new_v) = (Vec::new(), Vec::new());
    for ((p, v), g) in p.iter().zip(&v).zip(&grads) {
        let v = ops::add(ops::multiply(v, MOMENTUM)?, g)?;
        new_p.push(ops::subtract(p, ops::multiply(&v, LR)?)?);
        new_v.push(v);
    }
    params.replace(new_p);
    velocity.replace(new_v);
    Ok(loss.into_iter().next().expect("a loss"))
}

/// Fresh parameters (scaled uniform, so that training stays finite) and zero velocities.
fn mlp_state() -> (ArrayList, ArrayList) {
    let [_, d, h, o] = MLP_STEP;
    let shapes: [&[usize]; 4] = [&[d, h], &[h], &[h, o], &[o]];
    let fan_in = [d, d, h, h];
    let params = shapes.iter().zip(fan_in).enumerate().map(|(i, (s, f))| uniform(s, 1.0 / (f as f64).sqrt(), 10 + i as u64));
    let zeros = shapes.iter().map(|s| ops::zeros(s, Dtype::F32).unwrap());
    (ArrayList::new(params.collect()), ArrayList::new(zeros.collect()))
}

/// Evaluates the loss and everything in the lists.
fn eval_state(loss: &Array, lists: [&ArrayList; 2]) {
    let mut all = lists[0].to_vec();
    all.extend(lists[1].to_vec());
    all.push(loss.clone());
    finish(&all.iter().collect::<Vec<_>>());
}

/// A training step of the MLP, eager against the whole step compiled (state lists declared as
/// implicit inputs and outputs); each variant trains its own copy of the same initial state.
pub(crate) fn mlp_step(reps: usize) -> Vec<Row> {
    let [b, d, h, o] = MLP_STEP;
    let x = uniform(&[b, d], 1.0, 3);
    // Deterministic labels, one-hot encoded.
    let mut onehot = vec![0.0f32; b * o];
    for i in 0..b {
        onehot[i * o + (i * 7 + 3) % o] = 1.0;
    }
    let onehot = Array::from_slice(&onehot, &[b, o]).unwrap();
    let (ep, ev) = mlp_state();
    let (cp, cv) = mlp_state();
    let (sp, sv) = (cp.clone(), cv.clone());
    let step = kiln::compile_with(
        move |a: &[Array]| Ok(vec![sgd_step(&sp, &sv, &a[0], &a[1])?]),
        CompileOptions::new().inputs(&cp).inputs(&cv).outputs(&cp).outputs(&cv),
    );
    let data = [x.clone(), onehot.clone()];
    // Both variants take as many steps here; the compiled one's first queues its native builds.
    steady(|| eval_state(&step.call(&data).unwrap()[0], [&cp, &cv]));
    for _ in 0..=2 * native::TRIAL_RUNS {
        eval_state(&sgd_step(&ep, &ev, &x, &onehot).unwrap(), [&ep, &ev]);
    }
    let (eager_ms, compiled_ms) = paired_median_ms(
        reps,
        || eval_state(&sgd_step(&ep, &ev, &x, &onehot).unwrap(), [&ep, &ev]),
        || eval_state(&step.call(&data).unwrap()[0], [&cp, &cv]),
    );
    // Both variants took the same number of steps from the same state.
    check_close("mlp_step", &[ep.to_vec(), ev.to_vec()].concat(), &[cp.to_vec(), cv.to_vec()].concat(), 1e-4);
    // Forward: x·W1 and h·W2. Backward adds dW2 = hᵀ·dl, dh = dl·W2ᵀ and dW1 = xᵀ·dz (no dx).
    let flops = 2.0 * (b * d * h + b * h * o) as f64 + 2.0 * (b * d * h + 2 * b * h * o) as f64;
    let row = |variant, ms: f64| Row::new("mlp_step", variant, ms).flops(flops).extra("steps_per_s", 1e3 / ms);
    vec![row("eager", eager_ms), row("compiled", compiled_ms)]
}

/// From creating a compiled GELU to its first result, a fresh compiled function (so a fresh
/// cache) each time; the eager GELU on the same input is the reference.
pub(crate) fn first_compile(reps: usize) -> Vec<Row> {
    let x = [random_input(&FIRST_COMPILE_SHAPE)];
    let (eager_ms, compiled_ms) = paired_median_ms(
        reps,
        || gelu(&x).unwrap().eval().unwrap(),
        || compile_one(gelu).call(&x).unwrap()[0].eval().unwrap(),
    );
    vec![Row::new("first_compile", "eager", eager_ms), Row::new("first_compile", "compiled", compiled_ms)]
}

/// Per-call time of a tiny function, eager against compiled, over `TINY_CALLS` calls.
pub(crate) fn tiny_call(reps: usize) -> Vec<Row> {
    let x = [Array::from_slice(&[-1.5f32, -0.25, 0.5, 2.0], &[4]).unwrap()];
    let compiled = compile_one(tiny);
    check_close("tiny_call", &[tiny(&x).unwrap()], &compiled.call(&x).unwrap(), 1e-6);
    steady(|| finish(&[&compiled.call(&x).unwrap()[0]]));
    let (eager_ms, compiled_ms) = paired_median_ms(
        reps,
        || (0..TINY_CALLS).for_each(|_| finish(&[&tiny(&x).unwrap()])),
        || (0..TINY_CALLS).for_each(|_| finish(&[&compiled.call(&x).unwrap()[0]])),
    );
    let row = |variant, ms: f64| {
        let per_call = ms / TINY_CALLS as f64;
        Row::new("tiny_call", variant, per_call).extra("us", per_call * 1e3)
    };
    vec![row("eager", eager_ms), row("compiled", compiled_ms)]
}
