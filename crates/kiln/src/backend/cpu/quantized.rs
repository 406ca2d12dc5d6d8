//! Quantized matrix products on the CPU, in float32. The quantized matrix (R rows of C values,
//! each row packed into words and scaled per group) is dequantized a block at a time into a
//! buffer that stays in cache, and each block is multiplied at once (by the `gemm` crate, or by
//! dot products for a few rows of `x`). The float matrix never reaches memory and the packed
//! words are read once, which is what made dequantize-then-matmul 20 to 100 times slower.
//!
//! - `transpose` (`x @ wᵀ`, x of C columns): blocks of whole rows, one output column each,
//!   spread over the threads.
//! - not `transpose` (`x @ w`, x of R columns): the output's columns are cut into one part per
//!   thread (whole groups), and each part runs down the rows in blocks, adding each block's
//!   product into its own columns. The blocks' height follows the parts' width, so the rounding
//!   of a sum depends on the thread count, never on scheduling.
//! - one row of x with codes of 2, 4 or 8 bits: no buffer; each row of words decodes straight
//!   into running sums (`decoded_matvec`). Its sums are grouped differently from the blocked
//!   path's, so a row's result may differ in the last bits from the same row inside a batch.

use super::simd::with_widest_isa;
use gemm::Parallelism;
use rayon::prelude::*;

/// The dequantized buffer a block aims at (within a core's L2 cache).
const BLOCK_BYTES: usize = 256 << 10;
/// Up to this many rows of `x`, a product is dot products rather than a GEMM.
const DOT_ROWS: usize = 4;

/// How a quantized matrix's words read.
#[derive(Clone, Debug)]
pub struct QuantizedLayout {
    /// Rows R.
    pub rows: usize,
    /// Values per row C (a whole number of groups, `C·bits` a multiple of 32).
    pub cols: usize,
    /// Values per scale.
    pub group_size: usize,
    /// Bits per code.
    pub bits: u32,
    /// How a code reads before scaling (computed from its bits, which vectorises where a table
    /// lookup is a gather).
    pub codes: CodeValues,
    /// How a group's scale reads.
    pub scales: ScaleValues,
}

/// How a group's scale reads: float32 values, or the float formats' uint8 codes, decoded inside
/// the kernels (by a 256-entry table per call) rather than by ops before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleValues {
    /// Float32 values (affine mode).
    Float32,
    /// e8m0 codes: the power of two 2^(code − 127); 255 is NaN (mxfp4, mxfp8).
    E8m0,
    /// e4m3 codes divided by the global scale's encoding, 1 without one (nvfp4).
    E4m3,
}

impl ScaleValues {
    /// The value of scale `code` before nvfp4's global encoding divides it. Float32 scales are
    /// not codes: asking for one's value panics.
    pub fn value(self, code: u8) -> f32 {
        match (self, code) {
            (ScaleValues::Float32, _) => unreachable!("float32 scales are not codes"),
            (ScaleValues::E8m0, 0) => 2f32.powi(-127),
            (ScaleValues::E8m0, 255) => f32::NAN,
            (ScaleValues::E8m0, _) => f32::from_bits((code as u32) << 23),
            (ScaleValues::E4m3, _) => CodeValues::E4m3.value(code as u32),
        }
    }

    /// Every code's value, divided by `encoding` (nvfp4's; 1 otherwise): the kernels' table.
    pub fn table(self, encoding: f32) -> Box<[f32; 256]> {
        let mut table = Box::new([0.0f32; 256]);
        table.iter_mut().enumerate().for_each(|(code, v)| *v = self.value(code as u8) / encoding);
        table
    }
}

/// How a code reads before scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeValues {
    /// The code itself (affine mode).
    Integers,
    /// e2m1: a sign, 2 exponent bits of bias 1 and 1 mantissa bit (mxfp4, nvfp4).
    E2m1,
    /// e4m3: a sign, 4 exponent bits of bias 7 and 3 mantissa bits, 0x7F NaN (mxfp8).
    E4m3,
}

