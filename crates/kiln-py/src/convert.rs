//! Python values to arrays and back.
//!
//! - Constructors (`array(...)`) build *strong* arrays: Python bools are bool, ints int32 (int64
//!   when a value does not fit), floats float32, nested lists take the widest kind they hold, and
//!   numpy arrays keep their dtype except float64, which becomes float32 as in mlx.
//! - Op operands turn Python numbers into *weak* scalars that adopt the other operand's dtype;
//!   Python complex numbers are complex64 scalars (the one complex dtype, above every other).
//! - Complex values (Python complex, numpy complex64 and complex128) make complex64 arrays.
//! - Numpy arrays are read through `__array_interface__` (a copy of the contiguous data), so the
//!   extension needs no numpy headers and one abi3 build serves every Python version. Objects of
//!   other array libraries that only offer `__array__` go through `numpy.asarray` first.

use crate::array::PyArray;
use crate::errors::OrRaise;
use kiln::{ops, Array, Complex64, Dtype};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBool, PyByteArray, PyBytes, PyComplex, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyTuple};

/// An array argument of an op: an array, a Python number (weak), a numpy array or a nested list.
pub struct Operand(pub Array);

impl<'a, 'py> FromPyObject<'a, 'py> for Operand {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        operand(&obj).map(Operand)
    }
}

/// A Python int as an i64, or an `OverflowError` naming it.
fn python_int(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    obj.extract().map_err(|_| {
        PyOverflowError::new_err(format!("the Python int {obj} does not fit in int64"))
    })
}

/// The byte-order character of this machine in numpy's `typestr`.
const NATIVE_ORDER: char = if cfg!(target_endian = "little") {
    '<'
} else {
    '>'
};

/// `obj` as an op operand: Python ints and floats become weak scalars.
pub fn operand(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    if let Ok(a) = obj.cast::<PyArray>() {
        return Ok(a.borrow().array.clone());
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Array::scalar(obj.extract::<bool>()?));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(Array::weak_int(python_int(obj)?));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Array::weak_float(obj.extract::<f64>()?));
    }
    if obj.is_instance_of::<PyComplex>() {
        return Ok(Array::scalar(python_complex(obj)?));
    }
    to_array(obj, None)
}

/// A Python (or numpy) complex number as complex64.
fn python_complex(obj: &Bound<'_, PyAny>) -> PyResult<Complex64> {
    let z = obj.cast::<PyComplex>()?;
    Ok(Complex64::new(z.real() as f32, z.imag() as f32))
}

/// `obj` as a new strong array (the `array` constructor), cast to `dtype` when given.
pub fn to_array(obj: &Bound<'_, PyAny>, dtype: Option<Dtype>) -> PyResult<Array> {
    let a = if let Ok(a) = obj.cast::<PyArray>() {
        a.borrow().array.clone()
    } else if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyInt>()
        || obj.is_instance_of::<PyFloat>()
        || obj.is_instance_of::<PyComplex>()
    {
        let mut leaves = Leaves::default();
        leaves.push(obj)?;
        leaves.into_array(&[], dtype)?
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        from_nested(obj, dtype)?
    } else if obj.hasattr("__array_interface__")? {
        from_numpy(obj, dtype)?
    } else if let Ok(bytes) = obj.cast::<PyBytes>() {
        Array::from_slice(bytes.as_bytes(), &[bytes.as_bytes().len()]).or_raise()?
    } else if let Ok(bytes) = obj.cast::<PyByteArray>() {
        let v = bytes.to_vec();
        Array::from_slice(&v, &[v.len()]).or_raise()?
    } else if obj.is_instance_of::<PyMemoryView>() {
        // Any other buffer: numpy reads its format and shape.
        let n = obj.py().import("numpy")?.call_method1("asarray", (obj,))?;
        from_numpy(&n, dtype)?
    } else if let Some(a) = crate::dlpack::from_gpu_producer(obj)? {
        // Another library's array on a GPU: read in place.
        a
    } else if obj.hasattr("__array__")? {
        // Other array libraries (torch, jax, ...) on the host convert through numpy.
        let n = obj.py().import("numpy")?.call_method1("asarray", (obj,))?;
        from_numpy(&n, dtype)?
    } else {
        return Err(PyTypeError::new_err(format!(
            "array: cannot make an array from a {}; pass a number, a (nested) list or tuple, bytes, a numpy array or an array",
            obj.get_type().name()?
        )));
    };
    match dtype {
        Some(d) if d != a.dtype() => ops::astype(&a, d).or_raise(),
        _ => Ok(a),
    }
}

