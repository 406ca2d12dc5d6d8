/* Quantized matrix products on the GPU (`ops::quantized::gpu`): the packed words are read once
 * and decoded in registers, never written out as a float matrix.
 *
 * The matrix has R rows of C values; each row's codes of BITS bits form one little-endian bit
 * stream in uint32 words, with one scale (and, in affine mode, one float bias) per GROUP values.
 * Affine scales are floats; the float formats' scales are uint8 codes, decoded here through a
 * table (nvfp4's divided by its global scale's encoding). A thread decodes a unit: one word when
 * BITS divides 32 (2, 4, 8 bits), else BITS words (32 values), so a unit never straddles words or
 * groups. x is M rows.
 *
 * Set before this header: T (x's and the output's type), S (the scales' type: float, or uint8_t
 * codes), BITS, GROUP, AFFINE, MT (rows of x per thread), RPW (rows of w per warp in
 * `kiln_quantized_rows`), `kiln_code_bits` (the float formats' code values before scaling, as
 * float bits) and `kiln_scale_bits` (their scale codes' values, as float bits). */

constexpr int UNIT_WORDS = 32 % BITS == 0 ? 1 : BITS;
constexpr int UNIT_VALUES = UNIT_WORDS * 32 / BITS;
/* Units a lane of `kiln_quantized_rows` loads before using any (32 apart, so each load is still
 * one contiguous read across the warp): more bytes in flight per warp. */
constexpr int LANE_UNITS = 4;
/* Rows of w whose words a thread of `kiln_quantized_columns` loads before using any. */
constexpr int ROW_BATCH = 4;

/* The codes of one unit (words already in registers), as floats: the code itself, or its value
 * in the float format. */
__device__ __forceinline__ void kiln_decode_unit(const uint32_t* w, const float* codes, float* q) {
#pragma unroll
    for (int j = 0; j < UNIT_VALUES; ++j) {
        const int bit = j * BITS, word = bit >> 5, shift = bit & 31;
        uint32_t v = w[word] >> shift;
        if (shift + BITS > 32) v |= w[word + 1] << (32 - shift);
        v &= (1u << BITS) - 1u;
        q[j] = AFFINE ? float(v) : codes[v];
    }
}

/* One unit's words from `src` into registers. */
__device__ __forceinline__ void kiln_load_unit(const uint32_t* __restrict__ src, uint32_t* w) {
#pragma unroll
    for (int i = 0; i < UNIT_WORDS; ++i) w[i] = src[i];
}

/* A unit's x values from `src`, as floats; VECTOR: in 16-byte loads where the unit fills whole
 * ones (`src` is then 16-byte aligned), which cuts the load instructions 4 to 8 times. */
