//! The GPU backend against the CPU: every elementwise op on every dtype, strided and broadcast
//! inputs, data movement, memory errors, ops that still run on the host, and compile on a GPU
//! stream. Tests that need a GPU print one line and return where there is none; the printer's
//! kernels are built with NVRTC wherever NVRTC is found, GPU or not.

mod common;

use common::gpu::{gpu, nvrtc_found};
use common::{array, assert_close, random_values, rtol_for, Rng};
use kiln::backend::cuda::{nvrtc, source};
use kiln::fused::{Inst, InstOp, Kernel, Level};
use kiln::ops;
use kiln::primitive::{BinaryOp, ReduceOp, UnaryOp};
use kiln::{with_device, Array, Device, Dtype, ErrorKind};

const UNARY: [UnaryOp; 38] = {
    use UnaryOp::*;
    [
        Abs, Negative, Sign, Exp, Expm1, Log, Log1p, Log2, Log10, Sqrt, Rsqrt, Square, Reciprocal, Sin, Cos, Tan,
        ArcSin, ArcCos, ArcTan, Sinh, Cosh, Tanh, ArcSinh, ArcCosh, ArcTanh, Erf, ErfInv, Sigmoid, Floor, Ceil,
        Round, LogicalNot, IsNan, IsInf, IsPosInf, IsNegInf, IsFinite, BitwiseInvert,
    ]
};

const BINARY: [BinaryOp; 24] = {
    use BinaryOp::*;
    [
        Add, Subtract, Multiply, Divide, FloorDivide, Remainder, Power, Maximum, Minimum, ArcTan2, LogAddExp,
        Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, LogicalAnd, LogicalOr, BitwiseAnd, BitwiseOr,
        BitwiseXor, LeftShift, RightShift,
    ]
};

/// Ops whose GPU form is CUDA's libdevice rather than the CPU's own code: equal within a few
/// ulps, not bit for bit.
fn approximate_unary(u: UnaryOp, d: Dtype) -> bool {
    use UnaryOp::*;
    matches!(u, Log2 | Log10 | Sin | Cos | Tan | ArcSin | ArcCos | ArcTan | Sinh | Cosh | ArcSinh | ArcCosh | ArcTanh)
        || (d == Dtype::F64 && matches!(u, Exp | Expm1 | Log | Log1p | Tanh | Erf | ErfInv | Sigmoid))
}

fn approximate_binary(b: BinaryOp) -> bool {
    matches!(b, BinaryOp::Power | BinaryOp::ArcTan2 | BinaryOp::LogAddExp)
}

/// Tolerance for an approximate op's result of dtype `d` (a few ulps of CUDA against glibc).
fn approximate_rtol(d: Dtype) -> f64 {
    match d {
        Dtype::F32 => 4e-6,
        Dtype::F64 => 1e-13,
        other => rtol_for(other),
    }
}

/// Values that exercise each dtype's edges: specials for floats, extremes for integers.
fn test_values(rng: &mut Rng, d: Dtype, n: usize) -> Vec<f64> {
    let mut v = random_values(rng, n, d, -4.0, 4.0);
    let specials: Vec<f64> = if d.is_float() {
        vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1.0, -1.0, 0.5, 1e-40, 1e30, -100.0, 2.5, -2.5]
    } else if d == Dtype::Bool {
        vec![0.0, 1.0]
    } else {
        let bits = 8 * d.size() as i32;
        let (lo, hi) = if d.is_unsigned() { (0.0, 2f64.powi(bits) - 1.0) } else { (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0) };
        vec![lo, hi, 0.0, 1.0, lo.max(-1.0), 7.0, (bits - 1) as f64, bits as f64, (bits + 3) as f64]
    };
    for (slot, s) in v.iter_mut().zip(specials) {
        *slot = s;
    }
    v
}

fn on(device: Device, f: impl FnOnce() -> kiln::Result<Array>) -> kiln::Result<Vec<f64>> {
    with_device(device, f)?.and_then(|a| a.to_f64_vec())
}

/// Compares the GPU's result with the CPU's: the same error, or values within `rtol` and `atol`
/// (bit for bit when both are 0, NaN equal to NaN).
fn close(what: &str, cpu: kiln::Result<Vec<f64>>, gpu: kiln::Result<Vec<f64>>, rtol: f64, atol: f64) {
    let tolerance = (rtol > 0.0 || atol > 0.0).then_some(rtol);
    match (cpu, gpu) {
        (Ok(c), Ok(g)) if tolerance.is_some() => assert_close(&g, &c, rtol, atol.max(1e-300), what),
        (c, g) => same(what, c, g, tolerance),
    }
}

/// Compares the GPU's result with the CPU's: the same error, or the same values (bit for bit
/// unless `rtol` is given).
fn same(what: &str, cpu: kiln::Result<Vec<f64>>, gpu: kiln::Result<Vec<f64>>, rtol: Option<f64>) {
    match (cpu, gpu) {
        (Ok(c), Ok(g)) => match rtol {
            None => {
                for (i, (x, y)) in c.iter().zip(&g).enumerate() {
                    assert!(x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan(), "{what}: element {i}: cpu {x}, gpu {y}");
                }
                assert_eq!(c.len(), g.len(), "{what}");
            }
            Some(r) => assert_close(&g, &c, r, 1e-300, what),
        },
        (Err(_), Err(_)) => {}
        (c, g) => panic!("{what}: cpu {c:?}, gpu {g:?}"),
    }
}

#[test]
fn unary_ops_match_the_cpu_on_every_dtype() {
    let Some((g, _one)) = gpu("unary_ops_match_the_cpu_on_every_dtype") else { return };
    let mut rng = Rng::new(1);
    for d in Dtype::REAL {
        let x = array(&test_values(&mut rng, d, 257), &[257], d);
        for u in UNARY {
            let out_dtype_float = u.needs_float() || d.is_float();
            let rtol = (approximate_unary(u, d) && out_dtype_float).then(|| approximate_rtol(if d.is_float() { d } else { Dtype::F32 }));
            let what = format!("{} on {d}", u.name());
            same(&what, on(Device::cpu(), || ops::unary(u, &x)), on(g, || ops::unary(u, &x)), rtol);
        }
    }
}

#[test]
fn binary_ops_match_the_cpu_on_every_dtype() {
    let Some((g, _one)) = gpu("binary_ops_match_the_cpu_on_every_dtype") else { return };
    let mut rng = Rng::new(2);
    for d in Dtype::REAL {
        let a = array(&test_values(&mut rng, d, 301), &[301], d);
        let mut bv = test_values(&mut rng, d, 301);
        bv.reverse();
        let b = array(&bv, &[301], d);
        for op in BINARY {
            let rtol = approximate_binary(op).then(|| approximate_rtol(if d.is_float() { d } else { Dtype::F32 }));
            let what = format!("{} on {d}", op.name());
            same(&what, on(Device::cpu(), || ops::binary(op, &a, &b)), on(g, || ops::binary(op, &a, &b)), rtol);
        }
    }
}

#[test]
fn casts_match_the_cpu_between_every_pair_of_dtypes() {
    let Some((g, _one)) = gpu("casts_match_the_cpu_between_every_pair_of_dtypes") else { return };
    let mut rng = Rng::new(3);
    for from in Dtype::REAL {
        let mut values = test_values(&mut rng, from, 200);
        if from.is_float() {
            // The last value rounds to float16 differently when rounded twice (through float32).
            values.extend([3e9, -3e9, 1e20, -1e20, 255.9, -128.5, 65535.5, 4294967296.0, 0.1, 1e-8, 1.0 + 2f64.powi(-11) + 2f64.powi(-40)]);
        }
        let x = array(&values, &[values.len()], from);
        for to in Dtype::REAL {
            let what = format!("astype {from} -> {to}");
            same(&what, on(Device::cpu(), || ops::astype(&x, to)), on(g, || ops::astype(&x, to)), None);
        }
    }
}

#[test]
fn strided_broadcast_and_selected_inputs_match_the_cpu() {
    let Some((g, _one)) = gpu("strided_broadcast_and_selected_inputs_match_the_cpu") else { return };
    let mut rng = Rng::new(4);
    let shape = [3, 5, 7];
    for layout in common::LAYOUTS {
        let x = common::with_layout(&rng.vec(105, -2.0, 2.0), &shape, Dtype::F32, layout);
        let row = array(&rng.vec(7, -1.0, 1.0), &[7], Dtype::F32);
        let col = array(&rng.vec(5, -1.0, 1.0), &[5, 1], Dtype::F32);
        let f = || {
            let y = ops::add(ops::multiply(&x, &row)?, &col)?;
            let t = ops::transpose(&y, Some(&[2, 0, 1]))?;
            let c = ops::greater(&t, 0.0f32)?;
            ops::where_(&c, &t, ops::exp(&t)?)
        };
        same(&format!("{layout:?}"), on(Device::cpu(), f), on(g, f), None);
    }
}

#[test]
fn vector_accesses_handle_every_length_offset_and_dtype() {
    let Some((g, _one)) = gpu("vector_accesses_handle_every_length_offset_and_dtype") else { return };
    let mut rng = Rng::new(8);
    for d in [Dtype::F32, Dtype::F16, Dtype::F64, Dtype::Bool, Dtype::I8] {
        let big = array(&random_values(&mut rng, 64, d, -3.0, 3.0), &[64], d);
        for start in 0..5usize {
            for len in [0usize, 1, 3, 7, 8, 17, 33, 59 - start] {
                let spec = ops::SliceSpec { start: Some(start as i64), stop: Some((start + len) as i64), step: 1 };
                let x = ops::slice(&big, &[spec]).unwrap();
                let f = || ops::add(ops::astype(&x, Dtype::F32)?, ops::astype(&x, Dtype::F32)?);
                same(&format!("{d} [{start}:{}]", start + len), on(Device::cpu(), f), on(g, f), None);
            }
        }
    }
}

/// `view` on the GPU reads the same bytes as on the CPU, for strided inputs and every item-size
/// ratio (NaN payloads included: the copy moves bits).
#[test]
fn views_reinterpret_the_same_bytes_as_the_cpu() {
    let Some((g, _one)) = gpu("views_reinterpret_the_same_bytes_as_the_cpu") else { return };
    let bits: Vec<u32> = (0..24u32).map(|i| i.wrapping_mul(0x9E37_79B9) | if i % 5 == 0 { 0x7F80_0001 } else { 0 }).collect();
    let x = ops::transpose(Array::from_slice(&bits, &[2, 3, 4]).unwrap(), Some(&[1, 0, 2])).unwrap();
    for to in [Dtype::U8, Dtype::F16, Dtype::F32, Dtype::I64, Dtype::F64] {
        let f = || ops::astype(ops::view(ops::view(&x, to)?, Dtype::U32)?, Dtype::F64);
        same(&format!("u32 -> {to} -> u32"), on(Device::cpu(), f), on(g, f), None);
    }
}