/// The scalars of a nested list, gathered in row-major order with the widest kind seen.
#[derive(Default)]
struct Leaves {
    values: Vec<f64>,
    /// Imaginary parts, filled once a complex leaf is seen (zeros for the leaves before it).
    imag: Vec<f64>,
    ints: Vec<i64>,
    any_float: bool,
    any_int: bool,
    any_complex: bool,
}

impl Leaves {
    fn push(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        if obj.is_instance_of::<PyBool>() {
            let b: bool = obj.extract()?;
            self.values.push(b as u8 as f64);
            self.ints.push(b as i64);
        } else if obj.is_instance_of::<PyInt>() {
            let v = python_int(obj)?;
            self.any_int = true;
            self.values.push(v as f64);
            self.ints.push(v);
        } else if obj.is_instance_of::<PyFloat>() {
            self.any_float = true;
            self.values.push(obj.extract()?);
            self.ints.push(0);
        } else if obj.is_instance_of::<PyComplex>() {
            let z = obj.cast::<PyComplex>()?;
            self.imag.resize(self.values.len(), 0.0);
            self.any_complex = true;
            self.values.push(z.real());
            self.imag.push(z.imag());
            self.ints.push(0);
        } else if obj.hasattr("__array_interface__")?
            && obj.hasattr("__float__")?
            && !obj.hasattr("__len__")?
        {
            // A numpy scalar: an integer one counts as an int, a complex one as a complex
            // number, any other as a float.
            if obj.hasattr("__index__")? {
                return self.push(&obj.call_method0("__index__")?);
            }
            if obj.getattr("dtype")?.getattr("kind")?.extract::<String>()? == "c" {
                return self.push(&obj.call_method0("__complex__")?);
            }
            return self.push(&obj.call_method0("__float__")?);
        } else {
            return Err(PyValueError::new_err(format!(
                "array: a nested list may hold only bools, ints, floats, complex numbers or arrays, got a {}",
                obj.get_type().name()?
            )));
        }
        Ok(())
    }

    /// The leaves as an array of `shape`: complex64 if any is complex, float32 if any is a float, else int32 (int64 when one
    /// does not fit), else bool; float64 straight from the Python values when `dtype` asks for
    /// it (through float32 they would lose precision).
    fn into_array(mut self, shape: &[usize], dtype: Option<Dtype>) -> PyResult<Array> {
        if self.any_complex {
            self.imag.resize(self.values.len(), 0.0);
            let v: Vec<Complex64> = self.values.iter().zip(&self.imag).map(|(&re, &im)| Complex64::new(re as f32, im as f32)).collect();
            Array::from_slice(&v, shape).or_raise()
        } else if dtype == Some(Dtype::F64) && (self.any_float || self.any_int) {
            Array::from_slice(&self.values, shape).or_raise()
        } else if self.any_float {
            let v: Vec<f32> = self.values.iter().map(|&x| x as f32).collect();
            Array::from_slice(&v, shape).or_raise()
        } else if self.any_int {
            if self.ints.iter().all(|&v| i32::try_from(v).is_ok()) {
                let v: Vec<i32> = self.ints.iter().map(|&x| x as i32).collect();
                Array::from_slice(&v, shape).or_raise()
            } else {
                Array::from_slice(&self.ints, shape).or_raise()
            }
        } else if self.values.is_empty() {
            Array::from_slice::<f32>(&[], shape).or_raise()
        } else {
            let v: Vec<bool> = self.ints.iter().map(|&x| x != 0).collect();
            Array::from_slice(&v, shape).or_raise()
        }
    }
}

