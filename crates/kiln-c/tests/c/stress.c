/* Many create / compile / call / free cycles, for valgrind: any leak or invalid access in the
 * handles, closures, payloads or compiled functions shows up as an error. */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>

#define OK(call)                                                        \
    do {                                                                \
        if ((call) != 0) {                                              \
            printf("%s failed: %s\n", #call, kiln_last_error());        \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static kiln_stream s;

static int affine(kiln_vector_array *res, const kiln_vector_array in, void *payload) {
    kiln_array x = kiln_array_new(), c = kiln_array_new(), y = kiln_array_new();
    int rc = kiln_vector_array_get(&x, in, 0) || kiln_array_new_float32(&c, *(float *)payload) ||
             kiln_multiply(&y, x, c, s) || kiln_tanh(&y, y, s) || kiln_add(&y, y, x, s) ||
             kiln_vector_array_new_data(res, &y, 1);
    kiln_array_free(x);
    kiln_array_free(c);
    kiln_array_free(y);
    return rc;
}

static void free_float(void *p) { free(p); }

int main(void) {
    s = kiln_stream_new();
    OK(kiln_default_cpu_stream_new(&s));
    float sum = 0;
    for (int i = 0; i < 40; i++) {
        float *scale = malloc(sizeof(float));
        *scale = 0.5f + i;
        kiln_closure f = kiln_closure_new(), cf = kiln_closure_new();
        OK(kiln_closure_new_func_payload(&f, affine, scale, free_float));
        OK(kiln_compile(&cf, f, i % 2 == 0));
        int shape[1] = {3 + i % 5};
        kiln_array x = kiln_array_new(), r = kiln_array_new();
        OK(kiln_ones(&x, shape, 1, KILN_FLOAT32, s));
        kiln_vector_array in = kiln_vector_array_new(), out = kiln_vector_array_new();
        OK(kiln_vector_array_append_value(in, x));
        for (int k = 0; k < 3; k++) OK(kiln_closure_apply(&out, cf, in));
        OK(kiln_vector_array_get(&r, out, 0));
        kiln_string report = kiln_string_new();
        OK(kiln_compile_explain(&report, cf, in));
        kiln_array total = kiln_array_new();
        OK(kiln_sum(&total, r, false, s));
        float v = 0;
        OK(kiln_array_item_float32(&v, total));
        sum += v;
        kiln_array empty = kiln_array_new();
        if (kiln_exp(&r, empty, s) == 0) exit(2); /* an error path, too */
        kiln_array_free(x);
        kiln_array_free(r);
        kiln_array_free(total);
        kiln_vector_array_free(in);
        kiln_vector_array_free(out);
        kiln_string_free(report);
        kiln_closure_free(f);
        kiln_closure_free(cf);
    }
    kiln_stream_free(s);
    printf("stress: 40 cycles, checksum %.3f\n", sum);
    return 0;
}
