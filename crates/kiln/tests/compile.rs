//! `compile` end to end: every example of the compile guides (seeds 003 and 004) in the Rust API,
//! the cache (signatures, constants, LRU eviction, failed traces, freeing), the errors (reading
//! values while traced, uncaptured inputs, shapeless shape errors), disabling compile (globally,
//! per function, by environment variable), threads, composition with the other transforms,
//! introspection and user kernels inside compiled functions.
//!
//! Every value is compared with an independent reference: the same function run eagerly, and
//! where practical a float64 formula computed here.
//!
//! Several things compile reads are process-wide (the random state, the memory counters, whether a
//! transform is tracing, `disable_compile`), so every in-process test holds [`serial`], and the
//! tests that toggle process-wide switches (disable_compile, environment variables, logging) run
//! again in a child process of their own.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` is an argument list; the clone is a refcount

mod common;

use common::{assert_close, Rng};
use kiln::backend::cpu::native;
use kiln::ops;
use kiln::{
    compile, compile_fn, compile_with, compile_with_constants, custom_kernel, disable_compile, enable_compile, grad,
    is_compile_enabled, jvp, random, value_and_grad, vjp, vmap, Array, ArrayList, CompileMode, CompileOptions, Compiled,
    Constant, Dtype, ErrorKind, KernelArgs, Result,
};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

type Outputs = Result<Vec<Array>>;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the in-process tests: see the module comment.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A float32 array of `shape` holding `values` (rounded to float32).
fn f32a(values: &[f64], shape: &[usize]) -> Array {
    common::array(values, shape, Dtype::F32)
}