impl CodeValues {
    /// The value of `code`, built from its fields as float32 bits (no table lookup, which would be a
    /// gather in vector code).
    #[inline(always)]
    pub fn value(self, code: u32) -> f32 {
        match self {
            CodeValues::Integers => code as f32,
            CodeValues::E2m1 => {
                let (exponent, mantissa) = ((code >> 1) & 3, code & 1);
                let normal = ((exponent + 126) << 23) | (mantissa << 22);
                let magnitude = if exponent == 0 { mantissa * 0x3F00_0000 } else { normal };
                f32::from_bits(magnitude | ((code & 8) << 28))
            }
            CodeValues::E4m3 => {
                let (exponent, mantissa) = ((code >> 3) & 15, code & 7);
                let normal = f32::from_bits(((exponent + 120) << 23) | (mantissa << 20));
                let magnitude = match (exponent, code & 0x7F) {
                    (_, 0x7F) => f32::NAN,
                    (0, _) => mantissa as f32 * (1.0 / 512.0),
                    _ => normal,
                };
                f32::from_bits(magnitude.to_bits() | ((code & 0x80) << 24))
            }
        }
    }

    /// The values of every code of `bits` bits, by code: the lookup tables of the composition
    /// and of the CUDA kernels.
    pub fn table(self, bits: u32) -> Vec<f32> {
        (0..1u32 << bits).map(|code| self.value(code)).collect()
    }
}

impl QuantizedLayout {
    fn words_per_row(&self) -> usize {
        self.cols * self.bits as usize / 32
    }

    fn groups_per_row(&self) -> usize {
        self.cols / self.group_size
    }

    /// Panics unless the slices have the lengths this layout implies (the GEMMs use raw
    /// pointers).
    fn check_lengths(&self, words: usize, scales: usize, biases: Option<usize>) {
        assert_eq!(words, self.rows * self.words_per_row(), "quantized product: words length");
        assert_eq!(scales, self.rows * self.groups_per_row(), "quantized product: scales length");
        assert!(biases.is_none_or(|b| b == scales), "quantized product: biases length");
        assert!(self.cols.is_multiple_of(self.group_size) && (self.cols * self.bits as usize).is_multiple_of(32));
    }

    /// Values `first..first + out.len()` of row `r`, dequantized into `out` (`first` and the
    /// length whole groups).
    #[inline(always)]
    fn dequantize(&self, q: &Quantized, r: usize, first: usize, out: &mut [f32]) {
        let bits = self.bits as usize;
        let words = &q.words[r * self.words_per_row()..(r + 1) * self.words_per_row()];
        let group_words = self.group_size * bits / 32;
        let group_base = r * self.groups_per_row() + first / self.group_size;
        for (g, chunk) in out.chunks_mut(self.group_size).enumerate() {
            let (scale, bias) = (q.scales.get(group_base + g), q.biases.map_or(0.0, |b| b[group_base + g]));
            let start = (first / self.group_size + g) * group_words;
            let words = &words[start..start + group_words];
            // Each arm names its code values, so `value` folds to straight-line code.
            use CodeValues::*;
            match (bits, self.codes) {
                (2, Integers) => decode_words::<2>(words, chunk, |c| Integers.value(c), scale, bias),
                (4, Integers) => decode_words::<4>(words, chunk, |c| Integers.value(c), scale, bias),
                (8, Integers) => decode_words::<8>(words, chunk, |c| Integers.value(c), scale, bias),
                (4, E2m1) => decode_words::<4>(words, chunk, |c| E2m1.value(c), scale, bias),
                (8, E4m3) => decode_words::<8>(words, chunk, |c| E4m3.value(c), scale, bias),
                (_, codes) => decode_stream(words, bits, chunk, |c| codes.value(c), scale, bias),
            }
        }
    }
}

/// Decodes `out.len()` codes of `BITS` bits (a power of two: whole codes per word) from
/// `words`, each `value(code) · scale + bias`.
#[inline(always)]
fn decode_words<const BITS: usize>(words: &[u32], out: &mut [f32], value: impl Fn(u32) -> f32, scale: f32, bias: f32) {
    for (&word, chunk) in words.iter().zip(out.chunks_exact_mut(32 / BITS)) {
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = value((word >> (j * BITS)) & ((1 << BITS) - 1)) * scale + bias;
        }
    }
}

