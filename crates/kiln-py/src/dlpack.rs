//! DLPack, the array exchange protocol of PyTorch, CuPy, JAX and numpy: `array.__dlpack__` and
//! `__dlpack_device__` hand kiln's memory to a consumer without a copy (on a GPU or the host),
//! and `array(x)` of a DLPack producer whose data is on a GPU reads that memory in place
//! ([`from_gpu_producer`]; host producers convert through numpy).
//!
//! Capsules hold the legacy `DLManagedTensor` (named "dltensor"), which every consumer accepts.
//! Exported memory is kept alive by the capsule's tensor until its consumer calls the deleter;
//! kiln waits for the GPU to finish writing it first, so a consumer on any stream reads final
//! data. Imported memory is read on kiln's default stream of that GPU, which the producer orders
//! its pending work before (the `stream` argument of `__dlpack__`), and is released through the
//! producer's deleter once no kiln array uses it. kiln never writes into either.

use crate::array::PyArray;
use crate::errors::OrRaise;
use kiln::{ops, Array, Dtype};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::{c_void, CStr};

/// DLPack's device types that kiln reads or writes.
const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_CUDA_MANAGED: i32 = 13;

/// The capsule names of an unconsumed and a consumed tensor.
const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";

/// dlpack.h's `DLDevice`.
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// dlpack.h's `DLDataType`.
#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// dlpack.h's `DLTensor`.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// dlpack.h's `DLManagedTensor`.
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// DLPack's (type code, bits) of a dtype.
fn dl_dtype(d: Dtype) -> DlDataType {
    let (code, bits) = match d {
        Dtype::Bool => (6, 8),
        Dtype::BF16 => (4, 16),
        Dtype::C64 => (5, 64),
        d if d.is_float() => (2, 8 * d.size()),
        d if d.is_unsigned() => (1, 8 * d.size()),
        d => (0, 8 * d.size()),
    };
    DlDataType { code, bits: bits as u8, lanes: 1 }
}

/// The dtype of a DLPack type, or an error naming it.
fn from_dl_dtype(t: &DlDataType) -> PyResult<Dtype> {
    let d = match (t.code, t.bits, t.lanes) {
        (6, 8, 1) => Dtype::Bool,
        (4, 16, 1) => Dtype::BF16,
        (2, 16, 1) => Dtype::F16,
        (2, 32, 1) => Dtype::F32,
        (2, 64, 1) => Dtype::F64,
        (5, 64, 1) => Dtype::C64,
        (1, 8, 1) => Dtype::U8,
        (1, 16, 1) => Dtype::U16,
        (1, 32, 1) => Dtype::U32,
        (1, 64, 1) => Dtype::U64,
        (0, 8, 1) => Dtype::I8,
        (0, 16, 1) => Dtype::I16,
        (0, 32, 1) => Dtype::I32,
        (0, 64, 1) => Dtype::I64,
        (code, bits, lanes) => {
            return Err(PyTypeError::new_err(format!(
                "array: DLPack type code {code} of {bits} bits and {lanes} lanes has no kiln dtype"
            )))
        }
    };
    Ok(d)
}

/// What an exported tensor points into: its shape and strides, and the array that owns the data.
struct Exported {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _keep: Array,
}

/// The deleter of exported tensors: frees the tensor and releases kiln's data.
unsafe extern "C" fn delete_exported(t: *mut DlManagedTensor) {
    // Safety: `t` and its context were boxed by `export` and are deleted once, by this call.
    unsafe {
        drop(Box::from_raw((*t).manager_ctx as *mut Exported));
        drop(Box::from_raw(t));
    }
}

/// The capsule's destructor: a tensor never consumed (the capsule still named "dltensor") is
/// deleted here; a consumed one belongs to its consumer.
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // Safety: called by Python with the capsule; IsValid sets no error for another name.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()) as *mut DlManagedTensor;
            if let Some(delete) = (*t).deleter {
                delete(t);
            }
        }
    }
}

/// A capsule holding a DLPack tensor over `data` on `device`, with element strides, that keeps
/// `keep` alive until its consumer is done.
fn export(py: Python<'_>, keep: Array, data: u64, device: DlDevice, strides: &[isize]) -> PyResult<Py<PyAny>> {
    let mut ctx = Box::new(Exported {
        shape: keep.shape().iter().map(|&d| d as i64).collect(),
        strides: strides.iter().map(|&s| s as i64).collect(),
        _keep: keep.clone(),
    });
    let tensor = Box::new(DlManagedTensor {
        dl_tensor: DlTensor {
            data: data as *mut c_void,
            device,
            ndim: keep.ndim() as i32,
            dtype: dl_dtype(keep.dtype()),
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_exported),
    });
    let tensor = Box::into_raw(tensor);
    // Safety: the tensor and its context live until the deleter runs; the capsule takes them.
    unsafe {
        (*tensor).manager_ctx = Box::into_raw(ctx) as *mut c_void;
        let capsule = ffi::PyCapsule_New(tensor as *mut c_void, DLTENSOR.as_ptr(), Some(destroy_capsule));
        if capsule.is_null() {
            delete_exported(tensor);
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).unbind())
    }
}

