//! Native code for fused kernels computes exactly what the tile interpreter computes. Each test
//! compiles a function, runs it once with the interpreter and once with native code built on
//! the spot (`Engine::NativeNow`), checks that native code really ran, and compares the results
//! bit for bit (NaN payloads aside) over swept and special values of every dtype C computes.
//! Kernels the C lowering does not cover must stay interpreted, with the same results.
//!
//! Every comparison runs at each instruction-set level this CPU can execute (`x86-64-v2`, `-v3`
//! and `-v4` where it has them, and the host's own `native`), so the SSE, AVX2 and AVX-512
//! forms of the generated vector code are all checked on one machine.
//!
//! Needs a C compiler (`cc`, or `KILN_CC`), as CI machines have.

mod common;

use common::Rng;
use kiln::backend::cpu::native::{columns_runs, levels, native_runs, rows_runs, with_arch, with_engine, Engine};
use kiln::ops::SliceSpec;
use kiln::{compile, ops, Array, Dtype, Element, Result};

type Fn1 = fn(&Array) -> Result<Array>;
type Fn2 = fn(&Array, &Array) -> Result<Array>;
/// A compiled function's body, boxed so several can be listed.
type Body = Box<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;

/// Whether two outputs hold the same bits (any NaN equals any NaN).
fn same_bits(got: &Array, want: &Array) -> std::result::Result<(), String> {
    fn check<T: Element + PartialEq>(g: &Array, w: &Array, is_nan: impl Fn(&T) -> bool, bits: impl Fn(&T) -> u64) -> std::result::Result<(), String> {
        let (g, w) = (g.to_vec::<T>().map_err(|e| e.to_string())?, w.to_vec::<T>().map_err(|e| e.to_string())?);
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            if !(is_nan(a) && is_nan(b)) && bits(a) != bits(b) {
                return Err(format!("element {i}: native {:#x}, interpreter {:#x}", bits(a), bits(b)));
            }
        }
        Ok(())
    }
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return Err(format!("native {:?} {}, interpreter {:?} {}", got.shape(), got.dtype(), want.shape(), want.dtype()));
    }
    match want.dtype() {
        Dtype::F32 => check::<f32>(got, want, |v| v.is_nan(), |v| v.to_bits() as u64),
        Dtype::F64 => check::<f64>(got, want, |v| v.is_nan(), |v| v.to_bits()),
        Dtype::Bool => check::<bool>(got, want, |_| false, |v| *v as u64),
        Dtype::U8 => check::<u8>(got, want, |_| false, |v| *v as u64),
        Dtype::U16 => check::<u16>(got, want, |_| false, |v| *v as u64),
        Dtype::U32 => check::<u32>(got, want, |_| false, |v| *v as u64),
        Dtype::U64 => check::<u64>(got, want, |_| false, |v| *v),
        Dtype::I8 => check::<i8>(got, want, |_| false, |v| *v as u64),
        Dtype::I16 => check::<i16>(got, want, |_| false, |v| *v as u64),
        Dtype::I32 => check::<i32>(got, want, |_| false, |v| *v as u64),
        Dtype::I64 => check::<i64>(got, want, |_| false, |v| *v as u64),
        d => Err(format!("no bitwise comparison for {d}")),
    }
}

/// Every level native code is built for in these tests: each this CPU runs, and its own.
fn all_levels() -> Vec<&'static str> {
    let mut all = levels();
    all.push("native");
    all
}

/// Runs `f` compiled on `args` with both engines, native code built for each of [`all_levels`];
/// checks native code ran (or, when `native` is false, that it did not) and that the results
/// are equal bit for bit.
fn engines_agree(f: impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static, args: &[Array], native: bool, what: &str) {
    // Every level's results stay alive to the end: freed, their buffers would come back (host
    // memory is recycled by size) holding the right values for the next level's outputs, and a
    // kernel that skipped some stores would pass there.
    let mut kept = Vec::new();
    for level in all_levels() {
        kept.push(with_arch(level, || engines_agree_at(f.clone(), args, native, &format!("{what} [{level}]"))));
    }
}

/// [`engines_agree`] for the level the thread builds for; returns both engines' results.
fn engines_agree_at(
    f: impl Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
    args: &[Array],
    native: bool,
    what: &str,
) -> (Vec<Array>, Vec<Array>) {
    let c = compile(f);
    let want = with_engine(Engine::Interpreter, || c.call(args)).unwrap_or_else(|e| panic!("{what}: interpreted: {e}"));
    let before = native_runs();
    let got = with_engine(Engine::NativeNow, || c.call(args)).unwrap_or_else(|e| panic!("{what}: native: {e}"));
    let ran = native_runs() > before;
    assert_eq!(
        ran, native,
        "{what}: native code {} (native kernels need a C compiler: cc, or set KILN_CC)",
        if ran { "ran, but this kernel should stay interpreted" } else { "did not run" }
    );
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if let Err(e) = same_bits(g, w) {
            panic!("{what}: output {k}: {e}");
        }
    }
    (want, got)
}

/// Every 4099th float32 bit pattern (both signs, subnormals, infinities, NaNs) and special values.
fn f32_sweep() -> Vec<f32> {
    let mut v: Vec<f32> = (0..u32::MAX).step_by(4099).map(f32::from_bits).collect();
    v.extend([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, f32::MAX, f32::MIN]);
    v.extend((-2000..2000).map(|i| i as f32 * 0.01));
    v
}

/// Float64 values: every float32 sweep value, plus random float64 bit patterns.
fn f64_sweep() -> Vec<f64> {
    let mut rng = Rng::new(7);
    let mut v: Vec<f64> = f32_sweep().into_iter().map(f64::from).collect();
    v.extend((0..50_000).map(|_| f64::from_bits(rng.next_u64())));
    v
}

fn float_inputs(dtype: Dtype) -> Array {
    match dtype {
        Dtype::F32 => {
            let v = f32_sweep();
            Array::from_slice(&v, &[v.len()]).unwrap()
        }
        _ => {
            let v = f64_sweep();
            Array::from_slice(&v, &[v.len()]).unwrap()
        }
    }
}

