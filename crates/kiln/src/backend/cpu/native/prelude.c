/* The helpers every generated kernel starts with: the float32 transcendentals of
 * backend/cpu/math.rs, step for step (same constants, same order of operations, the same
 * fused multiply-adds where the interpreter's loops use them, selects instead of branches so
 * loops vectorise), and conversions with astype semantics. Compiled with -ffp-contract=off, so
 * every rounding is the one the Rust code does and results are equal bit for bit. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if KILN_FMA
#define K_MA(a, b, c) fmaf(a, b, c)
#else
#define K_MA(a, b, c) ((a) * (b) + (c))
#endif

static inline uint32_t k_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float k_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* x > hi ? hi : (x < lo ? lo : x), as math.rs clamps (NaN stays NaN), written as two selects
 * in the operand order of vminps/vmaxps so each vectorises to one compare and one blend. */
static inline float k_clampf(float x, float lo, float hi) {
    float below = hi < x ? hi : x;
    return lo > below ? lo : below;
}

static inline float k_exp_f32(float x) {
    float xc = k_clampf(x, -104.0f, 89.0f);
    const float magic = 12582912.0f;
    float t = xc * 1.44269504088896340736f + magic;
    float n = t - magic;
    int32_t ni = (int32_t)(k_bits(t) - k_bits(magic));
    float r = (xc - n * 0.69314575f) - n * 1.4286068e-6f;
    float p = 1.0f / 5040.0f;
    p = K_MA(p, r, 1.0f / 720.0f);
    p = K_MA(p, r, 1.0f / 120.0f);
    p = K_MA(p, r, 1.0f / 24.0f);
    p = K_MA(p, r, 1.0f / 6.0f);
    p = K_MA(p, r, 0.5f);
    p = K_MA(p, r, 1.0f);
    p = K_MA(p, r, 1.0f);
    int32_t e1 = ni >> 1;
    float s1 = k_float((uint32_t)(e1 + 127) << 23);
    float s2 = k_float((uint32_t)(ni - e1 + 127) << 23);
    return p * s1 * s2;
}

