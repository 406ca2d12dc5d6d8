/* Cumulative ops along contiguous rows (the scanned axis moved last): a source is the reduction
 * text (reduce.cu after one reduction's definitions: K_IN, K_ACC, K_OUT, K_LOAD, K_IDENTITY,
 * K_COMBINE, K_STORE) followed by K_FIRST (the stored value an exclusive scan writes first: the
 * op's identity in the output dtype), K_REVERSE and K_INCLUSIVE, then this text.
 *
 * A row is walked in order from its start, or from its end when K_REVERSE; step k of the walk is
 * element k_walk(k) of the row. Short rows are scanned by one thread each, in the CPU's order.
 * Longer rows are scanned by a block in tiles of K_ITEMS * K_SCAN_BLOCK steps: the tile is staged
 * in shared memory (read and written by consecutive threads at consecutive addresses), each thread
 * scans its K_ITEMS neighbours there, the block scans the threads' totals, and a carry runs from
 * tile to tile.
 * When rows are few and long, each is cut into `parts` walked by blocks of their own:
 * kiln_scan_parts folds every part, kiln_scan_carries turns the folds into each part's carry-in,
 * and kiln_scan_rows scans the parts in parallel. Floats accumulate in float64 as on the CPU, in
 * another order, so float sums and products may differ from the CPU's in the last bits. */

#define K_ITEMS 8
#define K_SCAN_BLOCK 256
#define K_TILE_STEPS (K_ITEMS * K_SCAN_BLOCK)

/* The place of tile step s in a tile's shared buffer: padded by one slot per 32, so that the
 * threads of a warp reading K_ITEMS neighbours each fall in different banks. */
__device__ __forceinline__ int k_slot(int s) { return s + s / 32; }

/* The row element at step k of the walk over a row of `len`. */
__device__ __forceinline__ i64 k_walk(i64 k, i64 len) { return K_REVERSE ? len - 1 - k : k; }

/* Thread r scans row r alone, in order. */
extern "C" __global__ void kiln_scan_serial(const K_IN* in, K_OUT* out, i64 rows, i64 len) {
    for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (i64)gridDim.x * blockDim.x) {
        const K_IN* x = in + r * len;
        K_OUT* o = out + r * len;
        K_ACC acc = K_IDENTITY;
        for (i64 k = 0; k < len; ++k) {
            const i64 i = k_walk(k, len);
            const K_ACC v = K_LOAD(x[i]);
            if (K_INCLUSIVE) {
                acc = k_combine(acc, v);
                o[i] = K_STORE(acc);
            } else {
                o[i] = k == 0 ? (K_OUT)(K_FIRST) : (K_OUT)(K_STORE(acc));
                acc = k_combine(acc, v);
            }
        }
    }
}

/* The steps [start, end) of part `part` of `parts` of a row of `len`. */
__device__ __forceinline__ void k_part(i64 part, i64 parts, i64 len, i64* start, i64* end) {
    const i64 chunk = (len + parts - 1) / parts;
    *start = min(len, part * chunk);
    *end = min(len, *start + chunk);
}

/* Block b folds part b % parts of row b / parts into partial[b]. */
extern "C" __global__ void kiln_scan_parts(const K_IN* in, K_ACC* partial, i64 len, i64 parts) {
    const i64 b = blockIdx.x;
    i64 start, end;
    k_part(b % parts, parts, len, &start, &end);
    const K_IN* x = in + (b / parts) * len;
    K_ACC acc = K_IDENTITY;
    for (i64 k = start + threadIdx.x; k < end; k += blockDim.x) acc = k_combine(acc, K_LOAD(x[k_walk(k, len)]));
    acc = k_block_fold(acc);
    if (threadIdx.x == 0) partial[b] = acc;
}

