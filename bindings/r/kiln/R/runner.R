# R functions as kiln closures. kiln calls a "runner" with a list of mlx arrays; the runner
# calls the user's function and returns its outputs as a flat list of mlx arrays. The
# function may return one array or a (nested) list of them: its shape is kept in
# `state$skeletons` under the current call's signature, to rebuild the result after kiln
# returns (a compiled function's later calls do not run the R function).

# The outputs of a function's result, in order (stops unless every leaf is an mlx array).
.leaves <- function(out) {
  if (is_mlx(out)) return(list(out))
  if (!is.list(out) || !length(out)) {
    stop("the function must return an mlx array or a list of mlx arrays, not ", class(out)[1L], call. = FALSE)
  }
  do.call(c, lapply(unname(out), .leaves))
}

# The result's structure with each array replaced by TRUE.
.skeleton <- function(out) if (is.list(out)) lapply(out, .skeleton) else TRUE

# A result of the recorded structure holding `values` in order.
.rebuild <- function(skeleton, values) {
  i <- 0L
  fill <- function(node) {
    if (is.list(node)) return(lapply(node, fill))
    i <<- i + 1L
    values[[i]]
  }
  fill(skeleton)
}

# State shared by a function wrapper and its runner: the argument names and signature of the
# call under way, and the result skeletons seen so far.
.new_state <- function() {
  state <- new.env(parent = emptyenv())
  state$names <- NULL
  state$signature <- "call"
  state$skeletons <- list()
  state
}

# The runner of `f`; it must not hold the kiln closure (it is kept alive by it).
.runner <- function(f, state) {
  function(arrays) {
    names(arrays) <- state$names
    out <- do.call(f, arrays)
    state$skeletons[[state$signature]] <- .skeleton(out)
    .leaves(out)
  }
}

# The arguments of a call as mlx arrays, their names recorded in `state`.
.prepare_args <- function(state, args) {
  args <- lapply(args, as_mlx)
  state$names <- names(args)
  unname(args)
}
