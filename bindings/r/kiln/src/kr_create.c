/* Array constructors: filled arrays, ranges, identity matrices and random samples. */
#include "kiln_r.h"

/* An array of `shape` and dtype code `dtype` filled with the mlx scalar `value`. */
SEXP kr_full(SEXP shape, SEXP value, SEXP dtype) {
    size_t n = 0;
    const int *s = kr_shape_arg(shape, &n);
    kiln_array res = kiln_array_new();
    kr_check(kiln_full(&res, s, n, kr_get(value), Rf_asInteger(dtype), kr_stream), "mlx_full");
    return kr_wrap(res);
}

/* start, start + step, ... below stop. */
SEXP kr_arange(SEXP start, SEXP stop, SEXP step, SEXP dtype) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_arange(&res, Rf_asReal(start), Rf_asReal(stop), Rf_asReal(step), Rf_asInteger(dtype), kr_stream),
             "mlx_arange");
    return kr_wrap(res);
}

/* An n x m matrix with ones on diagonal k. */
SEXP kr_eye(SEXP n, SEXP m, SEXP k, SEXP dtype) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_eye(&res, Rf_asInteger(n), Rf_asInteger(m), Rf_asInteger(k), Rf_asInteger(dtype), kr_stream),
             "mlx_eye");
    return kr_wrap(res);
}

/* The key of an optional mlx argument (NULL: kiln's global random state). */
static kiln_array key_of(SEXP key) { return Rf_isNull(key) ? kiln_array_new() : kr_get(key); }

/* Normal samples of mean `mean` and standard deviation `sd`. */
SEXP kr_random_normal(SEXP shape, SEXP mean, SEXP sd, SEXP dtype, SEXP key) {
    size_t n = 0;
    const int *s = kr_shape_arg(shape, &n);
    kiln_array res = kiln_array_new();
    kr_check(kiln_random_normal(&res, s, n, Rf_asInteger(dtype), (float)Rf_asReal(mean), (float)Rf_asReal(sd),
                                key_of(key), kr_stream),
             "mlx_rand_normal");
    return kr_wrap(res);
}

/* Uniform samples in [min, max). */
SEXP kr_random_uniform(SEXP shape, SEXP min, SEXP max, SEXP dtype, SEXP key) {
    size_t n = 0;
    const int *s = kr_shape_arg(shape, &n);
    kiln_array res = kiln_array_new();
    kr_check(kiln_random_uniform(&res, Rf_asReal(min), Rf_asReal(max), s, n, Rf_asInteger(dtype), key_of(key),
                                 kr_stream),
             "mlx_rand_uniform");
    return kr_wrap(res);
}

/* A PRNG key from a seed. */
SEXP kr_key(SEXP seed) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_random_key(&res, (uint64_t)Rf_asReal(seed)), "mlx_key");
    return kr_wrap(res);
}
