/* The C API from C: arrays, ops, errors, closures, transforms, compile, files. Every check
 * compares with a value computed here independently (closed forms, finite differences, the
 * inputs themselves). Prints "N passed, M failed" and exits non-zero on any failure. */
#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0, failed = 0;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (cond) {                                       \
            passed++;                                     \
        } else {                                          \
            failed++;                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);   \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
        }                                                 \
    } while (0)

/* A call that must succeed; on failure the test stops with kiln's message. */
#define OK(call)                                                                      \
    do {                                                                              \
        if ((call) != 0) {                                                            \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, kiln_last_error()); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static kiln_stream S;

static kiln_array from_floats(const float *data, const int *shape, size_t ndim) {
    kiln_array a = kiln_array_new();
    OK(kiln_array_new_data(&a, data, shape, ndim, KILN_FLOAT32));
    return a;
}

static float item(kiln_array a) {
    float v = 0;
    OK(kiln_array_item_float32(&v, a));
    return v;
}

static int close_to(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

/* --- arrays and ops ---------------------------------------------------------------------- */

static void arrays_and_ops(void) {
    float xs[6] = {1, 2, 3, 4, 5, 6};
    int shape[2] = {2, 3};
    kiln_array x = from_floats(xs, shape, 2);
    size_t ndim = 0, size = 0;
    const int *sh = NULL;
    kiln_dtype dt = -1;
    OK(kiln_array_ndim(&ndim, x));
    OK(kiln_array_size(&size, x));
    OK(kiln_array_shape(&sh, x));
    OK(kiln_array_dtype(&dt, x));
    CHECK(ndim == 2 && size == 6 && sh[0] == 2 && sh[1] == 3 && dt == KILN_FLOAT32, "shape and dtype");

    /* y = exp(x) * x + 1, against libm in double precision. */
    kiln_array e = kiln_array_new(), y = kiln_array_new(), one = kiln_array_new();
    OK(kiln_exp(&e, x, S));
    OK(kiln_multiply(&y, e, x, S));
    OK(kiln_array_new_float32(&one, 1.0f));
    OK(kiln_add(&y, y, one, S)); /* writing into an argument's handle replaces it */
    const float *yd = NULL;
    OK(kiln_array_data_float32(&yd, y));
    for (int i = 0; i < 6; i++) {
        double want = exp((double)xs[i]) * xs[i] + 1;
        CHECK(close_to(yd[i], want, 1e-6), "exp(x)*x+1 at %d: %g vs %g", i, yd[i], want);
    }

    /* A transposed view reads back row-major: element (i, j) of x^T is x[j][i]. */
    kiln_array t = kiln_array_new();
    OK(kiln_transpose(&t, x, S));
    const float *td = NULL;
    OK(kiln_array_data_float32(&td, t));
    int ok = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) ok &= td[i * 2 + j] == xs[j * 3 + i];
    CHECK(ok, "transposed data is row-major");

    /* Reductions over axes and matmul against loops. */
    kiln_array s = kiln_array_new(), m = kiln_array_new();
    int axis1[1] = {1};
    OK(kiln_sum_axes(&s, x, axis1, 1, false, S));
    const float *sd = NULL;
    OK(kiln_array_data_float32(&sd, s));
    CHECK(sd[0] == 6 && sd[1] == 15, "row sums %g %g", sd[0], sd[1]);
    OK(kiln_matmul(&m, x, t, S));
    const float *md = NULL;
    OK(kiln_array_data_float32(&md, m));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            float want = 0;
            for (int k = 0; k < 3; k++) want += xs[i * 3 + k] * xs[j * 3 + k];
            CHECK(md[i * 2 + j] == want, "matmul (%d,%d)", i, j);
        }

    /* Ops giving several arrays. */
    kiln_vector_array parts = kiln_vector_array_new();
    OK(kiln_split(&parts, x, 3, 1, S));
    size_t n = 0;
    OK(kiln_vector_array_size(&n, parts));
    kiln_array p2 = kiln_array_new();
    OK(kiln_vector_array_get(&p2, parts, 2));
    const float *p2d = NULL;
    OK(kiln_array_data_float32(&p2d, p2));
    CHECK(n == 3 && p2d[0] == 3 && p2d[1] == 6, "split: %zu parts", n);

    /* int arrays, astype and item of the right dtype */
    kiln_array ar = kiln_array_new(), ssum = kiln_array_new();
    OK(kiln_arange(&ar, 0, 10, 1, KILN_INT32, S));
    OK(kiln_sum(&ssum, ar, false, S));
    int32_t total = 0;
    OK(kiln_array_item_int32(&total, ssum));
    CHECK(total == 45, "sum(arange(10)) = %d", total);

    kiln_array handles[] = {x, e, y, one, t, s, m, p2, ar, ssum};
    for (size_t i = 0; i < sizeof handles / sizeof handles[0]; i++) OK(kiln_array_free(handles[i]));
    OK(kiln_vector_array_free(parts));
}