#[test]
fn data_moves_once_each_way_and_is_counted() {
    let Some((g, _one)) = gpu("data_moves_once_each_way_and_is_counted") else { return };
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let before = kiln::transfers();
    let y = with_device(g, || ops::exp(&x)).unwrap().unwrap();
    let z = with_device(g, || ops::multiply(&x, &y)).unwrap().unwrap();
    z.eval().unwrap();
    let mid = kiln::transfers();
    assert_eq!(mid.to_device - before.to_device, 1, "x moves to the GPU once: {before:?} -> {mid:?}");
    let first = z.to_vec::<f32>().unwrap();
    let second = z.to_vec::<f32>().unwrap();
    let after = kiln::transfers();
    assert_eq!(after.to_host - mid.to_host, 1, "z moves to the host once: {mid:?} -> {after:?}");
    let want: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|v| v * v.exp()).collect();
    assert_eq!(first, second);
    assert_close(&first.iter().map(|&v| v as f64).collect::<Vec<_>>(), &want.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1e-6, 0.0, "x * exp(x)");
}

#[test]
fn copies_of_every_size_round_trip_through_pinned_staging_from_many_threads() {
    let Some((g, _one)) = gpu("copies_of_every_size_round_trip_through_pinned_staging_from_many_threads") else { return };
    // Around the 8 MiB staging chunk: empty, tiny, one byte short of, at and past a chunk, and
    // several chunks with a ragged end; four threads at once share the pool.
    const CHUNK: usize = 8 << 20;
    let sizes = [0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 13];
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            scope.spawn(move || {
                for &n in &sizes {
                    let bytes: Vec<u8> = (0..n).map(|i| (i % 251) as u8 ^ t).collect();
                    let x = Array::from_slice(&bytes, &[n]).unwrap();
                    // Up (the negation runs on the GPU), down, and compared with the host's own.
                    let y = with_device(g, || ops::bitwise_invert(&x)).unwrap().unwrap();
                    let got = y.to_vec::<u8>().unwrap();
                    let want: Vec<u8> = bytes.iter().map(|b| !b).collect();
                    assert!(got == want, "{n} bytes from thread {t}: the round trip changed them");
                }
            });
        }
    });
}

#[test]
fn user_cpu_kernels_give_their_results_through_the_host() {
    let Some((g, _one)) = gpu("user_cpu_kernels_give_their_results_through_the_host") else { return };
    let mut rng = Rng::new(5);
    let a = array(&rng.vec(64 * 48, -1.0, 1.0), &[64, 48], Dtype::F32);
    let f = || {
        let doubled = kiln::custom_kernel("double", &[ops::exp(&a)?], &[(vec![64, 48], Dtype::F32)], |args: &mut kiln::KernelArgs| {
            let x: Vec<f32> = args.input::<f32>(0)?.to_vec();
            args.output::<f32>(0)?.iter_mut().zip(x).for_each(|(o, v)| *o = 2.0 * v);
            Ok(())
        })?;
        ops::sort(&doubled[0], Some(-1))
    };
    same("sort(custom_kernel(exp(a)))", on(Device::cpu(), f), on(g, f), None);
    let host = kiln::backend::cuda::ops_on_host();
    assert!(host.iter().any(|(op, _)| *op == "custom_kernel") && !host.iter().any(|(op, _)| *op == "sort"), "{host:?}");
}

/// Fails unless none of `ops` ran on the host for a GPU stream.
fn assert_ran_on_the_gpu(ops: &[&str]) {
    let host = kiln::backend::cuda::ops_on_host();
    assert!(!host.iter().any(|(op, _)| ops.contains(op)), "ran on the host: {host:?}");
}

type Scan = fn(&Array, Option<i64>, bool, bool) -> kiln::Result<Array>;

#[test]
fn scans_match_the_cpu_on_every_dtype_axis_and_direction() {
    let Some((g, _one)) = gpu("scans_match_the_cpu_on_every_dtype_axis_and_direction") else { return };
    let mut rng = Rng::new(21);
    let scans: [(&str, Scan); 5] = [
        ("cumsum", |x, a, r, i| ops::cumsum(x, a, r, i)),
        ("cumprod", |x, a, r, i| ops::cumprod(x, a, r, i)),
        ("cummax", |x, a, r, i| ops::cummax(x, a, r, i)),
        ("cummin", |x, a, r, i| ops::cummin(x, a, r, i)),
        ("logcumsumexp", |x, a, r, i| ops::logcumsumexp(x, a, r, i)),
    ];
    // Rows of 5 and 3 (one thread each), 40 (a block), 70,000 with 3 rows (parts of rows).
    let shapes: [&[usize]; 2] = [&[5, 3, 40], &[3, 70_000]];
    for d in Dtype::REAL {
        for shape in shapes {
            let n: usize = shape.iter().product();
            let mut values: Vec<f64> = if d.is_float() { rng.vec(n, 0.5, 1.5) } else { random_values(&mut rng, n, d, -3.0, 3.0) };
            if d.is_float() {
                values[17] = f64::NAN;
            }
            let x = array(&values, shape, d);
            for (name, scan) in scans {
                for axis in 0..shape.len() as i64 {
                    for (reverse, inclusive) in [(false, true), (true, true), (false, false), (true, false)] {
                        let f = || scan(&x, Some(axis), reverse, inclusive);
                        // The running log-sum-exp combines in a different order where rows are split.
                        let inexact = (d.is_float() && matches!(name, "cumsum" | "cumprod")) || name == "logcumsumexp";
                        let rtol = inexact.then(|| rtol_for(d.to_float()).max(1e-12));
                        same(&format!("{name} of {d} {shape:?} along {axis}, reverse {reverse}, inclusive {inclusive}"), on(Device::cpu(), f), on(g, f), rtol);
                    }
                }
            }
        }
    }
    assert_ran_on_the_gpu(&["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"]);
}

/// Checks that `got` (one row) is partitioned around `kth` in the CPU's order of values (NaN
/// last), holding `want_kth` there.
fn assert_partitioned(got: &[f64], kth: usize, want_kth: f64, what: &str) {
    let less = |a: f64, b: f64| !a.is_nan() && (b.is_nan() || a < b);
    let pivot = got[kth];
    assert!(pivot == want_kth || pivot.is_nan() && want_kth.is_nan(), "{what}: element {kth} is {pivot}, want {want_kth}");
    for (i, &v) in got.iter().enumerate() {
        let ok = if i < kth { !less(pivot, v) } else { !less(v, pivot) };
        assert!(ok, "{what}: element {i} ({v}) is on the wrong side of {pivot} at {kth}");
    }
}

#[test]
fn sorts_and_partitions_match_the_cpu() {
    let Some((g, _one)) = gpu("sorts_and_partitions_match_the_cpu") else { return };
    let mut rng = Rng::new(22);
    // Tiles of one block (6, 37, 50 along each axis; 8192), and rows merged from several tiles.
    let shapes: [&[usize]; 3] = [&[6, 37, 50], &[2, 8192], &[3, 20_000]];
    for d in Dtype::REAL {
        for shape in shapes {
            let n: usize = shape.iter().product();
            // Few distinct values: ties everywhere, which a stable sort keeps in order.
            let mut values = random_values(&mut rng, n, d, -3.0, 3.0);
            if d.is_float() {
                for i in (0..n).step_by(97) {
                    values[i] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0][i % 4];
                }
            }
            let x = array(&values, shape, d);
            for axis in 0..shape.len() as i64 {
                let what = format!("{d} {shape:?} along {axis}");
                let f = || ops::argsort(&x, Some(axis));
                same(&format!("argsort of {what}"), on(Device::cpu(), f), on(g, f), None);
                // -0 and 0 are equal: the CPU's unstable value sort may order them either way.
                let f = || ops::sort(&x, Some(axis));
                same(&format!("sort of {what}"), on(Device::cpu(), f), on(g, f), Some(0.0));
            }
            let last = *shape.last().unwrap();
            let rows = n / last;
            let sorted = on(Device::cpu(), || ops::sort(&x, Some(-1))).unwrap();
            let xv = x.to_f64_vec().unwrap();
            for kth in [0, last / 3, last - 1] {
                let what = format!("partition of {d} {shape:?} at {kth}");
                let got = on(g, || ops::partition(&x, kth as i64, Some(-1))).unwrap();
                let at = on(g, || ops::argpartition(&x, kth as i64, Some(-1))).unwrap();
                for r in 0..rows {
                    let row = &xv[r * last..(r + 1) * last];
                    let want_kth = sorted[r * last + kth];
                    assert_partitioned(&got[r * last..(r + 1) * last], kth, want_kth, &what);
                    let mut picked: Vec<usize> = at[r * last..(r + 1) * last].iter().map(|&i| i as usize).collect();
                    let by_index: Vec<f64> = picked.iter().map(|&i| row[i]).collect();
                    assert_partitioned(&by_index, kth, want_kth, &format!("arg{what}"));
                    picked.sort_unstable();
                    assert!(picked.iter().enumerate().all(|(i, &p)| i == p), "arg{what}: not a permutation of row {r}");
                }
            }
        }
    }
    assert_ran_on_the_gpu(&["sort", "argsort", "partition", "argpartition"]);
}

