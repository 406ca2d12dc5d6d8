# The Math group (exp, log, sqrt, trigonometry, rounding, cumulative ops) and a few named
# elementwise functions.

# Math members that map one to one onto kiln's unary ops (same names in src/kr_ops.c).
.math_unary <- c("abs", "sign", "sqrt", "floor", "ceiling", "exp", "expm1", "log1p", "log2", "log10",
                 "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh")

Math.mlx <- function(x, ...) {
  op <- .Generic
  if (op %in% .math_unary) return(.Call(C_unary, op, x))
  switch(op,
    log = {
      y <- .Call(C_unary, "log", x)
      if (...length()) y / log(..1) else y
    },
    round = .Call(C_round, x, as.integer(if (...length()) ..1 else 0L)),
    trunc = sign(x) * floor(abs(x)),
    # R's cumulative functions run over the elements in column-major order and give a vector.
    cumsum = , cumprod = , cummax = , cummin = .Call(C_cumulative, op, .flatten_cm(x), 0L),
    stop(sprintf("%s() is not supported for mlx arrays", op), call. = FALSE)
  )
}

is.nan.mlx <- function(x) .Call(C_unary, "is.nan", x)
is.finite.mlx <- function(x) .Call(C_unary, "is.finite", x)
is.infinite.mlx <- function(x) .Call(C_unary, "is.infinite", x)

# The error function, its inverse, and the logistic sigmoid.
mlx_erf <- function(x) .Call(C_unary, "erf", as_mlx(x))
mlx_erfinv <- function(x) .Call(C_unary, "erfinv", as_mlx(x))
mlx_sigmoid <- function(x) .Call(C_unary, "sigmoid", as_mlx(x))

# x as a constant for gradients.
mlx_stop_gradient <- function(x) .Call(C_unary, "stop_gradient", as_mlx(x))
