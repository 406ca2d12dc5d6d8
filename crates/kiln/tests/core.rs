//! Arrays as lazy graph handles: laziness, data access, printing, devices and errors.
use kiln::ops;
use kiln::{Array, Device, Dtype, ErrorKind, Stream};

#[test]
fn ops_are_lazy_until_read() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let y = ops::exp(&x).unwrap();
    assert!(!y.is_evaluated());
    kiln::eval(&[&y]).unwrap();
    assert!(y.is_evaluated());
    let want = [1.0f64.exp(), 2.0f64.exp()];
    for (g, w) in y.to_vec::<f32>().unwrap().iter().zip(want) {
        assert!((*g as f64 - w).abs() < 1e-5 * w);
    }
}

#[test]
fn data_access_checks_dtype_and_size() {
    let x = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let e = x.to_vec::<f32>().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Dtype);
    assert!(e.to_string().contains("astype"), "{e}");
    assert_eq!(x.item::<i32>().unwrap_err().kind, ErrorKind::Shape);
    assert_eq!(Array::scalar(5u8).item::<u8>().unwrap(), 5);
    assert_eq!(Array::from_slice(&[1.0f32; 5], &[2, 3]).unwrap_err().kind, ErrorKind::Shape);
    assert_eq!(x.dim(-1).unwrap(), 3);
    assert_eq!(x.nbytes(), 12);
}

#[test]
fn printing_looks_like_mlx() {
    let x = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
    assert_eq!(x.to_string(), "array([[1, 2],\n       [3, 4]], dtype=int32)");
    let f = Array::from_slice(&[1.5f32, -2.0, f32::NAN, f32::INFINITY], &[4]).unwrap();
    assert_eq!(f.to_string(), "array([1.5, -2, nan, inf], dtype=float32)");
    assert_eq!(Array::scalar(true).to_string(), "array(True, dtype=bool)");
    let big = ops::arange(0.0, 2000.0, 1.0, Dtype::I32).unwrap();
    assert_eq!(big.to_string(), "array([0, 1, 2, ..., 1997, 1998, 1999], dtype=int32)");
    // As mlx: any axis past six entries is summarised, blocks of a 3-d array are one newline
    // apart, and floats print as C's %g (6 significant digits) unless a precision is set.
    let seven = ops::arange(0.0, 7.0, 1.0, Dtype::I32).unwrap();
    assert_eq!(seven.to_string(), "array([0, 1, 2, ..., 4, 5, 6], dtype=int32)");
    let rows = ops::reshape(ops::arange(0.0, 14.0, 1.0, Dtype::I32).unwrap(), &[7, 2]).unwrap();
    assert_eq!(rows.to_string(), "array([[0, 1],\n       [2, 3],\n       [4, 5],\n       ...,\n       [8, 9],\n       [10, 11],\n       [12, 13]], dtype=int32)");
    let cube = ops::reshape(ops::arange(0.0, 8.0, 1.0, Dtype::I32).unwrap(), &[2, 2, 2]).unwrap();
    assert_eq!(cube.to_string(), "array([[[0, 1],\n        [2, 3]],\n       [[4, 5],\n        [6, 7]]], dtype=int32)");
    let g = Array::from_slice(&[1.123_456_8f32, 1e-5, 1234567.0], &[3]).unwrap();
    assert_eq!(g.to_string(), "array([1.12346, 1e-05, 1.23457e+06], dtype=float32)");
    let previous = kiln::set_print_precision(Some(2));
    let fixed = Array::from_slice(&[1.123_456_8f32, 0.9], &[2]).unwrap().to_string();
    kiln::set_print_precision(previous);
    assert_eq!(fixed, "array([1.12, 0.90], dtype=float32)");
}

#[test]
fn an_explicit_cpu_stream_places_ops_on_the_cpu() {
    assert!(Device::cpu().is_available());
    let s = kiln::with_stream(Stream::default_for(Device::cpu()), || ops::add(1.0, 2.0).unwrap()).unwrap();
    assert_eq!(s.stream().device, Device::cpu());
    assert_eq!(s.item::<f32>().unwrap(), 3.0);
}

#[test]
fn deep_graphs_evaluate_and_drop_without_recursion() {
    let mut x = Array::scalar(0.0f32);
    for _ in 0..100_000 {
        x = ops::add(&x, 1.0).unwrap();
    }
    assert_eq!(x.item::<f32>().unwrap(), 100_000.0);
    let mut y = Array::scalar(0i32);
    for _ in 0..200_000 {
        y = ops::add(&y, 1).unwrap();
    }
    drop(y); // never evaluated: dropping the chain must not overflow the stack
}