template <bool VECTOR>
__device__ __forceinline__ void kiln_load_x(const T* __restrict__ src, float* v) {
    constexpr int PER_LOAD = 16 / sizeof(T);
    if constexpr (VECTOR && UNIT_VALUES % PER_LOAD == 0) {
#pragma unroll
        for (int c = 0; c < UNIT_VALUES / PER_LOAD; ++c) {
            const uint4 raw = reinterpret_cast<const uint4*>(src)[c];
            const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
            for (int e = 0; e < PER_LOAD; ++e) v[c * PER_LOAD + e] = float(values[e]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < UNIT_VALUES; ++j) v[j] = float(src[j]);
    }
}

/* Where a block's tables of code and scale values are. */
struct KilnTables {
    const float* codes;
    const float* scales;
};

/* The float formats' code values and scale values in shared memory (lookups by divergent codes
 * would serialise in constant memory); affine mode reads neither. Every thread of the block must
 * call it, before any returns. */
__device__ __forceinline__ KilnTables kiln_tables(const float* __restrict__ encoding) {
    __shared__ float codes[AFFINE ? 1 : 1 << BITS];
    __shared__ float scales[AFFINE ? 1 : 256];
    if constexpr (!AFFINE) {
        const float divisor = encoding ? *encoding : 1.f;
        for (int i = threadIdx.x; i < (1 << BITS); i += blockDim.x) codes[i] = __uint_as_float(kiln_code_bits[i]);
        for (int i = threadIdx.x; i < 256; i += blockDim.x) scales[i] = __uint_as_float(kiln_scale_bits[i]) / divisor;
        __syncthreads();
    }
    return {codes, scales};
}

/* Group `i`'s scale (a template, so the branch of the other scale type is never instantiated). */
template <typename Scale>
__device__ __forceinline__ float kiln_scale(const Scale* __restrict__ scales, size_t i, const KilnTables& tables) {
    if constexpr (AFFINE) {
        return scales[i];
    } else {
        return tables.scales[scales[i]];
    }
}

/* One warp's pass of `kiln_quantized_rows` over its rows' units: each lane takes LANE_UNITS
 * units 32 apart per step, loading every row's words for them before using any. */
template <bool VECTOR_X>
__device__ __forceinline__ void kiln_rows_pass(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                               const S* __restrict__ scales, const float* __restrict__ biases,
                                               const KilnTables& tables, int M, int R, int C, int r0, int m0,
                                               float (&acc)[RPW][MT]) {
    const int lane = threadIdx.x & 31;
    const int units = C / UNIT_VALUES, groups = C / GROUP;
    for (int u0 = lane; u0 < units; u0 += 32 * LANE_UNITS) {
        uint32_t words[LANE_UNITS][RPW][UNIT_WORDS];
#pragma unroll
        for (int s = 0; s < LANE_UNITS; ++s)
#pragma unroll
            for (int k = 0; k < RPW; ++k)
                if (u0 + 32 * s < units && r0 + k < R) kiln_load_unit(w + ((size_t)(r0 + k) * units + u0 + 32 * s) * UNIT_WORDS, words[s][k]);
#pragma unroll
        for (int s = 0; s < LANE_UNITS; ++s) {
            const int u = u0 + 32 * s;
            if (u >= units) break;
            const int first = u * UNIT_VALUES, g = first / GROUP;
            float xv[MT][UNIT_VALUES], total[MT];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                total[i] = 0.f;
                if (m0 + i < M) {
                    kiln_load_x<VECTOR_X>(x + (size_t)(m0 + i) * C + first, xv[i]);
                } else {
#pragma unroll
                    for (int j = 0; j < UNIT_VALUES; ++j) xv[i][j] = 0.f;
                }
#pragma unroll
                for (int j = 0; j < UNIT_VALUES; ++j) total[i] += xv[i][j];
            }
#pragma unroll
            for (int k = 0; k < RPW; ++k) {
                const int r = r0 + k;
                if (r >= R) break;
                float q[UNIT_VALUES];
                kiln_decode_unit(words[s][k], tables.codes, q);
                const float scale = kiln_scale(scales, (size_t)r * groups + g, tables);
                const float bias = AFFINE ? biases[(size_t)r * groups + g] : 0.f;
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    float dot = 0.f;
#pragma unroll
                    for (int j = 0; j < UNIT_VALUES; ++j) dot = fmaf(xv[i][j], q[j], dot);
                    acc[k][i] = fmaf(scale, dot, AFFINE ? fmaf(bias, total[i], acc[k][i]) : acc[k][i]);
                }
            }
        }
    }
}

/* out (M×R) = x (M×C) · wᵀ. One warp per RPW rows of w, MT rows of x per warp (grid y); the
 * lanes take the rows' units in turn, so their word and x reads are contiguous across the warp,
 * and the x values of a unit, loaded once, serve all RPW rows. */