const FLOAT_UNARY: [(&str, Fn1); 28] = [
    ("abs", |x| ops::abs(x)),
    ("sign", |x| ops::sign(x)),
    ("exp", |x| ops::exp(x)),
    ("expm1", |x| ops::expm1(x)),
    ("log", |x| ops::log(x)),
    ("log1p", |x| ops::log1p(x)),
    ("log2", |x| ops::log2(x)),
    ("log10", |x| ops::log10(x)),
    ("sqrt", |x| ops::sqrt(x)),
    ("rsqrt", |x| ops::rsqrt(x)),
    ("square", |x| ops::square(x)),
    ("reciprocal", |x| ops::reciprocal(x)),
    ("sin", |x| ops::sin(x)),
    ("cos", |x| ops::cos(x)),
    ("tan", |x| ops::tan(x)),
    ("arcsin", |x| ops::arcsin(x)),
    ("arccos", |x| ops::arccos(x)),
    ("arctan", |x| ops::arctan(x)),
    ("sinh", |x| ops::sinh(x)),
    ("cosh", |x| ops::cosh(x)),
    ("tanh", |x| ops::tanh(x)),
    ("erf", |x| ops::erf(x)),
    ("erfinv", |x| ops::erfinv(x)),
    ("sigmoid", |x| ops::sigmoid(x)),
    ("floor", |x| ops::floor(x)),
    ("ceil", |x| ops::ceil(x)),
    ("round", |x| ops::round(x)),
    ("negative", |x| ops::negative(x)),
];

/// Each float unary op (after a negation, so the kernel is a fused group of two) on float32 and
/// float64; float64 erf and erfinv have no C form and stay interpreted.
#[test]
fn float_unary_ops_match_the_interpreter() {
    for dtype in [Dtype::F32, Dtype::F64] {
        let x = float_inputs(dtype);
        for (name, op) in FLOAT_UNARY {
            let native = !(dtype == Dtype::F64 && matches!(name, "erf" | "erfinv"));
            engines_agree(move |a| Ok(vec![op(&ops::negative(&a[0])?)?]), std::slice::from_ref(&x), native, &format!("{name} {dtype}"));
        }
        // The inverse hyperbolics are Rust's own formulas, not libm's: interpreted.
        engines_agree(|a| Ok(vec![ops::arcsinh(ops::negative(&a[0])?)?]), std::slice::from_ref(&x), false, &format!("arcsinh {dtype}"));
        let predicates: [(&str, Fn1); 6] = [
            ("isnan", |x| ops::isnan(x)),
            ("isinf", |x| ops::isinf(x)),
            ("isposinf", |x| ops::isposinf(x)),
            ("isneginf", |x| ops::isneginf(x)),
            ("isfinite", |x| ops::isfinite(x)),
            ("logical_not", |x| ops::logical_not(x)),
        ];
        for (name, op) in predicates {
            engines_agree(move |a| Ok(vec![op(&ops::negative(&a[0])?)?]), std::slice::from_ref(&x), true, &format!("{name} {dtype}"));
        }
    }
}

/// Each float binary op and comparison on pairs of swept and special values.
#[test]
fn float_binary_ops_match_the_interpreter() {
    let specials = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.0, 1e-40, 1e30, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    let binaries: [(&str, Fn2); 19] = [
        ("add", |x, y| ops::add(x, y)),
        ("subtract", |x, y| ops::subtract(x, y)),
        ("multiply", |x, y| ops::multiply(x, y)),
        ("divide", |x, y| ops::divide(x, y)),
        ("floor_divide", |x, y| ops::floor_divide(x, y)),
        ("remainder", |x, y| ops::remainder(x, y)),
        ("power", |x, y| ops::power(x, y)),
        ("maximum", |x, y| ops::maximum(x, y)),
        ("minimum", |x, y| ops::minimum(x, y)),
        ("arctan2", |x, y| ops::arctan2(x, y)),
        ("logaddexp", |x, y| ops::logaddexp(x, y)),
        ("equal", |x, y| ops::equal(x, y)),
        ("not_equal", |x, y| ops::not_equal(x, y)),
        ("less", |x, y| ops::less(x, y)),
        ("less_equal", |x, y| ops::less_equal(x, y)),
        ("greater", |x, y| ops::greater(x, y)),
        ("greater_equal", |x, y| ops::greater_equal(x, y)),
        ("logical_and", |x, y| ops::logical_and(x, y)),
        ("logical_or", |x, y| ops::logical_or(x, y)),
    ];
    let mut rng = Rng::new(11);
    let mut xs: Vec<f64> = specials.iter().flat_map(|&a| specials.iter().map(move |_| a)).collect();
    let mut ys: Vec<f64> = specials.iter().flat_map(|_| specials.iter().copied()).collect();
    xs.extend((0..20_000).map(|_| rng.uniform(-20.0, 20.0)));
    ys.extend((0..20_000).map(|_| rng.uniform(-20.0, 20.0)));
    for dtype in [Dtype::F32, Dtype::F64] {
        let args = [common::array(&xs, &[xs.len()], dtype), common::array(&ys, &[ys.len()], dtype)];
        for (name, op) in binaries {
            engines_agree(move |a| Ok(vec![op(&ops::negative(&a[0])?, &a[1])?]), &args, true, &format!("{name} {dtype}"));
        }
    }
}