/* --- errors ------------------------------------------------------------------------------ */

static int handler_calls = 0;
static void count_errors(const char *msg, void *data) {
    (void)msg;
    (*(int *)data)++;
}

static void errors(void) {
    float a3[3] = {1, 2, 3}, a4[4] = {1, 2, 3, 4};
    int s3[1] = {3}, s4[1] = {4};
    kiln_array a = from_floats(a3, s3, 1), b = from_floats(a4, s4, 1), r = kiln_array_new();

    CHECK(kiln_add(&r, a, b, S) != 0, "adding shapes (3) and (4) fails");
    const char *msg = kiln_last_error();
    CHECK(strstr(msg, "add") && strstr(msg, "(3,)") && strstr(msg, "(4,)"), "the message names op and shapes: %s", msg);

    kiln_array empty = kiln_array_new();
    CHECK(kiln_exp(&r, empty, S) != 0, "an empty handle is an error");
    CHECK(strstr(kiln_last_error(), "kiln_exp") && strstr(kiln_last_error(), "a is an empty kiln_array"),
          "the message names the function and argument: %s", kiln_last_error());
    CHECK(kiln_exp(NULL, a, S) != 0 && strstr(kiln_last_error(), "NULL"), "a NULL result pointer is an error");
    kiln_stream no_stream = kiln_stream_new();
    CHECK(kiln_exp(&r, a, no_stream) != 0, "an empty stream is an error");

    int bad_shape[1] = {-2};
    CHECK(kiln_zeros(&r, bad_shape, 1, KILN_FLOAT32, S) != 0 && strstr(kiln_last_error(), "negative"),
          "a negative dimension: %s", kiln_last_error());
    CHECK(kiln_zeros(&r, s3, 1, 99, S) != 0 && strstr(kiln_last_error(), "99"), "a bad dtype code: %s", kiln_last_error());

    int32_t iv = 0;
    kiln_array one = kiln_array_new();
    OK(kiln_array_new_float32(&one, 1.0f));
    CHECK(kiln_array_item_int32(&iv, one) != 0 && strstr(kiln_last_error(), "kiln_astype"),
          "item of the wrong dtype names the fix: %s", kiln_last_error());

    OK(kiln_set_error_handler(count_errors, &handler_calls, NULL));
    kiln_add(&r, a, b, S);
    kiln_exp(&r, empty, S);
    OK(kiln_set_error_handler(NULL, NULL, NULL));
    kiln_add(&r, a, b, S);
    CHECK(handler_calls == 2, "the handler saw 2 errors, got %d", handler_calls);

    OK(kiln_array_free(a));
    OK(kiln_array_free(b));
    OK(kiln_array_free(one));
    OK(kiln_array_free(r));
    OK(kiln_array_free(empty)); /* freeing an empty handle does nothing */
}

/* --- zero-copy arrays -------------------------------------------------------------------- */

static int released = 0;
static void release(void *p) {
    (void)p;
    released++;
}