/// [`decode_words`] for any width: code `i` at bits `i·bits ..` of the stream, which may
/// straddle two words.
#[inline(always)]
fn decode_stream(words: &[u32], bits: usize, out: &mut [f32], value: impl Fn(u32) -> f32, scale: f32, bias: f32) {
    let mask = (1u64 << bits) - 1;
    for (i, o) in out.iter_mut().enumerate() {
        let (word, shift) = (i * bits / 32, i * bits % 32);
        let mut window = words[word] as u64;
        if shift + bits > 32 {
            window |= (words[word + 1] as u64) << 32;
        }
        *o = value(((window >> shift) & mask) as u32) * scale + bias;
    }
}

/// A quantized matrix's data: packed words, one scale per group and, in affine mode, one bias
/// per group.
pub struct Quantized<'a> {
    /// The packed codes, row after row.
    pub words: &'a [u32],
    /// The groups' scales.
    pub scales: GroupScales<'a>,
    /// The groups' biases (affine mode).
    pub biases: Option<&'a [f32]>,
}

/// The groups' scales as the kernels read them.
pub enum GroupScales<'a> {
    /// Float32 values.
    Values(&'a [f32]),
    /// uint8 codes and the value of each code ([`ScaleValues::table`]).
    Codes(&'a [u8], Box<[f32; 256]>),
}

impl GroupScales<'_> {
    /// Group `i`'s scale.
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        match self {
            GroupScales::Values(values) => values[i],
            GroupScales::Codes(codes, table) => table[codes[i] as usize],
        }
    }

    fn len(&self) -> usize {
        match self {
            GroupScales::Values(values) => values.len(),
            GroupScales::Codes(codes, _) => codes.len(),
        }
    }
}

/// `out = x @ wᵀ` (`transpose`, x is M × C, out M × R) or `out = x @ w` (x is M × R, out
/// M × C) for the quantized `w` of `layout`.
pub fn quantized_product(x: &[f32], q: &Quantized, layout: &QuantizedLayout, transpose: bool, out: &mut [f32]) {
    layout.check_lengths(q.words.len(), q.scales.len(), q.biases.map(<[f32]>::len));
    let (inner, outer) = if transpose { (layout.cols, layout.rows) } else { (layout.rows, layout.cols) };
    assert_eq!(x.len() % inner.max(1), 0, "quantized product: x length");
    let m = x.len().checked_div(inner).unwrap_or(out.len() / outer.max(1));
    assert_eq!(out.len(), m * outer, "quantized product: output length");
    if inner == 0 || m == 0 || outer == 0 {
        out.fill(0.0);
        return;
    }
    if transpose {
        product_by_rows(x, q, layout, m, out);
    } else {
        product_by_columns(x, q, layout, m, out);
    }
}

/// `out (+)= lhs @ rhs` for M × cols of `out` (rows `out_row` apart), `lhs` M × K (rows
/// `lhs_row` apart) and `rhs` K × cols given by its strides, one of them 1; adds when
/// `accumulate`.
///
/// Safety: every pointer covers the extent its strides reach.
#[allow(clippy::too_many_arguments)] // one GEMM's geometry
#[inline(always)]
unsafe fn block_product(
    (m, k, cols): (usize, usize, usize),
    out: *mut f32,
    out_row: usize,
    accumulate: bool,
    lhs: *const f32,
    lhs_row: usize,
    rhs: *const f32,
    (rhs_row, rhs_col): (usize, usize),
) {
    if m <= DOT_ROWS {
        for i in 0..m {
            let lhs = std::slice::from_raw_parts(lhs.add(i * lhs_row), k);
            let out = std::slice::from_raw_parts_mut(out.add(i * out_row), cols);
            if rhs_row == 1 {
                // Each output is a dot product with a contiguous row of the buffer.
                for (c, o) in out.iter_mut().enumerate() {
                    let sum = dot(lhs, std::slice::from_raw_parts(rhs.add(c * rhs_col), k));
                    *o = if accumulate { *o + sum } else { sum };
                }
            } else {
                // The buffer's rows are contiguous: add each one, scaled, to the output row.
                if !accumulate {
                    out.fill(0.0);
                }
                for (j, &a) in lhs.iter().enumerate() {
                    let row = std::slice::from_raw_parts(rhs.add(j * rhs_row), cols);
                    out.iter_mut().zip(row).for_each(|(o, &r)| *o += a * r);
                }
            }
        }
        return;
    }
    gemm::gemm(
        m, cols, k,
        out, 1, out_row as isize,
        accumulate,
        lhs, 1, lhs_row as isize,
        rhs, rhs_col as isize, rhs_row as isize,
        1.0, 1.0,
        false, false, false,
        Parallelism::None,
    );
}

