//! The GPU cases of `scripts/bench --device gpu`: the CPU bench's cases and JSON keys, timed on
//! GPU 0 with the GPU waited for after each run, and `d2d_copy` (the driver's device-to-device
//! copy of the same bytes) as the reference row every bandwidth is read against.

use crate::{median_ms, random_input, Row, SHAPE};
use cudarc::driver::result as cu;
use kiln::backend::cuda::{context, memory::DeviceBlock};
use kiln::{ops, Array, Device, Dtype, Stream};

/// The GPU cases, in order.
pub const CASES: [&str; 19] = [
    "d2d_copy", "copy", "add", "gelu", "sum", "sum_rows", "tiny_op", "matmul", "argsort", "cumsum", "take", "to_device", "to_host",
    "compiled", "first_compiled", "tiny_call", "mlp_step", "qmatmul", "loop_shapes",
];

/// The compiled cases' square inputs (the 4096² softmax and layer norm).
const SQUARE: [usize; 2] = [4096, 4096];

/// Elements of the transfer cases' float32 arrays (64 MiB).
const TRANSFER: usize = 16 << 20;

/// The argsort case's rows and row length (the reference problem).
const ARGSORT: [usize; 2] = [4096, 8192];

/// The take case: rows of a 32000×4096 table gathered at 8192 random positions (an embedding
/// lookup).
const TABLE: [usize; 2] = [32000, 4096];
const LOOKUPS: usize = 8192;

/// The matmul case's size: 4096² by 4096² (the reference problem).
const MATMUL_N: usize = 4096;

/// Evaluates `a` and waits for the GPU.
fn done(a: &Array) {
    a.eval().expect("eval");
    kiln::synchronize(Stream::default_for(Device::gpu(0))).expect("synchronize");
}

/// The share of the stream waits since `before` (a [`kiln::backend::cuda::synchronize_waits`]
/// reading) that went by a completion word rather than the driver.
fn word_share(before: (u64, u64)) -> f64 {
    let (word, driver) = kiln::backend::cuda::synchronize_waits();
    let (w, d) = (word - before.0, driver - before.1);
    w as f64 / (w + d).max(1) as f64
}