#[test]
fn gathers_and_scatters_match_the_cpu_with_duplicate_and_out_of_range_indices() {
    let Some((g, _one)) = gpu("gathers_and_scatters_match_the_cpu_with_duplicate_and_out_of_range_indices") else { return };
    let mut rng = Rng::new(23);
    let index_values: [f64; 12] = [3.0, -1.0, 9.0, 0.0, 3.0, -8.0, 3.0, 1.0, 2.0, -2.0, 3.0, 4.0];
    for d in Dtype::REAL {
        let x = array(&random_values(&mut rng, 7 * 5 * 6, d, -9.0, 9.0), &[7, 5, 6], d);
        let xt = ops::transpose(&x, Some(&[2, 0, 1])).unwrap();
        for id in [Dtype::I32, Dtype::U8, Dtype::I64] {
            let vals: Vec<f64> = index_values.iter().map(|&v| if id.is_unsigned() { v.abs() } else { v }).collect();
            let idx = array(&vals, &[3, 4], id);
            for axis in [0i64, 1, 2] {
                let f = || ops::take(&x, &idx, Some(axis));
                same(&format!("take of {d} by {id} along {axis}"), on(Device::cpu(), f), on(g, f), None);
                let f = || ops::take(&xt, &idx, Some(axis));
                same(&format!("take of a transposed {d} by {id} along {axis}"), on(Device::cpu(), f), on(g, f), None);
            }
            let f = || ops::take(&x, &idx, None);
            same(&format!("take of flattened {d} by {id}"), on(Device::cpu(), f), on(g, f), None);
        }
        // Two index arrays, broadcast together, with slices of several elements.
        let (i0, i1) = (array(&[6.0, 0.0, -1.0], &[3, 1], Dtype::I32), array(&[1.0, 4.0], &[1, 2], Dtype::I64));
        let f = || ops::gather(&x, &[i0.clone(), i1.clone()], &[0, 2], &[2, 5, 3]);
        same(&format!("gather of {d} with slices"), on(Device::cpu(), f), on(g, f), None);
        let huge = array(&[(1u64 << 63) as f64 + 4096.0, 1.0], &[2], Dtype::U64);
        let f = || ops::take(&x, &huge, Some(1));
        same(&format!("take of {d} by a uint64 past i64's range"), on(Device::cpu(), f), on(g, f), None);
        // Scatters with duplicate indices (row 3 four times).
        let rows = array(&index_values[..8], &[8], Dtype::I32);
        let updates = array(&random_values(&mut rng, 8 * 5 * 6, d, -9.0, 9.0), &[8, 1, 5, 6], d);
        type Scatter = fn(&Array, &[Array], &Array, &[i64]) -> kiln::Result<Array>;
        let scatters: [(&str, Scatter); 5] = [
            ("scatter", |a, i, u, ax| ops::scatter(a, i, u, ax)),
            ("scatter_add", |a, i, u, ax| ops::scatter_add(a, i, u, ax)),
            ("scatter_prod", |a, i, u, ax| ops::scatter_prod(a, i, u, ax)),
            ("scatter_max", |a, i, u, ax| ops::scatter_max(a, i, u, ax)),
            ("scatter_min", |a, i, u, ax| ops::scatter_min(a, i, u, ax)),
        ];
        for (name, scatter) in scatters {
            // Duplicates (up to four per row) combine in another order on the GPU, so float sums
            // and products round differently: a product within its three roundings; a sum within
            // three roundings of partial sums up to 4 x 9 in magnitude (it may cancel to near 0).
            let (rtol, atol) = match name {
                "scatter_add" if d.is_float() => (rtol_for(d), 54.0 * rtol_for(d)),
                "scatter_prod" if d.is_float() => (2.0 * rtol_for(d), 0.0),
                _ => (0.0, 0.0),
            };
            let f = || scatter(&x, std::slice::from_ref(&rows), &updates, &[0]);
            close(&format!("{name} of {d} with duplicates"), on(Device::cpu(), f), on(g, f), rtol, atol);
            let f = || scatter(&xt, std::slice::from_ref(&rows), &ops::transpose(&updates, Some(&[0, 3, 1, 2]))?, &[1]);
            close(&format!("{name} of a transposed {d} along its middle axis"), on(Device::cpu(), f), on(g, f), rtol, atol);
        }
        let along = array(&[0.0, 4.0, 4.0, -1.0, 2.0, 4.0], &[1, 6, 1], Dtype::I32);
        let ones = ops::ones(&[7, 6, 6], d).unwrap();
        let f = || ops::put_along_axis(&x, &ops::broadcast_to(&along, &[7, 6, 6])?, &ones, Some(1));
        same(&format!("put_along_axis of {d}"), on(Device::cpu(), f), on(g, f), None);
        let f = || ops::take_along_axis(&x, &ops::broadcast_to(&along, &[7, 6, 6])?, Some(1));
        same(&format!("take_along_axis of {d}"), on(Device::cpu(), f), on(g, f), None);
    }
    assert_ran_on_the_gpu(&["gather", "scatter"]);
}

/// Float dtypes cuBLASLt multiplies, with the tolerance of a product of length-k sums against the
/// CPU's GEMM (another summation order; half types round their float32 sums once).
const MATMUL_DTYPES: [(Dtype, f64, f64); 4] =
    [(Dtype::F32, 2e-5, 1e-5), (Dtype::F64, 1e-12, 1e-13), (Dtype::F16, 2e-3, 2e-3), (Dtype::BF16, 1.6e-2, 1e-2)];

#[test]
fn matmul_matches_the_cpu_for_float_dtypes_layouts_and_batches() {
    let Some((g, _one)) = gpu("matmul_matches_the_cpu_for_float_dtypes_layouts_and_batches") else { return };
    let mut rng = Rng::new(11);
    let mut x = |shape: &[usize], d: Dtype| array(&rng.vec(shape.iter().product(), -1.0, 1.0), shape, d);
    let t = |a: &Array| ops::swapaxes(a, -1, -2);
    let every_other = |a: &Array| {
        let mut specs = vec![ops::SliceSpec::ALL; a.ndim()];
        specs[a.ndim() - 1] = ops::SliceSpec { start: None, stop: None, step: 2 };
        ops::slice(a, &specs)
    };
    for (d, rtol, atol) in MATMUL_DTYPES {
        let (a, b) = (x(&[67, 48], d), x(&[48, 33], d));
        let (at, bt) = (x(&[48, 67], d), x(&[33, 48], d));
        let (ba, bb) = (x(&[3, 17, 9], d), x(&[3, 9, 5], d));
        let (wa, wb) = (x(&[2, 1, 17, 9], d), x(&[4, 9, 5], d));
        let (v, wide) = (x(&[48], d), x(&[48, 66], d));
        let cases: Vec<(&str, Case)> = vec![
            ("a @ b", Box::new(|| ops::matmul(&a, &b))),
            ("at.T @ b (transposed view)", Box::new(|| ops::matmul(t(&at)?, &b))),
            ("a @ bt.T", Box::new(|| ops::matmul(&a, t(&bt)?))),
            ("at.T @ bt.T", Box::new(|| ops::matmul(t(&at)?, t(&bt)?))),
            ("batched", Box::new(|| ops::matmul(&ba, &bb))),
            ("broadcast batch", Box::new(|| ops::matmul(&wa, &wb))),
            ("transposed batch", Box::new(|| ops::matmul(t(&bb)?, t(&ba)?))),
            ("vector @ matrix", Box::new(|| ops::matmul(&v, &b))),
            ("matrix @ vector", Box::new(|| ops::matmul(&a, &v))),
            ("every other column (copied first)", Box::new(|| ops::matmul(&a, every_other(&wide)?))),
            ("empty sum", Box::new(|| ops::matmul(ops::zeros(&[5, 0], d)?, ops::zeros(&[0, 7], d)?))),
            ("empty output", Box::new(|| ops::matmul(ops::zeros(&[0, 4], d)?, x_const(&[4, 3], d)))),
        ];
        for (what, f) in &cases {
            let (c, gg) = (on(Device::cpu(), f), on(g, f));
            let (c, gg) = (c.unwrap_or_else(|e| panic!("{what} {d} on the CPU: {e}")), gg.unwrap_or_else(|e| panic!("{what} {d} on the GPU: {e}")));
            assert_eq!(c.len(), gg.len(), "{what} {d}");
            assert_close(&gg, &c, rtol, atol, &format!("{what} of {d}"));
        }
    }
    // Integer and boolean products (sums that overflow narrow dtypes): the CPU's wrapping sums.
    for d in Dtype::REAL.into_iter().filter(|d| !d.is_float()) {
        let mut ints = |shape: &[usize]| array(&random_values(&mut rng, shape.iter().product(), d, -300.0, 300.0), shape, d);
        let (a, b, wa, wb, bt) = (ints(&[37, 70]), ints(&[70, 21]), ints(&[2, 1, 17, 9]), ints(&[3, 9, 5]), ints(&[21, 70]));
        let cases: Vec<(&str, Case)> = vec![
            ("a @ b", Box::new(|| ops::matmul(&a, &b))),
            ("a @ bt.T (copied first)", Box::new(|| ops::matmul(&a, t(&bt)?))),
            ("broadcast batch", Box::new(|| ops::matmul(&wa, &wb))),
            ("empty sum", Box::new(|| ops::matmul(ops::zeros(&[5, 0], d)?, ops::zeros(&[0, 7], d)?))),
        ];
        for (what, f) in &cases {
            let (c, gg) = (on(Device::cpu(), f).unwrap(), on(g, f).unwrap_or_else(|e| panic!("{what} {d} on the GPU: {e}")));
            same(&format!("{what} of {d}"), Ok(c), Ok(gg), None);
        }
    }
    let host = kiln::backend::cuda::ops_on_host();
    assert!(!host.iter().any(|(op, _)| *op == "matmul"), "matmul ran on the host: {host:?}");
}

/// One matmul case: a product built when called.
type Case<'a> = Box<dyn Fn() -> kiln::Result<Array> + 'a>;

/// An array of `shape` filled with 0.5.
fn x_const(shape: &[usize], d: Dtype) -> Array {
    array(&vec![0.5; shape.iter().product()], shape, d)
}

#[test]
fn tf32_is_off_by_default_and_switchable() {
    let Some((g, _one)) = gpu("tf32_is_off_by_default_and_switchable") else { return };
    let mut rng = Rng::new(12);
    let a = array(&rng.vec(256 * 512, -1.0, 1.0), &[256, 512], Dtype::F32);
    let b = array(&rng.vec(512 * 128, -1.0, 1.0), &[512, 128], Dtype::F32);
    let exact = on(Device::cpu(), || ops::matmul(ops::astype(&a, Dtype::F64)?, ops::astype(&b, Dtype::F64)?)).unwrap();
    assert!(!kiln::allow_tf32(), "TF32 must be off unless asked for");
    let full = on(g, || ops::matmul(&a, &b)).unwrap();
    let before = kiln::set_allow_tf32(true);
    let fast = on(g, || ops::matmul(&a, &b));
    kiln::set_allow_tf32(before);
    let fast = fast.unwrap();
    let worst = |got: &[f64]| got.iter().zip(&exact).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    // Full float32 products err by float32 rounding of 512-term sums; TF32 rounds inputs to 10
    // mantissa bits, errors about a thousand times larger.
    assert!(worst(&full) < 1e-4, "float32: {}", worst(&full));
    assert!(worst(&fast) > 1e-3 && worst(&fast) < 0.1, "tf32: {}", worst(&fast));
}