static void managed_data(void) {
    static float data[4] = {1, 2, 3, 4};
    int shape[1] = {4};
    kiln_array a = kiln_array_new(), b = kiln_array_new();
    OK(kiln_array_new_data_managed_payload(&a, data, shape, 1, KILN_FLOAT32, &released, release));
    const float *ad = NULL;
    OK(kiln_array_data_float32(&ad, a));
    CHECK(ad == data, "the array reads the caller's memory in place");
    OK(kiln_multiply(&b, a, a, S));
    OK(kiln_array_free(a));
    CHECK(released == 0, "b's pending graph keeps the memory: %d", released);
    const float *bd = NULL;
    OK(kiln_array_data_float32(&bd, b));
    CHECK(bd[3] == 16 && data[3] == 4, "ops read lent memory and never write it");
    OK(kiln_array_free(b));
    CHECK(released == 1, "the destructor ran once after the last use: %d", released);
}

/* --- closures and transforms ------------------------------------------------------------- */

/* f(x, y) = sum(sin(x) * y) */
static int f_sin_dot(kiln_vector_array *res, const kiln_vector_array input) {
    kiln_array x = kiln_array_new(), y = kiln_array_new(), t = kiln_array_new(), out = kiln_array_new();
    int rc = kiln_vector_array_get(&x, input, 0) || kiln_vector_array_get(&y, input, 1) || kiln_sin(&t, x, S) ||
             kiln_multiply(&t, t, y, S) || kiln_sum(&out, t, false, S);
    if (rc == 0) rc = kiln_vector_array_new_data(res, &out, 1);
    kiln_array_free(x);
    kiln_array_free(y);
    kiln_array_free(t);
    kiln_array_free(out);
    return rc;
}

/* Fails with its own message. */
static int refuses(kiln_vector_array *res, const kiln_vector_array input) {
    (void)res;
    (void)input;
    kiln_set_last_error("refuses: this closure never succeeds");
    return 3;
}

/* g(x) = x * scale, with the scale in a payload */
static int scale_by_payload(kiln_vector_array *res, const kiln_vector_array input, void *payload) {
    kiln_array x = kiln_array_new(), c = kiln_array_new(), out = kiln_array_new();
    int rc = kiln_vector_array_get(&x, input, 0) || kiln_array_new_float32(&c, *(float *)payload) ||
             kiln_multiply(&out, x, c, S);
    if (rc == 0) rc = kiln_vector_array_new_data(res, &out, 1);
    kiln_array_free(x);
    kiln_array_free(c);
    kiln_array_free(out);
    return rc;
}

static int payload_freed = 0;
static void free_payload(void *p) {
    free(p);
    payload_freed++;
}

