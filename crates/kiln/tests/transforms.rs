//! Function transforms end to end: vjp, jvp, grad, value_and_grad, stop_gradient, higher order
//! derivatives, custom functions, checkpoint (values and peak memory), nesting of transforms,
//! functions that read values while traced, and the errors bad arguments give. Every result is
//! compared with an independent reference: analytic derivatives computed here in float64, central
//! finite differences, or the function evaluated eagerly. Per-op derivative sweeps live in
//! tests/autodiff.rs and batching rules in tests/vmap.rs.
#![allow(clippy::cloned_ref_to_slice_refs)] // `&[x.clone()]` is an argument list; the clone is a refcount

mod common;

use common::derivatives::check;
use common::{assert_close, check_err, Rng};
use kiln::ops::{self, AsArray};
use kiln::{
    checkpoint, depends, grad, jvp, random, stop_gradient, value_and_grad, vjp, vmap, Array, CustomFunction, Dtype, ErrorKind,
    Result,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What every function handed to a transform returns.
type Outputs = Result<Vec<Array>>;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A float64 array of `shape` holding `values`.
fn arr(values: &[f64], shape: &[usize]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

/// Random float64 values in [lo, hi), and an array of `shape` holding them.
fn rand(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> (Vec<f64>, Array) {
    let v = rng.vec(shape.iter().product(), lo, hi);
    let a = arr(&v, shape);
    (v, a)
}

/// The elements of `a` as float64.
fn vals(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

/// Asserts `got` has `shape` and holds `want` to float64 precision.
fn assert_array(got: &Array, shape: &[usize], want: &[f64], what: &str) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    assert_close(&vals(got), want, 1e-10, 1e-12, what);
}

/// `f` applied to each element.
fn map(x: &[f64], f: impl Fn(f64) -> f64) -> Vec<f64> {
    x.iter().map(|&v| f(v)).collect()
}

/// `f` applied to each pair of elements.
fn map2(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// The sum of all elements, as a scalar array.
fn sum(x: impl AsArray) -> Result<Array> {
    ops::sum(x, None, false)
}

/// A function of one output as the transforms take it.
fn single(f: impl Fn(&[Array]) -> Result<Array>) -> impl Fn(&[Array]) -> Outputs {
    move |a: &[Array]| Ok(vec![f(a)?])
}

/// `f`'s first output summed: a scalar loss.
fn summed(f: impl Fn(&[Array]) -> Outputs) -> impl Fn(&[Array]) -> Outputs {
    move |a: &[Array]| Ok(vec![sum(&f(a)?[0])?])
}

/// The only array of a transform's result.
fn only(r: Outputs) -> Array {
    let mut v = r.unwrap();
    assert_eq!(v.len(), 1, "expected one array");
    v.remove(0)
}

/// 1 - tanh(u)², the derivative of tanh.
fn sech2(u: f64) -> f64 {
    1.0 - u.tanh().powi(2)
}

/// Asserts `r` failed with `kind` from `op`, and that its message mentions each of `words`.
fn check_err_mentions<T: std::fmt::Debug>(r: Result<T>, kind: ErrorKind, op: &str, words: &[&str]) {
    let message = r.as_ref().err().map(|e| e.message.clone()).unwrap_or_default();
    check_err(r, kind, op);
    for w in words {
        assert!(message.contains(w), "{op}: message {message:?} should mention {w:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Functions under test
// ---------------------------------------------------------------------------------------------

/// `[sin(x) · y, Σ exp(x)]` for x of shape (2, 3) and y of shape (3,) (broadcast over rows).
fn two_outputs(a: &[Array]) -> Outputs {
    Ok(vec![ops::multiply(ops::sin(&a[0])?, &a[1])?, sum(ops::exp(&a[0])?)?])
}

/// `Σ x³ sin(x)`: derivative 3x² sin x + x³ cos x.
fn cube_sin(a: &[Array]) -> Result<Array> {
    let x = &a[0];
    sum(ops::multiply(ops::multiply(ops::square(x)?, x)?, ops::sin(x)?)?)
}

/// Second derivative of x³ sin(x).
fn cube_sin_d2(x: f64) -> f64 {
    6.0 * x * x.sin() + 6.0 * x * x * x.cos() - x.powi(3) * x.sin()
}

/// `x · sin(x)` elementwise (a checkpoint block).
fn sin_times_x(a: &[Array]) -> Outputs {
    Ok(vec![ops::multiply(ops::sin(&a[0])?, &a[0])?])
}

/// One example's loss `Σ tanh(w ⊙ x)`, x and w of shape (D,).
fn example_loss(a: &[Array]) -> Outputs {
    Ok(vec![sum(ops::tanh(ops::multiply(&a[0], &a[1])?)?)?])
}

// ---------------------------------------------------------------------------------------------
// vjp, jvp, grad, value_and_grad
// ---------------------------------------------------------------------------------------------

#[test]
fn vjp_is_the_transposed_jacobian_product() {
    let mut rng = Rng::new(1);
    let (x, xa) = rand(&mut rng, &[2, 3], -2.0, 2.0);
    let (y, ya) = rand(&mut rng, &[3], -2.0, 2.0);
    let (c0, c0a) = rand(&mut rng, &[2, 3], -1.0, 1.0);
    let c1 = 0.7;
    let (outs, cts) = vjp(two_outputs, &[xa, ya], &[c0a, arr(&[c1], &[])]).unwrap();
    let sin_y: Vec<f64> = (0..6).map(|i| x[i].sin() * y[i % 3]).collect();
    assert_array(&outs[0], &[2, 3], &sin_y, "vjp output 0");
    assert_array(&outs[1], &[], &[x.iter().map(|v| v.exp()).sum()], "vjp output 1");
    let gx: Vec<f64> = (0..6).map(|i| c0[i] * x[i].cos() * y[i % 3] + c1 * x[i].exp()).collect();
    let gy: Vec<f64> = (0..3).map(|j| (0..2).map(|r| c0[3 * r + j] * x[3 * r + j].sin()).sum()).collect();
    assert_array(&cts[0], &[2, 3], &gx, "vjp with respect to x");
    assert_array(&cts[1], &[3], &gy, "vjp with respect to y (summed over the broadcast rows)");
}

#[test]
fn jvp_is_the_jacobian_product() {
    let mut rng = Rng::new(2);
    let (x, xa) = rand(&mut rng, &[2, 3], -2.0, 2.0);
    let (y, ya) = rand(&mut rng, &[3], -2.0, 2.0);
    let (tx, txa) = rand(&mut rng, &[2, 3], -1.0, 1.0);
    let (ty, tya) = rand(&mut rng, &[3], -1.0, 1.0);
    let (outs, tans) = jvp(two_outputs, &[xa, ya], &[txa, tya]).unwrap();
    assert_array(&outs[1], &[], &[x.iter().map(|v| v.exp()).sum()], "jvp output 1");
    let t0: Vec<f64> = (0..6).map(|i| x[i].cos() * y[i % 3] * tx[i] + x[i].sin() * ty[i % 3]).collect();
    let t1: f64 = (0..6).map(|i| x[i].exp() * tx[i]).sum();
    assert_array(&tans[0], &[2, 3], &t0, "jvp tangent 0");
    assert_array(&tans[1], &[], &[t1], "jvp tangent 1");
}

#[test]
fn grad_and_value_and_grad_of_a_scalar_loss() {
    let mut rng = Rng::new(3);
    let (x, xa) = rand(&mut rng, &[7], -2.0, 2.0);
    let want = map(&x, |v| 3.0 * v * v * v.sin() + v.powi(3) * v.cos());
    assert_array(&only(grad(single(cube_sin), &[0])(&[xa.clone()])), &[7], &want, "grad");
    let (value, grads) = value_and_grad(single(cube_sin), &[0])(&[xa]).unwrap();
    let loss: f64 = x.iter().map(|v| v.powi(3) * v.sin()).sum();
    assert_array(&value[0], &[], &[loss], "value_and_grad value");
    assert_array(&grads[0], &[7], &want, "value_and_grad gradient");
}

#[test]
fn value_and_grad_returns_auxiliary_outputs_and_differentiates_only_the_loss() {
    let mut rng = Rng::new(4);
    let (x, xa) = rand(&mut rng, &[5], -1.0, 1.0);
    let (w, wa) = rand(&mut rng, &[5], -1.0, 1.0);
    // The loss first, then an array and a scalar that depend on x: as in mlx they come back
    // unchanged, and their own derivatives must not leak into the gradient.
    let f = |a: &[Array]| -> Outputs {
        let x = &a[0];
        Ok(vec![sum(ops::multiply(ops::sin(x)?, &a[1])?)?, ops::exp(x)?, sum(ops::square(x)?)?])
    };
    let (outs, grads) = value_and_grad(f, &[0])(&[xa.clone(), wa.clone()]).unwrap();
    assert_eq!(outs.len(), 3);
    let loss: f64 = x.iter().zip(&w).map(|(a, b)| a.sin() * b).sum();
    assert_array(&outs[0], &[], &[loss], "loss");
    assert_array(&outs[1], &[5], &map(&x, f64::exp), "aux array");
    assert_array(&outs[2], &[], &[x.iter().map(|v| v * v).sum()], "aux scalar");
    let want = map2(&x, &w, |a, b| a.cos() * b);
    assert_eq!(grads.len(), 1);
    assert_array(&grads[0], &[5], &want, "gradient of the loss alone");
    assert_array(&only(grad(f, &[0])(&[xa, wa])), &[5], &want, "grad with aux outputs");
}

/// `Σ a·b + c²·b` for a, b, c of shape (4,).
fn three_args(x: &[Array]) -> Result<Array> {
    let (a, b, c) = (&x[0], &x[1], &x[2]);
    sum(ops::add(ops::multiply(a, b)?, ops::multiply(ops::square(c)?, b)?)?)
}

#[test]
fn argnums_select_arguments_in_order_and_the_rest_are_constants() {
    let mut rng = Rng::new(5);
    let (a, aa) = rand(&mut rng, &[4], -1.0, 1.0);
    let (b, ba) = rand(&mut rng, &[4], -1.0, 1.0);
    let (c, ca) = rand(&mut rng, &[4], -1.0, 1.0);
    let args = [aa.clone(), ba.clone(), ca.clone()];
    let da = b.clone();
    let db: Vec<f64> = (0..4).map(|i| a[i] + c[i] * c[i]).collect();
    let dc: Vec<f64> = (0..4).map(|i| 2.0 * c[i] * b[i]).collect();

    let g = grad(single(three_args), &[2, 0])(&args).unwrap();
    assert_eq!(g.len(), 2);
    assert_array(&g[0], &[4], &dc, "argnums [2, 0]: first gradient is d/dc");
    assert_array(&g[1], &[4], &da, "argnums [2, 0]: second gradient is d/da");
    assert_array(&only(grad(single(three_args), &[1])(&args)), &[4], &db, "argnums [1]");
    let all = grad(single(three_args), &[0, 1, 2])(&args).unwrap();
    for (got, want, name) in [(&all[0], &da, "d/da"), (&all[1], &db, "d/db"), (&all[2], &dc, "d/dc")] {
        assert_array(got, &[4], want, name);
    }

    // An argument outside argnums is a constant even when it was computed from the one
    // differentiated: b = exp(a) lazily, yet d/da Σ a·b is b, not b + a·exp(a).
    let b_of_a = ops::exp(&aa).unwrap();
    let zeros = ops::zeros(&[4], Dtype::F64).unwrap();
    let g = only(grad(single(three_args), &[0])(&[aa.clone(), b_of_a, zeros]));
    assert_array(&g, &[4], &map(&a, f64::exp), "constant argument computed from the variable");

    // The same array passed as two arguments is two variables.
    let prod = single(|x: &[Array]| sum(ops::multiply(&x[0], &x[1])?));
    let g = grad(prod, &[0, 1])(&[aa.clone(), aa]).unwrap();
    assert_array(&g[0], &[4], &a, "d/dx0 of x0·x1 with x0 = x1");
    assert_array(&g[1], &[4], &a, "d/dx1 of x0·x1 with x0 = x1");
}

#[test]
fn integer_and_boolean_results_carry_no_gradient() {
    let mut rng = Rng::new(6);
    let (_, xa) = rand(&mut rng, &[4], -2.0, 2.0);
    let f = |a: &[Array]| -> Outputs {
        let x = &a[0];
        Ok(vec![ops::multiply(x, 2.0)?, ops::astype(ops::multiply(x, 3.0)?, Dtype::I32)?, ops::greater(x, 0.0)?])
    };
    // Non-zero cotangents for the integer and boolean outputs: they must be ignored.
    let (c, ca) = rand(&mut rng, &[4], -1.0, 1.0);
    let cts = [ca, ops::full(&[4], 5, Some(Dtype::I32)).unwrap(), ops::ones(&[4], Dtype::Bool).unwrap()];
    let (_, g) = vjp(f, &[xa.clone()], &cts).unwrap();
    assert_array(&g[0], &[4], &map(&c, |v| 2.0 * v), "vjp ignores integer and boolean outputs");

    let (t, ta) = rand(&mut rng, &[4], -1.0, 1.0);
    let (outs, tans) = jvp(f, &[xa.clone()], &[ta.clone()]).unwrap();
    assert_array(&tans[0], &[4], &map(&t, |v| 2.0 * v), "jvp tangent of the float output");
    // The integer output's tangent has its dtype; the boolean one's the input tangent's (mlx).
    assert_eq!(tans[1].dtype(), outs[1].dtype(), "the integer output's tangent has its dtype");
    assert_eq!(tans[2].dtype(), ta.dtype(), "the boolean output's tangent has the tangent's dtype");
    for k in [1, 2] {
        assert_array(&tans[k], &[4], &[0.0; 4], &format!("jvp tangent {k} of a non-float output is zero"));
    }

    // A path through an integer cast contributes nothing to the gradient.
    let through_int = single(|a: &[Array]| {
        let i = ops::astype(ops::multiply(&a[0], 3.0)?, Dtype::I32)?;
        ops::add(sum(ops::astype(i, Dtype::F64)?)?, sum(&a[0])?)
    });
    assert_array(&only(grad(through_int, &[0])(&[xa.clone()])), &[4], &[1.0; 4], "gradient through an int cast");

    // Asking for the gradient of an integer or boolean loss says so.
    let int_loss = single(|a: &[Array]| sum(ops::astype(&a[0], Dtype::I32)?));
    check_err_mentions(grad(int_loss, &[0])(&[xa.clone()]), ErrorKind::Dtype, "grad", &["int32"]);
    let bool_loss = single(|a: &[Array]| ops::all(ops::greater(&a[0], -10.0)?, None, false));
    check_err_mentions(value_and_grad(bool_loss, &[0])(&[xa]), ErrorKind::Dtype, "grad", &["bool"]);

    // Integer arguments have gradients computed in their dtype (mlx): d/dx sum(10x + x²) = 10 + 2x.
    let xi = Array::from_slice(&[-3i32, 0, 2, 5], &[4]).unwrap();
    let poly = single(|a: &[Array]| sum(ops::add(ops::multiply(&a[0], 10)?, ops::multiply(&a[0], &a[0])?)?));
    let gi = only(grad(poly, &[0])(&[xi.clone()]));
    assert_eq!(gi.dtype(), Dtype::I32, "an integer argument's gradient keeps its dtype");
    assert_array(&gi, &[4], &[4.0, 10.0, 14.0, 20.0], "gradient of an integer argument");
    // Through a float computation it is cast back: d/dx sum(1.5 x) = 1.5, truncated to 1.
    let scaled = single(|a: &[Array]| sum(ops::multiply(ops::astype(&a[0], Dtype::F32)?, 1.5)?));
    assert_array(&only(grad(scaled, &[0])(&[xi.clone()])), &[4], &[1.0; 4], "gradient through an int-to-float cast");
    let flags = Array::from_slice(&[true, false], &[2]).unwrap();
    let of_flags = single(|a: &[Array]| sum(ops::astype(&a[0], Dtype::F32)?));
    check_err_mentions(grad(of_flags, &[0])(&[flags]), ErrorKind::Dtype, "grad", &["bool"]);

    // Indices taken from a differentiated argument have no vjp: the error names stop_gradient.
    let taken = |a: &[Array]| -> Outputs { Ok(vec![ops::take(&a[0], &a[1], Some(0))?]) };
    let (x, idx) = (arr(&[1.0, 2.0, 3.0], &[3]), Array::from_slice(&[2i32, 0], &[2]).unwrap());
    let ones = arr(&[1.0, 1.0], &[2]);
    let r = vjp(taken, &[x.clone(), idx.clone()], std::slice::from_ref(&ones));
    check_err_mentions(r, ErrorKind::Value, "gather", &["stop_gradient"]);
    let stopped = |a: &[Array]| -> Outputs { Ok(vec![ops::take(&a[0], stop_gradient(&a[1])?, Some(0))?]) };
    let (_, g) = vjp(stopped, &[x, idx], &[ones]).unwrap();
    assert_array(&g[0], &[3], &[1.0, 0.0, 1.0], "vjp of take with stopped indices");
    assert_array(&g[1], &[2], &[0.0, 0.0], "no gradient for the stopped indices");
}

#[test]
fn identity_repeated_constant_and_unused_parts() {
    let mut rng = Rng::new(19);
    let (x, xa) = rand(&mut rng, &[3], -1.0, 1.0);
    let (c0, c0a) = rand(&mut rng, &[3], -1.0, 1.0);
    let (c1, c1a) = rand(&mut rng, &[3], -1.0, 1.0);
    // The input returned as is: the cotangent and the tangent pass straight through.
    let identity = |a: &[Array]| -> Outputs { Ok(vec![a[0].clone()]) };
    let (outs, g) = vjp(identity, &[xa.clone()], &[c0a.clone()]).unwrap();
    assert_array(&outs[0], &[3], &x, "identity value");
    assert_array(&g[0], &[3], &c0, "identity vjp");
    assert_array(&only(jvp(identity, &[xa.clone()], &[c1a.clone()]).map(|r| r.1)), &[3], &c1, "identity jvp");
    // One array returned twice: the cotangents of both outputs add up.
    let twice = |a: &[Array]| -> Outputs {
        let y = ops::sin(&a[0])?;
        Ok(vec![y.clone(), y])
    };
    let (_, g) = vjp(twice, &[xa.clone()], &[c0a.clone(), c1a]).unwrap();
    let want: Vec<f64> = (0..3).map(|i| x[i].cos() * (c0[i] + c1[i])).collect();
    assert_array(&g[0], &[3], &want, "vjp of a repeated output");
    // Outputs that do not depend on the input: zero gradient and tangent.
    let constant = |a: &[Array]| -> Outputs { Ok(vec![ops::ones(&[2], Dtype::F64)?, ops::zeros_like(&a[0])?]) };
    let cts = [ops::ones(&[2], Dtype::F64).unwrap(), c0a.clone()];
    assert_array(&only(vjp(constant, &[xa.clone()], &cts).map(|r| r.1)), &[3], &[0.0; 3], "vjp of constants");
    let (_, t) = jvp(constant, &[xa.clone()], &[c0a]).unwrap();
    assert_array(&t[0], &[2], &[0.0; 2], "jvp of a constant");
    // An unused argument gets zeros of its shape and dtype; gradients take their argument's dtype
    // even when the loss is computed in float64.
    let x32 = ops::astype(&xa, Dtype::F32).unwrap();
    let y32 = ops::zeros(&[2, 2], Dtype::F32).unwrap();
    let loss = single(|a: &[Array]| sum(ops::square(ops::astype(&a[0], Dtype::F64)?)?));
    let g = grad(loss, &[0, 1])(&[x32.clone(), y32]).unwrap();
    assert_eq!((g[0].dtype(), g[1].dtype()), (Dtype::F32, Dtype::F32));
    assert_close(&vals(&g[0]), &map(&vals(&x32), |v| 2.0 * v), 1e-7, 0.0, "float32 argument");
    assert_array(&g[1], &[2, 2], &[0.0; 4], "unused argument");
}

#[test]
fn deep_graphs_do_not_overflow_the_stack() {
    // 40 000 nodes: y ↦ 0.9999 y + 0.0001, 20 000 times. Derivative 0.9999^20000.
    const STEPS: i32 = 20_000;
    let chain = single(|a: &[Array]| {
        let mut y = a[0].clone();
        for _ in 0..STEPS {
            y = ops::add(ops::multiply(&y, 0.9999)?, 0.0001)?;
        }
        sum(&y)
    });
    let x = arr(&[0.5, 1.5], &[2]);
    let slope = 0.9999f64.powi(STEPS);
    assert_close(&vals(&only(grad(&chain, &[0])(&[x.clone()]))), &[slope; 2], 1e-9, 0.0, "grad");
    let tangent = only(jvp(&chain, &[x], &[arr(&[1.0, 2.0], &[2])]).map(|r| r.1));
    assert_close(&vals(&tangent), &[3.0 * slope], 1e-9, 0.0, "jvp");
}

// ---------------------------------------------------------------------------------------------
// stop_gradient
// ---------------------------------------------------------------------------------------------

#[test]
fn stop_gradient_blocks_gradients_and_tangents() {
    let mut rng = Rng::new(7);
    let (x, xa) = rand(&mut rng, &[5], -2.0, 2.0);
    assert_array(&stop_gradient(&xa).unwrap(), &[5], &x, "stop_gradient keeps the value");
    // x · sg(x) + sg(sin x): derivative x (the stopped factor is a constant), tangent t · x.
    let f = single(|a: &[Array]| {
        let x = &a[0];
        ops::add(ops::multiply(x, stop_gradient(x)?)?, stop_gradient(&ops::sin(x)?)?)
    });
    let value = map(&x, |v| v * v + v.sin());
    let (c, ca) = rand(&mut rng, &[5], -1.0, 1.0);
    let (outs, g) = vjp(&f, &[xa.clone()], &[ca]).unwrap();
    assert_array(&outs[0], &[5], &value, "value through stop_gradient");
    assert_array(&g[0], &[5], &map2(&c, &x, |c, x| c * x), "vjp through stop_gradient");
    let (t, ta) = rand(&mut rng, &[5], -1.0, 1.0);
    let (_, tans) = jvp(&f, &[xa.clone()], &[ta]).unwrap();
    assert_array(&tans[0], &[5], &map2(&t, &x, |t, x| t * x), "jvp through stop_gradient");
    // Fully stopped: zero gradient.
    let stopped = single(|a: &[Array]| sum(ops::square(stop_gradient(&a[0])?)?));
    assert_array(&only(grad(&stopped, &[0])(&[xa.clone()])), &[5], &[0.0; 5], "grad of a stopped loss");
    // Σ x² · sg(x): gradient 2x · x (not 3x²), and under grad∘grad 2x (not 6x).
    let g = grad(single(|a: &[Array]| sum(ops::multiply(ops::square(&a[0])?, stop_gradient(&a[0])?)?)), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[5], &map(&x, |v| 2.0 * v * v), "grad with a stopped factor");
    let gg = grad(summed(&g), &[0]);
    assert_array(&only(gg(&[xa])), &[5], &map(&x, |v| 2.0 * v), "grad of grad with a stopped factor");
}

// ---------------------------------------------------------------------------------------------
// Higher order
// ---------------------------------------------------------------------------------------------

#[test]
fn grad_of_grad_matches_the_analytic_second_derivative_and_finite_differences() {
    let mut rng = Rng::new(8);
    let (x, xa) = rand(&mut rng, &[6], -2.0, 2.0);
    let df = grad(single(cube_sin), &[0]);
    // Σ f'(x_i) has gradient f''(x_i).
    let d2f = grad(summed(&df), &[0]);
    assert_array(&only(d2f(&[xa.clone()])), &[6], &map(&x, cube_sin_d2), "grad of grad");
    // The derivatives of f' (its vjp and jvp, i.e. Hessian products) against differences of f'.
    check("grad of x³ sin x", &|a: &[Array]| Ok(df(a)?.remove(0)), &[xa.clone()], 81);
    // Third order: the derivatives of f'' against differences of f''.
    check("grad of grad of x³ sin x", &|a: &[Array]| Ok(d2f(a)?.remove(0)), &[xa], 82);
}

/// `Σ tanh(A x)` for the fixed matrix `a` and x of shape (4,).
fn tanh_layer(a: Array) -> impl Fn(&[Array]) -> Outputs {
    move |x: &[Array]| Ok(vec![sum(ops::tanh(ops::matmul(&a, &x[0])?)?)?])
}

#[test]
fn hessian_vector_products_agree_in_every_nesting_order() {
    let mut rng = Rng::new(9);
    let (m, ma) = rand(&mut rng, &[3, 4], -1.0, 1.0);
    let (x, xa) = rand(&mut rng, &[4], -1.0, 1.0);
    let (v, va) = rand(&mut rng, &[4], -1.0, 1.0);
    // z = A x, ∇ = Aᵀ sech²(z), H v = Aᵀ (-2 tanh(z) sech²(z) ⊙ A v).
    let times = |vec: &[f64]| -> Vec<f64> { (0..3).map(|i| (0..4).map(|j| m[4 * i + j] * vec[j]).sum()).collect() };
    let times_t = |vec: &[f64]| -> Vec<f64> { (0..4).map(|j| (0..3).map(|i| m[4 * i + j] * vec[i]).sum()).collect() };
    let z = times(&x);
    let gradient = times_t(&map(&z, sech2));
    let h = map(&z, |z| -2.0 * z.tanh() * sech2(z));
    let hv = times_t(&map2(&h, &times(&v), |a, b| a * b));

    let f = tanh_layer(ma);
    let g = grad(&f, &[0]);
    // Forward over reverse: jvp of grad, and jvp of vjp.
    let (outs, tans) = jvp(&g, &[xa.clone()], &[va.clone()]).unwrap();
    assert_array(&outs[0], &[4], &gradient, "jvp∘grad primal output");
    assert_array(&tans[0], &[4], &hv, "jvp∘grad");
    let by_vjp = |a: &[Array]| -> Outputs { Ok(vjp(&f, a, &[Array::scalar(1.0f64)])?.1) };
    assert_array(&only(jvp(by_vjp, &[xa.clone()], &[va.clone()]).map(|r| r.1)), &[4], &hv, "jvp∘vjp");
    // Reverse over forward: grad of x ↦ ∇f(x)·v computed by jvp.
    let directional = |a: &[Array]| -> Outputs { Ok(jvp(&f, a, &[va.clone()])?.1) };
    assert_array(&only(grad(directional, &[0])(&[xa.clone()])), &[4], &hv, "grad∘jvp");
    // Reverse over reverse: grad of x ↦ ⟨∇f(x), v⟩.
    let dot = single(|a: &[Array]| sum(ops::multiply(&g(a)?[0], &va)?));
    assert_array(&only(grad(dot, &[0])(&[xa.clone()])), &[4], &hv, "grad∘grad");
    // The derivatives of the vjp function (jvp∘vjp, vjp∘vjp) against its finite differences.
    check("vjp of Σ tanh(Ax)", &|a: &[Array]| Ok(by_vjp(a)?.remove(0)), &[xa], 91);
}

// ---------------------------------------------------------------------------------------------
// Custom functions
// ---------------------------------------------------------------------------------------------

/// exp with a deliberately wrong vjp (2 · cotangent) and no jvp.
fn exp_with_vjp() -> impl Fn(&[Array]) -> Outputs {
    CustomFunction::new("exp_vjp", |x: &[Array]| Ok(vec![ops::exp(&x[0])?]))
        .vjp(|_args, cts, _outs| Ok(vec![ops::multiply(&cts[0], 2.0)?]))
        .into_fn()
}

/// exp with a deliberately wrong jvp (3 · tangent) and no vjp.
fn exp_with_jvp() -> impl Fn(&[Array]) -> Outputs {
    CustomFunction::new("exp_jvp", |x: &[Array]| Ok(vec![ops::exp(&x[0])?]))
        .jvp(|_args, tans| Ok(vec![ops::multiply(&tans[0], 3.0)?]))
        .into_fn()
}

#[test]
fn custom_vjp_and_jvp_are_used_and_missing_rules_fall_back_to_the_function() {
    let mut rng = Rng::new(10);
    let (x, xa) = rand(&mut rng, &[4], -1.0, 1.0);
    let (c, ca) = rand(&mut rng, &[4], -1.0, 1.0);
    let (t, ta) = rand(&mut rng, &[4], -1.0, 1.0);
    let twice = map(&c, |v| 2.0 * v);
    let thrice = map(&t, |v| 3.0 * v);
    let exp_c = map2(&x, &c, |x, c| x.exp() * c);
    let exp_t = map2(&x, &t, |x, t| x.exp() * t);

    let f = exp_with_vjp();
    assert_array(&only(f(&[xa.clone()])), &[4], &map(&x, f64::exp), "custom function value");
    let (outs, g) = vjp(&f, &[xa.clone()], &[ca.clone()]).unwrap();
    assert_array(&outs[0], &[4], &map(&x, f64::exp), "vjp output of a custom function");
    assert_array(&g[0], &[4], &twice, "custom vjp used by vjp");
    let loss = single(|a: &[Array]| sum(ops::multiply(&f(a)?[0], &ca)?));
    assert_array(&only(grad(loss, &[0])(&[xa.clone()])), &[4], &twice, "custom vjp used by grad");
    assert_array(&only(jvp(&f, &[xa.clone()], &[ta.clone()]).map(|r| r.1)), &[4], &exp_t, "no custom jvp: true jvp");

    let f = exp_with_jvp();
    assert_array(&only(jvp(&f, &[xa.clone()], &[ta.clone()]).map(|r| r.1)), &[4], &thrice, "custom jvp used by jvp");
    assert_array(&only(vjp(&f, &[xa.clone()], &[ca]).map(|r| r.1)), &[4], &exp_c, "no custom vjp: true vjp");
    // Reverse over the custom jvp: Σ jvp(x, t) = Σ 3t has gradient 0 in x and 3 in t.
    let tangent_sum = single(|a: &[Array]| sum(&jvp(&f, &a[..1], &a[1..])?.1[0]));
    let g = grad(tangent_sum, &[0, 1])(&[xa, ta]).unwrap();
    assert_array(&g[0], &[4], &[0.0; 4], "grad∘jvp of a custom jvp, d/dx");
    assert_array(&g[1], &[4], &[3.0; 4], "grad∘jvp of a custom jvp, d/dt");
}

/// A user kernel is opaque to jvp, so a jvp through it is an error naming it; wrapped in a custom
/// function with a jvp rule, the rule gives the tangent (the kernel inside needs none).
#[test]
fn custom_jvp_rules_see_past_user_kernels() {
    let doubled = |x: &[Array]| -> Outputs {
        kiln::custom_kernel("double", &x[..1], &[(x[0].shape().to_vec(), Dtype::F32)], |k| {
            let v: Vec<f32> = k.input::<f32>(0)?.iter().map(|v| 2.0 * v).collect();
            k.output::<f32>(0)?.copy_from_slice(&v);
            Ok(())
        })
    };
    let x = Array::from_vec(vec![1.0f32, -2.0]);
    let t = Array::from_vec(vec![0.5f32, 4.0]);
    let err = jvp(doubled, &[x.clone()], &[t.clone()]).unwrap_err();
    assert!(err.to_string().contains("'double'"), "{err}");
    let wrapped = CustomFunction::new("double", doubled).jvp(|_, tans| Ok(vec![ops::multiply(&tans[0], 2.0)?])).into_fn();
    let (y, ty) = jvp(&wrapped, &[x], &[t]).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![2.0, -4.0]);
    assert_eq!(ty[0].to_vec::<f32>().unwrap(), vec![1.0, 8.0]);
}

#[test]
fn custom_rules_survive_vmap() {
    let mut rng = Rng::new(20);
    let (x, xa) = rand(&mut rng, &[2, 3], -1.0, 1.0);
    let (c, ca) = rand(&mut rng, &[2, 3], -1.0, 1.0);
    let batched = vmap(exp_with_vjp(), &[Some(0)], &[Some(0)]);
    assert_array(&only(batched(&[xa.clone()])), &[2, 3], &map(&x, f64::exp), "vmap of a custom function");
    let g = grad(single(|a: &[Array]| sum(ops::multiply(&batched(a)?[0], &ca)?)), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[2, 3], &map(&c, |v| 2.0 * v), "grad∘vmap uses the custom vjp");
    let batched = vmap(exp_with_jvp(), &[Some(0)], &[Some(0)]);
    let tangent = only(jvp(&batched, &[xa], &[ca.clone()]).map(|r| r.1));
    assert_array(&tangent, &[2, 3], &map(&c, |v| 3.0 * v), "jvp∘vmap uses the custom jvp");
}

#[test]
fn custom_function_with_several_arguments_and_outputs() {
    let mut rng = Rng::new(11);
    let (a, aa) = rand(&mut rng, &[3], -1.0, 1.0);
    let (b, ba) = rand(&mut rng, &[3], -1.0, 1.0);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    // Outputs [a·b, a + b, sin a]; rules deliberately unlike the true derivatives, one of them
    // reading the outputs the vjp is given.
    let f = CustomFunction::new("three_outputs", |x: &[Array]| {
        Ok(vec![ops::multiply(&x[0], &x[1])?, ops::add(&x[0], &x[1])?, ops::sin(&x[0])?])
    })
    .vjp(move |_args, cts, outs| {
        counter.fetch_add(1, Ordering::SeqCst);
        let da = ops::add(
            ops::add(ops::multiply(&cts[0], 2.0)?, ops::multiply(&cts[1], 3.0)?)?,
            ops::multiply(&cts[2], &outs[0])?,
        )?;
        let db = ops::subtract(ops::multiply(&cts[0], 5.0)?, &cts[1])?;
        Ok(vec![da, db])
    })
    .jvp(|args, tans| {
        Ok(vec![
            ops::add(ops::multiply(&tans[0], 7.0)?, &tans[1])?,
            ops::multiply(&tans[1], 11.0)?,
            ops::multiply(&args[1], &tans[0])?,
        ])
    })
    .into_fn();

    let outs = f(&[aa.clone(), ba.clone()]).unwrap();
    assert_array(&outs[0], &[3], &map2(&a, &b, |a, b| a * b), "output 0");
    assert_array(&outs[1], &[3], &map2(&a, &b, |a, b| a + b), "output 1");
    assert_array(&outs[2], &[3], &map(&a, f64::sin), "output 2");

    // A loss using outputs 0 and 2: the rule runs once, with a zero cotangent for output 1.
    let (w0, w0a) = rand(&mut rng, &[3], -1.0, 1.0);
    let (w2, w2a) = rand(&mut rng, &[3], -1.0, 1.0);
    let loss = single(|x: &[Array]| {
        let o = f(x)?;
        ops::add(sum(ops::multiply(&o[0], &w0a)?)?, sum(ops::multiply(&o[2], &w2a)?)?)
    });
    let g = grad(&loss, &[0, 1])(&[aa.clone(), ba.clone()]).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the vjp runs once per call, for all its outputs");
    let da: Vec<f64> = (0..3).map(|i| 2.0 * w0[i] + w2[i] * a[i] * b[i]).collect();
    assert_array(&g[0], &[3], &da, "custom vjp, argument 0");
    assert_array(&g[1], &[3], &map(&w0, |w| 5.0 * w), "custom vjp, argument 1");
    // Only output 1 used.
    let (w1, w1a) = rand(&mut rng, &[3], -1.0, 1.0);
    let g =
        grad(single(|x: &[Array]| sum(ops::multiply(&f(x)?[1], &w1a)?)), &[0, 1])(&[aa.clone(), ba.clone()]).unwrap();
    assert_array(&g[0], &[3], &map(&w1, |w| 3.0 * w), "only output 1, argument 0");
    assert_array(&g[1], &[3], &map(&w1, |w| -w), "only output 1, argument 1");

    let (ta, taa) = rand(&mut rng, &[3], -1.0, 1.0);
    let (tb, tba) = rand(&mut rng, &[3], -1.0, 1.0);
    let (_, tans) = jvp(&f, &[aa.clone(), ba.clone()], &[taa.clone(), tba]).unwrap();
    assert_array(&tans[0], &[3], &map2(&ta, &tb, |ta, tb| 7.0 * ta + tb), "custom jvp, output 0");
    assert_array(&tans[1], &[3], &map(&tb, |tb| 11.0 * tb), "custom jvp, output 1");
    assert_array(&tans[2], &[3], &map2(&b, &ta, |b, ta| b * ta), "custom jvp, output 2");
    // Only a differentiated: the rule gets a zero tangent for b.
    let (_, tans) = jvp(|x: &[Array]| f(&[x[0].clone(), ba.clone()]), &[aa], &[taa]).unwrap();
    assert_array(&tans[0], &[3], &map(&ta, |t| 7.0 * t), "custom jvp with a constant argument, output 0");
    assert_array(&tans[1], &[3], &[0.0; 3], "custom jvp with a constant argument, output 1");
}

#[test]
fn custom_vjp_is_differentiated_again_under_grad_of_grad() {
    let mut rng = Rng::new(12);
    let (x, xa) = rand(&mut rng, &[5], -2.0, 2.0);
    // x³ whose vjp claims 5x² (true: 3x²): grad is 5x², grad of grad 10x (true: 6x).
    let cube = CustomFunction::new("cube", |a: &[Array]| Ok(vec![ops::multiply(ops::square(&a[0])?, &a[0])?]))
        .vjp(|args, cts, _outs| Ok(vec![ops::multiply(&cts[0], ops::multiply(ops::square(&args[0])?, 5.0)?)?]))
        .into_fn();
    let g = grad(summed(&cube), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[5], &map(&x, |v| 5.0 * v * v), "grad");
    let gg = grad(summed(&g), &[0]);
    assert_array(&only(gg(&[xa.clone()])), &[5], &map(&x, |v| 10.0 * v), "grad of grad");
    let (t, ta) = rand(&mut rng, &[5], -1.0, 1.0);
    let (_, tans) = jvp(&g, &[xa], &[ta]).unwrap();
    assert_array(&tans[0], &[5], &map2(&x, &t, |x, t| 10.0 * x * t), "jvp of grad");
}

/// `x · Σ y` whose vjp and jvp return the given arrays, whatever they are asked.
fn product_returning(name: &str, vjp_out: Vec<Array>, jvp_out: Vec<Array>) -> impl Fn(&[Array]) -> Outputs {
    CustomFunction::new(name, |a: &[Array]| Ok(vec![ops::multiply(&a[0], sum(&a[1])?)?]))
        .vjp(move |_args, _cts, _outs| Ok(vjp_out.clone()))
        .jvp(move |_args, _tans| Ok(jvp_out.clone()))
        .into_fn()
}

#[test]
fn custom_rules_returning_the_wrong_number_or_shape_are_errors() {
    let full = |shape: &[usize], v: f64| ops::full(shape, v, Some(Dtype::F64)).unwrap();
    let args = [full(&[3], 0.5), full(&[2], 2.0)];
    let (ct, tans) = (full(&[3], 1.0), [full(&[3], 1.0), full(&[2], 1.0)]);
    // Well-formed rules are used as given.
    let fine = product_returning("fine", vec![full(&[3], 7.0), full(&[2], 8.0)], vec![full(&[3], 9.0)]);
    let (_, g) = vjp(&fine, &args, &[ct.clone()]).unwrap();
    assert_array(&g[0], &[3], &[7.0; 3], "custom cotangent 0");
    assert_array(&g[1], &[2], &[8.0; 2], "custom cotangent 1");
    assert_array(&only(jvp(&fine, &args, &tans).map(|r| r.1)), &[3], &[9.0; 3], "custom tangent");

    let one = product_returning("one_cotangent", vec![full(&[3], 7.0)], vec![]);
    check_err_mentions(
        vjp(one, &args, &[ct.clone()]),
        ErrorKind::Value,
        "one_cotangent",
        &["1 cotangents", "2 arguments"],
    );
    let misshapen = product_returning("wrong_shape", vec![full(&[3], 7.0), full(&[3], 8.0)], vec![]);
    let r = grad(summed(&misshapen), &[0])(&args);
    check_err_mentions(r, ErrorKind::Shape, "wrong_shape", &["(3,)", "(2,)", "argument 1"]);
    let two = product_returning("two_tangents", vec![], vec![full(&[3], 1.0), full(&[3], 1.0)]);
    check_err_mentions(jvp(two, &args, &tans), ErrorKind::Value, "two_tangents", &["2 tangents", "1 outputs"]);
    let bad = product_returning("bad_tangent", vec![], vec![full(&[2], 1.0)]);
    check_err_mentions(jvp(bad, &args, &tans), ErrorKind::Shape, "bad_tangent", &["(2,)", "(3,)"]);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------------------------

/// Two arguments, two outputs: `[x · y, sin(x) · y]`.
fn checkpoint_pair(a: &[Array]) -> Outputs {
    Ok(vec![ops::multiply(&a[0], &a[1])?, ops::multiply(ops::sin(&a[0])?, &a[1])?])
}

#[test]
fn checkpoint_gives_the_same_values_and_gradients() {
    let mut rng = Rng::new(13);
    let (x, xa) = rand(&mut rng, &[5], -2.0, 2.0);
    let (y, ya) = rand(&mut rng, &[5], -2.0, 2.0);
    let (w, wa) = rand(&mut rng, &[5], -1.0, 1.0);
    // loss = Σ (x y + w · sin(x) y), once plain and once checkpointed.
    let loss_of = |block: &dyn Fn(&[Array]) -> Outputs, a: &[Array]| -> Result<Array> {
        let o = block(a)?;
        ops::add(sum(&o[0])?, sum(ops::multiply(&o[1], &wa)?)?)
    };
    let ck = checkpoint(checkpoint_pair);
    let plain = value_and_grad(single(|a: &[Array]| loss_of(&checkpoint_pair, a)), &[0, 1]);
    let saved = value_and_grad(single(|a: &[Array]| loss_of(&ck, a)), &[0, 1]);
    let args = [xa.clone(), ya.clone()];
    let ((pv, pg), (cv, cg)) = (plain(&args).unwrap(), saved(&args).unwrap());
    let value: f64 = (0..5).map(|i| x[i] * y[i] + w[i] * x[i].sin() * y[i]).sum();
    let dx: Vec<f64> = (0..5).map(|i| y[i] + w[i] * x[i].cos() * y[i]).collect();
    let dy: Vec<f64> = (0..5).map(|i| x[i] + w[i] * x[i].sin()).collect();
    for (v, g, name) in [(&pv, &pg, "plain"), (&cv, &cg, "checkpointed")] {
        assert_array(&v[0], &[], &[value], &format!("{name} value"));
        assert_array(&g[0], &[5], &dx, &format!("{name} d/dx"));
        assert_array(&g[1], &[5], &dy, &format!("{name} d/dy"));
    }
    assert_close(&vals(&cg[0]), &vals(&pg[0]), 1e-14, 0.0, "checkpointed d/dx equals plain");
    assert_close(&vals(&cg[1]), &vals(&pg[1]), 1e-14, 0.0, "checkpointed d/dy equals plain");
    // Forward mode has no custom rule: it goes through the function.
    let (t, ta) = rand(&mut rng, &[5], -1.0, 1.0);
    let (_, tans) = jvp(&ck, &[xa, ya], &[ta, ops::zeros(&[5], Dtype::F64).unwrap()]).unwrap();
    assert_array(&tans[1], &[5], &(0..5).map(|i| x[i].cos() * y[i] * t[i]).collect::<Vec<_>>(), "jvp of checkpoint");
}

#[test]
fn checkpoint_nests_with_grad_and_vmap() {
    let mut rng = Rng::new(14);
    let (x, xa) = rand(&mut rng, &[6], -2.0, 2.0);
    let block = checkpoint(sin_times_x);
    assert_array(&only(block(&[xa.clone()])), &[6], &map(&x, |v| v * v.sin()), "checkpoint value");
    // grad∘checkpoint and grad∘grad∘checkpoint.
    let g = grad(summed(&block), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[6], &map(&x, |v| v * v.cos() + v.sin()), "grad∘checkpoint");
    let gg = grad(summed(&g), &[0]);
    assert_array(&only(gg(&[xa])), &[6], &map(&x, |v| 2.0 * v.cos() - v * v.sin()), "grad∘grad∘checkpoint");

    // checkpoint inside vmap, and grad of that.
    let (xs, xsa) = rand(&mut rng, &[3, 4], -1.0, 1.0);
    let (w, wa) = rand(&mut rng, &[4], -1.0, 1.0);
    let batched = vmap(checkpoint(example_loss), &[Some(0), None], &[Some(0)]);
    let per_example: Vec<f64> = (0..3).map(|i| (0..4).map(|j| (w[j] * xs[4 * i + j]).tanh()).sum()).collect();
    assert_array(&only(batched(&[xsa.clone(), wa.clone()])), &[3], &per_example, "vmap∘checkpoint");
    let g = grad(summed(&batched), &[0, 1])(&[xsa, wa]).unwrap();
    let (dx, dw) = batch_loss_gradients(&xs, &w);
    assert_array(&g[0], &[3, 4], &dx, "grad∘vmap∘checkpoint, d/dX");
    assert_array(&g[1], &[4], &dw, "grad∘vmap∘checkpoint, d/dw");
}

/// Analytic gradients of Σᵢ Σⱼ tanh(wⱼ xᵢⱼ) for X of shape (3, 4): (d/dX, d/dw).
fn batch_loss_gradients(xs: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let dx = (0..12).map(|k| w[k % 4] * sech2(w[k % 4] * xs[k])).collect();
    let dw = (0..4).map(|j| (0..3).map(|i| xs[4 * i + j] * sech2(w[j] * xs[4 * i + j])).sum()).collect();
    (dx, dw)
}

#[test]
fn checkpoint_of_nested_and_unusual_blocks() {
    let mut rng = Rng::new(21);
    let (x, xa) = rand(&mut rng, &[4], -2.0, 2.0);
    // A checkpoint inside a checkpoint: x ↦ sin(x) · x with sin checkpointed on its own.
    let inner = checkpoint(|a: &[Array]| Ok(vec![ops::sin(&a[0])?]));
    let outer = checkpoint(move |a: &[Array]| Ok(vec![ops::multiply(&inner(a)?[0], &a[0])?]));
    let g = grad(summed(&outer), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[4], &map(&x, |v| v * v.cos() + v.sin()), "nested checkpoints");
    let gg = grad(summed(&g), &[0]);
    assert_array(&only(gg(&[xa.clone()])), &[4], &map(&x, |v| 2.0 * v.cos() - v * v.sin()), "grad∘grad, nested");
    // The whole loss checkpointed.
    let whole = checkpoint(|a: &[Array]| Ok(vec![sum(ops::sin(&a[0])?)?]));
    assert_array(&only(grad(&whole, &[0])(&[xa.clone()])), &[4], &map(&x, f64::cos), "checkpointed loss");
    // An integer argument (indices) next to the float one.
    let idx = Array::from_slice(&[3i32, 0, 3], &[3]).unwrap();
    let gathered = checkpoint(|a: &[Array]| Ok(vec![ops::take(ops::sin(&a[0])?, &a[1], None)?]));
    let g = grad(summed(&gathered), &[0])(&[xa.clone(), idx]).unwrap();
    assert_array(&g[0], &[4], &[x[0].cos(), 0.0, 0.0, 2.0 * x[3].cos()], "checkpoint with an integer argument");
    // A block that reads a value: the recomputation in the backward pass reads it again.
    let reading = checkpoint(|a: &[Array]| {
        let s: f64 = sum(&a[0])?.item()?;
        Ok(vec![ops::multiply(ops::sin(&a[0])?, s)?])
    });
    let s: f64 = x.iter().sum();
    assert_array(
        &only(grad(summed(&reading), &[0])(&[xa])),
        &[4],
        &map(&x, |v| s * v.cos()),
        "checkpoint reading a value",
    );
}

/// The elements of the deep chain for the memory test.
const CHAIN_N: usize = 1 << 20;
/// Blocks in the chain.
const BLOCKS: usize = 8;
/// Steps per block, alternately sin and tanh(1.5 ·): each derivative reads the step's input or
/// output, so without checkpoints the backward pass keeps them alive.
const STEPS_PER_BLOCK: usize = 5;

/// One block: `STEPS_PER_BLOCK` steps, then a residual add of x / 2.
fn chain_block(a: &[Array]) -> Outputs {
    let x = &a[0];
    let mut y = x.clone();
    for k in 0..STEPS_PER_BLOCK {
        y = if k % 2 == 0 { ops::sin(&y)? } else { ops::tanh(ops::multiply(&y, 1.5)?)? };
    }
    Ok(vec![ops::add(&y, ops::multiply(x, 0.5)?)?])
}

/// `chain_block` on one float64 value, with its derivative.
fn chain_block_f64(x: f64) -> (f64, f64) {
    let (mut y, mut dy) = (x, 1.0);
    for k in 0..STEPS_PER_BLOCK {
        if k % 2 == 0 {
            dy *= y.cos();
            y = y.sin();
        } else {
            dy *= 1.5 * sech2(1.5 * y);
            y = (1.5 * y).tanh();
        }
    }
    (y + 0.5 * x, dy + 0.5)
}

/// Runs value_and_grad of Σ chain(x) (blocks checkpointed or not), evaluating loss and gradient
/// together (loss first, or gradient first); returns them with the peak bytes held above what was
/// live before.
fn chain_peak(x: &Array, checkpointed: bool, gradient_first: bool) -> (Vec<f64>, Vec<f64>, usize) {
    let ck = checkpoint(chain_block);
    let f = single(|a: &[Array]| {
        let mut h = a[0].clone();
        for _ in 0..BLOCKS {
            h = if checkpointed { ck(&[h])? } else { chain_block(&[h])? }.remove(0);
        }
        sum(&h)
    });
    let base = kiln::active_memory();
    kiln::reset_peak_memory();
    let (value, grads) = value_and_grad(f, &[0])(&[x.clone()]).unwrap();
    let (value, gradient) = (&value[0], &grads[0]);
    if gradient_first {
        kiln::eval(&[gradient, value]).unwrap();
    } else {
        kiln::eval(&[value, gradient]).unwrap();
    }
    let peak = kiln::peak_memory() - base;
    (vals(value), vals(gradient), peak)
}

/// Set in the child process [`ran_alone`] starts, so that the test runs there alone.
const ALONE: &str = "KILN_TRANSFORMS_TEST_ALONE";

/// For a test whose assertions read process-wide state that other tests change as they run in
/// parallel (the memory counters, whether any transform is tracing): runs test `name` again in a
/// process of its own and checks it passed there. True in the parent (which then returns), false
/// in that child (which runs the test's body).
fn ran_alone(name: &str) -> bool {
    if std::env::var_os(ALONE).is_some() {
        return false;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "{name}, run alone, failed ({}):\n{text}", out.status);
    assert!(text.contains("1 passed"), "{name} did not run alone:\n{text}");
    true
}

#[test]
fn checkpoint_holds_fewer_intermediates() {
    // The memory counters are global.
    if ran_alone("checkpoint_holds_fewer_intermediates") {
        return;
    }
    let mut rng = Rng::new(15);
    let xv = rng.vec(CHAIN_N, -1.0, 1.0);
    let x = arr(&xv, &[CHAIN_N]);

    // The loss and gradient by the float64 chain rule.
    let mut value = 0.0;
    let mut grad_want = vec![0.0; CHAIN_N];
    for (i, &x0) in xv.iter().enumerate() {
        let (mut h, mut d) = (x0, 1.0);
        for _ in 0..BLOCKS {
            let (y, dy) = chain_block_f64(h);
            h = y;
            d *= dy;
        }
        value += h;
        grad_want[i] = d;
    }

    let arrays = |bytes: usize| bytes as f64 / (CHAIN_N * 8) as f64;
    for gradient_first in [false, true] {
        let (plain_value, plain_grad, plain_peak) = chain_peak(&x, false, gradient_first);
        let (ck_value, ck_grad, ck_peak) = chain_peak(&x, true, gradient_first);
        let order = if gradient_first { "gradient evaluated first" } else { "loss evaluated first" };
        println!(
            "{order}: peak above base, plain {:.1} MiB ({:.1} arrays), checkpointed {:.1} MiB ({:.1} arrays); \
             {BLOCKS} blocks of {STEPS_PER_BLOCK} steps on {CHAIN_N} float64",
            plain_peak as f64 / (1 << 20) as f64,
            arrays(plain_peak),
            ck_peak as f64 / (1 << 20) as f64,
            arrays(ck_peak),
        );
        assert_close(&plain_value, &[value], 1e-9, 0.0, "plain loss");
        assert_close(&ck_value, &[value], 1e-9, 0.0, "checkpointed loss");
        assert_close(&plain_grad, &grad_want, 1e-9, 1e-12, "plain gradient");
        assert_close(&ck_grad, &grad_want, 1e-9, 1e-12, "checkpointed gradient");
        assert_close(&ck_grad, &plain_grad, 1e-12, 1e-15, "checkpointed gradient equals plain");

        // Without checkpoints the backward pass keeps several intermediates of every block alive;
        // with them, the block boundaries, one block's recomputation and the cotangent in flight.
        assert!(arrays(plain_peak) >= (2 * BLOCKS) as f64, "{order}: plain peak {:.1} arrays", arrays(plain_peak));
        assert!(
            arrays(ck_peak) <= (BLOCKS + STEPS_PER_BLOCK + 2) as f64,
            "{order}: checkpointed peak {:.1} arrays, more than the {BLOCKS} boundaries and one block",
            arrays(ck_peak)
        );
        assert!(
            (ck_peak as f64) < 0.6 * plain_peak as f64,
            "{order}: checkpointed peak {:.1} arrays is not clearly below the plain {:.1}",
            arrays(ck_peak),
            arrays(plain_peak)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Nesting with vmap, lazy inputs, reading values inside a trace
// ---------------------------------------------------------------------------------------------

#[test]
fn grad_jvp_and_vmap_nest_both_ways() {
    let mut rng = Rng::new(16);
    let (xs, xsa) = rand(&mut rng, &[3, 4], -1.0, 1.0);
    let (w, wa) = rand(&mut rng, &[4], -1.0, 1.0);
    let (dx, dw) = batch_loss_gradients(&xs, &w);
    let args = [xsa.clone(), wa.clone()];

    // grad∘vmap: the gradient of the batch total.
    let batched = vmap(example_loss, &[Some(0), None], &[Some(0)]);
    let g = grad(summed(&batched), &[0, 1])(&args).unwrap();
    assert_array(&g[0], &[3, 4], &dx, "grad∘vmap d/dX");
    assert_array(&g[1], &[4], &dw, "grad∘vmap d/dw");

    // vmap∘grad: per-example gradients (w is shared, its gradient differs per example).
    let per = vmap(grad(example_loss, &[0, 1]), &[Some(0), None], &[Some(0)])(&args).unwrap();
    let per_w: Vec<f64> = (0..12).map(|k| xs[k] * sech2(w[k % 4] * xs[k])).collect();
    assert_array(&per[0], &[3, 4], &dx, "vmap∘grad d/dx per example");
    assert_array(&per[1], &[3, 4], &per_w, "vmap∘grad d/dw per example");

    // jvp∘vmap and vmap∘jvp: per-example directional derivatives.
    let (tx, txa) = rand(&mut rng, &[3, 4], -1.0, 1.0);
    let (tw, twa) = rand(&mut rng, &[4], -1.0, 1.0);
    let want: Vec<f64> = (0..3)
        .map(|i| (0..4).map(|j| sech2(w[j] * xs[4 * i + j]) * (w[j] * tx[4 * i + j] + xs[4 * i + j] * tw[j])).sum())
        .collect();
    let (_, t) = jvp(&batched, &args, &[txa.clone(), twa.clone()]).unwrap();
    assert_array(&t[0], &[3], &want, "jvp∘vmap");
    let tangent_of = |a: &[Array]| -> Outputs { Ok(jvp(example_loss, &a[..2], &a[2..])?.1) };
    let t = vmap(tangent_of, &[Some(0), None, Some(0), None], &[Some(0)])(&[xsa, wa, txa, twa]).unwrap();
    assert_array(&t[0], &[3], &want, "vmap∘jvp");

    // vmap∘grad∘grad: per-example second derivatives of Σ x³ sin x.
    let d2 = grad(summed(grad(single(cube_sin), &[0])), &[0]);
    let d2_batched = only(vmap(d2, &[Some(0)], &[Some(0)])(&[arr(&xs, &[3, 4])]));
    assert_array(&d2_batched, &[3, 4], &map(&xs, cube_sin_d2), "vmap∘grad∘grad");
}

#[test]
fn transforms_take_unevaluated_inputs() {
    // Lazy inputs: x = 0.3 i - 0.5 and a lazy cotangent/tangent 2 + i/10, none evaluated yet.
    let idx = || ops::arange(0.0, 5.0, 1.0, Dtype::F64).unwrap();
    let lazy_x = || ops::subtract(ops::multiply(idx(), 0.3).unwrap(), 0.5).unwrap();
    let lazy_v = || ops::add(ops::divide(idx(), 10.0).unwrap(), 2.0).unwrap();
    let x: Vec<f64> = (0..5).map(|i| 0.3 * i as f64 - 0.5).collect();
    let v: Vec<f64> = (0..5).map(|i| 2.0 + i as f64 / 10.0).collect();
    let deriv = map(&x, |x| x.cos() * x + x.sin());
    let deriv_v = map2(&deriv, &v, |d, v| d * v);

    let xa = lazy_x();
    assert!(!xa.is_evaluated());
    let g = only(grad(summed(&sin_times_x), &[0])(&[xa.clone()]));
    assert_array(&g, &[5], &deriv, "grad of an unevaluated input");
    assert_array(&xa, &[5], &x, "the input keeps its value");
    assert_array(&only(vjp(sin_times_x, &[lazy_x()], &[lazy_v()]).map(|r| r.1)), &[5], &deriv_v, "vjp, lazy");
    assert_array(&only(jvp(sin_times_x, &[lazy_x()], &[lazy_v()]).map(|r| r.1)), &[5], &deriv_v, "jvp, lazy");
    let ck = checkpoint(sin_times_x);
    let g = only(grad(summed(&ck), &[0])(&[lazy_x()]));
    assert_array(&g, &[5], &deriv, "grad∘checkpoint, lazy");
    let batch = ops::stack(&[lazy_x(), lazy_v()], 0).unwrap();
    let w = ops::ones(&[5], Dtype::F64).unwrap();
    let per = only(vmap(grad(example_loss, &[0]), &[Some(0), None], &[Some(0)])(&[batch, w]));
    let want: Vec<f64> = x.iter().chain(&v).map(|&u| sech2(u)).collect();
    assert_array(&per, &[2, 5], &want, "vmap∘grad, lazy batch");

    // The gradient stops at the argument: x = exp(z) lazily, d/dx Σ x² = 2x (not 2x·exp z).
    let ex = ops::exp(lazy_x()).unwrap();
    let g = only(grad(single(|a: &[Array]| sum(ops::square(&a[0])?)), &[0])(&[ex]));
    assert_array(&g, &[5], &map(&x, |x| 2.0 * x.exp()), "gradient with respect to a lazy result");
}

/// `s · Σ x sin x` where s = Σ sin x is read with `item` (a plain number, so a constant) and the
/// intermediates are evaluated with `eval` / `kiln::eval` while the transform traces.
fn reads_values(a: &[Array]) -> Result<Array> {
    let x = &a[0];
    let y = ops::sin(x)?;
    kiln::eval(&[&y])?;
    let s: f64 = sum(&y)?.item()?;
    let z = ops::multiply(&y, x)?;
    z.eval()?;
    let total = sum(&z)?;
    total.eval()?;
    ops::multiply(total, s)
}

#[test]
fn evaluating_intermediates_inside_a_transform_keeps_the_gradient() {
    let mut rng = Rng::new(17);
    let (x, xa) = rand(&mut rng, &[5], -2.0, 2.0);
    let s: f64 = x.iter().map(|v| v.sin()).sum();
    let d1 = map(&x, |v| s * (v.sin() + v * v.cos()));
    let d2 = map(&x, |v| s * (2.0 * v.cos() - v * v.sin()));
    let g = grad(single(reads_values), &[0]);
    assert_array(&only(g(&[xa.clone()])), &[5], &d1, "grad");
    assert_array(&only(g(&[xa.clone()])), &[5], &d1, "grad, called again");
    let (t, ta) = rand(&mut rng, &[5], -1.0, 1.0);
    let (outs, tans) = jvp(single(reads_values), &[xa.clone()], &[ta]).unwrap();
    let value: f64 = s * x.iter().map(|v| v * v.sin()).sum::<f64>();
    assert_array(&outs[0], &[], &[value], "jvp value");
    assert_array(&tans[0], &[], &[d1.iter().zip(&t).map(|(d, t)| d * t).sum()], "jvp");
    let gg = grad(summed(&g), &[0]);
    assert_array(&only(gg(&[xa.clone()])), &[5], &d2, "grad of grad");
    // A lazy input evaluated inside the trace too.
    let lazy = ops::multiply(&xa, 1.0).unwrap();
    assert_array(&only(g(&[lazy])), &[5], &d1, "grad of a lazy input");
    // The output of a custom function evaluated inside the trace still uses its rule.
    let f = exp_with_vjp();
    let g = grad(
        single(|a: &[Array]| {
            let y = f(a)?.remove(0);
            y.eval()?;
            sum(&y)
        }),
        &[0],
    );
    assert_array(&only(g(&[xa.clone()])), &[5], &[2.0; 5], "custom function evaluated in the trace");
    // vmap traces without data: reading a value there is a clear error instead.
    let batched = vmap(single(reads_values), &[Some(0)], &[Some(0)]);
    check_err_mentions(batched(&[ops::stack(&[xa.clone(), xa], 0).unwrap()]), ErrorKind::NoData, "vmap", &["(5,)"]);
}

#[test]
fn nodes_evaluated_in_a_trace_keep_their_graph_until_the_outermost_transform_ends() {
    // Whether any transform is tracing is process-wide: another test's grad running in parallel
    // would keep the graph past this test's outermost transform (seen on the H100 host).
    if ran_alone("nodes_evaluated_in_a_trace_keep_their_graph_until_the_outermost_transform_ends") {
        return;
    }
    let x = arr(&[0.2, 0.4], &[2]);
    let kept: std::sync::Mutex<Vec<Array>> = Default::default();
    // Records an intermediate evaluated inside the trace, and checks it kept its op and inputs.
    let record = |a: &[Array]| -> Result<Array> {
        let y = ops::sin(&a[0])?;
        y.eval()?;
        assert!(y.op_and_inputs().is_some(), "an array evaluated in a trace keeps its graph");
        kept.lock().unwrap().push(y.clone());
        sum(ops::square(&y)?)
    };
    let g = grad(single(record), &[0]);
    let gg = grad(
        single(|a: &[Array]| {
            let inner = sum(&g(a)?[0])?;
            // The inner transform is over, but the outer one still needs the graph.
            assert!(kept.lock().unwrap()[0].op_and_inputs().is_some(), "graph kept for the enclosing transform");
            Ok(inner)
        }),
        &[0],
    );
    let d2 = map(&vals(&x), |v| 2.0 * (2.0 * v).cos());
    assert_array(&only(gg(&[x.clone()])), &[2], &d2, "grad of grad");
    assert!(kept.lock().unwrap()[0].op_and_inputs().is_none(), "released when the outermost transform ends");

    // A function failing after evaluating inside the trace leaves the thread out of tracing:
    // arrays evaluated afterwards drop their graph.
    let failing = single(|a: &[Array]| {
        a[0].eval()?;
        ops::add(&a[0], arr(&[1.0, 2.0, 3.0], &[3]))
    });
    check_err(grad(failing, &[0])(&[x.clone()]), ErrorKind::Shape, "add");
    let y = ops::sin(&x).unwrap();
    y.eval().unwrap();
    assert!(y.op_and_inputs().is_none(), "evaluated outside any trace: graph dropped");
}

#[test]
fn control_flow_on_values_read_inside_grad() {
    // x² where x > 0 and -x³ elsewhere, branching on item().
    let piecewise = single(|a: &[Array]| {
        let x = &a[0];
        if x.item::<f64>()? > 0.0 {
            ops::square(x)
        } else {
            ops::negative(ops::multiply(ops::square(x)?, x)?)
        }
    });
    let g = grad(&piecewise, &[0]);
    for (x, want) in [(1.5, 3.0), (-2.0, -12.0)] {
        assert_array(&only(g(&[Array::scalar(x)])), &[], &[want], &format!("derivative at {x}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------------

#[test]
fn random_samples_are_constants_to_autodiff() {
    let mut rng = Rng::new(18);
    let (_, xa) = rand(&mut rng, &[6], -1.0, 1.0);
    let key = random::key(42);
    let uniform = || random::uniform(0.0, 1.0, &[6], Dtype::F64, Some(&key));
    let normal = || random::normal(&[6], Dtype::F64, 1.0, 2.0, Some(&key));
    let u = vals(&uniform().unwrap());
    let n = vals(&normal().unwrap());
    assert!(u.iter().any(|&v| v != u[0]), "the sample is not constant");

    // d/dx Σ x·u = u and d/dx Σ x·n = n: the samples drawn eagerly with the same key.
    let times_u = single(|a: &[Array]| sum(ops::multiply(&a[0], uniform()?)?));
    assert_array(&only(grad(&times_u, &[0])(&[xa.clone()])), &[6], &u, "d/dx of x · uniform");
    let times_n = single(|a: &[Array]| sum(ops::multiply(&a[0], normal()?)?));
    assert_array(&only(grad(&times_n, &[0])(&[xa.clone()])), &[6], &n, "d/dx of x · normal");
    let (t, ta) = rand(&mut rng, &[6], -1.0, 1.0);
    let dot: f64 = u.iter().zip(&t).map(|(u, t)| u * t).sum();
    assert_array(&only(jvp(&times_u, &[xa.clone()], &[ta]).map(|r| r.1)), &[], &[dot], "jvp of x · uniform");

    // A sample whose parameter depends on x: bernoulli(sigmoid(x)) as a 0/1 mask. Only the direct
    // x factor has a gradient, none flows into the probability.
    let mask_of = |x: &Array| -> Result<Array> {
        ops::astype(random::bernoulli(ops::sigmoid(x)?, None, Some(&key))?, Dtype::F64)
    };
    let mask = vals(&mask_of(&xa).unwrap());
    let masked = single(|a: &[Array]| sum(ops::multiply(&a[0], mask_of(&a[0])?)?));
    assert_array(&only(grad(masked, &[0])(&[xa])), &[6], &mask, "d/dx of x · bernoulli(sigmoid(x))");
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_arguments_give_clear_errors() {
    let x = arr(&[1.0, 2.0, 3.0], &[3]);
    let total = single(|a: &[Array]| sum(&a[0]));
    check_err_mentions(grad(&total, &[1])(&[x.clone()]), ErrorKind::Value, "grad", &["1 arguments"]);
    check_err_mentions(grad(&total, &[0, 0])(&[x.clone()]), ErrorKind::Value, "grad", &["twice"]);
    check_err(grad(&total, &[])(&[x.clone()]), ErrorKind::Value, "grad");
    check_err(value_and_grad(&total, &[3])(&[x.clone()]), ErrorKind::Value, "grad");
    let flags = ops::greater(&x, 1.5).unwrap();
    check_err_mentions(grad(&total, &[0])(&[flags]), ErrorKind::Dtype, "grad", &["bool"]);

    let matrix = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let doubled = single(|a: &[Array]| ops::multiply(&a[0], 2.0));
    check_err_mentions(grad(&doubled, &[0])(&[matrix]), ErrorKind::Shape, "grad", &["(2, 3)"]);

    let (one, two) = (arr(&[1.0], &[]), arr(&[1.0, 2.0], &[2]));
    let r = vjp(two_outputs, &[x.clone(), x.clone()], &[one.clone()]);
    check_err_mentions(r, ErrorKind::Value, "vjp", &["2 outputs", "1 cotangent"]);
    let r = vjp(&doubled, &[x.clone()], &[two.clone()]);
    check_err_mentions(r, ErrorKind::Shape, "vjp", &["(2,)", "(3,)"]);
    check_err_mentions(jvp(&doubled, &[x.clone()], &[]), ErrorKind::Value, "jvp", &["1 primals", "0 tangents"]);
    check_err_mentions(jvp(&doubled, &[x.clone()], &[two]), ErrorKind::Shape, "jvp", &["(2,)", "(3,)"]);

    let nothing = |_: &[Array]| -> Outputs { Ok(vec![]) };
    check_err(vjp(nothing, &[x.clone()], &[]), ErrorKind::Value, "vjp");
    check_err(jvp(nothing, &[x.clone()], &[x.clone()]), ErrorKind::Value, "jvp");
    check_err(grad(nothing, &[0])(&[x.clone()]), ErrorKind::Value, "grad");
    check_err(value_and_grad(nothing, &[0])(&[x.clone()]), ErrorKind::Value, "grad");

    // An error raised by the function itself comes through unchanged.
    let broken = single(|a: &[Array]| ops::add(&a[0], arr(&[1.0, 2.0], &[2])));
    check_err(grad(&broken, &[0])(&[x]), ErrorKind::Shape, "add");
}

// ---------------------------------------------------------------------------------------------
// Regressions found in review
// ---------------------------------------------------------------------------------------------

#[test]
fn duplicate_scatter_writes_give_the_gradient_to_the_surviving_update() {
    // Only the last of duplicate writes lands, so only it has a gradient (vjp and jvp agree).
    let idx = Array::from_vec(vec![2i32, 2, 0]);
    let put = move |a: &[Array]| ops::put_along_axis(ops::zeros(&[3], kiln::Dtype::F64)?, &idx, &a[0], Some(0));
    let g = only(grad(summed(single(&put)), &[0])(&[arr(&[5.0, 7.0, 1.0], &[3])]));
    assert_array(&g, &[3], &[0.0, 1.0, 1.0], "put_along_axis with a duplicate index");
    let rows = Array::from_vec(vec![1i32, 1, 3, 1]);
    let scatter = move |a: &[Array]| ops::scatter(&a[0], &[rows.clone()], &a[1], &[0]);
    let mut rng = Rng::new(40);
    let (_, x) = rand(&mut rng, &[4, 3], -1.0, 1.0);
    let (_, u) = rand(&mut rng, &[4, 1, 3], -1.0, 1.0);
    check("scatter with duplicate rows", &scatter, &[x, u], 41);
}

#[test]
fn scatter_max_ties_share_the_gradient() {
    let a = arr(&[1.0, 2.0], &[2]);
    let u = arr(&[1.0], &[1, 1]);
    let idx = Array::from_vec(vec![0i32]);
    let f = move |x: &[Array]| Ok(vec![ops::scatter_max(&x[0], &[idx.clone()], &x[1], &[0])?]);
    let (_, t) = jvp(&f, &[a.clone(), u.clone()], &[arr(&[1.0, 0.0], &[2]), arr(&[1.0], &[1, 1])]).unwrap();
    assert_array(&t[0], &[2], &[1.0, 0.0], "jvp of a tie");
    let (_, g) = vjp(&f, &[a, u], &[arr(&[1.0, 1.0], &[2])]).unwrap();
    assert_array(&g[0], &[2], &[0.5, 1.0], "vjp into the destination");
    assert_array(&g[1], &[1, 1], &[0.5], "vjp into the update");
}

#[test]
fn checkpoint_differentiates_captured_arrays_and_custom_rules_refuse_them() {
    let x = arr(&[0.5, -1.0], &[2]);
    let w = arr(&[1.5, 2.0], &[2]);
    let loss = |wrap: bool| {
        move |a: &[Array]| {
            let w = a[1].clone();
            let block = move |b: &[Array]| Ok(vec![ops::multiply(ops::sin(&b[0])?, &w)?]);
            let out = if wrap { checkpoint(block)(&[a[0].clone()])? } else { block(&[a[0].clone()])? };
            Ok(vec![sum(&out[0])?])
        }
    };
    let plain = grad(loss(false), &[0, 1])(&[x.clone(), w.clone()]).unwrap();
    let ckpt = grad(loss(true), &[0, 1])(&[x.clone(), w.clone()]).unwrap();
    assert_array(&ckpt[1], &[2], &[0.5f64.sin(), (-1.0f64).sin()], "gradient of the captured weight");
    assert_eq!(vals(&plain[0]), vals(&ckpt[0]));
    // A user vjp cannot return a cotangent for a captured array: asking for one is an error.
    let custom = move |a: &[Array]| {
        let w = a[1].clone();
        let f = CustomFunction::new("scale", move |b: &[Array]| Ok(vec![ops::multiply(&b[0], &w)?]))
            .vjp(|_, cts, _| Ok(vec![cts[0].clone()]))
            .into_fn();
        Ok(vec![sum(&f(&[a[0].clone()])?[0])?])
    };
    check_err_mentions(grad(custom, &[0, 1])(&[x, w]), ErrorKind::Value, "scale", &["captured", "argument"]);
}

#[test]
fn checkpoint_recomputes_with_the_same_random_draws() {
    // Dropout-like masks drawn from the global state inside a checkpointed block.
    let block = |a: &[Array]| {
        let keep = kiln::random::bernoulli(0.5, Some(a[0].shape()), None)?;
        Ok(vec![ops::where_(&keep, ops::multiply(ops::sin(&a[0])?, 2.0)?, 0.0)?])
    };
    let x = arr(&(0..64).map(|i| i as f64 * 0.1).collect::<Vec<_>>(), &[64]);
    let run = |wrap: bool| {
        kiln::random::seed(11);
        let f = move |a: &[Array]| {
            let out = if wrap { checkpoint(block)(a)? } else { block(a)? };
            Ok(vec![sum(&out[0])?])
        };
        let (v, g) = value_and_grad(f, &[0])(&[x.clone()]).unwrap();
        kiln::eval(&[&v[0], &g[0]]).unwrap();
        // The replay leaves the global state where the forward pass's one draw left it.
        (vals(&v[0]), vals(&g[0]), random::state().to_vec::<u32>().unwrap())
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn identities_keep_weak_scalars_weak() {
    // A Rust number stays weak through the tracer, stop_gradient and custom functions.
    let h = ops::astype(arr(&[1.0, 2.0], &[2]), kiln::Dtype::F16).unwrap();
    let f = {
        let h = h.clone();
        move |a: &[Array]| Ok(vec![sum(ops::multiply(&a[0], &h)?)?])
    };
    let (v, _) = value_and_grad(&f, &[0])(&[Array::weak_float(2.0)]).unwrap();
    assert_eq!(v[0].dtype(), kiln::Dtype::F16);
    let s = ops::multiply(stop_gradient(&Array::weak_float(2.0)).unwrap(), &h).unwrap();
    assert_eq!(s.dtype(), kiln::Dtype::F16);
}

#[test]
fn custom_vmap_rules_are_checked() {
    let xs = ops::ones(&[2, 3], kiln::Dtype::F32).unwrap();
    // An unbatched output from the rule flows through later ops unbatched and is broadcast.
    let c = CustomFunction::new("c", |_x: &[Array]| Ok(vec![ops::ones(&[3], kiln::Dtype::F32)?]))
        .vmap(|_a, _ax| Ok((vec![ops::ones(&[3], kiln::Dtype::F32)?], vec![None])))
        .into_fn();
    let out = vmap(move |x: &[Array]| Ok(vec![ops::add(&c(x)?[0], 1.0)?]), &[Some(0)], &[Some(0)])(&[xs.clone()]).unwrap();
    assert_eq!(out[0].shape(), &[2, 3]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0; 6]);
    // A rule claiming a batch axis its output does not have is an error, not a panic.
    let bad = CustomFunction::new("bad", |_x: &[Array]| Ok(vec![ops::ones(&[], kiln::Dtype::F32)?]))
        .vmap(|_a, _ax| Ok((vec![ops::ones(&[], kiln::Dtype::F32)?], vec![Some(0)])))
        .into_fn();
    check_err_mentions(vmap(bad, &[Some(0)], &[Some(0)])(&[xs]), ErrorKind::Shape, "bad", &["batch axis 0"]);
}

#[test]
fn traced_functions_may_evaluate_on_other_threads() {
    // Tracing is process-wide: a node evaluated by a worker thread keeps its graph as well.
    let f = |a: &[Array]| {
        let y = ops::exp(&a[0])?;
        let worker = y.clone();
        std::thread::spawn(move || worker.eval().unwrap()).join().unwrap();
        let built_elsewhere = {
            let x = a[0].clone();
            std::thread::spawn(move || ops::sin(&x).unwrap()).join().unwrap()
        };
        Ok(vec![sum(ops::add(&y, &built_elsewhere)?)?])
    };
    let x = arr(&[0.5, -1.0], &[2]);
    let g = only(grad(f, &[0])(&[x]));
    assert_array(&g, &[2], &[0.5f64.exp() + 0.5f64.cos(), (-1f64).exp() + (-1f64).cos()], "gradient");
}

#[test]
fn depends_keeps_values_evaluates_dependencies_and_routes_gradients_to_inputs() {
    let a = Array::from_vec(vec![1.0f32, 2.0, 3.0]);
    let (b, c) = (ops::exp(&a).unwrap(), ops::log(&a).unwrap());
    let out = depends(std::slice::from_ref(&b), std::slice::from_ref(&c)).unwrap();
    out[0].eval().unwrap();
    assert!(c.is_evaluated(), "the dependency is computed with the output");
    assert_close(&out[0].to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), 0.0, 0.0, "depends keeps the value");
    // d/dx sum(exp(x)) through depends is exp(x); the dependency gets nothing.
    let f = |x: &[Array]| Ok(vec![ops::sum(&depends(&[ops::exp(&x[0])?], &[ops::square(&x[1])?])?[0], None, false)?]);
    let g = grad(f, &[0, 1])(&[a.clone(), a.clone()]).unwrap();
    assert_close(&g[0].to_f64_vec().unwrap(), &b.to_f64_vec().unwrap(), 1e-6, 0.0, "gradient to the input");
    assert_eq!(g[1].to_f64_vec().unwrap(), vec![0.0; 3]);
    // vmap passes through.
    let rows = ops::reshape(ops::arange(0.0, 6.0, 1.0, Dtype::F32).unwrap(), &[2, 3]).unwrap();
    let v = vmap(|x: &[Array]| depends(&[ops::negative(&x[0])?], &[x[0].clone()]), &[Some(0)], &[Some(0)])(&[rows]).unwrap();
    assert_eq!(v[0].to_vec::<f32>().unwrap(), vec![-0.0, -1.0, -2.0, -3.0, -4.0, -5.0]);
}

#[test]
fn depends_keeps_its_dependencies_in_compiled_replays_and_under_vmap() {
    use std::sync::atomic::AtomicUsize;
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    // A user kernel with a side effect (a count) as the dependency: each replay must run it.
    let counted = |x: &Array| -> Result<Array> {
        let out = kiln::custom_kernel("count", &[x.clone()], &[(vec![1], Dtype::F32)], |args| {
            RUNS.fetch_add(1, Ordering::SeqCst);
            args.output::<f32>(0)?[0] = 0.0;
            Ok(())
        })?;
        Ok(out.into_iter().next().unwrap())
    };
    let f = kiln::compile(move |x: &[Array]| depends(&[ops::multiply(&x[0], 2.0)?], &[counted(&x[0])?]));
    let x = Array::from_vec(vec![1.0f32, 2.0]);
    for call in 1..=3 {
        let y = f.call(&[x.clone()]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
        assert_eq!(RUNS.load(Ordering::SeqCst), call, "the dependency ran once per call");
    }
    // Under vmap, an unbatched dependency is still evaluated with the output.
    let dependency = ops::log(Array::from_vec(vec![2.0f32])).unwrap();
    let captured = dependency.clone();
    let rows = ops::reshape(ops::arange(0.0, 4.0, 1.0, Dtype::F32).unwrap(), &[2, 2]).unwrap();
    let v = vmap(move |x: &[Array]| depends(&[ops::negative(&x[0])?], &[captured.clone()]), &[Some(0)], &[Some(0)])(&[rows]).unwrap();
    v[0].eval().unwrap();
    assert!(dependency.is_evaluated(), "vmap kept the dependency");
    assert_eq!(v[0].to_vec::<f32>().unwrap(), vec![-0.0, -1.0, -2.0, -3.0]);
}
