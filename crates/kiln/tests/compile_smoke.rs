use kiln::{compile, ops, Array};

fn close(a: &Array, b: &Array, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let (x, y) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    for (p, q) in x.iter().zip(&y) {
        assert!((p - q).abs() <= tol * (1.0 + q.abs()) || (p.is_nan() && q.is_nan()), "{p} vs {q}");
    }
}

fn gelu(a: &[Array]) -> kiln::Result<Vec<Array>> {
    let x = &a[0];
    let inner = ops::erf(ops::divide(x, 2f64.sqrt())?)?;
    Ok(vec![ops::divide(ops::multiply(x, ops::add(inner, 1.0)?)?, 2.0)?])
}

fn softmax(a: &[Array]) -> kiln::Result<Vec<Array>> {
    let x = &a[0];
    let m = ops::max(x, Some(&[-1]), true)?;
    let e = ops::exp(ops::subtract(x, &m)?)?;
    Ok(vec![ops::divide(&e, ops::sum(&e, Some(&[-1]), true)?)?])
}

#[test]
fn smoke() {
    let x = kiln::random::normal(&[37, 300], kiln::Dtype::F32, 0.0, 1.0, None).unwrap();
    let c = compile(gelu);
    close(&c.call(&[x.clone()]).unwrap()[0], &gelu(&[x.clone()]).unwrap()[0], 1e-6);
    let r = c.inspect(&[x.clone()], &[]).unwrap();
    println!("{r}");
    let s = compile(softmax);
    println!("{}", s.inspect(&[x.clone()], &[]).unwrap());
    close(&s.call(&[x.clone()]).unwrap()[0], &softmax(&[x.clone()]).unwrap()[0], 1e-6);
    println!("{}", s.inspect(&[x.clone()], &[]).unwrap());
    let ln = |a: &[Array]| {
        let x = &a[0];
        let mu = ops::mean(x, Some(&[-1]), true)?;
        let xc = ops::subtract(x, &mu)?;
        let var = ops::mean(ops::square(&xc)?, Some(&[-1]), true)?;
        Ok(vec![ops::multiply(&xc, ops::rsqrt(ops::add(var, 1e-5)?)?)?])
    };
    let l = compile(ln);
    close(&l.call(&[x.clone()]).unwrap()[0], &ln(&[x.clone()]).unwrap()[0], 1e-5);
    println!("{}", l.inspect(&[x.clone()], &[]).unwrap());
    let total = |a: &[Array]| Ok(vec![ops::sum(ops::exp(&a[0])?, None, false)?]);
    let big = kiln::random::normal(&[300000], kiln::Dtype::F32, 0.0, 1.0, None).unwrap();
    let t = compile(total);
    close(&t.call(&[big.clone()]).unwrap()[0], &total(&[big.clone()]).unwrap()[0], 1e-9);
}
