# `[` and `[<-` with R's index kinds (positive, negative, logical, missing; one index on an
# array indexes its elements in column-major order). Dimensions are kept unless drop = TRUE.

# A 0-based integer index into an axis of length n from an R (or mlx) index.
.index <- function(i, n) {
  if (is_mlx(i)) i <- as.vector(i)
  if (is.logical(i)) return(which(rep_len(i, n)) - 1L)
  if (!is.numeric(i)) stop("only numeric and logical indices are supported for mlx arrays", call. = FALSE)
  i <- i[i != 0]
  if (length(i) && all(i < 0)) return(setdiff(seq_len(n), -i) - 1L)
  if (any(i < 0)) stop("can't mix positive and negative subscripts", call. = FALSE)
  if (any(i > n)) stop("subscript out of bounds", call. = FALSE)
  as.integer(i) - 1L
}

# The indices given to `[` or `[<-` (passed as their `...`): NULL for an empty position.
.indices <- function(...) {
  given <- as.list(substitute(list(...)))[-1L]
  lapply(seq_along(given), function(k) if (identical(given[[k]], quote(expr = ))) NULL else ...elt(k))
}

`[.mlx` <- function(x, ..., drop = FALSE) {
  idx <- .indices(...)
  d <- mlx_shape(x)
  if (length(idx) == 1L && length(d) != 1L) {
    if (is.null(idx[[1L]])) return(x)
    return(.Call(C_take, .flatten_cm(x), .index(idx[[1L]], length(x)), 0L))
  }
  if (length(idx) != length(d)) stop("incorrect number of dimensions", call. = FALSE)
  for (k in seq_along(d)) {
    if (!is.null(idx[[k]])) x <- .Call(C_take, x, .index(idx[[k]], d[k]), k - 1L)
  }
  if (drop) {
    d <- mlx_shape(x)
    x <- .Call(C_reshape, x, d[d != 1L])
  }
  x
}

`[<-.mlx` <- function(x, ..., value) {
  idx <- .indices(...)
  d <- mlx_shape(x)
  # The column-major positions of the selected elements, first index fastest (R's order).
  if (length(idx) == 1L && length(d) != 1L) {
    pos <- if (is.null(idx[[1L]])) seq_len(length(x)) - 1L else .index(idx[[1L]], length(x))
  } else {
    if (length(idx) != length(d)) stop("incorrect number of subscripts", call. = FALSE)
    pos <- 0L
    stride <- 1L
    for (k in seq_along(d)) {
      ik <- if (is.null(idx[[k]])) seq_len(d[k]) - 1L else .index(idx[[k]], d[k])
      pos <- as.vector(outer(pos, ik * stride, `+`))
      stride <- stride * d[k]
    }
  }
  values <- .flatten_cm(.astype(as_mlx(value), mlx_dtype(x)))
  if (length(values) == 1L) values <- .Call(C_broadcast_to, values, length(pos))
  if (length(values) != length(pos)) {
    stop(sprintf("%d values cannot replace %d elements", length(values), length(pos)), call. = FALSE)
  }
  .reshape_cm(.Call(C_put, .flatten_cm(x), as.integer(pos), values, 0L), d)
}
