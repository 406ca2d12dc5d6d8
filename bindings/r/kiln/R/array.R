# Making mlx arrays from R data, and reading them back. An mlx array is an external pointer of
# class "mlx" holding a kiln handle; its shape is R's dim (see src/kr_convert.c for the layout).

# An mlx array of `dtype` and `dim` from numeric or logical `data` (column-major).
.new_mlx <- function(data, dim, dtype) {
  if (!is.numeric(data) && !is.logical(data)) {
    stop(sprintf("cannot make an mlx array from %s data (numeric or logical only)", class(data)[1]),
         call. = FALSE)
  }
  if (length(data) != prod(dim)) {
    stop(sprintf("%d values do not fill an array of dim %s", length(data), paste(dim, collapse = " x ")),
         call. = FALSE)
  }
  .Call(C_from_r, as.double(data), as.integer(dim), .dtype_code(dtype))
}

# Convert R data to an mlx array
#'
# Numeric data becomes float32 and logical data bool unless `dtype` says otherwise; `dim` is
# kept (a vector becomes a 1-d array).
as_mlx <- function(x, dtype = NULL, device = mlx_default_device()) {
  if (is_mlx(x)) return(if (is.null(dtype) || mlx_dtype(x) == dtype) x else .astype(x, dtype))
  with_default_device(device, .new_mlx(x, dim(x) %||% length(x), dtype %||% .default_dtype(x)))
}

is_mlx <- function(x) inherits(x, "mlx")

# An mlx array of the given `dim` filled column-major from `data`
mlx_array <- function(data, dim, dtype = NULL, device = mlx_default_device(), allow_scalar = FALSE) {
  if (length(dim) == 0L && !allow_scalar) stop("dim is empty: pass allow_scalar = TRUE for a 0-d array", call. = FALSE)
  with_default_device(device, .new_mlx(as.vector(data), dim, dtype %||% .default_dtype(data)))
}

# An mlx matrix, as base::matrix() (a single value is repeated; other lengths must fit exactly)
mlx_matrix <- function(data, nrow = NULL, ncol = NULL, byrow = FALSE, dtype = NULL,
                       device = mlx_default_device()) {
  n <- length(data)
  nrow <- nrow %||% (if (is.null(ncol)) n else n %/% ncol)
  ncol <- ncol %||% (n %/% nrow)
  if (n != 1L && n != nrow * ncol) {
    stop(sprintf("%d values do not fill a %d x %d matrix", n, nrow, ncol), call. = FALSE)
  }
  as_mlx(matrix(data, nrow, ncol, byrow = byrow), dtype = dtype, device = device)
}

# A 1-d mlx array
mlx_vector <- function(data, dtype = NULL, device = mlx_default_device()) {
  mlx_array(data, length(data), dtype = dtype, device = device)
}

# A 0-d mlx array
mlx_scalar <- function(value, dtype = NULL, device = mlx_default_device()) {
  mlx_array(value, integer(0), dtype = dtype, device = device, allow_scalar = TRUE)
}

mlx_shape <- function(x) .Call(C_shape, x)

mlx_dtype <- function(x) .dtypes[.Call(C_dtype, x) + 1L]

.astype <- function(x, dtype) .Call(C_astype, x, .dtype_code(dtype))

# Compute arrays now (kiln is lazy); takes an mlx array or a list of them
mlx_eval <- function(x) {
  .Call(C_eval, if (is_mlx(x)) list(x) else x)
  invisible(x)
}

# The elements as an R vector, column-major (this evaluates x).
.values <- function(x) .Call(C_to_r, x)

as.vector.mlx <- function(x, mode = "any") as.vector(.values(x), mode)
as.double.mlx <- function(x, ...) as.double(.values(x))
as.integer.mlx <- function(x, ...) as.integer(.values(x))
as.logical.mlx <- function(x, ...) as.logical(.values(x))

# As an R array (a vector for 0-d and 1-d arrays)
as.array.mlx <- function(x, ...) {
  v <- .values(x)
  d <- mlx_shape(x)
  if (length(d) >= 2L) dim(v) <- d
  v
}

# As an R matrix (a column for arrays that are not 2-d, as base::as.matrix)
as.matrix.mlx <- function(x, ...) {
  d <- mlx_shape(x)
  matrix(.values(x), nrow = if (length(d) == 2L) d[1L] else prod(d))
}

`[[.mlx` <- function(x, ...) as.array(x)[[...]]

dim.mlx <- function(x) mlx_shape(x)

`dim<-.mlx` <- function(x, value) {
  if (prod(value) != length(x)) stop("dims do not match the length of the array", call. = FALSE)
  .reshape_cm(x, value)
}

length.mlx <- function(x) as.integer(prod(mlx_shape(x)))

# x with dim `dim`, keeping R's column-major element order: reverse the axes, reshape
# row-major to the reversed dim, and reverse back.
.reshape_cm <- function(x, dim) {
  flat <- .Call(C_reshape, .Call(C_transpose, x, NULL), rev(as.integer(dim)))
  .Call(C_transpose, flat, NULL)
}

# x as a 1-d array in R's (column-major) element order.
.flatten_cm <- function(x) .reshape_cm(x, length(x))

# x with a new dim (column-major, as `dim<-`)
mlx_reshape <- function(x, dim) .reshape_cm(x, dim)
