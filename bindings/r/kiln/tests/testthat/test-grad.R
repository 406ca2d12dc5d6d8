# Central finite differences of a scalar R function at x.
numeric_grad <- function(f, x, h = 1e-5) {
  vapply(seq_along(x), function(i) {
    e <- replace(numeric(length(x)), i, h)
    (f(x + e) - f(x - e)) / (2 * h)
  }, numeric(1))
}

test_that("mlx_grad matches finite differences", {
  w0 <- c(0.3, -0.7, 1.1)
  x <- rmat(6, 3, seed = 5)
  y <- c(1, -1, 2, 0, 0.5, 1)
  loss <- function(w, x, y) {
    r <- x %*% w - y
    sum(r * r) / length(y)
  }
  g <- mlx_grad(loss, as_mlx(matrix(w0, 3, 1)), as_mlx(x), as_mlx(matrix(y, 6, 1)), argnums = 1)
  expect_length(g, 1)
  expect_equal(mlx_shape(g[[1]]), c(3L, 1L))
  ref <- numeric_grad(function(w) sum((x %*% w - y)^2) / length(y), w0)
  expect_equal(as.vector(g[[1]]), ref, tolerance = 1e-4)
  expect_equal(as.vector(g[[1]]), as.vector(2 * t(x) %*% (x %*% w0 - y) / 6), tolerance = f32)
})

test_that("mlx_grad differentiates every argument by default, through Math and margins", {
  f <- function(a, b) sum(exp(a) * sin(b)) + mean(rowSums(a * a))
  a <- rmat(2, 3, seed = 6)
  b <- rmat(2, 3, seed = 7)
  g <- mlx_grad(f, as_mlx(a), as_mlx(b))
  expect_length(g, 2)
  expect_equal(as.matrix(g[[1]]), exp(a) * sin(b) + 2 * a / 2, tolerance = f32)
  expect_equal(as.matrix(g[[2]]), exp(a) * cos(b), tolerance = f32)
})

test_that("mlx_value_grad gives the value and the gradients", {
  vg <- mlx_value_grad(function(x) sum(x^3), as_mlx(c(1, 2, 3)))
  expect_equal(as.numeric(vg$value), 36)
  expect_equal(as.vector(vg$grads[[1]]), 3 * c(1, 2, 3)^2)
  vg2 <- mlx_grad(function(x) sum(x^3), as_mlx(c(1, 2)), value = TRUE)
  expect_equal(names(vg2), c("value", "grads"))
})

test_that("errors in the differentiated function reach the user", {
  expect_error(mlx_grad(function(x) stop("bad loss"), as_mlx(1)), "bad loss")
  expect_error(mlx_grad(function(x) sum(x), as_mlx(1), argnums = 3), "argnums")
})
