/* The helpers every generated kernel starts with. Element loops run on explicit vectors of
 * K_LANES values (GCC vector extensions), so vectorisation is a property of this source, not of
 * the compiler's heuristics: K_LANES follows the target the file is built for (16 with AVX-512,
 * 8 with AVX, 4 for SSE and NEON). The float32 transcendentals are backend/cpu/math.rs step for
 * step (same constants, same order of operations, the same fused multiply-adds where the
 * interpreter's loops use them, plus fused forms whose product is exact, which round as the
 * interpreter's separate steps do), with selects through comparison masks (or the min/max
 * instructions that equal them) instead of branches.
 * Compiled with -ffp-contract=off, so every rounding is the one the Rust code does and results
 * are equal bit for bit. Ops with no vector form here run lane by lane on the scalar helpers. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline uint32_t k_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float k_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline double k_double(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

/* mask ? a : b per lane, for vectors of type V whose comparison masks have type M. */
#define K_SEL(M, V, m, a, b) ((V)(((M)(m) & (M)(a)) | (~(M)(m) & (M)(b))))

#if defined(__AVX512F__)
#define K_LANES 16
#elif defined(__AVX__)
#define K_LANES 8
#else
#define K_LANES 4
#endif
/* K_LANES values of each compute type: one lane count for every type of a loop, so values of
 * different types line up lane for lane (float64 vectors span two registers, bytes a quarter). */
#define K_VEC(T, name) typedef T name __attribute__((vector_size(K_LANES * sizeof(T))));
K_VEC(float, k_vf32)
K_VEC(double, k_vf64)
K_VEC(int8_t, k_vi8)
K_VEC(int16_t, k_vi16)
K_VEC(int32_t, k_vi32)
K_VEC(int64_t, k_vi64)
K_VEC(uint8_t, k_vu8)
K_VEC(uint16_t, k_vu16)
K_VEC(uint32_t, k_vu32)
K_VEC(uint64_t, k_vu64)
/* Every lane x (an integer, or a float that is not -0.0: kernels' float constants go through
 * their bits instead). */
#define K_SPLAT(V, x) ((V){0} + (x))
/* Stores the K_STREAM_W-byte blocks of `bytes` bytes (a multiple of K_STREAM_W) at `src` to
 * `dst` (K_STREAM_W-aligned) with non-temporal stores: whole lines straight to memory, without
 * first reading them (see backend/cpu/stream.rs; the caller fences once per task). Targets with
 * no such store define K_STREAM_W as 0 and never call it. */
