//! The function transforms over flat lists of arrays: `vjp`, `jvp`, `value_and_grad`, `vmap`,
//! `checkpoint` and `custom_function`. Python functions enter kiln as callbacks that take and
//! return lists of arrays; `kiln.core` adds pytrees, `argnums` and decorators on top. An
//! exception a callback raises reaches the caller unchanged (see `errors::stash`).

use crate::array::PyArray;
use crate::errors::{stash, OrRaise};
use kiln::Array;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::sync::Arc;

/// The arrays of a list or tuple of arrays.
pub fn arrays_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<Array>> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a list of arrays, got {}",
            obj.get_type().name()?
        )));
    };
    items
        .iter()
        .map(|i| {
            i.cast::<PyArray>()
                .map(|a| a.borrow().array.clone())
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{what} must hold only arrays, got a {}",
                        i.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })
        })
        .collect()
}

/// Python lists of arrays.
pub fn list_of(py: Python<'_>, arrays: &[Array]) -> PyResult<Py<PyList>> {
    Ok(PyList::new(py, arrays.iter().cloned().map(PyArray::from))?.unbind())
}

/// A Python callable on a list of arrays as a kiln function.
pub fn callback(
    f: Py<PyAny>,
) -> impl Fn(&[Array]) -> kiln::Result<Vec<Array>> + Clone + Send + Sync + 'static {
    let f = Arc::new(f);
    move |args: &[Array]| {
        Python::attach(|py| -> PyResult<Vec<Array>> {
            let out = f.bind(py).call1((list_of(py, args)?,))?;
            arrays_of(&out, "a transformed function's result")
        })
        .map_err(stash)
    }
}

/// The kiln arrays of Python arrays.
pub fn unwrap(v: Vec<PyArray>) -> Vec<Array> {
    v.into_iter().map(|a| a.array).collect()
}

/// A transform's pair of results as two Python lists.
fn lists(
    py: Python<'_>,
    pair: kiln::Result<(Vec<Array>, Vec<Array>)>,
) -> PyResult<(Py<PyList>, Py<PyList>)> {
    let (a, b) = pair.or_raise()?;
    Ok((list_of(py, &a)?, list_of(py, &b)?))
}

/// `(outputs, cotangents of the arguments)` of `fun` at `primals` for output `cotangents`.
#[pyfunction]
fn vjp(
    py: Python<'_>,
    fun: Py<PyAny>,
    primals: Vec<PyArray>,
    cotangents: Vec<PyArray>,
) -> PyResult<(Py<PyList>, Py<PyList>)> {
    lists(
        py,
        kiln::vjp(callback(fun), &unwrap(primals), &unwrap(cotangents)),
    )
}

/// `(outputs, output tangents)` of `fun` at `primals` for argument `tangents`.
#[pyfunction]
fn jvp(
    py: Python<'_>,
    fun: Py<PyAny>,
    primals: Vec<PyArray>,
    tangents: Vec<PyArray>,
) -> PyResult<(Py<PyList>, Py<PyList>)> {
    lists(
        py,
        kiln::jvp(callback(fun), &unwrap(primals), &unwrap(tangents)),
    )
}

/// `(outputs, gradients)` of `fun` at `args`: the first output is the scalar loss, and the
/// gradients are with respect to the arguments `argnums`.
#[pyfunction]
fn value_and_grad(
    py: Python<'_>,
    fun: Py<PyAny>,
    args: Vec<PyArray>,
    argnums: Vec<usize>,
) -> PyResult<(Py<PyList>, Py<PyList>)> {
    lists(
        py,
        kiln::value_and_grad(callback(fun), &argnums)(&unwrap(args)),
    )
}

/// `fun` mapped over axis `in_axes[i]` of argument `i`; output `j` gets its batch axis at
/// `out_axes[j]` (a single entry applies to all).
#[pyfunction]
fn vmap(
    py: Python<'_>,
    fun: Py<PyAny>,
    args: Vec<PyArray>,
    in_axes: Vec<Option<i64>>,
    out_axes: Vec<Option<i64>>,
) -> PyResult<Py<PyList>> {
    let outs = kiln::vmap(callback(fun), &in_axes, &out_axes)(&unwrap(args)).or_raise()?;
    list_of(py, &outs)
}

