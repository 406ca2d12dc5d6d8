use kiln::{ops, Dtype};
use std::time::Instant;
fn med(mut f: impl FnMut()) -> f64 { f(); f(); let mut v: Vec<f64> = (0..7).map(|_| { let t = Instant::now(); f(); t.elapsed().as_secs_f64()*1e3 }).collect(); v.sort_by(|a,b| a.total_cmp(b)); v[3] }
fn main() {
    let n = 32*1000*4096usize;
    let src = vec![1.0f32; n]; let mut dst = vec![0.0f32; n];
    let m = med(|| dst.copy_from_slice(std::hint::black_box(&src)));
    println!("memcpy {m:.1} ms {:.1} GB/s", 2.0*n as f64*4.0/m/1e6);
    let x = ops::copy(ops::full(&[n], 1.5, Some(Dtype::F32)).unwrap()).unwrap(); x.eval().unwrap();
    let y = ops::copy(ops::full(&[n], 2.5, Some(Dtype::F32)).unwrap()).unwrap(); y.eval().unwrap();
    let m = med(|| ops::copy(&x).unwrap().eval().unwrap());
    println!("copy {m:.1} ms {:.1} GB/s", 2.0*n as f64*4.0/m/1e6);
    let m = med(|| ops::add(&x, &y).unwrap().eval().unwrap());
    println!("add {m:.1} ms {:.1} GB/s", 3.0*n as f64*4.0/m/1e6);
    let m = med(|| ops::add(&x, 1.0).unwrap().eval().unwrap());
    println!("add scalar {m:.1} ms {:.1} GB/s", 2.0*n as f64*4.0/m/1e6);
    let m = med(|| ops::exp(&x).unwrap().eval().unwrap());
    println!("exp {m:.1} ms {:.1} GB/s", 2.0*n as f64*4.0/m/1e6);
    let m = med(|| ops::multiply(ops::add(&x, 1.0).unwrap(), 2.0).unwrap().eval().unwrap());
    println!("add+mul donated {m:.1} ms");
}
