//! Convolution on the CPU as im2col fused with the GEMM: the output rows are cut into blocks, and
//! each block's patches (one row of `taps * C_in / groups` inputs per output position) are
//! gathered into a buffer that stays in cache and multiplied at once by the weight. The patch
//! matrix of the whole convolution, `taps` times the input's size, is never written to memory,
//! which is what made the composition of slices and one big matmul run at half the GEMM's speed.
//! (A convolution with too few output rows to give every thread a block is one block, gathered
//! by all threads and multiplied by a GEMM they share.)
//!
//! Layouts are mlx's, row-major: input `(N, spatial..., C_in)`, weight `(C_out, kernel...,
//! C_in / groups)`, output `(N, out..., C_out)`.

use super::matmul::GemmElement;
use gemm::Parallelism;
use rayon::prelude::*;

/// Everything about one convolution but its data: the sizes and the per-axis settings, with
/// padding and dilation already resolved (see `ops::conv::ConvParams`).
#[derive(Clone, Debug)]
pub struct ConvGeometry {
    /// Batch size N.
    pub batch: usize,
    /// The input's spatial sizes.
    pub input: Vec<usize>,
    /// The output's spatial sizes.
    pub output: Vec<usize>,
    /// The kernel's spatial sizes.
    pub kernel: Vec<usize>,
    /// Step between windows, per axis.
    pub stride: Vec<usize>,
    /// Zeros before each axis of the dilated input (negative: rows cropped).
    pub padding_lo: Vec<i64>,
    /// Spacing between kernel taps, per axis.
    pub kernel_dilation: Vec<usize>,
    /// Spacing between input elements, per axis.
    pub input_dilation: Vec<usize>,
    /// Input channels C_in.
    pub channels_in: usize,
    /// Output channels C_out.
    pub channels_out: usize,
    /// Channel groups.
    pub groups: usize,
    /// Whether the kernel is applied flipped along its spatial axes.
    pub flip: bool,
}

/// The element types the kernels run in (float32 and float64).
pub trait Arith: GemmElement + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}

impl<T: GemmElement + std::ops::Add<Output = T> + std::ops::Mul<Output = T>> Arith for T {}

/// The patch buffer a block aims at: within a core's L2 cache (measured on a 2-core Zen 4, 64x3x3
/// channels: 512 KiB ran 5-10% faster than 128 or 256 KiB, and as fast as 1 or 2 MiB).
const PATCH_BYTES: usize = 512 << 10;
/// The fewest rows a block has, so that packing the weight is shared by enough rows.
const MIN_BLOCK_ROWS: usize = 64;
/// The most memory the per-thread partial sums of a weight gradient take together.
const PARTIALS_BYTES: usize = 64 << 20;

impl ConvGeometry {
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    fn rows(&self) -> usize {
        self.batch * self.output.iter().product::<usize>()
    }

    /// Panics unless the slices handed to a kernel have the lengths this geometry implies (the
    /// GEMMs read and write through raw pointers): the input, then the weight-sized and the
    /// output-sized slice.
    fn check_lengths(&self, input: usize, weight: usize, output: usize) {
        let spatial = |dims: &[usize]| dims.iter().product::<usize>();
        assert_eq!(input, self.batch * spatial(&self.input) * self.channels_in, "conv: input length");
        assert_eq!(weight, self.channels_out * self.taps() * self.channels_in / self.groups, "conv: weight length");
        assert_eq!(output, self.rows() * self.channels_out, "conv: output length");
    }

    /// Whether every group reads one input channel (a depthwise convolution), which runs as a
    /// direct loop rather than one single-column GEMM per group.
    fn is_depthwise(&self) -> bool {
        self.groups > 1 && self.channels_in == self.groups
    }

    /// Whether each patch row is the input row at the same position (a 1x1 kernel that neither
    /// strides, pads nor dilates, one group): the input is then the patch matrix itself.
    fn patches_are_input(&self) -> bool {
        self.taps() == 1
            && self.groups == 1
            && self.input == self.output
            && self.stride.iter().all(|&s| s == 1)
            && self.input_dilation.iter().all(|&s| s == 1)
            && self.padding_lo.iter().all(|&p| p == 0)
    }