fn is_sequence(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()
}

/// A nested list or tuple of scalars (or of arrays, which are stacked) as an array.
fn from_nested(obj: &Bound<'_, PyAny>, dtype: Option<Dtype>) -> PyResult<Array> {
    let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
    if items.iter().any(|i| i.cast::<PyArray>().is_ok() || is_sequence(i) && contains_array(i)) {
        // Arrays at any depth: each item becomes an array, and they stack (promoting dtypes).
        let parts = items
            .iter()
            .map(|i| to_array(i, None))
            .collect::<PyResult<Vec<_>>>()?;
        return ops::stack(&parts, 0).or_raise();
    }
    let mut shape = Vec::new();
    let mut probe = obj.clone();
    while is_sequence(&probe) {
        let n = probe.len()?;
        shape.push(n);
        if n == 0 {
            break;
        }
        probe = probe.get_item(0)?;
    }
    let mut leaves = Leaves::default();
    gather(obj, &shape, &mut leaves)?;
    leaves.into_array(&shape, dtype)
}

/// Whether a nested list holds an array anywhere.
fn contains_array(obj: &Bound<'_, PyAny>) -> bool {
    obj.try_iter()
        .map(|mut it| it.any(|i| i.is_ok_and(|i| i.cast::<PyArray>().is_ok() || is_sequence(&i) && contains_array(&i))))
        .unwrap_or(false)
}

fn gather(obj: &Bound<'_, PyAny>, shape: &[usize], leaves: &mut Leaves) -> PyResult<()> {
    let Some((&n, rest)) = shape.split_first() else {
        if is_sequence(obj) {
            return Err(ragged());
        }
        return leaves.push(obj);
    };
    if !is_sequence(obj) || obj.len()? != n {
        return Err(ragged());
    }
    for item in obj.try_iter()? {
        gather(&item?, rest, leaves)?;
    }
    Ok(())
}

fn ragged() -> PyErr {
    PyValueError::new_err("array: the nested list is ragged (its sublists differ in length); every level must have one length")
}

/// The dtype a numpy `typestr` (`<f4`, `|b1`, ...) names, if kiln has it.
fn dtype_of_typestr(t: &str) -> Option<Dtype> {
    let mut chars = t.chars();
    let order = chars.next()?;
    let kind = chars.as_str();
    if order != NATIVE_ORDER && order != '|' && order != '=' {
        return None;
    }
    kiln::io::dtype_of_numpy_code(kind)
}

/// The numpy `typestr` of a kiln dtype (none for bfloat16, which numpy lacks).
pub fn typestr(d: Dtype) -> Option<String> {
    let order = NATIVE_ORDER;
    let (kind, order) = match d {
        Dtype::Bool => ("b1", '|'),
        Dtype::U8 => ("u1", '|'),
        Dtype::I8 => ("i1", '|'),
        Dtype::U16 => ("u2", order),
        Dtype::U32 => ("u4", order),
        Dtype::U64 => ("u8", order),
        Dtype::I16 => ("i2", order),
        Dtype::I32 => ("i4", order),
        Dtype::I64 => ("i8", order),
        Dtype::F16 => ("f2", order),
        Dtype::F32 => ("f4", order),
        Dtype::F64 => ("f8", order),
        Dtype::C64 => ("c8", order),
        Dtype::BF16 => return None,
    };
    Some(format!("{order}{kind}"))
}