/// A float64 array of `shape` holding `values`.
fn f64a(values: &[f64], shape: &[usize]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

/// `values` rounded to float32, as float64 (the exact inputs a float32 array holds).
fn r32(values: &[f64]) -> Vec<f64> {
    values.iter().map(|&v| v as f32 as f64).collect()
}

/// The elements of `a` as float64.
fn vals(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// The only array of a result.
fn only(r: Outputs) -> Array {
    let mut v = r.unwrap();
    assert_eq!(v.len(), 1, "expected one array");
    v.remove(0)
}

/// Asserts `got` has `shape` and holds `want` within float32 tolerance.
fn assert_f32(got: &Array, shape: &[usize], want: &[f64], what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    assert_close(&vals(got), want, 2e-5, 2e-6, what);
}

/// Asserts `got` has `shape` and holds `want` within float64 tolerance.
fn assert_f64(got: &Array, shape: &[usize], want: &[f64], what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    assert_close(&vals(got), want, 1e-12, 1e-14, what);
}

/// Asserts two arrays agree in shape, dtype and value (within `rtol`).
fn assert_same(got: &Array, want: &Array, rtol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_close(&vals(got), &vals(want), rtol, rtol, what);
}

/// Asserts every output of `got` agrees with `want`.
fn assert_all_same(got: &[Array], want: &[Array], rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_same(g, w, rtol, &format!("{what}: output {i}"));
    }
}

fn gelu_ref(x: f64) -> f64 {
    x * (1.0 + common::erf_reference(x / 2f64.sqrt())) / 2.0
}

/// Set in the child processes some tests start.
const CHILD: &str = "KILN_COMPILE_TEST_CHILD";

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs test `name` again in a process of its own with `envs` set (and the compile switches
/// cleared otherwise); returns its stdout and stderr. The child must pass.
fn run_in_child(name: &str, envs: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("KILN_DISABLE_COMPILE")
        .env_remove("KILN_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "the child process for {name} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child process did not run {name}:\n{text}");
    text
}

// ---------------------------------------------------------------------------------------------
// Seed examples: basics and recompilation
// ---------------------------------------------------------------------------------------------

/// `exp(-x) + y`, and any further arguments added (so the argument count can change).
fn exp_neg_plus(a: &[Array]) -> Outputs {
    let mut out = ops::add(ops::exp(ops::negative(&a[0])?)?, &a[1])?;
    for extra in &a[2..] {
        out = ops::add(&out, extra)?;
    }
    Ok(vec![out])
}

/// The float64 reference of [`exp_neg_plus`] on row-major values.
fn exp_neg_plus_ref(args: &[Vec<f64>]) -> Vec<f64> {
    (0..args[0].len()).map(|i| (-args[0][i]).exp() + args[1..].iter().map(|a| a[i]).sum::<f64>()).collect()
}

#[test]
fn basics_exp_neg_x_plus_y() {
    let _g = serial();
    let x = f32a(&[1.0], &[]);
    let y = f32a(&[2.0], &[]);
    let eager = only(exp_neg_plus(&[x.clone(), y.clone()]));
    let compiled_fun = compile(exp_neg_plus);
    let compiled = only(compiled_fun.call(&[x.clone(), y.clone()]));
    // array(2.36788, dtype=float32) both ways.
    assert_f32(&eager, &[], &[(-1f64).exp() + 2.0], "eager");
    assert_f32(&compiled, &[], &[(-1f64).exp() + 2.0], "compiled");
    assert_eq!(compiled.dtype(), Dtype::F32);
    assert_same(&compiled, &eager, 1e-6, "compiled vs eager");
    assert!((compiled.item::<f32>().unwrap() - 2.36788).abs() < 1e-5);

    // The same function on larger arrays of random values.
    let mut rng = Rng::new(1);
    let (xv, yv) = (r32(&rng.vec(60, -3.0, 3.0)), r32(&rng.vec(60, -3.0, 3.0)));
    let (x, y) = (f32a(&xv, &[6, 10]), f32a(&yv, &[6, 10]));
    let out = only(compiled_fun.call(&[x.clone(), y.clone()]));
    assert_f32(&out, &[6, 10], &exp_neg_plus_ref(&[xv, yv]), "compiled on (6, 10)");
    assert_same(&out, &only(exp_neg_plus(&[x, y])), 1e-6, "compiled vs eager on (6, 10)");
}

/// A function only [`repeat_calls_do_not_recompile`] hands to `compile_fn` (its address keys
/// compile_fn's shared handles).
fn exp_neg_plus_for_compile_fn(a: &[Array]) -> Outputs {
    Ok(vec![ops::add(ops::exp(ops::negative(&a[0])?)?, &a[1])?])
}

#[test]
fn repeat_calls_do_not_recompile() {
    let _g = serial();
    let x = f32a(&[1.0], &[]);
    let y = f32a(&[2.0], &[]);
    let want = [(-1f64).exp() + 2.0];

    let compiled_fun = compile(exp_neg_plus);
    assert_eq!(compiled_fun.trace_count(), 0);
    // Compiled here.
    assert_f32(&only(compiled_fun.call(&[x.clone(), y.clone()])), &[], &want, "first call");
    assert_eq!(compiled_fun.trace_count(), 1);
    // Not compiled again, also with new values of the same signature.
    assert_f32(&only(compiled_fun.call(&[x.clone(), y.clone()])), &[], &want, "second call");
    let other = only(compiled_fun.call(&[f32a(&[0.5], &[]), f32a(&[-1.0], &[])]));
    assert_f32(&other, &[], &[(-0.5f64).exp() - 1.0], "new values");
    assert_eq!(compiled_fun.trace_count(), 1);
    assert_eq!(compiled_fun.cache_len(), 1);
    // A clone shares the cache.
    let clone = compiled_fun.clone();
    clone.call(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(clone.trace_count(), 1);

    // `mx.compile(fun)(x, y)` reuses the cached graph: compile_fn of the same fn shares the cache
    // while a handle is alive.
    let first = compile_fn(exp_neg_plus_for_compile_fn);
    assert_f32(&only(first.call(&[x.clone(), y.clone()])), &[], &want, "compile_fn first");
    assert_eq!(first.trace_count(), 1);
    let again = only(compile_fn(exp_neg_plus_for_compile_fn).call(&[x.clone(), y.clone()]));
    assert_f32(&again, &[], &want, "compile_fn again");
    assert_eq!(first.trace_count(), 1, "compile_fn(fun)(x, y) traced again");
    assert_eq!(compile_fn(exp_neg_plus_for_compile_fn).trace_count(), 1);
    assert_eq!(first.cache_len(), 1);
}

#[test]
fn recompiles_on_ndim_shape_dtype_and_argument_count() {
    let _g = serial();
    let mut rng = Rng::new(2);
    let c = compile(exp_neg_plus);
    // (argument shapes, dtype, expected trace count after the call)
    let steps: &[(&[&[usize]], Dtype, usize, &str)] = &[
        (&[&[], &[]], Dtype::F32, 1, "first call"),
        (&[&[], &[]], Dtype::F32, 1, "same signature, new values"),
        (&[&[3], &[3]], Dtype::F32, 2, "ndim change"),
        (&[&[4], &[4]], Dtype::F32, 3, "shape change"),
        (&[&[4], &[4]], Dtype::F64, 4, "dtype change"),
        (&[&[4], &[4], &[4]], Dtype::F32, 5, "argument count change"),
        (&[&[4], &[4]], Dtype::F32, 5, "an earlier signature again"),
        (&[&[3], &[3]], Dtype::F32, 5, "an earlier signature again"),
        (&[&[], &[]], Dtype::F32, 5, "the first signature again"),
        (&[&[2, 2], &[2, 2]], Dtype::F32, 6, "ndim change again"),
    ];
    for (shapes, dtype, traces, what) in steps {
        let values: Vec<Vec<f64>> = shapes
            .iter()
            .map(|s| {
                let v = rng.vec(s.iter().product(), -2.0, 2.0);
                if *dtype == Dtype::F32 { r32(&v) } else { v }
            })
            .collect();
        let args: Vec<Array> = values.iter().zip(shapes.iter()).map(|(v, s)| common::array(v, s, *dtype)).collect();
        let out = only(c.call(&args));
        assert_eq!(out.dtype(), *dtype, "{what}");
        assert_close(&vals(&out), &exp_neg_plus_ref(&values), 2e-6, 1e-6, what);
        assert_eq!(out.shape(), shapes[0], "{what}");
        assert_eq!(c.trace_count(), *traces, "{what}: trace count");
    }
    assert_eq!(c.cache_len(), 6);
}

// ---------------------------------------------------------------------------------------------
// GELU
// ---------------------------------------------------------------------------------------------

fn gelu(a: &[Array]) -> Outputs {
    let x = &a[0];
    let inner = ops::erf(ops::divide(x, 2f64.sqrt())?)?;
    Ok(vec![ops::divide(ops::multiply(x, ops::add(inner, 1.0)?)?, 2.0)?])
}

#[test]
fn gelu_matches_formula_and_fuses_into_one_kernel() {
    let _g = serial();
    let mut rng = Rng::new(3);
    let xv = r32(&rng.vec(4 * 50, -4.0, 4.0));
    let x = f32a(&xv, &[4, 50]);
    let c = compile(gelu);
    let out = only(c.call(&[x.clone()]));
    let want: Vec<f64> = xv.iter().map(|&v| gelu_ref(v)).collect();
    assert_f32(&out, &[4, 50], &want, "compiled gelu vs float64");
    assert_same(&out, &only(gelu(&[x.clone()])), 1e-6, "compiled gelu vs eager");
    // Many calls: same plan, still right.
    for k in 0..5 {
        let v = r32(&rng.vec(200, -4.0, 4.0));
        let got = only(c.call(&[f32a(&v, &[4, 50])]));
        assert_f32(&got, &[4, 50], &v.iter().map(|&t| gelu_ref(t)).collect::<Vec<_>>(), &format!("call {k}"));
    }
    assert_eq!(c.trace_count(), 1);

    // divide, erf, add, multiply, divide: five eager kernels, one fused.
    let report = c.inspect(&[x.clone()], &[]).unwrap();
    println!("{report}");
    assert_eq!(report.eager_kernels, 5, "{report}");
    assert_eq!(report.compiled_kernels, 1, "{report}");
    assert_eq!(report.groups.len(), 1, "{report}");
    assert!(report.groups[0].ir.contains("erf"), "{}", report.groups[0].ir);
    assert_eq!(report.groups[0].members.len(), 5, "{report}");
    assert!(report.boundaries.is_empty(), "{report}");
    assert!(report.dot.starts_with("digraph"), "{}", report.dot);
    assert!(report.dot.contains("cluster_0"), "{}", report.dot);
    // inspect traced nothing new.
    assert_eq!(c.trace_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Debugging: reading values while traced, disable_compile, CompileMode::Disabled, the env var
// ---------------------------------------------------------------------------------------------

/// `-x` printed and read inside the function, then `exp(-x)` and the value read.
fn printing_fun(printed: Arc<Mutex<Vec<String>>>) -> impl Fn(&[Array]) -> Outputs + Send + Sync + 'static {
    move |a: &[Array]| {
        let z = ops::negative(&a[0])?;
        printed.lock().unwrap().push(format!("{z}"));
        let v = z.item::<f32>()?;
        Ok(vec![ops::exp(&z)?, Array::scalar(v)])
    }
}

#[test]
fn reading_values_while_traced_fails_and_points_at_disable_compile() {
    let _g = serial();
    // Printing inside a compiled function shows that the value is unavailable, with the hint.
    let printed = Arc::new(Mutex::new(Vec::new()));
    let p = printed.clone();
    let c = compile(move |a: &[Array]| {
        let z = ops::negative(&a[0])?;
        p.lock().unwrap().push(format!("{z}"));
        Ok(vec![ops::exp(&z)?])
    });
    let out = only(c.call(&[f32a(&[5.0], &[])]));
    assert_f32(&out, &[], &[(-5f64).exp()], "the function still works");
    let text = printed.lock().unwrap().join("\n");
    assert!(text.contains("disable_compile"), "printing a traced array: {text}");

    // item, to_vec and eval are errors that name disable_compile; the failed trace leaves nothing.
    let c = compile_with_constants(
        |a: &[Array], k: &[Constant]| {
            let z = ops::negative(&a[0])?;
            match &k[0] {
                Constant::Str(s) if s == "item" => {
                    z.item::<f32>()?;
                }
                Constant::Str(s) if s == "to_vec" => {
                    z.to_vec::<f32>()?;
                }
                Constant::Str(s) if s == "eval" => {
                    z.eval()?;
                }
                _ => kiln::eval(&[&z])?,
            }
            Ok(vec![ops::exp(&z)?])
        },
        CompileOptions::new(),
    );
    for how in ["item", "to_vec", "eval", "kiln::eval"] {
        let e = c.call_with(&[f32a(&[5.0], &[])], &[Constant::from(how)]).expect_err(how);
        assert_eq!(e.kind, ErrorKind::NoData, "{how}: {e}");
        assert!(e.message.contains("disable_compile"), "{how}: {e}");
        assert_eq!(c.cache_len(), 0, "{how}: a failed trace left an entry");
        assert_eq!(c.trace_count(), 0, "{how}");
    }

    // The seed's function with print and item fails compiled...
    let printed = Arc::new(Mutex::new(Vec::new()));
    let c = compile(printing_fun(printed.clone()));
    let e = c.call(&[f32a(&[5.0], &[])]).expect_err("item inside a trace");
    assert!(e.message.contains("disable_compile"), "{e}");
}

#[test]
fn compile_mode_disabled_runs_the_function_itself() {
    let _g = serial();
    let printed = Arc::new(Mutex::new(Vec::new()));
    let c = compile_with(printing_fun(printed.clone()), CompileOptions::new().mode(CompileMode::Disabled));
    for v in [5.0, -2.0] {
        let out = c.call(&[f32a(&[v], &[])]).unwrap();
        assert_f32(&out[0], &[], &[(-v).exp()], "exp(-x)");
        assert_f32(&out[1], &[], &[-v], "the value read inside");
    }
    assert_eq!(c.trace_count(), 0);
    assert_eq!(c.cache_len(), 0);
    let text = printed.lock().unwrap().clone();
    assert_eq!(text.len(), 2, "the function ran on every call: {text:?}");
    assert!(text[0].contains("-5") && !text[0].contains("unavailable"), "{text:?}");
    assert!(text[1].contains('2') && !text[1].contains("unavailable"), "{text:?}");
    // The process-wide switch is untouched.
    assert!(is_compile_enabled());
}

#[test]
fn disable_compile_lets_functions_print_and_eval() {
    if !is_child() {
        // disable_compile is process-wide: run this test in a process of its own.
        run_in_child("disable_compile_lets_functions_print_and_eval", &[]);
        return;
    }
    assert!(is_compile_enabled());
    let printed = Arc::new(Mutex::new(Vec::new()));
    let c = compile(printing_fun(printed.clone()));
    disable_compile();
    assert!(!is_compile_enabled());
    let out = c.call(&[f32a(&[5.0], &[])]).unwrap();
    assert_f32(&out[0], &[], &[(-5f64).exp()], "exp(-x)");
    assert_f32(&out[1], &[], &[-5.0], "item inside");
    assert_eq!(c.trace_count(), 0, "a disabled compile traced");
    let text = printed.lock().unwrap().join("\n");
    assert!(text.contains("array(-5") && !text.contains("unavailable"), "printed: {text}");

    // Back on: the same function traces and its item fails again.
    enable_compile();
    assert!(is_compile_enabled());
    let e = c.call(&[f32a(&[5.0], &[])]).expect_err("compiled again");
    assert!(e.message.contains("disable_compile"), "{e}");
    let plain = compile(exp_neg_plus);
    plain.call(&[f32a(&[1.0], &[]), f32a(&[2.0], &[])]).unwrap();
    assert_eq!(plain.trace_count(), 1);
}

#[test]
fn env_var_disables_compile() {
    if !is_child() {
        let text = run_in_child("env_var_disables_compile", &[("KILN_DISABLE_COMPILE", "1"), ("KILN_EXPECT", "off")]);
        assert!(text.contains("compile is off"), "{text}");
        let text = run_in_child("env_var_disables_compile", &[("KILN_DISABLE_COMPILE", "0"), ("KILN_EXPECT", "on")]);
        assert!(text.contains("compile is on"), "{text}");
        let text = run_in_child("env_var_disables_compile", &[("KILN_EXPECT", "on")]);
        assert!(text.contains("compile is on"), "{text}");
        return;
    }
    let expect_on = std::env::var("KILN_EXPECT").unwrap() == "on";
    assert_eq!(is_compile_enabled(), expect_on);
    let c = compile(printing_fun(Arc::new(Mutex::new(Vec::new()))));
    let r = c.call(&[f32a(&[5.0], &[])]);
    if expect_on {
        let e = r.expect_err("item inside a trace");
        assert!(e.message.contains("disable_compile"), "{e}");
        println!("compile is on");
    } else {
        let out = r.unwrap();
        assert_f32(&out[1], &[], &[-5.0], "item inside");
        assert_eq!(c.trace_count(), 0);
        // enable_compile overrides the variable.
        enable_compile();
        assert!(is_compile_enabled());
        let g = compile(gelu);
        g.call(&[f32a(&[1.0], &[])]).unwrap();
        assert_eq!(g.trace_count(), 1);
        println!("compile is off");
    }
}

// ---------------------------------------------------------------------------------------------
// Pure functions and state
// ---------------------------------------------------------------------------------------------

#[test]
fn impure_state_holds_a_placeholder_unless_returned() {
    let _g = serial();
    let state = ArrayList::default();
    let s = state.clone();
    let fun = compile(move |a: &[Array]| {
        let z = ops::add(&a[0], &a[1])?;
        s.push(z.clone());
        Ok(vec![ops::exp(&z)?])
    });
    let out = only(fun.call(&[f32a(&[1.0], &[]), f32a(&[2.0], &[])]));
    assert_f32(&out, &[], &[3f64.exp()], "exp(z)");
    // "Crash!": the list holds a placeholder without data.
    assert_eq!(state.len(), 1);
    let e = state.get(0).unwrap().to_vec::<f32>().expect_err("reading a placeholder");
    assert_eq!(e.kind, ErrorKind::NoData, "{e}");
    assert!(e.message.contains("disable_compile"), "{e}");

    // Option one: return the state as an output.
    let state = ArrayList::default();
    let s = state.clone();
    let fun = compile(move |a: &[Array]| {
        let z = ops::add(&a[0], &a[1])?;
        s.push(z.clone());
        let mut out = vec![ops::exp(&z)?];
        out.extend(s.to_vec());
        Ok(out)
    });
    let out = fun.call(&[f32a(&[1.0], &[]), f32a(&[2.0], &[])]).unwrap();
    assert_eq!(out.len(), 2);
    assert_f32(&out[0], &[], &[3f64.exp()], "exp(z)");
    assert_f32(&out[1], &[], &[3.0], "the state returned"); // [array(3, dtype=float32)]
    let out = fun.call(&[f32a(&[4.0], &[]), f32a(&[2.0], &[])]).unwrap();
    assert_f32(&out[1], &[], &[6.0], "the state returned, second call");
    assert_eq!(fun.trace_count(), 1);
}

#[test]
fn implicit_outputs_write_state_back() {
    let _g = serial();
    // The first guide's form: outputs=state, only exp(z) returned.
    let state = ArrayList::default();
    let s = state.clone();
    let step = compile_with(
        move |a: &[Array]| {
            let z = ops::add(&a[0], &a[1])?;
            s.push(z);
            Ok(vec![ops::exp(ops::add(&a[0], &a[1])?)?])
        },
        CompileOptions::new().outputs(&state),
    );
    let out = only(step.call(&[f32a(&[1.0], &[]), f32a(&[2.0], &[])]));
    assert_f32(&out, &[], &[3f64.exp()], "exp(z)");
    assert_eq!(state.len(), 1);
    assert_f32(&state.get(0).unwrap(), &[], &[3.0], "state after the first call"); // [array(3)]
    // A replay writes the new value back in the traced structure.
    step.call(&[f32a(&[2.5], &[]), f32a(&[2.0], &[])]).unwrap();
    assert_eq!(step.trace_count(), 1);
    assert_eq!(state.len(), 1);
    assert_f32(&state.get(0).unwrap(), &[], &[4.5], "state after the second call");

    // The second guide's form: outputs=state and the state returned too.
    let state = ArrayList::default();
    let s = state.clone();
    let fun = compile_with(
        move |a: &[Array]| {
            let z = ops::add(&a[0], &a[1])?;
            s.push(z.clone());
            let mut out = vec![ops::exp(&z)?];
            out.extend(s.to_vec());
            Ok(out)
        },
        CompileOptions::new().outputs(&state),
    );
    let out = fun.call(&[f32a(&[1.0], &[]), f32a(&[2.0], &[])]).unwrap();
    assert_f32(&out[1], &[], &[3.0], "returned state");
    assert_f32(&state.get(0).unwrap(), &[], &[3.0], "written-back state");
    assert_eq!(state.get(0).unwrap().shape(), &[] as &[usize]);
}

#[test]
fn captured_arrays_are_constants_unless_declared_as_inputs() {
    let _g = serial();
    // Without inputs=: the captured array is a constant of the trace.
    let state = ArrayList::new(vec![f32a(&[1.0], &[])]);
    let s = state.clone();
    let fun = compile(move |a: &[Array]| Ok(vec![ops::add(&a[0], s.get(0).unwrap())?]));
    assert_f32(&only(fun.call(&[f32a(&[1.0], &[])])), &[], &[2.0], "first call"); // array(2)
    state.set(0, f32a(&[5.0], &[]));
    assert_f32(&only(fun.call(&[f32a(&[1.0], &[])])), &[], &[2.0], "stale constant"); // still array(2)
    assert_eq!(fun.trace_count(), 1);

    // With inputs=state the read is refreshed on every call, without tracing again.
    let state = ArrayList::new(vec![f32a(&[1.0], &[])]);
    let s = state.clone();
    let fun = compile_with(
        move |a: &[Array]| Ok(vec![ops::add(&a[0], s.get(0).unwrap())?]),
        CompileOptions::new().inputs(&state),
    );
    assert_f32(&only(fun.call(&[f32a(&[1.0], &[])])), &[], &[2.0], "first call"); // array(2)
    state.set(0, f32a(&[5.0], &[]));
    assert_f32(&only(fun.call(&[f32a(&[1.0], &[])])), &[], &[6.0], "refreshed input"); // array(6)
    assert_eq!(fun.trace_count(), 1);
    // The list holds real arrays again after the trace.
    assert_f32(&state.get(0).unwrap(), &[], &[5.0], "list restored");
    // A new shape of the implicit input is a new signature.
    state.set(0, f32a(&[1.0, 2.0], &[2]));
    assert_f32(&only(fun.call(&[f32a(&[1.0], &[])])), &[2], &[2.0, 3.0], "implicit input of a new shape");
    assert_eq!(fun.trace_count(), 2);
}

// ---------------------------------------------------------------------------------------------
// Training graph: linear model, binary cross entropy, SGD with momentum
// ---------------------------------------------------------------------------------------------

const LR: f64 = 0.1;
const MOMENTUM: f64 = 0.8;

/// Binary cross entropy with logits of a linear model: args [w (10, 1), b (1,), x (4, 10), y (4,)].
fn bce_loss(a: &[Array]) -> Outputs {
    let logits = ops::squeeze(ops::add(ops::matmul(&a[2], &a[0])?, &a[1])?, None)?;
    let per = ops::subtract(ops::logaddexp(0.0, &logits)?, ops::multiply(&a[3], &logits)?)?;
    Ok(vec![ops::mean(per, None, false)?])
}

/// One step of SGD with momentum on the parameters in `params` ([w, b]) and the velocities in
/// `velocity`: mlx's `v = momentum * v + g; p = p - lr * v`. Returns the loss before the update.
fn sgd_step(params: ArrayList, velocity: ArrayList) -> impl Fn(&[Array]) -> Outputs + Send + Sync + 'static {
    move |a: &[Array]| {
        let p = params.to_vec();
        let v = velocity.to_vec();
        let (loss, grads) = value_and_grad(bce_loss, &[0, 1])(&[p[0].clone(), p[1].clone(), a[0].clone(), a[1].clone()])?;
        let mut new_p = Vec::new();
        let mut new_v = Vec::new();
        for i in 0..2 {
            let vi = ops::add(ops::multiply(&v[i], MOMENTUM)?, &grads[i])?;
            new_p.push(ops::subtract(&p[i], ops::multiply(&vi, LR)?)?);
            new_v.push(vi);
        }
        params.replace(new_p);
        velocity.replace(new_v);
        Ok(vec![loss[0].clone()])
    }
}

#[test]
fn compiled_training_step_matches_uncompiled_and_float64() {
    let _g = serial();
    let mut rng = Rng::new(4);
    let xv = r32(&rng.vec(40, 0.0, 1.0)); // 4 examples with 10 features each
    let yv = [0.0, 1.0, 0.0, 1.0];
    let wv = r32(&rng.vec(10, -0.5, 0.5));
    let bv = r32(&[0.1]);
    let x = f32a(&xv, &[4, 10]);
    let y = f32a(&yv, &[4]);
    let init = || {
        (
            ArrayList::new(vec![f32a(&wv, &[10, 1]), f32a(&bv, &[1])]),
            ArrayList::new(vec![ops::zeros(&[10, 1], Dtype::F32).unwrap(), ops::zeros(&[1], Dtype::F32).unwrap()]),
        )
    };

    // Compiled: state captured as inputs and outputs.
    let (params, velocity) = init();
    let step = compile_with(
        sgd_step(params.clone(), velocity.clone()),
        CompileOptions::new().inputs(&params).inputs(&velocity).outputs(&params).outputs(&velocity),
    );
    let mut compiled_losses = Vec::new();
    for _ in 0..10 {
        let loss = only(step.call(&[x.clone(), y.clone()]));
        let state: Vec<Array> = params.to_vec().into_iter().chain(velocity.to_vec()).collect();
        kiln::eval(&state.iter().collect::<Vec<_>>()).unwrap();
        compiled_losses.push(loss.item::<f32>().unwrap() as f64);
    }
    assert_eq!(step.trace_count(), 1, "the training step traced more than once");

    // Uncompiled: the same step called directly.
    let (params2, velocity2) = init();
    let plain = sgd_step(params2.clone(), velocity2.clone());
    let mut plain_losses = Vec::new();
    for _ in 0..10 {
        plain_losses.push(only(plain(&[x.clone(), y.clone()])).item::<f32>().unwrap() as f64);
    }

    // Float64 by hand: dL/dlogit_i = (sigmoid(l_i) - y_i) / 4, dW = x^T d, db = sum d.
    let (mut w, mut b) = (wv.clone(), bv[0]);
    let (mut vw, mut vb) = (vec![0.0; 10], 0.0);
    let mut ref_losses = Vec::new();
    for _ in 0..10 {
        let logits: Vec<f64> = (0..4).map(|i| (0..10).map(|j| xv[i * 10 + j] * w[j]).sum::<f64>() + b).collect();
        let loss = (0..4).map(|i| (1.0 + logits[i].exp()).ln() - yv[i] * logits[i]).sum::<f64>() / 4.0;
        ref_losses.push(loss);
        let d: Vec<f64> = (0..4).map(|i| (1.0 / (1.0 + (-logits[i]).exp()) - yv[i]) / 4.0).collect();
        for j in 0..10 {
            let gw: f64 = (0..4).map(|i| xv[i * 10 + j] * d[i]).sum();
            vw[j] = MOMENTUM * vw[j] + gw;
            w[j] -= LR * vw[j];
        }
        vb = MOMENTUM * vb + d.iter().sum::<f64>();
        b -= LR * vb;
    }
    println!("compiled {compiled_losses:?}\nplain    {plain_losses:?}\nfloat64  {ref_losses:?}");
    assert_close(&compiled_losses, &plain_losses, 1e-5, 1e-6, "compiled vs uncompiled losses");
    assert_close(&compiled_losses, &ref_losses, 1e-4, 1e-5, "compiled vs float64 losses");
    assert!(compiled_losses[9] < compiled_losses[0], "the loss did not decrease: {compiled_losses:?}");
    assert_close(&vals(&params.get(0).unwrap()), &w, 1e-4, 1e-5, "trained weights vs float64");
    assert_close(&vals(&params.get(1).unwrap()), &[b], 1e-4, 1e-5, "trained bias vs float64");
    assert_close(&vals(&velocity.get(0).unwrap()), &vw, 1e-4, 1e-5, "velocity vs float64");
    assert_all_same(&params.to_vec(), &params2.to_vec(), 1e-5, "compiled vs uncompiled parameters");
}

// ---------------------------------------------------------------------------------------------
// Random state
// ---------------------------------------------------------------------------------------------

fn plus_noise(a: &[Array]) -> Outputs {
    Ok(vec![ops::add(&a[0], random::uniform(0.0, 1.0, &[6], Dtype::F32, None)?)?])
}

#[test]
fn random_state_declared_advances_and_matches_uncompiled() {
    let _g = serial();
    let x = f32a(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[6]);
    let base = vals(&x);

    // Uncompiled from seed 7.
    random::seed(7);
    let e1 = only(plus_noise(&[x.clone()]));
    let e2 = only(plus_noise(&[x.clone()]));
    kiln::eval(&[&e1, &e2]).unwrap();
    let eager_state = vals(&random::state());

    // Compiled with the random state declared: each call draws anew, the same draws.
    let c = compile_with(plus_noise, CompileOptions::new().random_state());
    random::seed(7);
    let c1 = only(c.call(&[x.clone()]));
    let c2 = only(c.call(&[x.clone()]));
    let c3 = only(c.call(&[x.clone()]));
    assert_eq!(c.trace_count(), 1);
    assert_ne!(vals(&c1), vals(&c2), "two compiled calls drew the same numbers");
    assert_ne!(vals(&c2), vals(&c3));
    assert_eq!(vals(&c1), vals(&e1), "first compiled draw differs from the uncompiled one");
    assert_eq!(vals(&c2), vals(&e2), "second compiled draw differs from the uncompiled one");
    for v in [&c1, &c2, &c3] {
        let noise: Vec<f64> = vals(v).iter().zip(&base).map(|(a, b)| a - b).collect();
        assert!(noise.iter().all(|&n| (0.0..1.0).contains(&n)), "{noise:?}");
    }
    // The state advanced as the uncompiled run's did (checked after two calls).
    random::seed(7);
    c.call(&[x.clone()]).unwrap();
    c.call(&[x.clone()]).unwrap();
    assert_eq!(vals(&random::state()), eager_state, "the global state after two compiled calls");

    // Without declaring it: the draw is a constant of the trace and repeats.
    let d = compile(plus_noise);
    random::seed(7);
    let d1 = only(d.call(&[x.clone()]));
    let d2 = only(d.call(&[x.clone()]));
    assert_eq!(vals(&d1), vals(&d2), "an undeclared random state should repeat its draw");
    assert_eq!(vals(&d1), vals(&e1), "the traced draw is the first draw from the seed");
    assert_eq!(d.trace_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Transforms and compile
// ---------------------------------------------------------------------------------------------

fn exp_all(a: &[Array]) -> Outputs {
    Ok(vec![ops::exp(&a[0])?])
}

#[test]
fn compiled_grad_of_exp() {
    let _g = serial();
    let g = grad(exp_all, &[0]);
    let compiled_g = compile(grad(exp_all, &[0]));
    let x = f32a(&[1.0], &[]);
    assert_f32(&only(g(&[x.clone()])), &[], &[1f64.exp()], "grad(exp)(1)"); // array(2.71828)
    assert_f32(&only(compiled_g.call(&[x.clone()])), &[], &[1f64.exp()], "compile(grad(exp))(1)");
    assert_f32(&only(compiled_g.call(&[f32a(&[-0.5], &[])])), &[], &[(-0.5f64).exp()], "new value");
    assert_eq!(compiled_g.trace_count(), 1);
}

#[test]
fn compiled_outer_inlines_compiled_inner() {
    let _g = serial();
    let inner = compile(|a: &[Array]| Ok(vec![ops::exp(ops::negative(ops::abs(&a[0])?)?)?]));
    let i2 = inner.clone();
    let outer = compile(move |a: &[Array]| {
        let once = i2.call(a)?;
        i2.call(&once)
    });
    let mut rng = Rng::new(5);
    let xv = r32(&rng.vec(30, -3.0, 3.0));
    let x = f32a(&xv, &[3, 10]);
    let want: Vec<f64> = xv.iter().map(|&v| (-(-v.abs()).exp().abs()).exp()).collect();
    assert_f32(&only(outer.call(&[x.clone()])), &[3, 10], &want, "outer(x)");
    let eager = only(inner.call(&inner.call(&[x.clone()]).unwrap()));
    assert_f32(&eager, &[3, 10], &want, "inner(inner(x)) compiled separately");
    // The inner function ran inside the outer trace: it was inlined, not traced for itself then.
    assert_eq!(outer.trace_count(), 1);
    assert_eq!(inner.trace_count(), 1, "inner traced once for its own direct calls only");
    // Six ops (abs, negative, exp, twice), fused into one kernel across the inner calls.
    let report = outer.inspect(&[x.clone()], &[]).unwrap();
    println!("{report}");
    assert_eq!(report.eager_kernels, 6, "{report}");
    assert_eq!(report.compiled_kernels, 1, "{report}");
    assert_eq!(report.groups[0].members.len(), 6, "{report}");
}

/// sum(sin(x) * exp(y)).
fn sin_exp_sum(a: &[Array]) -> Outputs {
    Ok(vec![ops::sum(ops::multiply(ops::sin(&a[0])?, ops::exp(&a[1])?)?, None, false)?])
}

/// sin(x) * exp(y), elementwise.
fn sin_exp(a: &[Array]) -> Outputs {
    Ok(vec![ops::multiply(ops::sin(&a[0])?, ops::exp(&a[1])?)?])
}

#[test]
fn grad_vjp_jvp_of_a_compiled_function() {
    let _g = serial();
    let mut rng = Rng::new(6);
    let (xv, yv) = (rng.vec(5, -2.0, 2.0), rng.vec(5, -1.0, 1.0));
    let (x, y) = (f64a(&xv, &[5]), f64a(&yv, &[5]));
    let c = compile(sin_exp_sum);
    let dx: Vec<f64> = (0..5).map(|i| xv[i].cos() * yv[i].exp()).collect();
    let dy: Vec<f64> = (0..5).map(|i| xv[i].sin() * yv[i].exp()).collect();
    let value: f64 = dy.iter().sum();

    let g = grad(c.as_fn(), &[0, 1])(&[x.clone(), y.clone()]).unwrap();
    assert_f64(&g[0], &[5], &dx, "grad x");
    assert_f64(&g[1], &[5], &dy, "grad y");
    assert_all_same(&g, &grad(sin_exp_sum, &[0, 1])(&[x.clone(), y.clone()]).unwrap(), 1e-12, "grad vs uncompiled");

    let ct = f64a(&[2.5], &[]);
    let (out, cts) = vjp(c.as_fn(), &[x.clone(), y.clone()], &[ct.clone()]).unwrap();
    assert_f64(&out[0], &[], &[value], "vjp value");
    assert_f64(&cts[0], &[5], &dx.iter().map(|v| 2.5 * v).collect::<Vec<_>>(), "vjp x");
    assert_f64(&cts[1], &[5], &dy.iter().map(|v| 2.5 * v).collect::<Vec<_>>(), "vjp y");
    let (_, plain_cts) = vjp(sin_exp_sum, &[x.clone(), y.clone()], &[ct]).unwrap();
    assert_all_same(&cts, &plain_cts, 1e-12, "vjp vs uncompiled");

    let (tx, ty) = (rng.vec(5, -1.0, 1.0), rng.vec(5, -1.0, 1.0));
    let (out, tans) = jvp(c.as_fn(), &[x.clone(), y.clone()], &[f64a(&tx, &[5]), f64a(&ty, &[5])]).unwrap();
    let want: f64 = (0..5).map(|i| dx[i] * tx[i] + dy[i] * ty[i]).sum();
    assert_f64(&out[0], &[], &[value], "jvp value");
    assert_f64(&tans[0], &[], &[want], "jvp tangent");
    let (_, plain_tans) = jvp(sin_exp_sum, &[x.clone(), y.clone()], &[f64a(&tx, &[5]), f64a(&ty, &[5])]).unwrap();
    assert_all_same(&tans, &plain_tans, 1e-12, "jvp vs uncompiled");

    // A transform of a compiled function is not compiled: it ran the function itself.
    assert_eq!(c.trace_count(), 0);
    // The compiled function itself still works afterwards.
    assert_f64(&only(c.call(&[x, y])), &[], &[value], "direct call");
    assert_eq!(c.trace_count(), 1);
}

#[test]
fn vmap_of_a_compiled_function() {
    let _g = serial();
    let mut rng = Rng::new(7);
    let (xv, yv) = (rng.vec(12, -2.0, 2.0), rng.vec(3, -1.0, 1.0));
    let (x, y) = (f64a(&xv, &[4, 3]), f64a(&yv, &[3]));
    let c = compile(sin_exp);
    let want: Vec<f64> = (0..12).map(|k| xv[k].sin() * yv[k % 3].exp()).collect();
    let plain = vmap(sin_exp, &[Some(0), None], &[Some(0)])(&[x.clone(), y.clone()]).unwrap();
    assert_f64(&plain[0], &[4, 3], &want, "vmap of the plain function");
    let batched = vmap(c.as_fn(), &[Some(0), None], &[Some(0)])(&[x.clone(), y.clone()]).unwrap();
    assert_f64(&batched[0], &[4, 3], &want, "vmap of the compiled function");
    // Batched over y's axis too, output axis 1.
    let ys = f64a(&rng.vec(12, -1.0, 1.0), &[4, 3]);
    let ysv = vals(&ys);
    let both = vmap(c.as_fn(), &[Some(0), Some(0)], &[Some(1)])(&[x.clone(), ys]).unwrap();
    let mut want_t = vec![0.0; 12];
    for b in 0..4 {
        for j in 0..3 {
            want_t[j * 4 + b] = xv[b * 3 + j].sin() * ysv[b * 3 + j].exp();
        }
    }
    assert_f64(&both[0], &[3, 4], &want_t, "vmap over both, out axis 1");
}

#[test]
fn compiled_grad_and_value_and_grad() {
    let _g = serial();
    let mut rng = Rng::new(8);
    let cg = compile(grad(sin_exp_sum, &[0, 1]));
    let cvg = compile(|a: &[Array]| {
        let (v, g) = value_and_grad(sin_exp_sum, &[0])(a)?;
        Ok(v.into_iter().chain(g).collect())
    });
    for k in 0..3 {
        let (xv, yv) = (rng.vec(6, -2.0, 2.0), rng.vec(6, -1.0, 1.0));
        let (x, y) = (f64a(&xv, &[2, 3]), f64a(&yv, &[2, 3]));
        let dx: Vec<f64> = (0..6).map(|i| xv[i].cos() * yv[i].exp()).collect();
        let dy: Vec<f64> = (0..6).map(|i| xv[i].sin() * yv[i].exp()).collect();
        let g = cg.call(&[x.clone(), y.clone()]).unwrap();
        assert_f64(&g[0], &[2, 3], &dx, &format!("call {k}: compiled grad x"));
        assert_f64(&g[1], &[2, 3], &dy, &format!("call {k}: compiled grad y"));
        assert_all_same(&g, &grad(sin_exp_sum, &[0, 1])(&[x.clone(), y.clone()]).unwrap(), 1e-12, "vs uncompiled");
        let vg = cvg.call(&[x.clone(), y.clone()]).unwrap();
        assert_eq!(vg.len(), 2);
        assert_f64(&vg[0], &[], &[dy.iter().sum()], &format!("call {k}: compiled value"));
        assert_f64(&vg[1], &[2, 3], &dx, &format!("call {k}: compiled value_and_grad x"));
        let (pv, pg) = value_and_grad(sin_exp_sum, &[0])(&[x, y]).unwrap();
        assert_all_same(&vg, &[pv, pg].concat(), 1e-12, "value_and_grad vs uncompiled");
    }
    assert_eq!(cg.trace_count(), 1);
    assert_eq!(cvg.trace_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Shapeless
// ---------------------------------------------------------------------------------------------

fn abs_sum(a: &[Array]) -> Outputs {
    Ok(vec![ops::abs(ops::add(&a[0], &a[1])?)?])
}

/// Seed 004's scalar-then-vector example. The issue defines shapeless as "one trace serves all
/// shapes of the same ndim" (mlx's cache keys on ndim too), so the ndim change traces once more;
/// both results are right.
#[test]
fn shapeless_seed_example_scalar_then_vector() {
    let _g = serial();
    let compiled_fun = compile_with(abs_sum, CompileOptions::new().shapeless(true));
    let out = only(compiled_fun.call(&[f32a(&[1.0], &[]), f32a(&[-2.0], &[])]));
    assert_f32(&out, &[], &[1.0], "scalars");
    let out = only(compiled_fun.call(&[f32a(&[1.0, -6.0], &[2]), f32a(&[-2.0, 3.0], &[2])]));
    assert_f32(&out, &[2], &[1.0, 3.0], "vectors");
    assert_eq!(compiled_fun.trace_count(), 2, "an ndim change traces once more");
    let out = only(compiled_fun.call(&[f32a(&[4.0, -6.0, 1.0], &[3]), f32a(&[-2.0, 3.0, 1.0], &[3])]));
    assert_f32(&out, &[3], &[2.0, 3.0, 2.0], "other vectors");
    assert_eq!(compiled_fun.trace_count(), 2, "a same-ndim shape change must not trace again");
}

#[test]
fn shapeless_serves_new_shapes_without_retracing() {
    let _g = serial();
    let mut rng = Rng::new(9);
    let shapeless = compile_with(abs_sum, CompileOptions::new().shapeless(true));
    let shaped = compile(abs_sum);
    for (k, n) in [2usize, 5, 1, 17, 2].iter().enumerate() {
        let (xv, yv) = (r32(&rng.vec(*n, -5.0, 5.0)), r32(&rng.vec(*n, -5.0, 5.0)));
        let args = [f32a(&xv, &[*n]), f32a(&yv, &[*n])];
        let want: Vec<f64> = xv.iter().zip(&yv).map(|(a, b)| (a + b).abs()).collect();
        assert_f32(&only(shapeless.call(&args)), &[*n], &want, &format!("shapeless call {k}"));
        assert_f32(&only(shaped.call(&args)), &[*n], &want, &format!("shaped call {k}"));
    }
    assert_eq!(shapeless.trace_count(), 1, "shapeless retraced on a shape change");
    assert_eq!(shaped.trace_count(), 4, "one trace per distinct shape without shapeless");
    // Broadcasting between arguments follows the new shapes too.
    let out = only(shapeless.call(&[f32a(&[1.0, -2.0, 3.0], &[3]), f32a(&[-4.0], &[1])]));
    assert_f32(&out, &[3], &[3.0, 6.0, 1.0], "broadcast operands");
    // A dtype change still traces again.
    let out = only(shapeless.call(&[f64a(&[1.0, -2.0], &[2]), f64a(&[-4.0, 0.5], &[2])]));
    assert_f64(&out, &[2], &[3.0, 1.5], "float64");
    assert_eq!(shapeless.trace_count(), 2);
}

/// A shapeless reshape re-infers the axis written -1 at each call when only input axes folded
/// into it changed (as mlx re-infers it); when an input axis behind a fixed output size changed
/// (its size may have been read off the input) it fails rather than keep a stale size, and so
/// does a reshape to a fully given shape, naming flatten as the fix.
#[test]
fn shapeless_reshape_reinfers_its_minus_one_axis_and_fixed_shapes_fail() {
    let _g = serial();
    let mut rng = Rng::new(10);
    let merged = |inferred: bool| {
        move |a: &[Array]| {
            let x = &a[0];
            let (s0, s1, s2) = (x.shape()[0] as i64, x.shape()[1] as i64, x.shape()[2] as i64);
            Ok(vec![ops::reshape(x, &[s0 * s1, if inferred { -1 } else { s2 }])?])
        }
    };
    let reshape_fun = compile_with(merged(true), CompileOptions::new().shapeless(true));
    let v1 = r32(&rng.vec(24, 0.0, 1.0));
    assert_f32(&only(reshape_fun.call(&[f32a(&v1, &[2, 3, 4])])), &[6, 4], &v1, "reshape on the traced shape");
    let v2 = r32(&rng.vec(48, 0.0, 1.0));
    assert_f32(&only(reshape_fun.call(&[f32a(&v2, &[2, 3, 8])])), &[6, 8], &v2, "reshape (2, 3, 8) to (6, -1)");
    assert_eq!(reshape_fun.trace_count(), 1);
    let v3 = r32(&rng.vec(75, 0.0, 1.0));
    let v4 = r32(&rng.vec(48, 0.0, 1.0));
    for (v, shape) in [(&v3, [5, 5, 3]), (&v4, [4, 3, 4])] {
        // Eager gives (25, 3) and (12, 4): the traced 6 rows would be stale.
        let e = reshape_fun.call(&[f32a(v, &shape)]).expect_err("a new leading axis behind the traced 6 rows");
        assert_eq!((e.op.as_str(), e.kind), ("reshape", ErrorKind::Shape), "{e}");
        let named = format!("({}, {}, {})", shape[0], shape[1], shape[2]);
        assert!(e.message.contains(&named) && e.message.contains("flatten"), "the error should name the new shape and the fix: {e}");
    }

    let fixed_fun = compile_with(merged(false), CompileOptions::new().shapeless(true));
    assert_f32(&only(fixed_fun.call(&[f32a(&v1, &[2, 3, 4])])), &[6, 4], &v1, "fixed reshape on the traced shape");
    let e = fixed_fun.call(&[f32a(&v2, &[2, 3, 8])]).expect_err("reshape (2, 3, 8) to the traced (6, 4)");
    assert_eq!((e.op.as_str(), e.kind), ("reshape", ErrorKind::Shape), "{e}");
    assert!(e.message.contains("flatten") && e.message.contains("-1"), "the error should name -1 and flatten: {e}");
    assert!(e.message.contains("(2, 3, 8)"), "the error should name the new shape: {e}");

    let flatten_fun = compile_with(|a: &[Array]| Ok(vec![ops::flatten(&a[0], 0, 1)?]), CompileOptions::new().shapeless(true));
    assert_f32(&only(flatten_fun.call(&[f32a(&v1, &[2, 3, 4])])), &[6, 4], &v1, "flatten (2, 3, 4)");
    assert_f32(&only(flatten_fun.call(&[f32a(&v3, &[5, 5, 3])])), &[25, 3], &v3, "flatten (5, 5, 3)");
    assert_eq!(flatten_fun.trace_count(), 1);
}

/// An unflatten resolves its -1 from the traced shape, so under shapeless compile it is a
/// reshape of fixed sizes: a new shape is an error, never the traced split of a new size.
#[test]
fn shapeless_unflatten_with_minus_one_fails_at_a_new_shape() {
    let _g = serial();
    let c = compile_with(|a: &[Array]| Ok(vec![ops::unflatten(&a[0], 1, &[-1, 4])?]), CompileOptions::new().shapeless(true));
    let v = (0..24).map(|i| i as f64).collect::<Vec<_>>();
    assert_f32(&only(c.call(&[f32a(&v, &[2, 12])])), &[2, 3, 4], &v, "traced shape");
    let e = c.call(&[f32a(&[0.0; 48], &[4, 12])]).expect_err("unflatten at a new leading size");
    assert_eq!((e.op.as_str(), e.kind), ("reshape", ErrorKind::Shape), "{e}");
}

/// A shapeless gather from an array whose shape stays fixed follows its indices' shapes (and a
/// reduction after it folds each call's count, mlx's issue 3201); `take` follows new sizes of its
/// source's other axes; a new size of an indexed axis, or a gather of windows, fails.
#[test]
fn shapeless_gather_follows_new_index_shapes_of_a_fixed_source() {
    let _g = serial();
    let buf = f32a(&[10.0, 20.0, 30.0, 40.0, 50.0], &[5]);
    let sum_of_taken = |a: &[Array]| Ok(vec![ops::sum(ops::take(&a[0], &a[1], Some(0))?, None, false)?]);
    let c = compile_with(sum_of_taken, CompileOptions::new().shapeless(true));
    for n in [1usize, 3, 2, 5] {
        let idx = Array::from_slice(&(0..n as u32).rev().collect::<Vec<u32>>(), &[n]).unwrap();
        let want: f64 = (0..n).map(|i| 10.0 * (i + 1) as f64).sum();
        assert_f32(&only(c.call(&[buf.clone(), idx])), &[], &[want], &format!("sum of the first {n}"));
    }
    assert_eq!(c.trace_count(), 1);
    // `take` gathers whole slices, so it follows new sizes of its source's other axes.
    let idx = Array::from_slice(&[2u32, 1], &[2]).unwrap();
    let rows =
        compile_with(|a: &[Array]| Ok(vec![ops::take(&a[0], &a[1], Some(0))?]), CompileOptions::new().shapeless(true));
    for (r, cl) in [(3usize, 2usize), (3, 5), (3, 1)] {
        let x = f32a(&(0..r * cl).map(|k| k as f64).collect::<Vec<_>>(), &[r, cl]);
        let want: Vec<f64> = [2usize, 1].iter().flat_map(|&i| (0..cl).map(move |j| (i * cl + j) as f64)).collect();
        assert_f32(&only(rows.call(&[x, idx.clone()])), &[2, cl], &want, &format!("rows 2 and 1 of ({r}, {cl})"));
    }
    // A new size of the indexed axis is refused: indices made at trace time may be stale for
    // it (here `diagonal`'s positions; eager at (6, 6) has six diagonal elements).
    let e = rows.call(&[f32a(&[0.0; 8], &[4, 2]), idx.clone()]).expect_err("take along an axis of a new size");
    assert!(e.message.contains("shapeless") && e.message.contains("source"), "{e}");
    let diag = compile_with(|a: &[Array]| Ok(vec![ops::diagonal(&a[0], 0, 0, 1)?]), CompileOptions::new().shapeless(true));
    only(diag.call(&[f32a(&[0.0; 16], &[4, 4])]));
    let e = diag.call(&[f32a(&[0.0; 36], &[6, 6])]).expect_err("diagonal at a new size");
    assert_eq!(e.kind, ErrorKind::Shape, "{e}");
    // A gather of windows (slice size 2, not a whole axis) needs its source's traced shape.
    let windows = compile_with(
        |a: &[Array]| Ok(vec![ops::gather(&a[0], &[a[1].clone()], &[0], &[2])?]),
        CompileOptions::new().shapeless(true),
    );
    only(windows.call(&[buf.clone(), idx.clone()]));
    let e = windows.call(&[f32a(&[1.0, 2.0, 3.0], &[3]), idx]).expect_err("windows from a source of a new shape");
    assert_eq!(e.kind, ErrorKind::Shape, "{e}");
    assert!(e.message.contains("shapeless") && e.message.contains("source"), "{e}");
}

#[test]
fn shapeless_broadcast_to_a_traced_shape_fails() {
    let _g = serial();
    let c = compile_with(
        |a: &[Array]| {
            let n = a[0].shape()[0];
            Ok(vec![ops::add(ops::broadcast_to(&a[0], &[2, n])?, 1.0)?])
        },
        CompileOptions::new().shapeless(true),
    );
    let out = only(c.call(&[f32a(&[1.0, 2.0, 3.0], &[3])]));
    assert_f32(&out, &[2, 3], &[2.0, 3.0, 4.0, 2.0, 3.0, 4.0], "traced shape");
    let e = c.call(&[f32a(&[1.0, 2.0, 3.0, 4.0], &[4])]).expect_err("broadcast_to a stale shape");
    println!("{e}");
    assert_eq!(e.op, "broadcast_to", "{e}");
    assert_eq!(e.kind, ErrorKind::Shape, "{e}");
    assert!(e.message.contains("shapeless"), "{e}");
    assert!(e.message.contains("(4,)"), "{e}");
    // The traced shape still works afterwards.
    let out = only(c.call(&[f32a(&[0.0, 0.0, 1.0], &[3])]));
    assert_f32(&out, &[2, 3], &[1.0, 1.0, 2.0, 1.0, 1.0, 2.0], "traced shape again");
}

/// Broadcasts derived from the operands' shapes (a batched matmul's batch axes, `broadcast_arrays`,
/// the gradient of a broadcasting matmul) follow each shapeless call's shapes, as in mlx: every
/// call equals the eager function at that call's shapes, with one trace.
#[test]
fn shapeless_operand_broadcasts_follow_new_shapes() {
    let _g = serial();
    let fun = |a: &[Array]| -> Outputs {
        let mut out = vec![ops::matmul(&a[0], &a[1])?];
        out.extend(ops::broadcast_arrays(&[a[2].clone(), a[3].clone()])?);
        let loss = |p: &[Array]| Ok(vec![ops::sum(ops::matmul(&p[0], &p[1])?, None, false)?]);
        out.extend(grad(loss, &[0, 1])(&[a[0].clone(), a[1].clone()])?);
        // Per-example gradients of a broadcasting product, batched over the rows of a[2].
        let scaled = |p: &[Array]| Ok(vec![ops::sum(ops::multiply(&p[0], &p[1])?, None, false)?]);
        out.extend(vmap(grad(scaled, &[0, 1]), &[Some(0), Some(0)], &[Some(0), Some(0)])(&[a[4].clone(), a[5].clone()])?);
        Ok(out)
    };
    let c = compile_with(fun, CompileOptions::new().shapeless(true));
    let mut rng = Rng::new(17);
    let mut random = |shape: &[usize]| {
        let n = shape.iter().product();
        f32a(&common::random_values(&mut rng, n, Dtype::F32, -1.0, 1.0), shape)
    };
    let calls: [[&[usize]; 6]; 3] = [
        [&[2, 1, 4, 2], &[3, 2, 5], &[1, 3], &[2, 1], &[4, 3], &[4, 2, 1]],
        [&[3, 1, 4, 2], &[2, 2, 5], &[4, 1], &[1, 2], &[2, 1], &[2, 1, 2]],
        [&[1, 5, 3, 2], &[1, 2, 1], &[1, 1], &[3, 3], &[3, 3], &[3, 1, 1]],
    ];
    for shapes in calls {
        let args: Vec<Array> = shapes.iter().map(|s| random(s)).collect();
        let want = fun(&args).unwrap();
        let got = c.call(&args).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_f32(g, w.shape(), &vals(w), &format!("output {k} at {shapes:?}"));
        }
    }
    assert_eq!(c.trace_count(), 1);
    // The gradient of an unbatched vmap input follows the batch size too (traced at batch 1).
    let per_example = |a: &[Array]| {
        let scaled = |p: &[Array]| Ok(vec![ops::sum(ops::multiply(&p[0], &p[1])?, None, false)?]);
        vmap(grad(scaled, &[1]), &[Some(0), None], &[Some(0)])(a)
    };
    let c = compile_with(per_example, CompileOptions::new().shapeless(true));
    for shapes in [[&[1usize, 3][..], &[2, 1]], [&[4, 3], &[2, 1]], [&[3, 1], &[1, 2]]] {
        let args: Vec<Array> = shapes.iter().map(|s| random(s)).collect();
        let want = only(per_example(&args));
        assert_f32(&only(c.call(&args)), want.shape(), &vals(&want), &format!("per-example gradient at {shapes:?}"));
    }
    assert_eq!(c.trace_count(), 1);
}

/// Slices and slice updates whose bounds were written as numbers (`x[1:, :-1]`, `x[-1]`,
/// `x[2] = v`, `x[1:] = 0`) are resolved again at each shapeless call's shapes, as eager indexing
/// resolves them, through grad and vmap too: one trace, every call equal to eager and to loops.
#[test]
fn shapeless_written_slices_follow_new_shapes() {
    use ops::{AxisBound::*, SliceSpec};
    let _g = serial();
    fn from(s: i64) -> ops::AxisBound {
        Range(SliceSpec { start: Some(s), stop: None, step: 1 })
    }
    fn until(s: i64) -> ops::AxisBound {
        Range(SliceSpec { start: None, stop: Some(s), step: 1 })
    }
    let all = Range(SliceSpec::ALL);
    let fun = move |a: &[Array]| -> Outputs {
        let x = &a[0];
        let inner = ops::multiply(ops::slice_written(x, &[from(1), until(-1)])?, 2.0)?;
        let last_row = ops::slice_written(x, &[Index(-1)])?;
        let row2 = ops::slice_update_written(x, ops::full(&[1, 1], 7.0, Some(Dtype::F32))?, &[Index(2), all])?;
        let tail_zeroed = ops::slice_update_written(x, 0.0, &[all, from(1)])?;
        let tail = [all, from(1)];
        let loss = move |p: &[Array]| Ok(vec![ops::sum(ops::square(ops::slice_written(&p[0], &tail)?)?, None, false)?]);
        let g = grad(loss, &[0])(&[x.clone()])?;
        let head = [until(-1)];
        let per_row =
            vmap(move |p: &[Array]| Ok(vec![ops::slice_written(&p[0], &head)?]), &[Some(0)], &[Some(0)])(&[x.clone()])?;
        Ok([inner, last_row, row2, tail_zeroed].into_iter().chain(g).chain(per_row).collect())
    };
    let c = compile_with(fun, CompileOptions::new().shapeless(true));
    let mut rng = Rng::new(23);
    for (r, cl) in [(3usize, 4usize), (5, 6), (4, 2)] {
        let v = r32(&rng.vec(r * cl, -2.0, 2.0));
        let x = f32a(&v, &[r, cl]);
        let got = c.call(&[x.clone()]).unwrap();
        assert_all_same(&got, &fun(&[x]).unwrap(), 0.0, &format!("eager at ({r}, {cl})"));
        let at = |i: usize, j: usize| v[i * cl + j];
        let inner: Vec<f64> = (1..r).flat_map(|i| (0..cl - 1).map(move |j| 2.0 * at(i, j))).collect();
        assert_f32(&got[0], &[r - 1, cl - 1], &inner, "x[1:, :-1] * 2");
        assert_f32(&got[1], &[1, cl], &(0..cl).map(|j| at(r - 1, j)).collect::<Vec<_>>(), "x[-1]");
        let row2: Vec<f64> = (0..r * cl).map(|k| if k / cl == 2 { 7.0 } else { v[k] }).collect();
        assert_f32(&got[2], &[r, cl], &row2, "x[2] = 7");
        let zeroed: Vec<f64> = (0..r * cl).map(|k| if k % cl >= 1 { 0.0 } else { v[k] }).collect();
        assert_f32(&got[3], &[r, cl], &zeroed, "x[:, 1:] = 0");
        let g: Vec<f64> = (0..r * cl).map(|k| if k % cl >= 1 { 2.0 * v[k] } else { 0.0 }).collect();
        assert_f32(&got[4], &[r, cl], &g, "grad of sum(x[:, 1:]^2)");
        let rows: Vec<f64> = (0..r).flat_map(|i| (0..cl - 1).map(move |j| at(i, j))).collect();
        assert_f32(&got[5], &[r, cl - 1], &rows, "vmap of row[:-1]");
    }
    assert_eq!(c.trace_count(), 1, "shapeless retraced");

    // A one-row region at trace time still broadcasts its update at a new batch size, and a
    // slice empty at trace time (where softmax takes its empty-input shortcut) stays fixed.
    let c = compile_with(
        move |a: &[Array]| {
            let zeroed = ops::slice_update_written(&a[0], 0.0, &[all, Index(0)])?;
            Ok(vec![zeroed, ops::softmax(ops::slice_written(&a[0], &[all, from(3)])?, Some(&[-1]), false)?])
        },
        CompileOptions::new().shapeless(true),
    );
    c.call(&[f32a(&[1.0, 2.0, 3.0], &[1, 3])]).unwrap();
    let e = c.call(&[f32a(&[1.0; 16], &[2, 8])]).expect_err("a slice empty at trace time");
    assert_eq!((e.op.as_str(), e.kind), ("slice", ErrorKind::Shape), "{e}");
    let c = compile_with(
        move |a: &[Array]| Ok(vec![ops::slice_update_written(&a[0], 0.0, &[all, Index(0)])?]),
        CompileOptions::new().shapeless(true),
    );
    assert_f32(&only(c.call(&[f32a(&[1.0, 2.0], &[1, 2])])), &[1, 2], &[0.0, 2.0], "batch 1");
    assert_f32(&only(c.call(&[f32a(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])])), &[3, 2], &[0.0, 2.0, 0.0, 4.0, 0.0, 6.0], "batch 3");

    // An index out of range at a new shape is the eager error, in a shapeless call.
    let c = compile_with(
        |a: &[Array]| Ok(vec![ops::slice_written(&a[0], &[Index(3)])?]),
        CompileOptions::new().shapeless(true),
    );
    only(c.call(&[f32a(&[0.0; 4], &[4])]));
    let e = c.call(&[f32a(&[0.0; 3], &[3])]).expect_err("index 3 of a length-3 axis");
    assert!(e.message.contains("out of bounds") && e.message.contains("shapeless"), "{e}");

    // An update of a traced shape that no longer fills the region is refused.
    let c = compile_with(
        |a: &[Array]| Ok(vec![ops::slice_update_written(&a[0], &a[1], &[from(1)])?]),
        CompileOptions::new().shapeless(true),
    );
    only(c.call(&[f32a(&[0.0; 4], &[4]), f32a(&[1.0; 3], &[3])]));
    let e = c.call(&[f32a(&[0.0; 5], &[5]), f32a(&[1.0; 3], &[3])]).expect_err("update (3,) into a region (4,)");
    assert!(e.message.contains("shapeless") && e.message.contains("(3,) and (4,)"), "{e}");

    // Bounds resolved by the caller (`slice`), or written after the function read a shape, may
    // have come from a shape: they stay fixed and a new shape is refused with the fix.
    for read_first in [false, true] {
        let c = compile_with(
            move |a: &[Array]| {
                if read_first {
                    kiln::transforms::compile::note_shape_read();
                    return Ok(vec![ops::slice_written(&a[0], &[until(2)])?]);
                }
                Ok(vec![ops::slice(&a[0], &[SliceSpec::range(0, 2)])?])
            },
            CompileOptions::new().shapeless(true),
        );
        assert_f32(&only(c.call(&[f32a(&[1.0, 2.0, 3.0, 4.0], &[4])])), &[2], &[1.0, 2.0], "traced shape");
        let e = c.call(&[f32a(&[0.0; 6], &[6])]).expect_err("fixed bounds at a new shape");
        assert_eq!((e.op.as_str(), e.kind), ("slice", ErrorKind::Shape), "{e}");
        assert!(e.message.contains("x[:-1]") && e.message.contains("read a shape"), "{e}");
    }
}

/// Reductions without keepdims, expand_dims and squeeze with axes follow each call's shapes under
/// shapeless (they are ops of their own, not reshapes to a traced shape).
#[test]
fn shapeless_squeeze_expand_dims_and_reductions_follow_new_shapes() {
    let _g = serial();
    let mut rng = Rng::new(12);
    let c = compile_with(
        |a: &[Array]| {
            let x = &a[0];
            let rows = ops::sum(x, Some(&[-1]), false)?; // (r,)
            let cols = ops::argmax(x, Some(0), false)?; // (c,)
            let back = ops::squeeze(ops::expand_dims(x, &[1])?, Some(&[1]))?; // (r, c)
            Ok(vec![ops::expand_dims(rows, &[0])?, cols, ops::multiply(back, 2.0)?])
        },
        CompileOptions::new().shapeless(true),
    );
    for (r, cl) in [(2usize, 3usize), (4, 5), (1, 7)] {
        let v = r32(&rng.vec(r * cl, -3.0, 3.0));
        let outs = c.call(&[f32a(&v, &[r, cl])]).unwrap();
        let sums: Vec<f64> = (0..r).map(|i| v[i * cl..(i + 1) * cl].iter().sum()).collect();
        assert_f32(&outs[0], &[1, r], &sums, &format!("row sums of ({r}, {cl})"));
        let argmax: Vec<u32> = (0..cl)
            .map(|j| (0..r).fold(0, |best, i| if v[i * cl + j] > v[best * cl + j] { i } else { best }) as u32)
            .collect();
        assert_eq!(outs[1].shape(), &[cl]);
        assert_eq!(outs[1].to_vec::<u32>().unwrap(), argmax, "argmax of ({r}, {cl})");
        let doubled: Vec<f64> = v.iter().map(|x| 2.0 * x).collect();
        assert_f32(&outs[2], &[r, cl], &doubled, &format!("squeeze(expand_dims) of ({r}, {cl})"));
    }
    assert_eq!(c.trace_count(), 1, "shapeless retraced");
}

/// compile(grad(f)) with shapeless serves new shapes: the gradients of reductions broadcast like
/// their input (not to a traced shape), so sums, means, maxima and logsumexp over axes that change
/// size between calls give the eager gradient, from one trace.
#[test]
fn shapeless_compiled_gradient_of_reductions_follows_new_shapes() {
    let _g = serial();
    let mut rng = Rng::new(14);
    let f = |a: &[Array]| -> Outputs {
        let x = &a[0];
        let rows = ops::logsumexp(x, Some(&[-1]), true)?; // (r, 1)
        let m = ops::max(x, Some(&[0]), false)?; // (c,)
        let total = ops::add(ops::sum(ops::multiply(x, &rows)?, None, false)?, ops::mean(&m, None, false)?)?;
        Ok(vec![total])
    };
    let c = compile_with(grad(f, &[0]), CompileOptions::new().shapeless(true));
    for (r, cl) in [(2usize, 3usize), (4, 5), (3, 1), (1, 6)] {
        let x = f32a(&rng.vec(r * cl, -2.0, 2.0), &[r, cl]);
        let got = c.call(&[x.clone()]).unwrap();
        let want = grad(f, &[0])(&[x]).unwrap();
        assert_eq!(got[0].shape(), &[r, cl]);
        assert_all_same(&got, &want, 1e-6, &format!("grad of ({r}, {cl})"));
    }
    assert_eq!(c.trace_count(), 1, "shapeless retraced");
}

/// Division by a power-of-two constant is simplified into a multiply by its exact reciprocal;
/// other divisors stay divisions. Either way the compiled result equals eager bit for bit,
/// subnormals, infinities, NaN and signed zeros included.
#[test]
fn division_by_a_power_of_two_becomes_an_exact_multiply() {
    let _g = serial();
    let mut values: Vec<f32> = vec![0.0, -0.0, 1.0, -3.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX, f32::MIN_POSITIVE,
        1e-45, 3e-39, -7e-40, 6.0e37];
    let mut rng = Rng::new(13);
    values.extend(rng.vec(500, -1e3, 1e3).iter().map(|&v| v as f32));
    let x = Array::from_slice(&values, &[values.len()]).unwrap();
    for (divisor, multiplies) in [(4.0, true), (0.125, true), (2f64.powi(100), true), (3.0, false), (1.5, false)] {
        let f = move |a: &[Array]| Ok(vec![ops::divide(&a[0], divisor)?]);
        let c = compile(f);
        let report = c.inspect(&[x.clone()], &[]).unwrap();
        assert_eq!(report.graph_after.contains("multiply"), multiplies, "x / {divisor}: {}", report.graph_after);
        assert_eq!(report.graph_after.contains("divide"), !multiplies, "x / {divisor}: {}", report.graph_after);
        let got = only(c.call(&[x.clone()])).to_vec::<f32>().unwrap();
        let want = f(&[x.clone()]).unwrap()[0].to_vec::<f32>().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "x / {divisor} at {} ({i}): compiled {g:e}, eager {w:e}", values[i]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cache
// ---------------------------------------------------------------------------------------------

/// x scaled by an int or float constant, exp'd or negated by a string, offset by a tuple's sum.
fn with_constant(a: &[Array], k: &[Constant]) -> Outputs {
    let x = &a[0];
    Ok(vec![match &k[0] {
        Constant::Str(s) if s == "exp" => ops::exp(x)?,
        Constant::Str(s) if s == "neg" => ops::negative(x)?,
        Constant::Tuple(items) => {
            let total: f64 = items.iter().filter_map(Constant::as_f64).sum();
            ops::add(x, total)?
        }
        c => ops::multiply(x, c.as_f64().unwrap())?,
    }])
}

#[test]
fn constants_are_part_of_the_cache_key() {
    let _g = serial();
    let c = compile_with_constants(with_constant, CompileOptions::new());
    let x = f32a(&[1.0, -2.0], &[2]);
    let tuple = |a: i64, b: f64| Constant::Tuple(vec![Constant::Int(a), Constant::from(b), Constant::from("tag")]);
    let steps: Vec<(Constant, Vec<f64>, usize)> = vec![
        (Constant::Int(2), vec![2.0, -4.0], 1),
        (Constant::Int(2), vec![2.0, -4.0], 1),
        (Constant::Int(3), vec![3.0, -6.0], 2),
        (Constant::from(2.0), vec![2.0, -4.0], 3), // a float 2.0 is not the int 2
        (Constant::from(2.0), vec![2.0, -4.0], 3),
        (Constant::from(0.5), vec![0.5, -1.0], 4),
        (Constant::from("exp"), vec![1f64.exp(), (-2f64).exp()], 5),
        (Constant::from("exp"), vec![1f64.exp(), (-2f64).exp()], 5),
        (Constant::from("neg"), vec![-1.0, 2.0], 6),
        (tuple(1, 0.5), vec![2.5, -0.5], 7),
        (tuple(1, 0.5), vec![2.5, -0.5], 7),
        (tuple(2, 0.5), vec![3.5, 0.5], 8),
        (Constant::Int(3), vec![3.0, -6.0], 8),
        (Constant::from("exp"), vec![1f64.exp(), (-2f64).exp()], 8),
    ];
    for (i, (k, want, traces)) in steps.iter().enumerate() {
        let out = only(c.call_with(&[x.clone()], &[k.clone()]));
        assert_f32(&out, &[2], want, &format!("step {i} with {k:?}"));
        assert_eq!(c.trace_count(), *traces, "step {i} with {k:?}: trace count");
    }
    assert_eq!(c.cache_len(), 8);
}

#[test]
fn cache_capacity_evicts_the_least_recently_used_signature() {
    let _g = serial();
    let c = compile_with(exp_all, CompileOptions::new().cache_capacity(2));
    let call = |n: usize, traces: usize, what: &str| {
        let xv: Vec<f64> = (0..n).map(|i| i as f64 * 0.25 - 0.5).collect();
        let out = only(c.call(&[f64a(&xv, &[n])]));
        assert_f64(&out, &[n], &xv.iter().map(|v| v.exp()).collect::<Vec<_>>(), what);
        assert_eq!(c.trace_count(), traces, "{what}: trace count");
        assert!(c.cache_len() <= 2, "{what}: cache_len {}", c.cache_len());
    };
    call(1, 1, "[1]");
    call(2, 2, "[2]");
    call(3, 3, "[3] evicts [1]");
    assert_eq!(c.cache_len(), 2);
    call(3, 3, "[3] cached");
    call(2, 3, "[2] cached");
    call(1, 4, "[1] traced again, evicting [3], the least recently used");
    call(2, 4, "[2] still cached");
    call(3, 5, "[3] traced again");
    for n in 4..20 {
        call(n, 5 + n - 3, "a stream of new shapes");
    }
    assert_eq!(c.cache_len(), 2);
}

#[test]
fn a_failed_trace_leaves_no_entry() {
    let _g = serial();
    let c = compile(|a: &[Array]| Ok(vec![ops::matmul(&a[0], &a[1])?]));
    let e = c.call(&[f32a(&[1.0; 6], &[2, 3]), f32a(&[1.0; 6], &[2, 3])]).expect_err("matmul (2, 3) @ (2, 3)");
    assert_eq!(e.kind, ErrorKind::Shape, "{e}");
    assert_eq!(c.cache_len(), 0);
    assert_eq!(c.trace_count(), 0);
    // The same bad call fails again (nothing half-built was cached).
    assert!(c.call(&[f32a(&[1.0; 6], &[2, 3]), f32a(&[1.0; 6], &[2, 3])]).is_err());
    assert_eq!(c.cache_len(), 0);
    // A good call works.
    let out = only(c.call(&[f32a(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]), f32a(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])]));
    assert_f32(&out, &[2, 2], &[4.0, 5.0, 10.0, 11.0], "matmul");
    assert_eq!(c.cache_len(), 1);
    assert_eq!(c.trace_count(), 1);

    // A failing trace restores the implicit lists it swapped for placeholders.
    let state = ArrayList::new(vec![f32a(&[1.0, 2.0], &[2])]);
    let s = state.clone();
    let fails = compile_with(
        move |a: &[Array]| {
            let y = ops::add(&a[0], s.get(0).unwrap())?;
            y.item::<f32>()?; // not a scalar and traced: fails
            Ok(vec![y])
        },
        CompileOptions::new().inputs(&state).outputs(&state),
    );
    assert!(fails.call(&[f32a(&[1.0, 1.0], &[2])]).is_err());
    assert_eq!(fails.cache_len(), 0);
    assert_eq!(state.len(), 1);
    assert_eq!(vals(&state.get(0).unwrap()), vec![1.0, 2.0], "the list was not restored");
}

/// A function only the memory test hands to `compile_fn`.
fn tanh_for_memory(a: &[Array]) -> Outputs {
    Ok(vec![ops::tanh(ops::multiply(&a[0], 0.5)?)?])
}

#[test]
fn dropping_compiled_functions_frees_their_memory() {
    let _g = serial();
    const N: usize = 4096;
    let x = Array::from_vec(vec![0.5f32; N]);
    let cycle = |i: usize| {
        // A compiled lambda in a loop (the guide's anti-pattern) capturing an array of its own.
        let w = Array::from_vec(vec![i as f32; N]);
        let c = compile(move |a: &[Array]| Ok(vec![ops::add(ops::multiply(&a[0], &w)?, 1.0)?]));
        let out = only(c.call(&[x.clone()]));
        assert_eq!(out.to_vec::<f32>().unwrap()[N - 1], 0.5 * i as f32 + 1.0);
        assert_eq!(c.trace_count(), 1);
        let shapes = compile(move |a: &[Array]| Ok(vec![ops::sum(ops::exp(&a[0])?, Some(&[-1]), false)?]));
        shapes.call(&[ops::reshape(&x, &[64, 64]).unwrap()]).unwrap();
        shapes.call(&[ops::reshape(&x, &[16, 256]).unwrap()]).unwrap();
        let f = compile_fn(tanh_for_memory);
        assert_eq!(f.trace_count(), 0, "compile_fn kept a dropped handle alive");
        f.call(&[x.clone()]).unwrap();
    };
    for i in 0..3 {
        cycle(i);
    }
    let before = kiln::active_memory();
    for i in 0..200 {
        cycle(i);
    }
    let after = kiln::active_memory();
    println!("active memory before {before} B, after 200 cycles {after} B");
    // One cycle holds about 40 KiB while alive; 200 leaked cycles would be 8 MiB.
    assert!(after <= before + 64 * 1024, "active memory grew from {before} to {after} bytes over 200 compile cycles");
}

// ---------------------------------------------------------------------------------------------
// Uncaptured inputs
// ---------------------------------------------------------------------------------------------

#[test]
fn a_traced_array_kept_by_an_impure_function_is_an_uncaptured_input() {
    let _g = serial();
    let leak = ArrayList::default();
    let l = leak.clone();
    let f = compile(move |a: &[Array]| {
        let z = ops::exp(&a[0])?;
        l.push(z.clone()); // kept outside, not declared as an output
        Ok(vec![z])
    });
    assert_f32(&only(f.call(&[f32a(&[0.0, 1.0], &[2])])), &[2], &[1.0, 1f64.exp()], "f");
    let l = leak.clone();
    let g = compile(move |a: &[Array]| Ok(vec![ops::add(&a[0], l.get(0).unwrap())?]));
    let e = g.call(&[f32a(&[1.0, 1.0], &[2])]).expect_err("g uses f's traced value");
    println!("{e}");
    assert_eq!(e.op, "compile", "{e}");
    assert!(e.message.contains("not one of its inputs"), "{e}");
    assert!(e.message.contains("CompileOptions::inputs"), "{e}");
    assert!(e.message.contains("(2,)"), "the error should name the array's shape: {e}");
    assert_eq!(g.cache_len(), 0);
}

/// A function that reaches one of its call's arguments directly (captured from the enclosing
/// scope, or inside an array computed from it before the call) is refused, as in mlx: the value
/// would otherwise be frozen into the trace as a constant.
#[test]
fn an_argument_used_directly_instead_of_through_its_parameter_is_refused() {
    let _g = serial();
    let x = ops::add(f32a(&[1.0, 2.0], &[2]), 1.0).unwrap();
    let captured = x.clone();
    let f = compile(move |a: &[Array]| Ok(vec![ops::add(&a[0], ops::add(&captured, 1.0)?)?]));
    let e = f.call(&[x.clone()]).expect_err("x used from the closure");
    assert_eq!((e.op.as_str(), e.kind), ("compile", ErrorKind::Value), "{e}");
    assert!(e.message.contains("argument 0") && e.message.contains("(2,)"), "{e}");
    let derived = ops::multiply(&x, 2.0).unwrap();
    let g = compile(move |a: &[Array]| Ok(vec![ops::add(&a[0], &derived)?]));
    let e = g.call(&[x.clone()]).expect_err("an array computed from x before the call");
    assert!(e.message.contains("argument 0"), "{e}");
    // The same closure called with another array uses x as the constant it is.
    let captured = x.clone();
    let h = compile(move |a: &[Array]| Ok(vec![ops::add(&a[0], &captured)?]));
    assert_f32(&only(h.call(&[f32a(&[10.0, 20.0], &[2])])), &[2], &[12.0, 23.0], "x as a constant");
}

// ---------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------

/// exp(-x) * x + sum(x^2 over the last axis).
fn mixed(a: &[Array]) -> Outputs {
    let x = &a[0];
    let s = ops::sum(ops::square(x)?, Some(&[-1]), true)?;
    Ok(vec![ops::add(ops::multiply(ops::exp(ops::negative(x)?)?, x)?, s)?])
}

#[test]
fn threads_share_one_compiled_function() {
    let _g = serial();
    let c = compile(mixed);
    let shapes: [&[usize]; 4] = [&[7], &[3, 5], &[2, 2, 4], &[16]];
    std::thread::scope(|scope| {
        for t in 0..8u64 {
            let c = c.clone();
            scope.spawn(move || {
                let mut rng = Rng::new(100 + t);
                for i in 0..50usize {
                    let shape = shapes[(t as usize + i) % 4];
                    let n: usize = shape.iter().product();
                    let last = *shape.last().unwrap();
                    let xv = r32(&rng.vec(n, -2.0, 2.0));
                    let x = f32a(&xv, shape);
                    let got = only(c.call(&[x.clone()]));
                    let eager = only(mixed(&[x]));
                    assert_same(&got, &eager, 1e-5, &format!("thread {t} call {i}"));
                    let want: Vec<f64> = (0..n)
                        .map(|k| {
                            let row = k / last;
                            let s: f64 = xv[row * last..(row + 1) * last].iter().map(|v| v * v).sum();
                            (-xv[k]).exp() * xv[k] + s
                        })
                        .collect();
                    assert_f32(&got, shape, &want, &format!("thread {t} call {i} vs float64"));
                }
            });
        }
    });
    assert_eq!(c.cache_len(), 4);
    assert!(c.trace_count() >= 4, "{}", c.trace_count());
}

#[test]
fn compiled_calls_are_not_affected_by_a_grad_on_another_thread() {
    let _g = serial();
    let c = compile(exp_all);
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let f = move |a: &[Array]| -> Outputs {
            entered_tx.send(()).unwrap();
            // Stay inside the grad trace until released (or give up after a while).
            let _ = release_rx.recv_timeout(Duration::from_secs(30));
            Ok(vec![ops::sum(ops::square(&a[0])?, None, false)?])
        };
        grad(f, &[0])(&[f64a(&[3.0], &[1])]).map(|g| vals(&g[0]))
    });
    entered_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let out = c.call(&[f64a(&[1.0], &[1])]);
    let traces = c.trace_count();
    release_tx.send(()).unwrap();
    assert_eq!(worker.join().unwrap().unwrap(), vec![6.0]);
    assert_f64(&only(out), &[1], &[1f64.exp()], "compiled call during another thread's grad");
    assert_eq!(traces, 1, "the compiled function ran uncompiled because another thread was inside grad");
}

/// A gradient still pending after `value_and_grad` returned (its graph holds the trace's tracer
/// markers) is an ordinary input: the compiled function traces once and replays, instead of
/// running inline forever.
#[test]
fn compiled_function_on_a_pending_gradient_compiles_and_replays() {
    let _g = serial();
    let c = compile(exp_all);
    let f = |a: &[Array]| -> Outputs { Ok(vec![ops::sum(ops::square(&a[0])?, None, false)?]) };
    for (i, v) in [1.0, 2.0, -0.5].into_iter().enumerate() {
        let (_, g) = value_and_grad(f, &[0])(&[f64a(&[v], &[1])]).unwrap();
        let out = c.call(&[g[0].clone()]);
        assert_f64(&only(out), &[1], &[(2.0 * v).exp()], "exp of a pending gradient");
        assert_eq!(c.trace_count(), 1, "call {i} ran inline instead of replaying");
    }
}

// ---------------------------------------------------------------------------------------------
// Introspection
// ---------------------------------------------------------------------------------------------

fn softmax_last(a: &[Array]) -> Outputs {
    let x = &a[0];
    let m = ops::max(x, Some(&[-1]), true)?;
    let e = ops::exp(ops::subtract(x, &m)?)?;
    Ok(vec![ops::divide(&e, ops::sum(&e, Some(&[-1]), true)?)?])
}

fn layer_norm(a: &[Array]) -> Outputs {
    let (x, gamma, beta) = (&a[0], &a[1], &a[2]);
    let mu = ops::mean(x, Some(&[-1]), true)?;
    let xc = ops::subtract(x, &mu)?;
    let var = ops::mean(ops::square(&xc)?, Some(&[-1]), true)?;
    let norm = ops::multiply(&xc, ops::rsqrt(ops::add(var, 1e-5)?)?)?;
    Ok(vec![ops::add(ops::multiply(norm, gamma)?, beta)?])
}

#[test]
fn softmax_over_the_last_axis_is_one_kernel() {
    let _g = serial();
    let mut rng = Rng::new(11);
    let (rows, cols) = (8, 33);
    let xv = r32(&rng.vec(rows * cols, -4.0, 4.0));
    let x = f32a(&xv, &[rows, cols]);

    let s = compile(softmax_last);
    let out = only(s.call(&[x.clone()]));
    let mut want = Vec::new();
    for r in 0..rows {
        let row = &xv[r * cols..(r + 1) * cols];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|v| (v - m).exp()).sum();
        want.extend(row.iter().map(|v| (v - m).exp() / total));
    }
    assert_f32(&out, &[rows, cols], &want, "softmax vs float64");
    assert_same(&out, &only(softmax_last(&[x.clone()])), 1e-5, "softmax vs eager");
    let report = s.inspect(&[x.clone()], &[]).unwrap();
    println!("{report}");
    assert_eq!(report.compiled_kernels, 1, "softmax over the last axis: {report}");
    assert!(report.eager_kernels >= 5, "{report}");
    // The library's own softmax too.
    let lib = compile(|a: &[Array]| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]));
    assert_f32(&only(lib.call(&[x.clone()])), &[rows, cols], &want, "ops::softmax compiled");
    assert_eq!(lib.inspect(&[x.clone()], &[]).unwrap().compiled_kernels, 1);
}

#[test]
fn layer_norm_fuses_into_at_most_two_kernels() {
    let _g = serial();
    let mut rng = Rng::new(14);
    let (rows, cols) = (8, 33);
    let xv = r32(&rng.vec(rows * cols, -4.0, 4.0));
    let x = f32a(&xv, &[rows, cols]);
    let gv = r32(&rng.vec(cols, 0.5, 1.5));
    let bv = r32(&rng.vec(cols, -0.5, 0.5));
    let (gamma, beta) = (f32a(&gv, &[cols]), f32a(&bv, &[cols]));
    let ln = compile(layer_norm);
    let out = only(ln.call(&[x.clone(), gamma.clone(), beta.clone()]));
    let mut want = Vec::new();
    for r in 0..rows {
        let row = &xv[r * cols..(r + 1) * cols];
        let mu = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
        want.extend(row.iter().enumerate().map(|(j, v)| (v - mu) / (var + 1e-5).sqrt() * gv[j] + bv[j]));
    }
    assert_close(&vals(&out), &want, 1e-4, 1e-5, "layer norm vs float64");
    assert_same(&out, &only(layer_norm(&[x.clone(), gamma.clone(), beta.clone()])), 1e-5, "layer norm vs eager");
    let report = ln.inspect(&[x.clone(), gamma, beta], &[]).unwrap();
    println!("{report}");
    assert!(report.eager_kernels >= 8, "{report}");
    assert!(report.compiled_kernels <= 2, "layer norm: {report}");
}

/// Softmax over `axis`, written out as a user would.
fn softmax_over(x: &Array, axis: i64) -> kiln::Result<Array> {
    let m = ops::max(x, Some(&[axis]), true)?;
    let e = ops::exp(ops::subtract(x, &m)?)?;
    ops::divide(&e, ops::sum(&e, Some(&[axis]), true)?)
}

/// Reductions with kept axes after the reduced ones (columns) fuse with what they read and what
/// reads them into one kernel on the CPU, run over blocks of columns. Each column folds in order,
/// as the eager column reduction does for every input layout: compiled (both engines) equals
/// eager bit for bit, float64 sums whose order shows included, and both are checked against
/// float64.
#[test]
fn reductions_over_columns_fuse_and_equal_eager() {
    let _g = serial();
    // Column kernels are the CPU's (a GPU's fused kernels fold trailing axes only): on the CPU
    // whatever the default device.
    kiln::with_device(kiln::Device::cpu(), columns_on_the_cpu).unwrap();
}

/// The body of [`reductions_over_columns_fuse_and_equal_eager`].
fn columns_on_the_cpu() {
    let mut rng = Rng::new(41);
    // 2100 columns: several whole blocks (of 256 natively, 384 interpreted) and a part block.
    let (rows, cols) = (300, 2100);
    let xv = r32(&rng.vec(rows * cols, -6.0, 6.0));
    let x = f32a(&xv, &[rows, cols]);
    let s = compile(|a: &[Array]| Ok(vec![softmax_over(&a[0], 0)?]));
    let out = only(s.call(&[x.clone()]));
    let mut want = vec![0.0; rows * cols];
    for c in 0..cols {
        let col: Vec<f64> = (0..rows).map(|r| xv[r * cols + c]).collect();
        let m = col.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = col.iter().map(|v| (v - m).exp()).sum();
        for r in 0..rows {
            want[r * cols + c] = (col[r] - m).exp() / total;
        }
    }
    assert_f32(&out, &[rows, cols], &want, "softmax over axis 0 vs float64");
    assert_same(&out, &softmax_over(&x, 0).unwrap(), 0.0, "softmax over axis 0 vs eager");
    let report = s.inspect(&[x.clone()], &[]).unwrap();
    assert_eq!(report.compiled_kernels, 1, "softmax over axis 0: {report}");
    let text = report.to_string();
    assert!(text.contains("inner_axes=1"), "{text}");
    assert!(!report.groups[0].engine.contains("no exact C form"), "softmax over axis 0 has a C form: {text}");

    // The middle axis of three, a row-level operand (a per-column scale), an element output
    // and a row output from one kernel.
    let (b, n, f) = (3, 37, 1100);
    let yv = r32(&rng.vec(b * n * f, -3.0, 3.0));
    let wv = r32(&rng.vec(b * f, 0.5, 1.5));
    let (y, w) = (f32a(&yv, &[b, n, f]), f32a(&wv, &[b, 1, f]));
    let norm = |a: &[Array]| -> Outputs {
        let mean = ops::mean(&a[0], Some(&[1]), true)?;
        let dev = ops::subtract(&a[0], &mean)?;
        let var = ops::mean(ops::square(&dev)?, Some(&[1]), true)?;
        let scale = ops::multiply(ops::rsqrt(ops::add(&var, 1e-5)?)?, &a[1])?;
        Ok(vec![ops::multiply(&dev, &scale)?, var])
    };
    let c = compile(norm);
    let got = c.call(&[y.clone(), w.clone()]).unwrap();
    assert_all_same(&got, &norm(&[y.clone(), w.clone()]).unwrap(), 0.0, "norm over the middle axis vs eager");
    let mut want_var = vec![0.0; b * f];
    for i in 0..b {
        for j in 0..f {
            let col: Vec<f64> = (0..n).map(|k| yv[(i * n + k) * f + j]).collect();
            let mu = col.iter().sum::<f64>() / n as f64;
            want_var[i * f + j] = col.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
        }
    }
    assert_f32(&got[1], &[b, 1, f], &want_var, "variance over the middle axis vs float64");
    assert_eq!(c.inspect(&[y.clone(), w.clone()], &[]).unwrap().compiled_kernels, 1);

    // Two reduced axes before one kept; integers, booleans and float16 beside float32.
    let zv = rng.vec(4 * 5 * 300, -50.0, 50.0).iter().map(|v| v.round()).collect::<Vec<_>>();
    let z = common::array(&zv, &[4, 5, 300], Dtype::I32);
    let h = common::array(&rng.vec(4 * 5 * 300, -2.0, 2.0), &[4, 5, 300], Dtype::F16);
    let mixed = |a: &[Array]| -> Outputs {
        let axes: &[i64] = &[0, 1];
        Ok(vec![
            ops::sum(ops::multiply(&a[0], &a[0])?, Some(axes), false)?,
            ops::any(ops::greater(&a[0], 40.0)?, Some(axes), false)?,
            ops::max(ops::exp(&a[1])?, Some(axes), false)?,
            ops::mean(ops::square(&a[1])?, Some(axes), true)?,
        ])
    };
    let m = compile(mixed);
    let got = m.call(&[z.clone(), h.clone()]).unwrap();
    assert_all_same(&got, &mixed(&[z.clone(), h.clone()]).unwrap(), 0.0, "mixed dtypes over axes (0, 1) vs eager");
    let squares: Vec<f64> = (0..300).map(|j| (0..20).map(|k| zv[k * 300 + j] * zv[k * 300 + j]).sum()).collect();
    assert_eq!(vals(&got[0]), squares, "integer sum of squares over axes (0, 1)");

    // No columns: an empty result.
    let empty = f32a(&[], &[5, 0]);
    let sum0 = |a: &[Array]| -> Outputs { Ok(vec![ops::sum(ops::exp(&a[0])?, Some(&[0]), false)?]) };
    let sums = compile(sum0);
    assert_f32(&only(sums.call(&[empty.clone()])), &[0], &[], "sum over axis 0 of no columns");
    assert_eq!(sums.inspect(&[empty], &[]).unwrap().compiled_kernels, 1);

    // float64 sums of values of many magnitudes, whose order shows in the last bits, read straight
    // from the input and scaled after: in place, and from a transposed view (which eager copies
    // before folding its columns in order, and the column kernel reads where it lies), by both
    // engines.
    let wide: Vec<f64> = rng.vec(257 * 300, -1.0, 1.0).iter().enumerate().map(|(i, v)| v * 10f64.powi((i % 13) as i32 - 6)).collect();
    let sum_times3 = |a: &[Array]| -> Outputs { Ok(vec![ops::multiply(ops::sum(&a[0], Some(&[0]), true)?, 3.0)?]) };
    let c = compile(sum_times3);
    let x = f64a(&wide, &[257, 300]);
    let xt = ops::transpose(f64a(&wide, &[300, 257]), None).unwrap();
    for (x, what) in [(x, "in place"), (xt, "transposed")] {
        let eager = only(sum_times3(&[x.clone()]));
        for engine in [native::Engine::Interpreter, native::Engine::NativeNow] {
            let got = only(native::with_engine(engine, || c.call(&[x.clone()])));
            assert_same(&got, &eager, 0.0, &format!("float64 column sums, {what}, {engine:?}"));
        }
    }
}

/// Softmax cross-entropy per example from logits and one-hot labels: two reductions of the same
/// rows (logsumexp and the picked logit) that meet in one subtraction.
fn cross_entropy(a: &[Array]) -> Outputs {
    let picked = ops::sum(ops::multiply(&a[0], &a[1])?, Some(&[-1]), false)?;
    Ok(vec![ops::subtract(ops::logsumexp(&a[0], Some(&[-1]), false)?, picked)?])
}

#[test]
fn cross_entropy_is_one_kernel_and_its_mean_one_more() {
    let _g = serial();
    let mut rng = Rng::new(15);
    let (rows, cols) = (9, 37);
    let lv = r32(&rng.vec(rows * cols, -6.0, 6.0));
    let mut hot = vec![0.0; rows * cols];
    for r in 0..rows {
        hot[r * cols + (5 * r + 2) % cols] = 1.0;
    }
    let (logits, onehot) = (f32a(&lv, &[rows, cols]), f32a(&hot, &[rows, cols]));
    let want: Vec<f64> = (0..rows)
        .map(|r| {
            let row = &lv[r * cols..(r + 1) * cols];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln() - row[(5 * r + 2) % cols]
        })
        .collect();
    let args = [logits, onehot];
    let per_example = compile(cross_entropy);
    let out = only(per_example.call(&args));
    assert_close(&vals(&out), &want, 1e-5, 1e-5, "cross-entropy vs float64");
    assert_same(&out, &only(cross_entropy(&args)), 1e-6, "cross-entropy vs eager");
    let report = per_example.inspect(&args, &[]).unwrap();
    assert_eq!(report.compiled_kernels, 1, "the two row reductions share one kernel: {report}");
    let mean = compile(|a: &[Array]| Ok(vec![ops::mean(only(cross_entropy(a)), None, false)?]));
    let loss = only(mean.call(&args));
    assert_close(&vals(&loss), &[want.iter().sum::<f64>() / rows as f64], 1e-5, 1e-5, "mean cross-entropy");
    let report = mean.inspect(&args, &[]).unwrap();
    assert_eq!(report.compiled_kernels, 2, "a kernel per row and the mean over rows: {report}");
}

/// exp(x) + exp(x): a common subexpression.
fn twice_exp(a: &[Array]) -> Outputs {
    Ok(vec![ops::add(ops::exp(&a[0])?, ops::exp(&a[0])?)?])
}

#[test]
fn simplification_merges_common_subexpressions_and_modes_switch_it_off() {
    let _g = serial();
    let xv = [0.5, -1.0, 2.0];
    let x = f32a(&xv, &[3]);
    let want: Vec<f64> = xv.iter().map(|v| 2.0 * v.exp()).collect();
    let count = |s: &str, pat: &str| s.matches(pat).count();

    let full = compile(twice_exp);
    assert_f32(&only(full.call(&[x.clone()])), &[3], &want, "full");
    let r = full.inspect(&[x.clone()], &[]).unwrap();
    println!("{r}");
    assert_eq!(count(&r.graph_before, "exp("), 2, "{r}");
    assert_eq!(count(&r.graph_after, "exp("), 1, "{r}");
    assert!(r.graph_after.lines().count() < r.graph_before.lines().count(), "{r}");
    assert!(r.graph_after.len() < r.graph_before.len(), "{r}");
    assert_eq!(r.eager_kernels, 3);
    assert_eq!(r.compiled_kernels, 1);
    assert!(r.dot.starts_with("digraph"), "{}", r.dot);

    let no_simplify = compile_with(twice_exp, CompileOptions::new().mode(CompileMode::NoSimplify));
    assert_f32(&only(no_simplify.call(&[x.clone()])), &[3], &want, "no simplify");
    let r = no_simplify.inspect(&[x.clone()], &[]).unwrap();
    assert_eq!(count(&r.graph_after, "exp("), 2, "NoSimplify merged: {r}");
    // Still fused (the two exp nodes are no longer one, so one of them may run alone).
    assert!(!r.groups.is_empty(), "NoSimplify still fuses: {r}");
    assert!(r.compiled_kernels < r.eager_kernels, "{r}");
    assert_eq!(no_simplify.trace_count(), 1);

    let no_fuse = compile_with(twice_exp, CompileOptions::new().mode(CompileMode::NoFuse));
    assert_f32(&only(no_fuse.call(&[x.clone()])), &[3], &want, "no fuse");
    let r = no_fuse.inspect(&[x.clone()], &[]).unwrap();
    assert_eq!(count(&r.graph_after, "exp("), 1, "NoFuse still simplifies: {r}");
    assert!(r.groups.is_empty(), "NoFuse fused: {r}");
    assert_eq!(r.compiled_kernels, 2, "exp and add as their own kernels: {r}");
}

#[test]
fn compile_log_names_why_it_traced_again() {
    if !is_child() {
        let text = run_in_child("compile_log_names_why_it_traced_again", &[("KILN_LOG", "compile")]);
        assert!(text.contains("first call"), "{text}");
        assert!(text.contains("input 0 shape (2, 3) -> (4, 3)"), "{text}");
        assert!(text.contains("input 0 dtype"), "{text}");
        assert!(!text.contains("trace #4"), "a cache hit was logged as a trace: {text}");
        // Without KILN_LOG nothing is logged.
        let quiet = run_in_child("compile_log_names_why_it_traced_again", &[]);
        assert!(!quiet.contains("[kiln compile]"), "{quiet}");
        return;
    }
    let c = compile(exp_all);
    c.call(&[f32a(&[0.0; 6], &[2, 3])]).unwrap();
    c.call(&[f32a(&[0.0; 6], &[2, 3])]).unwrap();
    c.call(&[f32a(&[0.0; 12], &[4, 3])]).unwrap();
    c.call(&[f64a(&[0.0; 12], &[4, 3])]).unwrap();
    c.call(&[f64a(&[0.0; 12], &[4, 3])]).unwrap();
    assert_eq!(c.trace_count(), 3);
}

// ---------------------------------------------------------------------------------------------
// User kernels
// ---------------------------------------------------------------------------------------------

/// A user kernel: the running sum along the last axis (not elementwise, so not fusible).
fn cumsum_kernel(x: &Array) -> Result<Array> {
    let shape = x.shape().to_vec();
    let out = custom_kernel("cumsum_rows", &[x.clone()], &[(shape, Dtype::F32)], |args: &mut KernelArgs| {
        let n = *args.input_shape(0).last().unwrap();
        let x: Vec<f32> = args.input::<f32>(0)?.to_vec();
        let out = args.output::<f32>(0)?;
        for (xr, or) in x.chunks(n).zip(out.chunks_mut(n)) {
            let mut acc = 0f32;
            for (o, v) in or.iter_mut().zip(xr) {
                acc += v;
                *o = acc;
            }
        }
        Ok(())
    })?;
    Ok(out.into_iter().next().unwrap())
}

fn cumsum_ref(x: &[f64], n: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for row in x.chunks(n) {
        let mut acc = 0.0;
        for v in row {
            acc += v;
            out.push(acc);
        }
    }
    out
}

/// exp(x) * 2, through the kernel, then sin(k) * 3 + x.
fn around_kernel(a: &[Array]) -> Outputs {
    let x = &a[0];
    let h = ops::multiply(ops::exp(x)?, 2.0)?;
    let k = cumsum_kernel(&h)?;
    Ok(vec![ops::add(ops::multiply(ops::sin(&k)?, 3.0)?, x)?])
}

fn around_kernel_ref(xv: &[f64], n: usize) -> Vec<f64> {
    let h: Vec<f64> = xv.iter().map(|v| v.exp() * 2.0).collect();
    cumsum_ref(&h, n).iter().zip(xv).map(|(k, x)| k.sin() * 3.0 + x).collect()
}

#[test]
fn custom_kernel_eager() {
    let _g = serial();
    let xv = [1.0, 2.0, 3.0, -1.0, 0.5, 0.25];
    let out = cumsum_kernel(&f32a(&xv, &[2, 3])).unwrap();
    assert_f32(&out, &[2, 3], &[1.0, 3.0, 6.0, -1.0, -0.5, -0.25], "cumsum kernel");
    // A strided view as input is handed over row-major.
    let t = ops::transpose(f32a(&xv, &[2, 3]), None).unwrap();
    let out = cumsum_kernel(&t).unwrap();
    assert_f32(&out, &[3, 2], &[1.0, 0.0, 2.0, 2.5, 3.0, 3.25], "cumsum of a transposed view");
}

#[test]
fn custom_kernel_inside_a_compiled_function_is_a_boundary() {
    let _g = serial();
    let mut rng = Rng::new(12);
    let c = compile(around_kernel);
    for (k, shape) in [[4usize, 6], [4, 6], [2, 5]].iter().enumerate() {
        let n = shape[0] * shape[1];
        let xv = r32(&rng.vec(n, -1.0, 1.0));
        let x = f32a(&xv, shape);
        let got = only(c.call(&[x.clone()]));
        assert_same(&got, &only(around_kernel(&[x.clone()])), 1e-5, &format!("call {k}: compiled vs eager"));
        assert_close(&vals(&got), &around_kernel_ref(&xv, shape[1]), 1e-4, 1e-4, &format!("call {k}: vs float64"));
    }
    assert_eq!(c.trace_count(), 2);
    let x = f32a(&r32(&rng.vec(24, -1.0, 1.0)), &[4, 6]);
    let report = c.inspect(&[x], &[]).unwrap();
    println!("{report}");
    assert_eq!(report.boundaries.len(), 1, "{report}");
    assert!(report.boundaries[0].contains("custom_kernel"), "{report}");
    assert_eq!(report.groups.len(), 2, "the ops before and after the kernel should fuse: {report}");
    assert_eq!(report.eager_kernels, 6, "{report}");
    assert_eq!(report.compiled_kernels, 3, "{report}");
    assert!(report.groups[0].ir.contains("exp"), "{report}");
    assert!(report.groups[1].ir.contains("sin"), "{report}");
}

#[test]
fn custom_kernel_has_no_gradient() {
    let _g = serial();
    let f = |a: &[Array]| -> Outputs { Ok(vec![ops::sum(cumsum_kernel(&ops::exp(&a[0])?)?, None, false)?]) };
    let x = f32a(&[0.1, 0.2, 0.3], &[3]);
    let check = |r: Outputs, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.op, "custom_kernel", "{what}: {e}");
        assert_eq!(e.kind, ErrorKind::Unsupported, "{what}: {e}");
        assert!(e.message.contains("cumsum_rows"), "{what}: {e}");
        assert!(e.message.contains("CustomFunction"), "{what}: {e}");
    };
    check(grad(f, &[0])(&[x.clone()]), "grad of the eager function");
    let c = compile(f);
    let s = only(c.call(&[x.clone()]));
    let e: Vec<f64> = [0.1f32, 0.2, 0.3].iter().map(|&v| (v as f64).exp()).collect();
    assert_f32(&s, &[], &[e[0] + (e[0] + e[1]) + (e[0] + e[1] + e[2])], "the compiled function itself");
    check(grad(c.as_fn(), &[0])(&[x.clone()]), "grad of the compiled function");
    let cg = compile(grad(f, &[0]));
    check(cg.call(&[x.clone()]), "compiled grad");
    assert_eq!(cg.cache_len(), 0);
}

