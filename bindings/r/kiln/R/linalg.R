# Matrix product and transposes, with R's rules for vectors and R's error for shapes that do
# not conform.

.dims_text <- function(d) paste(d, collapse = " x ")

# x %*% y as R computes it: a vector operand is a row or a column, whichever conforms.
.matmul <- function(x, y) {
  x <- as_mlx(x)
  y <- .as_operand(y, x)
  dx <- mlx_shape(x)
  dy <- mlx_shape(y)
  if (length(dx) > 2L || length(dy) > 2L) {
    stop(sprintf("%%*%% needs vectors or matrices, not arrays of dim %s and %s", .dims_text(dx), .dims_text(dy)),
         call. = FALSE)
  }
  if (length(dx) < 2L && length(dy) < 2L) {
    dx <- c(1L, length(x))
    dy <- c(length(y), 1L)
  } else if (length(dx) < 2L) {
    dx <- if (length(x) == dy[1L]) c(1L, length(x)) else c(length(x), 1L)
  } else if (length(dy) < 2L) {
    dy <- if (length(y) == dx[2L]) c(length(y), 1L) else c(1L, length(y))
  }
  if (dx[2L] != dy[1L]) {
    stop(sprintf("non-conformable arguments: x is %s and y is %s (ncol(x) must equal nrow(y))",
                 .dims_text(dx), .dims_text(dy)), call. = FALSE)
  }
  .binary("matmul", .Call(C_reshape, x, dx), .Call(C_reshape, y, dy))
}

# %*% is S3-generic from R 4.3 (NAMESPACE registers this method there); before, the package
# exports `%*%` itself, which hands anything that is not mlx to base.
`%*%.mlx` <- function(x, y) .matmul(x, y)
`%*%` <- function(x, y) if (is_mlx(x) || is_mlx(y)) .matmul(x, y) else base::`%*%`(x, y)

# t() of a vector is a 1-row matrix, as in R.
t.mlx <- function(x) {
  if (length(mlx_shape(x)) < 2L) return(.Call(C_reshape, x, c(1L, length(x))))
  .Call(C_transpose, x, NULL)
}

aperm.mlx <- function(a, perm = NULL, ...) {
  .Call(C_transpose, a, if (is.null(perm)) NULL else as.integer(perm) - 1L)
}
