//! Devices and streams as in mlx.core: `Device`, `Stream`, `cpu`, `gpu`, `default_device`,
//! `set_default_device`, `default_stream`, `new_stream`, `synchronize`, and the `stream=` argument
//! every op takes, and `stream(s)` as a context manager. Asking for a GPU that cannot be used here
//! is a clear error naming the cause.

use crate::errors::OrRaise;
use kiln::{Device, DeviceKind, Stream};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

/// The kind of a device (`DeviceType.cpu`, `DeviceType.gpu`). As in mlx, a kind equals its
/// device 0 (`mx.cpu == mx.Device(mx.cpu)`), and hashes alike.
#[pyclass(
    name = "DeviceType",
    module = "kiln.core",
    frozen,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyDeviceType {
    #[pyo3(name = "cpu")]
    Cpu,
    #[pyo3(name = "gpu")]
    Gpu,
}

/// A device: a kind and an index. Equal to its kind when the index is 0, as in mlx.
#[pyclass(
    name = "Device",
    module = "kiln.core",
    frozen,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDevice(pub Device);

/// A device or a kind (its device 0), for comparing either with either.
fn as_device(other: &Bound<'_, PyAny>) -> Option<Device> {
    if let Ok(d) = other.extract::<PyDevice>() {
        return Some(d.0);
    }
    other.extract::<PyDeviceType>().ok().map(|t| PyDevice::new(t, 0).0)
}

/// `==` and `!=` between devices and kinds; other comparisons and types are not implemented.
fn compare(py: Python<'_>, this: Device, other: &Bound<'_, PyAny>, op: pyo3::basic::CompareOp) -> Py<PyAny> {
    use pyo3::basic::CompareOp;
    match (as_device(other), op) {
        (Some(d), CompareOp::Eq) => (this == d).into_pyobject(py).expect("bool").to_owned().into_any().unbind(),
        (Some(d), CompareOp::Ne) => (this != d).into_pyobject(py).expect("bool").to_owned().into_any().unbind(),
        _ => py.NotImplemented(),
    }
}

fn hash_of(d: Device) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    d.hash(&mut h);
    h.finish()
}

#[pymethods]
impl PyDeviceType {
    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, PyAny>, op: pyo3::basic::CompareOp) -> Py<PyAny> {
        compare(py, PyDevice::new(*self, 0).0, other, op)
    }

    fn __hash__(&self) -> u64 {
        hash_of(PyDevice::new(*self, 0).0)
    }
}

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

    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, PyAny>, op: pyo3::basic::CompareOp) -> Py<PyAny> {
        compare(py, self.0, other, op)
    }

    fn __hash__(&self) -> u64 {
        hash_of(self.0)
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

/// How many devices of `kind` can be used here: 1 CPU; the GPUs the driver lists (0 without one).
#[pyfunction]
fn device_count(kind: PyDeviceType) -> usize {
    match kind {
        PyDeviceType::Cpu => 1,
        PyDeviceType::Gpu => kiln::backend::cuda::context::count(),
    }
}

/// What a device is, as mlx's `device_info`: `device_name` and `architecture` always; for a GPU
/// also its memory size and multiprocessor count. The default device when None.
#[pyfunction]
#[pyo3(signature = (device = None))]
fn device_info<'py>(py: Python<'py>, device: Option<StreamOrDevice>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = device.map_or_else(kiln::default_device, |s| s.stream().device);
    kiln::device::check_available("device_info", d).or_raise()?;
    let info = pyo3::types::PyDict::new(py);
    match d.kind {
        DeviceKind::Cpu => {
            info.set_item("device_name", cpu_name())?;
            info.set_item("architecture", std::env::consts::ARCH)?;
        }
        DeviceKind::Gpu => {
            let g = kiln::backend::cuda::context::gpu("device_info", d.index).or_raise()?;
            info.set_item("device_name", &g.name)?;
            info.set_item("architecture", g.arch())?;
            info.set_item("memory_size", g.total_memory)?;
            info.set_item("multiprocessor_count", g.multiprocessors)?;
            info.set_item("compute_capability", g.capability)?;
        }
    }
    Ok(info)
}

/// The CPU's model name where the system tells it (Linux's /proc/cpuinfo), else its architecture.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
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
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(device_info, m)?)?;
    m.add_function(wrap_pyfunction!(allow_tf32, m)?)?;
    m.add_function(wrap_pyfunction!(set_allow_tf32, m)?)?;
    m.add_function(wrap_pyfunction!(new_stream, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)
}
