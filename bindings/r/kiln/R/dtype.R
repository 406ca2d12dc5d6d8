# kiln's dtypes, in the order of its KILN_* codes (KILN_BOOL = 0 ... KILN_COMPLEX64 = 13).
.dtypes <- c("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
             "float16", "bfloat16", "float32", "float64", "complex64")

# The kiln code of a dtype name.
.dtype_code <- function(dtype) {
  code <- match(dtype, .dtypes)
  if (length(dtype) != 1L || is.na(code)) {
    stop(sprintf("unknown dtype '%s': use one of %s", paste(dtype, collapse = ", "),
                 paste(.dtypes, collapse = ", ")), call. = FALSE)
  }
  code - 1L
}

.is_float <- function(dtype) dtype %in% c("float16", "bfloat16", "float32", "float64")

# The dtype R data gets by default: bool for logical, float32 otherwise (as Rmlx).
.default_dtype <- function(x) if (is.logical(x)) "bool" else "float32"

`%||%` <- function(a, b) if (is.null(a)) b else a
