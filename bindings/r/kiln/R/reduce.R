# Reductions: the Summary group, mean, and the row/column sums and means.

# The binary op by which Summary combines the reductions of several arguments
# (sum(x, y) = sum(x) + sum(y)).
.combine <- c(sum = "+", prod = "*", max = "maximum", min = "minimum", all = "&", any = "|")

# The reduction `op` over 0-based `axes` (NULL: all elements).
.reduce <- function(op, x, axes = NULL) .Call(C_reduce, op, x, if (is.null(axes)) NULL else as.integer(axes), FALSE)

Summary.mlx <- function(..., na.rm = FALSE) {
  if (na.rm) warning("na.rm is ignored for mlx arrays (NaN propagates)", call. = FALSE)
  op <- .Generic
  if (op == "range") {
    parts <- list(min(...), max(...))
    return(.Call(C_concatenate, lapply(parts, .reshape_cm, 1L), 0L))
  }
  parts <- lapply(list(...), function(a) .reduce(op, as_mlx(a)))
  Reduce(function(a, b) .binary(.combine[[op]], a, b), parts)
}

mean.mlx <- function(x, ...) .reduce("mean", x)

# The margin reductions of R: rows keep the first `dims` axes, columns reduce them.
.margin <- function(op, rows) {
  function(x, na.rm = FALSE, dims = 1L, ...) {
    n <- length(mlx_shape(x))
    if (dims < 1L || dims >= n) stop("invalid 'dims'", call. = FALSE)
    .reduce(op, x, if (rows) seq(dims, n - 1L) else seq_len(dims) - 1L)
  }
}

# base's margin functions are not generic: these generics dispatch to them by default.
.margin_generic <- function(name) {
  function(x, na.rm = FALSE, dims = 1L, ...) UseMethod(name)
}
.margin_default <- function(base_fun) {
  function(x, na.rm = FALSE, dims = 1L, ...) base_fun(x, na.rm = na.rm, dims = dims, ...)
}

rowSums <- .margin_generic("rowSums")
colSums <- .margin_generic("colSums")
rowMeans <- .margin_generic("rowMeans")
colMeans <- .margin_generic("colMeans")
rowSums.default <- .margin_default(base::rowSums)
colSums.default <- .margin_default(base::colSums)
rowMeans.default <- .margin_default(base::rowMeans)
colMeans.default <- .margin_default(base::colMeans)
rowSums.mlx <- .margin("sum", rows = TRUE)
colSums.mlx <- .margin("sum", rows = FALSE)
rowMeans.mlx <- .margin("mean", rows = TRUE)
colMeans.mlx <- .margin("mean", rows = FALSE)