__device__ __forceinline__ void kiln_quantized_rows(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                                    const S* __restrict__ scales, const float* __restrict__ biases,
                                                    const float* __restrict__ encoding, T* __restrict__ out, int M,
                                                    int R, int C) {
    const KilnTables tables = kiln_tables(encoding);
    const int lane = threadIdx.x & 31;
    const int r0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * RPW;
    const int m0 = blockIdx.y * MT;
    if (r0 >= R) return;
    float acc[RPW][MT];
#pragma unroll
    for (int k = 0; k < RPW; ++k)
#pragma unroll
        for (int i = 0; i < MT; ++i) acc[k][i] = 0.f;
    // Rows of x start 16-byte aligned (C is whole groups) once x's first one does.
    if ((reinterpret_cast<size_t>(x) & 15) == 0) {
        kiln_rows_pass<true>(x, w, scales, biases, tables, M, R, C, r0, m0, acc);
    } else {
        kiln_rows_pass<false>(x, w, scales, biases, tables, M, R, C, r0, m0, acc);
    }
#pragma unroll
    for (int k = 0; k < RPW; ++k)
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) acc[k][i] += __shfl_xor_sync(0xffffffffu, acc[k][i], offset);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < RPW; ++k)
#pragma unroll
            for (int i = 0; i < MT; ++i)
                if (r0 + k < R && m0 + i < M) out[(size_t)(m0 + i) * R + r0 + k] = T(acc[k][i]);
    }
}

/* partial (S×M×C, float) = x (M×R) · w, over slice s of w's rows (grid y, S = gridDim.y slices
 * of equal height); MT rows of x per thread (grid z). A thread owns one unit of output columns
 * and runs down its slice, ROW_BATCH rows' words loaded at once, reading each row's unit once;
 * the slices' sums are added afterwards (in a fixed order, so the result does not depend on
 * scheduling). */
__device__ __forceinline__ void kiln_quantized_columns(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                                       const S* __restrict__ scales, const float* __restrict__ biases,
                                                       const float* __restrict__ encoding, float* __restrict__ partial,
                                                       int M, int R, int C) {
    const KilnTables tables = kiln_tables(encoding);
    const int u = blockIdx.x * blockDim.x + threadIdx.x;
    const int units = C / UNIT_VALUES, groups = C / GROUP;
    const int slices = gridDim.y, height = (R + slices - 1) / slices;
    const int r0 = blockIdx.y * height, r1 = min(R, r0 + height);
    const int m0 = blockIdx.z * MT;
    if (u >= units) return;
    const int first = u * UNIT_VALUES, g = first / GROUP;
    float acc[MT][UNIT_VALUES];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < UNIT_VALUES; ++j) acc[i][j] = 0.f;
    for (int rb = r0; rb < r1; rb += ROW_BATCH) {
        uint32_t words[ROW_BATCH][UNIT_WORDS];
#pragma unroll
        for (int b = 0; b < ROW_BATCH; ++b)
            if (rb + b < r1) kiln_load_unit(w + ((size_t)(rb + b) * units + u) * UNIT_WORDS, words[b]);
#pragma unroll
        for (int b = 0; b < ROW_BATCH; ++b) {
            const int r = rb + b;
            if (r >= r1) break;
            float q[UNIT_VALUES];
            kiln_decode_unit(words[b], tables.codes, q);
            const float scale = kiln_scale(scales, (size_t)r * groups + g, tables);
            const float bias = AFFINE ? biases[(size_t)r * groups + g] : 0.f;
#pragma unroll
            for (int j = 0; j < UNIT_VALUES; ++j) q[j] = fmaf(scale, q[j], bias);
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                if (m0 + i >= M) break;
                const float v = float(x[(size_t)(m0 + i) * R + r]);
#pragma unroll
                for (int j = 0; j < UNIT_VALUES; ++j) acc[i][j] = fmaf(v, q[j], acc[i][j]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        if (m0 + i >= M) break;
        float* o = partial + ((size_t)blockIdx.y * M + m0 + i) * C + first;
#pragma unroll
        for (int j = 0; j < UNIT_VALUES; ++j) o[j] = acc[i][j];
    }
}