#[test]
fn arange_random_bits_and_arg_reductions_match_the_cpu() {
    let Some((g, _one)) = gpu("arange_random_bits_and_arg_reductions_match_the_cpu") else { return };
    for d in Dtype::REAL {
        for (start, stop, step) in [(-3.5, 17.0, 0.75), (0.0, 300.0, 1.0), (1e9, 5e9, 1.1e8), (2.0, -9.0, -0.3)] {
            let f = || ops::arange(start, stop, step, d);
            same(&format!("arange({start}, {stop}, {step}) of {d}"), on(Device::cpu(), f), on(g, f), None);
        }
    }
    let key = kiln::random::key(7);
    let keys = kiln::random::split(&key, 3).unwrap();
    for width in [1, 2, 4] {
        for shape in [&[1usize][..], &[7], &[3, 333], &[1000, 17]] {
            let f = || kiln::random::bits(shape, width, Some(&key));
            same(&format!("bits {shape:?} width {width}"), on(Device::cpu(), f), on(g, f), None);
        }
    }
    let f = || kiln::random::normal(&[5, 101], Dtype::F32, 0.0, 1.0, Some(&key));
    same("normal", on(Device::cpu(), f), on(g, f), None);
    let f = || kiln::vmap(|a: &[Array]| Ok(vec![kiln::random::uniform(0.0, 1.0, &[9], Dtype::F32, Some(&a[0]))?]), &[Some(0)], &[Some(0)])(std::slice::from_ref(&keys)).map(|mut v| v.remove(0));
    same("uniform under vmap over 3 keys", on(Device::cpu(), f), on(g, f), None);
    let mut rng = Rng::new(13);
    for d in Dtype::REAL {
        // Few distinct values: ties everywhere, and the first must win.
        let mut values = random_values(&mut rng, 6 * 37 * 50, d, -3.0, 3.0);
        if d.is_float() {
            values[100] = f64::NAN;
            values[2000] = f64::NAN;
            values[2001] = f64::NAN;
        }
        let x = array(&values, &[6, 37, 50], d);
        for axis in [None, Some(0), Some(1), Some(2)] {
            let f = || ops::argmax(&x, axis, false);
            same(&format!("argmax {axis:?} of {d}"), on(Device::cpu(), f), on(g, f), None);
            let f = || ops::argmin(&x, axis, true);
            same(&format!("argmin {axis:?} of {d}"), on(Device::cpu(), f), on(g, f), None);
        }
    }
}

#[test]
fn concatenate_and_slice_update_match_the_cpu() {
    let Some((g, _one)) = gpu("concatenate_and_slice_update_match_the_cpu") else { return };
    let mut rng = Rng::new(14);
    for d in Dtype::REAL {
        let mut x = |shape: &[usize]| array(&random_values(&mut rng, shape.iter().product(), d, -9.0, 9.0), shape, d);
        let (a, b, c) = (x(&[4, 5, 6]), x(&[4, 3, 6]), x(&[6, 2, 4]));
        let f = || ops::concatenate(&[a.clone(), b.clone(), ops::transpose(&c, Some(&[2, 1, 0]))?], 1);
        same(&format!("concatenate of {d} with a transposed input"), on(Device::cpu(), f), on(g, f), None);
        let f = || ops::concatenate(&[a.clone(), a.clone()], 0);
        same(&format!("concatenate along 0 of {d}"), on(Device::cpu(), f), on(g, f), None);
        let u = x(&[2, 5, 3]);
        let spec = |start, stop, step| ops::SliceSpec { start, stop, step };
        let f = || ops::slice_update(&a, &u, &[spec(Some(1), Some(3), 1), ops::SliceSpec::ALL, spec(Some(5), None, -2)]);
        same(&format!("slice_update of {d} with a negative step"), on(Device::cpu(), f), on(g, f), None);
        let f = || ops::slice_update(ops::transpose(&a, None)?, ops::transpose(&u, None)?, &[spec(None, None, 2), ops::SliceSpec::ALL, spec(Some(1), Some(3), 1)]);
        same(&format!("slice_update of a transposed {d}"), on(Device::cpu(), f), on(g, f), None);
    }
    let host = kiln::backend::cuda::ops_on_host();
    assert!(!host.iter().any(|(op, _)| ["concatenate", "slice_update", "arange", "random_bits", "argmax", "argmin"].contains(op)), "{host:?}");
}

/// The owner of memory "another library" lent: holds it, and records its release.
struct Lender {
    released: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _memory: std::sync::Arc<kiln::buffer::Storage>,
}

impl Drop for Lender {
    fn drop(&mut self) {
        self.released.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn gpu_memory_is_exchanged_in_place_and_released_through_its_owner() {
    let Some((g, _one)) = gpu("gpu_memory_is_exchanged_in_place_and_released_through_its_owner") else { return };
    let x = with_device(g, || ops::reshape(ops::arange(0.0, 12.0, 1.0, Dtype::F32)?, &[3, 4])).unwrap().unwrap();
    let view = x.device_view(0).unwrap();
    assert_eq!((x.resident_gpu(), view.strides.clone()), (Some(0), vec![4, 1]));
    let flag = || std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let released = |f: &std::sync::Arc<std::sync::atomic::AtomicBool>| f.load(std::sync::atomic::Ordering::SeqCst);
    let lend = |f: &std::sync::Arc<std::sync::atomic::AtomicBool>| Box::new(Lender { released: f.clone(), _memory: view.keep.clone() });
    let (t_flag, r_flag) = (flag(), flag());
    let before = kiln::transfers();
    // The transpose through strides, and the rows reversed through a negative stride.
    let t = Array::from_gpu_memory(0, view.ptr, &[4, 3], Some(&[1, 4]), Dtype::F32, lend(&t_flag)).unwrap();
    let last_row = view.ptr + 8 * 4;
    let r = Array::from_gpu_memory(0, last_row, &[3, 4], Some(&[-4, 1]), Dtype::F32, lend(&r_flag)).unwrap();
    let on_gpu = |a: &Array| with_device(g, || ops::add(a, 0.5)).unwrap().unwrap().to_f64_vec().unwrap();
    let want_t: Vec<f64> = (0..12).map(|i| ((i % 3) * 4 + i / 3) as f64 + 0.5).collect();
    let want_r: Vec<f64> = (0..12).map(|i| ((2 - i / 4) * 4 + i % 4) as f64 + 0.5).collect();
    assert_eq!((on_gpu(&t), on_gpu(&r)), (want_t, want_r));
    assert_eq!(kiln::transfers().to_device, before.to_device, "exchanged memory was read in place");
    // A view of t keeps its memory: released only once no array uses it.
    let column = ops::slice(&t, &[ops::SliceSpec::ALL, ops::SliceSpec { start: Some(1), stop: Some(2), step: 1 }]).unwrap();
    column.eval().unwrap();
    drop(t);
    assert!(!released(&t_flag), "released while an array still used it");
    assert_eq!(column.to_f64_vec().unwrap(), vec![4.0, 5.0, 6.0, 7.0]);
    drop(column);
    assert!(released(&t_flag) && !released(&r_flag), "released once no array uses it");
    drop(r);
    assert!(released(&r_flag));
    let other = flag();
    let bad = Array::from_gpu_memory(0, view.ptr, &[4, 3], Some(&[1]), Dtype::F32, lend(&other));
    assert_eq!(bad.unwrap_err().kind, ErrorKind::Shape);
}

#[test]
fn handwritten_kernels_build_with_nvrtc_for_every_variant() {
    if !nvrtc_found("handwritten_kernels_build_with_nvrtc_for_every_variant") {
        return;
    }
    for (what, text) in kiln::backend::cuda::handwritten_sources() {
        nvrtc::build("test", &text, "sm_90a").unwrap_or_else(|e| panic!("{what}: {}", e.message));
    }
}

#[test]
fn running_out_of_gpu_memory_is_a_clear_error() {
    let Some((g, _one)) = gpu("running_out_of_gpu_memory_is_a_clear_error") else { return };
    let huge = with_device(g, || ops::zeros(&[1 << 22, 1 << 20], Dtype::F32)).unwrap().unwrap();
    let doubled = with_device(g, || ops::add(&huge, &huge)).unwrap().unwrap();
    let e = doubled.eval().expect_err("16 TiB cannot be allocated");
    assert_eq!(e.kind, ErrorKind::Device, "{e}");
    assert!(e.message.contains("out of GPU memory") || e.message.contains("bytes"), "{e}");
    kiln::set_memory_limit(1 << 20);
    let x = array(&vec![1.0; 1 << 20], &[1 << 20], Dtype::F32);
    let r = with_device(g, || ops::exp(&x)).unwrap().unwrap().eval();
    kiln::set_memory_limit(0);
    let e = r.expect_err("4 MiB exceeds a 1 MiB limit");
    assert!(e.message.contains("set_memory_limit"), "{e}");
}

#[test]
fn compiled_functions_run_on_a_gpu_stream() {
    let Some((g, _one)) = gpu("compiled_functions_run_on_a_gpu_stream") else { return };
    let mut rng = Rng::new(6);
    let x = array(&rng.vec(4096, -3.0, 3.0), &[64, 64], Dtype::F32);
    let gelu = kiln::compile(|a: &[Array]| {
        let x = &a[0];
        let inner = ops::multiply(ops::add(x, ops::multiply(ops::power(x, 3.0f32)?, 0.044715f32)?)?, 0.797_884_6f32)?;
        Ok(vec![ops::multiply(ops::multiply(x, 0.5f32)?, ops::add(ops::tanh(&inner)?, 1.0f32)?)?])
    });
    let cpu = with_device(Device::cpu(), || gelu.call(std::slice::from_ref(&x))).unwrap().unwrap();
    let gpu_out = with_device(g, || gelu.call(std::slice::from_ref(&x))).unwrap().unwrap();
    assert_close(&gpu_out[0].to_f64_vec().unwrap(), &cpu[0].to_f64_vec().unwrap(), 4e-6, 1e-7, "compiled gelu");
}

/// The fast layer ops, each a compiled composition, run as fused GPU kernels on a GPU stream and
/// match the CPU in float32 and bfloat16.
#[test]
fn fast_layer_ops_match_the_cpu() {
    use kiln::ops::fast::{self, AttentionMask, Rope};
    let Some((g, _one)) = gpu("fast_layer_ops_match_the_cpu") else { return };
    let mut rng = Rng::new(7);
    for (dtype, tol) in [(Dtype::F32, 1e-5), (Dtype::BF16, 2e-2)] {
        let x = array(&rng.vec(2 * 4 * 9 * 64, -2.0, 2.0), &[2, 4, 9, 64], dtype);
        let w = array(&rng.vec(64, 0.5, 1.5), &[64], dtype);
        let k = array(&rng.vec(2 * 2 * 11 * 64, -1.0, 1.0), &[2, 2, 11, 64], dtype);
        let offsets = Array::from_slice(&[3i32, 40], &[2]).unwrap();
        let settings = Rope { dims: 32, traditional: false, base: Some(10000.0), scale: 1.0 };
        type Case<'a> = (&'a str, Box<dyn Fn() -> kiln::Result<Array> + 'a>);
        let cases: Vec<Case> = vec![
            ("rms_norm", Box::new(|| fast::rms_norm(&x, Some(&w), 1e-5))),
            ("layer_norm", Box::new(|| fast::layer_norm(&x, Some(&w), Some(&w), 1e-5))),
            ("rope", Box::new(|| fast::rope(&x, settings, &offsets, None))),
            ("rope traditional", Box::new(|| fast::rope(&x, Rope { traditional: true, dims: 64, ..settings }, 7, None))),
            ("attention", Box::new(|| fast::scaled_dot_product_attention(&x, &k, &k, 0.125, &AttentionMask::Causal, None))),
        ];
        for (name, f) in &cases {
            close(&format!("{name} {dtype}"), on(Device::cpu(), f), on(g, f), tol, tol);
        }
    }
}

/// Waiting for a tiny op goes by its stream's completion word, not the driver, while this thread
/// alone uses the stream; a large op's wait, and any wait once a second thread used the stream,
/// goes through the driver. The chain's values are right either way.
#[test]
fn tiny_op_waits_use_completion_words_while_one_thread_uses_the_stream() {
    let Some((g, _one)) = gpu("tiny_op_waits_use_completion_words_while_one_thread_uses_the_stream") else { return };
    let stream = kiln::new_stream(g).unwrap();
    let waits = kiln::backend::cuda::synchronize_waits;
    kiln::with_stream(stream, || {
        let mut y = array(&[0.0; 4], &[4], Dtype::F32);
        let (word, driver) = waits();
        for _ in 0..200 {
            y = ops::add(&y, 1.0f32).unwrap();
            y.eval().unwrap();
            kiln::synchronize(stream).unwrap();
        }
        assert_eq!(waits(), (word + 200, driver), "each wait went by the word");
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![200.0; 4]);
        let big = ops::add(ops::zeros(&[1 << 20], Dtype::F32).unwrap(), 1.0f32).unwrap();
        big.eval().unwrap();
        kiln::synchronize(stream).unwrap();
        assert_eq!(waits(), (word + 200, driver + 1), "a many-block kernel's wait is the driver's");
        std::thread::scope(|t| {
            t.spawn(|| kiln::with_stream(stream, || ops::add(&y, 1.0f32).unwrap().eval().unwrap()).unwrap());
        });
        y = ops::add(&y, 1.0f32).unwrap();
        y.eval().unwrap();
        kiln::synchronize(stream).unwrap();
        assert_eq!(waits(), (word + 200, driver + 2), "a stream two threads used waits through the driver");
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![201.0; 4]);
        assert_eq!(big.to_vec::<f32>().unwrap()[..3], [1.0; 3]);
    })
    .unwrap();
}