#[pymethods]
impl PyArray {
    /// DLPack's device of the array: `(2, i)` (CUDA) where its data is on GPU i, else `(1, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        match self.array.resident_gpu() {
            Some(g) => (DL_CUDA, g as i32),
            None => (DL_CPU, 0),
        }
    }

    /// A DLPack capsule over the array's memory (the array is evaluated first). `dl_device`
    /// asks for another device (the data is copied there, unless `copy=False`, which is then an
    /// error); `copy=True` exports a copy. The GPU has finished writing the memory when this
    /// returns, so `stream` needs no ordering.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (stream, max_version);
        let (kind, index) = dl_device.unwrap_or_else(|| self.__dlpack_device__());
        let here = self.__dlpack_device__() == (kind, index);
        if copy == Some(false) && !here {
            return Err(PyBufferError::new_err(format!(
                "__dlpack__: the array's data is not on device ({kind}, {index}) and copy=False forbids moving it"
            )));
        }
        let array = if copy == Some(true) { ops::copy(&self.array).or_raise()? } else { self.array.clone() };
        match kind {
            DL_CPU => {
                let (ptr, strides) = py.detach(|| array.raw_parts().map(|(p, s)| (p as u64, s))).or_raise()?;
                export(py, array, ptr, DlDevice { device_type: DL_CPU, device_id: 0 }, &strides)
            }
            DL_CUDA => {
                let view = py.detach(|| array.device_view(index as usize)).or_raise()?;
                export(py, array, view.ptr, DlDevice { device_type: DL_CUDA, device_id: index }, &view.strides)
            }
            other => Err(PyBufferError::new_err(format!(
                "__dlpack__: kiln exchanges memory on the CPU (1) and CUDA GPUs (2), not DLPack device type {other}"
            ))),
        }
    }
}

/// A tensor imported from another library: released through that library's deleter.
struct Imported(*mut DlManagedTensor);

// Safety: DLPack's deleters may be called from any thread; the tensor is not touched otherwise.
unsafe impl Send for Imported {}
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        // A deleter may release Python objects: it runs holding the interpreter.
        Python::attach(|_| {
            // Safety: the tensor was consumed from its capsule and is deleted once, here.
            unsafe {
                if let Some(delete) = (*self.0).deleter {
                    delete(self.0);
                }
            }
        });
    }
}

/// `obj` (a DLPack producer) as a kiln array over its GPU memory, without a copy; `None` when
/// its data is not on a CUDA GPU (the caller converts it through numpy).
pub fn from_gpu_producer(obj: &Bound<'_, PyAny>) -> PyResult<Option<Array>> {
    if !obj.hasattr("__dlpack__")? || !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let (kind, index): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    if kind != DL_CUDA && kind != DL_CUDA_MANAGED {
        return Ok(None);
    }
    let gpu = usize::try_from(index).map_err(|_| PyValueError::new_err(format!("array: DLPack device id {index}")))?;
    let stream = Array::exchange_stream(gpu).or_raise()?;
    let kwargs = PyDict::new(obj.py());
    kwargs.set_item("stream", stream as usize)?;
    let capsule = obj.call_method("__dlpack__", (), Some(&kwargs))?;
    // Safety: a DLPack capsule holds a DLManagedTensor under the name "dltensor"; renaming it
    // "used_dltensor" takes ownership, as the protocol prescribes.
    unsafe {
        let t = ffi::PyCapsule_GetPointer(capsule.as_ptr(), DLTENSOR.as_ptr()) as *mut DlManagedTensor;
        if t.is_null() {
            return Err(PyErr::fetch(obj.py()));
        }
        let owner = Imported(t);
        if ffi::PyCapsule_SetName(capsule.as_ptr(), USED_DLTENSOR.as_ptr()) != 0 {
            std::mem::forget(owner);
            return Err(PyErr::fetch(obj.py()));
        }
        let d = &(*t).dl_tensor;
        let dtype = from_dl_dtype(&d.dtype)?;
        let ndim = d.ndim.max(0) as usize;
        let shape: Vec<usize> = (0..ndim).map(|i| *d.shape.add(i) as usize).collect();
        let strides: Option<Vec<isize>> = (!d.strides.is_null()).then(|| (0..ndim).map(|i| *d.strides.add(i) as isize).collect());
        let data = (d.data as u64).wrapping_add(d.byte_offset);
        Array::from_gpu_memory(gpu, data, &shape, strides.as_deref(), dtype, Box::new(owner)).or_raise().map(Some)
    }
}

