# Compiled functions. mlx_compile returns at once; kiln traces the R function (with
# placeholder arrays) on the first call of each input signature and replays the fused plan
# after that. The signature is what kiln keys its traces on: the argument count, dtypes,
# ndims and, unless shapeless, shapes.

.signature <- function(args, shapeless) {
  paste(vapply(args, function(a) {
    d <- mlx_shape(a)
    paste0(mlx_dtype(a), "[", if (shapeless) length(d) else .dims_text(d), "]")
  }, ""), collapse = ",")
}

mlx_compile <- function(f, shapeless = FALSE) {
  f <- match.fun(f)
  shapeless <- isTRUE(shapeless)
  state <- .new_state()
  cls <- .Call(C_compile, .Call(C_closure, .runner(f, state)), shapeless)
  # Calls `kiln_call(cls, arrays)` for the arguments in `...`, recording what the runner needs.
  call_with <- function(kiln_call, ...) {
    args <- .prepare_args(state, list(...))
    state$signature <- .signature(args, shapeless)
    kiln_call(cls, args)
  }
  compiled <- function(...) {
    outs <- call_with(function(cls, args) .Call(C_apply, cls, args), ...)
    .rebuild(state$skeletons[[state$signature]], outs)
  }
  structure(compiled, class = c("mlx_compiled", "function"))
}

# The environment of a function made by mlx_compile (its kiln closure and call helper).
.compiled_env <- function(f) {
  if (!inherits(f, "mlx_compiled")) stop("f must be a function made by mlx_compile()", call. = FALSE)
  environment(f)
}

# How many times the compiled function has traced its R function.
mlx_compile_traces <- function(f) .Call(C_trace_count, .compiled_env(f)$cls)

# c(eager, compiled): the kernels an uncompiled run launches for these arguments, and those
# the compiled plan launches (tracing first for a new signature).
mlx_compile_kernels <- function(f, ...) {
  counts <- .compiled_env(f)$call_with(function(cls, args) .Call(C_kernel_count, cls, args), ...)
  c(eager = counts[1L], compiled = counts[2L])
}

# kiln's compile report for these arguments: the graph before and after simplification, each
# fused kernel and how it runs, and the kernel counts. Printed with cat().
mlx_compile_explain <- function(f, ...) {
  report <- .compiled_env(f)$call_with(function(cls, args) .Call(C_explain, cls, args), ...)
  structure(report, class = "mlx_compile_report")
}

print.mlx_compile_report <- function(x, ...) {
  cat(x, "\n", sep = "")
  invisible(x)
}

print.mlx_compiled <- function(x, ...) {
  cat(sprintf("<mlx compiled function%s, traced %d times>\n",
              if (environment(x)$shapeless) " (shapeless)" else "", as.integer(mlx_compile_traces(x))))
  invisible(x)
}

# Run compiled functions uncompiled (their R code then runs on every call, so printing and
# converting arrays inside them works), or compile again.
mlx_disable_compile <- function() invisible(.Call(C_set_compile, FALSE))
mlx_enable_compile <- function() invisible(.Call(C_set_compile, TRUE))
