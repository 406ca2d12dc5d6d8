//! Devices and streams: every op takes the stream it runs on (mlx-c's convention), made from a
//! device; the default device is the GPU where one is usable (`KILN_DEFAULT_DEVICE` overrides).

use crate::error::{c_error, status};
use crate::handle::{free, handles, put, set, value};
use kiln::{Device, DeviceKind, Stream};
use std::ffi::{c_int, c_void};

/// A device (the CPU, or GPU n).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_device {
    pub ctx: *mut c_void,
}

/// A stream of a device: ops on one stream run in order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_stream {
    pub ctx: *mut c_void,
}

handles!(kiln_device => Device, kiln_stream => Stream);

/// A kind of device, as kiln's `KILN_CPU`/`KILN_GPU` constants.
pub type kiln_device_type = c_int;
/// The host CPU.
pub const KILN_CPU: kiln_device_type = 0;
/// An NVIDIA GPU.
pub const KILN_GPU: kiln_device_type = 1;

/// The stream of handle `s`, or an error naming argument `what`.
///
/// # Safety
/// `s` is empty or a live handle of this library.
pub(crate) unsafe fn stream(s: kiln_stream, what: &str) -> kiln::Result<Stream> {
    Ok(*unsafe { value(s, what) }?)
}

/// An empty device handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_device_new() -> kiln_device {
    kiln_device { ctx: std::ptr::null_mut() }
}

/// The device of `type` and `index` (the CPU is index 0). Whether it is usable is checked when
/// a stream of it is used.
#[no_mangle]
pub unsafe extern "C" fn kiln_device_new_type(res: *mut kiln_device, r#type: kiln_device_type, index: c_int) -> c_int {
    status("kiln_device_new_type", || {
        let index = usize::try_from(index).map_err(|_| c_error("", format!("device index {index} is negative")))?;
        let d = match r#type {
            KILN_CPU => Device { kind: DeviceKind::Cpu, index },
            KILN_GPU => Device::gpu(index),
            t => return Err(c_error("", format!("device type {t} is not KILN_CPU (0) or KILN_GPU (1)"))),
        };
        unsafe { set(res, d) }
    })
}

/// The device's type and index.
#[no_mangle]
pub unsafe extern "C" fn kiln_device_get_type(res: *mut kiln_device_type, index: *mut c_int, dev: kiln_device) -> c_int {
    status("kiln_device_get_type", || {
        let d = *unsafe { value(dev, "dev") }?;
        let t = if d.kind == DeviceKind::Gpu { KILN_GPU } else { KILN_CPU };
        unsafe { put(res, t, "res")? };
        unsafe { put(index, d.index as c_int, "index") }
    })
}

/// The default device of new ops.
#[no_mangle]
pub unsafe extern "C" fn kiln_get_default_device(res: *mut kiln_device) -> c_int {
    status("kiln_get_default_device", || unsafe { set(res, kiln::default_device()) })
}

/// Sets the default device; fails, naming the cause, if it cannot be used.
#[no_mangle]
pub unsafe extern "C" fn kiln_set_default_device(dev: kiln_device) -> c_int {
    status("kiln_set_default_device", || kiln::set_default_device(*unsafe { value(dev, "dev") }?))
}

/// Whether a GPU is usable (a driver, a device and the CUDA libraries were found).
#[no_mangle]
pub unsafe extern "C" fn kiln_gpu_is_available(res: *mut bool) -> c_int {
    status("kiln_gpu_is_available", || unsafe { put(res, Device::gpu(0).is_available(), "res") })
}

/// Frees a device handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_device_free(dev: kiln_device) -> c_int {
    status("kiln_device_free", || {
        unsafe { free(dev) };
        Ok(())
    })
}

/// An empty stream handle, to receive a result.
#[no_mangle]
pub extern "C" fn kiln_stream_new() -> kiln_stream {
    kiln_stream { ctx: std::ptr::null_mut() }
}

/// The default stream of `dev`.
#[no_mangle]
pub unsafe extern "C" fn kiln_get_default_stream(res: *mut kiln_stream, dev: kiln_device) -> c_int {
    status("kiln_get_default_stream", || unsafe { set(res, Stream::default_for(*value(dev, "dev")?)) })
}

/// The CPU's default stream.
#[no_mangle]
pub unsafe extern "C" fn kiln_default_cpu_stream_new(res: *mut kiln_stream) -> c_int {
    status("kiln_default_cpu_stream_new", || unsafe { set(res, Stream::default_for(Device::cpu())) })
}

/// GPU 0's default stream (using it fails, naming the cause, where no GPU is usable).
#[no_mangle]
pub unsafe extern "C" fn kiln_default_gpu_stream_new(res: *mut kiln_stream) -> c_int {
    status("kiln_default_gpu_stream_new", || unsafe { set(res, Stream::default_for(Device::gpu(0))) })
}

/// A new stream of `dev`, independent of its other streams.
#[no_mangle]
pub unsafe extern "C" fn kiln_stream_new_device(res: *mut kiln_stream, dev: kiln_device) -> c_int {
    status("kiln_stream_new_device", || unsafe { set(res, kiln::new_stream(*value(dev, "dev")?)?) })
}

/// Waits until the work queued on `s` is done.
#[no_mangle]
pub unsafe extern "C" fn kiln_synchronize(s: kiln_stream) -> c_int {
    status("kiln_synchronize", || kiln::synchronize(unsafe { stream(s, "s") }?))
}

/// Frees a stream handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_stream_free(s: kiln_stream) -> c_int {
    status("kiln_stream_free", || {
        unsafe { free(s) };
        Ok(())
    })
}
