# Gradients by reverse-mode differentiation of an R function of mlx arrays.

# The gradients of f's value (a scalar mlx array; the first one if f returns a list) with
# respect to the arguments `argnums` (1-based; all by default), as a list; with value = TRUE,
# list(value = f's value, grads = the gradients).
mlx_grad <- function(f, ..., argnums = NULL, value = FALSE) {
  f <- match.fun(f)
  state <- .new_state()
  args <- .prepare_args(state, list(...))
  argnums <- argnums %||% seq_along(args)
  if (any(argnums < 1L | argnums > length(args))) stop("argnums must index the arguments", call. = FALSE)
  cls <- .Call(C_closure, .runner(f, state))
  res <- .Call(C_value_and_grad, cls, as.integer(argnums) - 1L, args)
  if (value) list(value = res[[1L]][[1L]], grads = res[[2L]]) else res[[2L]]
}

mlx_value_grad <- function(f, ..., argnums = NULL) mlx_grad(f, ..., argnums = argnums, value = TRUE)
