/* kiln handles as R objects, and kiln errors as R errors. */
#include <pthread.h>
#include <string.h>

#include "kiln_r.h"

void kr_check(int rc, const char *what) {
    if (rc == 0) return;
    const char *msg = kiln_last_error();
    /* kiln refuses to read a placeholder while tracing; say so in the R user's terms. */
    if (strstr(msg, "disable_compile") != NULL)
        Rf_error("%s: this array is a placeholder traced by mlx_compile() and holds no values, so it "
                 "cannot be printed or converted (print, as.matrix, as.numeric, [[ ...) inside the "
                 "compiled function. Call mlx_disable_compile() to run compiled functions uncompiled "
                 "while debugging, or return the array as an output.\n(kiln: %s)",
                 what, msg);
    Rf_error("%s: %s", what, msg);
}

static void free_array(SEXP ptr) {
    void *ctx = R_ExternalPtrAddr(ptr);
    if (ctx == NULL) return;
    kiln_array_free((kiln_array){ctx});
    R_ClearExternalPtr(ptr);
}

SEXP kr_wrap(kiln_array a) {
    SEXP ptr = PROTECT(R_MakeExternalPtr(a.ctx, R_NilValue, R_NilValue));
    R_RegisterCFinalizerEx(ptr, free_array, FALSE);
    Rf_setAttrib(ptr, R_ClassSymbol, Rf_mkString("mlx"));
    UNPROTECT(1);
    return ptr;
}

kiln_array kr_get(SEXP x) {
    if (TYPEOF(x) != EXTPTRSXP || !Rf_inherits(x, "mlx")) Rf_error("expected an mlx array");
    void *ctx = R_ExternalPtrAddr(x);
    if (ctx == NULL) Rf_error("this mlx array is no longer valid (it was saved and restored?)");
    return (kiln_array){ctx};
}

kiln_vector_array kr_vector(SEXP list) {
    R_xlen_t n = Rf_xlength(list);
    kiln_array *items = (kiln_array *)R_alloc(n > 0 ? n : 1, sizeof(kiln_array));
    for (R_xlen_t i = 0; i < n; i++) items[i] = kr_get(VECTOR_ELT(list, i));
    kiln_vector_array v = kiln_vector_array_new();
    kr_check(kiln_vector_array_new_data(&v, items, (size_t)n), "mlx arrays");
    return v;
}

SEXP kr_list(kiln_vector_array v) {
    size_t n = 0;
    kr_check(kiln_vector_array_size(&n, v), "mlx arrays");
    SEXP out = PROTECT(Rf_allocVector(VECSXP, (R_xlen_t)n));
    for (size_t i = 0; i < n; i++) {
        kiln_array a = kiln_array_new();
        kr_check(kiln_vector_array_get(&a, v, i), "mlx arrays");
        SET_VECTOR_ELT(out, (R_xlen_t)i, kr_wrap(a));
    }
    UNPROTECT(1);
    return out;
}

kiln_array kr_int_array(SEXP ints) {
    int n = Rf_length(ints);
    kiln_array a = kiln_array_new();
    kr_check(kiln_array_new_data(&a, INTEGER(ints), &n, 1, KILN_INT32), "index");
    return a;
}

const int *kr_shape_arg(SEXP shape, size_t *n) {
    if (TYPEOF(shape) != INTSXP) Rf_error("a shape must be an integer vector");
    *n = (size_t)Rf_xlength(shape);
    return INTEGER(shape);
}

static void free_closure(SEXP ptr) {
    void *ctx = R_ExternalPtrAddr(ptr);
    if (ctx == NULL) return;
    kiln_closure_free((kiln_closure){ctx});
    R_ClearExternalPtr(ptr);
}

SEXP kr_wrap_closure(kiln_closure c) {
    SEXP ptr = PROTECT(R_MakeExternalPtr(c.ctx, R_NilValue, R_NilValue));
    R_RegisterCFinalizerEx(ptr, free_closure, FALSE);
    UNPROTECT(1);
    return ptr;
}

kiln_closure kr_get_closure(SEXP x) {
    if (TYPEOF(x) != EXTPTRSXP || R_ExternalPtrAddr(x) == NULL) Rf_error("expected a kiln closure");
    return (kiln_closure){R_ExternalPtrAddr(x)};
}

static pthread_t main_thread;

void kr_remember_main_thread(void) { main_thread = pthread_self(); }

int kr_on_main_thread(void) { return pthread_equal(main_thread, pthread_self()); }