/// A user kernel with two outputs: per-row sums (rows,) and the input scaled by each row's max.
fn two_output_kernel(x: &Array) -> Result<Vec<Array>> {
    let (r, n) = (x.shape()[0], x.shape()[1]);
    custom_kernel("rowsum_and_scale", &[x.clone()], &[(vec![r], Dtype::F32), (vec![r, n], Dtype::F32)], |args: &mut KernelArgs| {
        let n = args.input_shape(0)[1];
        let x: Vec<f32> = args.input::<f32>(0)?.to_vec();
        let sums: Vec<f32> = x.chunks(n).map(|row| row.iter().sum()).collect();
        args.output::<f32>(0)?.copy_from_slice(&sums);
        let scaled = args.output::<f32>(1)?;
        for (i, row) in x.chunks(n).enumerate() {
            let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            for (j, v) in row.iter().enumerate() {
                scaled[i * n + j] = v * m;
            }
        }
        Ok(())
    })
}

fn use_two_outputs(a: &[Array]) -> Outputs {
    let outs = two_output_kernel(&ops::add(&a[0], 1.0)?)?;
    let s = ops::expand_dims(&outs[0], &[1])?;
    Ok(vec![ops::subtract(ops::multiply(&outs[1], 2.0)?, &s)?, ops::exp(&outs[0])?])
}

