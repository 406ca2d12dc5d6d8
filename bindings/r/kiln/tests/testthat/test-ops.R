a <- rmat(3, 4, seed = 1)
b <- rmat(3, 4, seed = 2) + 5
xa <- as_mlx(a)
xb <- as_mlx(b)

test_that("arithmetic matches R, with R values on either side", {
  expect_equal(as.matrix(xa + xb), a + b, tolerance = f32)
  expect_equal(as.matrix(xa - xb), a - b, tolerance = f32)
  expect_equal(as.matrix(xa * xb), a * b, tolerance = f32)
  expect_equal(as.matrix(xa / xb), a / b, tolerance = f32)
  expect_equal(as.matrix(xb^2), b^2, tolerance = f32)
  expect_equal(as.matrix(2 * xa - 1), 2 * a - 1, tolerance = f32)
  expect_equal(as.matrix(1 / xb), 1 / b, tolerance = f32)
  expect_equal(as.matrix(xa + b), a + b, tolerance = f32)
  expect_equal(as.matrix(a - xb), a - b, tolerance = f32)
  expect_equal(as.matrix(-xa), -a, tolerance = f32)
  expect_equal(as.matrix(xb %/% 2), b %/% 2, tolerance = f32)
  expect_equal(as.matrix(xa %% 0.7), a %% 0.7, tolerance = 1e-5)
  expect_equal(mlx_dtype(xa * 2), "float32")
})

test_that("a vector broadcasts along the last axis", {
  v <- c(10, 20, 30, 40)
  expect_equal(as.matrix(xa + as_mlx(v)), sweep(a, 2, v, "+"), tolerance = f32)
})

test_that("comparisons and logical operators give bool arrays matching R", {
  expect_identical(as.matrix(xa > 0), a > 0)
  expect_identical(as.matrix(xa <= xb), a <= b)
  expect_identical(as.matrix(0 == xa), 0 == a)
  expect_identical(as.matrix(xa != 0), a != 0)
  expect_identical(as.matrix((xa > 0) & (xa < 1)), (a > 0) & (a < 1))
  expect_identical(as.matrix((xa > 1) | (xa < -1)), (a > 1) | (a < -1))
  expect_identical(as.matrix(!(xa > 0)), !(a > 0))
  expect_equal(mlx_dtype(xa > 0), "bool")
})

test_that("Math functions match R", {
  p <- abs(a) + 0.1
  xp <- as_mlx(p)
  for (fn in list(exp, sqrt, log, log2, log10, log1p, expm1, sin, cos, tan, tanh, atan, sinh, cosh)) {
    expect_equal(as.matrix(fn(xp)), fn(p), tolerance = f32)
  }
  expect_equal(as.matrix(abs(xa)), abs(a), tolerance = f32)
  expect_equal(as.matrix(sign(xa)), sign(a))
  expect_equal(as.matrix(floor(xa)), floor(a))
  expect_equal(as.matrix(ceiling(xa)), ceiling(a))
  expect_equal(as.matrix(trunc(xa)), trunc(a))
  expect_equal(as.matrix(round(xa, 1)), round(a, 1), tolerance = f32)
  expect_equal(as.matrix(log(xp, 3)), log(p, 3), tolerance = f32)
  expect_equal(as.matrix(asin(xp / 4)), asin(p / 4), tolerance = f32)
  expect_equal(as.vector(cumsum(xa)), cumsum(a), tolerance = f32)
  expect_equal(as.vector(cumprod(as_mlx(1:6))), cumprod(1:6), tolerance = f32)
  expect_equal(as.vector(cummax(xa)), cummax(a), tolerance = f32)
  expect_equal(as.matrix(mlx_erf(xa)), 2 * pnorm(a * sqrt(2)) - 1, tolerance = f32)
  expect_equal(as.matrix(mlx_sigmoid(xa)), 1 / (1 + exp(-a)), tolerance = f32)
  expect_error(gamma(xa), "not supported")
})

test_that("Summary functions, mean and margins match R", {
  expect_equal(as.numeric(sum(xa)), sum(a), tolerance = f32)
  expect_equal(as.numeric(prod(xb)), prod(b), tolerance = f32)
  expect_equal(as.numeric(max(xa)), max(a), tolerance = f32)
  expect_equal(as.numeric(min(xa)), min(a), tolerance = f32)
  expect_equal(as.numeric(sum(xa, xb)), sum(a, b), tolerance = f32)
  expect_equal(as.numeric(range(xa)), range(a), tolerance = f32)
  expect_identical(as.logical(any(xa > 1)), any(a > 1))
  expect_identical(as.logical(all(xb > 0)), all(b > 0))
  expect_equal(as.numeric(mean(xa)), mean(a), tolerance = f32)
  expect_equal(as.vector(rowSums(xa)), rowSums(a), tolerance = f32)
  expect_equal(as.vector(colSums(xa)), colSums(a), tolerance = f32)
  expect_equal(as.vector(rowMeans(xa)), rowMeans(a), tolerance = f32)
  expect_equal(as.vector(colMeans(xa)), colMeans(a), tolerance = f32)
  arr <- array(rnorm(24), c(2, 3, 4))
  expect_equal(as.array(rowSums(as_mlx(arr), dims = 2)), rowSums(arr, dims = 2), tolerance = f32)
  expect_equal(as.vector(colMeans(as_mlx(arr), dims = 2)), colMeans(arr, dims = 2), tolerance = f32)
  # base R objects still reach base's functions
  expect_identical(rowSums(a), base::rowSums(a))
})

test_that("maximum, minimum and where work elementwise", {
  expect_equal(as.matrix(mlx_maximum(xa, 0)), pmax(a, 0), tolerance = f32)
  expect_equal(as.matrix(mlx_minimum(xa, xb)), pmin(a, b), tolerance = f32)
  expect_equal(as.matrix(mlx_where(xa > 0, xa, 0)), ifelse(a > 0, a, 0), tolerance = f32)
  expect_identical(as.matrix(is.nan(as_mlx(matrix(c(NaN, 1), 1)))), matrix(c(TRUE, FALSE), 1))
})

test_that("kiln errors become R errors", {
  expect_error(as_mlx(1:3) + as_mlx(1:4), "\\+")
  expect_error(mlx_rand_normal(c(2, 2)) %*% mlx_rand_normal(c(3, 3)), "non-conformable")
})