/// Integer and bool arithmetic: wrapping, division and remainder by zero and of MIN by -1,
/// shifts out of range, negative powers.
#[test]
fn integer_and_bool_ops_match_the_interpreter() {
    let binaries: [(&str, Fn2); 14] = [
        ("add", |x, y| ops::add(x, y)),
        ("subtract", |x, y| ops::subtract(x, y)),
        ("multiply", |x, y| ops::multiply(x, y)),
        ("floor_divide", |x, y| ops::floor_divide(x, y)),
        ("remainder", |x, y| ops::remainder(x, y)),
        ("power", |x, y| ops::power(x, y)),
        ("maximum", |x, y| ops::maximum(x, y)),
        ("minimum", |x, y| ops::minimum(x, y)),
        ("bitwise_and", |x, y| ops::bitwise_and(x, y)),
        ("bitwise_or", |x, y| ops::bitwise_or(x, y)),
        ("bitwise_xor", |x, y| ops::bitwise_xor(x, y)),
        ("left_shift", |x, y| ops::left_shift(x, y)),
        ("right_shift", |x, y| ops::right_shift(x, y)),
        ("less", |x, y| ops::less(x, y)),
    ];
    let unaries: [(&str, Fn1); 5] = [
        ("abs", |x| ops::abs(x)),
        ("negative", |x| ops::negative(x)),
        ("sign", |x| ops::sign(x)),
        ("square", |x| ops::square(x)),
        ("bitwise_invert", |x| ops::bitwise_invert(x)),
    ];
    let mut rng = Rng::new(3);
    for dtype in [Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64, Dtype::U8, Dtype::U16, Dtype::U32, Dtype::U64] {
        // Extremes and small values (shift amounts, exponents, divisors), in all pairings.
        let bits = 8 * dtype.size() as u32;
        let (lo, hi): (i128, i128) = if dtype.is_unsigned() { (0, (1i128 << bits) - 1) } else { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) };
        let mut pool: Vec<i128> = vec![lo, lo + 1, hi, hi - 1, 0, 1, 2, 3, 7, bits as i128 - 1, bits as i128, bits as i128 + 1];
        if !dtype.is_unsigned() {
            pool.extend([-1, -2, -3, -7, -(bits as i128)]);
        }
        pool.extend((0..20).map(|_| lo + (rng.next_u64() as i128).rem_euclid(hi - lo + 1)));
        let xs: Vec<i128> = pool.iter().flat_map(|&a| pool.iter().map(move |_| a)).collect();
        let ys: Vec<i128> = pool.iter().flat_map(|_| pool.iter().copied()).collect();
        let make = |v: &[i128]| -> Array {
            let wide: Vec<i64> = v.iter().map(|&x| x as i64).collect();
            let u: Vec<u64> = v.iter().map(|&x| x as u64).collect();
            let a = if dtype == Dtype::U64 { Array::from_slice(&u, &[u.len()]) } else { Array::from_slice(&wide, &[wide.len()]) };
            ops::astype(a.unwrap(), dtype).unwrap()
        };
        let args = [make(&xs), make(&ys)];
        for (name, op) in binaries {
            engines_agree(move |a| Ok(vec![op(&ops::bitwise_xor(&a[0], &a[1])?, &a[1])?]), &args, true, &format!("{name} {dtype}"));
        }
        for (name, op) in unaries {
            engines_agree(move |a| Ok(vec![op(&ops::bitwise_xor(&a[0], &a[1])?)?]), &args, true, &format!("{name} {dtype}"));
        }
    }
    let bools = [common::array(&[0.0, 0.0, 1.0, 1.0], &[4], Dtype::Bool), common::array(&[0.0, 1.0, 0.0, 1.0], &[4], Dtype::Bool)];
    for (name, op) in binaries.iter().filter(|(n, _)| matches!(*n, "add" | "multiply" | "maximum" | "minimum" | "bitwise_and" | "bitwise_or" | "bitwise_xor" | "less")) {
        let op = *op;
        engines_agree(move |a| Ok(vec![op(&ops::logical_not(&a[0])?, &a[1])?]), &bools, true, &format!("{name} bool"));
    }
}

/// astype between every pair of the dtypes C computes, from values that saturate, truncate,
/// wrap and round.
#[test]
fn casts_match_the_interpreter() {
    let dtypes = [Dtype::Bool, Dtype::U8, Dtype::U16, Dtype::U32, Dtype::U64, Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64, Dtype::F32, Dtype::F64];
    let mut values: Vec<f64> = vec![0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.0, -1.0, 127.5, 128.0, -128.9, -129.0, 255.9, 256.0, 65535.5, 65536.0,
        2147483647.5, 2147483648.0, -2147483648.9, -2147483649.0, 4294967296.0, 9.223372036854776e18, -9.223372036854776e18,
        1.8446744073709552e19, 1e30, -1e30, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 16777217.0, 9007199254740993.0];
    let mut rng = Rng::new(5);
    values.extend((0..2000).map(|_| rng.uniform(-3e9, 3e9).round()));
    for from in dtypes {
        let x = common::array(&values, &[values.len()], Dtype::F64);
        // Integers come from the wide values by astype (wrapping), floats keep them.
        let x = if from.is_float() { ops::astype(&x, from).unwrap() } else { ops::astype(ops::astype(&x, Dtype::I64).unwrap(), from).unwrap() };
        for to in dtypes.into_iter().filter(|&to| to != from) {
            engines_agree(move |a| Ok(vec![ops::astype(ops::square(&a[0])?, to)?]), std::slice::from_ref(&x), true, &format!("{from} -> {to}"));
        }
    }
}