static void closures_and_transforms(void) {
    float xs[3] = {0.1f, 0.7f, -1.3f}, ys[3] = {2.0f, -1.0f, 0.5f};
    int s3[1] = {3};
    kiln_array x = from_floats(xs, s3, 1), y = from_floats(ys, s3, 1);
    kiln_array args_h[2] = {x, y};
    kiln_vector_array args = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&args, args_h, 2));

    kiln_closure f = kiln_closure_new();
    OK(kiln_closure_new_func(&f, f_sin_dot));
    kiln_vector_array out = kiln_vector_array_new();
    OK(kiln_closure_apply(&out, f, args));
    kiln_array v = kiln_array_new();
    OK(kiln_vector_array_get(&v, out, 0));
    double want = 0;
    for (int i = 0; i < 3; i++) want += sin((double)xs[i]) * ys[i];
    CHECK(close_to(item(v), want, 1e-6), "closure value %g vs %g", item(v), want);

    /* value_and_grad w.r.t. x and y against the closed form (cos(x) * y, sin(x)). */
    kiln_closure_value_and_grad vg = kiln_closure_value_and_grad_new();
    int argnums[2] = {0, 1};
    OK(kiln_value_and_grad(&vg, f, argnums, 2));
    kiln_vector_array vals = kiln_vector_array_new(), grads = kiln_vector_array_new();
    OK(kiln_closure_value_and_grad_apply(&vals, &grads, vg, args));
    kiln_array gx = kiln_array_new(), gy = kiln_array_new();
    OK(kiln_vector_array_get(&gx, grads, 0));
    OK(kiln_vector_array_get(&gy, grads, 1));
    const float *gxd = NULL, *gyd = NULL;
    OK(kiln_array_data_float32(&gxd, gx));
    OK(kiln_array_data_float32(&gyd, gy));
    for (int i = 0; i < 3; i++) {
        CHECK(close_to(gxd[i], cos((double)xs[i]) * ys[i], 1e-5), "d/dx at %d", i);
        CHECK(close_to(gyd[i], sin((double)xs[i]), 1e-5), "d/dy at %d", i);
    }

    /* jvp along (1, 0, 0) for x, 0 for y, against a central finite difference in double. */
    float ex[3] = {1, 0, 0}, zero[3] = {0, 0, 0};
    kiln_array tx = from_floats(ex, s3, 1), ty = from_floats(zero, s3, 1);
    kiln_array tan_h[2] = {tx, ty};
    kiln_vector_array tangents = kiln_vector_array_new(), jo = kiln_vector_array_new(), jt = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&tangents, tan_h, 2));
    OK(kiln_jvp(&jo, &jt, f, args, tangents));
    kiln_array jv = kiln_array_new();
    OK(kiln_vector_array_get(&jv, jt, 0));
    double h = 1e-6, fd = (sin(xs[0] + h) - sin(xs[0] - h)) / (2 * h) * ys[0];
    CHECK(close_to(item(jv), fd, 1e-4), "jvp %g vs finite difference %g", item(jv), fd);

    /* vjp with cotangent 2: twice the gradient. */
    kiln_array two = kiln_array_new();
    OK(kiln_array_new_float32(&two, 2.0f));
    kiln_vector_array cot = kiln_vector_array_new(), vo = kiln_vector_array_new(), vjs = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&cot, &two, 1));
    OK(kiln_vjp(&vo, &vjs, f, args, cot));
    kiln_array vy = kiln_array_new();
    OK(kiln_vector_array_get(&vy, vjs, 1));
    const float *vyd = NULL;
    OK(kiln_array_data_float32(&vyd, vy));
    CHECK(close_to(vyd[2], 2 * sin((double)xs[2]), 1e-5), "vjp %g", vyd[2]);

    /* vmap of a payload closure over rows, then checkpoint of it: x * 3 for each row. */
    float *scale = malloc(sizeof(float));
    *scale = 3.0f;
    kiln_closure g = kiln_closure_new(), gm = kiln_closure_new(), gc = kiln_closure_new();
    OK(kiln_closure_new_func_payload(&g, scale_by_payload, scale, free_payload));
    int in_axes[1] = {0}, out_axes[1] = {0};
    OK(kiln_vmap(&gm, g, in_axes, 1, out_axes, 1));
    OK(kiln_checkpoint(&gc, gm));
    float rows[6] = {1, 2, 3, 4, 5, 6};
    int s23[2] = {2, 3};
    kiln_array r = from_floats(rows, s23, 2);
    kiln_vector_array rin = kiln_vector_array_new(), rout = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&rin, &r, 1));
    OK(kiln_closure_apply(&rout, gc, rin));
    kiln_array r3 = kiln_array_new();
    OK(kiln_vector_array_get(&r3, rout, 0));
    const float *r3d = NULL;
    OK(kiln_array_data_float32(&r3d, r3));
    CHECK(r3d[5] == 18 && r3d[0] == 3, "vmap(checkpoint) of a payload closure");
    OK(kiln_closure_free(g));
    CHECK(payload_freed == 0, "the payload lives while transformed closures use it");
    OK(kiln_closure_free(gm));
    OK(kiln_closure_free(gc));
    CHECK(payload_freed == 1, "the payload is freed with the last closure: %d", payload_freed);

    /* A failing C closure reports its own kiln error. */
    float a4[4] = {1, 2, 3, 4};
    int s4[1] = {4};
    kiln_array bad = from_floats(a4, s4, 1);
    kiln_array bad_h[2] = {x, bad};
    kiln_vector_array bad_args = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&bad_args, bad_h, 2));
    CHECK(kiln_closure_apply(&out, f, bad_args) != 0 && strstr(kiln_last_error(), "multiply"),
          "a closure's error carries its cause: %s", kiln_last_error());

    kiln_closure no = kiln_closure_new();
    OK(kiln_closure_new_func(&no, refuses));
    CHECK(kiln_closure_apply(&out, no, args) != 0 && strstr(kiln_last_error(), "status 3") &&
              strstr(kiln_last_error(), "refuses: this closure never succeeds"),
          "a closure's own message reaches the caller: %s", kiln_last_error());
    OK(kiln_closure_free(no));

    kiln_array arrs[] = {x, y, v, gx, gy, tx, ty, jv, two, vy, r, r3, bad};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) OK(kiln_array_free(arrs[i]));
    kiln_vector_array vecs[] = {args, out, vals, grads, tangents, jo, jt, cot, vo, vjs, rin, rout, bad_args};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) OK(kiln_vector_array_free(vecs[i]));
    OK(kiln_closure_value_and_grad_free(vg));
    OK(kiln_closure_free(f));
}

