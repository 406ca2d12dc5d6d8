//! Gathers and scatters on a GPU (`index.cu`), with the CPU's index semantics (see
//! `backend/cpu/index.rs`): a negative index counts from the end of its axis, and every index is
//! clamped so its whole slice lies in the array.
//!
//! The index arrays first become one element offset per batch position. A gather then copies
//! each slice; a scatter copies the destination and writes or combines each update into it.
//! Duplicate indices resolve as on the CPU: a set-scatter's last update wins (each destination
//! element claims the last update that writes it, then the winners write), and combining
//! scatters combine every update, atomically. Integer sums, products, max and min are therefore
//! exact; float sums and products of duplicates may round differently from the CPU's serial order.

use super::context::{device_error, Gpu};
use super::copy::bits_type;
use super::elementwise::{self, merged_axes};
use super::memory::DeviceBlock;
use super::nvrtc;
use super::source::{combine_stored, storage_type};
use crate::backend::cpu::strided::is_row_contiguous;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::{BinaryOp, ScatterOp};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;

const BODY: &str = include_str!("index.cu");

/// Threads per block of these kernels (their `__launch_bounds__`).
const BLOCK: u32 = 256;

/// Whether index arithmetic needs 64 bits: some position of the `elements` a kernel walks, or some
/// offset within one of the arrays it reads (each given by shape and strides), is past i32.
fn wide<'a>(elements: usize, arrays: impl IntoIterator<Item = (&'a [usize], &'a [isize])>) -> bool {
    let limit = i32::MAX as usize;
    let span = |(shape, strides): (&[usize], &[isize])| shape.iter().zip(strides).map(|(&d, &s)| d.saturating_sub(1) * s.unsigned_abs()).sum::<usize>();
    elements > limit || arrays.into_iter().any(|a| span(a) > limit)
}

/// The definitions of this file's kernels over `rank` axes for index dtype `index`, element type
/// `element` of `size` bytes, and a combining scatter's `combine` expression (`0` otherwise),
/// with 64-bit index arithmetic when `wide`.
fn definitions(rank: usize, wide: bool, index: Dtype, element: &str, size: usize, combine: &str) -> String {
    // The CPU reads an index through float64 as i64: a uint64 past i64's range saturates.
    let read = if index == Dtype::U64 { "((x) > (u64)INT64_MAX ? INT64_MAX : (i64)(x))" } else { "((i64)(x))" };
    format!(
        "#define K_RANK {rank}\n#define K_WIDE {}\n#define K_IDX {}\n#define K_INDEX(x) {read}\n#define K_T {element}\n#define K_T_SIZE {size}\n\
         #define K_COMBINE(a, b) {combine}\n",
        u8::from(wide),
        storage_type(index)
    )
}

/// The binary op a combining scatter applies (`None` for a set).
fn combining(op: ScatterOp) -> Option<BinaryOp> {
    match op {
        ScatterOp::Set => None,
        ScatterOp::Add => Some(BinaryOp::Add),
        ScatterOp::Prod => Some(BinaryOp::Multiply),
        ScatterOp::Max => Some(BinaryOp::Maximum),
        ScatterOp::Min => Some(BinaryOp::Minimum),
    }
}

/// The gather and set-scatter kernels for every index dtype and element size, and the combining
/// scatters for every op and dtype the CPU defines them on, as (what, CUDA C).
pub(super) fn variants() -> Vec<(String, String)> {
    let integers = Dtype::ALL.iter().copied().filter(|d| d.is_integer());
    let mut all: Vec<(String, String)> = integers
        .flat_map(|i| [1, 2, 4, 8].map(move |size| (format!("gather of {size}-byte elements by {i}"), definitions(2, size == 8, i, bits_type(size), size, "0"))))
        .collect();
    for op in [ScatterOp::Add, ScatterOp::Prod, ScatterOp::Max, ScatterOp::Min] {
        for d in Dtype::REAL {
            if let Ok(combine) = combine_stored(combining(op).expect("a combining op"), d, "(a)", "(b)") {
                all.push((format!("{op:?} scatter of {d}"), definitions(1, d.size() == 8, Dtype::I32, storage_type(d), d.size(), &combine)));
            }
        }
    }
    all.into_iter().map(|(what, defs)| (what, nvrtc::handwritten_source(BODY, &defs))).collect()
}

