//! `.npy` and `.safetensors` files: round trips for every dtype and layout, files written by
//! hand from the formats' specifications (Fortran order, big-endian, version 2 headers), and bad
//! files, which must be errors naming the file and the problem.
use kiln::io::{load_npy, load_safetensors, save_npy, save_safetensors};
use kiln::{ops, Array, Dtype};
use std::path::PathBuf;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kiln-io-{}-{name}", std::process::id()))
}

/// An array of every dtype with values that survive the dtype (small integers, with a zero).
fn sample(dtype: Dtype, shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - if dtype == Dtype::Bool { 5.0 } else { 0.0 }).collect();
    ops::astype(Array::from_slice(&values, shape).unwrap(), dtype).unwrap()
}

fn same(a: &Array, b: &Array) {
    assert_eq!(a.shape(), b.shape());
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
}

#[test]
fn npy_round_trips_every_numpy_dtype_and_view() {
    let path = temp("rt.npy");
    for dtype in Dtype::ALL.into_iter().filter(|&d| d != Dtype::BF16) {
        for shape in [&[][..], &[0][..], &[5][..], &[2, 3, 4][..]] {
            let a = sample(dtype, shape);
            save_npy(&path, &a).unwrap();
            same(&a, &load_npy(&path).unwrap());
        }
    }
    // A transposed view is written in its logical (row-major) order.
    let t = ops::transpose(sample(Dtype::F32, &[3, 4]), None).unwrap();
    save_npy(&path, &t).unwrap();
    same(&t, &load_npy(&path).unwrap());
    let err = save_npy(&path, &sample(Dtype::BF16, &[2])).unwrap_err();
    assert!(err.message.contains("bfloat16") && err.message.contains("safetensors"), "{err}");
    std::fs::remove_file(&path).ok();
}

/// A `.npy` file from its specification: magic, version, little-endian header length, header.
fn npy_bytes(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_reads_fortran_order_big_endian_and_version_2() {
    let path = temp("spec.npy");
    // Column-major 2x3 [[1, 2, 3], [4, 5, 6]] is stored 1 4 2 5 3 6.
    let data: Vec<u8> = [1i32, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&path, npy_bytes(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }\n", &data)).unwrap();
    let a = load_npy(&path).unwrap();
    assert_eq!(a.shape(), &[2, 3]);
    assert_eq!(a.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    // Big-endian float64 with a version-2 header.
    let data: Vec<u8> = [1.5f64, -2.25].iter().flat_map(|v| v.to_be_bytes()).collect();
    std::fs::write(&path, npy_bytes(2, "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }\n", &data)).unwrap();
    assert_eq!(load_npy(&path).unwrap().to_vec::<f64>().unwrap(), vec![1.5, -2.25]);
    std::fs::remove_file(&path).ok();
}

#[test]
fn bad_npy_files_are_errors_naming_the_file() {
    let path = temp("bad.npy");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n";
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"PK\x03\x04 not numpy".to_vec(), "not a .npy file"),
        (npy_bytes(1, header, &[0; 12]), "needs 16 bytes"),
        (npy_bytes(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", &[0; 8]), "not supported"),
        (npy_bytes(1, "{'descr': '<f4', 'shape': (1,), }\n", &[0; 4]), "fortran_order"),
        (npy_bytes(7, header, &[0; 16]), "version 7"),
        (npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 9999999999), }", &[]), "bytes"),
    ];
    for (bytes, expected) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let err = load_npy(&path).unwrap_err();
        assert!(err.message.contains(expected), "expected {expected:?} in: {err}");
        assert!(err.message.contains(&path.display().to_string()), "{err}");
    }
    let missing = load_npy(temp("does-not-exist.npy")).unwrap_err();
    assert!(missing.message.contains("does-not-exist"), "{missing}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn safetensors_round_trip_every_dtype_with_metadata() {
    let path = temp("rt.safetensors");
    let arrays: Vec<(String, Array)> =
        Dtype::ALL.iter().enumerate().map(|(i, &d)| (format!("t{i}.{d}"), sample(d, &[2, i % 3 + 1]))).collect();
    let meta = vec![("format".to_string(), "pt \"quoted\"\n".to_string())];
    save_safetensors(&path, &arrays, &meta).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    assert_eq!(loaded.metadata, meta);
    assert_eq!(loaded.arrays.len(), arrays.len());
    for ((name, a), (lname, b)) in arrays.iter().zip(&loaded.arrays) {
        assert_eq!(name, lname);
        same(a, b);
    }
    std::fs::remove_file(&path).ok();
}

/// A `.safetensors` file from its specification: header length, JSON header, data.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn safetensors_written_by_hand_load_and_bad_ones_are_errors() {
    let path = temp("spec.safetensors");
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).chain([7u8, 9]).collect();
    let header = r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[2],"data_offsets":[16,18]},"__metadata__":{"k":"v"}}"#;
    std::fs::write(&path, safetensors_bytes(header, &data)).unwrap();
    let loaded = load_safetensors(&path).unwrap();
    assert_eq!(loaded.arrays[0].1.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(loaded.arrays[1].1.to_vec::<u8>().unwrap(), vec![7, 9]);

    let cases = [
        (safetensors_bytes(r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,20]}}"#, &data[..16]), "fall outside"),
        (safetensors_bytes(r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#, &data[..16]), "does not fill"),
        (safetensors_bytes(r#"{"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}"#, &data[..8]), "not supported"),
        (safetensors_bytes(r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#, &data[..4]), "bad header JSON"),
        (safetensors_bytes(&"[".repeat(100), &[]), "nested too deeply"),
        (vec![255; 8], "header length exceeds"),
    ];
    for (bytes, expected) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let err = load_safetensors(&path).unwrap_err();
        assert!(err.message.contains(expected), "expected {expected:?} in: {err}");
    }
    std::fs::remove_file(&path).ok();
}
