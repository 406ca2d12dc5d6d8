//! The buffer protocol for `kiln.core.array`, so that `memoryview(a)` (and anything else that
//! reads buffers: `bytes(a)`, `struct`, `array.array`) sees the array's memory in place.
//!
//! PyO3 offers `__getbuffer__` only on Python 3.11+ under the stable ABI, but the wheel is built
//! for 3.10+ (`abi3-py310`). The buffer slots themselves work from CPython 3.9 on for types made
//! with `PyType_FromSpec`, which is how PyO3 makes `array`, and their numbers and the `Py_buffer`
//! layout have never changed (3.11 only declared them stable). So this module hands PyO3 the two
//! slots directly, through the same item list its `#[pymethods]` blocks fill, with its own copy
//! of the `Py_buffer` struct.
//!
//! Exports are read-only (kiln arrays are immutable values; asking for a writable buffer is a
//! `BufferError` that says how to get a writable copy). Strided arrays export their strides when
//! the consumer accepts strides; a consumer that needs a contiguous layout gets a contiguous copy.
//! bfloat16 has no buffer format character and is refused with the conversion to use.

use crate::array::{PyArray, Pyo3MethodsInventoryForPyArray};
use crate::errors::OrRaise;
use kiln::backend::cpu::strided::is_row_contiguous;
use kiln::{ops, Array, Dtype};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::impl_::pyclass::PyClassItems;
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void, CStr};

/// CPython's `Py_buffer` (Include/pybuffer.h, unchanged since 3.3).
#[repr(C)]
pub struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

/// Slot numbers of Include/typeslots.h.
const PY_BF_GETBUFFER: c_int = 1;
const PY_BF_RELEASEBUFFER: c_int = 2;

/// Request flags of Include/pybuffer.h.
const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;
const PYBUF_F_CONTIGUOUS: c_int = 0x0040 | PYBUF_STRIDES;
const PYBUF_ANY_CONTIGUOUS: c_int = 0x0080 | PYBUF_STRIDES;

pyo3::inventory::submit! {
    Pyo3MethodsInventoryForPyArray::new(PyClassItems {
        methods: &[],
        slots: &[
            ffi::PyType_Slot { slot: PY_BF_GETBUFFER, pfunc: get_buffer as *mut c_void },
            ffi::PyType_Slot { slot: PY_BF_RELEASEBUFFER, pfunc: release_buffer as *mut c_void },
        ],
    })
}

/// What an export keeps alive until it is released: the array (whose memory `buf` points into)
/// and the shape, strides and format the view points at.
struct Export {
    _array: Array,
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

/// The struct-module format character of `dtype`, if it has one.
fn format_of(dtype: Dtype) -> Option<&'static CStr> {
    Some(match dtype {
        Dtype::Bool => c"?",
        Dtype::U8 => c"B",
        Dtype::U16 => c"H",
        Dtype::U32 => c"I",
        Dtype::U64 => c"Q",
        Dtype::I8 => c"b",
        Dtype::I16 => c"h",
        Dtype::I32 => c"i",
        Dtype::I64 => c"q",
        Dtype::F16 => c"e",
        Dtype::F32 => c"f",
        Dtype::F64 => c"d",
        Dtype::C64 => c"Zf",
        Dtype::BF16 => return None,
    })
}

/// Whether element strides `strides` lay out `shape` row-major (C) or, with `fortran`,
/// column-major, ignoring axes of size 1.
fn is_contiguous(shape: &[usize], strides: &[isize], fortran: bool) -> bool {
    if fortran {
        let shape: Vec<usize> = shape.iter().rev().copied().collect();
        let strides: Vec<isize> = strides.iter().rev().copied().collect();
        is_row_contiguous(&shape, &strides)
    } else {
        is_row_contiguous(shape, strides)
    }
}

/// The array to export for request `flags` with its data pointer and element strides: `a`
/// itself when its layout satisfies the request, else a copy in the layout asked for.
fn layout_for(a: &Array, flags: c_int) -> PyResult<(Array, *const u8, Vec<isize>)> {
    let (ptr, strides) = a.raw_parts().or_raise()?;
    let shape = a.shape();
    let c = is_contiguous(shape, &strides, false);
    let f = is_contiguous(shape, &strides, true);
    let fortran_only = flags & PYBUF_F_CONTIGUOUS == PYBUF_F_CONTIGUOUS;
    // Without strides the consumer reads the memory as row-major.
    let needs_c =
        flags & PYBUF_STRIDES != PYBUF_STRIDES || flags & PYBUF_C_CONTIGUOUS == PYBUF_C_CONTIGUOUS;
    let satisfied = if needs_c {
        c
    } else if fortran_only {
        f
    } else if flags & PYBUF_ANY_CONTIGUOUS == PYBUF_ANY_CONTIGUOUS {
        c || f
    } else {
        true
    };
    if satisfied {
        return Ok((a.clone(), ptr, strides));
    }
    let copy = if fortran_only {
        let reversed: Vec<i64> = (0..shape.len() as i64).rev().collect();
        ops::transpose(
            ops::copy(ops::transpose(a, Some(&reversed)).or_raise()?).or_raise()?,
            Some(&reversed),
        )
    } else {
        ops::copy(a)
    }
    .or_raise()?;
    let (ptr, copied) = copy.raw_parts().or_raise()?;
    if !is_contiguous(copy.shape(), &copied, fortran_only) {
        return Err(PyBufferError::new_err(
            "memoryview: could not lay the array out contiguously",
        ));
    }
    Ok((copy, ptr, copied))
}

