//! Backends execute one op on evaluated inputs. The op layer never names a backend: eval hands
//! each node to the backend of its stream's device. The CPU backend is the first; a CUDA backend
//! is another module behind the same [`run`] entry point.

pub mod cpu;

use crate::buffer::Buffer;
use crate::device::{check_available, DeviceKind, Stream};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::primitive::Op;
use crate::shape::Shape;

/// An evaluated input as a kernel sees it.
pub struct Input {
    /// The input's shape.
    pub shape: Shape,
    /// The input's dtype.
    pub dtype: Dtype,
    /// The input's data (storage, offset, strides).
    pub buffer: Buffer,
    /// True when no one else can see this input's storage: the kernel may write its output there.
    pub donatable: bool,
}

/// Runs `op` on `inputs` on `stream`'s device, producing the output's data.
pub fn run(stream: Stream, op: &Op, inputs: &[Input], shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    check_available(op.name(), stream.device)?;
    match stream.device.kind {
        DeviceKind::Cpu => cpu::run(op, inputs, shape, dtype),
        DeviceKind::Gpu => unreachable!("check_available rejects devices without a backend"),
    }
}

