//! Memory stays flat over long runs (its own test binary, so no other test's arrays move the
//! global counters): 10,000 cycles of creating, calling and dropping a compiled function, and
//! 10,000 steps of a compiled training step fed its own outputs. Bytes held by arrays
//! (`active_memory`) must come back to where they were, and the process's resident memory may
//! not grow by more than a small bound after a warm-up (kernel caches fill during the warm-up).

use kiln::{compile, ops, value_and_grad, Array, Dtype, Result};

const WARM_UP: usize = 500;

/// Cycles per run: `KILN_MEMORY_CYCLES` (for longer runs), else 10,000.
fn cycles() -> usize {
    std::env::var("KILN_MEMORY_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}
/// The most the resident set may grow between the end of the warm-up and the end of the run.
const RSS_GROWTH_LIMIT: usize = 8 << 20;

/// Resident bytes of this process (Linux's /proc/self/statm), or None elsewhere, or under a
/// sanitizer (`KILN_SANITIZER`, set by `scripts/sanitize`), whose allocator keeps freed memory
/// in quarantine to catch uses after free, so the resident size is not the program's.
fn resident_bytes() -> Option<usize> {
    if std::env::var_os("KILN_SANITIZER").is_some() {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Runs `cycle` `cycles()` times; after the warm-up and at the end, reads active and resident memory.
fn flat(what: &str, mut cycle: impl FnMut(usize)) {
    // Native kernels build in the background and load at a later call: let them all load first.
    for i in 0..WARM_UP {
        cycle(i);
    }
    kiln::backend::cpu::native::wait_for_builds();
    for i in 0..WARM_UP {
        cycle(i);
    }
    kiln::clear_cache();
    let (active, rss) = (kiln::active_memory(), resident_bytes());
    for i in WARM_UP..cycles() {
        cycle(i);
    }
    kiln::clear_cache();
    let (active_end, rss_end) = (kiln::active_memory(), resident_bytes());
    eprintln!("{what}: active {active} -> {active_end} bytes, resident {rss:?} -> {rss_end:?}");
    assert_eq!(active_end, active, "{what}: arrays hold {} more bytes after {} cycles", cycles(), active_end as i64 - active as i64);
    if let (Some(a), Some(b)) = (rss, rss_end) {
        assert!(b <= a + RSS_GROWTH_LIMIT, "{what}: resident memory grew by {} KiB over {} cycles", (b - a) >> 10, cycles() - WARM_UP);
    }
}

/// Binary cross entropy with logits of a linear model: [w (16, 1), b (1,), x (32, 16), y (32,)].
fn bce_loss(a: &[Array]) -> Result<Vec<Array>> {
    let logits = ops::squeeze(ops::add(ops::matmul(&a[2], &a[0])?, &a[1])?, None)?;
    let per = ops::subtract(ops::logaddexp(0.0, &logits)?, ops::multiply(&a[3], &logits)?)?;
    Ok(vec![ops::mean(per, None, false)?])
}

/// One SGD step: [w, b, x, y] to [loss, w', b'].
fn train_step(a: &[Array]) -> Result<Vec<Array>> {
    let (loss, grads) = value_and_grad(bce_loss, &[0, 1])(a)?;
    let w = ops::subtract(&a[0], ops::multiply(&grads[0], 0.1)?)?;
    let b = ops::subtract(&a[1], ops::multiply(&grads[1], 0.1)?)?;
    Ok(vec![loss[0].clone(), w, b])
}

fn input(n: usize, shape: &[usize], scale: f64) -> Array {
    let v: Vec<f64> = (0..n).map(|i| ((i * 37 % 17) as f64 / 17.0 - 0.5) * scale).collect();
    ops::astype(Array::from_slice(&v, shape).unwrap(), Dtype::F32).unwrap()
}

#[test]
fn compiled_functions_and_training_steps_hold_memory_flat_over_10000_cycles() {
    kiln::with_device(kiln::Device::cpu(), run).unwrap();
}

fn run() {
    let x = input(32 * 16, &[32, 16], 2.0);
    x.eval().unwrap();
    // 1. Create, call and drop a compiled function, again and again.
    flat("compile, call and drop", |i| {
        let k = (i % 7) as f64;
        let f = compile(move |a: &[Array]| Ok(vec![ops::add(ops::multiply(ops::tanh(&a[0])?, k)?, ops::sum(&a[0], None, false)?)?]));
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        out[0].eval().unwrap();
    });
    // 2. A compiled training step fed its own outputs.
    let step = compile(train_step);
    let y = ops::astype(ops::greater(ops::sum(&x, Some(&[1]), false).unwrap(), 0.0).unwrap(), Dtype::F32).unwrap();
    let mut params = vec![input(16, &[16, 1], 0.2), ops::zeros(&[1], Dtype::F32).unwrap()];
    let mut losses = Vec::new();
    flat("compiled training step", |i| {
        let out = step.call(&[params[0].clone(), params[1].clone(), x.clone(), y.clone()]).unwrap();
        params = vec![out[1].clone(), out[2].clone()];
        if i % 2000 == 0 {
            losses.push(out[0].item::<f32>().unwrap());
        }
    });
    assert_eq!(step.trace_count(), 1, "the training step traced again");
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "the loss did not fall: {losses:?}");
}