/// `eval` on a GPU runs a chain of pending elementwise ops (strided and broadcast inputs, casts
/// between dtypes) as one fused kernel once NVRTC has built it in the background, op by op until
/// then, with the bits of the ops run one by one (eager fusion switched off); an intermediate the
/// caller also holds is written out with the same bits.
#[test]
fn eager_elementwise_chains_fuse_at_eval_with_the_bits_of_op_by_op() {
    let Some((g, _one)) = gpu("eager_elementwise_chains_fuse_at_eval_with_the_bits_of_op_by_op") else { return };
    let mut rng = Rng::new(21);
    for d in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        // Large enough to be fused (chains of fewer than 2^20 elements run op by op).
        let x = array(&rng.vec(1031 * 1024, -4.0, 4.0), &[1031, 1024], d);
        let b = array(&rng.vec(1031, -1.0, 1.0), &[1031], d);
        kiln::eval(&[&x, &b]).unwrap();
        // gelu of the transposed x, plus a broadcast row, then cast to float32 and scaled.
        let chain = || -> Vec<Array> {
            let xt = ops::transpose(&x, None).unwrap();
            let inner = ops::erf(ops::divide(&xt, 2f64.sqrt()).unwrap()).unwrap();
            let y = ops::divide(ops::multiply(&xt, ops::add(&inner, 1.0).unwrap()).unwrap(), 2.0).unwrap();
            let z = ops::multiply(ops::astype(ops::add(&y, &b).unwrap(), Dtype::F32).unwrap(), 3.0f32).unwrap();
            vec![inner, z]
        };
        let bits = |arrays: &[Array]| arrays.iter().map(|a| a.to_f64_vec().unwrap()).collect::<Vec<_>>();
        let was_on = kiln::set_eager_fusion(false);
        let op_by_op = with_device(g, || {
            let out = chain();
            kiln::eval(&out.iter().collect::<Vec<_>>()).unwrap();
            bits(&out)
        })
        .unwrap();
        kiln::set_eager_fusion(true);
        // Only z is held (inner is dropped before eval), then both.
        for held in [1, 2] {
            let what = format!("{d}, {held} array(s) held");
            let fused = with_device(g, || {
                for _ in 0..3000 {
                    let before = kiln::eager_fusion_stats();
                    let mut out = chain();
                    let targets: Vec<Array> = out.split_off(2 - held);
                    drop(out);
                    kiln::eval(&targets.iter().collect::<Vec<_>>()).unwrap();
                    let after = kiln::eager_fusion_stats();
                    if after.kernels > before.kernels {
                        // Casting float32 to float32 is no op: seven ops then, else eight.
                        let ops = if d == Dtype::F32 { 7 } else { 8 };
                        assert_eq!((after.kernels - before.kernels, after.ops - before.ops), (1, ops), "{what}: one kernel of every op");
                        return bits(&targets);
                    }
                    assert_eq!(after.while_building, before.while_building + 1, "{what}: run op by op while its kernel builds");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                panic!("{what}: the fused kernel was never built")
            })
            .unwrap();
            same(&what, Ok(op_by_op[1].clone()), Ok(fused[held - 1].clone()), None);
            if held == 2 {
                same(&format!("{what}: the intermediate"), Ok(op_by_op[0].clone()), Ok(fused[0].clone()), None);
            }
        }
        kiln::set_eager_fusion(was_on);
    }
}

/// On a GPU a long reduction with few rows (a full sum of squares, a mean over 300,000 columns
/// of 4 rows) stays one fused kernel with its prologue and epilogue, but folds each row over
/// many blocks (then finishes the rows in a second launch) instead of a block per row. Short
/// rows run a block per row. Results match the CPU's.
#[test]
fn long_reductions_of_few_rows_split_over_blocks_on_the_gpu() {
    let Some((g, _one)) = gpu("long_reductions_of_few_rows_split_over_blocks_on_the_gpu") else { return };
    let mut rng = Rng::new(13);
    let sum_squares = kiln::compile(|a: &[Array]| Ok(vec![ops::sum(ops::multiply(&a[0], &a[0])?, None, false)?]));
    let mean_exp = kiln::compile(|a: &[Array]| Ok(vec![ops::add(ops::mean(ops::exp(&a[0])?, Some(&[-1]), false)?, 1.0f32)?]));
    let exp_and_sum = kiln::compile(|a: &[Array]| {
        let e = ops::exp(&a[0])?;
        Ok(vec![ops::sum(&e, Some(&[-1]), true)?, e])
    });
    let softmax = kiln::compile(|a: &[Array]| {
        let e = ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[-1]), true)?)?)?;
        Ok(vec![ops::divide(&e, ops::sum(&e, Some(&[-1]), true)?)?])
    });
    let long = array(&rng.vec(1 << 20, -1.0, 1.0), &[1 << 20], Dtype::F32);
    let wide = array(&rng.vec(4 * 300_000, -1.0, 1.0), &[4, 300_000], Dtype::F32);
    let short = array(&rng.vec(1000, -1.0, 1.0), &[1000], Dtype::F32);
    let blocks = |r: &kiln::Report| -> usize {
        let line = r.to_string().lines().find(|l| l.contains("GPU launch: ")).map(str::to_string).unwrap_or_default();
        line.split("GPU launch: ").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    // A softmax of one long row needs the row's max and sum before its elements: three
    // kernels of one pass each (max; exp and sum; the quotient), the first two split.
    for (what, f, x, rows, split, gpu_kernels) in [
        ("sum of squares", &sum_squares, &long, 1, true, 1),
        ("mean of exp", &mean_exp, &wide, 4, true, 1),
        ("exp and its row sums", &exp_and_sum, &wide, 4, true, 1),
        ("softmax of a long row", &softmax, &long, 1, true, 3),
        ("short sum", &sum_squares, &short, 1, false, 1),
    ] {
        let args = std::slice::from_ref(x);
        let on_gpu = with_device(g, || f.call(args)).unwrap().unwrap();
        let on_cpu = with_device(Device::cpu(), || f.call(args)).unwrap().unwrap();
        for (a, b) in on_gpu.iter().zip(&on_cpu) {
            assert_close(&a.to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), 1e-5, 1e-6, what);
        }
        let gpu_report = with_device(g, || f.inspect(args, &[])).unwrap().unwrap();
        let cpu_report = with_device(Device::cpu(), || f.inspect(args, &[])).unwrap().unwrap();
        assert_eq!(cpu_report.compiled_kernels, 1, "{what}: {cpu_report}");
        assert_eq!(gpu_report.compiled_kernels, gpu_kernels, "{what}: {gpu_report}");
        assert_eq!(blocks(&gpu_report) > rows, split, "{what}: {} blocks for {rows} rows: {gpu_report}", blocks(&gpu_report));
    }
}

/// A compiled function's report names, once the plan ran on a GPU, each fused kernel's CUDA
/// source, launch shape and the registers and shared memory its cubin uses.
#[test]
fn compile_reports_show_each_gpu_kernels_source_launch_and_resources() {
    let Some((g, _one)) = gpu("compile_reports_show_each_gpu_kernels_source_launch_and_resources") else { return };
    let mut rng = Rng::new(12);
    let x = array(&rng.vec(64 * 1000, -3.0, 3.0), &[64, 1000], Dtype::F32);
    let elementwise = kiln::compile(|a: &[Array]| Ok(vec![ops::multiply(ops::exp(&a[0])?, 2.0f32)?]));
    let softmax = kiln::compile(|a: &[Array]| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]));
    for (what, f, fold) in [("elementwise", &elementwise, false), ("softmax", &softmax, true)] {
        let before = with_device(g, || f.inspect(std::slice::from_ref(&x), &[])).unwrap().unwrap();
        assert!(before.groups.iter().all(|k| k.gpu.is_none()), "{what}: nothing ran yet: {before}");
        with_device(g, || f.call(std::slice::from_ref(&x))).unwrap().unwrap()[0].eval().unwrap();
        let report = with_device(g, || f.inspect(std::slice::from_ref(&x), &[])).unwrap().unwrap();
        assert_eq!(report.groups.len(), 1, "{what}: {report}");
        let launch = report.groups[0].gpu.clone().unwrap_or_else(|| panic!("{what}: no GPU launch in {report}"));
        assert!(launch.source.contains("__global__") && launch.source.contains("extern \"C\""), "{what}: {}", launch.source);
        assert!(launch.registers > 0 && launch.shared_bytes >= 0, "{what}: {launch}");
        if fold {
            assert_eq!(launch.grid, 64, "{what}: a block per row: {launch}");
            assert!(launch.shared_bytes > 0, "{what}: block folds share partial results: {launch}");
        } else {
            assert!(launch.grid * launch.block as usize * 4 >= 64_000, "{what}: the launch covers every element: {launch}");
        }
        let text = report.to_string();
        assert!(text.contains("GPU launch:") && text.contains("CUDA source:") && text.contains("no CUDA graph"), "{what}: {text}");
    }
}

