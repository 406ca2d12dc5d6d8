//! GGUF (version 3) files, the format of llama.cpp's models: named tensors and typed metadata.
//!
//! Layout: `GGUF`, the version, the tensor and metadata counts; the metadata as (key, type,
//! value); per tensor its name, dimensions (innermost first, so reversed from kiln's shapes),
//! ggml type and offset; then, aligned (`general.alignment`, 32 by default), the tensor data.
//! kiln writes and reads the plain types (float32/16/64, bfloat16, int8/16/32/64), and reads the
//! block-quantized Q4_0, Q4_1 and Q8_0 as mlx does: as affine-quantized words, scales and biases
//! (see `ops::quantized`). The other quantized types are refused with a clear error.
//! Metadata values are strings, lists of strings, or numbers and 1-d arrays of the integer,
//! float32/64 and bool dtypes. Reading checks every count, length and offset against the file.

use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::io::row_major_bytes;
use crate::shape::numel;

/// A metadata value of a GGUF file.
#[derive(Clone, Debug)]
pub enum GgufValue {
    /// A string.
    Text(String),
    /// An array of strings.
    Texts(Vec<String>),
    /// A number (a 0-d array) or an array of numbers (1-d).
    Numbers(Array),
}

/// The alignment of tensor data when the file does not set `general.alignment`.
const DEFAULT_ALIGNMENT: usize = 32;
/// Metadata value types of the format.
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// The metadata value types of numbers, by dtype.
const VALUE_TYPES: [(Dtype, u32); 11] = [
    (Dtype::U8, 0),
    (Dtype::I8, 1),
    (Dtype::U16, 2),
    (Dtype::I16, 3),
    (Dtype::U32, 4),
    (Dtype::I32, 5),
    (Dtype::F32, 6),
    (Dtype::Bool, 7),
    (Dtype::U64, 10),
    (Dtype::I64, 11),
    (Dtype::F64, 12),
];

/// The ggml tensor types kiln reads and writes, by dtype.
const TENSOR_TYPES: [(Dtype, u32); 8] =
    [(Dtype::F32, 0), (Dtype::F16, 1), (Dtype::I8, 24), (Dtype::I16, 25), (Dtype::I32, 26), (Dtype::I64, 27), (Dtype::F64, 28), (Dtype::BF16, 30)];

/// The code of `dtype` in `table`, if it has one.
fn code_of(table: &[(Dtype, u32)], dtype: Dtype) -> Option<u32> {
    table.iter().find(|(d, _)| *d == dtype).map(|(_, c)| *c)
}

/// The dtype of `code` in `table`, if it has one.
fn dtype_of(table: &[(Dtype, u32)], code: u32) -> Option<Dtype> {
    table.iter().find(|(_, c)| *c == code).map(|(d, _)| *d)
}

/// The alignment `general.alignment` asks for: a power of two given as a 0-d integer.
fn alignment_of(value: &GgufValue) -> Option<usize> {
    match value {
        GgufValue::Numbers(a) if a.ndim() == 0 && a.dtype().is_integer() => {
            crate::ops::astype(a, Dtype::U64).ok()?.item::<u64>().ok().map(|v| v as usize).filter(|v| v.is_power_of_two())
        }
        _ => None,
    }
}

/// The name of a block-quantized ggml type, for the refusal.
fn quantized_name(code: u32) -> Option<&'static str> {
    const NAMES: [(u32, &str); 10] =
        [(2, "Q4_0"), (3, "Q4_1"), (6, "Q5_0"), (7, "Q5_1"), (8, "Q8_0"), (10, "Q2_K"), (11, "Q3_K"), (12, "Q4_K"), (13, "Q5_K"), (14, "Q6_K")];
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// A block-quantized ggml type kiln reads as mlx does: as the packed words, scales and biases of
/// affine quantization with groups of 32 (`ops::dequantize` gives the values back).
struct QuantizedBlock {
    /// Bytes per block of 32 values.
    bytes: usize,
    /// Bits per value once repacked.
    bits: u32,
}

