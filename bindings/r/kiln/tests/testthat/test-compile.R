# Each compiled function counts its traces in `traces`: its R body runs only when kiln traces.
counting <- function(body) {
  env <- new.env()
  env$traces <- 0
  list(env = env, f = function(...) {
    env$traces <- env$traces + 1
    body(...)
  })
}

test_that("compiling returns at once; the first call traces, same shapes and dtypes reuse it", {
  k <- counting(function(x, y) exp(-x) * sin(y) + x^2 / 2)
  fast <- mlx_compile(k$f)
  expect_equal(k$env$traces, 0)
  expect_equal(mlx_compile_traces(fast), 0)
  a <- rmat(4, 5, seed = 1)
  b <- rmat(4, 5, seed = 2)
  expect_equal(as.matrix(fast(as_mlx(a), as_mlx(b))), exp(-a) * sin(b) + a^2 / 2, tolerance = f32)
  expect_equal(k$env$traces, 1)
  # New values of the same shapes and dtypes: replayed, and the results are for the new values.
  expect_equal(as.matrix(fast(as_mlx(b), as_mlx(a))), exp(-b) * sin(a) + b^2 / 2, tolerance = f32)
  expect_equal(k$env$traces, 1)
  expect_equal(mlx_compile_traces(fast), 1)
})

test_that("a new shape recompiles unless shapeless = TRUE", {
  k <- counting(function(x) x * 2 + 1)
  fast <- mlx_compile(k$f)
  fast(as_mlx(1:3))
  expect_equal(as.vector(fast(as_mlx(1:5))), 1:5 * 2 + 1)
  expect_equal(k$env$traces, 2)
  s <- counting(function(x) x * 2 + 1)
  shapeless <- mlx_compile(s$f, shapeless = TRUE)
  shapeless(as_mlx(1:3))
  expect_equal(as.vector(shapeless(as_mlx(1:5))), 1:5 * 2 + 1)
  expect_equal(as.matrix(shapeless(as_mlx(matrix(1:6, 3)))), matrix(1:6, 3) * 2 + 1)
  expect_equal(s$env$traces, 2) # the matrix has a new ndim
  expect_equal(mlx_compile_traces(shapeless), 2)
})

test_that("a new dtype, ndim or argument count recompiles, even when shapeless", {
  k <- counting(function(...) Reduce(`+`, list(...)))
  fast <- mlx_compile(k$f, shapeless = TRUE)
  fast(as_mlx(1:3))
  expect_equal(k$env$traces, 1)
  expect_equal(mlx_dtype(fast(as_mlx(1:3, dtype = "float64"))), "float64")
  expect_equal(k$env$traces, 2)
  fast(as_mlx(matrix(1:4, 2)))
  expect_equal(k$env$traces, 3)
  expect_equal(as.vector(fast(as_mlx(1:3), as_mlx(4:6))), c(5, 7, 9))
  expect_equal(k$env$traces, 4)
  fast(as_mlx(7:9), as_mlx(1:3))
  expect_equal(k$env$traces, 4)
})

test_that("one array or a (nested, named) list of arrays comes back in the same structure", {
  forward_and_norm <- function(x, w) {
    y <- x %*% w
    list(y, sqrt(sum(y * y)))
  }
  x <- rmat(8, 3, seed = 3)
  w <- rmat(3, 2, seed = 4)
  res <- mlx_compile(forward_and_norm)(as_mlx(x), as_mlx(w))
  expect_type(res, "list")
  expect_length(res, 2)
  expect_equal(as.matrix(res[[1]]), x %*% w, tolerance = f32)
  expect_equal(as.numeric(res[[2]]), sqrt(sum((x %*% w)^2)), tolerance = f32)
  nested <- mlx_compile(function(a) list(double = a * 2, more = list(sq = a^2, neg = -a)))
  for (v in list(c(1, 2), c(3, 4))) {
    out <- nested(as_mlx(v))
    expect_named(out, c("double", "more"))
    expect_named(out$more, c("sq", "neg"))
    expect_equal(as.vector(out$more$sq), v^2)
    expect_equal(as.vector(out$more$neg), -v)
  }
  expect_true(is_mlx(mlx_compile(function(a) a + 1)(as_mlx(1))))
  expect_error(mlx_compile(function(a) 1)(as_mlx(1)), "must return an mlx array")
})

