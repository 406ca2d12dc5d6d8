//! Runs elementwise kernels of the fused IR on a GPU: merges the axes every input walks
//! contiguously, picks each input's access pattern, builds (or finds) the kernel printed for that
//! variant, fills its parameter block and launches it.

use super::context::Gpu;
use super::launches;
use super::memory::DeviceBlock;
use super::nvrtc;
use super::source::{self, Access, Variant, BLOCK, ENTRY};
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::fused::{Inst, InstOp, Kernel, Level};
use crate::shape::{numel, row_major_strides};
use cudarc::driver::sys;
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Axes of `space` with each input's strides over them, size-1 axes dropped and neighbours merged
/// where every input steps through them as one axis.
pub(super) fn merged_axes(space: &[usize], strides: &[Vec<isize>]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut dims: Vec<usize> = Vec::new();
    let mut st: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for (d, &size) in space.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let merges = !dims.is_empty()
            && strides.iter().zip(&st).all(|(s, m)| m.last().copied() == Some(s[d] * size as isize));
        if merges {
            *dims.last_mut().expect("checked non-empty") *= size;
            for (m, s) in st.iter_mut().zip(strides) {
                *m.last_mut().expect("one stride per axis") = s[d];
            }
        } else {
            dims.push(size);
            for (m, s) in st.iter_mut().zip(strides) {
                m.push(s[d]);
            }
        }
    }
    (dims, st)
}

/// How far, in elements, any input's view reaches from its first element over `dims` (what
/// decides whether 32-bit indices suffice).
pub(super) fn reach(dims: &[usize], strides: &[Vec<isize>]) -> usize {
    strides.iter().map(|s| s.iter().zip(dims).map(|(&v, &d)| v.unsigned_abs() * d).sum::<usize>()).max().unwrap_or(0)
}

/// How a run finds its kernel's code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Build {
    /// Loaded, or built now.
    Now,
    /// As `Now`, for a compiled plan's kernel: its launch is recorded for compile's report.
    Recorded,
    /// Loaded, or built on another thread while the run is declined (eager fusion's kernels).
    WhenBuilt,
}

/// Runs elementwise kernel `k` over `space` on `gpu`'s `stream`, one new contiguous array per
/// output.
pub fn run(op: &str, gpu: &Gpu, stream: sys::CUstream, k: &Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    Ok(run_with(op, gpu, stream, k, inputs, space, Build::Now)?.expect("built now"))
}

/// [`run`] for a compiled plan's kernel, whose launch is recorded for compile's report.
pub fn run_recorded(op: &str, gpu: &Gpu, stream: sys::CUstream, k: &Kernel, inputs: &[Input], space: &[usize]) -> Result<Vec<Buffer>> {
    Ok(run_with(op, gpu, stream, k, inputs, space, Build::Recorded)?.expect("built now"))
}

/// [`run`] if the kernel's code is ready; otherwise `None`, while NVRTC builds it on another
/// thread (the caller runs the ops one by one meanwhile).
pub fn run_when_built(op: &str, gpu: &Gpu, stream: sys::CUstream, k: &Kernel, inputs: &[Input], space: &[usize]) -> Result<Option<Vec<Buffer>>> {
    run_with(op, gpu, stream, k, inputs, space, Build::WhenBuilt)
}