    /// For each axis, the input index read by output position `o` at kernel tap `k` (in the
    /// weight's order), as `table[o * kernel + k]`; `None` where it falls on padding or between
    /// dilated elements.
    fn source_tables(&self) -> Vec<Vec<Option<usize>>> {
        (0..self.input.len())
            .map(|a| {
                let (kernel, dil) = (self.kernel[a], self.input_dilation[a] as i64);
                let mut table = Vec::with_capacity(self.output[a] * kernel);
                for o in 0..self.output[a] {
                    for k in 0..kernel {
                        let tap = if self.flip { kernel - 1 - k } else { k };
                        let p = (o * self.stride[a] + tap * self.kernel_dilation[a]) as i64 - self.padding_lo[a];
                        let source = (p >= 0 && p % dil == 0 && p / dil < self.input[a] as i64).then_some((p / dil) as usize);
                        table.push(source);
                    }
                }
                table
            })
            .collect()
    }
}

/// How the output rows are cut into blocks and shared between the threads.
struct Blocking {
    /// Rows per block.
    rows: usize,
    /// How many blocks.
    count: usize,
    /// Whether the blocks run one after another, each GEMM split between the threads (too few
    /// blocks to share out), rather than in parallel with single-threaded GEMMs.
    gemm_splits: bool,
}

impl Blocking {
    /// Blocks for `rows` output rows whose patches have `depth` values of `T`: cache-sized ones,
    /// smaller ones when that leaves threads idle, and one shared block when even blocks of
    /// [`MIN_BLOCK_ROWS`] would.
    fn new<T>(rows: usize, depth: usize) -> Blocking {
        let threads = rayon::current_num_threads();
        let mut block = (PATCH_BYTES / (depth * std::mem::size_of::<T>())).max(MIN_BLOCK_ROWS).min(rows);
        if threads > 1 && rows.div_ceil(block) < threads {
            let shared = rows.div_ceil(threads);
            if shared < MIN_BLOCK_ROWS {
                return Blocking { rows, count: 1, gemm_splits: true };
            }
            block = shared;
        }
        Blocking { rows: block, count: rows.div_ceil(block), gemm_splits: false }
    }

    /// The GEMMs' own parallelism.
    fn inner(&self) -> Parallelism {
        if self.gemm_splits {
            Parallelism::Rayon(rayon::current_num_threads())
        } else {
            Parallelism::None
        }
    }

    /// Block `b`'s first row and row count, of `total` rows.
    fn range(&self, b: usize, total: usize) -> (usize, usize) {
        let first = b * self.rows;
        (first, self.rows.min(total - first))
    }
}

/// `out = conv(x, w)` for row-major slices of the layouts above.
pub fn conv_forward<T: Arith>(x: &[T], w: &[T], out: &mut [T], geo: &ConvGeometry) {
    geo.check_lengths(x.len(), w.len(), out.len());
    let rows = geo.rows();
    if rows == 0 || geo.channels_out == 0 {
        return;
    }
    let depth = geo.taps() * geo.channels_in / geo.groups;
    if depth == 0 {
        out.fill(T::default());
        return;
    }
    if geo.is_depthwise() {
        return depthwise_forward(x, w, out, geo);
    }
    let blocking = Blocking::new::<T>(rows, depth);
    let tables = geo.source_tables();
    let out_ptr = out.as_mut_ptr() as usize;
    let (group_in, group_out) = (geo.channels_in / geo.groups, geo.channels_out / geo.groups);
    let run = |patches: &mut Vec<T>, b: usize| {
        let (first, count) = blocking.range(b, rows);
        for g in 0..geo.groups {
            let (lhs, lhs_row) = block_patches(x, geo, &tables, (first, count), g * group_in, patches, blocking.gemm_splits);
            let weight = w[g * group_out * depth..].as_ptr();
            // Safety: blocks write disjoint rows of `out`; every pointer covers the extent its
            // strides reach (count x group_out outputs, count x depth patches, group_out x depth
            // weights).
            unsafe {
                let out = (out_ptr as *mut T).add(first * geo.channels_out + g * group_out);
                gemm::gemm(
                    count, group_out, depth,
                    out as *mut T::G, 1, geo.channels_out as isize,
                    false,
                    lhs as *const T::G, 1, lhs_row as isize,
                    weight as *const T::G, depth as isize, 1,
                    T::ZERO_ONE.0, T::ZERO_ONE.1,
                    false, false, false,
                    blocking.inner(),
                );
            }
        }
    };
    if blocking.gemm_splits || rayon::current_num_threads() == 1 {
        let mut patches = Vec::new();
        (0..blocking.count).for_each(|b| run(&mut patches, b));
    } else {
        (0..blocking.count).into_par_iter().for_each_init(Vec::new, run);
    }
}

