//! astype between every pair of dtypes against reference conversions written here: floats to
//! integers truncate toward zero and saturate (NaN gives 0), integers wrap modulo 2^bits,
//! anything to bool is `!= 0`, and conversions to float16/bfloat16 round once, to nearest even.
//! complex64 converts as its float32 real part does, and real values become complex with a zero
//! imaginary part.
mod common;
use common::{wrap, Rng};
use half::{bf16, f16};
use kiln::{ops, Array, Complex64, Dtype, ErrorKind};

/// Source values per dtype, including edge cases.
fn sources(dtype: Dtype) -> Vec<f64> {
    match dtype {
        Dtype::Bool => vec![0.0, 1.0],
        Dtype::U8 => vec![0.0, 1.0, 127.0, 200.0, 255.0],
        Dtype::U16 => vec![0.0, 1.0, 255.0, 256.0, 65535.0],
        Dtype::U32 => vec![0.0, 7.0, 65536.0, 4294967295.0],
        Dtype::U64 => vec![0.0, 3.0, 4294967296.0, 9007199254740992.0],
        Dtype::I8 => vec![-128.0, -1.0, 0.0, 1.0, 127.0],
        Dtype::I16 => vec![-32768.0, -129.0, 0.0, 300.0, 32767.0],
        Dtype::I32 => vec![-2147483648.0, -70000.0, -1.0, 0.0, 65537.0, 2147483647.0],
        Dtype::I64 => vec![-9007199254740992.0, -5000000000.0, -1.0, 0.0, 5000000000.0],
        _ => vec![
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 0.5, -0.5, 1.5, 2.5, -2.7, 255.9, 300.7,
            65504.0, 70000.0, -3.0e9, 1.0e10, 1.0 + 2f64.powi(-11) + 2f64.powi(-40), 1.0e-8,
        ],
    }
}

/// Round-to-nearest-even into a 16-bit float format by search: `guess` is within one step of the
/// answer; pick the nearest of it and its neighbours (ties to the even bit pattern).
fn nearest(v: f64, guess: u16, value: impl Fn(u16) -> f64) -> f64 {
    if !v.is_finite() {
        return value(guess);
    }
    // Infinity counts as the next step past the largest finite value (IEEE overflow rule).
    let at = |b: u16| {
        let x = value(b);
        if x.is_infinite() { x.signum() * (2.0 * value(b - 1).abs() - value(b - 2).abs()) } else { x }
    };
    let cands = [guess.wrapping_sub(1), guess, guess.wrapping_add(1)];
    let mut best = guess;
    for c in cands {
        if value(c).is_nan() {
            continue;
        }
        let (dc, db) = ((at(c) - v).abs(), (at(best) - v).abs());
        if dc < db || (dc == db && c % 2 == 0 && best % 2 == 1) {
            best = c;
        }
    }
    let out = value(best);
    if out == 0.0 { 0.0f64.copysign(v) } else { out }
}

/// The reference conversion of `v` (exactly representable in `src`) to `dst`.
fn convert(v: f64, src: Dtype, dst: Dtype) -> f64 {
    let int_range = |bits: u32, signed: bool| -> (f64, f64) {
        if signed {
            (-(2f64.powi(bits as i32 - 1)), 2f64.powi(bits as i32 - 1) - 1.0)
        } else {
            (0.0, 2f64.powi(bits as i32) - 1.0)
        }
    };
    match dst {
        Dtype::Bool => (v != 0.0) as u8 as f64,
        Dtype::F16 => nearest(v, f16::from_f64_const(v).to_bits(), |b| f16::from_bits(b).to_f64()),
        Dtype::BF16 => nearest(v, bf16::from_f64_const(v).to_bits(), |b| bf16::from_bits(b).to_f64()),
        Dtype::F32 | Dtype::C64 => v as f32 as f64,
        Dtype::F64 => v,
        _ => {
            let bits = dst.size() as u32 * 8;
            let signed = !dst.is_unsigned();
            if src.is_inexact() {
                if v.is_nan() {
                    return 0.0;
                }
                let (lo, hi) = int_range(bits, signed);
                v.trunc().clamp(lo, hi) + 0.0 // integers have no -0
            } else {
                wrap(v as i128, bits, signed)
            }
        }
    }
}

