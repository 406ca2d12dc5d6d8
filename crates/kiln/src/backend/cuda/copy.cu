/* Strided copies: element i of a (merged) index space of rank K_RANK is read at
 * src + sum(index * src_stride) and written at dst + sum(index * dst_stride). K_T is an unsigned
 * type of the element's size: a copy moves bits, for every dtype. Concatenate writes each input
 * into its slab of the output this way, and slice_update writes the update into its region. */
struct KCopy {
    const K_T* src;
    K_T* dst;
    i64 n;
    i64 dims[K_RANK];
    i64 src_strides[K_RANK];
    i64 dst_strides[K_RANK];
};

extern "C" __global__ void __launch_bounds__(256) kiln_copy(const KCopy p) {
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += step) {
        i64 rest = i, s = 0, d = 0;
        for (int a = K_RANK - 1; a >= 0; --a) {
            const i64 q = rest % p.dims[a];
            rest /= p.dims[a];
            s += q * p.src_strides[a];
            d += q * p.dst_strides[a];
        }
        p.dst[d] = p.src[s];
    }
}
