/* A small training step through kiln's C API: linear regression y = x w + b fitted by gradient
 * descent, with the loss and its gradients from kiln_value_and_grad. Prints the loss as it
 * falls and exits non-zero unless it fell 100-fold and w and b approach the true values.
 *
 *   cc -std=c99 -I crates/kiln-c/include examples/c/train_step.c -L target/release -lkiln_c -lm
 */
#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define OK(call)                                                        \
    do {                                                                \
        if ((call) != 0) {                                              \
            fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error()); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static kiln_stream s;

/* loss(w, b, x, y) = mean((x w + b - y)^2) */
static int loss(kiln_vector_array *res, const kiln_vector_array in) {
    kiln_array w = kiln_array_new(), b = kiln_array_new(), x = kiln_array_new(), y = kiln_array_new();
    kiln_array p = kiln_array_new(), l = kiln_array_new();
    int rc = kiln_vector_array_get(&w, in, 0) || kiln_vector_array_get(&b, in, 1) ||
             kiln_vector_array_get(&x, in, 2) || kiln_vector_array_get(&y, in, 3) || kiln_matmul(&p, x, w, s) ||
             kiln_add(&p, p, b, s) || kiln_subtract(&p, p, y, s) || kiln_square(&p, p, s) ||
             kiln_mean(&l, p, false, s) || kiln_vector_array_new_data(res, &l, 1);
    kiln_array all[] = {w, b, x, y, p, l};
    for (int i = 0; i < 6; i++) kiln_array_free(all[i]);
    return rc;
}

int main(void) {
    s = kiln_stream_new();
    OK(kiln_default_cpu_stream_new(&s));
    const float true_w[3] = {2.0f, -1.0f, 0.5f}, true_b = 0.3f;

    /* Data: x ~ N(0, 1) of shape (256, 3), y = x true_w + true_b. */
    int xs[2] = {256, 3}, ws[2] = {3, 1}, bs[1] = {1};
    kiln_array key = kiln_array_new(), x = kiln_array_new(), tw = kiln_array_new(), tb = kiln_array_new();
    kiln_array y = kiln_array_new(), w = kiln_array_new(), b = kiln_array_new(), lr = kiln_array_new();
    OK(kiln_random_key(&key, 0));
    OK(kiln_random_normal(&x, xs, 2, KILN_FLOAT32, 0.0f, 1.0f, key, s));
    OK(kiln_array_new_data(&tw, true_w, ws, 2, KILN_FLOAT32));
    OK(kiln_array_new_float32(&tb, true_b));
    OK(kiln_matmul(&y, x, tw, s));
    OK(kiln_add(&y, y, tb, s));
    OK(kiln_zeros(&w, ws, 2, KILN_FLOAT32, s));
    OK(kiln_zeros(&b, bs, 1, KILN_FLOAT32, s));
    OK(kiln_array_new_float32(&lr, 0.1f));

    kiln_closure f = kiln_closure_new();
    kiln_closure_value_and_grad vg = kiln_closure_value_and_grad_new();
    OK(kiln_closure_new_func(&f, loss));
    int argnums[2] = {0, 1};
    OK(kiln_value_and_grad(&vg, f, argnums, 2));

    kiln_vector_array args = kiln_vector_array_new(), vals = kiln_vector_array_new(), grads = kiln_vector_array_new();
    kiln_array l = kiln_array_new(), gw = kiln_array_new(), gb = kiln_array_new(), step = kiln_array_new();
    float first = 0, last = 0;
    for (int it = 0; it < 100; it++) {
        kiln_array a[4] = {w, b, x, y};
        OK(kiln_vector_array_new_data(&args, a, 4));
        OK(kiln_closure_value_and_grad_apply(&vals, &grads, vg, args));
        OK(kiln_vector_array_get(&l, vals, 0));
        OK(kiln_vector_array_get(&gw, grads, 0));
        OK(kiln_vector_array_get(&gb, grads, 1));
        OK(kiln_multiply(&step, gw, lr, s));
        OK(kiln_subtract(&w, w, step, s));
        OK(kiln_multiply(&step, gb, lr, s));
        OK(kiln_subtract(&b, b, step, s));
        float lv = 0;
        OK(kiln_array_item_float32(&lv, l));
        if (it == 0) first = lv;
        last = lv;
        if (it % 20 == 0 || it == 99) printf("step %3d  loss %.6f\n", it, lv);
    }
    const float *wd = NULL, *bd = NULL;
    OK(kiln_array_data_float32(&wd, w));
    OK(kiln_array_data_float32(&bd, b));
    printf("w = [%.3f, %.3f, %.3f] (true [2, -1, 0.5]), b = %.3f (true 0.3)\n", wd[0], wd[1], wd[2], bd[0]);
    int ok = last < first / 100 && fabsf(wd[0] - 2.0f) < 0.05f && fabsf(bd[0] - 0.3f) < 0.05f;

    kiln_array all[] = {key, x, tw, tb, y, w, b, lr, l, gw, gb, step};
    for (int i = 0; i < 12; i++) kiln_array_free(all[i]);
    kiln_vector_array_free(args);
    kiln_vector_array_free(vals);
    kiln_vector_array_free(grads);
    kiln_closure_value_and_grad_free(vg);
    kiln_closure_free(f);
    kiln_stream_free(s);
    return ok ? 0 : 1;
}
