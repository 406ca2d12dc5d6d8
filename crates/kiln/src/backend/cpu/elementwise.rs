//! Eager elementwise kernels (unary, binary, where, astype) over any strides.
//!
//! The output is row-major. It is split into chunks spread over the thread pool; inside a chunk,
//! inputs that are row-major with the output's shape are read in place, and others (broadcast,
//! transposed, sliced, reversed) are gathered tile by tile into L1-sized scratch, so every op runs
//! its contiguous loop from [`super::scalar`]. float16/bfloat16 are converted to float32 per tile.
//! An input whose storage nobody else can see, of the output's dtype and layout, is donated: the
//! output is written over it.

use super::parallel::{for_runs, BLOCK};
use super::scalar::{CastTo, Compute, Scalar};
use super::strided::{alloc, gather_range, run_layout};
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};
use crate::error::Result;
use crate::primitive::{BinaryOp, UnaryOp};
use crate::shape::{collapse_dims, numel, Shape, Strides};
use std::sync::Mutex;

/// Elements per scratch tile: three float32 tiles fit in a 32 KiB L1 cache.
pub const TILE: usize = 2048;

/// How one input is read for a range of output positions.
pub(super) enum Source {
    /// Row-major with the output's shape: read in place at `base + start`.
    Direct(usize),
    /// One element repeated.
    Splat(usize),
    /// Any other layout: gather through collapsed shape and strides.
    Strided(usize, Shape, Strides),
    /// Read with a stride other than 1 along the output's rows while the output is walked block
    /// by block (see [`for_runs`]), with affine strides over `(rows, width)`. Each block is
    /// gathered whole, walking the input along its own rows, and then served row by row: reading
    /// a transposed view column by column would touch a new cache line per element, and with
    /// power-of-two strides those lines all fall into the same cache set.
    Transposed { base: usize, rows: usize, width: usize, row_stride: isize, col_stride: isize },
}

/// Per-input, per-task scratch of [`Source::read`]: a gather tile, and the last block gathered by
/// a [`Source::Transposed`] input with the (row, column) of its corner. The block is allocated on
/// first use, so only transposed inputs pay for it.
#[derive(Default)]
pub(super) struct InputScratch {
    tile: Vec<u64>,
    block: Vec<u64>,
    block_at: Option<(usize, usize)>,
}

impl InputScratch {
    /// Scratch for tiles of up to `elements` elements of `element_size` bytes.
    pub(super) fn new(element_size: usize, elements: usize) -> InputScratch {
        InputScratch { tile: vec![0u64; (elements * element_size).div_ceil(8)], ..InputScratch::default() }
    }
}

/// Views scratch words as `n` elements of `T` (u64 storage is aligned for every element type).
pub(super) fn elements_of<T>(words: &mut [u64], n: usize) -> &mut [T] {
    debug_assert!(n * std::mem::size_of::<T>() <= words.len() * 8);
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut T, n) }
}

impl Source {
    /// How to read `input` broadcast to `shape`, whose strides for that shape are `strides`;
    /// `blocked` says the output is walked by blocks.
    pub(super) fn new<S>(input: &Input, shape: &[usize], strides: &[isize], blocked: bool) -> Source {
        let base = input.buffer.ptr::<S>() as usize;
        if input.is_contiguous_as(shape) {
            return Source::Direct(base);
        }
        if strides.iter().all(|&s| s == 0) {
            return Source::Splat(base);
        }
        let nd = shape.len();
        if blocked && strides[nd - 1].unsigned_abs() > 1 {
            let (rows_shape, row_strides) = collapse_dims(&shape[..nd - 1], &[&strides[..nd - 1]]);
            if rows_shape.len() <= 1 {
                let row_stride = row_strides[0].first().copied().unwrap_or(0);
                let width = shape[nd - 1];
                let rows = numel(shape) / width;
                return Source::Transposed { base, rows, width, row_stride, col_stride: strides[nd - 1] };
            }
        }
        let (s, st) = collapse_dims(shape, &[strides]);
        Source::Strided(base, s, st.into_iter().next().unwrap())
    }