/// Compiled functions with reductions (each one fused kernel of several passes, a column
/// reduction, integer and half-precision folds, row and element outputs at once) run on the GPU
/// and match the CPU's compiled results.
#[test]
fn compiled_reductions_run_as_gpu_row_kernels_and_match_the_cpu() {
    let Some((g, _one)) = gpu("compiled_reductions_run_as_gpu_row_kernels_and_match_the_cpu") else { return };
    type Body = fn(&[Array]) -> kiln::Result<Vec<Array>>;
    let softmax: Body = |a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]);
    let layernorm: Body = |a| {
        let x = &a[0];
        let mean = ops::mean(x, Some(&[-1]), true)?;
        let centred = ops::subtract(x, &mean)?;
        let var = ops::mean(ops::square(&centred)?, Some(&[-1]), true)?;
        Ok(vec![ops::multiply(ops::multiply(&centred, ops::rsqrt(ops::add(var, 1e-5f32)?)?)?, &a[1])?])
    };
    let rmsnorm: Body = |a| {
        let x = &a[0];
        let scale = ops::rsqrt(ops::add(ops::mean(ops::square(x)?, Some(&[-1]), true)?, 1e-5f32)?)?;
        Ok(vec![ops::multiply(ops::multiply(x, scale)?, &a[1])?])
    };
    let logsumexp: Body = |a| Ok(vec![ops::logsumexp(&a[0], Some(&[-1]), false)?]);
    let logsumexp_and_max: Body = |a| Ok(vec![ops::logsumexp(&a[0], Some(&[-1]), false)?, ops::max(&a[0], Some(&[-1]), false)?]);
    let column_sum: Body = |a| Ok(vec![ops::sum(ops::exp(&a[0])?, Some(&[0]), false)?]);
    let middle_axes: Body = |a| Ok(vec![ops::mean(ops::tanh(&a[0])?, Some(&[1, 2]), true)?]);
    let mut rng = Rng::new(11);
    let x = |shape: &[usize], d: Dtype, rng: &mut Rng| array(&rng.vec(shape.iter().product(), -3.0, 3.0), shape, d);
    // Softmax, layer norm, rmsnorm and logsumexp are one kernel each, in the row-cached and the
    // general variant.
    let cases: Vec<(&str, Body, Vec<Array>, f64, bool)> = vec![
        ("softmax 33x1000", softmax, vec![x(&[33, 1000], Dtype::F32, &mut rng)], 2e-6, true),
        ("softmax 3x4096", softmax, vec![x(&[3, 4096], Dtype::F32, &mut rng)], 2e-6, true),
        ("softmax 2x9000 (longer than the row cache)", softmax, vec![x(&[2, 9000], Dtype::F32, &mut rng)], 2e-6, true),
        ("softmax of a transposed 300x7", softmax, vec![ops::transpose(x(&[7, 300], Dtype::F32, &mut rng), None).unwrap()], 2e-6, true),
        ("softmax bfloat16 4x4100", softmax, vec![x(&[4, 4100], Dtype::BF16, &mut rng)], 1e-2, true),
        ("layernorm 17x256", layernorm, vec![x(&[17, 256], Dtype::F32, &mut rng), x(&[256], Dtype::F32, &mut rng)], 2e-5, true),
        ("layernorm 17x257", layernorm, vec![x(&[17, 257], Dtype::F32, &mut rng), x(&[257], Dtype::F32, &mut rng)], 2e-5, true),
        ("rmsnorm 17x300", rmsnorm, vec![x(&[17, 300], Dtype::F32, &mut rng), x(&[300], Dtype::F32, &mut rng)], 2e-5, true),
        ("logsumexp 33x1000", logsumexp, vec![x(&[33, 1000], Dtype::F32, &mut rng)], 2e-6, true),
        ("logsumexp and max float64 5x3", logsumexp_and_max, vec![x(&[5, 3], Dtype::F64, &mut rng)], 1e-12, false),
        ("column sum of exp 700x9", column_sum, vec![x(&[700, 9], Dtype::F32, &mut rng)], 2e-6, false),
        ("mean of tanh over middle axes 3x5x7x2", middle_axes, vec![x(&[3, 5, 7, 2], Dtype::F32, &mut rng)], 2e-6, false),
        ("empty rows 0x5", softmax, vec![x(&[0, 5], Dtype::F32, &mut rng)], 0.0, false),
    ];
    for (what, body, args, rtol, one_kernel) in cases {
        let f = kiln::compile(body);
        let cpu = with_device(Device::cpu(), || f.call(&args)).unwrap().unwrap();
        let gpu_out = with_device(g, || f.call(&args)).unwrap().unwrap();
        for (c, o) in cpu.iter().zip(&gpu_out) {
            assert_eq!(c.shape(), o.shape(), "{what}");
            assert_close(&o.to_f64_vec().unwrap(), &c.to_f64_vec().unwrap(), rtol, 1e-30, what);
        }
        if one_kernel {
            assert_eq!(f.inspect(&args, &[]).unwrap().compiled_kernels, 1, "{what}: one fused kernel");
        }
    }
    // Integer folds are exact: the sum and max of int8 values with a cast epilogue.
    let ints = array(&random_values(&mut rng, 6000, Dtype::I8, -100.0, 100.0), &[20, 300], Dtype::I8);
    let int_folds = kiln::compile(|a: &[Array]| {
        Ok(vec![ops::sum(&a[0], Some(&[-1]), false)?, ops::astype(ops::max(ops::multiply(&a[0], 3i32)?, Some(&[-1]), false)?, Dtype::I64)?])
    });
    let cpu = with_device(Device::cpu(), || int_folds.call(std::slice::from_ref(&ints))).unwrap().unwrap();
    let gpu_out = with_device(g, || int_folds.call(std::slice::from_ref(&ints))).unwrap().unwrap();
    for (c, o) in cpu.iter().zip(&gpu_out) {
        same("int8 folds", Ok(c.to_f64_vec().unwrap()), Ok(o.to_f64_vec().unwrap()), None);
    }
    let host = kiln::backend::cuda::ops_on_host();
    assert!(!host.iter().any(|(op, _)| op.contains("sum") || op.contains("max")), "fused reductions ran on the host: {host:?}");
}

/// Kernels with reductions for every fold and dtype, and the shapes of the fused IR compile
/// makes (several passes, row arithmetic, row and element outputs), built with NVRTC for every
/// way of reading an input along a row.
#[test]
fn row_kernels_build_with_nvrtc_for_every_fold_dtype_and_access() {
    if !nvrtc_found("row_kernels_build_with_nvrtc_for_every_fold_dtype_and_access") {
        return;
    }
    use kiln::backend::cuda::row_source::{self, RowAccess, RowSplit, RowVariant};
    let inst = |op, dtype, level, phase| Inst { op, dtype, level, phase };
    let (e, r) = (Level::Element, Level::Row);
    let mut kernels = Vec::new();
    for op in REDUCE {
        for d in Dtype::REAL {
            // x -> fold(x) per row, then x - fold as an element output (where defined) in pass 1.
            let out = op.out_dtype(d);
            let mut insts = vec![inst(InstOp::Load(0), d, e, 0), inst(InstOp::Reduce(op, 0), out, r, 1)];
            let mut outputs = vec![1];
            if d.is_float() && out == d {
                insts.push(inst(InstOp::Broadcast(1), d, e, 1));
                insts.push(inst(InstOp::Binary(BinaryOp::Subtract, 0, 2), d, e, 1));
                outputs.push(3);
            }
            let passes = 1 + usize::from(outputs.len() > 1);
            kernels.push(Kernel { name: format!("{op:?} {d}"), reduced: 1, inner: 0, inputs: vec![d], insts, outputs, passes, lowered: Default::default() });
        }
    }
    // Softmax with a per-row input: max (pass 0), sum of exp (pass 1), the quotient (pass 2),
    // and the row's log-sum-exp plus a per-row bias as a row output.
    let f = Dtype::F32;
    let softmax = vec![
        inst(InstOp::Load(0), f, e, 0),
        inst(InstOp::Reduce(ReduceOp::Max, 0), f, r, 1),
        inst(InstOp::Broadcast(1), f, e, 1),
        inst(InstOp::Binary(BinaryOp::Subtract, 0, 2), f, e, 1),
        inst(InstOp::Unary(UnaryOp::Exp, 3), f, e, 1),
        inst(InstOp::Reduce(ReduceOp::Sum, 4), f, r, 2),
        inst(InstOp::Broadcast(5), f, e, 2),
        inst(InstOp::Binary(BinaryOp::Divide, 4, 6), f, e, 2),
        inst(InstOp::Unary(UnaryOp::Log, 5), f, r, 2),
        inst(InstOp::Load(1), f, r, 0),
        inst(InstOp::Binary(BinaryOp::Add, 8, 9), f, r, 2),
    ];
    kernels.push(Kernel { name: "softmax".into(), reduced: 1, inner: 0, inputs: vec![f, f], insts: softmax, outputs: vec![7, 10], passes: 3, lowered: Default::default() });
    let accesses = [RowAccess::Contiguous, RowAccess::Strided, RowAccess::PerRow];
    let mut built = 0;
    for k in &kernels {
        // Three variants without the row cache, then two with it (whose inputs are contiguous
        // or one per row).
        for n in 0..5 {
            let cached = n >= 3;
            let access = (0..k.inputs.len()).map(|j| if cached { accesses[2 * ((j + n) % 2)] } else { accesses[(j + n) % 3] }).collect();
            let (vector, per_thread) = if cached { (16 / k.inputs[0].size().max(4), n - 1) } else { (1, 0) };
            let whole = RowVariant { lead: 1 + n % 3, trail: 1 + n % 2, access, wide: n == 1, vector, per_thread, split: RowSplit::Whole };
            // Kernels of one pass also split their rows (two kernels, without the row cache; the
            // parts read vectors where the cached variants do).
            let splits: &[RowSplit] = if k.passes == 1 { &[RowSplit::Whole, RowSplit::Parts, RowSplit::Finish] } else { &[RowSplit::Whole] };
            for &split in splits {
                let per_thread = if split == RowSplit::Whole { whole.per_thread } else { 0 };
                let variant = RowVariant { split, per_thread, ..whole.clone() };
                let text = row_source::rows(k, &variant).unwrap_or_else(|err| panic!("{}: {}", k.name, err.message));
                nvrtc::build("test", &text, "sm_90a").unwrap_or_else(|err| panic!("{} {variant:?}: {}", k.name, err.message));
                built += 1;
            }
        }
    }
    let one_pass = kernels.iter().filter(|k| k.passes == 1).count();
    assert_eq!(built, kernels.len() * 5 + one_pass * 5 * 2);
}