/// Fills `view` for `exporter` (a kiln array) as request `flags` asks, or raises.
///
/// # Safety
/// `exporter` is a live `array` object and `view` a writable `Py_buffer`; the GIL is held.
unsafe fn fill(
    py: Python<'_>,
    exporter: *mut ffi::PyObject,
    view: *mut RawBuffer,
    flags: c_int,
) -> PyResult<()> {
    let obj = unsafe { Bound::from_borrowed_ptr(py, exporter) };
    let array = obj.cast::<PyArray>()?.borrow().array.clone();
    if flags & PYBUF_WRITABLE != 0 {
        return Err(PyBufferError::new_err(
            "memoryview: kiln arrays are immutable, so their buffers are read-only; \
             for a writable copy use bytearray(memoryview(a)) or np.array(a)",
        ));
    }
    let Some(format) = format_of(array.dtype()) else {
        return Err(PyBufferError::new_err(
            "memoryview: bfloat16 has no buffer format; convert first: memoryview(a.astype(kiln.core.float32))",
        ));
    };
    let (exported, ptr, strides) = layout_for(&array, flags)?;
    let itemsize = array.dtype().size() as ffi::Py_ssize_t;
    let mut export = Box::new(Export {
        shape: exported
            .shape()
            .iter()
            .map(|&d| d as ffi::Py_ssize_t)
            .collect(),
        strides: strides
            .iter()
            .map(|&s| s as ffi::Py_ssize_t * itemsize)
            .collect(),
        _array: exported,
    });
    let v = unsafe { &mut *view };
    v.buf = ptr as *mut c_void;
    v.len = export.shape.iter().product::<ffi::Py_ssize_t>() * itemsize;
    v.itemsize = itemsize;
    v.readonly = 1;
    v.ndim = export.shape.len() as c_int;
    v.format = if flags & PYBUF_FORMAT != 0 {
        format.as_ptr() as *mut c_char
    } else {
        std::ptr::null_mut()
    };
    v.shape = if flags & PYBUF_ND == PYBUF_ND {
        export.shape.as_mut_ptr()
    } else {
        std::ptr::null_mut()
    };
    v.strides = if flags & PYBUF_STRIDES == PYBUF_STRIDES {
        export.strides.as_mut_ptr()
    } else {
        std::ptr::null_mut()
    };
    v.suboffsets = std::ptr::null_mut();
    v.internal = Box::into_raw(export) as *mut c_void;
    v.obj = obj.into_ptr();
    Ok(())
}

/// `bf_getbuffer`: exports the array's memory; on failure sets the exception and returns -1.
unsafe extern "C" fn get_buffer(
    exporter: *mut ffi::PyObject,
    view: *mut RawBuffer,
    flags: c_int,
) -> c_int {
    let result = std::panic::catch_unwind(|| {
        // Safety: CPython calls the slot with the GIL held.
        let py = unsafe { Python::assume_attached() };
        unsafe { fill(py, exporter, view, flags) }.map_err(|e| e.restore(py))
    });
    match result {
        Ok(Ok(())) => 0,
        failed => {
            if failed.is_err() {
                let py = unsafe { Python::assume_attached() };
                PyBufferError::new_err("memoryview: internal error while exporting the array")
                    .restore(py);
            }
            if !view.is_null() {
                unsafe { (*view).obj = std::ptr::null_mut() };
            }
            -1
        }
    }
}

/// `bf_releasebuffer`: frees what [`get_buffer`] kept for the view (CPython drops `view.obj`).
unsafe extern "C" fn release_buffer(_exporter: *mut ffi::PyObject, view: *mut RawBuffer) {
    let v = unsafe { &mut *view };
    if !v.internal.is_null() {
        // Safety: `internal` was made by `Box::into_raw` in `fill` and is released once.
        drop(unsafe { Box::from_raw(v.internal as *mut Export) });
        v.internal = std::ptr::null_mut();
    }
}