#[test]
fn custom_kernel_with_two_outputs() {
    let _g = serial();
    let mut rng = Rng::new(13);
    let (r, n) = (3, 4);
    let xv = r32(&rng.vec(r * n, -1.0, 1.0));
    let x = f32a(&xv, &[r, n]);
    let yv: Vec<f64> = xv.iter().map(|v| v + 1.0).collect();
    let sums: Vec<f64> = yv.chunks(n).map(|row| row.iter().sum()).collect();
    let maxes: Vec<f64> = yv.chunks(n).map(|row| row.iter().cloned().fold(f64::NEG_INFINITY, f64::max)).collect();
    let want0: Vec<f64> = (0..r * n).map(|k| 2.0 * yv[k] * maxes[k / n] - sums[k / n]).collect();
    let want1: Vec<f64> = sums.iter().map(|s| s.exp()).collect();

    let eager = two_output_kernel(&f32a(&yv, &[r, n])).unwrap();
    assert_f32(&eager[0], &[r], &sums, "eager sums");
    assert_f32(&eager[1], &[r, n], &(0..r * n).map(|k| yv[k] * maxes[k / n]).collect::<Vec<_>>(), "eager scaled");

    let plain = use_two_outputs(&[x.clone()]).unwrap();
    assert_f32(&plain[0], &[r, n], &want0, "eager function, output 0");
    assert_f32(&plain[1], &[r], &want1, "eager function, output 1");
    let c = compile(use_two_outputs);
    for _ in 0..2 {
        let got = c.call(&[x.clone()]).unwrap();
        assert_f32(&got[0], &[r, n], &want0, "compiled, output 0");
        assert_f32(&got[1], &[r], &want1, "compiled, output 1");
        assert_all_same(&got, &plain, 1e-6, "compiled vs eager");
    }
    assert_eq!(c.trace_count(), 1);
    let report = c.inspect(&[x], &[]).unwrap();
    println!("{report}");
    // Both outputs come from one kernel call; each is a single (unfused) node.
    assert_eq!(report.boundaries.iter().filter(|b| b.contains("custom_kernel")).count(), 2, "{report}");
    assert!(!report.groups.is_empty(), "the ops after the kernel should fuse: {report}");
}