/// A kernel of one load per input dtype and then `ops` over them, every result an output: one
/// NVRTC build covers many ops.
fn kernel_of(inputs: &[Dtype], ops: Vec<(InstOp, Dtype)>) -> Kernel {
    let element = |op, dtype| Inst { op, dtype, level: Level::Element, phase: 0 };
    let mut insts: Vec<Inst> = inputs.iter().enumerate().map(|(j, &d)| element(InstOp::Load(j), d)).collect();
    insts.extend(ops.into_iter().map(|(op, d)| element(op, d)));
    Kernel {
        name: "test".into(),
        reduced: 0,
        inner: 0,
        inputs: inputs.to_vec(),
        outputs: (inputs.len()..insts.len()).collect(),
        insts,
        passes: 1,
        lowered: Default::default(),
    }
}

#[test]
fn printed_kernels_build_with_nvrtc_for_every_op_dtype_and_access() {
    if !nvrtc_found("printed_kernels_build_with_nvrtc_for_every_op_dtype_and_access") {
        return;
    }
    use source::{Access, Variant};
    let mut kernels = Vec::new();
    for d in Dtype::REAL {
        let unary = UNARY
            .iter()
            .filter(|u| !u.needs_float() || d.is_float())
            .map(|&u| (InstOp::Unary(u, 0), if u.is_predicate() { Dtype::Bool } else { d }))
            .collect();
        kernels.push(kernel_of(&[d], unary));
        let binary = BINARY.iter().map(|&b| (InstOp::Binary(b, 0, 1), if b.is_predicate() { Dtype::Bool } else { d })).collect();
        kernels.push(kernel_of(&[d, d], binary));
        let casts = Dtype::REAL.iter().map(|&to| (InstOp::Cast(0), to)).collect();
        kernels.push(kernel_of(&[d], casts));
    }
    kernels.push(kernel_of(&[Dtype::Bool, Dtype::F16, Dtype::BF16], vec![(InstOp::Select(0, 1, 2), Dtype::F16), (InstOp::Const(0x3c00), Dtype::F16)]));
    let variants = [
        Variant { rank: 1, access: vec![], wide: false, vector: 1 },
        Variant { rank: 3, access: vec![], wide: true, vector: 1 },
        Variant { rank: 1, access: vec![], wide: false, vector: 2 },
    ];
    let mut built = 0;
    for k in &kernels {
        for v in &variants {
            let access: &[Access] = if v.vector > 1 {
                &[Access::Contiguous, Access::Immediate, Access::Scalar]
            } else {
                &[Access::Contiguous, Access::Strided, Access::Scalar, Access::Immediate]
            };
            let pick = |j: usize| access[(j + v.rank) % access.len()];
            let variant = Variant { access: (0..k.inputs.len()).map(pick).collect(), ..v.clone() };
            // Ops a dtype does not define are refused by the printer, as the CPU refuses them; the
            // kernels keep only the defined ones.
            let mut k2 = kernel_of(&k.inputs, vec![]);
            for inst in &k.insts[k.inputs.len()..] {
                k2.insts.push(inst.clone());
                k2.outputs = (k.inputs.len()..k2.insts.len()).collect();
                if source::elementwise(&k2, &variant).is_err() {
                    k2.insts.pop();
                    k2.outputs.pop();
                }
            }
            let text = source::elementwise(&k2, &variant).unwrap();
            nvrtc::build("test", &text, "sm_90a").unwrap_or_else(|e| panic!("{}", e.message));
            built += 1;
        }
    }
    assert_eq!(built, kernels.len() * variants.len());
}

/// The public op of a reduction.
fn reduction(op: ReduceOp) -> fn(&Array, Option<&[i64]>, bool) -> kiln::Result<Array> {
    match op {
        ReduceOp::Sum => |x, a, k| ops::sum(x, a, k),
        ReduceOp::Prod => |x, a, k| ops::prod(x, a, k),
        ReduceOp::Max => |x, a, k| ops::max(x, a, k),
        ReduceOp::Min => |x, a, k| ops::min(x, a, k),
        ReduceOp::All => |x, a, k| ops::all(x, a, k),
        ReduceOp::Any => |x, a, k| ops::any(x, a, k),
    }
}

const REDUCE: [ReduceOp; 6] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::All, ReduceOp::Any];

#[test]
fn reduction_kernels_build_with_nvrtc_for_every_op_and_dtype() {
    if !nvrtc_found("reduction_kernels_build_with_nvrtc_for_every_op_and_dtype") {
        return;
    }
    for op in REDUCE {
        for d in Dtype::REAL {
            let text = kiln::backend::cuda::reduce::source(op, d, op.out_dtype(d));
            nvrtc::build("test", &text, "sm_90a").unwrap_or_else(|e| panic!("{op:?} on {d}: {}", e.message));
        }
    }
}

#[test]
fn reductions_match_the_cpu_over_any_axes() {
    let Some((g, _one)) = gpu("reductions_match_the_cpu_over_any_axes") else { return };
    let mut rng = Rng::new(7);
    let shape = [6, 1, 37, 50];
    let axes_cases: [&[i64]; 6] = [&[3], &[0], &[0, 2], &[1, 3], &[0, 1, 2, 3], &[2]];
    for d in Dtype::REAL {
        let values: Vec<f64> = if d.is_float() { rng.vec(11100, 0.5, 1.5) } else { random_values(&mut rng, 11100, d, -3.0, 3.0) };
        let x = array(&values, &shape, d);
        for op in REDUCE {
            for axes in axes_cases {
                let f = || reduction(op)(&x, Some(axes), false);
                let rtol = (d.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod)).then(|| rtol_for(d).max(1e-12));
                same(&format!("{op:?} over {axes:?} of {d}"), on(Device::cpu(), f), on(g, f), rtol);
            }
        }
    }
    // A long full reduction takes the two-pass path; NaN propagates through max.
    let mut long = rng.vec(3_000_000, -1.0, 1.0);
    long[1_234_567] = f64::NAN;
    let x = array(&long, &[3_000_000], Dtype::F32);
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let f = || reduction(op)(&x, None, false);
        same(&format!("{op:?} of 3e6 with a NaN"), on(Device::cpu(), f), on(g, f), Some(1e-6));
    }
}

#[test]
fn a_kernel_that_does_not_build_shows_the_log_and_numbered_source() {
    if !nvrtc_found("a_kernel_that_does_not_build_shows_the_log_and_numbered_source") {
        return;
    }
    let e = nvrtc::build("test", "extern \"C\" __global__ void k() { undefined_name(); }", "sm_90a").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Device);
    assert!(e.message.contains("undefined_name") && e.message.contains("   1 | extern"), "{}", e.message);
}

#[test]
fn without_a_gpu_asking_for_one_names_the_cause() {
    if Device::gpu(0).is_available() {
        println!("skipped without_a_gpu_asking_for_one_names_the_cause: this machine has a GPU");
        return;
    }
    let e = kiln::set_default_device(Device::gpu(0)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value, "{e}");
    assert!(e.message.contains("libcuda") || e.message.contains("no GPU") || e.message.contains("driver"), "{e}");
    if e.message.contains("(libcuda) was not found") {
        // The driver is not a toolkit library: the fix is the driver, not KILN_CUDA_PATH.
        assert!(e.message.contains("Install the NVIDIA driver") && !e.message.contains("KILN_CUDA_PATH"), "{e}");
    }
    let e = with_device(Device::gpu(0), || ()).unwrap_err();
    assert_eq!(e.op, "with_stream");
    assert_eq!(kiln::default_device(), Device::cpu());
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    assert_eq!(ops::exp(&x).unwrap().to_vec::<f32>().unwrap().len(), 2, "the CPU keeps working");
}

#[test]
fn an_op_on_one_gpu_reads_an_array_made_on_another_once() {
    let Some((g, _one)) = gpu("an_op_on_one_gpu_reads_an_array_made_on_another_once") else { return };
    let second = Device::gpu(1);
    if !second.is_available() {
        println!("skipped an_op_on_one_gpu_reads_an_array_made_on_another_once: this machine has one GPU");
        return;
    }
    let mut rng = Rng::new(21);
    let x = array(&rng.vec(3 << 20, -1.0, 1.0), &[3 << 20], Dtype::F32);
    let on_first = with_device(g, || ops::exp(&x)).unwrap().unwrap();
    on_first.eval().unwrap();
    let before = kiln::transfers();
    let f = || ops::multiply(&on_first, 2.0f32);
    let (a, b) = (with_device(second, f).unwrap().unwrap(), with_device(second, f).unwrap().unwrap());
    kiln::eval(&[&a, &b]).unwrap();
    let moved = kiln::transfers().to_device - before.to_device;
    assert_eq!(moved, 1, "the array moves from GPU 0 to GPU 1 once, and the copy stays");
    let want = on(Device::cpu(), || ops::multiply(ops::exp(&x)?, 2.0f32)).unwrap();
    same("GPU 0 -> GPU 1", Ok(want.clone()), a.to_f64_vec(), Some(1e-6));
    same("GPU 0 -> GPU 1 again", Ok(want), b.to_f64_vec(), Some(1e-6));
}

/// Turns CUDA graphs on for one test (they are off by default), and back as they were after.
struct GraphsOn(bool);

impl GraphsOn {
    fn new() -> GraphsOn {
        GraphsOn(kiln::backend::cuda::graph::set_enabled(true))
    }
}

impl Drop for GraphsOn {
    fn drop(&mut self) {
        kiln::backend::cuda::graph::set_enabled(self.0);
    }
}

/// Softmax cross-entropy of a relu MLP and one SGD step: args [w1, b1, w2, b2, x, one-hot
/// labels], results [loss, new w1, b1, w2, b2].
fn mlp_sgd_step(a: &[Array]) -> kiln::Result<Vec<Array>> {
    let loss = |a: &[Array]| {
        let hidden = ops::maximum(ops::add(ops::matmul(&a[4], &a[0])?, &a[1])?, 0.0)?;
        let logits = ops::add(ops::matmul(&hidden, &a[2])?, &a[3])?;
        let picked = ops::sum(ops::multiply(&logits, &a[5])?, Some(&[-1]), false)?;
        Ok(vec![ops::mean(ops::subtract(ops::logsumexp(&logits, Some(&[-1]), false)?, picked)?, None, false)?])
    };
    let (value, grads) = kiln::value_and_grad(loss, &[0, 1, 2, 3])(a)?;
    let mut out = value;
    for (p, g) in a.iter().zip(grads) {
        out.push(ops::subtract(p, ops::multiply(g, 0.1f32)?)?);
    }
    Ok(out)
}