/// `dw = Σ over output rows of cotangentᵀ · patches`, per group: the gradient of [`conv_forward`]
/// with respect to its weight, for the cotangent `cot` of its output. Each of a few parts (one
/// per thread, fewer where the partial sums would take more than [`PARTIALS_BYTES`]) sums a
/// contiguous run of blocks into its own accumulator, and the accumulators are added in part
/// order: the result depends on the thread count, never on scheduling.
pub fn conv_weight_grad<T: Arith>(x: &[T], cot: &[T], dw: &mut [T], geo: &ConvGeometry) {
    geo.check_lengths(x.len(), dw.len(), cot.len());
    dw.fill(T::default());
    let rows = geo.rows();
    let depth = geo.taps() * geo.channels_in / geo.groups;
    if rows == 0 || depth == 0 || geo.channels_out == 0 {
        return;
    }
    if geo.is_depthwise() {
        return depthwise_weight_grad(x, cot, dw, geo);
    }
    let blocking = Blocking::new::<T>(rows, depth);
    let tables = geo.source_tables();
    let (group_in, group_out) = (geo.channels_in / geo.groups, geo.channels_out / geo.groups);
    let most_parts = (PARTIALS_BYTES / std::mem::size_of_val(dw)).max(1);
    let parts = if blocking.gemm_splits { 1 } else { rayon::current_num_threads().min(blocking.count).min(most_parts) };
    let sum_part = |part: usize| {
        let mut acc = vec![T::default(); dw.len()];
        let mut patches = Vec::new();
        for b in (part * blocking.count / parts)..((part + 1) * blocking.count / parts) {
            let (first, count) = blocking.range(b, rows);
            for g in 0..geo.groups {
                let (rhs, rhs_row) =
                    block_patches(x, geo, &tables, (first, count), g * group_in, &mut patches, blocking.gemm_splits);
                let lhs = cot[first * geo.channels_out + g * group_out..].as_ptr();
                // Safety: acc[g] is group_out x depth; the cotangent's block is count rows of
                // channels_out; the patches count rows of rhs_row.
                unsafe {
                    gemm::gemm(
                        group_out, depth, count,
                        acc[g * group_out * depth..].as_mut_ptr() as *mut T::G, 1, depth as isize,
                        true,
                        lhs as *const T::G, geo.channels_out as isize, 1,
                        rhs as *const T::G, 1, rhs_row as isize,
                        T::ZERO_ONE.1, T::ZERO_ONE.1,
                        false, false, false,
                        blocking.inner(),
                    );
                }
            }
        }
        acc
    };
    let partials: Vec<Vec<T>> = (0..parts).into_par_iter().map(sum_part).collect();
    const CHUNK: usize = 1 << 12;
    dw.par_chunks_mut(CHUNK).enumerate().for_each(|(i, chunk)| {
        for partial in &partials {
            for (d, &p) in chunk.iter_mut().zip(&partial[i * CHUNK..]) {
                *d = *d + p;
            }
        }
    });
}

