# Elementwise functions on a 1000 x 4096 float32 array, uncompiled and compiled: the kernels
# each launches (kiln's counts) and the median time of several calls, each evaluating its result.
# Rscript elementwise.R [--explain]
suppressPackageStartupMessages(library(kiln))

reps <- 9L
x <- mlx_rand_normal(c(1000, 4096), key = mlx_key(0))
mlx_eval(x)

funs <- list(
  "gelu: x * (1 + erf(x / sqrt(2))) / 2" = function(x) x * (1 + mlx_erf(x / sqrt(2))) / 2,
  "exp(-x) * sin(x) + x^2 / 2" = function(x) exp(-x) * sin(x) + x^2 / 2
)

# Median wall time of `reps` evaluated calls of f(x), in ms, after three warm-up calls.
median_ms <- function(f) {
  for (i in 1:3) mlx_eval(f(x))
  times <- vapply(seq_len(reps), function(i) {
    start <- Sys.time()
    mlx_eval(f(x))
    as.numeric(Sys.time() - start, units = "secs") * 1e3
  }, numeric(1))
  stats::median(times)
}

cat(sprintf("kiln R package, %s, %d x %d float32, median of %d runs\n",
            mlx_default_device(), nrow(x), ncol(x), reps))
for (name in names(funs)) {
  f <- funs[[name]]
  fast <- mlx_compile(f)
  kernels <- mlx_compile_kernels(fast, x)
  stopifnot(isTRUE(all.equal(fast(x), as.array(f(x)), tolerance = 1e-5)))
  uncompiled <- median_ms(f)
  compiled <- median_ms(fast)
  cat(sprintf("%-38s kernels %2d -> %d   uncompiled %8.2f ms   compiled %8.2f ms   (%.2fx)\n",
              name, as.integer(kernels[["eager"]]), as.integer(kernels[["compiled"]]),
              uncompiled, compiled, uncompiled / compiled))
}

if ("--explain" %in% commandArgs(trailingOnly = TRUE)) {
  print(mlx_compile_explain(mlx_compile(funs[[1]]), x))
}
