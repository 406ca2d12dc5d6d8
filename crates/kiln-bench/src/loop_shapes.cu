/* Loop shapes for a streaming elementwise kernel, y = x * 0.5 + 1 over 16-byte vectors of
 * float32, measured against each other by `kiln-bench --device gpu loop_shapes` (the printer of
 * elementwise kernels uses the fastest). Every entry takes (x, y, n) with n counted in vectors. */

struct __align__(16) V { float e[4]; };

__device__ __forceinline__ V f(V a) {
    V r;
#pragma unroll
    for (int i = 0; i < 4; i++) r.e[i] = a.e[i] * 0.5f + 1.0f;
    return r;
}

/* A grid-stride loop, one vector per thread per step (the printer's shape before). */
extern "C" __global__ void __launch_bounds__(256) stride1(const V* x, V* y, i64 n64) {
    const i32 n = (i32)n64, step = (i32)gridDim.x * 256;
    for (i32 c = (i32)blockIdx.x * 256 + threadIdx.x; c < n; c += step) y[c] = f(x[c]);
}

/* A grid-stride loop, U vectors per thread per step: all loads, then all stores. */
template <int U> __device__ __forceinline__ void stride_unrolled(const V* x, V* y, i32 n) {
    const i32 step = (i32)gridDim.x * 256;
    i32 c = (i32)blockIdx.x * 256 + threadIdx.x;
    for (; c + (U - 1) * step < n; c += U * step) {
        V a[U];
#pragma unroll
        for (int u = 0; u < U; u++) a[u] = x[c + u * step];
#pragma unroll
        for (int u = 0; u < U; u++) y[c + u * step] = f(a[u]);
    }
    for (; c < n; c += step) y[c] = f(x[c]);
}
extern "C" __global__ void __launch_bounds__(256) stride2(const V* x, V* y, i64 n) { stride_unrolled<2>(x, y, (i32)n); }
extern "C" __global__ void __launch_bounds__(256) stride4(const V* x, V* y, i64 n) { stride_unrolled<4>(x, y, (i32)n); }

/* One vector per thread, as many blocks as it takes. */
extern "C" __global__ void __launch_bounds__(256) one_each(const V* x, V* y, i64 n) {
    const i32 c = (i32)blockIdx.x * 256 + threadIdx.x;
    if (c < (i32)n) y[c] = f(x[c]);
}

/* Four vectors per thread (a block covers 1024 consecutive vectors), as many blocks as it takes. */
extern "C" __global__ void __launch_bounds__(256) four_each(const V* x, V* y, i64 n64) {
    const i32 n = (i32)n64, base = (i32)blockIdx.x * 1024 + threadIdx.x;
    V a[4];
#pragma unroll
    for (int u = 0; u < 4; u++) if (base + u * 256 < n) a[u] = x[base + u * 256];
#pragma unroll
    for (int u = 0; u < 4; u++) if (base + u * 256 < n) y[base + u * 256] = f(a[u]);
}

/* stride1 with streaming cache hints: loads and stores that evict first. */
extern "C" __global__ void __launch_bounds__(256) stride1_streaming(const V* x, V* y, i64 n64) {
    const i32 n = (i32)n64, step = (i32)gridDim.x * 256;
    for (i32 c = (i32)blockIdx.x * 256 + threadIdx.x; c < n; c += step) {
        const float4 v = __ldcs((const float4*)x + c);
        V a = {{v.x, v.y, v.z, v.w}};
        V r = f(a);
        __stcs((float4*)y + c, make_float4(r.e[0], r.e[1], r.e[2], r.e[3]));
    }
}
