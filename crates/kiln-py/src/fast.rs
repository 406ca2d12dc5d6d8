//! `mx.fast.cuda_kernel`: a user CUDA kernel from a source string. `cuda_kernel(...)` checks the
//! definition and returns a callable; calling it with inputs, output shapes and dtypes, a grid,
//! a threadgroup and template values builds (once per source) and queues the kernel, returning
//! lazy arrays. Every wrong argument is a Python exception naming the kernel and the argument.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::{on, StreamOrDevice};
use crate::dtype::PyDtype;
use crate::errors::OrRaise;
use kiln::cuda_kernel::{CudaKernel, CudaLaunch, TemplateArg};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};

/// A user CUDA kernel: call it with keyword arguments to run it.
#[pyclass(name = "CudaKernel", module = "kiln.core.fast", frozen)]
pub struct PyCudaKernel(CudaKernel);

/// A template value: a bool, an int or a dtype.
fn template_arg(kernel: &str, name: &str, value: &Bound<'_, PyAny>) -> PyResult<TemplateArg> {
    if value.is_instance_of::<PyBool>() {
        return Ok(TemplateArg::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return value.extract::<i32>().map(TemplateArg::Int).map_err(|_| {
            PyValueError::new_err(format!("cuda_kernel: kernel '{kernel}': template value {name} = {value} does not fit in a C int"))
        });
    }
    if let Ok(d) = value.extract::<PyDtype>() {
        return Ok(TemplateArg::Dtype(d.0));
    }
    Err(PyTypeError::new_err(format!(
        "cuda_kernel: kernel '{kernel}': template value {name} is a {}; give a bool, an int or a dtype",
        value.get_type().name()?
    )))
}

/// The template's (name, value) pairs, from a list of pairs or a dict.
fn template_pairs<'py>(kernel: &str, template: &Bound<'py, PyAny>) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    if let Ok(d) = template.cast::<PyDict>() {
        return d.iter().map(|(k, v)| Ok((k.extract::<String>()?, v))).collect();
    }
    template.extract::<Vec<(String, Bound<'py, PyAny>)>>().map_err(|_| {
        PyTypeError::new_err(format!("cuda_kernel: kernel '{kernel}': template must be a list of (name, value) pairs"))
    })
}

#[pymethods]
impl PyCudaKernel {
    /// Runs the kernel: `grid` counts threads (blocks are `ceil(grid / threadgroup)` per axis).
    #[pyo3(signature = (*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None, verbose=false, stream=None))]
    #[allow(clippy::too_many_arguments)] // mlx's keyword arguments
    fn __call__(
        &self,
        py: Python<'_>,
        inputs: Vec<Bound<'_, PyAny>>,
        output_shapes: Vec<Vec<i64>>,
        output_dtypes: Vec<PyDtype>,
        grid: (usize, usize, usize),
        threadgroup: (usize, usize, usize),
        template: Option<Bound<'_, PyAny>>,
        init_value: Option<f64>,
        verbose: bool,
        stream: Option<StreamOrDevice>,
    ) -> PyResult<Vec<PyArray>> {
        let name = self.0.name();
        if output_shapes.len() != output_dtypes.len() {
            return Err(PyValueError::new_err(format!(
                "cuda_kernel: kernel '{name}': {} output_shapes but {} output_dtypes; give one of each per output",
                output_shapes.len(),
                output_dtypes.len()
            )));
        }
        let mut outputs = Vec::with_capacity(output_shapes.len());
        for (i, (shape, dtype)) in output_shapes.iter().zip(&output_dtypes).enumerate() {
            let dims: Option<Vec<usize>> = shape.iter().map(|&d| usize::try_from(d).ok()).collect();
            let dims = dims.ok_or_else(|| {
                PyValueError::new_err(format!("cuda_kernel: kernel '{name}': output_shapes[{i}] = {shape:?} has a negative dimension"))
            })?;
            outputs.push((dims, dtype.0));
        }
        let arrays = inputs.iter().map(|x| to_array(x, None)).collect::<PyResult<Vec<_>>>()?;
        let mut launch = CudaLaunch::new(outputs, [grid.0, grid.1, grid.2], [threadgroup.0, threadgroup.1, threadgroup.2]);
        if let Some(t) = template {
            for (n, v) in template_pairs(name, &t)? {
                let arg = template_arg(name, &n, &v)?;
                launch = launch.template(&n, arg);
            }
        }
        launch.init_value = init_value;
        launch.verbose = verbose;
        let kernel = &self.0;
        let out = py.detach(|| on(stream.as_ref(), || kernel.call(&arrays, &launch)))?;
        Ok(out.into_iter().map(PyArray::from).collect())
    }

    fn __repr__(&self) -> String {
        format!("<cuda_kernel '{}'>", self.0.name())
    }
}

/// Defines a user CUDA kernel whose body is `source`, reading inputs and writing outputs by the
/// names given (mlx's `mx.fast.cuda_kernel`).
#[pyfunction]
#[pyo3(signature = (name, input_names, output_names, source, header="", ensure_row_contiguous=true, atomic_outputs=false, shared_memory=0))]
#[allow(clippy::too_many_arguments)] // mlx's arguments
fn cuda_kernel(
    name: &str,
    input_names: Vec<String>,
    output_names: Vec<String>,
    source: &str,
    header: &str,
    ensure_row_contiguous: bool,
    atomic_outputs: bool,
    shared_memory: u32,
) -> PyResult<PyCudaKernel> {
    let inputs: Vec<&str> = input_names.iter().map(String::as_str).collect();
    let outputs: Vec<&str> = output_names.iter().map(String::as_str).collect();
    let kernel = CudaKernel::new(name, &inputs, &outputs, source).or_raise()?;
    Ok(PyCudaKernel(
        kernel
            .header(header)
            .ensure_row_contiguous(ensure_row_contiguous)
            .atomic_outputs(atomic_outputs)
            .shared_memory(shared_memory),
    ))
}

/// Adds the native submodule `fast` (`cuda_kernel` and its callable type, and the layer ops),
/// which `kiln.core.fast` re-exports.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "fast")?;
    m.add_class::<PyCudaKernel>()?;
    m.add_function(wrap_pyfunction!(cuda_kernel, &m)?)?;
    crate::fast_layers::register(&m)?;
    parent.add_submodule(&m)
}
