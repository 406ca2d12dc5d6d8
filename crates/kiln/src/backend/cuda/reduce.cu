/* Reductions of contiguous rows: a kernel source is this text after the prelude and the
 * definitions of one reduction (accumulator type K_ACC, K_LOAD from the stored input type K_IN,
 * K_IDENTITY, K_COMBINE, K_STORE to the stored output type K_OUT).
 *
 * A row is folded by one block, or, when rows are few and long, by `splits` blocks whose
 * partial results a second kernel folds. Accumulators are float64 for floats and 64-bit
 * integers otherwise, as on the CPU; the order of the fold differs from the CPU's, so float sums
 * may differ in the last bits. */

/* K_COMBINE as a function: its operands are evaluated once, and every lane reaches each shuffle
 * (a shuffle inside the macro's conditional would run on some lanes only). */
__device__ __forceinline__ K_ACC k_combine(K_ACC a, K_ACC b) { return K_COMBINE(a, b); }

__device__ __forceinline__ K_ACC k_warp_fold(K_ACC a) {
    for (int o = 16; o > 0; o >>= 1) {
        const K_ACC other = __shfl_down_sync(0xffffffffu, a, o);
        a = k_combine(a, other);
    }
    return a;
}

/* The fold of every thread's value, valid in thread 0. */
__device__ __forceinline__ K_ACC k_block_fold(K_ACC a) {
    __shared__ K_ACC part[32];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    a = k_warp_fold(a);
    if (blockDim.x <= 32) return a;
    if (lane == 0) part[warp] = a;
    __syncthreads();
    a = lane < (blockDim.x >> 5) ? part[lane] : (K_ACC)(K_IDENTITY);
    return warp == 0 ? k_warp_fold(a) : a;
}

/* K_VEC inputs make one 16-byte load. */
#define K_VEC (16 / sizeof(K_IN))
struct __align__(16) KVec { K_IN v[K_VEC]; };

/* Block b folds part b % splits of row b / splits. Parts are whole 16-byte vectors (but the
 * last), read with one load per vector where the part starts 16-byte aligned; four independent
 * folds per thread keep loads in flight. */
extern "C" __global__ void kiln_reduce_rows(const K_IN* in, K_ACC* partial, K_OUT* out, i64 cols, i64 splits) {
    const i64 b = blockIdx.x, row = b / splits, split = b % splits;
    const i64 chunk = ((cols + splits - 1) / splits + K_VEC - 1) / K_VEC * K_VEC;
    const i64 start = min(cols, split * chunk), end = min(cols, start + chunk);
    const K_IN* p = in + row * cols;
    K_ACC a0 = K_IDENTITY, a1 = K_IDENTITY, a2 = K_IDENTITY, a3 = K_IDENTITY;
    const i64 step = blockDim.x;
    i64 i = start + threadIdx.x;
    if ((((unsigned long long)(p + start)) & 15) == 0) {
        const KVec* q = (const KVec*)(p + start);
        const i64 vectors = (end - start) / K_VEC;
        for (i64 j = threadIdx.x; j < vectors; j += step) {
            const KVec w = q[j];
#pragma unroll
            for (int k = 0; k < (int)K_VEC; k += 4) {
                a0 = k_combine(a0, K_LOAD(w.v[k]));
                if (k + 1 < (int)K_VEC) a1 = k_combine(a1, K_LOAD(w.v[k + 1]));
                if (k + 2 < (int)K_VEC) a2 = k_combine(a2, K_LOAD(w.v[k + 2]));
                if (k + 3 < (int)K_VEC) a3 = k_combine(a3, K_LOAD(w.v[k + 3]));
            }
        }
        i = start + vectors * K_VEC + threadIdx.x;
    } else {
        for (; i + 3 * step < end; i += 4 * step) {
            a0 = k_combine(a0, K_LOAD(p[i]));
            a1 = k_combine(a1, K_LOAD(p[i + step]));
            a2 = k_combine(a2, K_LOAD(p[i + 2 * step]));
            a3 = k_combine(a3, K_LOAD(p[i + 3 * step]));
        }
    }
    for (; i < end; i += step) a0 = k_combine(a0, K_LOAD(p[i]));
    K_ACC acc = k_block_fold(k_combine(k_combine(a0, a1), k_combine(a2, a3)));
    if (threadIdx.x == 0) {
        if (splits == 1) out[row] = K_STORE(acc);
        else partial[b] = acc;
    }
}

/* Block r folds the `splits` partial results of row r. */
extern "C" __global__ void kiln_reduce_partials(const K_ACC* partial, K_OUT* out, i64 splits) {
    const K_ACC* p = partial + (i64)blockIdx.x * splits;
    K_ACC acc = K_IDENTITY;
    for (i64 i = threadIdx.x; i < splits; i += blockDim.x) acc = k_combine(acc, p[i]);
    acc = k_block_fold(acc);
    if (threadIdx.x == 0) out[blockIdx.x] = K_STORE(acc);
}