/// `Compiled` can be handed to threads and stored.
#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync + 'static>() {}
    is::<Compiled>();
    is::<ArrayList>();
}

/// `zeros_like`/`ones_like`/`full_like` in a shapeless compiled function follow the call's shape
/// (mlx's `test_shapeless_compile_full_like`): traced at (1, 1, 32), called at (2, 2, 16).
#[test]
fn shapeless_like_constructors_follow_the_call_shape() {
    let _g = serial();
    let opts = || kiln::CompileOptions::new().shapeless(true);
    let zeros = kiln::compile_with(|a: &[Array]| Ok(vec![ops::zeros_like(&a[0])?]), opts());
    let filled = kiln::compile_with(|a: &[Array]| Ok(vec![ops::add(ops::full_like(&a[0], 2.5)?, &a[0])?]), opts());
    for shape in [[1usize, 1, 32], [2, 2, 16]] {
        let x = ops::ones(&shape, Dtype::F32).unwrap();
        let z = only(zeros.call(&[x.clone()]));
        assert_eq!((z.shape(), z.dtype()), (&shape[..], Dtype::F32));
        assert!(vals(&z).iter().all(|&v| v == 0.0));
        let f = only(filled.call(&[x.clone()]));
        assert_eq!(f.shape(), &shape[..]);
        assert!(vals(&f).iter().all(|&v| v == 3.5));
    }
    assert_eq!(zeros.trace_count(), 1, "one trace serves both shapes");
}