#if defined(__AVX512F__)
#define K_STREAM_W 64
static inline void k_stream(void *dst, const void *src, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64)
        _mm512_stream_si512((__m512i *)((char *)dst + b), _mm512_loadu_si512((const char *)src + b));
}
#elif defined(__AVX__)
#define K_STREAM_W 32
static inline void k_stream(void *dst, const void *src, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 32)
        _mm256_stream_si256((__m256i *)((char *)dst + b), _mm256_loadu_si256((const __m256i *)((const char *)src + b)));
}
#elif defined(__x86_64__)
#define K_STREAM_W 16
static inline void k_stream(void *dst, const void *src, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 16)
        _mm_stream_si128((__m128i *)((char *)dst + b), _mm_loadu_si128((const __m128i *)((const char *)src + b)));
}
#else
#define K_STREAM_W 0
static inline void k_stream(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
#endif
/* K_STREAM_W where there are streaming stores, else 1 (a divisor either way). */
#define K_STREAM_A (K_STREAM_W > 0 ? K_STREAM_W : 1)
/* Whether stores of vectors of type V can stream, when asked to (`wanted`): the target has
 * streaming stores and V's vectors are whole blocks. */
#define K_STREAMABLE(wanted, V) ((wanted) && K_STREAM_W > 0 && sizeof(V) % K_STREAM_A == 0)
/* Whether a pass function streams its stores to `w`, a vector of type V at a time: it can, and
 * `w` is aligned to a block. Evaluated once per call; its vectors keep the alignment. */
#define K_STREAMS(wanted, V, w) (K_STREAMABLE(wanted, V) && (uintptr_t)(w) % K_STREAM_A == 0)
/* The values before `w` (values of its type, aligned to their size) reaches a block boundary:
 * fewer than a vector's lanes wherever K_STREAMABLE holds. A pass starts its whole vectors
 * there, so rows of any length and offset stream. */
#define K_HEAD(w) (((K_STREAM_A - (uintptr_t)(w) % K_STREAM_A) % K_STREAM_A) / sizeof *(w))

/* A float32 select. */
static inline k_vf32 k_self(k_vi32 m, k_vf32 a, k_vf32 b) { return K_SEL(k_vi32, k_vf32, m, a, b); }

/* a * b + c with one rounding where the interpreter's loops use FMA (KILN_FMA), else a multiply
 * and an add. Another target without the instruction computes it lane by lane with fmaf. */
#if KILN_FMA && defined(__AVX512F__)
static inline k_vf32 k_fma(k_vf32 a, k_vf32 b, k_vf32 c) { return (k_vf32)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif KILN_FMA && defined(__FMA__)
static inline k_vf32 k_fma(k_vf32 a, k_vf32 b, k_vf32 c) { return (k_vf32)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#elif KILN_FMA && defined(__x86_64__) && !defined(__AVX__)
/* The interpreter uses FMA only on CPUs that have it, so code built for a level below the host's
 * (KILN_NATIVE_ARCH=x86-64-v2) may still issue the instruction, on its 128-bit vectors. */
static inline k_vf32 k_fma(k_vf32 a, k_vf32 b, k_vf32 c) {
    __asm__("vfmadd213ps %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));
    return a;
}
#elif KILN_FMA
static inline k_vf32 k_fma(k_vf32 a, k_vf32 b, k_vf32 c) {
    k_vf32 r;
    for (int j = 0; j < K_LANES; j++) r[j] = fmaf(a[j], b[j], c[j]);
    return r;
}
#else
static inline k_vf32 k_fma(k_vf32 a, k_vf32 b, k_vf32 c) { return a * b + c; }
#endif
/* One step of Horner's rule: p x + c. */
static inline k_vf32 k_ma(k_vf32 p, k_vf32 x, float c) { return k_fma(p, x, K_SPLAT(k_vf32, c)); }

/* a < b ? a : b and a > b ? a : b per lane: x86's min and max instructions are exactly these
 * selects (a NaN or the second of two equal values comes from b), one instruction each. */
#if defined(__AVX512F__)
static inline k_vf32 k_min_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm512_min_ps((__m512)a, (__m512)b); }
static inline k_vf32 k_max_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm512_max_ps((__m512)a, (__m512)b); }
#elif defined(__AVX__)
static inline k_vf32 k_min_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm256_min_ps((__m256)a, (__m256)b); }
static inline k_vf32 k_max_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm256_max_ps((__m256)a, (__m256)b); }
#elif defined(__x86_64__)
static inline k_vf32 k_min_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm_min_ps((__m128)a, (__m128)b); }
static inline k_vf32 k_max_f32(k_vf32 a, k_vf32 b) { return (k_vf32)_mm_max_ps((__m128)a, (__m128)b); }
#else
static inline k_vf32 k_min_f32(k_vf32 a, k_vf32 b) { return k_self(a < b, a, b); }
static inline k_vf32 k_max_f32(k_vf32 a, k_vf32 b) { return k_self(a > b, a, b); }
#endif

/* x > hi ? hi : (x < lo ? lo : x), as math.rs clamps (NaN stays NaN): hi < x ? hi : x, then
 * lo > that ? lo : that. */
static inline k_vf32 k_clamp(k_vf32 x, float lo, float hi) {
    return k_max_f32(K_SPLAT(k_vf32, lo), k_min_f32(K_SPLAT(k_vf32, hi), x));
}

