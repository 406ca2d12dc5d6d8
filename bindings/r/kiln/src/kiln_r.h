/* Shared glue between R and kiln's C API: handles held in R external pointers, kiln errors
 * raised as R errors, and the stream every op runs on. */
#ifndef KILN_R_H
#define KILN_R_H

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "kiln.h"

/* The stream of the default device: every op runs on it (set by kr_device.c). */
extern kiln_stream kr_stream;

/* Raises an R error carrying kiln's message when `rc` is not 0; `what` names the R-level call. */
void kr_check(int rc, const char *what);

/* A new R object of class "mlx" owning `a` (freed by the object's finalizer). */
SEXP kr_wrap(kiln_array a);

/* The handle inside an mlx object (borrowed: valid while the object lives). */
kiln_array kr_get(SEXP x);

/* A kiln_vector_array of the handles of a list of mlx objects (the caller frees it). */
kiln_vector_array kr_vector(SEXP list);

/* A list of mlx objects owning copies of the handles of `v`. */
SEXP kr_list(kiln_vector_array v);

/* A 1-d int32 array holding an R integer vector (the caller frees it). */
kiln_array kr_int_array(SEXP ints);

/* An R integer vector as a shape (pointer into the vector; its length in *n). */
const int *kr_shape_arg(SEXP shape, size_t *n);

/* A closure handle in an R external pointer, freed by its finalizer. */
SEXP kr_wrap_closure(kiln_closure c);
kiln_closure kr_get_closure(SEXP x);

/* Whether the caller runs on R's main thread (the only one allowed to call R). */
int kr_on_main_thread(void);
void kr_remember_main_thread(void);

#endif