/// The values of `a`; of a complex array, its real parts, after checking that every imaginary
/// part is zero (all values here start real).
fn real_values(a: &Array) -> Vec<f64> {
    if a.dtype() != Dtype::C64 {
        return a.to_f64_vec().unwrap();
    }
    let z = a.to_vec::<Complex64>().unwrap();
    assert!(z.iter().all(|z| z.im == 0.0), "{z:?}");
    z.iter().map(|z| z.re as f64).collect()
}

/// Every dtype the default device computes: complex64 only on the CPU (the GPU refuses it).
fn dtypes() -> Vec<Dtype> {
    let on_cpu = kiln::default_device().kind == kiln::DeviceKind::Cpu;
    Dtype::ALL.into_iter().filter(|d| on_cpu || !d.is_complex()).collect()
}

#[test]
fn every_pair_converts_like_the_reference() {
    for src in dtypes() {
        let vals = sources(src);
        // Build the source exactly: integers through i64/u64 arrays, floats through f64 (values
        // listed for float sources are first rounded to the source float type).
        let base = match src {
            Dtype::U64 => Array::from_vec(vals.iter().map(|&v| v as u64).collect::<Vec<_>>()),
            d if d.is_integer() || d == Dtype::Bool => Array::from_vec(vals.iter().map(|&v| v as i64).collect::<Vec<_>>()),
            _ => Array::from_vec(vals.clone()),
        };
        let x = ops::astype(&base, src).unwrap();
        let exact: Vec<f64> = real_values(&x);
        for dst in dtypes() {
            let got = real_values(&ops::astype(&x, dst).unwrap());
            for (i, (&g, &v)) in got.iter().zip(&exact).enumerate() {
                let want = convert(v, src, dst);
                // Equal values with equal signs (so -0.0 must stay -0.0), or both NaN.
                let same = (g == want && g.is_sign_negative() == want.is_sign_negative()) || (g.is_nan() && want.is_nan());
                assert!(same, "{src} -> {dst}: element {i} ({v}) gave {g}, want {want}");
            }
        }
    }
}

#[test]
fn float64_to_half_rounds_once() {
    // Just above the float16 midpoint between 1 and 1 + 2^-10: must round up. Going through
    // float32 first would land exactly on the midpoint and round to even (1.0).
    let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    let h = ops::astype(Array::scalar(v), Dtype::F16).unwrap().to_f64_vec().unwrap()[0];
    assert_eq!(h, 1.0 + 2f64.powi(-10));
    let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    let b = ops::astype(Array::scalar(v), Dtype::BF16).unwrap().to_f64_vec().unwrap()[0];
    assert_eq!(b, 1.0 + 2f64.powi(-7));
}

