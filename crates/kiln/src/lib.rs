//! kiln: a lazy array framework whose heart is `compile`.
//!
//! Ops build a graph of [`Array`] nodes; nothing computes until [`Array::eval`], [`eval`],
//! [`Array::item`], [`Array::to_vec`] or printing. Every op validates its arguments and returns a
//! [`Result`] whose [`Error`] names the op, the shapes and the dtypes involved.
//!
//! ```
//! use kiln::{ops, Array};
//! let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let y = ops::exp(&x).unwrap() * 2.0;
//! assert_eq!(y.shape(), &[3]);
//! println!("{y}");
//! ```

pub mod array;
pub mod backend;
pub mod buffer;
pub mod complex;
pub mod cuda_kernel;
pub mod device;
pub mod dot;
pub mod dtype;
pub mod error;
pub mod external;
pub mod fused;
pub mod gguf;
pub mod io;
pub mod kernel;
pub mod linalg;
pub mod ops;
pub mod primitive;
pub mod shape;
pub mod transforms;

mod eval;
pub(crate) mod fast_hash;
mod identity;
mod operators;
mod print;

pub use array::{async_eval, eval, Array, Literal};
pub use backend::cuda::matmul::{allow_tf32, set_allow_tf32};
pub use buffer::{
    active_memory, cache_memory, clear_cache, peak_memory, reset_peak_memory, set_cache_limit, set_memory_limit, transfers,
    Transfers,
};
pub use device::{
    default_device, new_stream, set_default_device, synchronize, with_device, with_stream, Device, DeviceKind, Stream,
};
pub use dot::to_dot;
pub use complex::Complex64;
pub use dtype::{promote_types, Dtype, Element};
pub use error::{Error, ErrorKind, Result};
pub use ops::random;
pub use print::{print_precision, set_print_precision};
pub use shape::Shape;
pub use kernel::{custom_kernel, KernelArgs};
pub use transforms::{checkpoint, depends, grad, jvp, stop_gradient, value_and_grad, vjp, vmap, CustomFunction};
pub use transforms::compile::eager::{eager_fusion_stats, set_eager_fusion, EagerFusionStats};
pub use transforms::{
    compile, compile_fn, compile_with, compile_with_constants, disable_compile, enable_compile, is_compile_enabled,
    ArrayList, CompileMode, CompileOptions, Compiled, Constant, Implicit, Report,
};