fn run_with(op: &str, gpu: &Gpu, stream: sys::CUstream, k: &Kernel, inputs: &[Input], space: &[usize], build: Build) -> Result<Option<Vec<Buffer>>> {
    let n = numel(space);
    let strides: Vec<Vec<isize>> = inputs.iter().map(|x| x.strides_for(space).to_vec()).collect();
    let (dims, st) = merged_axes(space, &strides);
    let row_major: Vec<isize> = row_major_strides(&dims).to_vec();
    let access: Vec<Access> = st
        .iter()
        .zip(inputs)
        .map(|(s, x)| {
            if s.iter().all(|&v| v == 0) {
                if x.buffer.storage.on_host() && x.dtype.size() <= 8 { Access::Immediate } else { Access::Scalar }
            } else if *s == row_major {
                Access::Contiguous
            } else {
                Access::Strided
            }
        })
        .collect();
    let wide = n >= 1 << 30 || reach(&dims, &st) >= 1 << 30;
    let vector = vector_width(k, inputs, &access);
    let variant = Variant { rank: dims.len(), access, wide, vector };
    let function = match (n, build) {
        (0, _) => None,
        (_, Build::Now) => Some(function(op, gpu, k, &variant)?),
        (_, Build::Recorded) => Some(compiled_function(op, gpu, k, &variant)?),
        (_, Build::WhenBuilt) => match function_when_built(op, gpu, k, &variant)? {
            Some(f) => Some(f),
            None => return Ok(None),
        },
    };
    let outputs: Vec<Dtype> = k.outputs.iter().map(|&i| k.insts[i].dtype).collect();
    let blocks: Vec<DeviceBlock> =
        outputs.iter().map(|d| DeviceBlock::new(op, gpu, stream, n * d.size())).collect::<Result<_>>()?;
    if let Some(function) = function {
        let mut words: Vec<u64> = Vec::new();
        for (x, a) in inputs.iter().zip(&variant.access) {
            // An immediate's host copy exists: `on_host` was checked when the access was chosen.
            words.push(if *a == Access::Immediate {
                x.buffer.first_element_bits(x.dtype.size())
            } else {
                x.buffer.gpu_start(op, gpu.ordinal, stream, x.dtype.size())?
            });
        }
        if inputs.is_empty() {
            words.push(0);
        }
        words.extend(blocks.iter().map(|b| b.ptr));
        words.push(n as u64);
        let rank = dims.len().max(1);
        words.extend((0..rank).map(|d| dims.get(d).copied().unwrap_or(1) as u64));
        for s in &st {
            words.extend((0..rank).map(|d| s.get(d).copied().unwrap_or(0) as u64));
        }
        if inputs.is_empty() {
            words.extend(std::iter::repeat_n(0, rank));
        }
        let grid = if variant.vector > 1 {
            // A thread per vector, and one per element of the tail (the printer's shape).
            (n / variant.vector + n % variant.vector).div_ceil(BLOCK as usize)
        } else {
            gpu.grid_for(BLOCK, n)
        };
        // A one-block launch signals its completion word, so a wait for it can skip the driver.
        let ticket = if grid == 1 { gpu.streams.ticket(stream as usize) } else { None };
        words.push(ticket.map_or(0, |t| t.word));
        words.push(ticket.map_or(0, |t| t.seq as u64));
        function.launch(op, stream, grid, BLOCK, &mut [words.as_mut_ptr() as *mut std::ffi::c_void])?;
        if let Some(t) = ticket {
            gpu.streams.arm(t);
        }
        if build == Build::Recorded {
            launches::record(k, &launches::Printed::Elementwise(variant), function, grid, BLOCK);
        }
    }
    Ok(Some(
        blocks
            .into_iter()
            .map(|b| Buffer { storage: Storage::on_device(b), offset: 0, strides: row_major_strides(space) })
            .collect(),
    ))
}

/// Elements per access for a kernel whose inputs are all contiguous or one value and whose
/// contiguous inputs start 16-byte aligned (for the widest dtype; narrower ones read less): 16
/// bytes of the widest dtype, else 1 (element by element).
fn vector_width(k: &Kernel, inputs: &[Input], access: &[Access]) -> usize {
    if access.contains(&Access::Strided) {
        return 1;
    }
    let widest = k
        .outputs
        .iter()
        .map(|&i| k.insts[i].dtype.size())
        .chain(inputs.iter().zip(access).filter(|(_, a)| **a == Access::Contiguous).map(|(x, _)| x.dtype.size()))
        .max()
        .unwrap_or(1);
    let vector = 16 / widest;
    let aligned = inputs.iter().zip(access).filter(|(_, a)| **a == Access::Contiguous).all(|(x, _)| {
        x.buffer.offset.unsigned_abs() * x.dtype.size() % (x.dtype.size() * vector) == 0
    });
    if aligned { vector } else { 1 }
}