/// The patch matrix of output rows `[first, first + count)` for the group whose input channels
/// start at `channel0`, as a pointer and its row stride: the input itself when its rows are the
/// patches, else gathered into `patches` (by every thread, in runs of rows, when `shared`).
fn block_patches<T: GemmElement>(
    x: &[T],
    geo: &ConvGeometry,
    tables: &[Vec<Option<usize>>],
    (first, count): (usize, usize),
    channel0: usize,
    patches: &mut Vec<T>,
    shared: bool,
) -> (*const T, usize) {
    if geo.patches_are_input() {
        return (x[first * geo.channels_in..].as_ptr(), geo.channels_in);
    }
    let depth = geo.taps() * geo.channels_in / geo.groups;
    patches.resize(count * depth, T::default());
    if shared {
        let run = count.div_ceil(rayon::current_num_threads()).max(1);
        patches.par_chunks_mut(run * depth).enumerate().for_each(|(i, part)| {
            gather_patches(x, geo, tables, (first + i * run, part.len() / depth), channel0, part)
        });
    } else {
        gather_patches(x, geo, tables, (first, count), channel0, patches);
    }
    (patches.as_ptr(), depth)
}

/// Fills `patches` (`count` rows of `taps * group_in`) with the inputs that output rows
/// `[first, first + count)` see, channels `[channel0, channel0 + group_in)`; zeros where a tap
/// falls outside the input.
fn gather_patches<T: GemmElement>(
    x: &[T],
    geo: &ConvGeometry,
    tables: &[Vec<Option<usize>>],
    (first, count): (usize, usize),
    channel0: usize,
    patches: &mut [T],
) {
    let group_in = geo.channels_in / geo.groups;
    let mut walker = TapWalker::new(geo, tables);
    for (r, row) in patches.chunks_exact_mut(geo.taps() * group_in).take(count).enumerate() {
        for (dst, offset) in row.chunks_exact_mut(group_in).zip(walker.offsets(first + r)) {
            match offset {
                Some(o) => dst.copy_from_slice(&x[o + channel0..o + channel0 + group_in]),
                None => dst.fill(T::default()),
            }
        }
    }
}

/// Finds, for one output row, where each kernel tap reads the input.
struct TapWalker<'a> {
    geo: &'a ConvGeometry,
    tables: &'a [Vec<Option<usize>>],
    /// Element strides of the input's spatial axes, and of its batch axis.
    strides: Vec<usize>,
    batch_stride: usize,
    /// Output positions per batch element.
    positions: usize,
    /// Per tap of the current row: the element offset of input channel 0 at the position the
    /// tap reads (`None` where it falls on padding or between dilated elements).
    offsets: Vec<Option<usize>>,
}

impl<'a> TapWalker<'a> {
    fn new(geo: &'a ConvGeometry, tables: &'a [Vec<Option<usize>>]) -> TapWalker<'a> {
        let d = geo.input.len();
        let mut strides = vec![geo.channels_in; d];
        for a in (0..d.saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * geo.input[a + 1];
        }
        let batch_stride = strides.first().map_or(geo.channels_in, |s| s * geo.input[0]);
        let positions = geo.output.iter().product();
        TapWalker { geo, tables, strides, batch_stride, positions, offsets: vec![None; geo.taps()] }
    }

    /// The offsets of every tap of output row `index`, in the weight's order (last axis
    /// fastest): built axis by axis, each tap of the axes so far spread over the next axis's.
    fn offsets(&mut self, index: usize) -> &[Option<usize>] {
        let geo = self.geo;
        let (n, mut rest) = (index / self.positions, index % self.positions);
        let mut divisor = self.positions;
        self.offsets[0] = Some(n * self.batch_stride);
        let mut len = 1;
        for (a, table) in self.tables.iter().enumerate() {
            divisor /= geo.output[a];
            let position = rest / divisor;
            rest %= divisor;
            let (k, taps) = (geo.kernel[a], &table[position * geo.kernel[a]..(position + 1) * geo.kernel[a]]);
            // From the back, so that each entry is read before its slots are written.
            for i in (0..len).rev() {
                let base = self.offsets[i];
                for j in (0..k).rev() {
                    self.offsets[i * k + j] = match (base, taps[j]) {
                        (Some(b), Some(source)) => Some(b + source * self.strides[a]),
                        _ => None,
                    };
                }
            }
            len *= k;
        }
        &self.offsets
    }
}

