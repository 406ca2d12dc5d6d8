/* Arrays made from parameters rather than inputs. A source is this text after the prelude and
 * the definitions of K_OUT (the stored output type) and K_FROM_F64 (astype from float64). */

/* arange: element i is start + i * step computed in float64, then converted, as on the CPU
 * (kernels are built without contracting the multiply and add into one rounding). */
extern "C" __global__ void __launch_bounds__(256) kiln_arange(K_OUT* out, double start, double step, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const double x = start + (double)i * step;
        out[i] = K_FROM_F64(x);
    }
}

/* threefry2x32 with 20 rounds, the CPU's generator (backend/cpu/random.rs): word pair j of a
 * key's stream is the encryption of the counter (j >> 32, j & 0xffffffff). */
__device__ __forceinline__ u32 k_rotl(u32 x, u32 r) { return (x << r) | (x >> (32 - r)); }

__device__ __forceinline__ void k_threefry(u32 k0, u32 k1, u32 c0, u32 c1, u32* y0, u32* y1) {
    const u32 rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    const u32 ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
    u32 x0 = c0 + ks[0], x1 = c1 + ks[1];
#pragma unroll
    for (int round = 0; round < 20; ++round) {
        x0 += x1;
        x1 = k_rotl(x1, rot[round % 8]) ^ x0;
        if (round % 4 == 3) {
            const int s = round / 4 + 1;
            x0 += ks[s % 3];
            x1 += ks[(s + 1) % 3] + (u32)s;
        }
    }
    *y0 = x0;
    *y1 = x1;
}

/* Random bits for `keys` contiguous (k0, k1) pairs: key r fills elements [r * n, (r + 1) * n)
 * of `out` with the low bytes (the width of K_OUT) of its stream's words. A thread makes one
 * word pair. */
extern "C" __global__ void __launch_bounds__(256) kiln_random_bits(const u32* keys, K_OUT* out, i64 n, i64 count) {
    const i64 pairs = (n + 1) / 2;
    for (i64 q = (i64)blockIdx.x * blockDim.x + threadIdx.x; q < count * pairs; q += (i64)gridDim.x * blockDim.x) {
        const i64 r = q / pairs, j = q % pairs;
        u32 w0, w1;
        k_threefry(keys[2 * r], keys[2 * r + 1], (u32)((u64)j >> 32), (u32)j, &w0, &w1);
        K_OUT* block = out + r * n;
        block[2 * j] = (K_OUT)w0;
        if (2 * j + 1 < n) block[2 * j + 1] = (K_OUT)w1;
    }
}