/// Reductions with their prologues and epilogues, over rows of many lengths (whole blocks of
/// sixteen and tails, rows long enough to skip the row cache, few long rows split across
/// threads), in float and integer dtypes.
#[test]
fn reducing_kernels_match_the_interpreter() {
    let mut rng = Rng::new(9);
    let reductions: [(&str, Fn1); 11] = [
        ("softmax", |x| ops::softmax(x, Some(&[-1]), false)),
        ("logsumexp", |x| ops::logsumexp(x, Some(&[-1]), true)),
        ("sum", |x| ops::sum(ops::square(x)?, Some(&[-1]), false)),
        ("mean", |x| ops::mean(ops::abs(x)?, Some(&[-1]), true)),
        ("var", |x| ops::var(x, Some(&[-1]), false, 0)),
        ("max", |x| ops::max(ops::negative(x)?, Some(&[-1]), false)),
        ("min", |x| ops::min(ops::negative(x)?, Some(&[-1]), false)),
        ("prod", |x| ops::prod(ops::add(ops::multiply(x, 0.01)?, 1.0)?, Some(&[-1]), false)),
        ("all", |x| ops::all(ops::greater(x, -1.5)?, Some(&[-1]), false)),
        ("any", |x| ops::any(ops::greater(x, 1.9)?, Some(&[-1]), false)),
        ("count", |x| ops::sum(ops::greater(x, 0.5)?, Some(&[-1]), false)),
    ];
    for (rows, len) in [(5, 2), (7, 15), (3, 16), (4, 17), (9, 1000), (3, 20_000), (1, 300_000)] {
        // Every width a fold widens from: float32, the integers and bool (in `count`).
        let dtypes = [Dtype::F32, Dtype::F64, Dtype::I8, Dtype::I16, Dtype::I32, Dtype::U8, Dtype::U16, Dtype::U32];
        for dtype in dtypes {
            let values = common::random_values(&mut rng, rows * len, dtype, -2.0, 2.0);
            let x = common::array(&values, &[rows, len], dtype);
            for (name, op) in reductions {
                let what = format!("{name} {dtype} {rows}x{len}");
                engines_agree(move |a| Ok(vec![op(&a[0])?]), std::slice::from_ref(&x), true, &what);
            }
        }
    }
    // Max and min fold parts of a row side by side: ties of +0 and -0 must still come out as the
    // sequential fold's (rows without a tail, whose last zero would decide every tie), and NaNs
    // too.
    let specials = [0x0000_0000u32, 0x8000_0000, 0xbf80_0000, 0x7fc2_0000, 0xffc8_0000, 0x7fe0_0000].map(f32::from_bits);
    // 1008 and 48 values: 63 and 3 blocks, so the last segment takes the blocks left over, and
    // with 48 three segments are empty.
    for (rows, len, nans) in [(64, 1024, false), (16, 4096, false), (64, 1008, false), (64, 48, false), (64, 1000, false), (64, 1024, true)] {
        let values: Vec<f32> = (0..rows * len).map(|_| specials[rng.below(if nans { 6 } else { 3 })]).collect();
        let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        let inputs = [Array::from_slice(&values, &[rows, len]).unwrap(), Array::from_slice(&wide, &[rows, len]).unwrap()];
        for x in inputs {
            let what = format!("max and min of signed zeros{} {} {rows}x{len}", if nans { " and NaNs" } else { "" }, x.dtype());
            engines_agree(
                |a| Ok(vec![ops::max(ops::multiply(&a[0], 2.0)?, Some(&[-1]), false)?, ops::min(ops::negative(&a[0])?, Some(&[-1]), false)?]),
                std::slice::from_ref(&x),
                true,
                &what,
            );
        }
    }
    // Several folds in a pass that also reads a row value (their C names must not clash).
    let x = common::array(&rng.vec(64 * 300, -3.0, 3.0), &[64, 300], Dtype::F32);
    engines_agree(
        |a| {
            let e = ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[-1]), true)?)?)?;
            Ok(vec![ops::sum(&e, Some(&[-1]), false)?, ops::max(&e, Some(&[-1]), false)?, ops::min(&e, Some(&[-1]), false)?])
        },
        std::slice::from_ref(&x),
        true,
        "three folds after a row value",
    );
    // Layer norm: two reductions, then the normalised row.
    let x = common::array(&rng.vec(64 * 700, -3.0, 3.0), &[64, 700], Dtype::F32);
    engines_agree(
        |a| {
            let m = ops::mean(&a[0], Some(&[-1]), true)?;
            let c = ops::subtract(&a[0], &m)?;
            let v = ops::mean(ops::square(&c)?, Some(&[-1]), true)?;
            Ok(vec![ops::multiply(&c, ops::rsqrt(ops::add(&v, 1e-5)?)?)?, v])
        },
        std::slice::from_ref(&x),
        true,
        "layer norm",
    );
}

/// Strided, broadcast and donated inputs, several outputs, and outputs large enough to be
/// written with streaming stores.
#[test]
fn layouts_and_outputs_match_the_interpreter() {
    let mut rng = Rng::new(13);
    let x = common::array(&rng.vec(300 * 200, -3.0, 3.0), &[300, 200], Dtype::F32);
    let row = common::array(&rng.vec(200, -1.0, 1.0), &[200], Dtype::F32);
    let xt = ops::transpose(&x, None).unwrap();
    let gelu = |x: &Array| -> Result<Array> { ops::multiply(ops::multiply(x, 0.5)?, ops::add(ops::erf(ops::multiply(x, std::f32::consts::FRAC_1_SQRT_2)?)?, 1.0)?) };
    engines_agree(move |a| Ok(vec![gelu(&ops::add(&a[0], &a[1])?)?]), &[x.clone(), row.clone()], true, "broadcast row");
    engines_agree(move |a| Ok(vec![gelu(&a[0])?, ops::tanh(&a[0])?]), std::slice::from_ref(&xt), true, "transposed, two outputs");
    let big = common::array(&rng.vec(1 << 22, -3.0, 3.0), &[1 << 22], Dtype::F32);
    engines_agree(move |a| Ok(vec![gelu(&a[0])?]), std::slice::from_ref(&big), true, "streamed output");
    // Row kernels whose native passes stream their outputs themselves: rows aligned to every
    // vector width (4096 float32), and rows of an odd length (the passes start their whole
    // vectors where the stores are aligned); a bool output is stored plainly.
    for (rows, len) in [(1024, 4096), (1100, 4001)] {
        let x = common::array(&rng.vec(rows * len, -3.0, 3.0), &[rows, len], Dtype::F32);
        let what = format!("streamed row outputs {rows}x{len}");
        engines_agree(
            |a| {
                let e = ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[-1]), true)?)?)?;
                let total = ops::sum(&e, Some(&[-1]), true)?;
                Ok(vec![ops::divide(&e, &total)?, ops::multiply(&e, 2.0)?, total, ops::greater(&e, 0.5)?])
            },
            std::slice::from_ref(&x),
            true,
            &what,
        );
    }
    // An intermediate the function creates itself is donated to the next kernel's output.
    engines_agree(
        move |a| {
            let s = ops::sort(ops::exp(&a[0])?, Some(-1))?;
            Ok(vec![ops::sigmoid(ops::add(&s, 1.0)?)?])
        },
        std::slice::from_ref(&x),
        true,
        "donated input",
    );
}

/// [`engines_agree`], checking too that the native runs took their column blocks in C (not the
/// interpreter, which a column kernel falls back to for some layouts).
fn columns_agree(f: impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static, args: &[Array], what: &str) {
    let before = columns_runs();
    engines_agree(f, args, true, what);
    assert!(columns_runs() > before, "{what}: the column blocks did not run in C");
}

