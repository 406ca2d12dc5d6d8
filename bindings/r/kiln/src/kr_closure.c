/* R functions as kiln closures, for compile and gradients. kiln calls the closure's C body,
 * which calls an R "runner" function (kept alive by R_PreserveObject until kiln frees the
 * closure). No R error may unwind through kiln's frames: the runner runs under R_ToplevelExec
 * and R_tryCatchError, its error condition is kept as `pending`, the body returns a failure
 * status, and the .Call entry that called kiln signals the condition again once kiln returns. */
#include "kiln_r.h"

/* The condition of the last failed runner, preserved until rethrown (NULL when none). */
static SEXP pending = NULL;
/* Why a body failed without a condition (an interrupt, a call from another thread). */
static const char *failure_note = NULL;

static void clear_pending(void) {
    if (pending != NULL) R_ReleaseObject(pending);
    pending = NULL;
    failure_note = NULL;
}

static SEXP keep_condition(SEXP cond, void *unused) {
    (void)unused;
    PROTECT(cond);
    clear_pending();
    R_PreserveObject(cond);
    pending = cond;
    UNPROTECT(1);
    return R_NilValue;
}

/* After a kiln call that ran R code: signals the runner's condition, else kiln's error. */
static void check_call(int rc, const char *what) {
    if (rc == 0) return;
    if (pending != NULL) {
        SEXP cond = PROTECT(pending);
        R_ReleaseObject(pending);
        pending = NULL;
        Rf_eval(PROTECT(Rf_lang2(Rf_install("stop"), cond)), R_BaseEnv);
        UNPROTECT(2);
    }
    if (failure_note != NULL) {
        const char *note = failure_note;
        failure_note = NULL;
        Rf_error("%s: %s", what, note);
    }
    kr_check(rc, what);
}

struct runner_call {
    SEXP runner;
    kiln_vector_array input;
    kiln_vector_array *res;
    int rc;
};

/* Calls the runner on the inputs as mlx objects; its list of mlx results becomes *res. */
static SEXP run(void *data) {
    struct runner_call *c = data;
    SEXP args = PROTECT(kr_list(c->input));
    SEXP out = PROTECT(Rf_eval(PROTECT(Rf_lang2(c->runner, args)), R_GlobalEnv));
    if (TYPEOF(out) != VECSXP) Rf_error("internal: the runner must return a list of mlx arrays");
    *c->res = kr_vector(out);
    c->rc = 0;
    UNPROTECT(3);
    return R_NilValue;
}

static void run_guarded(void *data) { R_tryCatchError(run, data, keep_condition, NULL); }

/* The C body of every closure made from an R function. */
static int body(kiln_vector_array *res, const kiln_vector_array input, void *runner) {
    if (!kr_on_main_thread()) {
        failure_note = "kiln called an R function from a thread other than R's main thread";
        return 1;
    }
    struct runner_call c = {(SEXP)runner, input, res, 1};
    if (!R_ToplevelExec(run_guarded, &c)) failure_note = "the R function was interrupted";
    return c.rc;
}

/* Drops the closure's hold on its runner (kiln frees closures on R's thread: finalizers). */
static void release_runner(void *runner) {
    if (kr_on_main_thread()) R_ReleaseObject((SEXP)runner);
}

/* A kiln closure calling the R function `runner(list of mlx) -> list of mlx`. */
SEXP kr_closure(SEXP runner) {
    R_PreserveObject(runner);
    kiln_closure c = kiln_closure_new();
    int rc = kiln_closure_new_func_payload(&c, body, runner, release_runner);
    if (rc) R_ReleaseObject(runner);
    kr_check(rc, "closure");
    return kr_wrap_closure(c);
}

/* The compiled closure of `cls` (tracing waits for the first call). */
SEXP kr_compile(SEXP cls, SEXP shapeless) {
    kiln_closure c = kiln_closure_new();
    kr_check(kiln_compile(&c, kr_get_closure(cls), Rf_asLogical(shapeless) == TRUE), "mlx_compile");
    return kr_wrap_closure(c);
}

/* Calls `cls` on a list of mlx arrays; gives the list of its outputs. */
SEXP kr_apply(SEXP cls, SEXP args) {
    kiln_vector_array in = kr_vector(args), out = kiln_vector_array_new();
    clear_pending();
    int rc = kiln_closure_apply(&out, kr_get_closure(cls), in);
    kiln_vector_array_free(in);
    check_call(rc, "calling the function");
    SEXP res = kr_list(out);
    kiln_vector_array_free(out);
    return res;
}

/* list(outputs, gradients) of `cls` at `args`, differentiating its first output with respect
 * to the 0-based arguments `argnums`. */
SEXP kr_value_and_grad(SEXP cls, SEXP argnums, SEXP args) {
    kiln_vector_array in = kr_vector(args), vals = kiln_vector_array_new(), grads = kiln_vector_array_new();
    kiln_closure_value_and_grad vg = kiln_closure_value_and_grad_new();
    clear_pending();
    int rc = kiln_value_and_grad(&vg, kr_get_closure(cls), INTEGER(argnums), (size_t)Rf_length(argnums)) ||
             kiln_closure_value_and_grad_apply(&vals, &grads, vg, in);
    kiln_vector_array_free(in);
    kiln_closure_value_and_grad_free(vg);
    check_call(rc, "mlx_grad");
    SEXP res = PROTECT(Rf_allocVector(VECSXP, 2));
    SET_VECTOR_ELT(res, 0, kr_list(vals));
    SET_VECTOR_ELT(res, 1, kr_list(grads));
    kiln_vector_array_free(vals);
    kiln_vector_array_free(grads);
    UNPROTECT(1);
    return res;
}

/* How many times the compiled closure `cls` has traced its function. */
SEXP kr_trace_count(SEXP cls) {
    size_t n = 0;
    kr_check(kiln_compile_trace_count(&n, kr_get_closure(cls)), "mlx_compile_traces");
    return Rf_ScalarReal((double)n);
}

/* c(eager, compiled): the kernels an eager run and the compiled plan launch for `args`. */
SEXP kr_kernel_count(SEXP cls, SEXP args) {
    kiln_vector_array in = kr_vector(args);
    size_t eager = 0, compiled = 0;
    clear_pending();
    int rc = kiln_compile_kernel_count(&eager, &compiled, kr_get_closure(cls), in);
    kiln_vector_array_free(in);
    check_call(rc, "mlx_compile_kernels");
    SEXP res = Rf_allocVector(REALSXP, 2);
    REAL(res)[0] = (double)eager;
    REAL(res)[1] = (double)compiled;
    return res;
}

/* kiln's compile report for `args`: graphs, fused kernels and kernel counts. */
SEXP kr_explain(SEXP cls, SEXP args) {
    kiln_vector_array in = kr_vector(args);
    kiln_string report = kiln_string_new();
    const char *text = NULL;
    clear_pending();
    int rc = kiln_compile_explain(&report, kr_get_closure(cls), in);
    kiln_vector_array_free(in);
    check_call(rc || kiln_string_data(&text, report), "mlx_compile_explain");
    SEXP res = Rf_mkString(text);
    kiln_string_free(report);
    return res;
}

/* Turns compilation on or off for every compiled function. */
SEXP kr_set_compile(SEXP enabled) {
    kr_check(Rf_asLogical(enabled) == TRUE ? kiln_enable_compile() : kiln_disable_compile(), "mlx_enable_compile");
    return R_NilValue;
}