static inline k_vf32 k_abs_f32(k_vf32 x) { return (k_vf32)((k_vu32)x & 0x7fffffffu); }
static inline k_vf32 k_sqrt_f32(k_vf32 x) {
    k_vf32 r;
    for (int j = 0; j < K_LANES; j++) r[j] = sqrtf(x[j]);
    return r;
}

static inline k_vf32 k_exp_f32(k_vf32 x) {
    k_vf32 xc = k_clamp(x, -104.0f, 89.0f);
    const k_vf32 magic = K_SPLAT(k_vf32, 12582912.0f);
    k_vf32 t = k_fma(xc, K_SPLAT(k_vf32, 1.44269504088896340736f), magic);
    k_vf32 n = t - magic;
    k_vi32 ni = (k_vi32)t - (k_vi32)magic;
    /* n times the high part of ln 2 is exact (at most 8 + 15 significant bits), so the fused
     * form rounds once where math.rs rounds the difference: the same bits. */
    k_vf32 r = k_fma(n, K_SPLAT(k_vf32, -1.4286068e-6f), k_fma(n, K_SPLAT(k_vf32, -0.69314575f), xc));
    k_vf32 p = K_SPLAT(k_vf32, 1.381145e-3f);
    p = k_ma(p, r, 8.370237e-3f);
    p = k_ma(p, r, 4.1668538e-2f);
    p = k_ma(p, r, 1.6666508e-1f);
    p = k_ma(p, r, 4.9999994e-1f);
    p = k_ma(p, r, 1.0f);
    p = k_ma(p, r, 1.0f);
#if defined(__AVX512F__)
    /* p 2^n in one instruction, rounded once as the two steps below round it (p 2^(n/2) is
     * exact: a normal number for every n the clamp allows). */
    (void)ni;
    return (k_vf32)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
    k_vi32 e1 = ni >> 1;
    k_vf32 s1 = (k_vf32)((k_vu32)(e1 + 127) << 23);
    k_vf32 s2 = (k_vf32)((k_vu32)(ni - e1 + 127) << 23);
    return p * s1 * s2;
#endif
}

static inline k_vf32 k_log_f32(k_vf32 x) {
    k_vi32 sub = x < FLT_MIN;
    k_vf32 xs = k_self(sub, x * 8388608.0f, x);
    k_vu32 bits = (k_vu32)xs;
    k_vi32 e = (k_vi32)((bits >> 23) & 0xffu) - 127 - (sub & 23);
    k_vf32 m = (k_vf32)((bits & 0x007fffffu) | 0x3f800000u);
    k_vi32 big = m > 1.41421356237309504880f;
    m = k_self(big, m * 0.5f, m);
    e -= big;
    k_vf32 f = m - 1.0f;
    k_vf32 s = f / (2.0f + f);
    k_vf32 s2 = s * s;
    k_vf32 q = K_SPLAT(k_vf32, 2.0f / 9.0f);
    q = k_ma(q, s2, 2.0f / 7.0f);
    q = k_ma(q, s2, 2.0f / 5.0f);
    q = k_ma(q, s2, 2.0f / 3.0f);
    k_vf32 lm = f - s * (f - s2 * q);
    k_vf32 ef = __builtin_convertvector(e, k_vf32);
    k_vf32 y = k_fma(ef, K_SPLAT(k_vf32, 0.69314575f), lm + ef * 1.4286068e-6f); /* exact product, as in k_exp_f32 */
    y = k_self(x == INFINITY, K_SPLAT(k_vf32, INFINITY), y);
    y = k_self(x == 0.0f, K_SPLAT(k_vf32, -INFINITY), y);
    return k_self((x != x) | (x < 0.0f), K_SPLAT(k_vf32, NAN), y);
}

