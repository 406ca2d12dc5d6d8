//! Saving and loading arrays in numpy's `.npy` format and in `.safetensors`, the two files every
//! array library reads. The C API (and so the R package) and the Python package's `load` read
//! through these parsers (Python hands over the bytes of a file, a stream or an `.npz` member;
//! numpy writes its `.npy`/`.npz` files).
//!
//! Loading validates everything a file claims before reading it (magic, header, dtype, shape,
//! byte counts and offsets), so a truncated or hostile file is an error naming the file and the
//! problem, never a crash or an array over missing bytes. A `.npy` file read by path
//! ([`load_npy`]) is the one lazy case: its header is checked at once, its data read when the
//! array is evaluated, and data cut short by then fails that evaluation.

use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, ErrorKind, Result};
use crate::shape::fmt_shape;
use std::fmt::Write as _;
use std::path::Path;

const NPY_MAGIC: &[u8] = b"\x93NUMPY";

/// An error of `op` about `source` (a file's path, or the name given to bytes read elsewhere).
fn io_error(op: &str, source: impl std::fmt::Display, what: impl std::fmt::Display) -> Error {
    Error::new(op, ErrorKind::Value, format!("{source}: {what}"))
}

/// The array's elements in row-major order, as bytes in native (little-endian) order: what every
/// writer here (npy, safetensors, GGUF) and Python's pickling store.
pub fn row_major_bytes(op: &str, a: &Array) -> Result<Vec<u8>> {
    let (_keep, ptr) = a.row_major_parts()?;
    let n = a.nbytes();
    if n == 0 {
        return Ok(Vec::new());
    }
    if cfg!(target_endian = "big") {
        return Err(Error::new(op, ErrorKind::Unsupported, "saving needs a little-endian machine"));
    }
    // Safety: row-major memory of exactly nbytes bytes, alive with `_keep`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec())
}

fn npy_descr(op: &str, path: &Path, d: Dtype) -> Result<&'static str> {
    Ok(match d {
        Dtype::Bool => "|b1",
        Dtype::U8 => "|u1",
        Dtype::U16 => "<u2",
        Dtype::U32 => "<u4",
        Dtype::U64 => "<u8",
        Dtype::I8 => "|i1",
        Dtype::I16 => "<i2",
        Dtype::I32 => "<i4",
        Dtype::I64 => "<i8",
        Dtype::F16 => "<f2",
        Dtype::F32 => "<f4",
        Dtype::F64 => "<f8",
        Dtype::C64 => "<c8",
        Dtype::BF16 => {
            return Err(io_error(
                op,
                path.display(),
                "numpy has no bfloat16: save it with save_safetensors, or cast it with astype(float32) first",
            ))
        }
    })
}

/// Writes `a` to `path` as a `.npy` file (format 1.0, little-endian, row-major).
pub fn save_npy(path: impl AsRef<Path>, a: &Array) -> Result<()> {
    let (op, path) = ("save", path.as_ref());
    let descr = npy_descr(op, path, a.dtype())?;
    let dims: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6), version (2) and length (2) come first; the whole prefix is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let Ok(len) = u16::try_from(header.len()) else {
        return Err(io_error(op, path.display(), format!("shape {} needs a header too long for .npy", fmt_shape(a.shape()))));
    };
    let mut out = Vec::with_capacity(10 + header.len() + a.nbytes());
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&row_major_bytes(op, a)?);
    std::fs::write(path, out).map_err(|e| io_error(op, path.display(), e))
}

/// The value of `key` in a `.npy` header dict: the text after `'key':` up to its end.
fn npy_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') { rest.find(')')? + 1 } else { rest.find([',', '}'])? };
    Some(rest[..end].trim())
}

/// The dtype of a numpy type code without its byte order (`f4`, `b1`, ...), if kiln has it (the
/// Python package reads numpy's `typestr` with it too).
pub fn dtype_of_numpy_code(code: &str) -> Option<Dtype> {
    Some(match code {
        "b1" => Dtype::Bool,
        "u1" => Dtype::U8,
        "u2" => Dtype::U16,
        "u4" => Dtype::U32,
        "u8" => Dtype::U64,
        "i1" => Dtype::I8,
        "i2" => Dtype::I16,
        "i4" => Dtype::I32,
        "i8" => Dtype::I64,
        "f2" => Dtype::F16,
        "f4" => Dtype::F32,
        "f8" => Dtype::F64,
        "c8" => Dtype::C64,
        _ => return None,
    })
}