/* --- compile ----------------------------------------------------------------------------- */

static int traces = 0;

/* gelu(x) = x * (1 + erf(x / sqrt(2))) / 2: five eager kernels. */
static int gelu(kiln_vector_array *res, const kiln_vector_array input) {
    traces++;
    kiln_array x = kiln_array_new(), c = kiln_array_new(), t = kiln_array_new(), out = kiln_array_new();
    kiln_array one = kiln_array_new(), two = kiln_array_new();
    int rc = kiln_vector_array_get(&x, input, 0) || kiln_array_new_float32(&c, 1.41421356f) ||
             kiln_array_new_float32(&one, 1.0f) || kiln_array_new_float32(&two, 2.0f) || kiln_divide(&t, x, c, S) ||
             kiln_erf(&t, t, S) || kiln_add(&t, t, one, S) || kiln_multiply(&t, x, t, S) ||
             kiln_divide(&out, t, two, S);
    if (rc == 0) rc = kiln_vector_array_new_data(res, &out, 1);
    kiln_array hs[] = {x, c, t, out, one, two};
    for (size_t i = 0; i < 6; i++) kiln_array_free(hs[i]);
    return rc;
}

/* Reads a value inside the function: fine eagerly, an error while compile traces. */
static int reads_a_value(kiln_vector_array *res, const kiln_vector_array input) {
    kiln_array x = kiln_array_new();
    float v = 0;
    int rc = kiln_vector_array_get(&x, input, 0) || kiln_array_item_float32(&v, x);
    if (rc == 0) rc = kiln_vector_array_new_data(res, &x, 1);
    kiln_array_free(x);
    return rc;
}

static kiln_vector_array one_input(const float *data, int n) {
    int shape[1] = {n};
    kiln_array a = from_floats(data, shape, 1);
    kiln_vector_array v = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&v, &a, 1));
    OK(kiln_array_free(a));
    return v;
}

