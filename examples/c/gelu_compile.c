/* A GELU closure compiled through kiln's C API with shapeless = true: it goes through the same
 * trace, simplify and fuse pipeline as Rust and Python, so its five eager kernels become one.
 * Prints the kernel counts, the fused kernel, and eager vs compiled time.
 *
 *   cc -std=c99 -I crates/kiln-c/include examples/c/gelu_compile.c -L target/release -lkiln_c -lm
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OK(call)                                                        \
    do {                                                                \
        if ((call) != 0) {                                              \
            fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error()); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static kiln_stream stream;

/* gelu(x) = x * (1 + erf(x / sqrt(2))) / 2 */
static int gelu(kiln_vector_array *res, const kiln_vector_array input) {
    kiln_array x = kiln_array_new(), c = kiln_array_new(), one = kiln_array_new(), two = kiln_array_new();
    kiln_array t = kiln_array_new(), y = kiln_array_new();
    int rc = kiln_vector_array_get(&x, input, 0) || kiln_array_new_float32(&c, 1.41421356f) ||
             kiln_array_new_float32(&one, 1.0f) || kiln_array_new_float32(&two, 2.0f) ||
             kiln_divide(&t, x, c, stream) || kiln_erf(&t, t, stream) || kiln_add(&t, t, one, stream) ||
             kiln_multiply(&t, x, t, stream) || kiln_divide(&y, t, two, stream) ||
             kiln_vector_array_new_data(res, &y, 1);
    kiln_array all[] = {x, c, one, two, t, y};
    for (int i = 0; i < 6; i++) kiln_array_free(all[i]);
    return rc;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median of `reps` timed calls of `fun` on `input`, evaluating the result, in ms. */
static double time_ms(kiln_closure fun, kiln_vector_array input, int reps) {
    double t[16];
    kiln_vector_array out = kiln_vector_array_new();
    for (int r = 0; r < reps; r++) {
        double start = now();
        OK(kiln_closure_apply(&out, fun, input));
        OK(kiln_eval(out));
        t[r] = (now() - start) * 1e3;
    }
    kiln_vector_array_free(out);
    for (int i = 0; i < reps; i++)
        for (int j = i + 1; j < reps; j++)
            if (t[j] < t[i]) { double s = t[i]; t[i] = t[j]; t[j] = s; }
    return t[reps / 2];
}

int main(void) {
    stream = kiln_stream_new();
    kiln_device dev = kiln_device_new();
    OK(kiln_get_default_device(&dev));
    OK(kiln_get_default_stream(&stream, dev));

    kiln_closure f = kiln_closure_new(), fast = kiln_closure_new();
    OK(kiln_closure_new_func(&f, gelu));
    OK(kiln_compile(&fast, f, true));

    int shape[2] = {256, 4096};
    kiln_array x = kiln_array_new();
    OK(kiln_random_normal(&x, shape, 2, KILN_FLOAT32, 0.0f, 1.0f, kiln_array_new(), stream));
    kiln_vector_array input = kiln_vector_array_new();
    OK(kiln_vector_array_append_value(input, x));

    size_t eager = 0, compiled = 0;
    OK(kiln_compile_kernel_count(&eager, &compiled, fast, input));
    printf("gelu: %zu kernels eager -> %zu compiled\n", eager, compiled);

    kiln_string report = kiln_string_new();
    OK(kiln_compile_explain(&report, fast, input));
    const char *text = NULL;
    OK(kiln_string_data(&text, report));
    printf("\n%s\n", text);

    /* A new shape reuses the shapeless trace. */
    int other[2] = {128, 1000};
    kiln_array x2 = kiln_array_new();
    OK(kiln_random_normal(&x2, other, 2, KILN_FLOAT32, 0.0f, 1.0f, kiln_array_new(), stream));
    kiln_vector_array input2 = kiln_vector_array_new(), out = kiln_vector_array_new();
    OK(kiln_vector_array_append_value(input2, x2));
    OK(kiln_closure_apply(&out, fast, input2));
    size_t traces = 0;
    OK(kiln_compile_trace_count(&traces, fast));
    printf("traces after two shapes (shapeless): %zu\n", traces);

    double te = time_ms(f, input, 9), tc = time_ms(fast, input, 9);
    printf("gelu on 256x4096 float32: eager %.3f ms, compiled %.3f ms (%.2fx)\n", te, tc, te / tc);

    kiln_array_free(x);
    kiln_array_free(x2);
    kiln_vector_array_free(input);
    kiln_vector_array_free(input2);
    kiln_vector_array_free(out);
    kiln_string_free(report);
    kiln_closure_free(f);
    kiln_closure_free(fast);
    kiln_device_free(dev);
    kiln_stream_free(stream);
    return 0;
}
