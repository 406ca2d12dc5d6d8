//! kiln's C API (`include/kiln.h`): the foundation of every binding but Python's.
//!
//! Conventions, as mlx-c's:
//! - Opaque handles (`kiln_array`, `kiln_vector_array`, `kiln_closure`, `kiln_stream`,
//!   `kiln_device`, `kiln_string`, maps), each a struct with one pointer, passed by value, made
//!   by `kiln_*_new*` and released by `kiln_*_free`. An empty handle (NULL `ctx`) receives
//!   results; passing one where a value is needed is an error, not a crash.
//! - Every function returns an int status, 0 for success, and writes results through its first
//!   arguments (`kiln_add(&res, a, b, stream)`).
//! - A failure's message, the same text as the Rust error (op, shapes, dtypes, the fix), is kept
//!   per thread for `kiln_last_error()` and passed to the handler of `kiln_set_error_handler`.
//!   No Rust panic crosses the boundary.
//! - Closures (C functions of a vector of arrays) go through the same transforms and the same
//!   `compile` as Rust and Python closures.
//!
//! # Safety
//! Every pointer argument is NULL (an error where a value is needed) or valid for its use, and
//! every handle is empty or made by this library and not yet freed; these are the terms of all
//! the `unsafe extern "C"` functions here, stated once.
#![allow(non_camel_case_types, clippy::missing_safety_doc)]

pub mod array;
pub mod closure;
pub mod compile;
pub mod device;
pub mod error;
mod handle;
pub mod io;
pub mod ops;
pub mod string;
pub mod transforms;
pub mod vector;