/// `a · b` with eight running sums (so the loop vectorises), added in a fixed order.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 8];
    let (chunks_a, chunks_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = chunks_a.remainder().iter().zip(chunks_b.remainder()).map(|(x, y)| x * y).sum();
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for l in 0..8 {
            sums[l] += ca[l] * cb[l];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// `x @ wᵀ`: blocks of rows of `w`, each dequantized whole, give blocks of output columns (one
/// row of x with whole codes per word: [`decoded_matvec`]).
fn product_by_rows(x: &[f32], q: &Quantized, layout: &QuantizedLayout, m: usize, out: &mut [f32]) {
    if m == 1 && 32 % layout.bits == 0 && layout.bits >= 2 && layout.group_size.is_multiple_of(LANES) {
        return decoded_matvec(x, q, layout, out);
    }
    let (rows, cols) = (layout.rows, layout.cols);
    let threads = rayon::current_num_threads();
    let block = (BLOCK_BYTES / (cols * 4)).clamp(1, rows.div_ceil(threads).max(1));
    let out_ptr = out.as_mut_ptr() as usize;
    let run = |buffer: &mut Vec<f32>, b: usize| with_widest_isa(#[inline(always)] || {
        let (first, count) = (b * block, block.min(rows - b * block));
        buffer.resize(count * cols, 0.0);
        for r in 0..count {
            layout.dequantize(q, first + r, 0, &mut buffer[r * cols..(r + 1) * cols]);
        }
        // Safety: blocks write disjoint columns of `out` (M × rows); x is M × cols; the buffer
        // count × cols, read transposed.
        unsafe {
            let out = (out_ptr as *mut f32).add(first);
            block_product((m, cols, count), out, rows, false, x.as_ptr(), cols, buffer.as_ptr(), (1, cols));
        }
    });
    (0..rows.div_ceil(block)).into_par_iter().for_each_init(Vec::new, run);
}

/// Lanes of [`decoded_row`]'s running sums (one AVX-512 register, two AVX2 ones).
const LANES: usize = 16;
/// Rows of `w` per task of [`decoded_matvec`] (enough to outweigh scheduling).
const MATVEC_ROWS: usize = 64;

/// `x @ wᵀ` for one row of x (a decoding step's matrix-vector product, where reading the packed
/// words is the whole cost): each row of words is decoded straight into running sums, with no
/// buffer between. Codes of 2, 4 or 8 bits, groups a multiple of [`LANES`].
fn decoded_matvec(x: &[f32], q: &Quantized, layout: &QuantizedLayout, out: &mut [f32]) {
    let x_sums: Vec<f32> = match q.biases {
        Some(_) => x.chunks_exact(layout.group_size).map(|g| g.iter().sum()).collect(),
        None => Vec::new(),
    };
    out.par_chunks_mut(MATVEC_ROWS).enumerate().for_each(|(c, out)| {
        with_widest_isa(#[inline(always)] || {
            for (i, o) in out.iter_mut().enumerate() {
                let r = c * MATVEC_ROWS + i;
                use CodeValues::*;
                *o = match (layout.bits, layout.codes) {
                    (2, Integers) => decoded_row::<2>(x, &x_sums, q, layout, r, |c| Integers.value(c)),
                    (4, Integers) => decoded_row::<4>(x, &x_sums, q, layout, r, |c| Integers.value(c)),
                    (8, Integers) => decoded_row::<8>(x, &x_sums, q, layout, r, |c| Integers.value(c)),
                    (4, E2m1) => decoded_row::<4>(x, &x_sums, q, layout, r, |c| E2m1.value(c)),
                    (8, E4m3) => decoded_row::<8>(x, &x_sums, q, layout, r, |c| E4m3.value(c)),
                    (bits, codes) => unreachable!("decoded_matvec does not take {codes:?} codes of {bits} bits"),
                };
            }
        })
    });
}

