//! `kiln.core.array`: a lazy array, as mlx.core's. Properties, conversion to Python and numpy,
//! printing, operators (with reflected forms and weak Python scalars) and the op methods
//! (`a.sum(...)` is `kiln.core.sum(a, ...)`). Indexing lives in `index.rs`.

use crate::convert::{operand, to_array, to_list, typestr, Operand, Values};
use crate::device::StreamOrDevice;
use crate::dtype::PyDtype;
use crate::errors::OrRaise;
use kiln::{Array, Dtype};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

/// A lazy n-dimensional array.
#[pyclass(name = "array", module = "kiln.core", from_py_object, weakref)]
#[derive(Clone)]
pub struct PyArray {
    /// The kiln array this object currently stands for (in-place operators and `a[i] = v`
    /// replace it, as mlx does).
    pub array: Array,
}

impl From<Array> for PyArray {
    fn from(array: Array) -> PyArray {
        PyArray { array }
    }
}

/// `other` as the second operand of an arithmetic or bitwise operator (`symbol` names it in
/// errors). Arrays, Python and numpy numbers and numpy arrays are operands; strings, lists and
/// tuples are a ValueError, as in mlx; any other object gives None, so Python can try that
/// object's reflected operator.
fn binary_operand(other: &Bound<'_, PyAny>, symbol: &str) -> PyResult<Option<Array>> {
    if compares_elementwise(other)? {
        return operand(other).map(Some);
    }
    if other.is_instance_of::<pyo3::types::PyString>()
        || other.is_instance_of::<pyo3::types::PyList>()
        || other.is_instance_of::<PyTuple>()
    {
        return Err(PyValueError::new_err(format!(
            "array {symbol} {}: an operand must be an array, a number or a numpy array; wrap a list or tuple in mx.array(...)",
            other.get_type().name()?
        )));
    }
    Ok(None)
}

/// Applies a binary op with `other` on the right (on the left when `reflected`), or returns
/// `NotImplemented` when `other` is an object kiln does not know (see [`binary_operand`]).
fn binary_op(
    py: Python<'_>,
    lhs: &Array,
    other: &Bound<'_, PyAny>,
    (symbol, reflected): (&str, bool),
    f: fn(Array, Array) -> kiln::Result<Array>,
) -> PyResult<Py<PyAny>> {
    let Some(rhs) = binary_operand(other, symbol)? else {
        return Ok(py.NotImplemented());
    };
    let (a, b) = if reflected {
        (rhs, lhs.clone())
    } else {
        (lhs.clone(), rhs)
    };
    let out = f(a, b).or_raise()?;
    Ok(PyArray::from(out).into_pyobject(py)?.into_any().unbind())
}

/// Whether `other` compares with an array element by element (as mlx): an array, a Python
/// number, or a numpy array or scalar. Lists, tuples, strings and other objects do not.
fn compares_elementwise(other: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(other.cast::<PyArray>().is_ok()
        || other.is_instance_of::<pyo3::types::PyBool>()
        || other.is_instance_of::<pyo3::types::PyInt>()
        || other.is_instance_of::<pyo3::types::PyFloat>()
        || other.is_instance_of::<pyo3::types::PyComplex>()
        || other.hasattr("__array_interface__")?)
}

/// An ordering comparison (`<`, `<=`, `>`, `>=`); against an object that does not compare
/// element by element it is a ValueError, as in mlx.
fn ordering(py: Python<'_>, lhs: &Array, other: &Bound<'_, PyAny>, symbol: &str, f: fn(Array, Array) -> kiln::Result<Array>) -> PyResult<Py<PyAny>> {
    if !compares_elementwise(other)? {
        return Err(PyValueError::new_err(format!(
            "array {symbol} {}: an array orders only against arrays, numbers and numpy arrays",
            other.get_type().name()?
        )));
    }
    binary_op(py, lhs, other, (symbol, false), f)
}

/// Refuses `a /= b` for an integer or bool `a`, whose quotient would need another dtype (as mlx
/// and numpy refuse it); `a = a / b` is the way to ask for it.
fn check_in_place(symbol: &str, a: &Array) -> PyResult<()> {
    if symbol == "/=" && !a.dtype().is_inexact() {
        return Err(PyValueError::new_err(format!(
            "a /= b: true division in place needs a floating-point array, got {}; write a = a / b for a new array",
            a.dtype()
        )));
    }
    Ok(())
}