impl QuantizedBlock {
    /// Q4_0 (type 2), Q4_1 (3) and Q8_0 (8).
    fn of(code: u32) -> Option<QuantizedBlock> {
        match code {
            2 => Some(QuantizedBlock { bytes: 18, bits: 4 }),
            3 => Some(QuantizedBlock { bytes: 20, bits: 4 }),
            8 => Some(QuantizedBlock { bytes: 34, bits: 8 }),
            _ => None,
        }
    }

    /// The tensor `name` of `shape` from its blocks: `name` holds the words, and `name` without
    /// `.weight` plus `.scales` and `.biases` the float16 scales and biases. A Q4_0 value is
    /// `d·(q - 8)`, Q4_1 `d·q + m`, Q8_0 `d·q` with `q` signed (stored here as `q + 128`).
    fn to_affine(&self, name: &str, shape: &[usize], blocks: &[u8]) -> std::result::Result<Vec<(String, Array)>, String> {
        let columns = shape.last().copied().unwrap_or(0);
        if shape.is_empty() || columns % 32 != 0 {
            return Err(format!("quantized tensor '{name}' of shape {shape:?}: its last axis must be a multiple of 32"));
        }
        let f16_at = |b: &[u8], i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]);
        let count = blocks.len() / self.bytes;
        let (mut values, mut scales, mut biases) = (Vec::with_capacity(count * 32), Vec::with_capacity(count), Vec::with_capacity(count));
        for b in blocks.chunks_exact(self.bytes) {
            let d = f16_at(b, 0);
            scales.push(d);
            match self.bytes {
                18 | 20 => {
                    let (bias, nibbles) = if self.bytes == 18 { (d * half::f16::from_f32(-8.0), &b[2..]) } else { (f16_at(b, 2), &b[4..]) };
                    biases.push(bias);
                    // Byte j holds value j in its low half and value j + 16 in its high half.
                    values.extend(nibbles.iter().map(|v| (v & 15) as u32).chain(nibbles.iter().map(|v| (v >> 4) as u32)));
                }
                _ => {
                    biases.push(d * half::f16::from_f32(-128.0));
                    values.extend(b[2..].iter().map(|&v| (v as i8 as i32 + 128) as u32));
                }
            }
        }
        let last = |n: usize| -> Vec<usize> { [&shape[..shape.len() - 1], &[n]].concat() };
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        let array = |data: Result<Array>| data.map_err(|e| e.message);
        let words = array(Array::from_slice(&values, shape).and_then(|q| crate::ops::quantized::pack(&q, self.bits)))?;
        Ok(vec![
            (name.to_string(), words),
            (format!("{stem}.scales"), array(Array::from_slice(&scales, &last(columns / 32)))?),
            (format!("{stem}.biases"), array(Array::from_slice(&biases, &last(columns / 32)))?),
        ])
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, key: &str, value: &GgufValue, target: &str) -> Result<()> {
    let op = "save_gguf";
    put_string(out, key);
    match value {
        GgufValue::Text(s) => {
            out.extend_from_slice(&STRING.to_le_bytes());
            put_string(out, s);
        }
        GgufValue::Texts(items) => {
            out.extend_from_slice(&ARRAY.to_le_bytes());
            out.extend_from_slice(&STRING.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|s| put_string(out, s));
        }
        GgufValue::Numbers(a) => {
            let code = code_of(&VALUE_TYPES, a.dtype()).ok_or_else(|| {
                Error::dtype(op, format!("{target}: metadata '{key}' is {}, which GGUF cannot hold; use an integer, float32/64 or bool dtype", a.dtype()))
            })?;
            match a.ndim() {
                0 => out.extend_from_slice(&code.to_le_bytes()),
                1 => {
                    out.extend_from_slice(&ARRAY.to_le_bytes());
                    out.extend_from_slice(&code.to_le_bytes());
                    out.extend_from_slice(&(a.size() as u64).to_le_bytes());
                }
                n => return Err(Error::shape(op, format!("{target}: metadata '{key}' has {n} dimensions; GGUF holds numbers and 1-d arrays"))),
            }
            out.extend_from_slice(&row_major_bytes(op, a)?);
        }
    }
    Ok(())
}