static inline float k_log_f32(float x) {
    int sub = x < FLT_MIN;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t bits = k_bits(xs);
    int32_t e = (int32_t)((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
    float m = k_float((bits & 0x007fffffu) | 0x3f800000u);
    int big = m > 1.41421356237309504880f;
    m = big ? m * 0.5f : m;
    e += big;
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float s2 = s * s;
    float q = 2.0f / 9.0f;
    q = K_MA(q, s2, 2.0f / 7.0f);
    q = K_MA(q, s2, 2.0f / 5.0f);
    q = K_MA(q, s2, 2.0f / 3.0f);
    float lm = f - s * (f - s2 * q);
    float ef = (float)e;
    float y = ef * 0.69314575f + (lm + ef * 1.4286068e-6f);
    return (x != x || x < 0.0f) ? NAN : x == 0.0f ? -INFINITY : x == INFINITY ? INFINITY : y;
}

static inline float k_expm1_f32(float x) {
    float p = 1.0f / 362880.0f;
    p = K_MA(p, x, 1.0f / 40320.0f);
    p = K_MA(p, x, 1.0f / 5040.0f);
    p = K_MA(p, x, 1.0f / 720.0f);
    p = K_MA(p, x, 1.0f / 120.0f);
    p = K_MA(p, x, 1.0f / 24.0f);
    p = K_MA(p, x, 1.0f / 6.0f);
    p = K_MA(p, x, 0.5f);
    p = K_MA(p, x, 1.0f);
    float small = p * x;
    float big = k_exp_f32(x) - 1.0f;
    return fabsf(x) < 0.5f ? small : big;
}

static inline float k_log1p_f32(float x) {
    float u = 1.0f + x;
    float d = u - 1.0f;
    float y = k_log_f32(u) * (x / d);
    return d == 0.0f ? x : u == INFINITY ? INFINITY : y;
}

static inline float k_tanh_f32(float x) {
    float xc = k_clampf(x, -9.0f, 9.0f);
    float e = k_expm1_f32(2.0f * xc);
    return e / (e + 2.0f);
}

static inline float k_sigmoid_f32(float x) {
    float e = k_exp_f32(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}

static inline double k_sigmoid_f64(double x) {
    double e = exp(-fabs(x));
    double r = 1.0 / (1.0 + e);
    return x >= 0.0 ? r : e * r;
}

static inline float k_erf_f32(float x) {
    float xc = k_clampf(x, -4.0f, 4.0f);
    float z = xc * xc;
    float p = -1.8333765e-8f;
    p = K_MA(p, z, 6.5698346e-6f);
    p = K_MA(p, z, 5.3509144e-4f);
    p = K_MA(p, z, 5.436628e-3f);
    p = K_MA(p, z, 7.68524e-2f);
    p = K_MA(p, z, 2.621096e-1f);
    p = K_MA(p, z, 1.5983012f);
    float q = 8.8774505e-5f;
    q = K_MA(q, z, 1.8453536e-3f);
    q = K_MA(q, z, 2.1859685e-2f);
    q = K_MA(q, z, 1.6127592e-1f);
    q = K_MA(q, z, 7.044412e-1f);
    q = K_MA(q, z, 1.4164575f);
    float r = xc * p / q;
    return k_clampf(r, -1.0f, 1.0f);
}

static inline float k_erfinv_f32(float x) {
    float w = -k_log_f32((1.0f - x) * (1.0f + x));
    float a = w - 2.5f;
    float p = 2.8102264e-8f;
    p = K_MA(p, a, 3.4327394e-7f);
    p = K_MA(p, a, -3.5233877e-6f);
    p = K_MA(p, a, -4.3915065e-6f);
    p = K_MA(p, a, 0.00021858087f);
    p = K_MA(p, a, -0.001253725f);
    p = K_MA(p, a, -0.0041776816f);
    p = K_MA(p, a, 0.24664073f);
    p = K_MA(p, a, 1.5014094f);
    float b = sqrtf(w) - 3.0f;
    float q = -0.00020021426f;
    q = K_MA(q, b, 0.00010095056f);
    q = K_MA(q, b, 0.0013493432f);
    q = K_MA(q, b, -0.0036734284f);
    q = K_MA(q, b, 0.0057395077f);
    q = K_MA(q, b, -0.007622461f);
    q = K_MA(q, b, 0.0094388705f);
    q = K_MA(q, b, 1.0016741f);
    q = K_MA(q, b, 2.8329768f);
    float y = (w < 5.0f ? p : q) * x;
    return (fabsf(x) > 1.0f || x != x) ? NAN : x == 1.0f ? INFINITY : x == -1.0f ? -INFINITY : y;
}

/* Float to integer with Rust's `as`: truncate toward zero, saturate, NaN gives 0. The bounds are
 * compared in double, where they are exact (a float promotes exactly). */
#define K_SATURATE(T, lo, hi, v) \
    ((v) != (v) ? (T)0 : (double)(v) >= (double)(hi) + 1.0 ? (T)(hi) : (double)(v) <= (double)(lo) - 1.0 ? (T)(lo) : (T)(v))

/* Integer division and remainder with numpy's floor semantics, 0 for a zero divisor, and
 * wrapping for MIN / -1 (where C would trap). */
#define K_INT_DIV(T, signed_, x, y) \
    ((y) == 0 ? (T)0 : (signed_) && (y) == (T)-1 ? (T)(0 - (x)) : \
     (T)((x) / (y) - ((signed_) && (x) % (y) != 0 && (((x) < 0) != ((y) < 0)))))
#define K_INT_REM(T, signed_, x, y) \
    ((y) == 0 || ((signed_) && (y) == (T)-1) ? (T)0 : \
     (T)((x) % (y) + (((signed_) && (x) % (y) != 0 && ((((x) % (y)) < 0) != ((y) < 0))) ? (y) : 0)))

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

static inline double k_double(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

/* Integer power by squaring with wrapping; a negative exponent gives 0 unless the base is +-1. */
#define K_INT_POW(T, name) \
    static inline T name(T b, T e) { \
        if (e < 0) return b == 1 ? (T)1 : b == (T)-1 ? ((e & 1) ? b : (T)1) : (T)0; \
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

/* Eight values of each compute type, for folds written lane by lane. */
#define K_VEC(T, name) typedef T name __attribute__((vector_size(8 * sizeof(T))));
K_VEC(float, k_f32x8)
K_VEC(double, k_f64x8)
K_VEC(int8_t, k_i8x8)
K_VEC(int16_t, k_i16x8)
K_VEC(int32_t, k_i32x8)
K_VEC(int64_t, k_i64x8)
K_VEC(uint8_t, k_u8x8)
K_VEC(uint16_t, k_u16x8)
K_VEC(uint32_t, k_u32x8)
K_VEC(uint64_t, k_u64x8)
/* Eight values widened lane by lane to their 64-bit accumulator lanes, as a fold reads them:
 * exact conversions (float to double, sign or zero extension), so the two forms below are equal.
 * With AVX-512 each is one instruction; gcc 12 lowers __builtin_convertvector to shuffles of
 * halves for these (2.3x slower in a float32 sum) and to scalar code for bytes. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline k_f64x8 k_widen_f32(k_f32x8 x) { return (k_f64x8)_mm512_cvtps_pd((__m256)x); }
static inline k_i64x8 k_widen_i32(k_i32x8 x) { return (k_i64x8)_mm512_cvtepi32_epi64((__m256i)x); }
static inline k_i64x8 k_widen_u32(k_u32x8 x) { return (k_i64x8)_mm512_cvtepu32_epi64((__m256i)x); }
static inline k_i64x8 k_widen_i16(k_i16x8 x) { return (k_i64x8)_mm512_cvtepi16_epi64((__m128i)x); }
static inline k_i64x8 k_widen_u16(k_u16x8 x) { return (k_i64x8)_mm512_cvtepu16_epi64((__m128i)x); }
static inline __m128i k_low64(const void *x) { long long b; memcpy(&b, x, 8); return _mm_cvtsi64_si128(b); }
static inline k_i64x8 k_widen_i8(k_i8x8 x) { return (k_i64x8)_mm512_cvtepi8_epi64(k_low64(&x)); }
static inline k_i64x8 k_widen_u8(k_u8x8 x) { return (k_i64x8)_mm512_cvtepu8_epi64(k_low64(&x)); }
#else
#define K_WIDEN(name, V, W) static inline W name(V x) { return __builtin_convertvector(x, W); }
K_WIDEN(k_widen_f32, k_f32x8, k_f64x8)
K_WIDEN(k_widen_i32, k_i32x8, k_i64x8)
K_WIDEN(k_widen_u32, k_u32x8, k_i64x8)
K_WIDEN(k_widen_i16, k_i16x8, k_i64x8)
K_WIDEN(k_widen_u16, k_u16x8, k_i64x8)
K_WIDEN(k_widen_i8, k_i8x8, k_i64x8)
K_WIDEN(k_widen_u8, k_u8x8, k_i64x8)
#endif
/* mask ? a : b per lane, for vectors of type V whose comparison masks have type M. */
#define K_SEL(M, V, m, a, b) ((V)(((M)(m) & (M)(a)) | (~(M)(m) & (M)(b))))
