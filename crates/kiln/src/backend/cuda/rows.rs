//! Runs fused kernels with reductions on a GPU: splits the iteration space into rows (the kept
//! axes) and their elements (the reduced axes), merges the axes of each part that every input
//! walks as one, picks how each input is read along a row, builds (or finds) the kernel printed
//! for that variant ([`super::row_source`]) and launches a block per row. A kernel of one pass
//! over few long rows runs as two: a block per part of a row, then a block per row that folds
//! the parts' results and finishes the row.

use super::context::Gpu;
use super::elementwise::{merged_axes, reach};
use super::memory::DeviceBlock;
use super::nvrtc;
use super::reduce::{block_for, parts_per_row};
use super::row_source::{self, RowAccess, RowSplit, RowVariant, ROW_ENTRY};
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::fused::{Inst, Kernel, Level};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;

/// What identifies a row kernel's code: its instructions, input dtypes, outputs, passes, variant.
type RowKey = (Vec<Inst>, Vec<Dtype>, Vec<usize>, usize, RowVariant);

/// Row kernels loaded so far.
static LOADED: nvrtc::Loaded<RowKey> = nvrtc::Loaded::new();

/// Runs kernel `k` (with reductions) over `space` on `gpu`'s `stream`: element outputs of shape
/// `space`, row outputs with the reduced axes kept as size 1, each a new contiguous array.
pub fn run(op: &str, gpu: &Gpu, stream: sys::CUstream, k: &Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    let split = space.len() - k.reduced.min(space.len());
    let (rows, len) = (numel(&space[..split]), numel(&space[split..]));
    let strides: Vec<Vec<isize>> = inputs.iter().map(|x| x.strides_for(space).to_vec()).collect();
    let lead_strides: Vec<Vec<isize>> = strides.iter().map(|s| s[..split].to_vec()).collect();
    let trail_strides: Vec<Vec<isize>> = strides.iter().map(|s| s[split..].to_vec()).collect();
    let (ldims, lst) = merged_axes(&space[..split], &lead_strides);
    let (tdims, tst) = merged_axes(&space[split..], &trail_strides);
    let along_row = row_major_strides(&tdims);
    let access: Vec<RowAccess> = tst
        .iter()
        .map(|s| {
            if s.iter().all(|&v| v == 0) {
                RowAccess::PerRow
            } else if s[..] == along_row[..] {
                RowAccess::Contiguous
            } else {
                RowAccess::Strided
            }
        })
        .collect();
    let wide = rows * len >= 1 << 30 || reach(&ldims, &lst) + reach(&tdims, &tst) >= 1 << 30;
    let mut row_shape = space.to_vec();
    row_shape[split..].iter_mut().for_each(|d| *d = 1);
    let outputs: Vec<(Dtype, bool)> = k.outputs.iter().map(|&i| (k.insts[i].dtype, k.insts[i].level == Level::Row)).collect();
    let blocks: Vec<DeviceBlock> = outputs
        .iter()
        .map(|&(d, per_row)| DeviceBlock::new(op, gpu, stream, if per_row { rows } else { rows * len } * d.size()))
        .collect::<Result<_>>()?;
    if rows == 0 {
        return Ok(buffers(blocks, &outputs, space, &row_shape));
    }
    let addresses: Vec<u64> =
        inputs.iter().map(|x| x.buffer.gpu_start(op, gpu.ordinal, stream, x.dtype.size())).collect::<Result<_>>()?;
    let parts = if k.passes == 1 { parts_per_row(gpu, rows, len) } else { 1 };
    let block = block_for(len.div_ceil(parts)).min(row_source::ROW_BLOCK_MAX);
    let split = if parts > 1 { RowSplit::Parts } else { RowSplit::Whole };
    let mut variant = RowVariant { lead: ldims.len(), trail: tdims.len(), access, wide, vector: 1, per_thread: 0, split };
    if parts == 1 {
        if let Some((vector, per_thread)) = row_cache(k, &variant, inputs, &addresses, &lst, len, block) {
            variant.vector = vector;
            variant.per_thread = per_thread;
        }
    } else if let Some(vector) = vector_width(k, &variant, inputs, &addresses, &lst, len) {
        variant.vector = vector;
    }
    let mut words: Vec<u64> = addresses;
    if inputs.is_empty() {
        words.push(0);
    }
    words.extend(blocks.iter().map(|b| b.ptr));
    words.extend([rows as u64, len as u64]);
    let padded = |dims: &[usize]| -> Vec<u64> { if dims.is_empty() { vec![1] } else { dims.iter().map(|&d| d as u64).collect() } };
    words.extend(padded(&ldims));
    words.extend(padded(&tdims));
    for part in [&lst, &tst] {
        for s in part.iter() {
            words.extend(if s.is_empty() { vec![0] } else { s.iter().map(|&v| v as u64).collect() });
        }
        if inputs.is_empty() {
            words.push(0);
        }
    }
    let launch = |words: &mut Vec<u64>, variant: &RowVariant, blocks: usize, block: u32| -> Result<()> {
        let key = (k.insts.clone(), k.inputs.clone(), k.outputs.clone(), k.passes, variant.clone());
        let function = LOADED.get(op, gpu, key, ROW_ENTRY, || row_source::rows(k, variant))?;
        let grid = gpu.grid_for(1, blocks);
        function.launch(op, stream, grid, block, &mut [words.as_mut_ptr() as *mut std::ffi::c_void])?;
        if variant.split != RowSplit::Finish {
            super::launches::record(k, &super::launches::Printed::Rows(variant.clone()), function, grid, block);
        }
        Ok(())
    };
    if parts == 1 {
        launch(&mut words, &variant, rows, block)?;
        return Ok(buffers(blocks, &outputs, space, &row_shape));
    }
    // Each fold's accumulator per row and part (8 bytes: float64 or a 64-bit integer); freed
    // on `stream` after the two kernels that use it.
    let folds = k.insts.iter().filter(|i| matches!(i.op, crate::fused::InstOp::Reduce(..))).count();
    let work = DeviceBlock::new(op, gpu, stream, folds * rows * parts * 8)?;
    words.extend([work.ptr, parts as u64]);
    launch(&mut words, &variant, rows * parts, block)?;
    let finish = RowVariant { split: RowSplit::Finish, vector: 1, ..variant };
    launch(&mut words, &finish, rows, block_for(parts).min(row_source::ROW_BLOCK_MAX))?;
    Ok(buffers(blocks, &outputs, space, &row_shape))
}