/// `view` reads the row-major bytes as another dtype: against Rust's own bit conversions, for
/// smaller and larger item sizes, strided inputs (copied in row-major order first), vmap, and
/// the errors (a 0-d size change, a last axis that does not divide, a gradient through it).
#[test]
fn view_reinterprets_row_major_bytes() {
    let words: Vec<u32> = vec![0x3F80_0000, 0xC000_0000, 0x7F80_0001, 0x0000_0001, 0x1234_5678, 0xFFFF_FFFF];
    let x = Array::from_slice(&words, &[2, 3]).unwrap();
    let as_f32 = ops::view(&x, Dtype::F32).unwrap();
    let want: Vec<u32> = words.clone();
    assert_eq!(as_f32.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "u32 -> f32 keeps bits");
    let bytes = ops::view(&x, Dtype::U8).unwrap();
    assert_eq!(bytes.shape(), &[2, 12]);
    assert_eq!(bytes.to_vec::<u8>().unwrap(), words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    let pairs = ops::view(ops::slice(&x, &[ops::SliceSpec::ALL, ops::SliceSpec::range(0, 2)]).unwrap(), Dtype::I64).unwrap();
    let packed: Vec<i64> = [0usize, 3].iter().map(|&r| ((words[r + 1] as u64) << 32 | words[r] as u64) as i64).collect();
    assert_eq!((pairs.shape(), pairs.to_vec::<i64>().unwrap()), (&[2usize, 1][..], packed), "strided rows packed");
    // A transposed input is read in its own (row-major) order.
    let t = ops::view(ops::transpose(&x, None).unwrap(), Dtype::U16).unwrap();
    let halves: Vec<u16> = [0usize, 3, 1, 4, 2, 5].iter().flat_map(|&i| [words[i] as u16, (words[i] >> 16) as u16]).collect();
    assert_eq!((t.shape(), t.to_vec::<u16>().unwrap()), (&[3usize, 4][..], halves));
    // vmap over rows equals the view of the whole array.
    let per_row = kiln::vmap(|a: &[Array]| Ok(vec![ops::view(&a[0], Dtype::U8)?]), &[Some(0)], &[Some(0)])(std::slice::from_ref(&x)).unwrap();
    assert_eq!(per_row[0].to_vec::<u8>().unwrap(), bytes.to_vec::<u8>().unwrap());
    let e = ops::view(Array::from_slice(&[1u32], &[]).unwrap(), Dtype::U8).unwrap_err();
    assert!(e.op == "view" && e.message.contains("0-d"), "{e}");
    let e = ops::view(Array::from_slice(&[1u8, 2, 3], &[3]).unwrap(), Dtype::F32).unwrap_err();
    assert!(e.op == "view" && e.message.contains("3 bytes"), "{e}");
    let f = |a: &[Array]| Ok(vec![ops::sum(ops::view(ops::view(&a[0], Dtype::U32)?, Dtype::F32)?, None, false)?]);
    let e = kiln::grad(f, &[0])(&[Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap()]).unwrap_err();
    assert!(e.op == "view" && e.message.contains("stop_gradient"), "{e}");
}

/// e4m3's value of `code` by the format's definition, in float64 (NaN for 0x7F and 0xFF).
fn e4m3_value(code: u8) -> f64 {
    let (sign, exponent, mantissa) = (if code & 0x80 != 0 { -1.0 } else { 1.0 }, (code >> 3) & 0xF, code & 7);
    if code & 0x7F == 0x7F {
        return f64::NAN;
    }
    sign * if exponent == 0 { mantissa as f64 / 8.0 * 2f64.powi(-6) } else { (1.0 + mantissa as f64 / 8.0) * 2f64.powi(exponent as i32 - 7) }
}

#[test]
fn fp8_codes_round_to_nearest_even_and_decode_exactly() {
    let codes: Vec<u8> = (0..=255).collect();
    let decoded = ops::from_fp8(Array::from_slice(&codes, &[256]).unwrap(), Dtype::F32).unwrap().to_f64_vec().unwrap();
    for (&c, &v) in codes.iter().zip(&decoded) {
        let want = e4m3_value(c);
        assert!(v == want || (v.is_nan() && want.is_nan()), "code {c:#04x}: {v} against {want}");
    }
    // Encoding: every representable value maps back to its code, and random values to the
    // nearest code by brute force (ties to the even code; beyond 448 saturating).
    let finite: Vec<(u8, f64)> = codes.iter().map(|&c| (c, e4m3_value(c))).filter(|(c, v)| v.is_finite() && *c != 0x80).collect();
    let mut rng = Rng::new(13);
    let mut values: Vec<f64> = finite.iter().map(|&(_, v)| v).collect();
    values.extend((0..2000).map(|_| rng.uniform(-500.0, 500.0) * 2f64.powi(-((rng.next_u64() % 14) as i32))));
    values.extend([1.0625, 1.1875, 0.0009765625 * 3.0, 1e6, -1e6]); // exact ties and saturation
    let got = ops::to_fp8(Array::from_slice(&values.iter().map(|&v| v as f32).collect::<Vec<_>>(), &[values.len()]).unwrap())
        .unwrap()
        .to_vec::<u8>()
        .unwrap();
    for (&v, &c) in values.iter().zip(&got) {
        let v = v as f32 as f64;
        let best = finite
            .iter()
            .min_by(|a, b| {
                let (da, db) = ((a.1 - v).abs(), (b.1 - v).abs());
                da.partial_cmp(&db).unwrap().then((a.0 & 1).cmp(&(b.0 & 1)))
            })
            .unwrap();
        let same_value = e4m3_value(c) == best.1;
        assert!(same_value, "{v}: code {c:#04x} ({}) against {:#04x} ({})", e4m3_value(c), best.0, best.1);
    }
    let nan = ops::to_fp8(Array::from_vec(vec![f32::NAN])).unwrap().to_vec::<u8>().unwrap();
    assert_eq!(nan[0] & 0x7F, 0x7F);
    assert_eq!(ops::to_fp8(Array::from_vec(vec![1i32])).unwrap_err().kind, ErrorKind::Dtype);
    assert_eq!(ops::from_fp8(Array::from_vec(vec![1.0f32]), Dtype::F32).unwrap_err().kind, ErrorKind::Dtype);
}
