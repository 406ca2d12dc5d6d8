/* Gathers and scatters (`index.rs`): a source is this text after the prelude and the definitions
 * of K_RANK (axes of a merged index space), K_IDX (an index array's stored type), K_INDEX(x) (a
 * stored index as a signed 64-bit number, as the CPU reads it), K_T (the stored element type) and
 * K_COMBINE(a, b) (a combining scatter's op on stored values; 0 for gathers and set-scatters).
 *
 * Indices become element offsets first, one index array at a time: wrapped once when negative,
 * then clamped so the whole slice lies in the array, as on the CPU. Element e of a gather's or
 * scatter's (batch, slice) space then lives at offsets[e / per] plus its slice coordinates times
 * the array's strides. */

/* Index arithmetic within a space and within an array: 32-bit where every position and offset
 * fits (K_WIDE 0), 64-bit otherwise. Offsets of slices (offsets[]) are always 64-bit. */
#if K_WIDE
typedef i64 KI;
#else
typedef i32 KI;
#endif

/* The dot product of index i's coordinates over dims with strides. */
__device__ __forceinline__ KI k_unravel(KI i, const i64* dims, const i64* strides) {
    KI off = 0;
    for (int a = K_RANK - 1; a >= 0; --a) {
        const KI d = (KI)dims[a];
        off += (i % d) * (KI)strides[a];
        i /= d;
    }
    return off;
}

struct KOffsets {
    const K_IDX* idx;
    i64* offsets;
    i64 n;
    i64 dim;
    i64 hi;
    i64 stride;
    i64 first;
    i64 dims[K_RANK];
    i64 strides[K_RANK];
};

/* offsets[b] (+)= the clamped index at batch position b times the indexed axis' stride. */
extern "C" __global__ void __launch_bounds__(256) kiln_index_offsets(const KOffsets p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < p.n; b += step) {
        i64 v = K_INDEX(p.idx[k_unravel((KI)b, p.dims, p.strides)]);
        if (v < 0) v += p.dim;
        v = v < 0 ? 0 : v > p.hi ? p.hi : v;
        p.offsets[b] = (p.first ? 0 : p.offsets[b]) + v * p.stride;
    }
}

struct KGather {
    const K_T* src;
    K_T* dst;
    const i64* offsets;
    i64 n;
    i64 per;
    i64 dims[K_RANK];
    i64 strides[K_RANK];
};

/* dst[e] = the slice element e % per of slice e / per. */
extern "C" __global__ void __launch_bounds__(256) kiln_gather(const KGather p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < p.n; e += step) {
        const KI per = (KI)p.per;
        p.dst[e] = p.src[p.offsets[(KI)e / per] + k_unravel((KI)e % per, p.dims, p.strides)];
    }
}

struct KScatter {
    K_T* dst;
    const K_T* updates;
    const i64* offsets;
    u32* claims;
    i64 n;
    i64 per;
    i64 dims[K_RANK];
    i64 strides[K_RANK];
};

/* Where update e goes. */
__device__ __forceinline__ i64 k_target(const KScatter& p, i64 e) {
    const KI per = (KI)p.per;
    return p.offsets[(KI)e / per] + k_unravel((KI)e % per, p.dims, p.strides);
}

/* A set-scatter's first pass: each element of the destination remembers the last update that
 * writes it (claims hold update + 1; 0 is none), so duplicates resolve as the CPU's serial loop
 * does, the last one winning. */
extern "C" __global__ void __launch_bounds__(256) kiln_scatter_claim(const KScatter p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < p.n; e += step) atomicMax(&p.claims[k_target(p, e)], (u32)(e + 1));
}

/* The second pass: each winning update writes its element (every update when claims is null:
 * a single slice, which cannot collide with itself). */
extern "C" __global__ void __launch_bounds__(256) kiln_scatter_set(const KScatter p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < p.n; e += step) {
        const i64 t = k_target(p, e);
        if (!p.claims || p.claims[t] == (u32)(e + 1)) p.dst[t] = p.updates[e];
    }
}

/* The unsigned word of the element's size (at least 32 bits) that holds a K_T. */
#if K_T_SIZE == 8
typedef unsigned long long KWord;
#else
typedef unsigned int KWord;
#endif

/* `at` combined with u in one atomic step: a compare-and-swap loop on the aligned word holding
 * the element (the whole word for 4 and 8 bytes; the element's bits within it otherwise). */
__device__ __forceinline__ void k_atomic_combine(K_T* at, K_T u) {
    const unsigned long long address = (unsigned long long)at;
    KWord* word = (KWord*)(address & ~(unsigned long long)(sizeof(KWord) - 1));
    const unsigned shift = (unsigned)(address & (sizeof(KWord) - 1)) * 8;
    const KWord mask = sizeof(K_T) == sizeof(KWord) ? ~(KWord)0 : (((KWord)1 << (8 * sizeof(K_T))) - 1) << shift;
    KWord old = *word, seen;
    do {
        seen = old;
        K_T current;
        KWord bits = (seen & mask) >> shift;
        memcpy(&current, &bits, sizeof(K_T));
        const K_T next = K_COMBINE(current, u);
        KWord next_bits = 0;
        memcpy(&next_bits, &next, sizeof(K_T));
        old = atomicCAS(word, seen, (seen & ~mask) | ((next_bits << shift) & mask));
    } while (old != seen);
}

/* A combining scatter: every update is combined into its element atomically. */
extern "C" __global__ void __launch_bounds__(256) kiln_scatter_combine(const KScatter p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < p.n; e += step) k_atomic_combine(p.dst + k_target(p, e), p.updates[e]);
}