static void compiled(void) {
    kiln_closure f = kiln_closure_new(), cf = kiln_closure_new();
    OK(kiln_closure_new_func(&f, gelu));
    OK(kiln_compile(&cf, f, false));
    CHECK(traces == 0, "compiling does not trace");

    float xs[5] = {-2, -0.5f, 0, 0.5f, 2}, xs8[8] = {-3, -2, -1, 0, 1, 2, 3, 4};
    kiln_vector_array in5 = one_input(xs, 5), in8 = one_input(xs8, 8), out = kiln_vector_array_new();
    OK(kiln_closure_apply(&out, cf, in5));
    CHECK(traces == 1, "the first call traces");
    kiln_array y = kiln_array_new();
    OK(kiln_vector_array_get(&y, out, 0));
    const float *yd = NULL;
    OK(kiln_array_data_float32(&yd, y));
    for (int i = 0; i < 5; i++) {
        double want = xs[i] * (1 + erf(xs[i] / sqrt(2.0))) / 2;
        CHECK(close_to(yd[i], want, 1e-5), "compiled gelu at %d: %g vs %g", i, yd[i], want);
    }
    OK(kiln_closure_apply(&out, cf, in5));
    size_t n = 0;
    OK(kiln_compile_trace_count(&n, cf));
    CHECK(traces == 1 && n == 1, "the same signature replays");
    OK(kiln_closure_apply(&out, cf, in8));
    CHECK(traces == 2, "a new shape traces again");

    size_t eager = 0, fused = 0;
    OK(kiln_compile_kernel_count(&eager, &fused, cf, in5));
    CHECK(eager == 5 && fused == 1, "gelu: %zu kernels eager -> %zu compiled", eager, fused);
    kiln_string report = kiln_string_new();
    OK(kiln_compile_explain(&report, cf, in5));
    const char *text = NULL;
    OK(kiln_string_data(&text, report));
    CHECK(strstr(text, "erf") != NULL, "the report shows the fused kernel's ops");
    CHECK(kiln_compile_explain(&report, f, in5) != 0 && strstr(kiln_last_error(), "kiln_compile"),
          "explain of a closure that was not compiled: %s", kiln_last_error());

    /* shapeless: one trace for every shape of the same ndim and dtype */
    kiln_closure sf = kiln_closure_new();
    OK(kiln_compile(&sf, f, true));
    traces = 0;
    OK(kiln_closure_apply(&out, sf, in5));
    OK(kiln_closure_apply(&out, sf, in8));
    OK(kiln_vector_array_get(&y, out, 0));
    OK(kiln_array_data_float32(&yd, y));
    CHECK(traces == 1, "shapeless traces once, got %d", traces);
    CHECK(close_to(yd[7], 4 * (1 + erf(4 / sqrt(2.0))) / 2, 1e-5), "shapeless result for the new shape");

    /* Reading a value while tracing is an error naming kiln_disable_compile; disabled it runs. */
    kiln_closure r = kiln_closure_new(), cr = kiln_closure_new();
    OK(kiln_closure_new_func(&r, reads_a_value));
    OK(kiln_compile(&cr, r, false));
    float one_value[1] = {1};
    kiln_vector_array in1 = one_input(one_value, 1);
    CHECK(kiln_closure_apply(&out, cr, in1) != 0 && strstr(kiln_last_error(), "disable_compile"),
          "reading a traced array: %s", kiln_last_error());
    OK(kiln_disable_compile());
    CHECK(kiln_closure_apply(&out, cr, in1) == 0, "disabled compile runs the function");
    OK(kiln_enable_compile());

    /* grad of a compiled function: d/dx sum(sin(x) * y) = cos(x) * y */
    kiln_closure sd = kiln_closure_new(), csd = kiln_closure_new();
    OK(kiln_closure_new_func(&sd, f_sin_dot));
    OK(kiln_compile(&csd, sd, false));
    kiln_closure_value_and_grad vg = kiln_closure_value_and_grad_new();
    int argnum0[1] = {0};
    OK(kiln_value_and_grad(&vg, csd, argnum0, 1));
    float ys[5] = {1, 2, 3, 4, 5};
    int s5[1] = {5};
    kiln_array xa = kiln_array_new(), ya = from_floats(ys, s5, 1);
    OK(kiln_vector_array_get(&xa, in5, 0));
    kiln_array two_args[2] = {xa, ya};
    kiln_vector_array xy = kiln_vector_array_new(), vals = kiln_vector_array_new(), grads = kiln_vector_array_new();
    OK(kiln_vector_array_new_data(&xy, two_args, 2));
    OK(kiln_closure_value_and_grad_apply(&vals, &grads, vg, xy));
    kiln_array g0 = kiln_array_new();
    OK(kiln_vector_array_get(&g0, grads, 0));
    const float *g0d = NULL;
    OK(kiln_array_data_float32(&g0d, g0));
    for (int i = 0; i < 5; i++) CHECK(close_to(g0d[i], cos((double)xs[i]) * ys[i], 1e-5), "grad of compiled at %d", i);
    OK(kiln_array_free(xa));
    OK(kiln_array_free(ya));
    OK(kiln_array_free(g0));
    OK(kiln_closure_free(sd));
    OK(kiln_closure_free(csd));
    OK(kiln_vector_array_free(xy));

    OK(kiln_array_free(y));
    OK(kiln_string_free(report));
    kiln_closure cs[] = {f, cf, sf, r, cr};
    for (size_t i = 0; i < 5; i++) OK(kiln_closure_free(cs[i]));
    kiln_vector_array vs[] = {in5, in8, in1, out, vals, grads};
    for (size_t i = 0; i < 6; i++) OK(kiln_vector_array_free(vs[i]));
    OK(kiln_closure_value_and_grad_free(vg));
}

