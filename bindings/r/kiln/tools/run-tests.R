# Runs the testthat suite on the installed package: Rscript run-tests.R LIBRARY TEST_DIR.
# Prints "N passed, M failed" (", K skipped" when some were) as its last line, counting
# expectations (a test that stops with an error counts as one failure); exits 1 on any failure.
args <- commandArgs(trailingOnly = TRUE)
.libPaths(c(args[1], .libPaths()))
library(testthat)
results <- as.data.frame(test_dir(args[2], package = "kiln", load_package = "installed",
                                  reporter = "summary", stop_on_failure = FALSE))
passed <- sum(results$passed)
failed <- sum(results$failed) + sum(results$error)
skipped <- sum(results$skipped)
cat(sprintf("%d passed, %d failed%s\n", passed, failed, if (skipped) sprintf(", %d skipped", skipped) else ""))
quit(status = if (failed > 0) 1L else 0L)