/// The MLP's parameters and a batch: [w1 (20x16), b1, w2 (16x5), b2, x (8x20), one-hot labels].
fn mlp_args(rng: &mut Rng) -> Vec<Array> {
    let mut onehot = vec![0.0; 8 * 5];
    for i in 0..8 {
        onehot[i * 5 + (3 * i + 1) % 5] = 1.0;
    }
    vec![
        array(&rng.vec(20 * 16, -0.3, 0.3), &[20, 16], Dtype::F32),
        array(&rng.vec(16, -0.1, 0.1), &[16], Dtype::F32),
        array(&rng.vec(16 * 5, -0.3, 0.3), &[16, 5], Dtype::F32),
        array(&rng.vec(5, -0.1, 0.1), &[5], Dtype::F32),
        array(&rng.vec(8 * 20, -1.0, 1.0), &[8, 20], Dtype::F32),
        array(&onehot, &[8, 5], Dtype::F32),
    ]
}

/// A compiled training step of several kernels (matmuls, fused kernels, reductions) is recorded
/// as a CUDA graph at its second call and replayed after: every step, with the parameters fed
/// back and a new batch each time, matches the same step run eagerly, and results kept from
/// earlier calls are not overwritten by later replays.
#[test]
fn compiled_steps_replay_as_a_cuda_graph_and_match_eager_steps() {
    let Some((g, _one)) = gpu("compiled_steps_replay_as_a_cuda_graph_and_match_eager_steps") else { return };
    let _graphs = GraphsOn::new();
    let mut rng = Rng::new(21);
    let step = kiln::compile(mlp_sgd_step);
    let start = mlp_args(&mut rng);
    let (mut compiled_args, mut eager_args) = (start.clone(), start);
    let replays = kiln::backend::cuda::graph::replays();
    let mut kept = Vec::new();
    for call in 0..6 {
        let batch = mlp_args(&mut rng);
        for a in [&mut compiled_args, &mut eager_args] {
            a[4] = batch[4].clone();
        }
        let compiled = with_device(g, || step.call(&compiled_args)).unwrap().unwrap();
        let eager = with_device(g, || mlp_sgd_step(&eager_args)).unwrap().unwrap();
        for (k, (c, e)) in compiled.iter().zip(&eager).enumerate() {
            assert_close(&c.to_f64_vec().unwrap(), &e.to_f64_vec().unwrap(), 1e-4, 1e-6, &format!("call {call}, result {k}"));
        }
        kept.push((compiled[0].clone(), eager[0].to_f64_vec().unwrap()));
        compiled_args[..4].clone_from_slice(&compiled[1..]);
        eager_args[..4].clone_from_slice(&eager[1..]);
    }
    for (call, (loss, want)) in kept.iter().enumerate() {
        assert_close(&loss.to_f64_vec().unwrap(), want, 1e-4, 1e-6, &format!("the loss of call {call}, read after every call"));
    }
    let report = with_device(g, || step.inspect(&compiled_args, &[])).unwrap().unwrap();
    let how = report.gpu_replay.clone().unwrap_or_default();
    assert!(how.contains("one CUDA graph launch"), "{how}");
    assert_eq!(kiln::backend::cuda::graph::replays() - replays, 5, "calls 2 to 6 replay the graph");
}

/// The buffers a plan's CUDA graph holds count as cached memory; `clear_cache` releases them
/// with the graph, and the plan records a new graph at its next call, with right results.
#[test]
fn graph_buffers_count_as_cache_and_clear_cache_releases_them() {
    let Some((g, _one)) = gpu("graph_buffers_count_as_cache_and_clear_cache_releases_them") else { return };
    let _graphs = GraphsOn::new();
    use kiln::backend::cuda::graph::{held_bytes, replays};
    let mut rng = Rng::new(24);
    let step = kiln::compile(mlp_sgd_step);
    let args = mlp_args(&mut rng);
    let eager = with_device(g, || mlp_sgd_step(&args)).unwrap().unwrap();
    let eager: Vec<Vec<f64>> = eager.iter().map(|e| e.to_f64_vec().unwrap()).collect();
    let call = |what: &str| {
        let got = with_device(g, || step.call(&args)).unwrap().unwrap();
        for (k, (c, e)) in got.iter().zip(&eager).enumerate() {
            assert_close(&c.to_f64_vec().unwrap(), e, 1e-4, 1e-6, &format!("{what}, result {k}"));
        }
    };
    kiln::clear_cache();
    assert_eq!(held_bytes(), 0, "no graph is left after clear_cache");
    call("call 1");
    call("call 2, which records the graph");
    let held = held_bytes();
    assert!(held > 0, "the recorded graph holds its buffers");
    assert!(kiln::cache_memory() >= held, "cache_memory {} counts the graph's {held} bytes", kiln::cache_memory());
    kiln::clear_cache();
    assert_eq!(held_bytes(), 0, "clear_cache releases the graph");
    let before = replays();
    call("call 3, which records the graph again");
    call("call 4, a replay");
    assert_eq!(replays() - before, 2, "calls 3 and 4 run as a graph");
    assert!(held_bytes() > 0, "the new graph holds its buffers");
}

/// A call whose inputs are laid out differently (a transposed view for a row-major array) runs
/// kernel by kernel and is right; the graph is recorded again for the new layout.
#[test]
fn a_new_input_layout_leaves_the_graph_and_stays_right() {
    let Some((g, _one)) = gpu("a_new_input_layout_leaves_the_graph_and_stays_right") else { return };
    let _graphs = GraphsOn::new();
    let mut rng = Rng::new(22);
    let f = kiln::compile(|a: &[Array]| Ok(vec![ops::softmax(&ops::matmul(&a[0], &a[1])?, Some(&[-1]), false)?, ops::sum(&a[0], None, false)?]));
    let b = array(&rng.vec(24 * 10, -1.0, 1.0), &[24, 10], Dtype::F32);
    let row_major = array(&rng.vec(12 * 24, -1.0, 1.0), &[12, 24], Dtype::F32);
    let transposed = ops::transpose(array(&rng.vec(24 * 12, -1.0, 1.0), &[24, 12], Dtype::F32), None).unwrap();
    for (call, a) in [&row_major, &row_major, &row_major, &transposed, &transposed, &transposed, &row_major].into_iter().enumerate() {
        let args = [a.clone(), b.clone()];
        let got = with_device(g, || f.call(&args)).unwrap().unwrap();
        let want = with_device(Device::cpu(), || f.call(&args)).unwrap().unwrap();
        for (k, (x, y)) in got.iter().zip(&want).enumerate() {
            assert_close(&x.to_f64_vec().unwrap(), &y.to_f64_vec().unwrap(), 1e-5, 1e-6, &format!("call {call}, result {k}"));
        }
    }
}

/// A plan with a step that cannot be recorded (a user kernel that runs on the CPU) keeps
/// launching kernel by kernel, says why in its report, and is right.
#[test]
fn plans_that_cannot_be_recorded_run_kernel_by_kernel() {
    let Some((g, _one)) = gpu("plans_that_cannot_be_recorded_run_kernel_by_kernel") else { return };
    let _graphs = GraphsOn::new();
    let mut rng = Rng::new(23);
    let f = kiln::compile(|a: &[Array]| {
        let doubled = kiln::custom_kernel("double", &[ops::exp(&a[0])?], &[(vec![16, 8], Dtype::F32)], |args: &mut kiln::KernelArgs| {
            let x: Vec<f32> = args.input::<f32>(0)?.to_vec();
            args.output::<f32>(0)?.iter_mut().zip(x).for_each(|(o, v)| *o = 2.0 * v);
            Ok(())
        })?;
        Ok(vec![ops::sum(ops::tanh(&doubled[0])?, Some(&[-1]), false)?])
    });
    let replays = kiln::backend::cuda::graph::replays();
    for call in 0..4 {
        let args = [array(&rng.vec(16 * 8, -1.0, 1.0), &[16, 8], Dtype::F32)];
        let got = with_device(g, || f.call(&args)).unwrap().unwrap();
        let want = with_device(Device::cpu(), || f.call(&args)).unwrap().unwrap();
        assert_close(&got[0].to_f64_vec().unwrap(), &want[0].to_f64_vec().unwrap(), 1e-5, 1e-6, &format!("call {call}"));
    }
    assert_eq!(kiln::backend::cuda::graph::replays(), replays, "no graph ran");
    let report = with_device(g, || f.inspect(&[array(&[0.0; 128], &[16, 8], Dtype::F32)], &[])).unwrap().unwrap();
    assert!(report.gpu_replay.as_deref().is_some_and(|h| h.contains("no CUDA graph: not recordable")), "{report}");
}

/// Random numbers in a replayed graph: the random state goes in and out of each call, so the
/// compiled calls draw the same sequence as eager calls from the same seed.
#[test]
fn replayed_graphs_carry_the_random_state() {
    let Some((g, _one)) = gpu("replayed_graphs_carry_the_random_state") else { return };
    let _graphs = GraphsOn::new();
    let body = |a: &[Array]| {
        let noise = kiln::random::uniform(0.0, 1.0, &[64], Dtype::F32, None)?;
        Ok(vec![ops::sum(ops::multiply(ops::exp(&a[0])?, &noise)?, None, false)?, ops::add(&noise, &a[0])?])
    };
    let f = kiln::compile_with(body, kiln::CompileOptions::new().random_state());
    let x = [array(&Rng::new(24).vec(64, -1.0, 1.0), &[64], Dtype::F32)];
    kiln::random::seed(7);
    let eager: Vec<Vec<f64>> = (0..5).map(|_| with_device(g, || body(&x)).unwrap().unwrap()[1].to_f64_vec().unwrap()).collect();
    kiln::random::seed(7);
    let compiled: Vec<Vec<f64>> = (0..5).map(|_| with_device(g, || f.call(&x)).unwrap().unwrap()[1].to_f64_vec().unwrap()).collect();
    let how = with_device(g, || f.inspect(&x, &[])).unwrap().unwrap().gpu_replay.unwrap_or_default();
    for (call, (c, e)) in compiled.iter().zip(&eager).enumerate() {
        assert_close(c, e, 1e-6, 1e-7, &format!("call {call} ({how})"));
    }
    assert!(how.contains("one CUDA graph launch"), "{how}");
    assert_ne!(compiled[3], compiled[4], "each call draws new numbers");
}

#[test]
fn complex64_on_the_gpu_is_a_clear_error_and_computes_on_the_cpu_stream() {
    let Some((g, _one)) = gpu("complex64_on_the_gpu_is_a_clear_error_and_computes_on_the_cpu_stream") else { return };
    let z = Array::from_slice(&[kiln::Complex64::new(1.0, 2.0)], &[1]).unwrap();
    let times_two = || -> kiln::Result<Array> {
        let y = ops::multiply(&z, 2.0)?;
        y.eval()?;
        Ok(y)
    };
    let err = with_device(g, times_two).unwrap().unwrap_err();
    assert!(err.to_string().contains("complex64") && err.to_string().contains("CPU"), "{err}");
    let y = with_device(Device::cpu(), times_two).unwrap().unwrap();
    assert_eq!(format!("{:?}", y.to_vec::<kiln::Complex64>().unwrap()), "[2+4j]");
}
