//! Derivative checks against central finite differences in float64: the vjp of a random
//! cotangent and the jvp of random tangents, each compared with differences of the function
//! evaluated eagerly (no transform involved).

use super::{assert_close, Rng};
use kiln::{jvp, vjp, Array, Result};

/// A function of float64 arrays to one array, as the checks take it.
pub type Fun<'a> = &'a dyn Fn(&[Array]) -> Result<Array>;

const STEP: f64 = 1e-6;

fn perturbed(inputs: &[Array], which: usize, delta: &[f64]) -> Vec<Array> {
    let mut out = inputs.to_vec();
    let base = inputs[which].to_f64_vec().unwrap();
    let moved: Vec<f64> = base.iter().zip(delta).map(|(b, d)| b + d).collect();
    out[which] = Array::from_slice(&moved, inputs[which].shape()).unwrap();
    out
}

fn all_perturbed(inputs: &[Array], deltas: &[Vec<f64>], sign: f64) -> Vec<Array> {
    inputs
        .iter()
        .zip(deltas)
        .map(|(x, d)| {
            let v: Vec<f64> = x.to_f64_vec().unwrap().iter().zip(d).map(|(a, b)| a + sign * b).collect();
            Array::from_slice(&v, x.shape()).unwrap()
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Checks `f`'s vjp and jvp at `inputs` (float64) against central differences.
pub fn check(name: &str, f: Fun, inputs: &[Array], seed: u64) {
    let mut rng = Rng::new(seed);
    let y = f(inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    let c = rng.vec(y.size(), -1.0, 1.0);
    let ct = Array::from_slice(&c, y.shape()).unwrap();
    let wrapped = |x: &[Array]| Ok(vec![f(x)?]);
    let (_, grads) = vjp(wrapped, inputs, &[ct]).unwrap_or_else(|e| panic!("{name} vjp: {e}"));
    let loss = |x: &[Array]| dot(&f(x).unwrap().to_f64_vec().unwrap(), &c);
    for (i, (x, g)) in inputs.iter().zip(&grads).enumerate() {
        assert_eq!(g.shape(), x.shape(), "{name}: gradient {i} shape");
        let numeric: Vec<f64> = (0..x.size())
            .map(|k| {
                let mut d = vec![0.0; x.size()];
                d[k] = STEP;
                let plus = loss(&perturbed(inputs, i, &d));
                d[k] = -STEP;
                let minus = loss(&perturbed(inputs, i, &d));
                (plus - minus) / (2.0 * STEP)
            })
            .collect();
        assert_close(&g.to_f64_vec().unwrap(), &numeric, 1e-5, 1e-6, &format!("{name}: vjp of input {i}"));
    }
    let deltas: Vec<Vec<f64>> = inputs.iter().map(|x| rng.vec(x.size(), -1.0, 1.0)).collect();
    let tangents: Vec<Array> =
        inputs.iter().zip(&deltas).map(|(x, d)| Array::from_slice(d, x.shape()).unwrap()).collect();
    let (_, t) = jvp(wrapped, inputs, &tangents).unwrap_or_else(|e| panic!("{name} jvp: {e}"));
    let scaled: Vec<Vec<f64>> = deltas.iter().map(|d| d.iter().map(|v| v * STEP).collect()).collect();
    let plus = f(&all_perturbed(inputs, &scaled, 1.0)).unwrap().to_f64_vec().unwrap();
    let minus = f(&all_perturbed(inputs, &scaled, -1.0)).unwrap().to_f64_vec().unwrap();
    let numeric: Vec<f64> = plus.iter().zip(&minus).map(|(p, m)| (p - m) / (2.0 * STEP)).collect();
    assert_eq!(t[0].shape(), y.shape(), "{name}: tangent shape");
    assert_close(&t[0].to_f64_vec().unwrap(), &numeric, 1e-5, 1e-6, &format!("{name}: jvp"));
}