/// Row `r` of `w` dotted with `x`: per group, `scale · Σ x·value(code)` in [`LANES`] running sums
/// (added in a fixed order at the end) plus, in affine mode, `bias · Σ x` (`x_sums`, per group).
#[inline(always)]
fn decoded_row<const BITS: usize>(
    x: &[f32],
    x_sums: &[f32],
    q: &Quantized,
    layout: &QuantizedLayout,
    r: usize,
    value: impl Fn(u32) -> f32,
) -> f32 {
    let (per_word, group) = (32 / BITS, layout.group_size);
    let (group_words, groups) = (group * BITS / 32, layout.groups_per_row());
    let words = &q.words[r * layout.words_per_row()..(r + 1) * layout.words_per_row()];
    let (mut total, mut biased) = ([0.0f32; LANES], 0.0f32);
    for g in 0..groups {
        let mut sums = [0.0f32; LANES];
        let (gw, gx) = (&words[g * group_words..(g + 1) * group_words], &x[g * group..(g + 1) * group]);
        for (ws, xs) in gw.chunks_exact(LANES / per_word).zip(gx.chunks_exact(LANES)) {
            // The codes first, in their own loop: fused with a float format's decoding, LLVM
            // vectorises across chunks and reads the words with gathers (3-4x slower).
            let mut codes = [0u32; LANES];
            for (l, code) in codes.iter_mut().enumerate() {
                *code = (ws[l / per_word] >> ((l % per_word) * BITS)) & ((1 << BITS) - 1) as u32;
            }
            for l in 0..LANES {
                sums[l] += xs[l] * value(codes[l]);
            }
        }
        let scale = q.scales.get(r * groups + g);
        for l in 0..LANES {
            total[l] += sums[l] * scale;
        }
        if let Some(b) = q.biases {
            biased += b[r * groups + g] * x_sums[g];
        }
    }
    total.iter().sum::<f32>() + biased
}

/// `x @ w`: one part of whole groups of output columns per thread, each running down the rows
/// of `w` in blocks and adding each block's product into its columns.
fn product_by_columns(x: &[f32], q: &Quantized, layout: &QuantizedLayout, m: usize, out: &mut [f32]) {
    let (rows, cols, group) = (layout.rows, layout.cols, layout.group_size);
    let threads = rayon::current_num_threads();
    let part = (cols / group).div_ceil(threads).max(1) * group;
    let out_ptr = out.as_mut_ptr() as usize;
    (0..cols.div_ceil(part)).into_par_iter().for_each(|p| with_widest_isa(#[inline(always)] || {
        let (first, width) = (p * part, part.min(cols - p * part));
        let block = (BLOCK_BYTES / (width * 4)).max(1);
        let mut buffer = vec![0.0f32; block.min(rows) * width];
        for start in (0..rows).step_by(block) {
            let count = block.min(rows - start);
            for r in 0..count {
                layout.dequantize(q, start + r, first, &mut buffer[r * width..(r + 1) * width]);
            }
            // Safety: parts write disjoint columns of `out` (M × cols); x is M × rows, read at
            // columns start..start + count; the buffer count × width.
            unsafe {
                let out = (out_ptr as *mut f32).add(first);
                let lhs = x.as_ptr().add(start);
                block_product((m, count, width), out, cols, start > 0, lhs, rows, buffer.as_ptr(), (width, 1));
            }
        }
    }));
}
