# Random arrays. Without `key` they draw from kiln's global random state; with a key from
# mlx_key() they are reproducible.

mlx_rand_normal <- function(dim, mean = 0, sd = 1, dtype = "float32", device = mlx_default_device(), key = NULL) {
  with_default_device(device, .Call(C_random_normal, as.integer(dim), mean, sd, .dtype_code(dtype), key))
}

mlx_rand_uniform <- function(dim, min = 0, max = 1, dtype = "float32", device = mlx_default_device(), key = NULL) {
  with_default_device(device, .Call(C_random_uniform, as.integer(dim), min, max, .dtype_code(dtype), key))
}

# A PRNG key from a seed.
mlx_key <- function(seed) .Call(C_key, seed)