/// `fun` at `args`, with its reverse-mode derivative recomputing the forward pass.
#[pyfunction]
fn checkpoint(py: Python<'_>, fun: Py<PyAny>, args: Vec<PyArray>) -> PyResult<Py<PyList>> {
    let outs = kiln::checkpoint(callback(fun))(&unwrap(args)).or_raise()?;
    list_of(py, &outs)
}

/// `fun` at `args` with its own derivative rules (each optional): `vjp(primals, cotangents,
/// outputs)`, `jvp(primals, tangents)` and `vmap(args, axes)` returning `(outputs, axes)`.
#[pyfunction]
#[pyo3(signature = (name, fun, args, vjp = None, jvp = None, vmap = None))]
fn custom_function(
    py: Python<'_>,
    name: &str,
    fun: Py<PyAny>,
    args: Vec<PyArray>,
    vjp: Option<Py<PyAny>>,
    jvp: Option<Py<PyAny>>,
    vmap: Option<Py<PyAny>>,
) -> PyResult<Py<PyList>> {
    let mut f = kiln::CustomFunction::new(name, callback(fun));
    if let Some(rule) = vjp {
        let rule = Arc::new(rule);
        f = f.vjp(move |p: &[Array], c: &[Array], o: &[Array]| {
            Python::attach(|py| -> PyResult<Vec<Array>> {
                let out =
                    rule.bind(py)
                        .call1((list_of(py, p)?, list_of(py, c)?, list_of(py, o)?))?;
                arrays_of(&out, "a custom vjp's result")
            })
            .map_err(stash)
        });
    }
    if let Some(rule) = jvp {
        let rule = Arc::new(rule);
        f = f.jvp(move |p: &[Array], t: &[Array]| {
            Python::attach(|py| -> PyResult<Vec<Array>> {
                let out = rule.bind(py).call1((list_of(py, p)?, list_of(py, t)?))?;
                arrays_of(&out, "a custom jvp's result")
            })
            .map_err(stash)
        });
    }
    if let Some(rule) = vmap {
        let rule = Arc::new(rule);
        f = f.vmap(move |a: &[Array], axes: &[Option<usize>]| {
            Python::attach(|py| -> PyResult<(Vec<Array>, Vec<Option<usize>>)> {
                let out = rule.bind(py).call1((list_of(py, a)?, axes.to_vec()))?;
                let (outs, out_axes): (Bound<'_, PyAny>, Vec<Option<usize>>) = out.extract()?;
                Ok((arrays_of(&outs, "a custom vmap's outputs")?, out_axes))
            })
            .map_err(stash)
        });
    }
    let outs = f.into_fn()(&unwrap(args)).or_raise()?;
    list_of(py, &outs)
}

/// `inputs` (an array or a list of arrays), unchanged, made to depend on `dependencies`:
/// evaluating them evaluates the dependencies first (mlx's `depends`).
#[pyfunction]
fn depends<'py>(py: Python<'py>, inputs: &Bound<'py, PyAny>, dependencies: &Bound<'py, PyAny>) -> PyResult<Py<PyAny>> {
    let listed = |o: &Bound<'py, PyAny>, what: &str| match o.cast::<PyArray>() {
        Ok(a) => Ok(vec![a.borrow().array.clone()]),
        Err(_) => arrays_of(o, what),
    };
    let single = inputs.cast::<PyArray>().is_ok();
    let outs = kiln::depends(&listed(inputs, "depends' inputs")?, &listed(dependencies, "depends' dependencies")?).or_raise()?;
    if single {
        Ok(PyArray::from(outs[0].clone()).into_pyobject(py)?.into_any().unbind())
    } else {
        Ok(list_of(py, &outs)?.into_any())
    }
}

/// Adds the flat transforms to the module (as `_vjp`, `_jvp`, ...: `kiln.core` wraps them).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (name, f) in [
        ("_vjp", wrap_pyfunction!(vjp, m)?),
        ("_jvp", wrap_pyfunction!(jvp, m)?),
        ("_value_and_grad", wrap_pyfunction!(value_and_grad, m)?),
        ("_vmap", wrap_pyfunction!(vmap, m)?),
        ("_checkpoint", wrap_pyfunction!(checkpoint, m)?),
        ("_custom_function", wrap_pyfunction!(custom_function, m)?),
        ("depends", wrap_pyfunction!(depends, m)?),
    ] {
        m.add(name, f)?;
    }
    Ok(())
}
