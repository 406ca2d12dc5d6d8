//! Memory behaviour, in its own test binary (one test) so the global counters are not shared with
//! other tests running in parallel.
use kiln::{ops, Array, Dtype};

const N: usize = 1 << 22; // 16 MiB of float32

fn big() -> Array {
    let x = ops::full(&[N], 1.5, Some(Dtype::F32)).unwrap();
    ops::copy(&x).unwrap()
}

/// The CPU's memory: its donation and its block cache (tests/gpu.rs covers the GPU's).
#[test]
fn intermediates_are_freed_and_buffers_donated() {
    kiln::with_device(kiln::Device::cpu(), on_the_cpu).unwrap();
}

fn on_the_cpu() {
    let mb = |b: usize| b as f64 / (1 << 20) as f64;
    let x = big();
    x.eval().unwrap();
    kiln::reset_peak_memory();
    let base = kiln::active_memory();

    // A chain of ten elementwise ops: intermediates die at their last use and donate their storage,
    // so the peak stays near one extra array instead of ten.
    let mut y = ops::add(&x, 1.0).unwrap();
    for _ in 0..9 {
        y = ops::multiply(&y, 1.0).unwrap();
    }
    y.eval().unwrap();
    let peak = kiln::peak_memory() - base;
    assert!(peak <= 2 * N * 4 + (1 << 20), "peak {:.1} MiB over base for a 10-op chain", mb(peak));
    assert_eq!(y.to_vec::<f32>().unwrap()[N - 1], 2.5);
    // x is still intact: it was held by the test, so never donated.
    assert_eq!(x.to_vec::<f32>().unwrap()[0], 1.5);

    // Dropping the result returns its memory to the cache, and the next allocation reuses it.
    let active = kiln::active_memory();
    drop(y);
    assert_eq!(kiln::active_memory(), active - N * 4);
    let cached = kiln::cache_memory();
    assert!(cached >= N * 4);
    let z = big();
    z.eval().unwrap();
    assert!(kiln::cache_memory() < cached, "the new array reused a cached block");
    kiln::clear_cache();
    assert_eq!(kiln::cache_memory(), 0);

    // An array larger than the machine is a clear error, not an aborted process; the node can be
    // asked again (it stays pending).
    let huge = ops::add(ops::zeros(&[1 << 22, 1 << 22], Dtype::F32).unwrap(), 1.0).unwrap();
    for _ in 0..2 {
        let e = huge.eval().expect_err("64 TiB cannot be allocated");
        assert_eq!(e.kind, kiln::ErrorKind::Device, "{e}");
        assert!(e.message.contains("out of host memory") && e.message.contains("(4194304, 4194304)") && e.op == "add", "{e}");
    }
    // A reshape that must copy (a broadcast merged with real axes) and a compiled kernel's output
    // are checked the same way.
    let small = ops::expand_dims(Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap(), &[-1]).unwrap();
    let merged = ops::reshape(ops::broadcast_to(&small, &[2, 2, 1 << 42]).unwrap(), &[-1]).unwrap();
    let e = merged.eval().expect_err("a 64 TiB copy cannot be allocated");
    assert!(e.message.contains("out of host memory") && e.op == "reshape", "{e}");
    let f = kiln::compile(|a: &[Array]| Ok(vec![ops::add(ops::broadcast_to(&a[0], &[1 << 22, 1 << 22])?, 1.0)?]));
    let row = ops::copy(ops::full(&[1 << 22], 1.0, Some(Dtype::F32)).unwrap()).unwrap();
    let e = f.call(&[row]).and_then(|r| r[0].eval()).expect_err("64 TiB");
    assert!(e.message.contains("out of host memory"), "{e}");
    // set_memory_limit holds for host arrays too (after freeing the cache).
    let before = kiln::set_memory_limit(kiln::active_memory() + (1 << 20));
    let e = ops::exp(&x).unwrap().eval().expect_err("16 MiB more exceeds a limit 1 MiB above what arrays hold");
    assert!(e.message.contains("set_memory_limit"), "{e}");
    let small = ops::exp(ops::full(&[1000], 1.0, Some(Dtype::F32)).unwrap()).unwrap();
    small.eval().expect("4 KB fits under the limit");
    kiln::set_memory_limit(before);
    assert_eq!(ops::exp(&x).unwrap().to_vec::<f32>().unwrap()[0], 1.5f32.exp());
}