/// A copy of a numpy array (or anything with `__array_interface__`). float64 becomes float32
/// unless `dtype` asks otherwise, as mlx does.
fn from_numpy(obj: &Bound<'_, PyAny>, dtype: Option<Dtype>) -> PyResult<Array> {
    let np = obj.py().import("numpy")?;
    let mut c = np.getattr("asarray")?.call((obj,), Some(&[("order", "C")].into_py_dict(obj.py())?))?;
    if c.getattr("dtype")?.getattr("kind")?.extract::<String>()? == "c" {
        // complex128 (and complex256) become complex64, as in mlx: kiln's one complex dtype.
        c = c.call_method1("astype", (np.getattr("complex64")?,))?;
    }
    let iface = c.getattr("__array_interface__")?.cast_into::<PyDict>()?;
    let item = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        iface
            .get_item(k)?
            .ok_or_else(|| PyTypeError::new_err(format!("__array_interface__ has no '{k}'")))
    };
    let type_str: String = item("typestr")?.extract()?;
    let dt = dtype_of_typestr(&type_str).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "array: numpy dtype '{type_str}' has no kiln dtype; kiln has bool, (u)int8-64, float16, bfloat16, float32, float64 and complex64 (convert with .astype first)"
        ))
    })?;
    let shape: Vec<usize> = item("shape")?.extract()?;
    let (address, _readonly): (usize, bool) = item("data")?.extract()?;
    let nbytes = shape.iter().product::<usize>() * dt.size();
    let bytes: &[u8] = if nbytes == 0 {
        &[]
    } else {
        // Safety: `c` is a live C-contiguous numpy array of `nbytes` bytes at `address`; it is
        // held until the copy below is done.
        unsafe { std::slice::from_raw_parts(address as *const u8, nbytes) }
    };
    let a = Array::from_bytes(bytes, &shape, dt).or_raise()?;
    drop(c);
    match (dt, dtype) {
        (Dtype::F64, None) => ops::astype(&a, Dtype::F32).or_raise(),
        _ => Ok(a),
    }
}

/// The values of an array as Python objects: bool, int, float or complex per element.
pub enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    UInt(Vec<u64>),
    Float(Vec<f64>),
    Complex(Vec<Complex64>),
}

impl Values {
    /// Evaluates `a` and reads its elements in row-major order.
    pub fn of(a: &Array) -> PyResult<Values> {
        Ok(match a.dtype() {
            Dtype::Bool => Values::Bool(a.to_vec().or_raise()?),
            Dtype::U64 => Values::UInt(a.to_vec().or_raise()?),
            Dtype::C64 => Values::Complex(a.to_vec().or_raise()?),
            d if d.is_float() => {
                Values::Float(ops::astype(a, Dtype::F64).or_raise()?.to_vec().or_raise()?)
            }
            _ => Values::Int(ops::astype(a, Dtype::I64).or_raise()?.to_vec().or_raise()?),
        })
    }

    /// Element `i` as a Python object.
    pub fn get<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Values::Bool(v) => PyBool::new(py, v[i]).to_owned().into_any(),
            Values::Int(v) => v[i].into_pyobject(py)?.into_any(),
            Values::UInt(v) => v[i].into_pyobject(py)?.into_any(),
            Values::Float(v) => v[i].into_pyobject(py)?.into_any(),
            Values::Complex(v) => PyComplex::from_doubles(py, v[i].re as f64, v[i].im as f64).into_any(),
        })
    }
}

/// `a` as nested Python lists (a plain Python scalar for a 0-d array).
pub fn to_list<'py>(py: Python<'py>, a: &Array) -> PyResult<Bound<'py, PyAny>> {
    let values = Values::of(a)?;
    let mut next = 0;
    nested(py, &values, a.shape(), &mut next)
}

fn nested<'py>(
    py: Python<'py>,
    values: &Values,
    shape: &[usize],
    next: &mut usize,
) -> PyResult<Bound<'py, PyAny>> {
    let Some((&n, rest)) = shape.split_first() else {
        *next += 1;
        return values.get(py, *next - 1);
    };
    let items = (0..n)
        .map(|_| nested(py, values, rest, next))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}