    /// A pointer to `len` elements of this input for output positions `start..start+len`,
    /// gathering into `scratch` when needed.
    pub(super) unsafe fn read<S: Copy>(&self, start: usize, len: usize, scratch: &mut InputScratch) -> *const S {
        match self {
            Source::Direct(base) => (*base as *const S).add(start),
            Source::Splat(base) => {
                let tile = elements_of::<S>(&mut scratch.tile, len);
                tile.fill(*(*base as *const S));
                tile.as_ptr()
            }
            Source::Strided(base, s, st) => {
                // A range inside one contiguous run of the innermost axis (a broadcast row, a
                // slice's row) is read in place.
                if let (Some(&n), Some(1)) = (s.last(), st.last()) {
                    if n > 0 && start % n + len <= n {
                        return (*base as *const S).offset(element_offset(start, s, st));
                    }
                }
                let tile = elements_of::<S>(&mut scratch.tile, len);
                gather_range(*base as *const S, s, st, start, len, tile.as_mut_ptr());
                tile.as_ptr()
            }
            &Source::Transposed { base, rows, width, row_stride, col_stride } => {
                // Runs come from `for_runs` blocks: the corner is the run's position rounded down.
                let (r, c) = (start / width, start % width);
                let (r0, c0) = (r - r % BLOCK, c - c % BLOCK);
                if scratch.block.is_empty() {
                    scratch.block = vec![0u64; (BLOCK * BLOCK * std::mem::size_of::<S>()).div_ceil(8)];
                }
                let block = elements_of::<S>(&mut scratch.block, BLOCK * BLOCK);
                if scratch.block_at != Some((r0, c0)) {
                    let src = base as *const S;
                    let (nr, nc) = (BLOCK.min(rows - r0), BLOCK.min(width - c0));
                    for j in 0..nc {
                        let col = src.offset((c0 + j) as isize * col_stride + r0 as isize * row_stride);
                        // `i` walks the input's contiguous direction (row_stride is 1 for a transpose).
                        for i in 0..nr {
                            *block.get_unchecked_mut(i * BLOCK + j) = *col.offset(i as isize * row_stride);
                        }
                    }
                    scratch.block_at = Some((r0, c0));
                }
                debug_assert!(c - c0 + len <= BLOCK);
                block.as_ptr().add((r - r0) * BLOCK + (c - c0))
            }
        }
    }

    /// Asks the cache to start loading the elements a later [`Source::read`] of positions
    /// `start..start+len` will touch, for inputs read in place, so that memory streams in while
    /// the current tile computes: into L1 when `near` (the next tile), else into L2 (the next row
    /// of a reduction, read only after this row's later passes, which would evict it from L1).
    pub(super) fn prefetch<S>(&self, start: usize, len: usize, near: bool) {
        #[cfg(target_arch = "x86_64")]
        if let Source::Direct(base) = self {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
            let size = std::mem::size_of::<S>();
            let (from, to) = (base + start * size, base + (start + len) * size);
            // Safety: prefetching is a hint; it never faults, even past the end of the input.
            let mut line = from & !63;
            while line < to {
                unsafe {
                    if near {
                        _mm_prefetch(line as *const i8, _MM_HINT_T0)
                    } else {
                        _mm_prefetch(line as *const i8, _MM_HINT_T1)
                    }
                };
                line += 64;
            }
        }
    }

    fn is_direct(&self) -> bool {
        matches!(self, Source::Direct(_))
    }
}

/// The element offset, under strides `st`, of row-major position `pos` in shape `s`.
fn element_offset(mut pos: usize, s: &[usize], st: &[isize]) -> isize {
    let mut off = 0;
    for (&n, &stride) in s.iter().zip(st).rev() {
        off += (pos % n) as isize * stride;
        pos /= n;
    }
    off
}

/// The output buffer: a donated input of the same dtype and layout when one is offered, else new.
fn output(inputs: &[&Input], shape: &[usize], dtype: Dtype) -> Buffer {
    inputs
        .iter()
        .find(|i| i.donatable && i.dtype == dtype && i.is_contiguous_as(shape) && i.buffer.offset == 0)
        .map(|i| i.buffer.clone())
        .unwrap_or_else(|| alloc(shape, dtype))
}

