//! Integer and boolean matrix products on a GPU (`integer_matmul.cu`), which cuBLASLt does not
//! offer: wrapping sums of products in the output dtype as on the CPU, ORs of ANDs for booleans.
//! Operands are made row-major over the full batch shape first (a copy where they are not).

use super::context::Gpu;
use super::elementwise;
use super::memory::DeviceBlock;
use super::nvrtc;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;

const BODY: &str = include_str!("integer_matmul.cu");

/// Threads per block: one per element of a 16 × 16 output tile.
const BLOCK: u32 = 256;

/// The definitions that make `integer_matmul.cu` multiply elements of `d`.
fn definitions(d: Dtype) -> String {
    let stored = match d.size() {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    };
    let acc = if d.size() == 8 { "u64" } else { "u32" };
    let step = if d == Dtype::Bool { "((acc) | ((x) & (y)))" } else { "((acc) + (x) * (y))" };
    format!("#define K_T {stored}\n#define K_ACC {acc}\n#define K_STEP(acc, x, y) {step}\n")
}

/// The kernel for every integer dtype and bool, as (what, CUDA C).
pub(super) fn variants() -> Vec<(String, String)> {
    Dtype::ALL
        .iter()
        .filter(|d| !d.is_float())
        .map(|&d| (format!("integer matmul of {d}"), nvrtc::handwritten_source(BODY, &definitions(d))))
        .collect()
}

/// `a @ b` of integer or boolean inputs with equal batch shape into a new row-major array.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn run(gpu: &Gpu, stream: sys::CUstream, a: &Input, b: &Input, shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let op = "matmul";
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.shape[nd - 1]);
    let total = numel(shape);
    let out = DeviceBlock::new(op, gpu, stream, total * dtype.size())?;
    if total > 0 {
        let start = |x: &Input| -> Result<(Buffer, u64)> {
            let rows = if x.buffer.strides == row_major_strides(&x.shape) { x.buffer.clone() } else { elementwise::contiguous(op, gpu, stream, x)? };
            let ptr = rows.gpu_start(op, gpu.ordinal, stream, dtype.size())?;
            Ok((rows, ptr))
        };
        // The row-major operands stay alive (and their blocks unfreed) until the kernel is queued.
        let ((_a_rows, a_ptr), (_b_rows, b_ptr)) = (start(a)?, start(b)?);
        let batch = total / (m * n);
        let tiles = batch * m.div_ceil(16) * n.div_ceil(16);
        nvrtc::handwritten(op, gpu, BODY, definitions(dtype), "kiln_integer_matmul")?.launch_params(
            op,
            stream,
            tiles.min(gpu.multiprocessors as usize * 16),
            BLOCK,
            0,
            &mut [a_ptr, b_ptr, out.ptr, batch as u64, m as u64, n as u64, k as u64],
        )?;
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}
