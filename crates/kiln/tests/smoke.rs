mod common;
use kiln::{ops, Array, Dtype};

#[test]
fn add_broadcasts_and_evaluates_lazily() {
    let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Array::from_slice(&[10.0f32, 20.0, 30.0], &[3]).unwrap();
    let c = ops::add(&a, &b).unwrap();
    assert!(!c.is_evaluated());
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let t = ops::transpose(&c, None).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![11.0, 14.0, 22.0, 25.0, 33.0, 36.0]);
    let h = ops::astype(&a, Dtype::F16).unwrap() * 2.0;
    assert_eq!(h.dtype(), Dtype::F16);
    println!("{c}\n{h}");
}