/* Thread r replaces row r's part folds by their exclusive scan: each part's carry-in. */
extern "C" __global__ void kiln_scan_carries(K_ACC* partial, i64 rows, i64 parts) {
    const i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    K_ACC acc = K_IDENTITY;
    for (i64 p = 0; p < parts; ++p) {
        const K_ACC v = partial[r * parts + p];
        partial[r * parts + p] = acc;
        acc = k_combine(acc, v);
    }
}

/* The inclusive scan of one value per lane over its warp. */
__device__ __forceinline__ K_ACC k_warp_scan(K_ACC a) {
    const unsigned lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        const K_ACC other = __shfl_up_sync(0xffffffffu, a, o);
        if (lane >= (unsigned)o) a = k_combine(other, a);
    }
    return a;
}

/* Block b scans part b % parts of row b / parts, from that part's carry-in (`carries`, when
 * parts > 1). */
extern "C" __global__ void __launch_bounds__(K_SCAN_BLOCK) kiln_scan_rows(const K_IN* in, K_OUT* out, const K_ACC* carries, i64 len, i64 parts) {
    __shared__ K_ACC warp_totals[K_SCAN_BLOCK / 32];
    __shared__ K_IN staged_in[K_TILE_STEPS + K_TILE_STEPS / 32];
    __shared__ K_OUT staged_out[K_TILE_STEPS + K_TILE_STEPS / 32];
    const i64 b = blockIdx.x;
    i64 start, end;
    k_part(b % parts, parts, len, &start, &end);
    const K_IN* x = in + (b / parts) * len;
    K_OUT* o = out + (b / parts) * len;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int first = (int)threadIdx.x * K_ITEMS;
    K_ACC carry = parts > 1 ? carries[b] : (K_ACC)(K_IDENTITY);
    for (i64 tile = start; tile < end; tile += K_TILE_STEPS) {
#pragma unroll
        for (int j = 0; j < K_ITEMS; ++j) {
            const int s = j * K_SCAN_BLOCK + threadIdx.x;
            if (tile + s < end) staged_in[k_slot(s)] = x[k_walk(tile + s, len)];
        }
        __syncthreads();
        K_ACC scanned[K_ITEMS];
        K_ACC total = K_IDENTITY;
#pragma unroll
        for (int j = 0; j < K_ITEMS; ++j) {
            total = k_combine(total, tile + first + j < end ? K_LOAD(staged_in[k_slot(first + j)]) : (K_ACC)(K_IDENTITY));
            scanned[j] = total;
        }
        const K_ACC through_lane = k_warp_scan(total);
        if (lane == 31) warp_totals[warp] = through_lane;
        __syncthreads();
        if (warp == 0) {
            K_ACC w = lane < K_SCAN_BLOCK / 32 ? warp_totals[lane] : (K_ACC)(K_IDENTITY);
            w = k_warp_scan(w);
            if (lane < K_SCAN_BLOCK / 32) warp_totals[lane] = w;
        }
        __syncthreads();
        /* Everything this tile's thread comes after: the carry, the warps and the lanes before it. */
        K_ACC before = carry;
        if (warp > 0) before = k_combine(before, warp_totals[warp - 1]);
        const K_ACC lanes_before = __shfl_up_sync(0xffffffffu, through_lane, 1);
        if (lane > 0) before = k_combine(before, lanes_before);
#pragma unroll
        for (int j = 0; j < K_ITEMS; ++j) {
            const i64 k = tile + first + j;
            K_OUT v;
            if (K_INCLUSIVE) v = K_STORE(k_combine(before, scanned[j]));
            else if (k == 0) v = (K_OUT)(K_FIRST);
            else v = K_STORE(j == 0 ? before : k_combine(before, scanned[j - 1]));
            staged_out[k_slot(first + j)] = v;
        }
        carry = k_combine(carry, warp_totals[K_SCAN_BLOCK / 32 - 1]);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < K_ITEMS; ++j) {
            const int s = j * K_SCAN_BLOCK + threadIdx.x;
            if (tile + s < end) o[k_walk(tile + s, len)] = staged_out[k_slot(s)];
        }
    }
}
