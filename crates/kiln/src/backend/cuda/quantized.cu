/* Quantized matrix products on the GPU (`ops::quantized::gpu`): the packed words are read once
 * and decoded in registers, never written out as a float matrix.
 *
 * The matrix has R rows of C values; each row's codes of BITS bits form one little-endian bit
 * stream in uint32 words, with one float scale (and, in affine mode, one float bias) per GROUP
 * values. A thread decodes a unit: one word when BITS divides 32 (2, 4, 8 bits), else BITS words
 * (32 values), so a unit never straddles words or groups. x is M rows.
 *
 * Set before this header: T (x's and the output's type), BITS, GROUP, AFFINE, MT (rows of x per
 * thread), RPW (rows of w per warp in `kiln_quantized_rows`), and `kiln_code_bits` (the float formats' code values before scaling, as float bits). */

constexpr int UNIT_WORDS = 32 % BITS == 0 ? 1 : BITS;
constexpr int UNIT_VALUES = UNIT_WORDS * 32 / BITS;

/* The codes of one unit, as floats (the code itself, or its value in the float format). */
__device__ __forceinline__ void kiln_decode_unit(const uint32_t* __restrict__ words, const float* table, float* q) {
    uint32_t w[UNIT_WORDS];
#pragma unroll
    for (int i = 0; i < UNIT_WORDS; ++i) w[i] = words[i];
#pragma unroll
    for (int j = 0; j < UNIT_VALUES; ++j) {
        const int bit = j * BITS, word = bit >> 5, shift = bit & 31;
        uint32_t v = w[word] >> shift;
        if (shift + BITS > 32) v |= w[word + 1] << (32 - shift);
        v &= (1u << BITS) - 1u;
        q[j] = AFFINE ? float(v) : table[v];
    }
}

/* The float formats' code values in shared memory (lookups by divergent codes would serialise in
 * constant memory); affine mode reads none. Every thread of the block must call it, before any
 * returns. */
__device__ __forceinline__ const float* kiln_code_table() {
    __shared__ float table[AFFINE ? 1 : 1 << BITS];
    if (!AFFINE) {
        for (int i = threadIdx.x; i < (1 << BITS); i += blockDim.x) table[i] = __uint_as_float(kiln_code_bits[i]);
        __syncthreads();
    }
    return table;
}

/* out (M×R) = x (M×C) · wᵀ. One warp per RPW rows of w, MT rows of x per warp (grid y); the
 * lanes take the rows' units in turn, so their word and x reads are contiguous across the warp,
 * and the x values of a unit, loaded once, serve all RPW rows. */
__device__ __forceinline__ void kiln_quantized_rows(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                                    const float* __restrict__ scales, const float* __restrict__ biases,
                                                    T* __restrict__ out, int M, int R, int C) {
    const float* table = kiln_code_table();
    const int lane = threadIdx.x & 31;
    const int r0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * RPW;
    const int m0 = blockIdx.y * MT;
    if (r0 >= R) return;
    const int units = C / UNIT_VALUES, groups = C / GROUP;
    float acc[RPW][MT];
#pragma unroll
    for (int k = 0; k < RPW; ++k)
#pragma unroll
        for (int i = 0; i < MT; ++i) acc[k][i] = 0.f;
    for (int u = lane; u < units; u += 32) {
        const int first = u * UNIT_VALUES, g = first / GROUP;
        float xv[MT][UNIT_VALUES], total[MT];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            total[i] = 0.f;
#pragma unroll
            for (int j = 0; j < UNIT_VALUES; ++j) {
                xv[i][j] = m0 + i < M ? float(x[(size_t)(m0 + i) * C + first + j]) : 0.f;
                total[i] += xv[i][j];
            }
        }
#pragma unroll
        for (int k = 0; k < RPW; ++k) {
            const int r = r0 + k;
            if (r >= R) break;
            float q[UNIT_VALUES];
            kiln_decode_unit(w + ((size_t)r * units + u) * UNIT_WORDS, table, q);
            const float scale = scales[(size_t)r * groups + g];
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
 * and runs down its slice, reading each row's unit once; the slices' sums are added afterwards
 * (in a fixed order, so the result does not depend on scheduling). */
__device__ __forceinline__ void kiln_quantized_columns(const T* __restrict__ x, const uint32_t* __restrict__ w,
                                                       const float* __restrict__ scales, const float* __restrict__ biases,
                                                       float* __restrict__ partial, int M, int R, int C) {
    const float* table = kiln_code_table();
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
    for (int r = r0; r < r1; ++r) {
        float q[UNIT_VALUES];
        kiln_decode_unit(w + ((size_t)r * units + u) * UNIT_WORDS, table, q);
        const float scale = scales[(size_t)r * groups + g];
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
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        if (m0 + i >= M) break;
        float* o = partial + ((size_t)blockIdx.y * M + m0 + i) * C + first;
#pragma unroll
        for (int j = 0; j < UNIT_VALUES; ++j) o[j] = acc[i][j];
    }
}
