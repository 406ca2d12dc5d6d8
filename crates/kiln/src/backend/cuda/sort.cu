/* Sorting along contiguous rows (the sorted axis moved last): a source is this text after the
 * prelude and the definitions of K_T (the stored type), K_KEY (an unsigned type as wide as the
 * element, at least 32 bits) and K_ORDER(x), which maps a stored value to a K_KEY whose unsigned
 * order is the CPU's order of values: NaN after every number (all NaNs equal), -0 equal to 0.
 *
 * Elements are sorted as (key, position) pairs. That order is total, so the sort is stable and
 * its indices are the CPU's argsort exactly; sorted values are read back from the input at those
 * positions, so they keep their bits (NaN payloads, the sign of zero).
 *
 * A row of up to K_TILE elements is sorted by one block in shared memory: a bitonic network
 * over the row padded to a power of two, padding after every element. Longer rows are sorted in
 * tiles, then runs are merged pairwise in device memory: an element's place in the merged run is
 * its place in its own run plus the number of elements of the other run that come before it,
 * found by a binary search. */

/* The key of a float's bits `b` (in the low bits of U; `sign` its sign bit, `inf` the bits of
 * +inf): negative numbers below `sign`, others from `sign` up, both zeros at `sign`, NaN last. */
template <typename U> __device__ __forceinline__ U k_float_order(U b, U sign, U inf) {
    const U magnitude = b & (sign - 1);
    if (magnitude > inf) return ~(U)0;
    return (b & sign) && magnitude != 0 ? (sign - 1) - magnitude : sign + magnitude;
}

/* (key a, position i) comes before (key b, position j). */
__device__ __forceinline__ bool k_before(K_KEY a, u32 i, K_KEY b, u32 j) {
    return a < b || (a == b && i < j);
}

/* Block b sorts tile b % tiles of row b / tiles (`tile`, a power of two, elements at most). A
 * row of one tile is written to the outputs (`values` or `positions`, whichever is not null);
 * otherwise the sorted pairs go to `keys` and `at` for the merges. Shared memory holds `tile`
 * keys, then `tile` positions. */
extern "C" __global__ void kiln_sort_tiles(const K_T* in, K_KEY* keys, u32* at, K_T* values, u32* positions, i64 len, i64 tile) {
    extern __shared__ __align__(16) unsigned char shared[];
    K_KEY* k = (K_KEY*)shared;
    u32* p = (u32*)(shared + tile * sizeof(K_KEY));
    const i64 tiles = (len + tile - 1) / tile;
    const i64 row = blockIdx.x / tiles, start = (blockIdx.x % tiles) * tile;
    const u32 n = (u32)min(tile, len - start);
    const K_T* x = in + row * len;
    for (u32 s = threadIdx.x; s < tile; s += blockDim.x) {
        /* Padding sorts last: the largest key, then positions past every element's. */
        k[s] = s < n ? K_ORDER(x[start + s]) : (K_KEY)~(K_KEY)0;
        p[s] = (u32)start + s;
    }
    __syncthreads();
    const u32 half_tile = (u32)tile / 2;
    for (u32 size = 2; size <= (u32)tile; size <<= 1) {
        for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
            for (u32 q = threadIdx.x; q < half_tile; q += blockDim.x) {
                const u32 lo = 2 * q - (q & (stride - 1)), hi = lo + stride;
                const bool ascending = (lo & size) == 0;
                const K_KEY klo = k[lo], khi = k[hi];
                const u32 plo = p[lo], phi = p[hi];
                if (k_before(khi, phi, klo, plo) == ascending) {
                    k[lo] = khi; k[hi] = klo;
                    p[lo] = phi; p[hi] = plo;
                }
            }
            __syncthreads();
        }
    }
    for (u32 s = threadIdx.x; s < n; s += blockDim.x) {
        const i64 o = row * len + start + s;
        if (tiles > 1) { keys[o] = k[s]; at[o] = p[s]; }
        else if (values) values[o] = x[p[s]];
        else positions[o] = p[s];
    }
}

/* Merges pairs of sorted runs of `width` elements of every row (keys, at) into (keys_out,
 * at_out), or, on the last pass, into the outputs (`values` or `positions`, whichever is not null). */
extern "C" __global__ void kiln_sort_merge(const K_KEY* keys, const u32* at, K_KEY* keys_out, u32* at_out, const K_T* in, K_T* values, u32* positions, i64 rows, i64 len, i64 width) {
    const i64 total = rows * len, step = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const i64 row = e / len, i = e % len, base = row * len;
        const i64 run = i / width, pair = (run & ~(i64)1) * width;
        const i64 mid = min(len, pair + width), end = min(len, mid + width);
        const K_KEY key = keys[e];
        const u32 pos = at[e];
        /* The other run, and how many of its elements come before this one. */
        const bool left = (run & 1) == 0;
        i64 lo = left ? mid : pair, hi = left ? end : mid;
        const i64 own = i - (left ? pair : mid);
        while (lo < hi) {
            const i64 m = (lo + hi) / 2;
            if (k_before(keys[base + m], at[base + m], key, pos)) lo = m + 1; else hi = m;
        }
        const i64 o = base + pair + own + (lo - (left ? mid : pair));
        if (values) values[o] = in[base + pos];
        else if (positions) positions[o] = pos;
        else { keys_out[o] = key; at_out[o] = pos; }
    }
}