/// Column kernels (reductions with kept axes after the reduced ones) run each pass over a block
/// of columns as one C call: eight reductions at once over axis 0 in every fold dtype, at widths
/// with a partial vector, of exactly one native block and of several; ties of signed zeros and
/// NaNs in max and min; softmax, and layer norm with weights broadcast along the reduced axis;
/// the middle axis of three with a per-column input; two reduced axes; sliced, offset and
/// flipped inputs, a 0-d input and one broadcast along the columns; integer and bool element
/// outputs. Native equals the interpreter bit for bit.
#[test]
fn column_kernels_match_the_interpreter() {
    let mut rng = Rng::new(17);
    let over0 = |a: &[Array]| -> Result<Vec<Array>> {
        let x = &a[0];
        let axes: &[i64] = &[0];
        Ok(vec![
            ops::sum(ops::square(x)?, Some(axes), false)?,
            ops::mean(ops::abs(x)?, Some(axes), true)?,
            ops::max(ops::negative(x)?, Some(axes), false)?,
            ops::min(x, Some(axes), false)?,
            ops::prod(ops::add(x, 1.0)?, Some(axes), false)?,
            ops::all(ops::greater(x, -1.0)?, Some(axes), false)?,
            ops::any(ops::greater(x, 1.0)?, Some(axes), false)?,
            ops::sum(ops::greater(x, 0.0)?, Some(axes), false)?,
        ])
    };
    for (len, width) in [(5, 2), (7, 15), (300, 17), (9, 256), (37, 1100)] {
        for dtype in [Dtype::F32, Dtype::F64, Dtype::I8, Dtype::I32, Dtype::U8, Dtype::U16] {
            let x = common::array(&common::random_values(&mut rng, len * width, dtype, -2.0, 2.0), &[len, width], dtype);
            columns_agree(over0, std::slice::from_ref(&x), &format!("eight reductions over axis 0, {dtype} {len}x{width}"));
        }
    }
    let specials = [0x0000_0000u32, 0x8000_0000, 0xbf80_0000, 0x7fc2_0000, 0xffc8_0000, 0x7fe0_0000].map(f32::from_bits);
    for nans in [false, true] {
        let values: Vec<f32> = (0..64 * 300).map(|_| specials[rng.below(if nans { 6 } else { 3 })]).collect();
        let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        for x in [Array::from_slice(&values, &[64, 300]).unwrap(), Array::from_slice(&wide, &[64, 300]).unwrap()] {
            let what = format!("max and min over axis 0 of signed zeros{}, {}", if nans { " and NaNs" } else { "" }, x.dtype());
            columns_agree(
                |a| Ok(vec![ops::max(ops::multiply(&a[0], 2.0)?, Some(&[0]), false)?, ops::min(&a[0], Some(&[0]), false)?]),
                std::slice::from_ref(&x),
                &what,
            );
        }
    }
    let x = common::array(&rng.vec(300 * 1100, -6.0, 6.0), &[300, 1100], Dtype::F32);
    let (w, b) = (common::array(&rng.vec(1100, 0.5, 1.5), &[1100], Dtype::F32), common::array(&rng.vec(1100, -1.0, 1.0), &[1100], Dtype::F32));
    columns_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[0]), false)?]), std::slice::from_ref(&x), "softmax over axis 0");
    columns_agree(
        |a| {
            let m = ops::mean(&a[0], Some(&[0]), true)?;
            let c = ops::subtract(&a[0], &m)?;
            let v = ops::mean(ops::square(&c)?, Some(&[0]), true)?;
            Ok(vec![ops::add(ops::multiply(ops::multiply(&c, ops::rsqrt(ops::add(&v, 1e-5)?)?)?, &a[1])?, &a[2])?, v])
        },
        &[x.clone(), w, b],
        "layer norm over axis 0 with weights",
    );
    let y = common::array(&rng.vec(3 * 37 * 300, -3.0, 3.0), &[3, 37, 300], Dtype::F32);
    let scale = common::array(&rng.vec(3 * 300, 0.5, 1.5), &[3, 1, 300], Dtype::F32);
    columns_agree(
        |a| {
            let e = ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[1]), true)?)?)?;
            Ok(vec![ops::multiply(ops::divide(&e, ops::sum(&e, Some(&[1]), true)?)?, ops::add(&a[1], 1.0)?)?])
        },
        &[y.clone(), scale],
        "softmax over the middle axis with a per-column input",
    );
    columns_agree(
        |a| Ok(vec![ops::logsumexp(&a[0], Some(&[0, 1]), false)?, ops::var(&a[0], Some(&[0, 1]), true, 1)?]),
        std::slice::from_ref(&y),
        "two reduced axes",
    );
    // Views read in place: rows of a slice (a position step other than the width), a slice
    // starting past its buffer's first element, the rows walked backwards.
    let big = common::array(&rng.vec(310 * 1110, -3.0, 3.0), &[310, 1110], Dtype::F32);
    let sliced = ops::slice(&big, &[SliceSpec::range(5, 305), SliceSpec::range(7, 1107)]).unwrap();
    let flipped = ops::slice(&x, &[SliceSpec { start: None, stop: None, step: -1 }, SliceSpec::ALL]).unwrap();
    let norm0 = |a: &[Array]| -> Result<Vec<Array>> {
        let c = ops::subtract(&a[0], ops::mean(&a[0], Some(&[0]), true)?)?;
        Ok(vec![ops::divide(&c, ops::sqrt(ops::add(ops::mean(ops::square(&c)?, Some(&[0]), true)?, 1e-5)?)?)?])
    };
    for (view, what) in [(sliced, "a sliced input"), (flipped, "an input walked backwards")] {
        columns_agree(norm0, std::slice::from_ref(&view), &format!("normalization over axis 0 of {what}"));
    }
    // Inputs the same in every column: a 0-d one and one per position; integer and bool outputs.
    let temperature = Array::from_slice(&[0.7f32], &[]).unwrap();
    let per_position = common::array(&rng.vec(300, -1.0, 1.0), &[300, 1], Dtype::F32);
    columns_agree(
        |a| {
            let z = ops::add(ops::divide(&a[0], &a[1])?, &a[2])?;
            let s = ops::softmax(&z, Some(&[0]), false)?;
            Ok(vec![s.clone(), ops::astype(ops::multiply(&s, 1000.0)?, Dtype::I32)?, ops::greater(&s, 0.01)?])
        },
        &[x.clone(), temperature, per_position],
        "softmax over axis 0 with inputs broadcast along the columns, integer and bool outputs",
    );
}

