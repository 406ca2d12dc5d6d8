# Constructors: filled arrays, ranges and identity matrices (float32 unless `dtype` says).

# A 0-d array holding one R value.
.scalar <- function(value, dtype) .new_mlx(value, integer(0), dtype)

mlx_full <- function(dim, value, dtype = NULL, device = mlx_default_device()) {
  dtype <- dtype %||% .default_dtype(value)
  with_default_device(device, .Call(C_full, as.integer(dim), .scalar(value, dtype), .dtype_code(dtype)))
}

mlx_zeros <- function(dim, dtype = "float32", device = mlx_default_device()) mlx_full(dim, 0, dtype, device)
mlx_ones <- function(dim, dtype = "float32", device = mlx_default_device()) mlx_full(dim, 1, dtype, device)

# start, start + step, ... up to stop, including stop when a step lands on it (as seq()).
mlx_arange <- function(start, stop, step = 1, dtype = "float32", device = mlx_default_device()) {
  n <- floor((stop - start) / step + 1e-10) + 1
  if (n < 1) stop("stop is not reachable from start by step", call. = FALSE)
  # kiln's stop is exclusive: half a step past the last value gives exactly n values.
  with_default_device(device, .Call(C_arange, start, start + (n - 0.5) * step, step, .dtype_code(dtype)))
}

mlx_eye <- function(n, m = n, k = 0L, dtype = "float32", device = mlx_default_device()) {
  with_default_device(device, .Call(C_eye, n, m, k, .dtype_code(dtype)))
}

mlx_identity <- function(n, dtype = "float32", device = mlx_default_device()) mlx_eye(n, dtype = dtype, device = device)