/// The dtype of a `.npy` descr (`'<f4'`), and whether its bytes need swapping to little-endian.
fn npy_dtype(descr: &str) -> Option<(Dtype, bool)> {
    let descr = descr.trim_matches(['\'', '"']);
    let (order, code) = descr.split_at_checked(1)?;
    let swap = match order {
        "<" | "|" | "=" => false,
        ">" => true,
        _ => return None,
    };
    let d = dtype_of_numpy_code(code)?;
    Some((d, swap && d.size() > 1))
}

/// What a `.npy` header says: the data's dtype, shape and layout, and where the data starts.
#[derive(Clone)]
struct NpyHeader {
    dtype: Dtype,
    shape: Vec<usize>,
    /// The data is in the other byte order.
    swap: bool,
    /// The data is in column-major order.
    fortran: bool,
    /// The offset of the data in the file.
    data_start: usize,
}

impl NpyHeader {
    /// The bytes the data takes (None when the shape's size overflows).
    fn data_len(&self) -> Option<usize> {
        self.shape.iter().try_fold(self.dtype.size(), |n, &d| n.checked_mul(d))
    }

    /// The error for a file whose data holds `found` bytes when the header asks for more or less.
    fn wrong_length(&self, source: &str, found: usize) -> Error {
        let needed = self.data_len().map_or("too many".into(), |n| n.to_string());
        let what = format!("shape {} of {} needs {needed} bytes of data, the file has {found}", fmt_shape(&self.shape), self.dtype);
        io_error("load", source, what)
    }

    /// The shape the data is stored in: reversed in Fortran order.
    fn stored_shape(&self) -> Vec<usize> {
        if self.fortran { self.shape.iter().rev().copied().collect() } else { self.shape.clone() }
    }

    /// The stored array in the header's shape (a transposed view in Fortran order).
    fn arrange(&self, stored: Array) -> Result<Array> {
        if self.fortran { crate::ops::transpose(stored, None) } else { Ok(stored) }
    }

    /// Puts stored bytes in native byte order (a complex number's two parts each in place).
    fn to_native_order(&self, bytes: &mut [u8]) {
        if self.swap {
            let part = if self.dtype.is_complex() { self.dtype.size() / 2 } else { self.dtype.size() };
            bytes.chunks_exact_mut(part).for_each(|e| e.reverse());
        }
    }
}

/// The length of a `.npy` file's header and where the header text starts, from the file's first
/// 12 bytes (or fewer).
fn npy_header_span(data: &[u8], source: &str) -> Result<(usize, usize)> {
    if data.len() < 10 || !data.starts_with(NPY_MAGIC) {
        return Err(io_error("load", source, "not a .npy file (no \\x93NUMPY magic)"));
    }
    match data[6] {
        1 => Ok((u16::from_le_bytes([data[8], data[9]]) as usize, 10)),
        2 | 3 if data.len() >= 12 => Ok((u32::from_le_bytes([data[8], data[9], data[10], data[11]]) as usize, 12)),
        v => Err(io_error("load", source, format!(".npy format version {v} is not supported (1, 2 and 3 are)"))),
    }
}

/// Parses the header at the start of `data`, which holds at least the whole header.
fn npy_header(data: &[u8], source: &str) -> Result<NpyHeader> {
    let (len, start) = npy_header_span(data, source)?;
    let header = data
        .get(start..start + len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| io_error("load", source, "the .npy header is truncated or not text"))?;
    let bad = |what: &str| io_error("load", source, format!("bad .npy header {}: {what}", header.trim()));
    let descr = npy_field(header, "descr").ok_or_else(|| bad("no 'descr'"))?;
    let (dtype, swap) = npy_dtype(descr).ok_or_else(|| bad(&format!("dtype {descr} is not supported")))?;
    let fortran = match npy_field(header, "fortran_order") {
        Some("False") => false,
        Some("True") => true,
        _ => return Err(bad("no 'fortran_order' of True or False")),
    };
    let shape_text = npy_field(header, "shape").ok_or_else(|| bad("no 'shape'"))?;
    let shape: Vec<usize> = shape_text
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<usize>().map_err(|_| bad(&format!("shape {shape_text}"))))
        .collect::<Result<_>>()?;
    Ok(NpyHeader { dtype, shape, swap, fortran, data_start: start + len })
}

