# cbind and rbind: vectors become columns (rows), single values are repeated, as in R.

.bind <- function(args, along) {
  args <- Filter(Negate(is.null), args)
  like <- Find(is_mlx, args)
  parts <- lapply(args, .as_operand, like = like)
  shapes <- lapply(parts, mlx_shape)
  # The extent across the join: that of the matrices, else of the longest vector.
  across <- 3L - along
  mats <- Filter(function(d) length(d) == 2L, shapes)
  n <- if (length(mats)) mats[[1L]][across] else max(vapply(parts, length, 1L))
  parts <- lapply(parts, function(p) {
    if (length(mlx_shape(p)) == 2L) return(p)
    if (length(p) == 1L) p <- .Call(C_broadcast_to, .Call(C_reshape, p, 1L), n)
    if (length(p) != n) stop(sprintf("cannot bind a vector of length %d to %d", length(p), n), call. = FALSE)
    .Call(C_reshape, p, if (along == 2L) c(n, 1L) else c(1L, n))
  })
  .Call(C_concatenate, parts, along - 1L)
}

cbind.mlx <- function(..., deparse.level = 1) .bind(list(...), along = 2L)
rbind.mlx <- function(..., deparse.level = 1) .bind(list(...), along = 1L)