/// A column kernel says how its last native run went: in C where its inputs are read in place
/// along the columns, interpreted blocks for a transposed input (with the same results).
#[test]
fn column_kernels_report_their_path() {
    let mut rng = Rng::new(19);
    let x = common::array(&rng.vec(60 * 70, -3.0, 3.0), &[60, 70], Dtype::F32);
    let softmax0 = |a: &[Array]| Ok(vec![ops::softmax(&a[0], Some(&[0]), false)?]);
    let path = |x: &Array| {
        let c = compile(softmax0);
        let want = with_engine(Engine::Interpreter, || c.call(std::slice::from_ref(x))).unwrap();
        let got = with_engine(Engine::NativeNow, || c.call(std::slice::from_ref(x))).unwrap();
        same_bits(&got[0], &want[0]).unwrap_or_else(|e| panic!("{e}"));
        c.inspect(std::slice::from_ref(x), &[]).unwrap().groups[0].engine.clone()
    };
    let engine = path(&x);
    assert!(engine.ends_with("; its last native run: blocks of columns in C"), "in place: {engine}");
    let engine = path(&ops::transpose(&x, None).unwrap());
    assert!(
        engine.ends_with(
            "; its last native run: blocks of columns interpreted (an input not read in place with unit steps along the columns and one step per position)"
        ),
        "transposed: {engine}"
    );
}

/// [`engines_agree`], checking too whether the native runs took whole rows in C (`whole`: a rows
/// function, row steps included) or the per-row loop.
fn rows_agree(f: impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static, args: &[Array], whole: bool, what: &str) {
    let before = rows_runs();
    engines_agree(f, args, true, what);
    let ran = rows_runs() > before;
    assert_eq!(ran, whole, "{what}: whole rows in C {}", if ran { "ran, where the per-row loop should" } else { "did not run" });
}

/// Row kernels run runs of rows in C, row steps included: weights broadcast along the rows, a
/// value per row, views that start past their buffer's first element or walk their rows
/// backwards, float64 and integer reductions, rows of a tile and of several, outputs large
/// enough to stream, on rows of any length. A layout that rows functions don't take (a
/// transposed input) goes through the per-row loop. Either way native equals the interpreter bit
/// for bit.
#[test]
fn whole_rows_in_c_match_the_interpreter() {
    let mut rng = Rng::new(17);
    let x = common::array(&rng.vec(300 * 96, -3.0, 3.0), &[300, 96], Dtype::F32);
    let w = common::array(&rng.vec(96, -1.0, 1.0), &[96], Dtype::F32);
    let b = common::array(&rng.vec(96, -1.0, 1.0), &[96], Dtype::F32);
    let per_row = common::array(&rng.vec(300, 0.5, 2.0), &[300, 1], Dtype::F32);
    let layer_norm = |a: &[Array]| -> Result<Vec<Array>> {
        let m = ops::mean(&a[0], Some(&[-1]), true)?;
        let c = ops::subtract(&a[0], &m)?;
        let v = ops::mean(ops::square(&c)?, Some(&[-1]), true)?;
        let normed = ops::multiply(&c, ops::rsqrt(ops::add(ops::multiply(&v, &a[3])?, 1e-5)?)?)?;
        Ok(vec![ops::add(ops::multiply(normed, &a[1])?, &a[2])?, v])
    };
    let args = [x.clone(), w.clone(), b.clone(), per_row];
    rows_agree(layer_norm, &args, true, "layer norm with weights and a value per row");
    // Views: columns 1.. of wider rows, rows 2.. of more rows, rows backwards (a negative step),
    // and a per-row value that starts at an offset; each read in place from its first element.
    let wide = common::array(&rng.vec(302 * 97, -3.0, 3.0), &[302, 97], Dtype::F32);
    let tall_row = common::array(&rng.vec(303, 0.5, 2.0), &[303, 1], Dtype::F32);
    let range = |start: i64, stop: i64, step: i64| SliceSpec { start: Some(start), stop: Some(stop), step };
    let views = [
        ("columns 1..", ops::slice(&wide, &[range(0, 300, 1), range(1, 97, 1)]).unwrap()),
        ("rows 2..", ops::slice(&wide, &[range(2, 302, 1), range(0, 96, 1)]).unwrap()),
        ("rows backwards", ops::slice(&wide, &[SliceSpec { start: Some(299), stop: None, step: -1 }, range(0, 96, 1)]).unwrap()),
    ];
    let row_at_3 = ops::slice(&tall_row, &[range(3, 303, 1), SliceSpec::ALL]).unwrap();
    for (name, view) in views {
        let args = [view.clone(), w.clone(), b.clone(), row_at_3.clone()];
        rows_agree(layer_norm, &args, true, &format!("layer norm of {name}"));
        let ints = ops::astype(ops::multiply(&view, 1000.0).unwrap(), Dtype::I32).unwrap();
        rows_agree(|a| Ok(vec![ops::sum(ops::multiply(&a[0], 3)?, Some(&[-1]), false)?]), &[ints], true, &format!("int32 sum of {name}"));
    }
    let x64 = common::array(&rng.vec(300 * 100, -3.0, 3.0), &[300, 100], Dtype::F64);
    rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[x64], true, "float64 softmax");
    let ints = common::random_values(&mut rng, 200 * 77, Dtype::I32, -1e9, 1e9);
    let xi = common::array(&ints, &[200, 77], Dtype::I32);
    rows_agree(
        |a| Ok(vec![ops::sum(ops::multiply(&a[0], 3)?, Some(&[-1]), false)?, ops::max(&a[0], Some(&[-1]), true)?]),
        &[xi],
        true,
        "int32 sum (wrapping) and max",
    );
    // Rows of exactly a tile, of several tiles (the row cache then lives in the task), and of
    // more values than rows cache in general (softmax's exp still does).
    for (rows, len) in [(40, 1024), (12, 3000), (3, 20000)] {
        let x = common::array(&rng.vec(rows * len, -3.0, 3.0), &[rows, len], Dtype::F32);
        rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[x], true, &format!("softmax {rows}x{len}"));
    }
    let xt = ops::transpose(&x, None).unwrap();
    rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[xt], false, "transposed input");
    // Outputs of 16 MiB and more are streamed: rows of 512 bytes start aligned to every
    // streaming store, rows of 1000 bytes and of 4001 values mostly don't (their passes start
    // the whole vectors further in).
    for (rows, len) in [(32768, 128), (17000, 250), (1100, 4001)] {
        let x = common::array(&rng.vec(rows * len, -3.0, 3.0), &[rows, len], Dtype::F32);
        rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[x], true, &format!("streamed {rows}x{len}"));
    }
    // One pass storing float32, then float64 (aligned differently on most rows: it streams only
    // where the float32 one's start lands it aligned too) and bool (stored plainly); rows of 501
    // values, so the whole vectors start at every offset of a streaming store.
    let x = common::array(&rng.vec(9000 * 501, -3.0, 3.0), &[9000, 501], Dtype::F32);
    rows_agree(
        |a| {
            let e = ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[-1]), true)?)?)?;
            let e3 = ops::multiply(&e, 3.0)?;
            let p = ops::divide(&e, ops::sum(&e, Some(&[-1]), true)?)?;
            Ok(vec![e3.clone(), ops::astype(&e3, Dtype::F64)?, ops::greater(&e, 0.5)?, p])
        },
        &[x],
        true,
        "streamed float32, float64 and bool outputs of 9000x501",
    );
    // Rows shorter than the values before the first aligned vector (all of a row is head).
    let x = common::array(&rng.vec(1_500_000 * 3, -3.0, 3.0), &[1_500_000, 3], Dtype::F32);
    rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[x], true, "streamed 1500000x3");
    // Streamed rows of odd length through the per-row loop (a transposed input), and pieces of a
    // few long rows split across threads: each call's pass function starts its own vectors.
    let x = common::array(&rng.vec(4001 * 1100, -3.0, 3.0), &[4001, 1100], Dtype::F32);
    let xt = ops::transpose(&x, None).unwrap();
    rows_agree(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]), &[xt], false, "streamed transposed 1100x4001");
    let x = common::array(&rng.vec(4_500_001, -3.0, 3.0), &[1, 4_500_001], Dtype::F32);
    rows_agree(
        |a| {
            let y = ops::multiply(&a[0], 2.0)?;
            Ok(vec![ops::sum(&y, Some(&[-1]), false)?, y])
        },
        &[x],
        false,
        "streamed 1x4500001 split across threads",
    );
}

