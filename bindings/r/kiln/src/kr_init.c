/* Registers the .Call entry points (R names them C_<name>) and sets up the package's stream. */
#include <R_ext/Rdynload.h>

#include "kiln_r.h"

#define ENTRIES(X)                                                                                   \
    X(from_r, 3) X(to_r, 1) X(shape, 1) X(dtype, 1) X(astype, 2) X(eval, 1)                          \
    X(unary, 2) X(binary, 3) X(reduce, 4) X(cumulative, 3) X(round, 2) X(where, 3)                   \
    X(reshape, 2) X(transpose, 2) X(broadcast_to, 2) X(take, 3) X(put, 4) X(concatenate, 2)          \
    X(full, 3) X(arange, 4) X(eye, 4) X(random_normal, 5) X(random_uniform, 5) X(key, 1)            \
    X(default_device, 1) X(has_gpu, 0)                                                               \
    X(closure, 1) X(compile, 2) X(apply, 2) X(value_and_grad, 3) X(trace_count, 1)                   \
    X(kernel_count, 2) X(explain, 2) X(set_compile, 1)

#define DECLARE(name, n) SEXP kr_##name();
ENTRIES(DECLARE)

#define ROW(name, n) {#name, (DL_FUNC)&kr_##name, n},
static const R_CallMethodDef CALLS[] = {ENTRIES(ROW){NULL, NULL, 0}};

void kr_refresh_stream(void);

void R_init_kiln(DllInfo *dll) {
    R_registerRoutines(dll, NULL, CALLS, NULL, NULL);
    R_useDynamicSymbols(dll, FALSE);
    R_forceSymbols(dll, TRUE);
    kr_remember_main_thread();
    kr_refresh_stream();
}
