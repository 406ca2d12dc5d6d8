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
    let threads = rayon::current_num_threads();
    let mut block = (PATCH_BYTES / (depth * std::mem::size_of::<T>())).max(MIN_BLOCK_ROWS).min(rows);
    // With too few blocks to share between the threads, one block split by the GEMM itself.
    let gemm_splits = threads > 1 && rows.div_ceil(block) < threads;
    if gemm_splits {
        block = rows;
    }
    let inner = if gemm_splits { Parallelism::Rayon(threads) } else { Parallelism::None };
    let tables = geo.source_tables();
    let out_ptr = out.as_mut_ptr() as usize;
    let run = |patches: &mut Vec<T>, first: usize| {
        let count = block.min(rows - first);
        // Safety: blocks write disjoint rows of `out`.
        let out = unsafe { (out_ptr as *mut T).add(first * geo.channels_out) };
        multiply_block(x, w, out, geo, &tables, (first, count), patches, inner);
    };
    if !gemm_splits && threads > 1 {
        (0..rows.div_ceil(block)).into_par_iter().for_each_init(Vec::new, |patches, b| run(patches, b * block));
    } else {
        let mut patches = Vec::new();
        (0..rows.div_ceil(block)).for_each(|b| run(&mut patches, b * block));
    }
}

/// The output rows `[first, first + count)`, every group: gather the block's patches (unless the
/// input is the patch matrix), then one GEMM per group into the output's columns of the group.
#[allow(clippy::too_many_arguments)]
fn multiply_block<T: GemmElement>(
    x: &[T],
    w: &[T],
    out: *mut T,
    geo: &ConvGeometry,
    tables: &[Vec<Option<usize>>],
    (first, count): (usize, usize),
    patches: &mut Vec<T>,
    parallelism: Parallelism,
) {
    let (group_in, group_out) = (geo.channels_in / geo.groups, geo.channels_out / geo.groups);
    let depth = geo.taps() * group_in;
    for g in 0..geo.groups {
        let lhs = if geo.patches_are_input() {
            x[first * geo.channels_in..].as_ptr()
        } else {
            patches.resize(count * depth, T::default());
            gather_patches(x, geo, tables, (first, count), g * group_in, patches);
            patches.as_ptr()
        };
        let lhs_row = if geo.patches_are_input() { geo.channels_in } else { depth };
        let weight = w[g * group_out * depth..].as_ptr();
        // Safety: every pointer covers the extent its strides reach (count x group_out output
        // entries, count x depth patch entries, group_out x depth weights).
        unsafe {
            gemm::gemm(
                count, group_out, depth,
                out.add(g * group_out) as *mut T::G, 1, geo.channels_out as isize,
                false,
                lhs as *const T::G, 1, lhs_row as isize,
                weight as *const T::G, depth as isize, 1,
                T::ZERO_ONE.0, T::ZERO_ONE.1,
                false, false, false,
                parallelism,
            );
        }
    }
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