/// The bytes of a GGUF file holding `arrays` and `metadata`; errors name `target`.
pub fn gguf_to_bytes(arrays: &[(String, Array)], metadata: &[(String, GgufValue)], target: &str) -> Result<Vec<u8>> {
    let op = "save_gguf";
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        Some((_, v)) => alignment_of(v)
            .ok_or_else(|| Error::value(op, format!("{target}: general.alignment must be a power of two given as a 0-d integer array")))?,
        None => DEFAULT_ALIGNMENT,
    };
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(arrays.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_value(&mut out, key, value, target)?;
    }
    let mut data = Vec::new();
    for (name, a) in arrays {
        let code = code_of(&TENSOR_TYPES, a.dtype()).ok_or_else(|| {
            Error::dtype(op, format!("{target}: '{name}' is {}, which GGUF cannot hold; cast it to float32, float16, bfloat16 or a signed integer dtype", a.dtype()))
        })?;
        put_string(&mut out, name);
        out.extend_from_slice(&(a.ndim() as u32).to_le_bytes());
        a.shape().iter().rev().for_each(|&d| out.extend_from_slice(&(d as u64).to_le_bytes()));
        out.extend_from_slice(&code.to_le_bytes());
        data.resize(data.len().next_multiple_of(alignment), 0);
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        data.extend_from_slice(&row_major_bytes(op, a)?);
    }
    out.resize(out.len().next_multiple_of(alignment), 0);
    out.extend_from_slice(&data);
    Ok(out)
}

/// A reader over a file's bytes whose every read is checked against the end.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
    source: &'a str,
}

impl<'a> Cursor<'a> {
    fn fail(&self, what: impl std::fmt::Display) -> Error {
        Error::value("load_gguf", format!("{}: {what} (at byte {})", self.source, self.at))
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| self.fail(format!("the file ends inside {what}")))?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    /// A count of items of at least `item` bytes each, refused if the rest of the file is shorter.
    fn count(&mut self, item: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let left = (self.data.len() - self.at) as u64;
        if n.checked_mul(item.max(1) as u64).is_none_or(|b| b > left) {
            return Err(self.fail(format!("{what} claims {n} items, more than the file holds")));
        }
        Ok(n as usize)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.count(1, what)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.fail(format!("{what} is not UTF-8")))
    }
}

fn numbers(c: &mut Cursor<'_>, code: u32, shape: &[usize], key: &str) -> Result<Array> {
    let dtype = dtype_of(&VALUE_TYPES, code).ok_or_else(|| c.fail(format!("metadata '{key}' has unknown value type {code}")))?;
    let bytes = c.take(numel(shape) * dtype.size(), key)?;
    if dtype == Dtype::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(c.fail(format!("metadata '{key}' holds a bool that is neither 0 nor 1")));
    }
    Array::from_bytes(bytes, shape, dtype)
}

fn value(c: &mut Cursor<'_>, key: &str) -> Result<GgufValue> {
    match c.u32(key)? {
        STRING => Ok(GgufValue::Text(c.string(key)?)),
        ARRAY => match c.u32(key)? {
            STRING => {
                let n = c.count(8, key)?;
                Ok(GgufValue::Texts((0..n).map(|_| c.string(key)).collect::<Result<_>>()?))
            }
            ARRAY => Err(c.fail(format!("metadata '{key}' nests arrays, which kiln does not read"))),
            code => {
                let item = dtype_of(&VALUE_TYPES, code).map_or(1, Dtype::size);
                let n = c.count(item, key)?;
                Ok(GgufValue::Numbers(numbers(c, code, &[n], key)?))
            }
        },
        code => Ok(GgufValue::Numbers(numbers(c, code, &[], key)?)),
    }
}

