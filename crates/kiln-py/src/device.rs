//! Devices and streams as in mlx.core: `Device`, `Stream`, `cpu`, `gpu`, `default_device`,
//! `set_default_device`, `default_stream`, `new_stream`, `synchronize`, and the `stream=` argument
//! every op takes, and `stream(s)` as a context manager. Asking for a GPU that cannot be used here
//! is a clear error naming the cause.

use crate::errors::OrRaise;
use kiln::{Device, DeviceKind, Stream};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

/// The kind of a device (`DeviceType.cpu`, `DeviceType.gpu`).
#[pyclass(
    name = "DeviceType",
    module = "kiln.core",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyDeviceType {
    #[pyo3(name = "cpu")]
    Cpu,
    #[pyo3(name = "gpu")]
    Gpu,
}

/// A device: a kind and an index.
#[pyclass(
    name = "Device",
    module = "kiln.core",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDevice(pub Device);

#[pymethods]
impl PyDevice {
    #[new]
    #[pyo3(signature = (r#type, index = 0))]
    fn new(r#type: PyDeviceType, index: usize) -> PyDevice {
        PyDevice(match r#type {
            PyDeviceType::Cpu => Device {
                kind: DeviceKind::Cpu,
                index,
            },
            PyDeviceType::Gpu => Device::gpu(index),
        })
    }

    /// The device's kind.
    #[getter]
    fn r#type(&self) -> PyDeviceType {
        match self.0.kind {
            DeviceKind::Cpu => PyDeviceType::Cpu,
            DeviceKind::Gpu => PyDeviceType::Gpu,
        }
    }

    /// The device's index among devices of its kind.
    #[getter]
    fn index(&self) -> usize {
        self.0.index
    }

    fn __repr__(&self) -> String {
        self.0.to_string()
    }
}

/// A stream: an ordered queue of work on one device.
#[pyclass(
    name = "Stream",
    module = "kiln.core",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyStream(pub Stream);

#[pymethods]
impl PyStream {
    /// The device the stream runs on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.0.device)
    }

    fn __repr__(&self) -> String {
        format!("Stream({}, {})", self.0.device, self.0.index)
    }
}

/// Where an op should run: the `stream=` argument (a stream, a device, or None for the default).
#[derive(FromPyObject)]
pub enum StreamOrDevice {
    Stream(PyStream),
    Device(PyDevice),
    Kind(PyDeviceType),
}

impl StreamOrDevice {
    fn stream(&self) -> Stream {
        match self {
            StreamOrDevice::Stream(s) => s.0,
            StreamOrDevice::Device(d) => Stream::default_for(d.0),
            StreamOrDevice::Kind(t) => Stream::default_for(PyDevice::new(*t, 0).0),
        }
    }
}

/// Runs `f` with the ops it builds placed on `stream` (the default stream when None).
pub fn on<R>(stream: Option<&StreamOrDevice>, f: impl FnOnce() -> kiln::Result<R>) -> PyResult<R> {
    match stream {
        None => f().or_raise(),
        Some(s) => kiln::with_stream(s.stream(), f).or_raise()?.or_raise(),
    }
}

/// The default device.
#[pyfunction]
fn default_device() -> PyDevice {
    PyDevice(kiln::default_device())
}

/// Sets the default device (a device that cannot be used here is a clear error naming why).
#[pyfunction]
fn set_default_device(device: StreamOrDevice) -> PyResult<()> {
    match device {
        StreamOrDevice::Stream(_) => Err(PyTypeError::new_err(
            "set_default_device: expected a Device or DeviceType, got a Stream",
        )),
        d => kiln::set_default_device(d.stream().device).or_raise(),
    }
}

/// The default stream of `device`.
#[pyfunction]
fn default_stream(device: StreamOrDevice) -> PyResult<PyStream> {
    let s = device.stream();
    kiln::device::check_available("default_stream", s.device).or_raise()?;
    Ok(PyStream(s))
}

/// Whether `device` can run ops here (a GPU needs the NVIDIA driver and a device).
#[pyfunction]
fn is_available(device: StreamOrDevice) -> bool {
    device.stream().device.is_available()
}

/// Whether float32 matmuls on a GPU may use TF32 tensor cores (off unless asked for).
#[pyfunction]
fn allow_tf32() -> bool {
    kiln::allow_tf32()
}

/// Allows (or forbids) TF32 in float32 matmuls on a GPU, as PyTorch's `allow_tf32`: faster,
/// with inputs rounded to 10-bit mantissas. Returns the previous setting.
#[pyfunction]
fn set_allow_tf32(allow: bool) -> bool {
    kiln::set_allow_tf32(allow)
}

/// A new stream on `device`.
#[pyfunction]
fn new_stream(device: StreamOrDevice) -> PyResult<PyStream> {
    kiln::new_stream(device.stream().device).map(PyStream).or_raise()
}

/// Waits for the work queued on `stream` (the default stream when None): the CPU runs work
/// inside `eval`; a GPU stream is waited for.
#[pyfunction]
#[pyo3(signature = (stream = None))]
fn synchronize(stream: Option<StreamOrDevice>) -> PyResult<()> {
    let s = stream.map_or_else(
        || Stream::default_for(kiln::default_device()),
        |s| s.stream(),
    );
    kiln::synchronize(s).or_raise()
}

/// What `stream(s)` returns: a context manager placing the ops created inside it on `s`.
#[pyclass(name = "StreamContext", module = "kiln.core", frozen)]
pub struct PyStreamContext(Stream);

#[pymethods]
impl PyStreamContext {
    fn __enter__(&self) -> PyResult<PyStream> {
        kiln::device::enter_stream("stream", self.0).or_raise()?;
        Ok(PyStream(self.0))
    }

    #[pyo3(signature = (*_exception))]
    fn __exit__(&self, _exception: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        kiln::device::exit_stream();
        false
    }
}

/// `with stream(s):` runs every op created inside on `s` (a stream, a device or a device type),
/// as mlx's `mx.stream`. A device that cannot be used here is a clear error on entering.
#[pyfunction]
fn stream(s: StreamOrDevice) -> PyStreamContext {
    PyStreamContext(s.stream())
}

/// Adds the device classes, the `cpu`/`gpu` device types and the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDeviceType>()?;
    m.add_class::<PyDevice>()?;
    m.add_class::<PyStream>()?;
    m.add_class::<PyStreamContext>()?;
    m.add_function(wrap_pyfunction!(stream, m)?)?;
    m.add("cpu", PyDeviceType::Cpu)?;
    m.add("gpu", PyDeviceType::Gpu)?;
    m.add_function(wrap_pyfunction!(default_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(default_stream, m)?)?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(allow_tf32, m)?)?;
    m.add_function(wrap_pyfunction!(set_allow_tf32, m)?)?;
    m.add_function(wrap_pyfunction!(new_stream, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)
}
