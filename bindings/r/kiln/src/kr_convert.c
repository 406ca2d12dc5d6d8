/* R data to kiln arrays and back. R stores an array of dim (d1..dn) column-major, which is, in
 * memory, a row-major array of shape (dn..d1): the data is copied as that shape and its axes
 * reversed with kiln_transpose, so kiln's shape is R's dim (and the reverse on the way out). */
#include <string.h>

#include "kiln_r.h"

/* An mlx array of `dtype` and dim `dim` from the doubles `data` (column-major). */
SEXP kr_from_r(SEXP data, SEXP dim, SEXP dtype) {
    size_t ndim = 0;
    const int *d = kr_shape_arg(dim, &ndim);
    int *rev = (int *)R_alloc(ndim > 0 ? ndim : 1, sizeof(int));
    for (size_t i = 0; i < ndim; i++) rev[i] = d[ndim - 1 - i];
    kiln_array raw = kiln_array_new(), t = kiln_array_new(), res = kiln_array_new();
    int rc = kiln_array_new_data(&raw, REAL(data), rev, ndim, KILN_FLOAT64) ||
             kiln_transpose(&t, raw, kr_stream) || kiln_astype(&res, t, Rf_asInteger(dtype), kr_stream) ||
             kiln_array_eval(res);
    kiln_array_free(raw);
    kiln_array_free(t);
    if (rc) kiln_array_free(res);
    kr_check(rc, "as_mlx");
    return kr_wrap(res);
}

/* The elements of `x` as an R vector in column-major order: logical for bool, integer for the
 * integer dtypes that fit, complex for complex64, double otherwise. */
SEXP kr_to_r(SEXP x) {
    kiln_array a = kr_get(x);
    kiln_dtype dt = 0;
    kr_check(kiln_array_dtype(&dt, a), "as.array");
    kiln_dtype to = KILN_FLOAT64;
    SEXPTYPE type = REALSXP;
    if (dt == KILN_BOOL) to = KILN_BOOL, type = LGLSXP;
    else if (dt == KILN_INT8 || dt == KILN_INT16 || dt == KILN_INT32 || dt == KILN_UINT8 || dt == KILN_UINT16)
        to = KILN_INT32, type = INTSXP;
    else if (dt == KILN_COMPLEX64) to = KILN_COMPLEX64, type = CPLXSXP;

    kiln_array t = kiln_array_new(), c = kiln_array_new();
    const void *data = NULL;
    size_t n = 0;
    int rc = kiln_transpose(&t, a, kr_stream) || kiln_astype(&c, t, to, kr_stream) || kiln_array_eval(c) ||
             kiln_array_size(&n, c) || kiln_array_data(&data, c);
    kiln_array_free(t);
    if (rc) kiln_array_free(c);
    kr_check(rc, "converting an mlx array to R");

    SEXP out = Rf_allocVector(type, (R_xlen_t)n);
    if (type == REALSXP) memcpy(REAL(out), data, n * sizeof(double));
    else if (type == INTSXP) memcpy(INTEGER(out), data, n * sizeof(int));
    else if (type == CPLXSXP)
        for (size_t i = 0; i < n; i++) {
            COMPLEX(out)[i].r = ((const float *)data)[2 * i];
            COMPLEX(out)[i].i = ((const float *)data)[2 * i + 1];
        }
    else for (size_t i = 0; i < n; i++) LOGICAL(out)[i] = ((const unsigned char *)data)[i] != 0;
    kiln_array_free(c);
    return out;
}

/* The shape of `x` (R's dim). */
SEXP kr_shape(SEXP x) {
    kiln_array a = kr_get(x);
    size_t ndim = 0;
    const int *shape = NULL;
    kr_check(kiln_array_ndim(&ndim, a) || kiln_array_shape(&shape, a), "mlx_shape");
    SEXP out = Rf_allocVector(INTSXP, (R_xlen_t)ndim);
    if (ndim > 0) memcpy(INTEGER(out), shape, ndim * sizeof(int));
    return out;
}

/* The dtype code of `x` (kiln's KILN_* constant). */
SEXP kr_dtype(SEXP x) {
    kiln_dtype dt = 0;
    kr_check(kiln_array_dtype(&dt, kr_get(x)), "mlx_dtype");
    return Rf_ScalarInteger(dt);
}

/* `x` converted to dtype code `dtype`. */
SEXP kr_astype(SEXP x, SEXP dtype) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_astype(&res, kr_get(x), Rf_asInteger(dtype), kr_stream), "astype");
    return kr_wrap(res);
}

/* Evaluates a list of mlx arrays together. */
SEXP kr_eval(SEXP list) {
    kiln_vector_array v = kr_vector(list);
    int rc = kiln_eval(v);
    kiln_vector_array_free(v);
    kr_check(rc, "mlx_eval");
    return R_NilValue;
}