/// The parameter words of a kernel over merged `dims` with one set of `strides`, padded to `rank`.
fn space_words(words: &mut Vec<u64>, rank: usize, dims: &[usize], strides: &[isize]) {
    words.extend((0..rank).map(|d| dims.get(d).copied().unwrap_or(1) as u64));
    words.extend((0..rank).map(|d| strides.get(d).copied().unwrap_or(0) as u64));
}

/// The device address of `x`'s first element.
fn start_of(op: &str, gpu: &Gpu, stream: sys::CUstream, x: &Input) -> Result<u64> {
    x.buffer.gpu_start(op, gpu.ordinal, stream, x.dtype.size())
}

/// One element offset per position of `batch` (a new device block of i64): the slice that
/// `indices` (broadcast to `batch`) select along `axes` of an array of `dims` and `strides`, each
/// index wrapped and clamped so a slice of `slice` fits.
#[allow(clippy::too_many_arguments)]
fn slice_offsets(op: &str, gpu: &Gpu, stream: sys::CUstream, indices: &[Input], axes: &[usize], dims: &[usize], strides: &[isize], slice: &[usize], batch: &[usize]) -> Result<DeviceBlock> {
    let n = numel(batch);
    let offsets = DeviceBlock::new(op, gpu, stream, n * 8)?;
    if indices.is_empty() {
        // Safety: the block holds `n * 8` bytes of this context.
        unsafe { cudarc::driver::result::memset_d8_async(offsets.ptr, 0, n * 8, stream) }.map_err(|e| device_error(op, "zeroing index offsets", e))?;
    }
    for (j, (idx, &axis)) in indices.iter().zip(axes).enumerate() {
        let (idims, istrides) = merged_axes(batch, &[idx.strides_for(batch).to_vec()]);
        let rank = idims.len().max(1);
        let wide64 = wide(n, [(&idx.shape[..], &idx.buffer.strides[..])]);
        let f = nvrtc::handwritten(op, gpu, BODY, definitions(rank, wide64, idx.dtype, "u8", 1, "0"), "kiln_index_offsets")?;
        let dim = dims[axis] as i64;
        let hi = (dim - slice[axis] as i64).max(0);
        let mut words = vec![start_of(op, gpu, stream, idx)?, offsets.ptr, n as u64, dim as u64, hi as u64, strides[axis] as u64, u64::from(j == 0)];
        space_words(&mut words, rank, &idims, &istrides[0]);
        f.launch_words(op, gpu, stream, BLOCK, n, &mut words)?;
    }
    Ok(offsets)
}

/// Gathers slices of `slice_sizes` of `inputs[0]` at the positions `inputs[1..]` index along
/// `axes`, into a new row-major array of `shape` (the batch shape, then `slice_sizes`).
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn gather(gpu: &Gpu, stream: sys::CUstream, inputs: &[Input], axes: &[usize], slice_sizes: &[usize], shape: &[usize]) -> Result<Buffer> {
    let op = "gather";
    let a = &inputs[0];
    let size = a.dtype.size();
    let batch = &shape[..shape.len() - slice_sizes.len()];
    let out = DeviceBlock::new(op, gpu, stream, numel(shape) * size)?;
    let per = numel(slice_sizes);
    if per > 0 && numel(batch) > 0 {
        let offsets = slice_offsets(op, gpu, stream, &inputs[1..], axes, &a.shape, &a.buffer.strides, slice_sizes, batch)?;
        let (dims, strides) = merged_axes(slice_sizes, &[a.buffer.strides.to_vec()]);
        let rank = dims.len().max(1);
        let n = numel(shape);
        let wide64 = wide(n, [(&a.shape[..], &a.buffer.strides[..])]);
        let f = nvrtc::handwritten(op, gpu, BODY, definitions(rank, wide64, Dtype::I32, bits_type(size), size, "0"), "kiln_gather")?;
        let mut words = vec![start_of(op, gpu, stream, a)?, out.ptr, offsets.ptr, n as u64, per as u64];
        space_words(&mut words, rank, &dims, &strides[0]);
        f.launch_words(op, gpu, stream, BLOCK, n, &mut words)?;
    }
    Ok(Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) })
}

