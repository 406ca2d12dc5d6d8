/* The elementwise ops and reductions, looked up by name in tables so each R-level operator is
 * one table row rather than one C function. */
#include <string.h>

#include "kiln_r.h"

typedef int (*unary_fn)(kiln_array *, kiln_array, kiln_stream);
typedef int (*binary_fn)(kiln_array *, kiln_array, kiln_array, kiln_stream);
typedef int (*reduce_all_fn)(kiln_array *, kiln_array, bool, kiln_stream);
typedef int (*reduce_axes_fn)(kiln_array *, kiln_array, const int *, size_t, bool, kiln_stream);

static const struct { const char *name; unary_fn fn; } UNARY[] = {
    {"abs", kiln_abs},         {"negative", kiln_negative}, {"sign", kiln_sign},         {"exp", kiln_exp},
    {"expm1", kiln_expm1},     {"log", kiln_log},           {"log1p", kiln_log1p},       {"log2", kiln_log2},
    {"log10", kiln_log10},     {"sqrt", kiln_sqrt},         {"sin", kiln_sin},           {"cos", kiln_cos},
    {"tan", kiln_tan},         {"asin", kiln_arcsin},       {"acos", kiln_arccos},       {"atan", kiln_arctan},
    {"sinh", kiln_sinh},       {"cosh", kiln_cosh},         {"tanh", kiln_tanh},         {"asinh", kiln_arcsinh},
    {"acosh", kiln_arccosh},   {"atanh", kiln_arctanh},     {"erf", kiln_erf},           {"erfinv", kiln_erfinv},
    {"sigmoid", kiln_sigmoid}, {"floor", kiln_floor},       {"ceiling", kiln_ceil},      {"not", kiln_logical_not},
    {"is.nan", kiln_isnan},    {"is.infinite", kiln_isinf}, {"is.finite", kiln_isfinite},
    {"stop_gradient", kiln_stop_gradient},
};

static const struct { const char *name; binary_fn fn; } BINARY[] = {
    {"+", kiln_add},         {"-", kiln_subtract},       {"*", kiln_multiply},  {"/", kiln_divide},
    {"^", kiln_power},       {"%/%", kiln_floor_divide}, {"%%", kiln_remainder}, {"==", kiln_equal},
    {"!=", kiln_not_equal},  {"<", kiln_less},           {"<=", kiln_less_equal}, {">", kiln_greater},
    {">=", kiln_greater_equal}, {"&", kiln_logical_and}, {"|", kiln_logical_or}, {"maximum", kiln_maximum},
    {"minimum", kiln_minimum}, {"matmul", kiln_matmul},
};

static const struct { const char *name; reduce_all_fn all; reduce_axes_fn axes; } REDUCE[] = {
    {"sum", kiln_sum, kiln_sum_axes}, {"prod", kiln_prod, kiln_prod_axes}, {"max", kiln_max, kiln_max_axes},
    {"min", kiln_min, kiln_min_axes}, {"all", kiln_all, kiln_all_axes},    {"any", kiln_any, kiln_any_axes},
    {"mean", kiln_mean, kiln_mean_axes},
};

/* The row of `table` whose first member, its name, is `name`. */
static int find_op(const void *table, size_t count, size_t stride, const char *name) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(*(const char *const *)((const char *)table + i * stride), name) == 0) return (int)i;
    Rf_error("kiln has no op named '%s'", name);
}

#define FIND(table, name) find_op(table, sizeof(table) / sizeof(table[0]), sizeof(table[0]), name)

/* op(x) for a unary op named `op`. */
SEXP kr_unary(SEXP op, SEXP x) {
    const char *name = CHAR(STRING_ELT(op, 0));
    int i = FIND(UNARY, name);
    kiln_array res = kiln_array_new();
    kr_check(UNARY[i].fn(&res, kr_get(x), kr_stream), name);
    return kr_wrap(res);
}

/* a op b for a binary op named `op` (broadcasting). */
SEXP kr_binary(SEXP op, SEXP a, SEXP b) {
    const char *name = CHAR(STRING_ELT(op, 0));
    int i = FIND(BINARY, name);
    kiln_array res = kiln_array_new();
    kr_check(BINARY[i].fn(&res, kr_get(a), kr_get(b), kr_stream), name);
    return kr_wrap(res);
}

/* The reduction `op` of `x` over `axes` (0-based; NULL: all elements). */
SEXP kr_reduce(SEXP op, SEXP x, SEXP axes, SEXP keepdims) {
    const char *name = CHAR(STRING_ELT(op, 0));
    int i = FIND(REDUCE, name);
    bool keep = Rf_asLogical(keepdims) == TRUE;
    kiln_array res = kiln_array_new();
    if (Rf_isNull(axes)) {
        kr_check(REDUCE[i].all(&res, kr_get(x), keep, kr_stream), name);
    } else {
        size_t n = 0;
        const int *ax = kr_shape_arg(axes, &n);
        kr_check(REDUCE[i].axes(&res, kr_get(x), ax, n, keep, kr_stream), name);
    }
    return kr_wrap(res);
}

/* Running sums, products, maxima or minima along `axis` (inclusive, as R's cumsum). */
SEXP kr_cumulative(SEXP op, SEXP x, SEXP axis) {
    static const struct { const char *name; int (*fn)(kiln_array *, kiln_array, int, bool, bool, kiln_stream); } CUM[] = {
        {"cumsum", kiln_cumsum}, {"cumprod", kiln_cumprod}, {"cummax", kiln_cummax}, {"cummin", kiln_cummin},
    };
    const char *name = CHAR(STRING_ELT(op, 0));
    int i = FIND(CUM, name);
    kiln_array res = kiln_array_new();
    kr_check(CUM[i].fn(&res, kr_get(x), Rf_asInteger(axis), false, true, kr_stream), name);
    return kr_wrap(res);
}

/* x rounded to `digits` decimals. */
SEXP kr_round(SEXP x, SEXP digits) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_round(&res, kr_get(x), Rf_asInteger(digits), kr_stream), "round");
    return kr_wrap(res);
}

/* cond ? a : b, elementwise. */
SEXP kr_where(SEXP cond, SEXP a, SEXP b) {
    kiln_array res = kiln_array_new();
    kr_check(kiln_where(&res, kr_get(cond), kr_get(a), kr_get(b), kr_stream), "mlx_where");
    return kr_wrap(res);
}
