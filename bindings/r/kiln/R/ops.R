# The Ops group: arithmetic, comparison and logical operators, with R values on either side.

# R data as an operand next to the mlx array `like`: a single value becomes a 0-d array (so it
# broadcasts without adding an axis), and the dtype follows `like` where the values fit it,
# so float32 arrays stay float32 (as scalars in mlx).
.as_operand <- function(x, like) {
  if (is_mlx(x)) return(x)
  target <- mlx_dtype(like)
  whole <- (is.numeric(x) || is.logical(x)) && all(x == round(x), na.rm = TRUE)
  dtype <- if (is.logical(x) && target == "bool") "bool"
    else if (.is_float(target) || (target != "bool" && whole)) target
    else "float32"
  dim <- dim(x) %||% (if (length(x) == 1L) integer(0) else length(x))
  .new_mlx(x, dim, dtype)
}

.binary <- function(op, a, b) .Call(C_binary, op, a, b)

Ops.mlx <- function(e1, e2) {
  if (missing(e2)) {
    return(switch(.Generic,
      "-" = .Call(C_unary, "negative", e1),
      "+" = e1,
      "!" = .Call(C_unary, "not", e1),
      stop(sprintf("unary %s is not defined for mlx arrays", .Generic), call. = FALSE)
    ))
  }
  like <- if (is_mlx(e1)) e1 else e2
  .binary(.Generic, .as_operand(e1, like), .as_operand(e2, like))
}

# Elementwise maximum and minimum of two arrays (broadcasting).
mlx_maximum <- function(x, y) .binary("maximum", as_mlx(x), .as_operand(y, as_mlx(x)))
mlx_minimum <- function(x, y) .binary("minimum", as_mlx(x), .as_operand(y, as_mlx(x)))

# x where cond is true, y elsewhere.
mlx_where <- function(cond, x, y) {
  like <- if (is_mlx(x)) x else as_mlx(y)
  .Call(C_where, as_mlx(cond, dtype = "bool"), .as_operand(x, like), .as_operand(y, like))
}