/// `a op= b`: the array object `slf` now holds the result. The operand is read before `slf` is
/// borrowed for writing, so `a @= a` works. An operand kiln does not know is a TypeError here
/// (in place, there is no reflected operator to hand over to).
fn in_place(slf: &Bound<'_, PyArray>, other: &Bound<'_, PyAny>, symbol: &str, f: fn(Array, Array) -> kiln::Result<Array>) -> PyResult<()> {
    let Some(rhs) = binary_operand(other, symbol)? else {
        return Err(PyTypeError::new_err(format!(
            "unsupported operand type for {symbol}: array and {}",
            other.get_type().name()?
        )));
    };
    let mut this = slf.try_borrow_mut()?;
    check_in_place(symbol, &this.array)?;
    this.array = f(this.array.clone(), rhs).or_raise()?;
    Ok(())
}

macro_rules! binary_dunders {
    ($($dunder:ident, $rdunder:ident, $idunder:ident, $symbol:literal => $op:path;)*) => {
        #[pymethods]
        impl PyArray {
            $(
                fn $dunder(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                    binary_op(py, &self.array, other, ($symbol, false), |a, b| $op(a, b))
                }
                fn $rdunder(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                    binary_op(py, &self.array, other, ($symbol, true), |a, b| $op(a, b))
                }
                /// In place, as mlx: the array object itself now holds the result.
                fn $idunder(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
                    in_place(slf, other, concat!($symbol, "="), |a, b| $op(a, b))
                }
            )*
        }
    };
}

binary_dunders! {
    __add__, __radd__, __iadd__, "+" => kiln::ops::add;
    __sub__, __rsub__, __isub__, "-" => kiln::ops::subtract;
    __mul__, __rmul__, __imul__, "*" => kiln::ops::multiply;
    __truediv__, __rtruediv__, __itruediv__, "/" => kiln::ops::divide;
    __floordiv__, __rfloordiv__, __ifloordiv__, "//" => kiln::ops::floor_divide;
    __mod__, __rmod__, __imod__, "%" => kiln::ops::remainder;
    __matmul__, __rmatmul__, __imatmul__, "@" => kiln::ops::matmul;
    __and__, __rand__, __iand__, "&" => kiln::ops::bitwise_and;
    __or__, __ror__, __ior__, "|" => kiln::ops::bitwise_or;
    __xor__, __rxor__, __ixor__, "^" => kiln::ops::bitwise_xor;
    __lshift__, __rlshift__, __ilshift__, "<<" => kiln::ops::left_shift;
    __rshift__, __rrshift__, __irshift__, ">>" => kiln::ops::right_shift;
}

#[pymethods]
impl PyArray {
    /// `array(val, dtype=None)`: from a number, a (nested) list or tuple, a numpy array or an array.
    #[new]
    #[pyo3(signature = (val, dtype = None))]
    fn new(val: &Bound<'_, PyAny>, dtype: Option<PyDtype>) -> PyResult<PyArray> {
        to_array(val, dtype.map(|d| d.0)).map(PyArray::from)
    }

