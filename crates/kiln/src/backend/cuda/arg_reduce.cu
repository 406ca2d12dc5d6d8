/* Arg-reductions of contiguous rows into uint32 indices: a source is this text after the prelude
 * and the definitions of K_IN, K_LOAD (to float64, as the CPU compares) and K_BETTER(a, b) (a
 * beats b: greater for argmax, less for argmin).
 *
 * The CPU's answer is the first NaN, else the first extreme value. Both are the fold of the
 * combine below, which is associative and commutative, so any split of a row over threads gives
 * the CPU's index. */
struct KBest { double v; i64 i; };

__device__ __forceinline__ KBest k_pick(KBest a, KBest b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) return an && bn ? (a.i < b.i ? a : b) : an ? a : b;
    if (K_BETTER(a.v, b.v)) return a;
    if (K_BETTER(b.v, a.v)) return b;
    return a.i < b.i ? a : b;
}

__device__ __forceinline__ KBest k_warp_pick(KBest a) {
    for (int o = 16; o > 0; o >>= 1) {
        KBest other;
        other.v = __shfl_down_sync(0xffffffffu, a.v, o);
        other.i = __shfl_down_sync(0xffffffffu, a.i, o);
        a = k_pick(a, other);
    }
    return a;
}

/* Block r writes the index of row r's best element. A row holds at least one element. */
extern "C" __global__ void kiln_arg_reduce(const K_IN* in, u32* out, i64 cols) {
    __shared__ KBest part[32];
    const K_IN* p = in + (i64)blockIdx.x * cols;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    KBest best;
    best.v = K_LOAD(p[0]);
    best.i = 0;
    for (i64 i = threadIdx.x; i < cols; i += blockDim.x) {
        KBest c;
        c.v = K_LOAD(p[i]);
        c.i = i;
        best = k_pick(best, c);
    }
    best = k_warp_pick(best);
    if (blockDim.x > 32) {
        if (lane == 0) part[warp] = best;
        __syncthreads();
        if (warp == 0) {
            best = lane < (blockDim.x >> 5) ? part[lane] : part[0];
            best = k_warp_pick(best);
        }
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (u32)best.i;
}
