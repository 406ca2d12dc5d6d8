//! Zero-copy exchange of host and GPU memory with other libraries: the core of DLPack, which the
//! Python package wraps in capsules, and of the C API's arrays over a caller's data. An evaluated
//! array hands out where its elements are on a GPU, kept alive by its storage; and an array can
//! be made over host or GPU memory another library owns, which kiln only reads (it never writes
//! into lent storage) and releases through that library's owner once no array uses it.

use crate::array::Array;
use crate::backend::cuda::{context, CuStream, DeviceBlock};
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::{Error, ErrorKind, Result};
use crate::shape::{fmt_shape, Shape};
use std::sync::Arc;

/// Where an evaluated array's elements are on a GPU.
pub struct DeviceView {
    /// The GPU.
    pub gpu: usize,
    /// The device address of the first element.
    pub ptr: u64,
    /// The stride of each axis, in elements.
    pub strides: Vec<isize>,
    /// Keeps the bytes alive while the view is used.
    pub keep: Arc<Storage>,
}

impl Array {
    /// The GPU holding this array's bytes once evaluated: the GPU its data already lives on,
    /// else (not evaluated yet) the GPU of its stream; `None` for data on the host only.
    pub fn resident_gpu(&self) -> Option<usize> {
        match self.buffer() {
            Some(b) => b.storage.gpu(),
            None => (self.stream().device.kind == crate::DeviceKind::Gpu).then_some(self.stream().device.index),
        }
    }

    /// Evaluates the array and returns where its elements are on GPU `gpu`, copying them there
    /// first if they are elsewhere, once every kernel writing them has finished (so any stream
    /// of any library may read them).
    pub fn device_view(&self, gpu: usize) -> Result<DeviceView> {
        let op = "dlpack";
        self.eval()?;
        let buffer = self.buffer().ok_or_else(|| Error::new(op, ErrorKind::NoData, "the array has no data"))?;
        let g = context::gpu(op, gpu)?;
        let stream = g.stream(op, 0)?;
        let ptr = buffer.gpu_start(op, gpu, stream, self.dtype().size())?;
        crate::backend::cuda::synchronize(crate::Stream { device: crate::Device::gpu(gpu), index: 0 })?;
        Ok(DeviceView {
            gpu,
            ptr,
            strides: buffer.strides.to_vec(),
            keep: buffer.storage,
        })
    }

    /// An array of `shape` and `dtype` over GPU `gpu`'s memory whose first element is at `ptr`,
    /// with element `strides` (row-major when `None`). The memory belongs to another library:
    /// `owner` is dropped, releasing it, once no array uses it and kiln's reads are done. Work
    /// the owner queued on it must be ordered before kiln's default stream of `gpu`
    /// ([`Array::exchange_stream`]).
    pub fn from_gpu_memory(
        gpu: usize,
        ptr: u64,
        shape: &[usize],
        strides: Option<&[isize]>,
        dtype: Dtype,
        owner: Box<dyn Send + Sync>,
    ) -> Result<Array> {
        let op = "from_dlpack";
        let strides: Vec<isize> = match strides {
            Some(s) if s.len() == shape.len() => s.to_vec(),
            Some(s) => {
                return Err(Error::shape(op, format!("{} strides for shape {}", s.len(), fmt_shape(shape))));
            }
            None => crate::shape::row_major_strides(shape).to_vec(),
        };
        if ptr == 0 && shape.iter().product::<usize>() > 0 {
            return Err(Error::value(op, format!("a null device address for shape {}", fmt_shape(shape))));
        }
        let g = context::gpu(op, gpu)?;
        let stream = Array::exchange_stream(gpu)?;
        // The bytes the view reaches: from its lowest to its highest element (strides may be negative).
        let empty = shape.contains(&0);
        let (mut lo, mut hi) = (0isize, 0isize);
        for (&d, &s) in shape.iter().zip(&strides) {
            let far = (d as isize - 1).max(0) * s;
            lo += far.min(0);
            hi += far.max(0);
        }
        let size = dtype.size() as isize;
        let bytes = if empty { 0 } else { ((hi - lo + 1) * size) as usize };
        let base = ptr.wrapping_add_signed((lo * size) as i64);
        let block = DeviceBlock::foreign(g, base, bytes, stream, owner);
        let buffer = Buffer { storage: Storage::on_device(block), offset: -lo, strides: strides.iter().copied().collect() };
        Ok(Array::from_buffer(Shape::from_slice(shape), dtype, buffer))
    }

    /// An array of `shape` and `dtype` over host memory at `ptr` holding its elements in
    /// row-major order, without a copy. The memory belongs to the caller: kiln only reads it and
    /// drops `owner`, releasing it, once no array uses it.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of the array's bytes until `owner` is dropped, and nothing
    /// may write to that memory meanwhile.
    pub unsafe fn from_host_memory(
        ptr: *const u8,
        shape: &[usize],
        dtype: Dtype,
        owner: Box<dyn Send + Sync>,
    ) -> Result<Array> {
        let bytes = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        let Some(bytes) = bytes else {
            return Err(Error::shape("array", format!("shape {} of {dtype} overflows the address space", fmt_shape(shape))));
        };
        let ptr = match std::ptr::NonNull::new(ptr as *mut u8) {
            Some(p) => p,
            None if bytes == 0 => std::ptr::NonNull::dangling(),
            None => return Err(Error::value("array", format!("a NULL data pointer for shape {} of {dtype}", fmt_shape(shape)))),
        };
        if !(ptr.as_ptr() as usize).is_multiple_of(dtype.size()) {
            return Err(Error::value(
                "array",
                format!("data at {ptr:p} is not aligned to its {dtype} elements ({} bytes)", dtype.size()),
            ));
        }
        // Safety: the caller vouches for the memory, as this function's contract says.
        let storage = unsafe { Storage::over_host_memory(ptr, bytes, owner) };
        let buffer = Buffer { storage, offset: 0, strides: crate::shape::row_major_strides(shape) };
        Ok(Array::from_buffer(Shape::from_slice(shape), dtype, buffer))
    }

    /// The CUDA stream kiln reads exchanged memory on for GPU `gpu` (its default stream): a
    /// producer orders its pending writes before it.
    pub fn exchange_stream(gpu: usize) -> Result<CuStream> {
        context::gpu("from_dlpack", gpu)?.stream("from_dlpack", 0)
    }
}