/// `inspect` says how each kernel runs: interpreted until built, then native with its C source
/// on disk (holding the pass functions) and, for row kernels, how the last run went over the
/// rows; kernels C can't express name the instruction why.
#[test]
fn inspect_reports_how_each_kernel_runs() {
    let x = Array::from_slice(&[0.5f32, -1.0, 2.0, 3.5], &[2, 2]).unwrap();
    let c = compile(|a: &[Array]| Ok(vec![ops::exp(ops::subtract(&a[0], ops::max(&a[0], Some(&[-1]), true)?)?)?]));
    let report = c.inspect(std::slice::from_ref(&x), &[]).unwrap();
    let engine = &report.groups[0].engine;
    assert!(
        engine.starts_with("interpreted until its native code is built") || engine.starts_with("native code"),
        "before any run: {engine}"
    );
    with_engine(Engine::NativeNow, || c.call(std::slice::from_ref(&x))).unwrap();
    let report = c.inspect(std::slice::from_ref(&x), &[]).unwrap();
    let engine = &report.groups[0].engine;
    let source = engine
        .strip_prefix("native code (C source: ")
        .and_then(|s| s.split_once(") built for native ("))
        .map(|(path, _)| path)
        .unwrap_or_else(|| panic!("after a native run: {engine} (native kernels need a C compiler: cc, or set KILN_CC)"));
    let text = std::fs::read_to_string(source).unwrap_or_else(|e| panic!("reading {source}: {e}"));
    assert!(text.contains("void kiln_p0_0(") && text.contains("k_exp_f32("), "C source at {source}:\n{text}");
    assert!(report.to_string().contains(&format!("runs as: {engine}")), "{report}");
    // A row kernel says how its last native run went over the rows: in place, whole rows in C;
    // a transposed input, row by row.
    assert!(engine.ends_with("; its last native run: whole runs of rows in C"), "contiguous rows: {engine}");
    let wide = Array::from_slice(&(0..64 * 48).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>(), &[64, 48]).unwrap();
    let xt = ops::transpose(&wide, None).unwrap();
    with_engine(Engine::NativeNow, || c.call(std::slice::from_ref(&xt))).unwrap();
    let engine = &c.inspect(std::slice::from_ref(&xt), &[]).unwrap().groups[0].engine;
    assert!(
        engine.ends_with("; its last native run: row by row from Rust (an input not read in place one row apart, or a donated output)"),
        "transposed rows: {engine}"
    );

    let h = ops::astype(&x, Dtype::F16).unwrap();
    let c = compile(|a: &[Array]| Ok(vec![ops::multiply(ops::exp(&a[0])?, 2.0)?]));
    let engine = &c.inspect(&[h], &[]).unwrap().groups[0].engine;
    assert!(engine.starts_with("interpreted: `%0: float16 elem @0 = load in0` has no exact C form"), "float16: {engine}");
}