/// A row-major copy of `inputs[0]` with `inputs[last]` (the updates: batch shape, then one slice
/// per batch position) written into the slices `inputs[1..last]` index along `axes`, combined
/// with the destination by `op`.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn scatter(gpu: &Gpu, stream: sys::CUstream, inputs: &[Input], axes: &[usize], op: ScatterOp) -> Result<Buffer> {
    let name = "scatter";
    let (a, updates) = (&inputs[0], &inputs[inputs.len() - 1]);
    if updates.dtype != a.dtype {
        return Err(Error::dtype(name, format!("the updates' dtype {} differs from the array's {}", updates.dtype, a.dtype)));
    }
    let out = elementwise::contiguous(name, gpu, stream, a)?;
    let nb = updates.shape.len() - a.shape.len();
    let (batch, slice) = updates.shape.split_at(nb);
    let (n, per) = (numel(&updates.shape), numel(slice));
    if n == 0 {
        return Ok(out);
    }
    let ostrides = row_major_strides(&a.shape);
    let offsets = slice_offsets(name, gpu, stream, &inputs[1..inputs.len() - 1], axes, &a.shape, &ostrides, slice, batch)?;
    let rows = if is_row_contiguous(&updates.shape, &updates.buffer.strides) { updates.buffer.clone() } else { elementwise::contiguous(name, gpu, stream, updates)? };
    let upd = rows.gpu_start(name, gpu.ordinal, stream, a.dtype.size())?;
    let dst = out.storage.on_gpu(name, gpu.ordinal, stream)?;
    let (dims, strides) = merged_axes(slice, &[ostrides.to_vec()]);
    let rank = dims.len().max(1);
    let (element, combine) = match combining(op) {
        None => (bits_type(a.dtype.size()), "0".to_string()),
        Some(b) => (storage_type(a.dtype), combine_stored(b, a.dtype, "(a)", "(b)").map_err(|e| Error::dtype(name, e.message))?),
    };
    let wide64 = wide(n, [(&a.shape[..], &ostrides[..])]);
    let defs = definitions(rank, wide64, Dtype::I32, element, a.dtype.size(), &combine);
    let launch = |entry: &'static str, claims: u64| -> Result<()> {
        let f = nvrtc::handwritten(name, gpu, BODY, defs.clone(), entry)?;
        let mut words = vec![dst, upd, offsets.ptr, claims, n as u64, per as u64];
        space_words(&mut words, rank, &dims, &strides[0]);
        f.launch_words(name, gpu, stream, BLOCK, n, &mut words)
    };
    match op {
        // One slice cannot collide with itself: no claims needed.
        ScatterOp::Set if numel(batch) == 1 => launch("kiln_scatter_set", 0)?,
        ScatterOp::Set => {
            if n >= u32::MAX as usize {
                return Err(Error::unsupported(name, format!("{n} updates of shape {:?}: a set-scatter on a GPU takes fewer than 2^32 - 1", updates.shape)));
            }
            let elements = numel(&a.shape);
            let claims = DeviceBlock::new(name, gpu, stream, elements * 4)?;
            // Safety: the block holds `elements * 4` bytes of this context.
            unsafe { cudarc::driver::result::memset_d8_async(claims.ptr, 0, elements * 4, stream) }.map_err(|e| device_error(name, "zeroing claims", e))?;
            launch("kiln_scatter_claim", claims.ptr)?;
            launch("kiln_scatter_set", claims.ptr)?;
        }
        _ => launch("kiln_scatter_combine", 0)?,
    }
    Ok(out)
}
