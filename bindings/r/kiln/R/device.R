# Devices: kiln runs ops on the default device ("cpu", or "gpu" where one is usable).

# The default device; with `value`, sets it first (an error names why a GPU is unusable).
mlx_default_device <- function(value) {
  if (missing(value)) return(.Call(C_default_device, NULL))
  invisible(.Call(C_default_device, match.arg(value, c("cpu", "gpu"))))
}

mlx_has_gpu <- function() .Call(C_has_gpu)

# Evaluates `code` with `device` as the default device.
with_default_device <- function(device, code) {
  old <- mlx_default_device()
  if (identical(device, old)) return(code)
  mlx_default_device(device)
  on.exit(mlx_default_device(old))
  code
}
