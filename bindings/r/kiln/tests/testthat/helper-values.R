# Float32 results are compared with R's double results to float32 precision.
f32 <- 1e-5

# A matrix of reproducible values (R's own RNG, so tests do not depend on kiln's).
rmat <- function(nrow, ncol, seed = 1) {
  set.seed(seed)
  matrix(round(rnorm(nrow * ncol), 3), nrow, ncol)
}