/* --- files and random numbers ------------------------------------------------------------ */

static void files_and_random(const char *dir) {
    char npy[512], st[512];
    snprintf(npy, sizeof npy, "%s/kiln_c_test.npy", dir);
    snprintf(st, sizeof st, "%s/kiln_c_test.safetensors", dir);

    kiln_array key = kiln_array_new(), u1 = kiln_array_new(), u2 = kiln_array_new(), back = kiln_array_new();
    int shape[2] = {3, 4};
    OK(kiln_random_key(&key, 7));
    OK(kiln_random_uniform(&u1, 0, 1, shape, 2, KILN_FLOAT32, key, S));
    OK(kiln_random_uniform(&u2, 0, 1, shape, 2, KILN_FLOAT32, key, S));
    const float *d1 = NULL, *d2 = NULL, *db = NULL;
    OK(kiln_array_data_float32(&d1, u1));
    OK(kiln_array_data_float32(&d2, u2));
    int same = 1, in_range = 1;
    for (int i = 0; i < 12; i++) {
        same &= d1[i] == d2[i];
        in_range &= d1[i] >= 0 && d1[i] < 1;
    }
    CHECK(same && in_range, "one key gives the same numbers in [0, 1)");

    OK(kiln_save(npy, u1));
    OK(kiln_load(&back, npy));
    OK(kiln_array_data_float32(&db, back));
    CHECK(memcmp(db, d1, sizeof(float) * 12) == 0, ".npy round trip");

    kiln_map_string_to_array m = kiln_map_string_to_array_new(), lm = kiln_map_string_to_array_new();
    kiln_map_string_to_string meta = kiln_map_string_to_string_new(), lmeta = kiln_map_string_to_string_new();
    OK(kiln_map_string_to_array_insert(m, "weights", u1));
    OK(kiln_map_string_to_array_insert(m, "key", key));
    OK(kiln_map_string_to_string_insert(meta, "format", "kiln-test"));
    OK(kiln_save_safetensors(st, m, meta));
    OK(kiln_load_safetensors(&lm, &lmeta, st));
    size_t count = 0;
    const char *fmt = NULL;
    OK(kiln_map_string_to_array_size(&count, lm));
    OK(kiln_map_string_to_string_get(&fmt, lmeta, "format"));
    kiln_array w = kiln_array_new();
    OK(kiln_map_string_to_array_get(&w, lm, "weights"));
    OK(kiln_array_data_float32(&db, w));
    CHECK(count == 2 && strcmp(fmt, "kiln-test") == 0 && memcmp(db, d1, sizeof(float) * 12) == 0,
          ".safetensors round trip");
    CHECK(kiln_map_string_to_array_get(&w, lm, "missing") != 0 && strstr(kiln_last_error(), "missing"),
          "a missing key names it");

    FILE *junk = fopen(npy, "wb");
    fputs("not numpy", junk);
    fclose(junk);
    CHECK(kiln_load(&back, npy) != 0 && strstr(kiln_last_error(), "not a .npy file"), "a bad file: %s", kiln_last_error());

    kiln_array as[] = {key, u1, u2, back, w};
    for (size_t i = 0; i < 5; i++) OK(kiln_array_free(as[i]));
    OK(kiln_map_string_to_array_free(m));
    OK(kiln_map_string_to_array_free(lm));
    OK(kiln_map_string_to_string_free(meta));
    OK(kiln_map_string_to_string_free(lmeta));
    remove(npy);
    remove(st);
}

int main(int argc, char **argv) {
    S = kiln_stream_new();
    OK(kiln_default_cpu_stream_new(&S));
    arrays_and_ops();
    errors();
    managed_data();
    closures_and_transforms();
    compiled();
    files_and_random(argc > 1 ? argv[1] : ".");
    OK(kiln_stream_free(S));
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