static inline k_vf32 k_expm1_f32(k_vf32 x) {
    k_vf32 p = K_SPLAT(k_vf32, 1.0f / 362880.0f);
    p = k_ma(p, x, 1.0f / 40320.0f);
    p = k_ma(p, x, 1.0f / 5040.0f);
    p = k_ma(p, x, 1.0f / 720.0f);
    p = k_ma(p, x, 1.0f / 120.0f);
    p = k_ma(p, x, 1.0f / 24.0f);
    p = k_ma(p, x, 1.0f / 6.0f);
    p = k_ma(p, x, 0.5f);
    p = k_ma(p, x, 1.0f);
    k_vf32 small = p * x;
    k_vf32 big = k_exp_f32(x) - 1.0f;
    return k_self(k_abs_f32(x) < 0.5f, small, big);
}

static inline k_vf32 k_log1p_f32(k_vf32 x) {
    k_vf32 u = 1.0f + x;
    k_vf32 d = u - 1.0f;
    k_vf32 y = k_log_f32(u) * (x / d);
    y = k_self(u == INFINITY, K_SPLAT(k_vf32, INFINITY), y);
    return k_self(d == 0.0f, x, y);
}

static inline k_vf32 k_tanh_f32(k_vf32 x) {
    k_vf32 xc = k_clamp(x, -9.0f, 9.0f);
    k_vf32 e = k_expm1_f32(2.0f * xc);
    return e / (e + 2.0f);
}

static inline k_vf32 k_sigmoid_f32(k_vf32 x) {
    k_vf32 e = k_exp_f32(-k_abs_f32(x));
    k_vf32 r = 1.0f / (1.0f + e);
    return k_self(x >= 0.0f, r, e * r);
}

static inline k_vf32 k_erf_f32(k_vf32 x) {
    k_vf32 xc = k_clamp(x, -4.0f, 4.0f);
    k_vf32 z = xc * xc;
    k_vf32 p = K_SPLAT(k_vf32, -1.8333765e-8f);
    p = k_ma(p, z, 6.5698346e-6f);
    p = k_ma(p, z, 5.3509144e-4f);
    p = k_ma(p, z, 5.436628e-3f);
    p = k_ma(p, z, 7.68524e-2f);
    p = k_ma(p, z, 2.621096e-1f);
    p = k_ma(p, z, 1.5983012f);
    k_vf32 q = K_SPLAT(k_vf32, 8.8774505e-5f);
    q = k_ma(q, z, 1.8453536e-3f);
    q = k_ma(q, z, 2.1859685e-2f);
    q = k_ma(q, z, 1.6127592e-1f);
    q = k_ma(q, z, 7.044412e-1f);
    q = k_ma(q, z, 1.4164575f);
    k_vf32 r = xc * p / q;
    return k_clamp(r, -1.0f, 1.0f);
}

static inline k_vf32 k_erfinv_f32(k_vf32 x) {
    k_vf32 w = -k_log_f32((1.0f - x) * (1.0f + x));
    k_vf32 a = w - 2.5f;
    k_vf32 p = K_SPLAT(k_vf32, 2.8102264e-8f);
    p = k_ma(p, a, 3.4327394e-7f);
    p = k_ma(p, a, -3.5233877e-6f);
    p = k_ma(p, a, -4.3915065e-6f);
    p = k_ma(p, a, 0.00021858087f);
    p = k_ma(p, a, -0.001253725f);
    p = k_ma(p, a, -0.0041776816f);
    p = k_ma(p, a, 0.24664073f);
    p = k_ma(p, a, 1.5014094f);
    k_vf32 b = k_sqrt_f32(w) - 3.0f;
    k_vf32 q = K_SPLAT(k_vf32, -0.00020021426f);
    q = k_ma(q, b, 0.00010095056f);
    q = k_ma(q, b, 0.0013493432f);
    q = k_ma(q, b, -0.0036734284f);
    q = k_ma(q, b, 0.0057395077f);
    q = k_ma(q, b, -0.007622461f);
    q = k_ma(q, b, 0.0094388705f);
    q = k_ma(q, b, 1.0016741f);
    q = k_ma(q, b, 2.8329768f);
    k_vf32 y = k_self(w < 5.0f, p, q) * x;
    y = k_self(x == -1.0f, K_SPLAT(k_vf32, -INFINITY), y);
    y = k_self(x == 1.0f, K_SPLAT(k_vf32, INFINITY), y);
    return k_self((k_abs_f32(x) > 1.0f) | (x != x), K_SPLAT(k_vf32, NAN), y);
}