    /// The shape, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        kiln::transforms::compile::note_shape_read();
        PyTuple::new(py, self.array.shape())
    }

    /// The number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.array.ndim()
    }

    /// The number of elements.
    #[getter]
    fn size(&self) -> usize {
        kiln::transforms::compile::note_shape_read();
        self.array.size()
    }

    /// The element type.
    #[getter]
    fn dtype(&self) -> PyDtype {
        PyDtype(self.array.dtype())
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.array.dtype().size()
    }

    /// Bytes of all elements.
    #[getter]
    fn nbytes(&self) -> usize {
        kiln::transforms::compile::note_shape_read();
        self.array.nbytes()
    }

    /// The transpose (all axes reversed).
    #[getter(T)]
    fn transposed(&self) -> PyResult<PyArray> {
        kiln::ops::transpose(&self.array, None)
            .or_raise()
            .map(PyArray::from)
    }

    /// A copy cast to `dtype`.
    #[pyo3(signature = (dtype, stream = None))]
    fn astype(&self, dtype: PyDtype, stream: Option<StreamOrDevice>) -> PyResult<PyArray> {
        crate::device::on(stream.as_ref(), || kiln::ops::astype(&self.array, dtype.0))
            .map(PyArray::from)
    }

    /// The single element as a Python scalar (evaluates).
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.array.size() != 1 {
            return Err(PyValueError::new_err(format!(
                "item: needs an array of one element, got shape {:?}; index it first or use tolist()",
                self.array.shape()
            )));
        }
        Values::of(&self.array)?.get(py, 0)
    }

    /// The elements as nested Python lists (evaluates).
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_list(py, &self.array)
    }

    /// Computes the array now.
    fn eval(&self) -> PyResult<()> {
        self.array.eval().or_raise()
    }

    fn __repr__(&self) -> PyResult<String> {
        self.array.eval().or_raise()?;
        Ok(self.array.to_string())
    }

    fn __len__(&self) -> PyResult<usize> {
        kiln::transforms::compile::note_shape_read();
        self.array.shape().first().copied().ok_or_else(|| PyTypeError::new_err("len() of a 0-d array"))
    }

    fn __iter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, PyAny>> {
        let py = slf.py();
        kiln::transforms::compile::note_shape_read();
        if slf.borrow().array.ndim() == 0 {
            return Err(PyTypeError::new_err("iteration over a 0-d array"));
        }
        let n = slf.borrow().array.shape()[0];
        let items = (0..n)
            .map(|i| {
                kiln::ops::slice_axis(&slf.borrow().array, 0, i as i64, i as i64 + 1)
                    .and_then(|r| kiln::ops::squeeze(r, Some(&[0])))
            })
            .map(|r| r.or_raise().map(PyArray::from))
            .collect::<PyResult<Vec<_>>>()?;
        pyo3::types::PyList::new(py, items)?
            .try_iter()
            .map(|it| it.into_any())
    }

    fn __bool__(&self) -> PyResult<bool> {
        Ok(match self.single("bool")? {
            Values::Bool(v) => v[0],
            Values::Int(v) => v[0] != 0,
            Values::UInt(v) => v[0] != 0,
            Values::Float(v) => v[0] != 0.0,
            Values::Complex(v) => v[0] != kiln::Complex64::default(),
        })
    }

    fn __int__(&self) -> PyResult<i64> {
        let a = PyArray::from(kiln::ops::astype(&self.array, Dtype::I64).or_raise()?);
        match a.single("int")? {
            Values::Int(v) => Ok(v[0]),
            _ => unreachable!("an int64 array reads as ints"),
        }
    }

    fn __float__(&self) -> PyResult<f64> {
        if self.array.dtype().is_complex() {
            return Err(PyTypeError::new_err("float: a complex64 array has two parts; use complex(a), a.real or abs(a)"));
        }
        let a = PyArray::from(kiln::ops::astype(&self.array, Dtype::F64).or_raise()?);
        match a.single("float")? {
            Values::Float(v) => Ok(v[0]),
            _ => unreachable!("a float64 array reads as floats"),
        }
    }

    fn __complex__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let a = PyArray::from(kiln::ops::astype(&self.array, Dtype::C64).or_raise()?);
        a.single("complex")?.get(py, 0)
    }

    fn __index__(&self) -> PyResult<i64> {
        if !self.array.dtype().is_integer() {
            return Err(PyTypeError::new_err(format!(
                "only integer arrays can be used as an index, got {}",
                self.array.dtype()
            )));
        }
        self.__int__()
    }

    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    fn __neg__(&self) -> PyResult<PyArray> {
        kiln::ops::negative(&self.array)
            .or_raise()
            .map(PyArray::from)
    }

    fn __pos__(&self) -> PyArray {
        self.clone()
    }

    fn __abs__(&self) -> PyResult<PyArray> {
        kiln::ops::abs(&self.array).or_raise().map(PyArray::from)
    }

    fn __invert__(&self) -> PyResult<PyArray> {
        let r = if self.array.dtype() == Dtype::Bool {
            kiln::ops::logical_not(&self.array)
        } else {
            kiln::ops::bitwise_invert(&self.array)
        };
        r.or_raise().map(PyArray::from)
    }

    fn __pow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.power(py, other, modulo, false)
    }

    fn __rpow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.power(py, other, modulo, true)
    }

    fn __ipow__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, _modulo: &Bound<'_, PyAny>) -> PyResult<()> {
        in_place(slf, other, "**=", kiln::ops::power)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if !compares_elementwise(other)? {
            return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
        }
        binary_op(py, &self.array, other, ("==", false), kiln::ops::equal)
    }

    fn __ne__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if !compares_elementwise(other)? {
            return Ok(true.into_pyobject(py)?.to_owned().into_any().unbind());
        }
        binary_op(py, &self.array, other, ("!=", false), kiln::ops::not_equal)
    }

    fn __lt__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        ordering(py, &self.array, other, "<", kiln::ops::less)
    }

    fn __le__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        ordering(py, &self.array, other, "<=", kiln::ops::less_equal)
    }

    fn __gt__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        ordering(py, &self.array, other, ">", kiln::ops::greater)
    }

    fn __ge__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        ordering(py, &self.array, other, ">=", kiln::ops::greater_equal)
    }

    /// `format(a, spec)`: a 0-d array formats as its value (`f"{a:.2f}"`); with an empty spec any
    /// array formats as its repr. A spec for a larger array is a TypeError, as for a list.
    fn __format__(&self, py: Python<'_>, spec: &str) -> PyResult<String> {
        if spec.is_empty() {
            return self.__repr__();
        }
        if self.array.ndim() != 0 {
            return Err(PyTypeError::new_err(format!(
                "unsupported format string '{spec}' for an array of shape {:?}: only 0-d arrays take a format spec",
                self.array.shape()
            )));
        }
        self.item(py)?.call_method1("__format__", (spec,))?.extract()
    }

    fn __copy__(&self) -> PyArray {
        self.clone()
    }

    #[pyo3(signature = (memo = None))]
    fn __deepcopy__(&self, memo: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        let _ = memo;
        kiln::ops::copy(&self.array).or_raise().map(PyArray::from)
    }

    /// Pickling: the row-major bytes, the dtype's name and the shape, rebuilt by
    /// `kiln._core._array_from_bytes` (every dtype, bfloat16 and complex64 included).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let bytes = kiln::io::row_major_bytes("pickle", &self.array).or_raise()?;
        let rebuild = py.import("kiln._core")?.getattr("_array_from_bytes")?;
        let args = (PyBytes::new(py, &bytes), self.array.dtype().name(), PyTuple::new(py, self.array.shape())?);
        Ok((rebuild, args.into_pyobject(py)?))
    }

    /// The array API namespace of kiln's arrays: `kiln.core` (for any released version of the
    /// standard; another `api_version` is a ValueError, as the standard asks).
    #[pyo3(signature = (*, api_version = None))]
    fn __array_namespace__<'py>(&self, py: Python<'py>, api_version: Option<&str>) -> PyResult<Bound<'py, PyModule>> {
        const VERSIONS: [&str; 4] = ["2021.12", "2022.12", "2023.12", "2024.12"];
        match api_version {
            Some(v) if !VERSIONS.contains(&v) => {
                Err(PyValueError::new_err(format!("__array_namespace__: api_version {v:?} is not one of {VERSIONS:?}")))
            }
            _ => py.import("kiln.core"),
        }
    }

    /// The numpy array interface: numpy reads the evaluated memory in place (read-only), so
    /// `np.asarray(a)` does not copy. bfloat16 has no numpy dtype and goes through `__array__`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(type_str) = typestr(self.array.dtype()) else {
            return Err(PyAttributeError::new_err(
                "bfloat16 arrays have no numpy dtype",
            ));
        };
        let (ptr, strides) = self.array.raw_parts().or_raise()?;
        let size = self.array.dtype().size() as isize;
        let byte_strides: Vec<isize> = strides.iter().map(|s| s * size).collect();
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, self.array.shape())?)?;
        d.set_item("typestr", type_str)?;
        d.set_item("data", (ptr as usize, true))?;
        d.set_item("strides", PyTuple::new(py, byte_strides)?)?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    /// Conversion for numpy when the array interface does not apply (bfloat16 becomes float32).
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let np = py.import("numpy")?;
        let converts = self.array.dtype() == Dtype::BF16 || dtype.is_some_and(|d| !d.is_none());
        if copy == Some(false) && converts {
            return Err(PyValueError::new_err(
                "__array__: a dtype conversion needs a copy, but copy=False was asked",
            ));
        }
        let a = match self.array.dtype() {
            Dtype::BF16 => kiln::ops::astype(&self.array, Dtype::F32).or_raise()?,
            _ => self.array.clone(),
        };
        let view = np.call_method1("asarray", (PyArray::from(a),))?;
        let out = match dtype {
            Some(d) if !d.is_none() => view.call_method1("astype", (d,))?,
            _ => view,
        };
        if copy == Some(true) {
            out.call_method0("copy")
        } else {
            Ok(out)
        }
    }
}