#[test]
#[should_panic(expected = "add: cannot broadcast shapes (2, 3) and (4,)")]
fn operators_panic_with_the_op_error() {
    let a = ops::zeros(&[2, 3], Dtype::F32).unwrap();
    let b = ops::zeros(&[4], Dtype::F32).unwrap();
    let _ = &a + &b;
}

#[test]
fn operators_cover_arithmetic_bitwise_and_scalars() {
    let a = Array::from_slice(&[6i32, -7], &[2]).unwrap();
    assert_eq!((&a + 1).to_vec::<i32>().unwrap(), vec![7, -6]);
    assert_eq!((10i32 - &a).to_vec::<i32>().unwrap(), vec![4, 17]);
    assert_eq!((&a % 4).to_vec::<i32>().unwrap(), vec![2, 1]);
    assert_eq!((&a & 3).to_vec::<i32>().unwrap(), vec![2, 1]);
    assert_eq!((&a << 1).to_vec::<i32>().unwrap(), vec![12, -14]);
    assert_eq!((-&a).to_vec::<i32>().unwrap(), vec![-6, 7]);
    assert_eq!((!&a).to_vec::<i32>().unwrap(), vec![!6, !-7]);
    assert_eq!((&a / 4).dtype(), Dtype::F32);
    let t = Array::from_slice(&[true, false], &[2]).unwrap();
    assert_eq!((!&t).to_vec::<bool>().unwrap(), vec![false, true]);
}

#[test]
fn creation_ops() {
    let z = ops::zeros(&[2, 3], Dtype::F16).unwrap();
    assert_eq!(z.dtype(), Dtype::F16);
    assert_eq!(z.to_f64_vec().unwrap(), vec![0.0; 6]);
    let f = ops::full(&[2], 7.5, None).unwrap();
    assert_eq!((f.dtype(), f.to_vec::<f32>().unwrap()), (Dtype::F32, vec![7.5, 7.5]));
    let o = ops::ones_like(&z).unwrap();
    assert_eq!(o.to_f64_vec().unwrap(), vec![1.0; 6]);
    let r = ops::arange(5.0, -1.0, -2.0, Dtype::I64).unwrap();
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![5, 3, 1]);
    let r = ops::arange(0.0, 1.0, 0.25, Dtype::F32).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.0, 0.25, 0.5, 0.75]);
    assert_eq!(ops::arange(0.0, 1.0, 0.0, Dtype::F32).unwrap_err().kind, ErrorKind::Value);
    assert_eq!(ops::arange(0.0, -1.0, 1.0, Dtype::F32).unwrap().shape(), &[0]);
    let fl = ops::full_like(&r, 3).unwrap();
    assert_eq!(fl.dtype(), Dtype::F32);
}

#[test]
fn arrays_are_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Array>();
    let shared = ops::copy(ops::full(&[1000], 2.0, Some(Dtype::F64)).unwrap()).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let x = shared.clone();
            std::thread::spawn(move || {
                let mut y = ops::multiply(&x, t as f64).unwrap();
                for _ in 0..50 {
                    y = ops::add(&y, &x).unwrap();
                }
                y.to_vec::<f64>().unwrap()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let v = h.join().unwrap();
        assert!(v.iter().all(|&e| e == 2.0 * t as f64 + 100.0), "thread {t}");
    }
    assert_eq!(shared.to_vec::<f64>().unwrap()[0], 2.0);
}

/// A shape whose bytes overflow the address space is refused when the op is built, naming it.
#[test]
fn shapes_beyond_the_address_space_are_errors() {
    let big = ops::zeros(&[1 << 40], Dtype::F32).unwrap();
    let e = ops::broadcast_to(&big, &[1 << 30, 1 << 40]).unwrap_err();
    assert!(e.message.contains("more bytes than memory can address") && e.message.contains("1099511627776"), "{e}");
    // A reshape to sizes whose product overflows is a shape error (found by the bad-input fuzzer,
    // where a debug build panicked on the multiplication).
    let x = ops::zeros(&[2, 2], Dtype::F32).unwrap();
    let e = ops::reshape(&x, &[1_000_000_000_000, 1_000_000_000_000]).unwrap_err();
    assert!(e.message.contains("cannot reshape array of shape (2, 2)"), "{e}");
    let e = ops::reshape(&x, &[1 << 40, 1 << 40, -1]).unwrap_err();
    assert!(e.message.contains("cannot reshape"), "{e}");
}
