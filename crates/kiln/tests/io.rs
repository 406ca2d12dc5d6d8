//! `.npy`, `.safetensors` and GGUF files: round trips for every dtype and layout, files written by
//! hand from the formats' specifications (Fortran order, big-endian, version 2 headers), bad
//! files, which must be errors naming the file and the problem, and thousands of mutated files
//! (a byte-level mutator over valid ones), which must load or fail cleanly, never crash.
mod common;

use common::Rng;
use kiln::io::{load_npy, load_safetensors, save_npy, save_safetensors};
use kiln::{ops, Array, Dtype, ErrorKind};
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
    for dtype in Dtype::REAL.into_iter().filter(|&d| d != Dtype::BF16) {
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
        (npy_bytes(1, "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }\n", &[0; 16]), "not supported"),
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
fn npy_data_is_read_when_the_array_is_evaluated() {
    let path = temp("lazy.npy");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n";
    let values = |v: [f32; 4]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    std::fs::write(&path, npy_bytes(1, header, &values([1.0, 2.0, 3.0, 4.0]))).unwrap();
    let a = load_npy(&path).unwrap();
    // The header was read at load; the data is whatever the file holds at evaluation (as mlx).
    std::fs::write(&path, npy_bytes(1, header, &values([5.0, 6.0, 7.0, 8.0]))).unwrap();
    assert_eq!(ops::multiply(&a, 2.0).unwrap().to_vec::<f32>().unwrap(), vec![10.0, 12.0, 14.0, 16.0]);
    // A file cut short fails the evaluation, naming the file and the bytes missing.
    // More data than the header says is an error at once, as for bytes read eagerly.
    std::fs::write(&path, npy_bytes(1, header, &[0; 20])).unwrap();
    assert!(load_npy(&path).unwrap_err().message.contains("the file has 20"));
    std::fs::write(&path, npy_bytes(1, header, &[0; 12])).unwrap();
    let short = load_npy(&path).unwrap();
    let err = short.eval().unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoData, "{err}");
    assert!(err.message.contains("needs 16 bytes of data, the file has 12") && err.message.contains("lazy.npy"), "{err}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn safetensors_round_trip_every_dtype_with_metadata() {
    let path = temp("rt.safetensors");
    let arrays: Vec<(String, Array)> =
        Dtype::REAL.iter().enumerate().map(|(i, &d)| (format!("t{i}.{d}"), sample(d, &[2, i % 3 + 1]))).collect();
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
        (safetensors_bytes(r#"{"w":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}}"#, &data[..1]), "not supported"),
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

// ---------------------------------------------------------------------------------------------
// Hostile files: a byte-level mutator over valid files
// ---------------------------------------------------------------------------------------------

/// The mutator: the tests' own generator (independent of kiln), seeded.
struct Mutator(Rng);

impl Mutator {

    /// One to four mutations of `file`: bit flips, bytes set to values that mean something in the
    /// headers, truncation, inserted or repeated runs, and numbers of the header replaced by huge,
    /// negative or zero ones (so shapes, lengths and offsets lie).
    fn mutate(&mut self, file: &[u8]) -> Vec<u8> {
        const SPECIAL: &[u8] = b"\x00\xff9-,()[]{}\"':.\\ \nTFe";
        const NUMBERS: &[&str] = &["0", "1", "-1", "4294967296", "18446744073709551615", "99999999999999999999999", "65536", "1e9", "3.5"];
        let mut out = file.to_vec();
        for _ in 0..1 + self.0.below(4) {
            let at = self.0.below(out.len());
            match self.0.below(7) {
                0 if !out.is_empty() => out[at] ^= 1 << self.0.below(8),
                1 if !out.is_empty() => out[at] = SPECIAL[self.0.below(SPECIAL.len())],
                2 => out.truncate(at),
                3 => {
                    let run: Vec<u8> = (0..1 + self.0.below(16)).map(|_| self.0.next_u64() as u8).collect();
                    out.splice(at..at, run);
                }
                4 => {
                    let end = (at + 1 + self.0.below(64)).min(out.len());
                    let run = out[at..end].to_vec();
                    out.splice(at..at, run);
                }
                5 => {
                    // A run of ASCII digits (a number of the header) becomes another number.
                    let digits: Vec<usize> = (0..out.len().min(400)).filter(|&i| out[i].is_ascii_digit()).collect();
                    if let Some(&start) = digits.get(self.0.below(digits.len())) {
                        let end = (start..out.len()).find(|&i| !out[i].is_ascii_digit()).unwrap_or(out.len());
                        out.splice(start..end, NUMBERS[self.0.below(NUMBERS.len())].bytes());
                    }
                }
                _ if out.len() >= 8 => {
                    // The length fields at the start: safetensors' u64, npy's u16/u32.
                    let at = self.0.below(12.min(out.len()));
                    out[at] = [0, 1, 0x7f, 0x80, 0xff][self.0.below(5)];
                }
                _ => {}
            }
        }
        out
    }
}

/// What loading mutated files gave: arrays, errors, and (a failure) panics.
#[derive(Debug, Default)]
struct Outcomes {
    loaded: usize,
    errors: usize,
    panics: Vec<String>,
}

/// Loads `cases` mutations of each seed file with `load`, which returns the arrays it read.
/// Every outcome must be arrays or an error: never a panic, and never an array holding more
/// bytes than the file had (which would mean data invented or a huge allocation).
fn fuzz_loader(seeds: &[Vec<u8>], cases: usize, seed: u64, load: fn(&[u8]) -> kiln::Result<Vec<Array>>) -> Outcomes {
    let mut m = Mutator(Rng::new(seed));
    let mut out = Outcomes::default();
    for case in 0..cases {
        let file = m.mutate(&seeds[case % seeds.len()]);
        let result = std::panic::catch_unwind(|| {
            load(&file).and_then(|arrays| {
                for a in &arrays {
                    assert!(a.nbytes() <= file.len(), "an array of {} bytes from a {}-byte file", a.nbytes(), file.len());
                    a.to_f64_vec()?;
                }
                Ok(arrays.len())
            })
        });
        match result {
            Ok(Ok(_)) => out.loaded += 1,
            Ok(Err(e)) => {
                assert!(e.message.contains("mutated"), "an error that does not name the source: {e}");
                out.errors += 1;
            }
            Err(p) => {
                let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                out.panics.push(format!("case {case}: {} on bytes {:?}", msg.unwrap_or_default(), String::from_utf8_lossy(&file[..file.len().min(200)])));
            }
        }
    }
    out
}

/// How many mutations per format: `KILN_FUZZ_FILES` (the long runs of `scripts/fuzz files`), else
/// a CI-sized sample.
fn fuzz_cases() -> usize {
    std::env::var("KILN_FUZZ_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(4000)
}

/// The mutator's seed for `format`: `KILN_FUZZ_SEED` (0 unless set) mixed with the format's own.
fn fuzz_seed(format: u64) -> u64 {
    format ^ std::env::var("KILN_FUZZ_SEED").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[test]
fn mutated_npy_files_are_errors_or_arrays_never_crashes() {
    let mut seeds = Vec::new();
    for (i, dtype) in Dtype::REAL.into_iter().filter(|&d| d != Dtype::BF16).enumerate() {
        let path = temp(&format!("seed{i}.npy"));
        save_npy(&path, &sample(dtype, &[[0, 1, 3][i % 3], 2, 1 + i % 2][..1 + i % 3])).unwrap();
        seeds.push(std::fs::read(&path).unwrap());
        std::fs::remove_file(&path).ok();
    }
    let data: Vec<u8> = (0..24u8).collect();
    seeds.push(npy_bytes(2, "{'descr': '>i4', 'fortran_order': True, 'shape': (3, 2), }\n", &data));
    seeds.push(npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", &data[..8]));
    let out = fuzz_loader(&seeds, fuzz_cases(), fuzz_seed(0xF11E), |b| kiln::io::npy_from_bytes(b, "mutated.npy").map(|a| vec![a]));
    eprintln!("npy: {out:?}");
    assert!(out.panics.is_empty(), "{} panics:\n{}", out.panics.len(), out.panics.join("\n"));
    // The mutator must reach both outcomes, or it tests nothing.
    assert!(out.loaded * 100 > fuzz_cases() && out.errors * 2 > fuzz_cases(), "{out:?}");
}

#[test]
fn mutated_safetensors_files_are_errors_or_arrays_never_crashes() {
    let path = temp("seed.safetensors");
    let arrays: Vec<(String, Array)> =
        Dtype::REAL.iter().enumerate().map(|(i, &d)| (format!("t{i}"), sample(d, &[[0, 1, 2][i % 3], 1 + i % 2]))).collect();
    save_safetensors(&path, &arrays[..5], &[("format".into(), "mlx".into())]).unwrap();
    let mut seeds = vec![std::fs::read(&path).unwrap()];
    save_safetensors(&path, &arrays[5..], &[]).unwrap();
    seeds.push(std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).ok();
    let out = fuzz_loader(&seeds, fuzz_cases(), fuzz_seed(0x5AFE), |b| {
        kiln::io::safetensors_from_bytes(b, "mutated.safetensors").map(|s| s.arrays.into_iter().map(|(_, a)| a).collect())
    });
    eprintln!("safetensors: {out:?}");
    assert!(out.panics.is_empty(), "{} panics:\n{}", out.panics.len(), out.panics.join("\n"));
    assert!(out.loaded * 100 > fuzz_cases() && out.errors * 2 > fuzz_cases(), "{out:?}");
}

/// A GGUF file written byte by byte, independently of kiln's writer: alignment 64 set in the
/// metadata, one string, one float32 2x3 tensor (dims innermost first) and one int16 vector.
fn handmade_gguf() -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    let string = |f: &mut Vec<u8>, s: &str| {
        f.extend((s.len() as u64).to_le_bytes());
        f.extend(s.as_bytes());
    };
    f.extend(3u32.to_le_bytes());
    f.extend(2u64.to_le_bytes());
    f.extend(2u64.to_le_bytes());
    string(&mut f, "general.alignment");
    f.extend(4u32.to_le_bytes()); // uint32
    f.extend(64u32.to_le_bytes());
    string(&mut f, "general.name");
    f.extend(8u32.to_le_bytes()); // string
    string(&mut f, "tiny");
    string(&mut f, "w");
    f.extend(2u32.to_le_bytes());
    f.extend(3u64.to_le_bytes());
    f.extend(2u64.to_le_bytes());
    f.extend(0u32.to_le_bytes()); // F32
    f.extend(0u64.to_le_bytes());
    string(&mut f, "v");
    f.extend(1u32.to_le_bytes());
    f.extend(2u64.to_le_bytes());
    f.extend(25u32.to_le_bytes()); // I16
    f.extend(64u64.to_le_bytes());
    f.resize(f.len().next_multiple_of(64), 0);
    let data_start = f.len();
    for v in [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0] {
        f.extend(v.to_le_bytes());
    }
    f.resize(data_start + 64, 0);
    f.extend((-7i16).to_le_bytes());
    f.extend(9i16.to_le_bytes());
    f
}

#[test]
fn gguf_reads_a_handmade_file_and_round_trips_tensors_and_metadata() {
    use kiln::gguf::{gguf_from_bytes, gguf_to_bytes, GgufValue};
    let (arrays, metadata) = gguf_from_bytes(&handmade_gguf(), "handmade.gguf").unwrap();
    assert_eq!(arrays[0].0, "w");
    assert_eq!((arrays[0].1.shape(), arrays[0].1.to_vec::<f32>().unwrap()), (&[2usize, 3][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!((arrays[1].1.dtype(), arrays[1].1.to_vec::<i16>().unwrap()), (Dtype::I16, vec![-7, 9]));
    assert!(matches!(&metadata[..], [(a, GgufValue::Numbers(_)), (k, GgufValue::Text(v))]
        if a == "general.alignment" && k == "general.name" && v == "tiny"));
    // Round trips: every tensor dtype GGUF has, 0-d to 4-d, and every kind of metadata.
    let mut rng = Rng::new(3);
    let mut tensors = Vec::new();
    for (i, dtype) in [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::F64, Dtype::I8, Dtype::I16, Dtype::I32, Dtype::I64].into_iter().enumerate() {
        for (j, shape) in [vec![], vec![1], vec![23], vec![4, 6, 3, 1, 2]].into_iter().enumerate() {
            let v = rng.vec(shape.iter().product(), -50.0, 50.0);
            tensors.push((format!("t{i}.{j}"), ops::astype(Array::from_slice(&v, &shape).unwrap(), dtype).unwrap()));
        }
    }
    let meta = vec![
        ("text".to_string(), GgufValue::Text("data".into())),
        ("texts".to_string(), GgufValue::Texts(vec!["a".into(), "".into(), "ccc".into()])),
        ("scalar".to_string(), GgufValue::Numbers(Array::scalar(1.5f32))),
        ("vector".to_string(), GgufValue::Numbers(Array::from_slice(&[1u64, 2, 3], &[3]).unwrap())),
        ("flag".to_string(), GgufValue::Numbers(Array::scalar(true))),
    ];
    let bytes = gguf_to_bytes(&tensors, &meta, "mem").unwrap();
    let (back, back_meta) = gguf_from_bytes(&bytes, "mem").unwrap();
    for ((n, a), (m, b)) in tensors.iter().zip(&back) {
        assert_eq!((n, a.dtype(), a.shape()), (m, b.dtype(), b.shape()));
        assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{n}");
    }
    assert_eq!(back_meta.len(), meta.len());
    for ((k, v), (k2, v2)) in meta.iter().zip(&back_meta) {
        assert_eq!(k, k2);
        match (v, v2) {
            (GgufValue::Text(a), GgufValue::Text(b)) => assert_eq!(a, b),
            (GgufValue::Texts(a), GgufValue::Texts(b)) => assert_eq!(a, b),
            (GgufValue::Numbers(a), GgufValue::Numbers(b)) => {
                assert_eq!((a.dtype(), a.shape(), a.to_f64_vec().unwrap()), (b.dtype(), b.shape(), b.to_f64_vec().unwrap()), "{k}")
            }
            _ => panic!("{k} changed kind"),
        }
    }
}

#[test]
fn gguf_refuses_what_it_cannot_hold_and_damaged_files() {
    use kiln::gguf::{gguf_from_bytes, gguf_to_bytes, GgufValue};
    let bytes = Array::from_slice(&[1u8, 2], &[2]).unwrap();
    let e = gguf_to_bytes(&[("b".into(), bytes)], &[], "x.gguf").unwrap_err();
    assert!(e.kind == ErrorKind::Dtype && e.message.contains("uint8") && e.message.contains("cast"), "{e}");
    let half = GgufValue::Numbers(Array::scalar(half::f16::ONE));
    assert_eq!(gguf_to_bytes(&[], &[("h".into(), half)], "x.gguf").unwrap_err().kind, ErrorKind::Dtype);
    let good = handmade_gguf();
    // Every truncation is an error naming the file, never a panic.
    for cut in [0, 3, 10, 30, 60, good.len() - 1] {
        let e = gguf_from_bytes(&good[..cut], "cut.gguf").unwrap_err();
        assert!(e.message.contains("cut.gguf"), "{cut}: {e}");
    }
    // A block-quantized type kiln does not read (Q4_K, type 12) is named in the refusal; Q4_0
    // (type 2) is read, but its rows must hold whole blocks of 32.
    // After the name "w" (its length, then the byte): the dimension count, two dimensions, the type.
    let w_type = good.windows(9).position(|w| w == b"\x01\x00\x00\x00\x00\x00\x00\x00w").unwrap() + 9 + 4 + 16;
    for (code, expected) in [(12u32, "Q4_K"), (2, "multiple of 32")] {
        let mut quantized = good.clone();
        quantized[w_type..w_type + 4].copy_from_slice(&code.to_le_bytes());
        let e = gguf_from_bytes(&quantized, "q.gguf").unwrap_err();
        assert!(e.message.contains(expected) && e.message.contains("q.gguf"), "{e}");
    }
}

#[test]
fn mutated_gguf_files_are_errors_or_arrays_never_crashes() {
    use kiln::gguf::{gguf_from_bytes, gguf_to_bytes, GgufValue};
    let tensors: Vec<(String, Array)> = [Dtype::F32, Dtype::F16, Dtype::I8, Dtype::I64, Dtype::BF16]
        .iter()
        .enumerate()
        .map(|(i, &d)| (format!("t{i}"), sample(d, &[[0, 1, 2][i % 3], 1 + i % 2])))
        .collect();
    let meta = vec![
        ("name".to_string(), GgufValue::Text("seed".into())),
        ("list".to_string(), GgufValue::Texts(vec!["a".into(), "bc".into()])),
        ("n".to_string(), GgufValue::Numbers(Array::from_slice(&[7i32, 8], &[2]).unwrap())),
    ];
    let seeds = vec![handmade_gguf(), gguf_to_bytes(&tensors, &meta, "seed").unwrap()];
    let out = fuzz_loader(&seeds, fuzz_cases(), fuzz_seed(0x66), |b| gguf_from_bytes(b, "mutated.gguf").map(|(t, _)| t.into_iter().map(|(_, a)| a).collect()));
    eprintln!("gguf: {out:?}");
    assert!(out.panics.is_empty(), "{} panics:\n{}", out.panics.len(), out.panics.join("\n"));
    assert!(out.loaded * 100 > fuzz_cases() && out.errors * 2 > fuzz_cases(), "{out:?}");
}

#[test]
fn gguf_alignment_is_honoured_and_repeated_names_refused() {
    use kiln::gguf::{gguf_from_bytes, gguf_to_bytes, GgufValue};
    let tensors = vec![("a".to_string(), Array::from_vec(vec![1.0f32, 2.0, 3.0])), ("b".to_string(), Array::from_vec(vec![7i32]))];
    let meta = vec![("general.alignment".to_string(), GgufValue::Numbers(Array::scalar(64u32)))];
    let bytes = gguf_to_bytes(&tensors, &meta, "aligned").unwrap();
    let (back, back_meta) = gguf_from_bytes(&bytes, "aligned").unwrap();
    assert_eq!(back[1].1.to_vec::<i32>().unwrap(), vec![7]);
    assert!(matches!(&back_meta[..], [(k, GgufValue::Numbers(_))] if k == "general.alignment"));
    let bad = vec![("general.alignment".to_string(), GgufValue::Numbers(Array::scalar(48u32)))];
    assert!(gguf_to_bytes(&tensors, &bad, "x").unwrap_err().message.contains("power of two"));
    let twice = vec![tensors[0].clone(), tensors[0].clone()];
    let e = gguf_from_bytes(&gguf_to_bytes(&twice, &[], "x").unwrap(), "twice.gguf").unwrap_err();
    assert!(e.message.contains("twice"), "{e}");
    // A shape whose byte count overflows is refused by from_bytes, not wrapped.
    assert!(Array::from_bytes(&[], &[1 << 40, 1 << 40], Dtype::F32).is_err());
}