/* Scalar helpers for the ops computed lane by lane. */

static inline double k_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    double r = 1.0 / (1.0 + e);
    return x >= 0.0 ? r : e * r;
}

/* K_SATURATE, K_INT_DIV and K_INT_REM come from ../../integer_ops.h, shared with the CUDA prelude. */

/* Float remainder with the sign of the divisor, as numpy's mod. */
static inline float k_rem_f32(float x, float y) {
    float r = fmodf(x, y);
    return (r != 0.0f && ((r < 0.0f) != (y < 0.0f))) ? r + y : r;
}
static inline double k_rem_f64(double x, double y) {
    double r = fmod(x, y);
    return (r != 0.0 && ((r < 0.0) != (y < 0.0))) ? r + y : r;
}

static inline float k_logaddexp_f32(float x, float y) {
    float m = x > y ? x : y;
    if (m == -INFINITY || m == INFINITY || m != m) return (x != x || y != y) ? NAN : m;
    return m + log1pf(expf(-fabsf(x - y)));
}
static inline double k_logaddexp_f64(double x, double y) {
    double m = x > y ? x : y;
    if (m == -INFINITY || m == INFINITY || m != m) return (x != x || y != y) ? NAN : m;
    return m + log1p(exp(-fabs(x - y)));
}

/* Integer power by squaring with wrapping; a negative exponent gives 0, as in mlx. */
#define K_INT_POW(T, name) \
    static inline T name(T b, T e) { \
        if (e < 0) return (T)0; \
        T r = 1; \
        while (e > 0) { if (e & 1) r = (T)(r * b); b = (T)(b * b); e = (T)(e >> 1); } \
        return r; \
    }
K_INT_POW(int8_t, k_pow_i8)
K_INT_POW(int16_t, k_pow_i16)
K_INT_POW(int32_t, k_pow_i32)
K_INT_POW(int64_t, k_pow_i64)
K_INT_POW(uint8_t, k_pow_u8)
K_INT_POW(uint16_t, k_pow_u16)
K_INT_POW(uint32_t, k_pow_u32)
K_INT_POW(uint64_t, k_pow_u64)

/* Folds keep sixteen accumulators (lane j folds elements 16 m + j) in vectors of the register
 * width: K_A64 lanes of a 64-bit accumulator (float64, int64, uint64) per vector, K_LANES of a
 * float32 one (max and min). Wider vectors than the registers are kept in memory by gcc. */
#define K_A64 (K_LANES / 2)
#define K_ACC(T, name) typedef T name __attribute__((vector_size(K_A64 * 8)));
K_ACC(double, k_af64)
K_ACC(int64_t, k_ai64)
K_ACC(uint64_t, k_au64)
/* K_A64 values of the narrower types, as a fold reads them before widening. */
#define K_NARROW(T, name) typedef T name __attribute__((vector_size(K_A64 * sizeof(T))));
K_NARROW(float, k_lf32)
K_NARROW(int32_t, k_li32)
K_NARROW(uint32_t, k_lu32)
K_NARROW(int16_t, k_li16)
K_NARROW(uint16_t, k_lu16)
K_NARROW(int8_t, k_li8)
K_NARROW(uint8_t, k_lu8)
/* The K_A64 values widened lane by lane to their accumulator lanes: exact conversions (float to
 * double, sign or zero extension), one instruction each where the target has it; gcc 12 lowers
 * __builtin_convertvector to shuffles of halves for these, and to scalar code for bytes. */