/// Reads a `.npy` file (format 1.0, 2.0 or 3.0; either byte order; C or Fortran order) lazily,
/// as mlx: the header is read and checked now, the data when the array is evaluated, straight
/// into the array's memory (so a consumer of the array can take that memory over). A file whose
/// data is short by then fails that evaluation with a [`ErrorKind::NoData`] error naming it.
pub fn load_npy(path: impl AsRef<Path>) -> Result<Array> {
    use std::io::{Read, Seek, SeekFrom};
    let path = path.as_ref().to_path_buf();
    let source = path.display().to_string();
    let io = |e: std::io::Error| io_error("load", &source, e);
    let mut file = std::fs::File::open(&path).map_err(io)?;
    // The fixed start, which says how long the header is, then the rest of the header.
    let mut head = Vec::new();
    file.by_ref().take(12).read_to_end(&mut head).map_err(io)?;
    let (len, start) = npy_header_span(&head, &source)?;
    let rest = (start + len).saturating_sub(head.len());
    file.by_ref().take(rest as u64).read_to_end(&mut head).map_err(io)?;
    let header = npy_header(&head, &source)?;
    let file_len = file.metadata().map_err(io)?.len() as usize;
    let found = file_len.saturating_sub(header.data_start);
    // More data than the header says is an error now, as for bytes read eagerly; less is one
    // of the evaluation, when the file is read (as mlx: the file may still be being written).
    if header.data_len().is_none_or(|n| found > n) {
        return Err(header.wrong_length(&source, found));
    }
    let stored = header.stored_shape();
    let dtype = header.dtype;
    let (read_path, reader) = (path.clone(), header.clone());
    let body = move |args: &mut crate::KernelArgs| -> Result<()> {
        let bytes = args.output_bytes(0)?;
        let mut file = std::fs::File::open(&read_path).map_err(|e| io_error("load", read_path.display(), e))?;
        file.seek(SeekFrom::Start(reader.data_start as u64)).map_err(|e| io_error("load", read_path.display(), e))?;
        let mut filled = 0;
        while filled < bytes.len() {
            match file.read(&mut bytes[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("load", read_path.display(), e)),
            }
        }
        if filled < bytes.len() {
            return Err(Error { kind: ErrorKind::NoData, ..reader.wrong_length(&read_path.display().to_string(), filled) });
        }
        reader.to_native_order(bytes);
        Ok(())
    };
    let data = crate::custom_kernel("load", &[], &[(stored, dtype)], body)?.remove(0);
    header.arrange(data)
}

/// Reads the bytes of a `.npy` file (from memory, an archive member or a stream); errors name
/// `source`.
pub fn npy_from_bytes(data: &[u8], source: &str) -> Result<Array> {
    let header = npy_header(data, source)?;
    let body = &data[header.data_start..];
    if header.data_len() != Some(body.len()) {
        return Err(header.wrong_length(source, body.len()));
    }
    let mut bytes = body.to_vec();
    header.to_native_order(&mut bytes);
    header.arrange(Array::from_bytes(&bytes, &header.stored_shape(), header.dtype)?)
}

