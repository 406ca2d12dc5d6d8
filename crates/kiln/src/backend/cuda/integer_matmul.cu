/* Integer and boolean matrix products of row-major operands, batch after batch: a source is this
 * text after the prelude and the definitions of K_T (the stored unsigned type), K_ACC (u32, or
 * u64 for 8-byte elements) and K_STEP(acc, x, y), one step of the sum: a wrapping multiply-add
 * (the low bits of an unsigned sum are those of the dtype's own wrapping sum, signed or not), or
 * acc | (x & y) for booleans.
 *
 * Each block computes 16 × 16 output tiles (a grid-stride loop over batch members and tiles),
 * staging 16 × 16 tiles of both operands in shared memory. */

#define K_TILE 16

extern "C" __global__ void kiln_integer_matmul(const K_T* a, const K_T* b, K_T* out, u64 batch, u64 m, u64 n, u64 k) {
    __shared__ K_T a_tile[K_TILE][K_TILE + 1];
    __shared__ K_T b_tile[K_TILE][K_TILE + 1];
    const u32 tx = threadIdx.x % K_TILE, ty = threadIdx.x / K_TILE;
    const u64 tiles_m = (m + K_TILE - 1) / K_TILE, tiles_n = (n + K_TILE - 1) / K_TILE;
    const u64 per_member = tiles_m * tiles_n;
    for (u64 t = blockIdx.x; t < batch * per_member; t += gridDim.x) {
        const u64 z = t / per_member, tile = t % per_member;
        const u64 row = tile / tiles_n * K_TILE + ty, col = tile % tiles_n * K_TILE + tx;
        const K_T* a_z = a + z * m * k;
        const K_T* b_z = b + z * k * n;
        K_ACC acc = 0;
        for (u64 p0 = 0; p0 < k; p0 += K_TILE) {
            a_tile[ty][tx] = row < m && p0 + tx < k ? a_z[row * k + p0 + tx] : (K_T)0;
            b_tile[ty][tx] = p0 + ty < k && col < n ? b_z[(p0 + ty) * n + col] : (K_T)0;
            __syncthreads();
            for (int q = 0; q < K_TILE; q++) acc = K_STEP(acc, (K_ACC)a_tile[ty][q], (K_ACC)b_tile[q][tx]);
            __syncthreads();
        }
        if (row < m && col < n) out[z * m * n + row * n + col] = (K_T)acc;
    }
}