impl PyArray {
    /// `self ** other` (or `other ** self` when `reflected`); a modulus is refused.
    fn power(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: &Bound<'_, PyAny>,
        reflected: bool,
    ) -> PyResult<Py<PyAny>> {
        if !modulo.is_none() {
            return Err(PyTypeError::new_err(
                "pow() with a modulus is not supported for arrays",
            ));
        }
        binary_op(py, &self.array, other, ("**", reflected), kiln::ops::power)
    }

    /// The values of a one-element array, for `bool()`, `int()` and `float()`.
    fn single(&self, what: &str) -> PyResult<Values> {
        if self.array.size() != 1 {
            return Err(PyValueError::new_err(format!(
                "{what}() of an array with {} elements is ambiguous; use .any() or .all()",
                self.array.size()
            )));
        }
        Values::of(&self.array)
    }

    /// This array as an op operand.
    pub fn operand(&self) -> Operand {
        Operand(self.array.clone())
    }
}

/// An array rebuilt from its pickled parts (see `array.__reduce__`).
#[pyfunction]
pub fn _array_from_bytes(data: &[u8], dtype: &str, shape: Vec<usize>) -> PyResult<PyArray> {
    let dtype = Dtype::from_name(dtype).ok_or_else(|| PyValueError::new_err(format!("array: unknown dtype '{dtype}' in pickled data")))?;
    Array::from_bytes(data, &shape, dtype).or_raise().map(PyArray::from)
}