/// A level this CPU lacks, or a name no compiler knows, keeps kernels interpreted with the reason
/// in `inspect`, and the results stay right.
#[test]
fn an_unusable_native_arch_stays_interpreted_and_says_why() {
    let x = Array::from_slice(&[0.5f32, -1.0, 2.0, 3.5], &[4]).unwrap();
    let f = |a: &[Array]| Ok(vec![ops::exp(ops::negative(&a[0])?)?]);
    let want = with_engine(Engine::Interpreter, || compile(f).call(std::slice::from_ref(&x))).unwrap();
    let mut cases = vec![("pentium-9000", "is not a level native code can be built for here")];
    if cfg!(target_arch = "x86_64") && !levels().contains(&"x86-64-v4") {
        cases.push(("x86-64-v4", "needs CPU features this machine lacks (avx512f"));
    }
    for (arch, why) in cases {
        with_arch(arch, || {
            let c = compile(f);
            let before = native_runs();
            let got = with_engine(Engine::NativeNow, || c.call(std::slice::from_ref(&x))).unwrap();
            assert_eq!(native_runs(), before, "{arch}: native code ran");
            same_bits(&got[0], &want[0]).unwrap_or_else(|e| panic!("{arch}: {e}"));
            let engine = &c.inspect(std::slice::from_ref(&x), &[]).unwrap().groups[0].engine;
            assert!(engine.starts_with(&format!("interpreted: KILN_NATIVE_ARCH={arch} ")) && engine.contains(why), "{arch}: {engine}");
        });
    }
}

/// With the default engine, a kernel's native code runs only once it was timed against the
/// interpreter: the first runs after the build alternate between the engines, then `inspect`
/// gives the verdict (native with its measured speed-up, or interpreted because it was slower).
#[test]
fn native_code_replaces_the_interpreter_only_after_timing_both() {
    let mut rng = Rng::new(5);
    let x = common::array(&rng.vec(1 << 16, -3.0, 3.0), &[1 << 16], Dtype::F32);
    let c = compile(|a: &[Array]| Ok(vec![ops::erf(ops::multiply(ops::tanh(&a[0])?, 3.0)?)?]));
    let args = std::slice::from_ref(&x);
    let want = with_engine(Engine::Interpreter, || c.call(args)).unwrap();
    // Built on the spot, so the trial starts at the next default-engine run.
    with_engine(Engine::NativeNow, || c.call(args)).unwrap();
    let before = native_runs();
    for _ in 0..2 * kiln::backend::cpu::native::TRIAL_RUNS {
        same_bits(&c.call(args).unwrap()[0], &want[0]).unwrap();
    }
    let trial_runs = native_runs() - before;
    assert!(trial_runs >= 1 && trial_runs < u64::from(2 * kiln::backend::cpu::native::TRIAL_RUNS), "{trial_runs} native runs in the trial");
    let engine = c.inspect(args, &[]).unwrap().groups[0].engine.clone();
    let before = native_runs();
    same_bits(&c.call(args).unwrap()[0], &want[0]).unwrap();
    let native_after = native_runs() > before;
    if native_after {
        assert!(engine.contains("built for native (") && engine.contains("x the interpreter's speed"), "{engine}");
    } else {
        assert!(engine.starts_with("interpreted: its native code (built for native (") && engine.contains("was measured slower"), "{engine}");
    }
}

/// The generated C builds for aarch64 too (NEON vectors of four float32 lanes): the sources of a
/// few kernels are cross-compiled when Debian's `gcc-aarch64-linux-gnu` is installed.
#[test]
fn kernels_build_for_aarch64_with_a_cross_compiler() {
    let cross = std::env::var("KILN_AARCH64_CC").unwrap_or_else(|_| "aarch64-linux-gnu-gcc".into());
    if std::process::Command::new(&cross).arg("--version").output().is_err() {
        println!("skipped: no {cross} (apt-get install gcc-aarch64-linux-gnu, or set KILN_AARCH64_CC)");
        return;
    }
    let mut rng = Rng::new(17);
    let x = common::array(&rng.vec(64 * 48, -3.0, 3.0), &[64, 48], Dtype::F32);
    let kernels: Vec<Body> = vec![
        Box::new(|a| Ok(vec![ops::multiply(&a[0], ops::add(ops::erf(ops::multiply(&a[0], 0.7)?)?, 1.0)?)?])),
        Box::new(|a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?])),
        Box::new(|a| Ok(vec![ops::astype(ops::greater(ops::log1p(ops::abs(&a[0])?)?, 0.5)?, Dtype::I32)?])),
        Box::new(|a| Ok(vec![ops::sum(ops::astype(&a[0], Dtype::I8)?, Some(&[-1]), false)?])),
    ];
    let dir = std::env::temp_dir().join(format!("kiln-aarch64-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (n, f) in kernels.into_iter().enumerate() {
        let c = compile(f);
        with_engine(Engine::NativeNow, || c.call(std::slice::from_ref(&x))).unwrap();
        let report = c.inspect(std::slice::from_ref(&x), &[]).unwrap();
        for g in &report.groups {
            let Some((source, _)) = g.engine.strip_prefix("native code (C source: ").and_then(|s| s.split_once(") built for")) else {
                panic!("kernel {n}: {}", g.engine)
            };
            let object = dir.join(format!("k{n}.o"));
            let out = std::process::Command::new(&cross)
                .args(kiln::backend::cpu::native::compiler_flags())
                .args(["-march=armv8-a", "-c", "-o"])
                .arg(&object)
                .arg(source)
                .output()
                .unwrap();
            assert!(out.status.success(), "kernel {n}: {cross} failed on {source}:\n{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `KILN_NATIVE_ARCH` below the CPU's level caps the eager kernels' vector copies as well as
/// native code, so a run at `x86-64-v3` or `-v2` (scripts/test runs some suites so) exercises the
/// AVX2 and baseline copies a CPU of that level runs. Without the setting there is nothing to cap.
#[test]
fn a_lower_native_arch_caps_the_eager_kernels_copies() {
    use kiln::backend::cpu::simd::{has_avx2_fma, has_avx512};
    match std::env::var("KILN_NATIVE_ARCH").as_deref().map(str::trim) {
        Ok("x86-64-v2") => assert!(!has_avx2_fma() && !has_avx512(), "x86-64-v2 still runs the AVX2 or AVX-512 copies"),
        Ok("x86-64-v3") => assert!(!has_avx512(), "x86-64-v3 still runs the AVX-512 copies"),
        _ => println!("KILN_NATIVE_ARCH names no lower x86-64 level: nothing is capped"),
    }
}