fn safetensors_dtype(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool => "BOOL",
        Dtype::U8 => "U8",
        Dtype::U16 => "U16",
        Dtype::U32 => "U32",
        Dtype::U64 => "U64",
        Dtype::I8 => "I8",
        Dtype::I16 => "I16",
        Dtype::I32 => "I32",
        Dtype::I64 => "I64",
        Dtype::F16 => "F16",
        Dtype::BF16 => "BF16",
        Dtype::F32 => "F32",
        Dtype::F64 => "F64",
        Dtype::C64 => "C64",
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes named arrays, and string metadata, to `path` as a `.safetensors` file.
pub fn save_safetensors(path: impl AsRef<Path>, arrays: &[(String, Array)], metadata: &[(String, String)]) -> Result<()> {
    let path = path.as_ref();
    let out = safetensors_to_bytes(arrays, metadata, &path.display().to_string())?;
    std::fs::write(path, out).map_err(|e| io_error("save_safetensors", path.display(), e))
}

/// The bytes of a `.safetensors` file holding named arrays and string metadata (for a file,
/// a stream or memory); errors name `target`.
pub fn safetensors_to_bytes(arrays: &[(String, Array)], metadata: &[(String, String)], target: &str) -> Result<Vec<u8>> {
    let (op, path) = ("save_safetensors", target);
    let mut entries = Vec::new();
    if !metadata.is_empty() {
        let m: Vec<String> = metadata.iter().map(|(k, v)| format!("{}:{}", json_string(k), json_string(v))).collect();
        entries.push(format!("\"__metadata__\":{{{}}}", m.join(",")));
    }
    let mut body = Vec::new();
    for (name, a) in arrays {
        if name == "__metadata__" || arrays.iter().filter(|(n, _)| n == name).count() > 1 {
            return Err(io_error(op, path, format!("the array name {name:?} is reserved or given twice")));
        }
        let start = body.len();
        body.extend_from_slice(&row_major_bytes(op, a)?);
        let dims: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
        entries.push(format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{start},{}]}}",
            json_string(name),
            safetensors_dtype(a.dtype()),
            dims.join(","),
            body.len()
        ));
    }
    let mut header = format!("{{{}}}", entries.join(","));
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + body.len());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// What a `.safetensors` file holds: its arrays by name (in the file's order) and its metadata.
#[derive(Debug)]
pub struct SafeTensors {
    /// The named arrays.
    pub arrays: Vec<(String, Array)>,
    /// The `__metadata__` strings.
    pub metadata: Vec<(String, String)>,
}

/// Reads a `.safetensors` file.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<SafeTensors> {
    let path = path.as_ref();
    let data = std::fs::read(path).map_err(|e| io_error("load_safetensors", path.display(), e))?;
    safetensors_from_bytes(&data, &path.display().to_string())
}

/// Reads the bytes of a `.safetensors` file (from memory or a stream); errors name `source`.
pub fn safetensors_from_bytes(data: &[u8], source: &str) -> Result<SafeTensors> {
    let (op, path) = ("load_safetensors", source);
    let header_len = data.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let header = header_len
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| data.get(8..8usize.checked_add(n)?))
        .ok_or_else(|| io_error(op, path, "not a .safetensors file: the header length exceeds the file"))?;
    let body = &data[8 + header.len()..];
    let text = std::str::from_utf8(header).map_err(|_| io_error(op, path, "the header is not UTF-8"))?;
    let json = json::parse(text).map_err(|e| io_error(op, path, format!("bad header JSON: {e}")))?;
    let json::Value::Object(fields) = json else {
        return Err(io_error(op, path, "the header is not a JSON object"));
    };
    let mut out = SafeTensors { arrays: Vec::new(), metadata: Vec::new() };
    for (name, value) in fields {
        if name == "__metadata__" {
            let json::Value::Object(m) = value else { return Err(io_error(op, path, "__metadata__ is not an object")) };
            for (k, v) in m {
                let json::Value::String(v) = v else { return Err(io_error(op, path, format!("metadata {k:?} is not a string"))) };
                out.metadata.push((k, v));
            }
            continue;
        }
        let a = tensor_entry(&value, body).map_err(|what| io_error(op, path, format!("tensor {name:?}: {what}")))?;
        out.arrays.push((name, a));
    }
    Ok(out)
}

