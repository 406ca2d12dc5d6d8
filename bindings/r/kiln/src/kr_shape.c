/* Shape ops: reshape, transpose, broadcast, indexing and joining. Axes are 0-based here; the R
 * code maps R's 1-based axes (kiln's shape equals R's dim, see kr_convert.c). */
#include "kiln_r.h"

/* x with (row-major) shape `shape`. */
SEXP kr_reshape(SEXP x, SEXP shape) {
    size_t n = 0;
    const int *s = kr_shape_arg(shape, &n);
    kiln_array res = kiln_array_new();
    kr_check(kiln_reshape(&res, kr_get(x), s, n, kr_stream), "reshape");
    return kr_wrap(res);
}

/* x with its axes in the order `perm` (NULL: reversed). */
SEXP kr_transpose(SEXP x, SEXP perm) {
    kiln_array res = kiln_array_new();
    if (Rf_isNull(perm)) {
        kr_check(kiln_transpose(&res, kr_get(x), kr_stream), "t");
    } else {
        size_t n = 0;
        const int *p = kr_shape_arg(perm, &n);
        kr_check(kiln_transpose_axes(&res, kr_get(x), p, n, kr_stream), "aperm");
    }
    return kr_wrap(res);
}

/* x broadcast to `shape`. */
SEXP kr_broadcast_to(SEXP x, SEXP shape) {
    size_t n = 0;
    const int *s = kr_shape_arg(shape, &n);
    kiln_array res = kiln_array_new();
    kr_check(kiln_broadcast_to(&res, kr_get(x), s, n, kr_stream), "broadcast");
    return kr_wrap(res);
}

/* The slices of x at 0-based `index` along `axis`. */
SEXP kr_take(SEXP x, SEXP index, SEXP axis) {
    kiln_array idx = kr_int_array(index), res = kiln_array_new();
    int rc = kiln_take_axis(&res, kr_get(x), idx, Rf_asInteger(axis), kr_stream);
    kiln_array_free(idx);
    kr_check(rc, "[");
    return kr_wrap(res);
}

/* A copy of x with `values` written at 0-based `index` along `axis`. */
SEXP kr_put(SEXP x, SEXP index, SEXP values, SEXP axis) {
    kiln_array idx = kr_int_array(index), res = kiln_array_new();
    int rc = kiln_put_along_axis(&res, kr_get(x), idx, kr_get(values), Rf_asInteger(axis), kr_stream);
    kiln_array_free(idx);
    kr_check(rc, "[<-");
    return kr_wrap(res);
}

/* A list of mlx arrays joined along `axis`. */
SEXP kr_concatenate(SEXP list, SEXP axis) {
    kiln_vector_array v = kr_vector(list);
    kiln_array res = kiln_array_new();
    int rc = kiln_concatenate_axis(&res, v, Rf_asInteger(axis), kr_stream);
    kiln_vector_array_free(v);
    kr_check(rc, "bind");
    return kr_wrap(res);
}