/// Runs `kernel` over the output in tiles: `kernel(input pointers, output pointer, len)` in
/// compute types. `I` is the inputs' storage type, `O` the output's.
fn drive<I: Compute, O: Compute, const N: usize>(
    inputs: [&Input; N],
    shape: &[usize],
    out_dtype: Dtype,
    kernel: impl Fn([*const I::C; N], *mut O::C, usize) -> Result<()> + Sync,
) -> Result<Buffer> {
    let out = output(&inputs, shape, out_dtype);
    let strides: Vec<Strides> = inputs.iter().map(|i| i.strides_for(shape)).collect();
    let (rows, width, blocked) = run_layout(shape, &strides.iter().map(|s| s.as_slice()).collect::<Vec<_>>());
    let sources: Vec<Source> =
        inputs.iter().zip(&strides).map(|(i, s)| Source::new::<I>(i, shape, s, blocked)).collect();
    let all_direct = sources.iter().all(Source::is_direct) && !I::CONVERTS && !O::CONVERTS;
    let out_base = out.ptr::<O>() as usize;
    let error: Mutex<Option<crate::Error>> = Mutex::new(None);
    let scratch = || if all_direct { Scratch::direct(N) } else { Scratch::new::<I, O>(N) };
    for_runs(rows, width, blocked, scratch, |scratch, start, len| {
        let result = unsafe {
            if all_direct {
                // Storage and compute types coincide here, so the casts are identities.
                let ptrs: [*const I::C; N] =
                    std::array::from_fn(|k| sources[k].read::<I>(start, len, &mut scratch.inputs[k]) as *const I::C);
                kernel(ptrs, (out_base as *mut O).add(start) as *mut O::C, len)
            } else {
                run_tiles::<I, O, N>(&sources, start, len, out_base, &kernel, scratch)
            }
        };
        if let Err(e) = result {
            *error.lock().unwrap() = Some(e);
        }
    });
    match error.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Per-task buffers of [`run_tiles`], as raw words so one type serves every dtype: each input's
/// gather scratch, inputs converted to the compute type, and the output tile before conversion
/// to storage.
#[derive(Default)]
struct Scratch {
    inputs: Vec<InputScratch>,
    conv: Vec<Vec<u64>>,
    out: Vec<u64>,
}

impl Scratch {
    fn new<I: Compute, O: Compute>(inputs: usize) -> Scratch {
        let words = |size: usize| vec![0u64; (TILE * size).div_ceil(8)];
        Scratch {
            inputs: (0..inputs).map(|_| InputScratch::new(std::mem::size_of::<I>(), TILE)).collect(),
            conv: (0..if I::CONVERTS { inputs } else { 0 }).map(|_| words(std::mem::size_of::<I::C>())).collect(),
            out: if O::CONVERTS { words(std::mem::size_of::<O::C>()) } else { Vec::new() },
        }
    }

    /// Empty buffers for drives whose inputs are all read in place.
    fn direct(inputs: usize) -> Scratch {
        Scratch { inputs: (0..inputs).map(|_| InputScratch::default()).collect(), ..Scratch::default() }
    }
}

unsafe fn run_tiles<I: Compute, O: Compute, const N: usize>(
    sources: &[Source],
    start: usize,
    len: usize,
    out_base: usize,
    kernel: &impl Fn([*const I::C; N], *mut O::C, usize) -> Result<()>,
    scratch: &mut Scratch,
) -> Result<()> {
    let mut pos = start;
    while pos < start + len {
        let n = TILE.min(start + len - pos);
        let mut ptrs: [*const I::C; N] = [std::ptr::null(); N];
        for k in 0..N {
            let p = sources[k].read::<I>(pos, n, &mut scratch.inputs[k]);
            ptrs[k] = if I::CONVERTS {
                let conv = elements_of::<I::C>(&mut scratch.conv[k], TILE);
                I::load(p, conv.as_mut_ptr(), n);
                conv.as_ptr()
            } else {
                p as *const I::C
            };
        }
        let dst = (out_base as *mut O).add(pos);
        if O::CONVERTS {
            let out_tile = elements_of::<O::C>(&mut scratch.out, TILE);
            kernel(ptrs, out_tile.as_mut_ptr(), n)?;
            O::store(out_tile.as_ptr(), dst, n);
        } else {
            kernel(ptrs, dst as *mut O::C, n)?;
        }
        pos += n;
    }
    Ok(())
}

/// An elementwise op of one input.
pub fn unary(op: UnaryOp, x: &Input, shape: &[usize], out_dtype: Dtype) -> Result<Buffer> {
    if op.is_predicate() {
        crate::with_dtype!(x.dtype, T => drive::<T, bool, 1>([x], shape, out_dtype, |[a], o, n| unsafe {
            <T as Compute>::C::predicate(op, a, o, n)
        }))
    } else if out_dtype != x.dtype {
        // abs, real and imag of complex64: float32 results.
        drive::<crate::Complex64, f32, 1>([x], shape, out_dtype, |[a], o, n| unsafe { super::complex::to_real(op, a, o, n) })
    } else {
        crate::with_dtype!(x.dtype, T => drive::<T, T, 1>([x], shape, out_dtype, |[a], o, n| unsafe {
            <T as Compute>::C::unary(op, a, o, n)
        }))
    }
}

/// An elementwise op of two inputs of one dtype, broadcast to `shape`.
pub fn binary(op: BinaryOp, a: &Input, b: &Input, shape: &[usize], out_dtype: Dtype) -> Result<Buffer> {
    if op.is_predicate() {
        crate::with_dtype!(a.dtype, T => drive::<T, bool, 2>([a, b], shape, out_dtype, |[x, y], o, n| unsafe {
            <T as Compute>::C::compare(op, x, y, o, n)
        }))
    } else {
        crate::with_dtype!(a.dtype, T => drive::<T, T, 2>([a, b], shape, out_dtype, |[x, y], o, n| unsafe {
            <T as Compute>::C::binary(op, x, y, o, n)
        }))
    }
}

/// `where(cond, a, b)` broadcast to `shape`.
pub fn select(cond: &Input, a: &Input, b: &Input, shape: &[usize]) -> Result<Buffer> {
    // The condition is converted to the value dtype's storage first, so one driver reads all three.
    let cond_as = astype(cond, a.dtype)?;
    let cond_in = Input { shape: cond.shape.clone(), dtype: a.dtype, buffer: cond_as, donatable: false };
    crate::with_dtype!(a.dtype, T => drive::<T, T, 3>([&cond_in, a, b], shape, a.dtype, |[c, x, y], o, n| unsafe {
        let zero = <<T as Compute>::C as Element>::from_f64(0.0);
        super::simd::map3(c, x, y, o, n, |c, x, y| if c != zero { x } else { y });
        Ok(())
    }))
}

/// A row-major copy of `x` read as `shape` (broadcasting allowed). Elements are copied as
/// unsigned integers of their width, so no dtype pays for a conversion, through the same walk
/// (blocks for transposed reads) as every elementwise op.
pub fn copy_to_row_major(x: &Input, shape: &[usize]) -> Buffer {
    let as_bits = x.as_bits();
    let bits = as_bits.dtype;
    let copied = crate::with_dtype!(bits, T => drive::<T, T, 1>([&as_bits], shape, bits, |[a], o, n| unsafe {
        std::ptr::copy(a, o, n);
        Ok(())
    }));
    copied.expect("copying cannot fail")
}

/// Converts to `dtype` (floats to integers truncate toward zero and saturate; NaN gives 0).
pub fn astype(x: &Input, dtype: Dtype) -> Result<Buffer> {
    let shape = x.shape.clone();
    // float64 to a half type must round once: going through the float32 compute type would round
    // twice and can land on a tie that then rounds the wrong way.
    match (x.dtype, dtype) {
        (Dtype::F64, Dtype::F16) => return round_once::<half::f16>(x, &shape),
        (Dtype::F64, Dtype::BF16) => return round_once::<half::bf16>(x, &shape),
        _ => {}
    }
    crate::with_dtype!(x.dtype, S => crate::with_dtype!(dtype, D => {
        drive::<S, D, 1>([x], &shape, dtype, |[a], o, n| unsafe {
            super::simd::map1(a, o, n, |v: <S as Compute>::C| -> <D as Compute>::C { v.cast() });
            Ok(())
        })
    }))
}

fn round_once<H: Compute>(x: &Input, shape: &[usize]) -> Result<Buffer> {
    let out = alloc(shape, H::DTYPE);
    let source = Source::new::<f64>(x, shape, &x.strides_for(shape), false);
    let base = out.ptr::<H>() as usize;
    let scratch = || if source.is_direct() { InputScratch::default() } else { InputScratch::new(8, TILE) };
    for_runs(1, numel(shape), false, scratch, |scratch, start, len| unsafe {
        let mut pos = start;
        while pos < start + len {
            let n = if source.is_direct() { len } else { TILE.min(start + len - pos) };
            let src = source.read::<f64>(pos, n, scratch);
            super::simd::map1(src, (base as *mut H).add(pos), n, H::from_f64);
            pos += n;
        }
    });
    Ok(out)
}
