# Printing, str() and all.equal() of mlx arrays.

.describe <- function(x) {
  d <- mlx_shape(x)
  sprintf("mlx array [%s] %s", if (length(d)) .dims_text(d) else "scalar", mlx_dtype(x))
}

print.mlx <- function(x, ...) {
  values <- as.array(x)
  cat(.describe(x), "\n", sep = "")
  print(values, ...)
  invisible(x)
}

# Shape and dtype only: it reads no values, so it works on traced arrays too.
str.mlx <- function(object, ...) cat(" ", .describe(object), "\n", sep = "")

# Compares values as R arrays; float32 and lower are compared to 1e-6 by default (their
# rounding error is far above base R's default tolerance).
all.equal.mlx <- function(target, current, ..., tolerance = NULL) {
  if (is.null(tolerance)) {
    tolerance <- if (mlx_dtype(target) == "float64") sqrt(.Machine$double.eps) else 1e-6
  }
  if (is_mlx(current)) current <- as.array(current)
  all.equal(as.array(target), current, ..., tolerance = tolerance)
}
