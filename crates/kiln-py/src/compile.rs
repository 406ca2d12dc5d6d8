//! `compile` over flat lists: `_Compiled` wraps a kiln compiled function of a Python callback.
//! Its calls take the arrays and the non-array constants (None, bool, int, float, str and tuples
//! of them), which are part of the cache key. `kiln.core.compile` flattens pytrees, threads the
//! captured state through as extra arguments and outputs, and rebuilds the results.

use crate::array::PyArray;
use crate::errors::{stash, OrRaise};
use crate::transforms::{arrays_of, list_of, unwrap};
use kiln::{Array, CompileMode, CompileOptions, Constant};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::sync::Arc;

/// A Python constant argument as a kiln constant.
fn constant(obj: &Bound<'_, PyAny>) -> PyResult<Constant> {
    Ok(if obj.is_none() {
        Constant::None
    } else if obj.is_instance_of::<PyBool>() {
        Constant::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        Constant::Int(obj.extract()?)
    } else if obj.is_instance_of::<PyFloat>() {
        Constant::from(obj.extract::<f64>()?)
    } else if obj.is_instance_of::<PyString>() {
        Constant::Str(obj.extract()?)
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Constant::Tuple(t.iter().map(|i| constant(&i)).collect::<PyResult<_>>()?)
    } else {
        return Err(PyValueError::new_err(format!(
            "compile: unsupported argument type {}; compiled functions take arrays, pytrees (lists, tuples, dicts) of arrays, and None, bool, int, float or str constants",
            obj.get_type().name()?
        )));
    })
}

/// A kiln constant as the Python value it came from.
fn constant_to_py<'py>(py: Python<'py>, c: &Constant) -> PyResult<Bound<'py, PyAny>> {
    Ok(match c {
        Constant::None => py.None().into_bound(py),
        Constant::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Constant::Int(i) => i.into_pyobject(py)?.into_any(),
        Constant::Float(f) => f.get().into_pyobject(py)?.into_any(),
        Constant::Str(s) => s.into_pyobject(py)?.into_any(),
        Constant::Tuple(items) => PyTuple::new(
            py,
            items
                .iter()
                .map(|i| constant_to_py(py, i))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
    })
}

/// A compiled function of `(arrays, constants)`: the callback receives a list of arrays and the
/// list of constants and returns a list of arrays.
#[pyclass(name = "_Compiled", module = "kiln.core", frozen)]
pub struct PyCompiled {
    inner: kiln::Compiled,
}

#[pymethods]
impl PyCompiled {
    #[new]
    #[pyo3(signature = (fun, shapeless = false, mode = "full"))]
    fn new(fun: Py<PyAny>, shapeless: bool, mode: &str) -> PyResult<PyCompiled> {
        let mode = match mode {
            "full" => CompileMode::Full,
            "disabled" => CompileMode::Disabled,
            "no_simplify" => CompileMode::NoSimplify,
            "no_fuse" => CompileMode::NoFuse,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "compile: mode must be 'full', 'disabled', 'no_simplify' or 'no_fuse', got '{mode}'"
                )))
            }
        };
        let fun = Arc::new(fun);
        let f = move |args: &[Array], constants: &[Constant]| {
            Python::attach(|py| -> PyResult<Vec<Array>> {
                let consts = constants
                    .iter()
                    .map(|c| constant_to_py(py, c))
                    .collect::<PyResult<Vec<_>>>()?;
                let out = fun
                    .bind(py)
                    .call1((list_of(py, args)?, PyList::new(py, consts)?))?;
                arrays_of(&out, "a compiled function's result")
            })
            .map_err(stash)
        };
        let options = CompileOptions::new().shapeless(shapeless).mode(mode);
        Ok(PyCompiled {
            inner: kiln::compile_with_constants(f, options),
        })
    }

    /// Calls the compiled function: traces on a new signature, replays otherwise.
    fn __call__(
        &self,
        py: Python<'_>,
        args: Vec<PyArray>,
        constants: &Bound<'_, PyList>,
    ) -> PyResult<Py<PyList>> {
        let a = unwrap(args);
        let c = constants
            .iter()
            .map(|c| constant(&c))
            .collect::<PyResult<Vec<_>>>()?;
        let outs = self.inner.call_with(&a, &c).or_raise()?;
        list_of(py, &outs)
    }

    /// How many times the function was traced.
    #[getter]
    fn trace_count(&self) -> usize {
        self.inner.trace_count()
    }

    /// How many signatures the cache holds.
    #[getter]
    fn cache_len(&self) -> usize {
        self.inner.cache_len()
    }

    /// The compile report for these arguments: graphs before and after simplification, the fused
    /// kernels with their IR, and eager versus compiled kernel counts.
    fn explain(&self, args: Vec<PyArray>, constants: &Bound<'_, PyList>) -> PyResult<String> {
        let a = unwrap(args);
        let c = constants
            .iter()
            .map(|c| constant(&c))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(self.inner.inspect(&a, &c).or_raise()?.to_string())
    }
}

/// Turns compilation off globally: compiled functions run their Python code eagerly (for
/// debugging with prints and data reads).
#[pyfunction]
fn disable_compile() {
    kiln::disable_compile();
}

/// Turns compilation back on.
#[pyfunction]
fn enable_compile() {
    kiln::enable_compile();
}

/// Whether compilation is on (`KILN_DISABLE_COMPILE` or `disable_compile` turn it off).
#[pyfunction]
fn is_compile_enabled() -> bool {
    kiln::is_compile_enabled()
}

/// Waits until the native code of every compiled kernel queued so far is built (or failed), so
/// the calls that follow show the steady state; benchmarks call it after a first call. Then
/// each kernel's next `2 * native_trial_runs()` calls time native code against the interpreter.
#[pyfunction]
fn wait_for_native_builds(py: Python<'_>) {
    py.detach(kiln::backend::cpu::native::wait_for_builds);
}

/// How many runs of each engine a kernel's timing trial takes (see `wait_for_native_builds`).
#[pyfunction]
fn native_trial_runs() -> u32 {
    kiln::backend::cpu::native::TRIAL_RUNS
}

/// The instruction-set level native kernels are built for (e.g. `native (x86-64-v3)`), or why
/// none (`KILN_NATIVE_ARCH` names the level).
#[pyfunction]
fn native_target() -> String {
    kiln::backend::cpu::native::target_name()
}

/// Adds `_Compiled` and the switches to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompiled>()?;
    m.add_function(wrap_pyfunction!(wait_for_native_builds, m)?)?;
    m.add_function(wrap_pyfunction!(native_trial_runs, m)?)?;
    m.add_function(wrap_pyfunction!(native_target, m)?)?;
    m.add_function(wrap_pyfunction!(disable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(enable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(is_compile_enabled, m)?)?;
    Ok(())
}