/// The kernel's outputs as arrays: element outputs of shape `space`, row outputs of `row_shape`.
fn buffers(blocks: Vec<DeviceBlock>, outputs: &[(Dtype, bool)], space: &[usize], row_shape: &[usize]) -> Vec<Buffer> {
    blocks
        .into_iter()
        .zip(outputs)
        .map(|(b, &(_, per_row))| Buffer {
            storage: Storage::on_device(b),
            offset: 0,
            strides: row_major_strides(if per_row { row_shape } else { space }),
        })
        .collect()
}

/// The row cache's vector width and vectors per thread, where it applies: rows read a vector at a
/// time ([`vector_width`]) and a block's threads hold the row in at most
/// [`row_source::ROW_CACHE_VECTORS`] vectors each.
fn row_cache(k: &Kernel, variant: &RowVariant, inputs: &[Input], addresses: &[u64], lead_strides: &[Vec<isize>], len: usize, block: u32) -> Option<(usize, usize)> {
    let vector = vector_width(k, variant, inputs, addresses, lead_strides, len)?;
    let per_thread = len.div_ceil(block as usize * vector);
    (per_thread <= row_source::ROW_CACHE_VECTORS).then_some((vector, per_thread))
}

/// Elements per vector (16 bytes of the widest dtype) where rows can be read and written a
/// vector at a time: every input read at element level walks the row contiguously or is one value
/// per row, the row is whole vectors, and every contiguous row starts aligned to its vector.
fn vector_width(k: &Kernel, variant: &RowVariant, inputs: &[Input], addresses: &[u64], lead_strides: &[Vec<isize>], len: usize) -> Option<usize> {
    if (0..inputs.len()).any(|j| variant.access[j] == RowAccess::Strided && row_source::read_per_element(k, j)) {
        return None;
    }
    let contiguous = row_source::loaded_contiguous(k, variant);
    let widest = contiguous
        .iter()
        .map(|&j| inputs[j].dtype.size())
        .chain(k.outputs.iter().filter(|&&i| k.insts[i].level == Level::Element).map(|&i| k.insts[i].dtype.size()))
        .max()
        .unwrap_or(1);
    let vector = 16 / widest;
    let aligned = contiguous.iter().all(|&j| {
        let bytes = (inputs[j].dtype.size() * vector) as u64;
        addresses[j].is_multiple_of(bytes) && lead_strides[j].iter().all(|&s| s.unsigned_abs().is_multiple_of(vector))
    });
    (len.is_multiple_of(vector) && aligned).then_some(vector)
}