/// Runs `f` until eager fusion ran a fused kernel in it (its kernels, built in the background,
/// are ready), or until a run finds nothing to fuse, so that timings see eager's steady state.
fn warm_eager_fusion(f: impl Fn()) {
    for _ in 0..1000 {
        let before = kiln::eager_fusion_stats();
        f();
        let after = kiln::eager_fusion_stats();
        if after.kernels > before.kernels || after.while_building == before.while_building {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Runs one GPU case.
pub fn run_case(case: &str, reps: usize) -> Vec<Row> {
    let n: usize = SHAPE.iter().product();
    let bytes = n * 4;
    match case {
        "d2d_copy" => {
            let g = context::gpu("bench", 0).expect("GPU 0");
            let stream = g.stream("bench", 0).expect("stream");
            let src = DeviceBlock::new("bench", g, stream, bytes).expect("alloc");
            let dst = DeviceBlock::new("bench", g, stream, bytes).expect("alloc");
            let ms = median_ms(reps, || unsafe {
                cu::memcpy_dtod_async(dst.ptr, src.ptr, bytes, stream).expect("copy");
                cu::stream::synchronize(stream).expect("sync");
            });
            vec![Row::new("d2d_copy", "reference", ms).bytes(2 * bytes)]
        }
        "copy" => {
            let x = random_input(&SHAPE);
            done(&x);
            let ms = median_ms(reps, || done(&ops::copy(&x).unwrap()));
            vec![Row::new("copy", "eager", ms).bytes(2 * bytes)]
        }
        "add" => {
            let (x, y) = (random_input(&SHAPE), random_input(&SHAPE));
            done(&x);
            done(&y);
            let ms = median_ms(reps, || done(&ops::add(&x, &y).unwrap()));
            vec![Row::new("add", "eager", ms).bytes(3 * bytes)]
        }
        "gelu" => {
            let x = random_input(&SHAPE);
            done(&x);
            let gelu = || done(&crate::compiled::gelu(std::slice::from_ref(&x)).unwrap());
            let was_on = kiln::set_eager_fusion(false);
            let op_by_op = median_ms(reps, gelu);
            kiln::set_eager_fusion(true);
            warm_eager_fusion(gelu);
            let fused = median_ms(reps, gelu);
            kiln::set_eager_fusion(was_on);
            vec![
                Row::new("gelu", "eager", fused).bytes(2 * bytes),
                Row::new("gelu", "eager op by op", op_by_op).bytes(2 * bytes),
            ]
        }
        "compiled" => compiled_rows(reps),
        // The CPU bench's cases, each call or step waited for on the GPU.
        "tiny_call" => crate::compiled::tiny_call(reps),
        "mlp_step" => crate::compiled::mlp_step(reps),
        "qmatmul" => crate::quantized::qmatmul(reps, done),
        "first_compiled" => {
            // The GPU is started first (an input on it); then the first call of a compiled GELU:
            // trace, fuse, NVRTC build or disk-cache load, run. In a fresh process with an empty
            // `KILN_CACHE_DIR` this is the cold first result, with a filled one the warm one.
            let x = random_input(&[1000, 1000]);
            done(&x);
            let gelu = crate::compiled::compile_one(crate::compiled::gelu);
            let start = std::time::Instant::now();
            done(&gelu.call(std::slice::from_ref(&x)).expect("compiled")[0]);
            vec![Row::new("first_compiled", "first call", start.elapsed().as_secs_f64() * 1e3)]
        }
        "sum" => {
            let x = random_input(&SHAPE);
            done(&x);
            let ms = median_ms(reps, || done(&ops::sum(&x, None, false).unwrap()));
            vec![Row::new("sum", "eager", ms).bytes(bytes)]
        }
        "sum_rows" => {
            let x = random_input(&SHAPE);
            done(&x);
            let ms = median_ms(reps, || done(&ops::sum(&x, Some(&[-1]), false).unwrap()));
            vec![Row::new("sum_rows", "eager", ms).bytes(bytes)]
        }
        "tiny_op" => {
            let x = random_input(&[4]);
            done(&x);
            const CALLS: usize = 1000;
            let waits = kiln::backend::cuda::synchronize_waits();
            let ms = median_ms(reps, || {
                for _ in 0..CALLS {
                    done(&ops::add(&x, 1.0f32).unwrap());
                }
            });
            // On stderr: which wait the eager calls got (the JSON on stdout stays rows only).
            eprintln!("tiny_op: {:.0}% of the eager calls' waits went by a completion word", 100.0 * word_share(waits));
            // Where the time goes: the host's part (calls queued, one wait at the end), and the
            // driver's floor (a 16-byte memset and a wait, no kiln).
            let queued = median_ms(reps, || {
                let last: Vec<Array> = (0..CALLS).map(|_| ops::add(&x, 1.0f32).unwrap()).inspect(|y| y.eval().unwrap()).collect();
                done(&last[CALLS - 1]);
            });
            let g = context::gpu("bench", 0).expect("GPU 0");
            let stream = g.stream("bench", 0).expect("stream");
            let block = DeviceBlock::new("bench", g, stream, 16).expect("alloc");
            let floor = median_ms(reps, || {
                for _ in 0..CALLS {
                    unsafe { cu::memset_d8_async(block.ptr, 0, 16, stream).expect("memset") };
                    unsafe { cu::stream::synchronize(stream).expect("sync") };
                }
            });
            // An empty kernel launched and waited for: the least any GPU op can cost.
            let empty = kiln::backend::cuda::nvrtc::handwritten("bench", g, "extern \"C\" __global__ void kiln_empty() {}", String::new(), "kiln_empty")
                .expect("empty kernel");
            let launch = median_ms(reps, || {
                for _ in 0..CALLS {
                    empty.launch("bench", stream, 1, 32, &mut []).expect("launch");
                    unsafe { cu::stream::synchronize(stream).expect("sync") };
                }
            });
            // The host work kiln does for any eager op: building the node, and add + eval on the CPU.
            let graph = median_ms(reps, || (0..CALLS).for_each(|_| drop(ops::add(&x, 1.0f32).unwrap())));
            let on_cpu = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
            let cpu = median_ms(reps, || {
                kiln::with_device(Device::cpu(), || (0..CALLS).for_each(|_| ops::add(&on_cpu, 1.0f32).unwrap().eval().unwrap())).unwrap()
            });
            let per_call = |v: &'static str, ms: f64| Row::new("tiny_op", v, ms / CALLS as f64).extra("us", ms * 1e3 / CALLS as f64);
            vec![
                per_call("eager", ms),
                per_call("queued", queued),
                per_call("driver_floor", floor),
                per_call("empty_launch_and_wait", launch),
                per_call("graph_node_only", graph),
                per_call("cpu_add_and_eval", cpu),
            ]
        }
        "matmul" => [Dtype::F32, Dtype::BF16]
            .into_iter()
            .map(|d| {
                let a = ops::astype(random_input(&[MATMUL_N, MATMUL_N]), d).unwrap();
                let b = ops::astype(random_input(&[MATMUL_N, MATMUL_N]), d).unwrap();
                done(&a);
                done(&b);
                let ms = median_ms(reps, || done(&ops::matmul(&a, &b).unwrap()));
                let tflops = 2.0 * (MATMUL_N as f64).powi(3) / (ms * 1e-3) / 1e12;
                Row::new("matmul", if d == Dtype::F32 { "float32" } else { "bfloat16" }, ms).extra("tflops", tflops)
            })
            .collect(),
        "argsort" => {
            let x = random_input(&ARGSORT);
            done(&x);
            let ms = median_ms(reps, || done(&ops::argsort(&x, Some(-1)).unwrap()));
            vec![Row::new("argsort", "eager", ms).bytes(8 * ARGSORT[0] * ARGSORT[1])]
        }
        "cumsum" => {
            let x = random_input(&SHAPE);
            done(&x);
            let ms = median_ms(reps, || done(&ops::cumsum(&x, Some(-1), false, true).unwrap()));
            vec![Row::new("cumsum", "eager", ms).bytes(2 * bytes)]
        }
        "take" => {
            let table = random_input(&TABLE);
            // Uniform in [-3, 3) mapped onto the table's rows.
            let scaled = ops::multiply(ops::add(random_input(&[LOOKUPS]), 3.0f32).unwrap(), TABLE[0] as f32 / 6.0).unwrap();
            let positions = ops::astype(scaled, Dtype::I32).unwrap();
            done(&table);
            done(&positions);
            let ms = median_ms(reps, || done(&ops::take(&table, &positions, Some(0)).unwrap()));
            vec![Row::new("take", "eager", ms).bytes(2 * 4 * LOOKUPS * TABLE[1])]
        }
        "to_device" => {
            // Each call moves a fresh host array (made beforehand) to the GPU.
            let host = || kiln::with_device(Device::cpu(), || random_input(&[TRANSFER])).expect("cpu");
            let mut fresh: Vec<Array> = (0..reps + 2).map(|_| host()).collect();
            let ms = median_ms(reps, || {
                let x = fresh.pop().expect("one array per call");
                done(&kiln::with_device(Device::gpu(0), || ops::negative(&x)).expect("gpu").expect("negative"));
            });
            vec![Row::new("to_device", "eager", ms).bytes(4 * TRANSFER)]
        }
        "to_host" => {
            // Each call reads a fresh GPU array (computed beforehand) on the host.
            let mut fresh: Vec<Array> = (0..reps + 2).map(|_| ops::negative(random_input(&[TRANSFER])).unwrap()).collect();
            fresh.iter().for_each(done);
            let ms = median_ms(reps, || {
                fresh.pop().expect("one array per call").raw_parts().expect("to the host");
            });
            vec![Row::new("to_host", "eager", ms).bytes(4 * TRANSFER)]
        }
        "loop_shapes" => crate::loop_shapes::run(reps),
        other => {
            eprintln!("unknown GPU case {other:?}; cases are: {}", CASES.join(" "));
            std::process::exit(2);
        }
    }
}

/// Eager against compiled on the GPU: gelu and silu on 32×1000×4096 (one fused elementwise
/// kernel), softmax and layer norm on 4096² (one fused row kernel each); bytes are the input
/// read and the output written once.
/// sum(x * x) over every element: a long reduction of one row.
fn sum_squares(a: &[Array]) -> kiln::Result<Array> {
    ops::sum(ops::multiply(&a[0], &a[0])?, None, false)
}

fn compiled_rows(reps: usize) -> Vec<Row> {
    use crate::compiled::{compile_one, gelu, layernorm, silu, softmax};
    type Case = (&'static str, fn(&[Array]) -> kiln::Result<Array>, &'static [usize]);
    let cases: [Case; 5] = [
        ("gelu_compiled", gelu, &SHAPE),
        ("silu_compiled", silu, &SHAPE),
        ("softmax_compiled", softmax, &SQUARE),
        ("layernorm_compiled", layernorm, &SQUARE),
        ("sum_squares_compiled", sum_squares, &SHAPE),
    ];
    let mut rows = Vec::new();
    for (name, f, shape) in cases {
        let cols = shape[shape.len() - 1];
        let mut args = vec![random_input(shape)];
        if name == "layernorm_compiled" {
            args.push(random_input(&[cols]));
            args.push(random_input(&[cols]));
        }
        args.iter().for_each(done);
        let compiled = compile_one(f);
        done(&compiled.call(&args).expect("compiled")[0]);
        // Bytes moved: the input read, and (but for the sum) an output of its size written.
        let passes = if name == "sum_squares_compiled" { 1 } else { 2 };
        let bytes = passes * 4 * shape.iter().product::<usize>();
        warm_eager_fusion(|| done(&f(&args).unwrap()));
        let eager = median_ms(reps, || done(&f(&args).unwrap()));
        let fused = median_ms(reps, || done(&compiled.call(&args).unwrap()[0]));
        let kernels = compiled.inspect(&args, &[]).expect("inspect").compiled_kernels as f64;
        rows.push(Row::new(name, "eager", eager).bytes(bytes));
        rows.push(Row::new(name, "compiled", fused).bytes(bytes).extra("kernels", kernels));
    }
    rows
}