test_that("reading a traced array is an R error naming mlx_disable_compile()", {
  readers <- list(print = function(x) print(x), as.matrix = as.matrix, as.numeric = as.numeric,
                  as.vector = as.vector, "[[" = function(x) x[[1]])
  for (read in readers) {
    f <- mlx_compile(function(x) {
      read(x)
      x
    })
    expect_error(f(as_mlx(1:3)), "mlx_disable_compile()", fixed = TRUE)
  }
  # str() shows shape and dtype only, so it works while tracing.
  g <- mlx_compile(function(x) {
    str(x)
    x + 1
  })
  expect_output(g(as_mlx(1:3)), "mlx array \\[3\\] float32")
})

test_that("mlx_disable_compile() runs the R function on every call, so printing works", {
  k <- counting(function(x) {
    print(x)
    x * 3
  })
  f <- mlx_compile(k$f)
  mlx_disable_compile()
  on.exit(mlx_enable_compile())
  expect_output(res <- f(as_mlx(c(1, 2))), "mlx array \\[2\\] float32")
  expect_equal(as.vector(res), c(3, 6))
  expect_output(f(as_mlx(c(1, 2))))
  expect_equal(k$env$traces, 2)
  mlx_enable_compile()
  g <- counting(function(x) x + 1)
  fast <- mlx_compile(g$f)
  fast(as_mlx(1))
  fast(as_mlx(2))
  expect_equal(g$env$traces, 1)
})

test_that("the seed's matmul_add: conforming shapes match R, the seed's shapes are R's error", {
  matmul_add <- function(x, w, b) (x %*% w) + b
  fast <- mlx_compile(matmul_add)
  x <- rmat(32, 128, seed = 1)
  w <- rmat(128, 256, seed = 2)
  b <- rnorm(256)
  res <- fast(as_mlx(x), as_mlx(w), as_mlx(b))
  expect_equal(as.matrix(res), sweep(x %*% w, 2, b, "+"), tolerance = 1e-4)
  batch <- rmat(32, 128, seed = 3)
  expect_equal(as.matrix(fast(as_mlx(batch), as_mlx(w), as_mlx(b))), sweep(batch %*% w, 2, b, "+"), tolerance = 1e-4)
  expect_equal(mlx_compile_traces(fast), 1)
  err <- expect_error(fast(mlx_rand_normal(c(32, 128)), mlx_rand_normal(c(256, 128)), mlx_rand_normal(256)),
                      "non-conformable")
  expect_match(conditionMessage(err), "32 x 128", fixed = TRUE)
  expect_match(conditionMessage(err), "256 x 128", fixed = TRUE)
})

test_that("errors of the R function reach the user, and the function stays usable", {
  fail <- TRUE
  f <- mlx_compile(function(x) {
    if (fail) stop("my own failure")
    x - 1
  })
  expect_error(f(as_mlx(1)), "my own failure")
  fail <- FALSE
  expect_equal(as.vector(f(as_mlx(1))), 0)
})

test_that("compiled functions outlive their R function's other references and the GC", {
  make <- function(p) mlx_compile(function(x) x^p)
  fs <- lapply(1:3, make)
  gc()
  expect_equal(as.vector(fs[[3]](as_mlx(2))), 8)
  rm(fs)
  gc()
  expect_equal(as.vector(make(2)(as_mlx(3))), 9)
})

test_that("kernel counts and the explain report describe the fused plan", {
  f <- mlx_compile(function(x) exp(-x) * sin(x) + x^2 / 2)
  x <- mlx_rand_normal(c(64, 64))
  counts <- mlx_compile_kernels(f, x)
  expect_named(counts, c("eager", "compiled"))
  expect_gt(counts[["eager"]], counts[["compiled"]])
  expect_gte(counts[["compiled"]], 1)
  report <- mlx_compile_explain(f, x)
  expect_match(report, "kernel")
  expect_output(print(report))
  expect_error(mlx_compile_kernels(function(x) x, x), "mlx_compile")
  expect_output(print(f), "compiled function")
})

test_that("gradients of compiled functions match the uncompiled ones", {
  loss <- function(w, x) sum(tanh(x %*% w))
  w <- as_mlx(matrix(c(0.5, -0.25), 2, 1))
  x <- as_mlx(rmat(5, 2, seed = 9))
  expect_equal(as.vector(mlx_grad(mlx_compile(loss), w, x)[[1]]), as.vector(mlx_grad(loss, w, x)[[1]]),
               tolerance = f32)
})
