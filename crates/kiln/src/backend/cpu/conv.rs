//! Convolution on the CPU as im2col fused with the GEMM: the output rows are cut into blocks, and
//! each block's patches (one row of `taps * C_in / groups` inputs per output position) are
//! gathered into a buffer that stays in cache and multiplied at once by the weight. The patch
//! matrix of the whole convolution, `taps` times the input's size, is never written to memory,
//! which is what made the composition of slices and one big matmul run at half the GEMM's speed.
//!
//! Layouts are mlx's, row-major: input `(N, spatial..., C_in)`, weight `(C_out, kernel...,
//! C_in / groups)`, output `(N, out..., C_out)`.

use super::matmul::GemmElement;
use gemm::Parallelism;
use rayon::prelude::*;

/// Everything about one convolution but its data: the sizes and the per-axis settings, with
/// padding and dilation already resolved (see `ops::conv::ConvParams`).
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// The patch buffer a block aims at: within a core's L2 cache (measured on a 2-core Zen 4, 64x3x3
/// channels: 512 KiB ran 5-10% faster than 128 or 256 KiB, and as fast as 1 or 2 MiB).
const PATCH_BYTES: usize = 512 << 10;
/// The fewest rows a block has, so that packing the weight is shared by enough rows.
const MIN_BLOCK_ROWS: usize = 64;

impl ConvGeometry {
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    fn rows(&self) -> usize {
        self.batch * self.output.iter().product::<usize>()
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
    /// Blocks for `rows` output rows whose patches have `depth` values of `T`.
    fn new<T>(rows: usize, depth: usize) -> Blocking {
        let threads = rayon::current_num_threads();
        let block = (PATCH_BYTES / (depth * std::mem::size_of::<T>())).max(MIN_BLOCK_ROWS).min(rows);
        if threads > 1 && rows.div_ceil(block) < threads {
            Blocking { rows, count: 1, gemm_splits: true }
        } else {
            Blocking { rows: block, count: rows.div_ceil(block), gemm_splits: false }
        }
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
pub fn conv_forward<T: GemmElement>(x: &[T], w: &[T], out: &mut [T], geo: &ConvGeometry) {
    let rows = geo.rows();
    if rows == 0 || geo.channels_out == 0 {
        return;
    }
    let depth = geo.taps() * geo.channels_in / geo.groups;
    if depth == 0 {
        out.fill(T::default());
        return;
    }
    let blocking = Blocking::new::<T>(rows, depth);
    let tables = geo.source_tables();
    let out_ptr = out.as_mut_ptr() as usize;
    let (group_in, group_out) = (geo.channels_in / geo.groups, geo.channels_out / geo.groups);
    let run = |patches: &mut Vec<T>, b: usize| {
        let (first, count) = blocking.range(b, rows);
        for g in 0..geo.groups {
            let (lhs, lhs_row) = block_patches(x, geo, &tables, (first, count), g * group_in, patches);
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
/// with respect to its weight, for the cotangent `cot` of its output. Each thread sums a
/// contiguous run of blocks into its own accumulator; the accumulators are added in thread order,
/// so the result does not depend on scheduling.
pub fn conv_weight_grad<T: GemmElement + std::ops::Add<Output = T>>(x: &[T], cot: &[T], dw: &mut [T], geo: &ConvGeometry) {
    dw.fill(T::default());
    let rows = geo.rows();
    let depth = geo.taps() * geo.channels_in / geo.groups;
    if rows == 0 || depth == 0 || geo.channels_out == 0 {
        return;
    }
    let blocking = Blocking::new::<T>(rows, depth);
    let tables = geo.source_tables();
    let (group_in, group_out) = (geo.channels_in / geo.groups, geo.channels_out / geo.groups);
    let parts = if blocking.gemm_splits { 1 } else { rayon::current_num_threads().min(blocking.count) };
    let sum_part = |part: usize| {
        let mut acc = vec![T::default(); dw.len()];
        let mut patches = Vec::new();
        for b in (part * blocking.count / parts)..((part + 1) * blocking.count / parts) {
            let (first, count) = blocking.range(b, rows);
            for g in 0..geo.groups {
                let (rhs, rhs_row) = block_patches(x, geo, &tables, (first, count), g * group_in, &mut patches);
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
    for partial in partials {
        for (d, p) in dw.iter_mut().zip(partial) {
            *d = *d + p;
        }
    }
}

/// The patch matrix of output rows `[first, first + count)` for the group whose input channels
/// start at `channel0`, as a pointer and its row stride: the input itself when its rows are the
/// patches, else gathered into `patches`.
fn block_patches<T: GemmElement>(
    x: &[T],
    geo: &ConvGeometry,
    tables: &[Vec<Option<usize>>],
    (first, count): (usize, usize),
    channel0: usize,
    patches: &mut Vec<T>,
) -> (*const T, usize) {
    if geo.patches_are_input() {
        return (x[first * geo.channels_in..].as_ptr(), geo.channels_in);
    }
    let depth = geo.taps() * geo.channels_in / geo.groups;
    patches.resize(count * depth, T::default());
    gather_patches(x, geo, tables, (first, count), channel0, patches);
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
    let d = geo.input.len();
    let group_in = geo.channels_in / geo.groups;
    let taps = geo.taps();
    // Element strides of the input's spatial axes and its batch axis.
    let mut in_strides = vec![geo.channels_in; d];
    for a in (0..d.saturating_sub(1)).rev() {
        in_strides[a] = in_strides[a + 1] * geo.input[a + 1];
    }
    let batch_stride = in_strides.first().map_or(geo.channels_in, |s| s * geo.input[0]);
    let positions: usize = geo.output.iter().product();
    let (mut tap, mut out_pos) = (vec![0usize; d], vec![0usize; d]);
    for (r, row) in patches.chunks_exact_mut(taps * group_in).take(count).enumerate() {
        let index = first + r;
        let (n, mut rest) = (index / positions, index % positions);
        for a in (0..d).rev() {
            out_pos[a] = rest % geo.output[a];
            rest /= geo.output[a];
        }
        tap.fill(0);
        for dst in row.chunks_exact_mut(group_in) {
            let mut offset = Some(n * batch_stride + channel0);
            for a in 0..d {
                offset = match (offset, tables[a][out_pos[a] * geo.kernel[a] + tap[a]]) {
                    (Some(o), Some(i)) => Some(o + i * in_strides[a]),
                    _ => None,
                };
            }
            match offset {
                Some(o) => dst.copy_from_slice(&x[o..o + group_in]),
                None => dst.fill(T::default()),
            }
            // The next tap, last axis fastest (the weight's order).
            for a in (0..d).rev() {
                tap[a] += 1;
                if tap[a] < geo.kernel[a] {
                    break;
                }
                tap[a] = 0;
            }
        }
    }
}