#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE4_1__))
static inline __m128i k_low(const void *x, size_t bytes) { long long b = 0; memcpy(&b, x, bytes); return _mm_cvtsi64_si128(b); }
#endif
#if defined(__AVX512F__)
static inline k_af64 k_widen_f32(k_lf32 x) { return (k_af64)_mm512_cvtps_pd((__m256)x); }
static inline k_ai64 k_widen_i32(k_li32 x) { return (k_ai64)_mm512_cvtepi32_epi64((__m256i)x); }
static inline k_ai64 k_widen_u32(k_lu32 x) { return (k_ai64)_mm512_cvtepu32_epi64((__m256i)x); }
static inline k_ai64 k_widen_i16(k_li16 x) { return (k_ai64)_mm512_cvtepi16_epi64((__m128i)x); }
static inline k_ai64 k_widen_u16(k_lu16 x) { return (k_ai64)_mm512_cvtepu16_epi64((__m128i)x); }
static inline k_ai64 k_widen_i8(k_li8 x) { return (k_ai64)_mm512_cvtepi8_epi64(k_low(&x, 8)); }
static inline k_ai64 k_widen_u8(k_lu8 x) { return (k_ai64)_mm512_cvtepu8_epi64(k_low(&x, 8)); }
#elif defined(__AVX2__)
static inline k_af64 k_widen_f32(k_lf32 x) { return (k_af64)_mm256_cvtps_pd((__m128)x); }
static inline k_ai64 k_widen_i32(k_li32 x) { return (k_ai64)_mm256_cvtepi32_epi64((__m128i)x); }
static inline k_ai64 k_widen_u32(k_lu32 x) { return (k_ai64)_mm256_cvtepu32_epi64((__m128i)x); }
static inline k_ai64 k_widen_i16(k_li16 x) { return (k_ai64)_mm256_cvtepi16_epi64(k_low(&x, 8)); }
static inline k_ai64 k_widen_u16(k_lu16 x) { return (k_ai64)_mm256_cvtepu16_epi64(k_low(&x, 8)); }
static inline k_ai64 k_widen_i8(k_li8 x) { return (k_ai64)_mm256_cvtepi8_epi64(k_low(&x, 4)); }
static inline k_ai64 k_widen_u8(k_lu8 x) { return (k_ai64)_mm256_cvtepu8_epi64(k_low(&x, 4)); }
#elif defined(__SSE4_1__) && !defined(__AVX__)
static inline k_af64 k_widen_f32(k_lf32 x) { return (k_af64)_mm_cvtps_pd(_mm_castsi128_ps(k_low(&x, 8))); }
static inline k_ai64 k_widen_i32(k_li32 x) { return (k_ai64)_mm_cvtepi32_epi64(k_low(&x, 8)); }
static inline k_ai64 k_widen_u32(k_lu32 x) { return (k_ai64)_mm_cvtepu32_epi64(k_low(&x, 8)); }
static inline k_ai64 k_widen_i16(k_li16 x) { return (k_ai64)_mm_cvtepi16_epi64(k_low(&x, 4)); }
static inline k_ai64 k_widen_u16(k_lu16 x) { return (k_ai64)_mm_cvtepu16_epi64(k_low(&x, 4)); }
static inline k_ai64 k_widen_i8(k_li8 x) { return (k_ai64)_mm_cvtepi8_epi64(k_low(&x, 2)); }
static inline k_ai64 k_widen_u8(k_lu8 x) { return (k_ai64)_mm_cvtepu8_epi64(k_low(&x, 2)); }
#else
#define K_WIDEN(name, V, W) static inline W name(V x) { return __builtin_convertvector(x, W); }
K_WIDEN(k_widen_f32, k_lf32, k_af64)
K_WIDEN(k_widen_i32, k_li32, k_ai64)
K_WIDEN(k_widen_u32, k_lu32, k_ai64)
K_WIDEN(k_widen_i16, k_li16, k_ai64)
K_WIDEN(k_widen_u16, k_lu16, k_ai64)
K_WIDEN(k_widen_i8, k_li8, k_ai64)
K_WIDEN(k_widen_u8, k_lu8, k_ai64)
#endif
