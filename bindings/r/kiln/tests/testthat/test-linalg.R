test_that("%*% gives R's result for matrices and vectors", {
  x <- rmat(5, 3, seed = 3)
  w <- rmat(3, 4, seed = 4)
  expect_equal(as.matrix(as_mlx(x) %*% as_mlx(w)), x %*% w, tolerance = f32)
  expect_equal(as.matrix(as_mlx(x) %*% w), x %*% w, tolerance = f32)
  expect_equal(as.matrix(x %*% as_mlx(w)), x %*% w, tolerance = f32)
  v <- c(1, -2, 0.5)
  expect_equal(as.matrix(as_mlx(x) %*% as_mlx(v)), x %*% v, tolerance = f32)
  u <- c(1, 2, 3, 4, 5)
  expect_equal(as.matrix(as_mlx(u) %*% as_mlx(x)), u %*% x, tolerance = f32)
  expect_equal(as.matrix(as_mlx(v) %*% as_mlx(v)), v %*% v, tolerance = f32)
  # base R operands still use base's %*%
  expect_identical(x %*% w, base::`%*%`(x, w))
})

test_that("non-conformable shapes are R's error naming both shapes", {
  err <- expect_error(mlx_rand_normal(c(32, 128)) %*% mlx_rand_normal(c(256, 128)), "non-conformable")
  expect_match(conditionMessage(err), "32 x 128", fixed = TRUE)
  expect_match(conditionMessage(err), "256 x 128", fixed = TRUE)
  expect_error(mlx_zeros(c(2, 2, 2)) %*% mlx_zeros(c(2, 2)), "vectors or matrices")
})

test_that("t and aperm transpose as R does", {
  x <- rmat(2, 5)
  expect_identical(as.matrix(t(as_mlx(x))), t(as.matrix(as_mlx(x))))
  expect_equal(as.matrix(t(as_mlx(x))), t(x), tolerance = f32)
  expect_equal(as.matrix(t(as_mlx(1:3))), t(1:3) + 0)
  a <- array(1:24, c(2, 3, 4))
  expect_identical(as.array(aperm(as_mlx(a), c(3, 1, 2))), aperm(a, c(3, 1, 2)) + 0)
})

test_that("cbind and rbind join as R does", {
  m <- matrix(1:6, 2)
  expect_identical(as.matrix(cbind(as_mlx(m), 7:8)), cbind(m, 7:8) + 0)
  expect_identical(as.matrix(cbind(as_mlx(m), 0)), cbind(m, 0) + 0)
  expect_identical(as.matrix(rbind(as_mlx(m), as_mlx(m))), rbind(m, m) + 0)
  expect_identical(as.matrix(rbind(as_mlx(m), 1:3)), rbind(m, 1:3) + 0)
  expect_identical(as.matrix(cbind(as_mlx(1:2), as_mlx(3:4))), cbind(1:2, 3:4) + 0)
})
