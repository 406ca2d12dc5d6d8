/* The helpers every generated CUDA kernel starts with: kiln's dtypes, conversions with Rust's
 * `as` semantics, and the scalar meaning of the ops whose CUDA form is not one operator. The
 * float32 transcendentals repeat the CPU's (backend/cpu/math.rs) step for step with fused
 * multiply-adds, so they give the CPU's bits on FMA hosts; the others use CUDA's libdevice, a few
 * ulps from glibc (the tests bound the difference). */
typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
typedef u16 f16;
typedef u16 bf16;
/* <stdint.h>'s limits, which NVRTC does not include: the printers share their names with C. */
#ifndef INT8_MIN
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807ll - 1)
#define INT64_MAX 9223372036854775807ll
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295u
#define UINT64_MAX 18446744073709551615ull
#endif
#define K_INF __int_as_float(0x7f800000)
#define K_NAN __int_as_float(0x7fc00000)

/* float16 and bfloat16 are stored as bits and computed in float32, rounded after every step. */
__device__ __forceinline__ float k_f16_load(f16 h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ f16 k_f16_store(float f) { f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float k_bf16_load(bf16 h) { return __uint_as_float(((u32)h) << 16); }
/* Round to nearest even; a NaN keeps its sign and top payload bits and becomes quiet (as the
 * `half` crate does on the CPU). */
__device__ __forceinline__ bf16 k_bf16_store(float f) {
    u32 b = __float_as_uint(f);
    if (f != f) return (bf16)((b >> 16) | 0x40);
    return (bf16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float k_f16_round(float f) { return k_f16_load(k_f16_store(f)); }
__device__ __forceinline__ float k_bf16_round(float f) { return k_bf16_load(k_bf16_store(f)); }

/* K_SATURATE, K_INT_DIV and K_INT_REM: ../integer_ops.h, shared with the CPU's C prelude. */

/* Shifts of the dtype's width or more (or negative) give 0, or -1 for a negative value shifted
 * right, as the CPU does. */
#define K_SHL(T, x, y) ((y) < 0 || (u64)(y) >= sizeof(T) * 8 ? (T)0 : (T)((x) << (y)))
#define K_SHR(T, x, y) ((y) < 0 || (u64)(y) >= sizeof(T) * 8 ? ((x) < 0 ? (T)-1 : (T)0) : (T)((x) >> (y)))

/* Integer power by squaring with wrapping; a negative exponent gives 0, as in mlx. */
template <typename T> __device__ __forceinline__ T k_pow_int(T b, T e) {
    if (e < 0) return (T)0;
    T r = 1;
    while (e > 0) { if (e & 1) r = (T)(r * b); b = (T)(b * b); e = (T)(e >> 1); }
    return r;
}

/* Float remainder with the sign of the divisor, as numpy's mod. */
template <typename T> __device__ __forceinline__ T k_rem(T x, T y) {
    T r = fmod(x, y);
    return (r != (T)0 && ((r < (T)0) != (y < (T)0))) ? r + y : r;
}
template <typename T> __device__ __forceinline__ T k_logaddexp(T x, T y) {
    T m = x > y ? x : y;
    if (isinf(m) || m != m) return (x != x || y != y) ? (T)K_NAN : m;
    return m + log1p(exp(-fabs(x - y)));
}
template <typename T> __device__ __forceinline__ T k_sign(T x) { return x > (T)0 ? (T)1 : x < (T)0 ? (T)-1 : x; }
template <typename T> __device__ __forceinline__ T k_max(T x, T y) { return (x > y || x != x) ? x : y; }
template <typename T> __device__ __forceinline__ T k_min(T x, T y) { return (x < y || x != x) ? x : y; }
__device__ __forceinline__ double k_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    double r = 1.0 / (1.0 + e);
    return x >= 0.0 ? r : e * r;
}

/* float32 functions of backend/cpu/math.rs (the `Fused` variants). */
__device__ __forceinline__ float k_clamp(float x, float lo, float hi) { return x > hi ? hi : (x < lo ? lo : x); }
__device__ __forceinline__ float k_pow2i(int e) { return __uint_as_float(((u32)(e + 127)) << 23); }
__device__ __forceinline__ float k_exp_f32(float x) {
    float xc = k_clamp(x, -104.0f, 89.0f);
    const float magic = 12582912.0f;
    float t = fmaf(xc, 1.44269504088896341f, magic);
    float n = t - magic;
    int ni = (int)(__float_as_uint(t) - __float_as_uint(magic));
    float r = fmaf(n, -1.4286068e-6f, fmaf(n, -0.69314575f, xc)); /* the first product is exact */
    float p = 1.381145e-3f;
    p = fmaf(p, r, 8.370237e-3f); p = fmaf(p, r, 4.1668538e-2f); p = fmaf(p, r, 1.6666508e-1f);
    p = fmaf(p, r, 4.9999994e-1f); p = fmaf(p, r, 1.0f); p = fmaf(p, r, 1.0f);
    int e1 = ni >> 1;
    return p * k_pow2i(e1) * k_pow2i(ni - e1);
}
__device__ __forceinline__ float k_log_f32(float x) {
    bool sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    u32 bits = __float_as_uint(xs);
    int e = (int)((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    bool big = m > 1.41421356237309505f;
    m = big ? m * 0.5f : m;
    e += big ? 1 : 0;
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float s2 = s * s;
    float q = 2.0f / 9.0f;
    q = fmaf(q, s2, 2.0f / 7.0f); q = fmaf(q, s2, 2.0f / 5.0f); q = fmaf(q, s2, 2.0f / 3.0f);
    float lm = f - s * (f - s2 * q);
    float ef = (float)e;
    float y = ef * 0.69314575f + (lm + ef * 1.4286068e-6f);
    return (x != x || x < 0.0f) ? K_NAN : x == 0.0f ? -K_INF : x == K_INF ? K_INF : y;
}
__device__ __forceinline__ float k_expm1_f32(float x) {
    float p = 1.0f / 362880.0f;
    p = fmaf(p, x, 1.0f / 40320.0f); p = fmaf(p, x, 1.0f / 5040.0f); p = fmaf(p, x, 1.0f / 720.0f);
    p = fmaf(p, x, 1.0f / 120.0f); p = fmaf(p, x, 1.0f / 24.0f); p = fmaf(p, x, 1.0f / 6.0f);
    p = fmaf(p, x, 0.5f); p = fmaf(p, x, 1.0f);
    float small = p * x;
    return fabsf(x) < 0.5f ? small : k_exp_f32(x) - 1.0f;
}
__device__ __forceinline__ float k_log1p_f32(float x) {
    float u = 1.0f + x;
    float d = u - 1.0f;
    float y = k_log_f32(u) * (x / d);
    return d == 0.0f ? x : u == K_INF ? K_INF : y;
}
__device__ __forceinline__ float k_tanh_f32(float x) {
    float e = k_expm1_f32(2.0f * k_clamp(x, -9.0f, 9.0f));
    return e / (e + 2.0f);
}
__device__ __forceinline__ float k_sigmoid_f32(float x) {
    float e = k_exp_f32(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}
__device__ __forceinline__ float k_erf_f32(float x) {
    float xc = k_clamp(x, -4.0f, 4.0f);
    float z = xc * xc;
    float p = -1.8333765e-8f;
    p = fmaf(p, z, 6.5698346e-6f); p = fmaf(p, z, 5.3509144e-4f); p = fmaf(p, z, 5.436628e-3f);
    p = fmaf(p, z, 7.68524e-2f); p = fmaf(p, z, 2.621096e-1f); p = fmaf(p, z, 1.5983012f);
    float q = 8.8774505e-5f;
    q = fmaf(q, z, 1.8453536e-3f); q = fmaf(q, z, 2.1859685e-2f); q = fmaf(q, z, 1.6127592e-1f);
    q = fmaf(q, z, 7.044412e-1f); q = fmaf(q, z, 1.4164575f);
    float r = xc * p / q;
    return k_clamp(r, -1.0f, 1.0f);
}
__device__ __forceinline__ float k_erfinv_f32(float x) {
    float w = -k_log_f32((1.0f - x) * (1.0f + x));
    float a = w - 2.5f;
    float p = 2.8102264e-8f;
    p = fmaf(p, a, 3.4327394e-7f); p = fmaf(p, a, -3.5233877e-6f); p = fmaf(p, a, -4.3915065e-6f);
    p = fmaf(p, a, 0.00021858087f); p = fmaf(p, a, -0.001253725f); p = fmaf(p, a, -0.0041776816f);
    p = fmaf(p, a, 0.24664073f); p = fmaf(p, a, 1.5014094f);
    float b = sqrtf(w) - 3.0f;
    float q = -0.00020021426f;
    q = fmaf(q, b, 0.00010095056f); q = fmaf(q, b, 0.0013493432f); q = fmaf(q, b, -0.0036734284f);
    q = fmaf(q, b, 0.0057395077f); q = fmaf(q, b, -0.007622461f); q = fmaf(q, b, 0.0094388705f);
    q = fmaf(q, b, 1.0016741f); q = fmaf(q, b, 2.8329768f);
    float y = (w < 5.0f ? p : q) * x;
    return (fabsf(x) > 1.0f || x != x) ? K_NAN : x == 1.0f ? K_INF : x == -1.0f ? -K_INF : y;
}

/* float64 erf and erfinv as backend/cpu/math.rs computes them: a Maclaurin series below 2, a
 * continued fraction for erfc below 6, Newton steps from Giles' guess for the inverse. */
__device__ double k_erf_f64(double x) {
    double ax = fabs(x);
    if (x != x) return x;
    if (ax < 2.0) {
        double x2 = x * x, term = x, sum = x, n = 0.0;
        for (;;) {
            n += 1.0;
            term *= -x2 / n;
            double add = term / (2.0 * n + 1.0);
            sum += add;
            if (fabs(add) <= 1e-17 * fabs(sum)) break;
        }
        return sum * 1.12837916709551257390;
    }
    if (ax < 6.0) {
        double f = ax, c = ax, d = 0.0;
        for (int k = 1; k < 200; k++) {
            double a = (double)k / 2.0;
            d = ax + a * d;
            d = fabs(d) < 1e-300 ? 1e-300 : d;
            c = ax + a / c;
            c = fabs(c) < 1e-300 ? 1e-300 : c;
            d = 1.0 / d;
            double delta = c * d;
            f *= delta;
            if (fabs(delta - 1.0) < 1e-16) break;
        }
        double erfc = exp(-ax * ax) / (f * 1.77245385090551602730);
        return copysign(1.0 - erfc, x);
    }
    return copysign(1.0, x);
}
__device__ double k_erfinv_f64(double y) {
    if (y != y || y < -1.0 || y > 1.0) return K_NAN;
    if (y == 1.0) return K_INF;
    if (y == -1.0) return -K_INF;
    double w = -log((1.0 - y) * (1.0 + y));
    double x;
    if (w < 5.0) {
        double a = w - 2.5, p = 2.81022636e-08;
        const double c[8] = {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                             -0.00417768164, 0.246640727, 1.50140941};
        for (int i = 0; i < 8; i++) p = c[i] + p * a;
        x = p * y;
    } else {
        double a = sqrt(w) - 3.0, p = -0.000200214257;
        const double c[8] = {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                             0.00943887047, 1.00167406, 2.83297682};
        for (int i = 0; i < 8; i++) p = c[i] + p * a;
        x = p * y;
    }
    for (int i = 0; i < 3; i++) {
        double err = k_erf_f64(x) - y;
        x -= err / (1.12837916709551257390 * exp(-x * x));
    }
    return x;
}

/* float64 to float32 rounding to odd: a later rounding to a half dtype then rounds once, as the
 * CPU's conversions of float64 results do (dtype.rs, f64_to_f32_round_odd). */
__device__ __forceinline__ float k_f32_round_odd(double v) {
    if (!isfinite(v)) return (float)v;
    float t = __double2float_rz(v);
    return (double)t == v ? t : __uint_as_float(__float_as_uint(t) | 1u);
}
