//! Devices and streams: the CPU and NVIDIA GPUs. The op layer only records on which stream each
//! node runs; eval hands the node to its stream's device. The default device is the GPU when one
//! is usable (as in mlx), else the CPU; `KILN_DEFAULT_DEVICE=cpu|gpu` overrides.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::fmt;
use std::sync::Mutex;

/// The kind of processor a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// An NVIDIA GPU, through CUDA.
    Gpu,
}

/// A device: a kind and an index among devices of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// What kind of processor.
    pub kind: DeviceKind,
    /// Which one of that kind.
    pub index: usize,
}

impl Device {
    /// The host CPU.
    pub const fn cpu() -> Device {
        Device { kind: DeviceKind::Cpu, index: 0 }
    }
    /// GPU `index`.
    pub const fn gpu(index: usize) -> Device {
        Device { kind: DeviceKind::Gpu, index }
    }
    /// Whether this device can run ops here: the CPU always; a GPU when the driver is present and
    /// lists it.
    pub fn is_available(self) -> bool {
        match self.kind {
            DeviceKind::Cpu => self.index == 0,
            DeviceKind::Gpu => self.index < crate::backend::cuda::context::count(),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DeviceKind::Cpu => write!(f, "Device(cpu, {})", self.index),
            DeviceKind::Gpu => write!(f, "Device(gpu, {})", self.index),
        }
    }
}

/// A stream: an ordered queue of work on one device. Nodes record their stream; eval runs each
/// node on its stream's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream {
    /// The device this stream runs on.
    pub device: Device,
    /// The stream's index on its device.
    pub index: usize,
}

impl Stream {
    /// The default stream of `device`.
    pub const fn default_for(device: Device) -> Stream {
        Stream { device, index: 0 }
    }
}

static DEFAULT_DEVICE: Mutex<Option<Device>> = Mutex::new(None);

thread_local! {
    static STREAM_SCOPE: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
}

/// The process-wide default device: set by [`set_default_device`], else `KILN_DEFAULT_DEVICE`
/// (`cpu` or `gpu`), else GPU 0 when one is usable, else the CPU.
pub fn default_device() -> Device {
    *DEFAULT_DEVICE.lock().unwrap().get_or_insert_with(|| match std::env::var("KILN_DEFAULT_DEVICE").as_deref() {
        Ok("cpu") => Device::cpu(),
        _ if Device::gpu(0).is_available() => Device::gpu(0),
        _ => Device::cpu(),
    })
}

/// Sets the default device; fails for a device that cannot be used here.
pub fn set_default_device(device: Device) -> Result<()> {
    check_available("set_default_device", device)?;
    *DEFAULT_DEVICE.lock().unwrap() = Some(device);
    Ok(())
}

/// Fails with a clear message, naming the cause, when `device` cannot be used here.
pub fn check_available(op: &str, device: Device) -> Result<()> {
    if device.is_available() {
        return Ok(());
    }
    match device.kind {
        DeviceKind::Cpu => Err(Error::value(op, format!("{device} does not exist: the CPU is device 0"))),
        DeviceKind::Gpu => crate::backend::cuda::context::gpu(op, device.index).map(|_| ()),
    }
}

/// The stream new ops are placed on: the innermost [`with_stream`] scope, else the default
/// device's default stream.
pub fn current_stream() -> Stream {
    STREAM_SCOPE
        .with(|s| s.borrow().last().copied())
        .unwrap_or_else(|| Stream::default_for(default_device()))
}

/// Runs `f` with every op it creates placed on `stream` (mlx's per-op `stream=` argument).
pub fn with_stream<R>(stream: Stream, f: impl FnOnce() -> R) -> Result<R> {
    struct Exit;
    impl Drop for Exit {
        fn drop(&mut self) {
            exit_stream();
        }
    }
    enter_stream("with_stream", stream)?;
    let _exit = Exit;
    Ok(f())
}

/// Places the ops this thread creates on `stream` until the matching [`exit_stream`]: the two
/// halves of [`with_stream`], for scopes a closure cannot express (Python's `with mx.stream(s)`).
pub fn enter_stream(op: &str, stream: Stream) -> Result<()> {
    check_available(op, stream.device)?;
    STREAM_SCOPE.with(|s| s.borrow_mut().push(stream));
    Ok(())
}

/// Ends the innermost [`enter_stream`] scope of this thread.
pub fn exit_stream() {
    STREAM_SCOPE.with(|s| s.borrow_mut().pop());
}

/// A new stream on `device`, independent of its other streams (work on two streams runs in any
/// order unless one reads the other's results).
pub fn new_stream(device: Device) -> Result<Stream> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    check_available("new_stream", device)?;
    Ok(Stream { device, index: NEXT.fetch_add(1, Ordering::Relaxed) })
}

/// Runs `f` with every op it creates placed on `device`'s default stream.
pub fn with_device<R>(device: Device, f: impl FnOnce() -> R) -> Result<R> {
    with_stream(Stream::default_for(device), f)
}

/// Waits until all work queued on `stream` is done, and reports a failure of work an
/// [`crate::async_eval`] started. The CPU backend runs work synchronously inside `eval`, so there
/// is nothing to wait for; a GPU stream is waited for.
pub fn synchronize(stream: Stream) -> Result<()> {
    check_available("synchronize", stream.device)?;
    crate::array::take_deferred_failure()?;
    match stream.device.kind {
        DeviceKind::Cpu => Ok(()),
        DeviceKind::Gpu => crate::backend::cuda::synchronize(stream),
    }
}