/// What identifies an elementwise kernel's code: its instructions, input dtypes, outputs, variant.
type KernelKey = (Vec<Inst>, Vec<Dtype>, Vec<usize>, Variant);

/// Elementwise kernels loaded so far.
static LOADED: nvrtc::Loaded<KernelKey> = nvrtc::Loaded::new();

/// The loaded kernel of `k` for `variant` on `gpu`, printed and built (or read from the disk
/// cache) the first time.
fn function(op: &str, gpu: &Gpu, k: &Kernel, variant: &Variant) -> Result<nvrtc::Function> {
    LOADED.get(op, gpu, key(k, variant), ENTRY, || source::elementwise(k, variant))
}

/// [`function`], or `None` while NVRTC builds it on another thread.
fn function_when_built(op: &str, gpu: &Gpu, k: &Kernel, variant: &Variant) -> Result<Option<nvrtc::Function>> {
    LOADED.get_when_built(op, gpu, key(k, variant), ENTRY, || source::elementwise(k, variant))
}

fn key(k: &Kernel, variant: &Variant) -> KernelKey {
    (k.insts.clone(), k.inputs.clone(), k.outputs.clone(), variant.clone())
}

/// The variant a compiled plan's kernel last ran as, and its loaded function, kept with the
/// kernel (in its [`crate::fused::Lowered::gpu`]): a plan calls the same variant again and again, and finding it
/// here skips the table's key copy and hash (a measurable part of a tiny compiled call).
struct LastLoaded(Mutex<Option<(usize, Variant, nvrtc::Function)>>);

/// [`function`] for a compiled plan's kernel, which keeps the last one it loaded.
fn compiled_function(op: &str, gpu: &Gpu, k: &Kernel, variant: &Variant) -> Result<nvrtc::Function> {
    let kept = k.lowered.gpu.get_or_init(|| Arc::new(LastLoaded(Mutex::new(None))) as Arc<dyn Any + Send + Sync>);
    let last = kept.downcast_ref::<LastLoaded>().expect("the GPU's slot holds what this function put there");
    if let Some((g, v, f)) = &*last.0.lock().unwrap() {
        if *g == gpu.ordinal && v == variant {
            return Ok(*f);
        }
    }
    let f = function(op, gpu, k, variant)?;
    *last.0.lock().unwrap() = Some((gpu.ordinal, variant.clone(), f));
    Ok(f)
}

/// An eager elementwise op as a one-instruction kernel: a load per input, then `op`.
pub fn one_op(name: &str, op: InstOp, inputs: &[Input], dtype: Dtype) -> Kernel {
    let element = |op, dtype| Inst { op, dtype, level: Level::Element, phase: 0 };
    let mut insts: Vec<Inst> = inputs.iter().enumerate().map(|(j, x)| element(InstOp::Load(j), x.dtype)).collect();
    insts.push(element(op, dtype));
    Kernel {
        name: name.to_string(),
        reduced: 0,
        inner: 0,
        inputs: inputs.iter().map(|x| x.dtype).collect(),
        outputs: vec![insts.len() - 1],
        insts,
        passes: 1,
        lowered: Default::default(),
    }
}

/// A row-major copy of `x` (what a reshape that strides cannot express needs).
pub fn contiguous(op: &str, gpu: &Gpu, stream: sys::CUstream, x: &Input) -> Result<Buffer> {
    let mut k = one_op("copy", InstOp::Load(0), std::slice::from_ref(x), x.dtype);
    k.insts.pop();
    k.outputs = vec![0];
    Ok(run(op, gpu, stream, &k, std::slice::from_ref(x), &x.shape)?.remove(0))
}