/// One tensor of a `.safetensors` header, checked against the data that follows it.
fn tensor_entry(value: &json::Value, body: &[u8]) -> std::result::Result<Array, String> {
    let dtype = match value.get("dtype") {
        Some(json::Value::String(s)) => s.as_str(),
        _ => return Err("no dtype".into()),
    };
    // 8-bit floats load as their uint8 codes (decode them with `ops::from_fp8`), as in mlx.
    let dtype = if dtype == "F8_E4M3" {
        Dtype::U8
    } else {
        Dtype::ALL.into_iter().find(|&d| safetensors_dtype(d) == dtype).ok_or_else(|| format!("dtype {dtype} is not supported"))?
    };
    let numbers = |key: &str| -> std::result::Result<Vec<usize>, String> {
        match value.get(key) {
            Some(json::Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    json::Value::Number(n) => Ok(*n),
                    _ => Err(format!("{key} holds a non-integer")),
                })
                .collect(),
            _ => Err(format!("no {key} list")),
        }
    };
    let shape = numbers("shape")?;
    let offsets = numbers("data_offsets")?;
    let [start, end] = offsets[..] else { return Err("data_offsets is not [begin, end]".into()) };
    let bytes = body.get(start..end).filter(|_| start <= end).ok_or_else(|| {
        format!("data_offsets [{start}, {end}] fall outside the {} bytes of data", body.len())
    })?;
    let expected = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d));
    if expected != Some(bytes.len()) {
        return Err(format!("shape {} of {dtype} does not fill its {} bytes", fmt_shape(&shape), bytes.len()));
    }
    Array::from_bytes(bytes, &shape, dtype).map_err(|e| e.to_string())
}

/// The JSON a `.safetensors` header uses: objects, arrays, strings and non-negative integers
/// (other literals are read and kept as `Other`).
mod json {
    /// A parsed JSON value.
    pub enum Value {
        Object(Vec<(String, Value)>),
        Array(Vec<Value>),
        String(String),
        Number(usize),
        Other,
    }

    impl Value {
        /// The field `key` of an object.
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }
    }

    /// Parses one JSON document (nesting is bounded, so a hostile header cannot exhaust the stack).
    pub fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let v = p.value(0)?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("unexpected text at byte {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
        }
        fn eat(&mut self, c: u8) -> Result<(), String> {
            self.ws();
            if self.s.get(self.i) == Some(&c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected '{}' at byte {}", c as char, self.i))
            }
        }
        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > 16 {
                return Err("nested too deeply".into());
            }
            self.ws();
            match self.s.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut fields = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Value::Object(fields));
                    }
                    loop {
                        self.ws();
                        let k = self.string()?;
                        self.eat(b':')?;
                        fields.push((k, self.value(depth + 1)?));
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Value::Object(fields));
                            }
                            _ => return Err(format!("expected ',' or '}}' at byte {}", self.i)),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut items = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Value::Array(items));
                    }
                    loop {
                        items.push(self.value(depth + 1)?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Value::Array(items));
                            }
                            _ => return Err(format!("expected ',' or ']' at byte {}", self.i)),
                        }
                    }
                }
                Some(b'"') => Ok(Value::String(self.string()?)),
                Some(c) if c.is_ascii_digit() => {
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                        self.i += 1;
                    }
                    let digits = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII digits");
                    digits.parse().map(Value::Number).map_err(|_| format!("integer {digits} is too large"))
                }
                Some(_) => {
                    // true, false, null, negative or fractional numbers: read and set aside.
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(|c| !b",]} \t\r\n".contains(c)) {
                        self.i += 1;
                    }
                    let word = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("?");
                    match word {
                        "true" | "false" | "null" => Ok(Value::Other),
                        w if w.parse::<f64>().is_ok() => Ok(Value::Other),
                        w => Err(format!("unexpected {w:?} at byte {start}")),
                    }
                }
                None => Err("unexpected end".into()),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            if self.s.get(self.i) != Some(&b'"') {
                return Err(format!("expected a string at byte {}", self.i));
            }
            self.i += 1;
            let mut out = Vec::new();
            loop {
                match self.s.get(self.i) {
                    None => return Err("unterminated string".into()),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).map_err(|_| "a string is not UTF-8".into());
                    }
                    Some(b'\\') => {
                        let c = *self.s.get(self.i + 1).ok_or("unterminated escape")?;
                        self.i += 2;
                        let ch = match c {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => {
                                let hex = self.s.get(self.i..self.i + 4).ok_or("short \\u escape")?;
                                self.i += 4;
                                let code = u32::from_str_radix(std::str::from_utf8(hex).unwrap_or("x"), 16)
                                    .map_err(|_| "bad \\u escape")?;
                                char::from_u32(code).unwrap_or('\u{fffd}')
                            }
                            _ => return Err(format!("bad escape at byte {}", self.i - 1)),
                        };
                        let mut buf = [0; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                    Some(&c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }
    }
}
