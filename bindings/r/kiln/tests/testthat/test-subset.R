m <- matrix(1:20, 4, 5) + 0
x <- as_mlx(m)

test_that("[ selects as R does, keeping dims unless drop = TRUE", {
  expect_identical(as.matrix(x[2, ]), m[2, , drop = FALSE])
  expect_identical(as.matrix(x[, 3]), m[, 3, drop = FALSE])
  expect_identical(as.matrix(x[2:3, c(1, 5)]), m[2:3, c(1, 5)])
  expect_identical(as.matrix(x[-1, -c(2, 4)]), m[-1, -c(2, 4)])
  expect_identical(as.matrix(x[c(TRUE, FALSE), ]), m[c(TRUE, FALSE), ])
  expect_identical(as.vector(x[2, , drop = TRUE]), m[2, ])
  expect_equal(mlx_shape(x[2, , drop = TRUE]), 5L)
  expect_identical(as.vector(x[c(3, 7, 20)]), m[c(3, 7, 20)])
  expect_identical(as.vector(as_mlx(1:10 + 0)[c(2, 9)]), c(2, 9))
  a <- array(1:60, c(3, 4, 5)) + 0
  expect_identical(as.array(as_mlx(a)[2:3, , c(1, 5)]), a[2:3, , c(1, 5)])
  expect_error(x[5, 1], "out of bounds")
  expect_error(x[1, 2, 3], "dimensions")
})

test_that("[<- replaces as R does", {
  y <- x
  y[2, 3] <- 100
  r <- m
  r[2, 3] <- 100
  expect_identical(as.matrix(y), r)
  y[, 1] <- c(-1, -2, -3, -4)
  r[, 1] <- c(-1, -2, -3, -4)
  expect_identical(as.matrix(y), r)
  y[1:2, 4:5] <- as_mlx(matrix(c(7, 8, 9, 10), 2))
  r[1:2, 4:5] <- matrix(c(7, 8, 9, 10), 2)
  expect_identical(as.matrix(y), r)
  y[c(1, 20)] <- 0
  r[c(1, 20)] <- 0
  expect_identical(as.matrix(y), r)
  expect_identical(as.matrix(x), m)
  expect_error(y[1, 1:2] <- 1:3, "cannot replace")
})