/// transpose(x @ w) of (2, 3, 4) @ (2, 4, 5), through `perm`, doubled.
fn transposed_product(a: &[Array], perm: &[i64]) -> Outputs {
    Ok(vec![ops::multiply(ops::transpose(ops::matmul(&a[0], &a[1])?, Some(perm))?, 2.0)?])
}

/// The float64 product `x @ w` of (2, 3, 4) and (2, 4, 5) row-major values, as [b][i][j].
fn product_f64(x: &[f64], w: &[f64]) -> Vec<Vec<Vec<f64>>> {
    (0..2).map(|b| (0..3).map(|i| (0..5).map(|j| (0..4).map(|k| x[b * 12 + i * 4 + k] * w[b * 20 + k * 5 + j]).sum()).collect()).collect()).collect()
}

#[test]
fn transposed_products_are_written_in_the_layout_read() {
    let _g = serial();
    let mut rng = Rng::new(31);
    let (xv, wv) = (rng.vec(24, -1.0, 1.0), rng.vec(40, -1.0, 1.0));
    let args = [f32a(&xv, &[2, 3, 4]), f32a(&wv, &[2, 4, 5])];
    let p = product_f64(&xv, &wv);
    // Swapping the last two axes: the product is computed as (2, 5, 3) directly.
    let swapped = compile(|a: &[Array]| transposed_product(a, &[0, 2, 1]));
    let want: Vec<f64> = (0..2).flat_map(|b| (0..5).flat_map(move |j| (0..3).map(move |i| (b, i, j)))).map(|(b, i, j)| 2.0 * p[b][i][j]).collect();
    assert_f32(&only(swapped.call(&args)), &[2, 5, 3], &want, "swapped");
    let r = swapped.inspect(&args, &[]).unwrap();
    let product = r.graph_after.lines().find(|l| l.contains("matmul(")).expect("a product");
    assert!(product.ends_with("(2, 5, 3)"), "the product is not written transposed: {r}");
    // Any other permutation keeps the product as it is, and transposes it.
    let other = compile(|a: &[Array]| transposed_product(a, &[1, 0, 2]));
    let want: Vec<f64> = (0..3).flat_map(|i| (0..2).flat_map(move |b| (0..5).map(move |j| (b, i, j)))).map(|(b, i, j)| 2.0 * p[b][i][j]).collect();
    assert_f32(&only(other.call(&args)), &[3, 2, 5], &want, "batch axis moved");
    let r = other.inspect(&args, &[]).unwrap();
    assert!(r.graph_after.lines().any(|l| l.contains("matmul(") && l.ends_with("(2, 3, 5)")), "{r}");
    // A product read elsewhere too stays one product.
    let shared = compile(|a: &[Array]| {
        let y = ops::matmul(&a[0], &a[1])?;
        Ok(vec![ops::transpose(&y, Some(&[0, 2, 1]))?, y])
    });
    let got = shared.call(&args).unwrap();
    let want: Vec<f64> = (0..2).flat_map(|b| (0..3).flat_map(move |i| (0..5).map(move |j| (b, i, j)))).map(|(b, i, j)| p[b][i][j]).collect();
    assert_f32(&got[1], &[2, 3, 5], &want, "shared product");
    let r = shared.inspect(&args, &[]).unwrap();
    assert_eq!(r.graph_after.matches("matmul(").count(), 1, "{r}");
    // The weight gradient of x @ w.T, compiled, against eager.
    let loss = |a: &[Array]| -> Outputs {
        Ok(vec![ops::sum(ops::sin(ops::matmul(&a[0], ops::transpose(&a[1], None)?)?)?, None, false)?])
    };
    let data = [f32a(&rng.vec(12, -1.0, 1.0), &[3, 4]), f32a(&rng.vec(20, -1.0, 1.0), &[5, 4])];
    let eager = grad(loss, &[1])(&data).unwrap();
    let step = compile(move |a: &[Array]| grad(loss, &[1])(a));
    assert_f32(&only(step.call(&data)), &[5, 4], &vals(&eager[0]), "weight gradient");
    let r = step.inspect(&data, &[]).unwrap();
    assert!(r.graph_after.lines().any(|l| l.contains("matmul(") && l.ends_with("(5, 4)")), "the gradient is transposed: {r}");
}