/// The named tensors and the metadata of a GGUF file's bytes, in the file's order; errors name
/// `source`.
#[allow(clippy::type_complexity)] // the two lists a caller unpacks
pub fn gguf_from_bytes(data: &[u8], source: &str) -> Result<(Vec<(String, Array)>, Vec<(String, GgufValue)>)> {
    let mut c = Cursor { data, at: 0, source };
    if c.take(4, "the magic").ok() != Some(b"GGUF".as_slice()) {
        return Err(Error::value("load_gguf", format!("{source}: not a GGUF file (it does not start with 'GGUF')")));
    }
    let version = c.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(c.fail(format!("GGUF version {version} is not supported (kiln reads versions 2 and 3)")));
    }
    let tensors = c.count(24, "the tensor count")?;
    let entries = c.count(12, "the metadata count")?;
    let mut metadata = Vec::with_capacity(entries);
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..entries {
        let key = c.string("a metadata key")?;
        let v = value(&mut c, &key)?;
        if key == "general.alignment" {
            alignment = alignment_of(&v).ok_or_else(|| c.fail("general.alignment is not a power of two given as an integer"))?;
        }
        metadata.push((key, v));
    }
    let mut infos = Vec::with_capacity(tensors);
    for _ in 0..tensors {
        let name = c.string("a tensor name")?;
        let ndim = c.u32(&name)? as usize;
        if ndim > 8 {
            return Err(c.fail(format!("tensor '{name}' claims {ndim} dimensions")));
        }
        let mut shape: Vec<usize> = (0..ndim).map(|_| c.u64(&name).map(|d| d as usize)).collect::<Result<_>>()?;
        shape.reverse();
        let code = c.u32(&name)?;
        let offset = c.u64(&name)? as usize;
        infos.push((name, shape, code, offset));
    }
    let start = c.at.next_multiple_of(alignment);
    let body = data.get(start..).unwrap_or(&[]);
    let mut arrays = Vec::with_capacity(tensors);
    for (name, shape, code, offset) in infos {
        if arrays.iter().any(|(n, _)| *n == name) {
            return Err(c.fail(format!("tensor name '{name}' appears twice")));
        }
        if let Some(block) = QuantizedBlock::of(code) {
            let blocks = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).and_then(|n| (n / 32).checked_mul(block.bytes));
            let bytes = blocks.and_then(|n| body.get(offset..offset.checked_add(n)?)).ok_or_else(|| {
                c.fail(format!("tensor '{name}' of shape {:?} at offset {offset} falls outside the file's data", shape))
            })?;
            for (part, a) in block.to_affine(&name, &shape, bytes).map_err(|e| c.fail(e))? {
                if arrays.iter().any(|(n, _)| *n == part) {
                    return Err(c.fail(format!("tensor name '{part}' appears twice (a quantized tensor's scales or biases)")));
                }
                arrays.push((part, a));
            }
            continue;
        }
        let dtype = dtype_of(&TENSOR_TYPES, code).ok_or_else(|| match quantized_name(code) {
            Some(q) => c.fail(format!("tensor '{name}' is block-quantized ({q}); kiln reads Q4_0, Q4_1, Q8_0 and the unquantized types")),
            None => c.fail(format!("tensor '{name}' has unknown ggml type {code}")),
        })?;
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .and_then(|n| body.get(offset..offset.checked_add(n)?))
            .ok_or_else(|| c.fail(format!("tensor '{name}' of shape {:?} at offset {offset} falls outside the file's data", shape)))?;
        arrays.push((name, Array::from_bytes(bytes, &shape, dtype)?));
    }
    Ok((arrays, metadata))
}
