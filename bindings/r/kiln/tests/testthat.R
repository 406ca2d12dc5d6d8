# R CMD check entry point; scripts/r-test runs the same files with testthat::test_dir.
library(testthat)
library(kiln)
test_check("kiln")
