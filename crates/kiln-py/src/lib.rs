//! `kiln._core`: the native half of the Python package `kiln`. It holds the array type, the
//! dtypes, devices and every op; `python/kiln/core` re-exports it as `kiln.core` and adds what is
//! simplest in Python (pytrees for the transforms and `compile`). Nothing here aborts the
//! process: kiln errors become `ValueError`s (see `errors.rs`).

mod array;
mod buffer;
mod compile;
mod convert;
mod device;
mod dlpack;
mod dtype;
mod errors;
mod fast;
mod fast_layers;
mod fft;
mod linalg;
mod index;
mod io;
mod memory;
mod methods;
mod ops;
mod random;
mod transforms;

use array::PyArray;
use errors::OrRaise;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// Collects the arrays of a (nested) structure of lists, tuples and dicts, in order.
fn collect_arrays(obj: &Bound<'_, PyAny>, out: &mut Vec<kiln::Array>) -> PyResult<()> {
    if let Ok(a) = obj.cast::<PyArray>() {
        out.push(a.borrow().array.clone());
    } else if let Ok(l) = obj.cast::<PyList>() {
        for item in l.iter() {
            collect_arrays(&item, out)?;
        }
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        for item in t.iter() {
            collect_arrays(&item, out)?;
        }
    } else if let Ok(d) = obj.cast::<PyDict>() {
        for (_, v) in d.iter() {
            collect_arrays(&v, out)?;
        }
    }
    Ok(())
}

/// Evaluates every array found in the arguments (lists, tuples and dicts are searched), sharing
/// the work they have in common.
#[pyfunction]
#[pyo3(signature = (*args))]
fn eval(py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
    evaluate(py, args, kiln::eval)
}

/// Starts evaluating every array found in the arguments without waiting for the GPU (on the
/// CPU the work is done before it returns); an error inside a transform's trace.
#[pyfunction]
#[pyo3(signature = (*args))]
fn async_eval(py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
    evaluate(py, args, kiln::async_eval)
}

/// The DOT text of the graph computing `arrays`, with `names` for some of them (the body of
/// `export_to_dot`, which flattens its trees and writes the file in Python).
#[pyfunction]
fn _to_dot(arrays: Vec<PyRef<'_, PyArray>>, names: Vec<(PyRef<'_, PyArray>, String)>) -> String {
    let outputs: Vec<kiln::Array> = arrays.iter().map(|a| a.array.clone()).collect();
    let names: Vec<(kiln::Array, String)> = names.iter().map(|(a, n)| (a.array.clone(), n.clone())).collect();
    kiln::to_dot(&outputs, &names)
}

/// Sets the decimals arrays print floats with (None: 6 significant digits, as mlx's default);
/// returns the previous setting (the body of `set_printoptions` and `printoptions`).
#[pyfunction]
fn _set_print_precision(decimals: Option<usize>) -> Option<usize> {
    kiln::set_print_precision(decimals)
}

/// The decimals arrays print floats with (None: 6 significant digits).
#[pyfunction]
fn _print_precision() -> Option<usize> {
    kiln::print_precision()
}

/// Runs `how` on the arrays found in `args`, without holding the GIL.
fn evaluate(py: Python<'_>, args: &Bound<'_, PyTuple>, how: fn(&[&kiln::Array]) -> kiln::Result<()>) -> PyResult<()> {
    let mut arrays = Vec::new();
    collect_arrays(args.as_any(), &mut arrays)?;
    py.detach(|| how(&arrays.iter().collect::<Vec<_>>())).or_raise()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyArray>()?;
    dtype::register(m)?;
    device::register(m)?;
    memory::register(m)?;
    ops::register(m)?;
    transforms::register(m)?;
    compile::register(m)?;
    random::register(m)?;
    fast::register(m)?;
    linalg::register(m)?;
    fft::register(m)?;
    io::register(m)?;
    m.add_function(wrap_pyfunction!(array::_array_from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(eval, m)?)?;
    m.add_function(wrap_pyfunction!(async_eval, m)?)?;
    m.add_function(wrap_pyfunction!(_to_dot, m)?)?;
    m.add_function(wrap_pyfunction!(_set_print_precision, m)?)?;
    m.add_function(wrap_pyfunction!(_print_precision, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::asarray, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::from_dlpack, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