/// `obj` as an array without a copy where one exists: a kiln array itself, or a DLPack producer's
/// GPU memory read in place. None for data that kiln always copies (host data).
fn shared(obj: &Bound<'_, PyAny>) -> PyResult<Option<Array>> {
    if let Ok(a) = obj.cast::<PyArray>() {
        return Ok(Some(a.borrow().array.clone()));
    }
    from_gpu_producer(obj)
}

/// `shared` converted to `dtype` and copied as `copy` asks (mlx's rules: True always copies,
/// False never does and refuses what needs one, None shares where it can).
fn with_copy_rule(op: &str, shared: Array, dtype: Option<Dtype>, copy: Option<bool>) -> PyResult<Array> {
    let converts = dtype.is_some_and(|d| d != shared.dtype());
    if converts && copy == Some(false) {
        return Err(PyValueError::new_err(format!(
            "{op}: copy=False, but converting {} to {} needs a copy; pass copy=None or copy=True",
            shared.dtype(),
            dtype.expect("converts")
        )));
    }
    let out = match dtype {
        Some(d) if converts => ops::astype(&shared, d).or_raise()?,
        _ if copy == Some(true) => ops::copy(&shared).or_raise()?,
        _ => return Ok(shared),
    };
    if copy == Some(true) {
        // A snapshot now: the producer may write its memory as soon as this returns.
        out.eval().or_raise()?;
        kiln::synchronize(kiln::device::current_stream()).or_raise()?;
    }
    Ok(out)
}

/// The refusal of `copy=False` for data kiln must copy.
fn host_copy_refused(op: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "value".into());
    PyValueError::new_err(format!(
        "{op}: copy=False, but a {kind} in host memory is always copied into kiln's memory (only \
         kiln arrays and GPU DLPack producers are shared); pass copy=None or copy=True"
    ))
}

/// `asarray(a, dtype=None, *, copy=None)` as mlx's: `a` as an array, shared where kiln can (kiln
/// arrays, GPU memory of DLPack producers), copied otherwise; `copy=True` always copies and
/// `copy=False` refuses to (a ValueError where a copy is needed).
#[pyfunction]
#[pyo3(signature = (a, dtype = None, *, copy = None))]
pub fn asarray(a: &Bound<'_, PyAny>, dtype: Option<crate::dtype::PyDtype>, copy: Option<bool>) -> PyResult<PyArray> {
    let dtype = dtype.map(|d| d.0);
    match shared(a)? {
        Some(x) => with_copy_rule("asarray", x, dtype, copy).map(PyArray::from),
        None if copy == Some(false) => Err(host_copy_refused("asarray", a)),
        None => crate::convert::to_array(a, dtype).map(PyArray::from),
    }
}

/// `from_dlpack(x, *, copy=None)` as mlx's: an array from any DLPack producer; GPU memory is
/// shared (copied with `copy=True`), host memory copied (refused with `copy=False`).
#[pyfunction]
#[pyo3(signature = (x, *, copy = None))]
pub fn from_dlpack(x: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<PyArray> {
    if !x.hasattr("__dlpack__")? || !x.hasattr("__dlpack_device__")? {
        return Err(PyTypeError::new_err(format!(
            "from_dlpack: a {} has no __dlpack__ and __dlpack_device__; pass a DLPack producer (a torch tensor, a CuPy or numpy array, ...)",
            x.get_type().name()?
        )));
    }
    match from_gpu_producer(x)? {
        Some(a) => with_copy_rule("from_dlpack", a, None, copy).map(PyArray::from),
        None if copy == Some(false) => Err(host_copy_refused("from_dlpack", x)),
        None => {
            // A producer that cannot export its data (numpy's object arrays, say) raises
            // BufferError; mlx's callers expect a TypeError naming the function.
            let host = x.py().import("numpy")?.call_method1("from_dlpack", (x,)).map_err(|e| {
                if e.is_instance_of::<pyo3::exceptions::PyBufferError>(x.py()) {
                    PyTypeError::new_err(format!("from_dlpack: the producer cannot export its data: {e}"))
                } else {
                    e
                }
            })?;
            crate::convert::to_array(&host, None).map(PyArray::from)
        }
    }
}
