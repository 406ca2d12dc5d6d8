//! `kiln.core.Dtype` and the dtype attributes (`float32`, `bool_`, ...), as in mlx.core, plus the
//! abstract categories (`floating`, `integer`, ...) that `issubdtype` tests against.

use kiln::dtype::Category;
use kiln::Dtype;
use pyo3::prelude::*;

/// An element type; compares equal to the dtype it names and hashes alike.
#[pyclass(name = "Dtype", module = "kiln.core", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDtype(pub Dtype);

#[pymethods]
impl PyDtype {
    /// Bytes per element.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }

    fn __repr__(&self) -> String {
        format!("kiln.core.{}", self.0.name())
    }
}

/// The Python attribute name of a dtype (`bool` is a Python builtin, so mlx calls it `bool_`).
fn attribute_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Bool => "bool_",
        d => d.name(),
    }
}

/// An abstract dtype category, as numpy's and mlx's `floating`, `integer`, ...
#[pyclass(
    name = "DtypeCategory",
    module = "kiln.core",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyDtypeCategory {
    #[pyo3(name = "generic")]
    Generic,
    #[pyo3(name = "number")]
    Number,
    #[pyo3(name = "integer")]
    Integer,
    #[pyo3(name = "signedinteger")]
    SignedInteger,
    #[pyo3(name = "unsignedinteger")]
    UnsignedInteger,
    #[pyo3(name = "inexact")]
    Inexact,
    #[pyo3(name = "floating")]
    Floating,
    #[pyo3(name = "complexfloating")]
    ComplexFloating,
}

impl PyDtypeCategory {
    const ALL: [(PyDtypeCategory, &'static str); 8] = [
        (PyDtypeCategory::Generic, "generic"),
        (PyDtypeCategory::Number, "number"),
        (PyDtypeCategory::Integer, "integer"),
        (PyDtypeCategory::SignedInteger, "signedinteger"),
        (PyDtypeCategory::UnsignedInteger, "unsignedinteger"),
        (PyDtypeCategory::Inexact, "inexact"),
        (PyDtypeCategory::Floating, "floating"),
        (PyDtypeCategory::ComplexFloating, "complexfloating"),
    ];

    /// True when `self` lies inside `other` in the category tree.
    fn within(self, other: PyDtypeCategory) -> bool {
        use PyDtypeCategory::*;
        self == other
            || match self {
                Generic => false,
                Number => other == Generic,
                Integer | Inexact => Number.within(other),
                SignedInteger | UnsignedInteger => Integer.within(other),
                Floating | ComplexFloating => Inexact.within(other),
            }
    }

    /// The narrowest category holding `d` (bool is only `generic`).
    fn of(d: Dtype) -> PyDtypeCategory {
        match d.category() {
            Category::Bool => PyDtypeCategory::Generic,
            Category::Unsigned => PyDtypeCategory::UnsignedInteger,
            Category::Signed => PyDtypeCategory::SignedInteger,
            Category::Float => PyDtypeCategory::Floating,
            Category::Complex => PyDtypeCategory::ComplexFloating,
        }
    }
}

/// Either side of `issubdtype`.
#[derive(FromPyObject)]
pub enum DtypeOrCategory {
    Dtype(PyDtype),
    Category(PyDtypeCategory),
}

/// True when the first dtype or category lies inside the second (`issubdtype(float16, floating)`).
#[pyfunction]
pub fn issubdtype(arg1: DtypeOrCategory, arg2: DtypeOrCategory) -> bool {
    match (arg1, arg2) {
        (DtypeOrCategory::Dtype(a), DtypeOrCategory::Dtype(b)) => a == b,
        (DtypeOrCategory::Dtype(a), DtypeOrCategory::Category(c)) => {
            PyDtypeCategory::of(a.0).within(c)
        }
        (DtypeOrCategory::Category(_), DtypeOrCategory::Dtype(_)) => false,
        (DtypeOrCategory::Category(a), DtypeOrCategory::Category(b)) => a.within(b),
    }
}

/// Adds the dtype and category attributes and `issubdtype` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDtype>()?;
    m.add_class::<PyDtypeCategory>()?;
    for d in Dtype::ALL {
        m.add(attribute_name(d), PyDtype(d))?;
    }
    for (c, name) in PyDtypeCategory::ALL {
        m.add(name, c)?;
    }
    m.add_function(wrap_pyfunction!(issubdtype, m)?)
}
