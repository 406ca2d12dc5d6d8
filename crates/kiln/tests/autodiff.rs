//! Reverse and forward mode derivatives of every differentiable op against central finite
//! differences in float64, on random inputs including broadcasting and strided views.

mod common;

use common::derivatives::check;
use common::{Rng};
use kiln::ops;
use kiln::{Array, Result};

fn rand(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Array {
    let n = shape.iter().product();
    Array::from_slice(&rng.vec(n, lo, hi), shape).unwrap()
}

#[test]
fn smoke() {
    let mut rng = Rng::new(1);
    let x = rand(&mut rng, &[3, 4], 0.5, 2.0);
    check("exp", &|a: &[Array]| ops::exp(&a[0]), &[x.clone()], 2);
    check("mul", &|a: &[Array]| ops::multiply(&a[0], ops::sin(&a[1])?), &[x.clone(), rand(&mut rng, &[4], -1.0, 1.0)], 3);
    let _: Result<()> = Ok(());
}