/// Output rows per task of the depthwise loops.
const DEPTHWISE_ROWS: usize = 256;

/// A convolution whose groups each read one input channel (depthwise, `C_out / groups` outputs
/// per channel), as a direct loop: per output row, each tap adds input times weight across the
/// channels. The GEMM route would run one product per group with a single column.
fn depthwise_forward<T: Arith>(x: &[T], w: &[T], out: &mut [T], geo: &ConvGeometry) {
    let (taps, c_out) = (geo.taps(), geo.channels_out);
    let per_channel = c_out / geo.groups;
    // The weight as (taps, C_out), so that a tap's weights are contiguous.
    let mut by_tap = vec![T::default(); taps * c_out];
    for co in 0..c_out {
        for t in 0..taps {
            by_tap[t * c_out + co] = w[co * taps + t];
        }
    }
    let tables = geo.source_tables();
    out.par_chunks_mut(c_out * DEPTHWISE_ROWS).enumerate().for_each(|(b, chunk)| {
        let mut walker = TapWalker::new(geo, &tables);
        for (r, row) in chunk.chunks_exact_mut(c_out).enumerate() {
            row.fill(T::default());
            for (t, offset) in walker.offsets(b * DEPTHWISE_ROWS + r).iter().enumerate() {
                if let Some(o) = *offset {
                    multiply_add(row, &x[o..o + geo.channels_in], &by_tap[t * c_out..(t + 1) * c_out], per_channel);
                }
            }
        }
    });
}

/// [`depthwise_forward`]'s weight gradient: per part of the rows, each tap's sums of cotangent
/// times input, added in part order.
fn depthwise_weight_grad<T: Arith>(x: &[T], cot: &[T], dw: &mut [T], geo: &ConvGeometry) {
    let (taps, c_out, rows) = (geo.taps(), geo.channels_out, geo.rows());
    let per_channel = c_out / geo.groups;
    let tables = geo.source_tables();
    let parts = rayon::current_num_threads().min(rows.div_ceil(DEPTHWISE_ROWS)).max(1);
    let partials: Vec<Vec<T>> = (0..parts)
        .into_par_iter()
        .map(|part| {
            let mut by_tap = vec![T::default(); taps * c_out];
            let mut walker = TapWalker::new(geo, &tables);
            for row in (part * rows / parts)..((part + 1) * rows / parts) {
                let cot_row = &cot[row * c_out..(row + 1) * c_out];
                for (t, offset) in walker.offsets(row).iter().enumerate() {
                    if let Some(o) = *offset {
                        multiply_add(&mut by_tap[t * c_out..(t + 1) * c_out], &x[o..o + geo.channels_in], cot_row, per_channel);
                    }
                }
            }
            by_tap
        })
        .collect();
    for co in 0..c_out {
        for t in 0..taps {
            dw[co * taps + t] = partials.iter().fold(T::default(), |sum, p| sum + p[t * c_out + co]);
        }
    }
}

/// `acc[co] += input[co / per_channel] * weight[co]` for every output channel `co`.
fn multiply_add<T: Arith>(acc: &mut [T], input: &[T], weight: &[T], per_channel: usize) {
    if per_channel == 1 {
        for ((a, &v), &k) in acc.iter_mut().zip(input).zip(weight) {
            *a = *a + v * k;
        }
    } else {
        for (co, (a, &k)) in acc.iter_mut().zip(weight).enumerate() {
            *a = *a + input[co / per_channel] * k;
        }
    }
}
