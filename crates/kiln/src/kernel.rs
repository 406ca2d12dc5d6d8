//! User kernels: a Rust function over input slices that fills declared outputs on the CPU, or
//! CUDA C from a source string on a GPU ([`crate::cuda_kernel`]). Inside a compiled function a
//! kernel call is an opaque boundary: the ops before and after it still fuse, as the seeds
//! describe. A call with several outputs runs once, whichever output is evaluated first.
//!
//! ```
//! use kiln::{custom_kernel, Array, Dtype, KernelArgs};
//! // out[i] = 2 * x[i] + 1
//! let x = Array::from_vec(vec![1.0f32, 2.0, 3.0]);
//! let out = custom_kernel("affine", &[x], &[(vec![3], Dtype::F32)], |args: &mut KernelArgs| {
//!     let x: Vec<f32> = args.input::<f32>(0)?.to_vec();
//!     for (o, v) in args.output::<f32>(0)?.iter_mut().zip(x) {
//!         *o = 2.0 * v + 1.0;
//!     }
//!     Ok(())
//! }).unwrap();
//! assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, 5.0, 7.0]);
//! ```

use crate::array::Array;
use crate::backend::Input;
use crate::buffer::Buffer;
use crate::dtype::{Dtype, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::identity::Shared;
use crate::primitive::Op;
use crate::shape::{fmt_shape, numel, Shape};
use std::sync::{Arc, Mutex};

/// The body of a user kernel.
pub type KernelFn = dyn Fn(&mut KernelArgs) -> Result<()> + Send + Sync;

/// What a kernel body sees: its inputs as row-major slices, and its outputs to fill.
pub struct KernelArgs<'a> {
    name: &'a str,
    inputs: Vec<(Shape, Dtype, Buffer)>,
    outputs: Vec<(Shape, Dtype, Buffer)>,
}

impl KernelArgs<'_> {
    /// Input `i` as a row-major slice of `T` (which must be its dtype).
    pub fn input<T: Element>(&self, i: usize) -> Result<&[T]> {
        self.readers().get(i)
    }
    /// The shape of input `i`.
    pub fn input_shape(&self, i: usize) -> &[usize] {
        &self.inputs[i].0
    }
    /// Output `i` as a mutable row-major slice of `T` (which must be its declared dtype).
    pub fn output<T: Element>(&mut self, i: usize) -> Result<&mut [T]> {
        let (_, out) = self.inputs_and_output(i)?;
        Ok(out)
    }
    /// The inputs, and output `i` as a mutable slice of `T`, at once: for bodies that read their
    /// inputs while they write (the borrows of [`input`](Self::input) and
    /// [`output`](Self::output) cannot overlap).
    pub(crate) fn inputs_and_output<T: Element>(&mut self, i: usize) -> Result<(KernelInputs<'_>, &mut [T])> {
        if let Some(&(_, dtype, _)) = self.outputs.get(i) {
            check::<T>(self.name, "output", i, dtype)?;
        }
        let bytes = self.output_bytes(i)?;
        // Safety: the output's memory holds its elements of dtype T, suitably aligned.
        let out = unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), bytes.len() / std::mem::size_of::<T>()) };
        Ok((KernelInputs { name: self.name, inputs: &self.inputs }, out))
    }
    /// Output `i`'s memory as bytes, whatever its dtype: for bodies that fill data they read
    /// rather than compute (a file's contents, say).
    pub fn output_bytes(&mut self, i: usize) -> Result<&mut [u8]> {
        let n = self.outputs.len();
        let (shape, dtype, buf) = self.outputs.get(i).ok_or_else(|| no_such(self.name, "output", i, n))?;
        // Safety: a fresh contiguous buffer of numel(shape) elements that only this call sees.
        Ok(unsafe { std::slice::from_raw_parts_mut(buf.ptr::<u8>(), numel(shape) * dtype.size()) })
    }
    fn readers(&self) -> KernelInputs<'_> {
        KernelInputs { name: self.name, inputs: &self.inputs }
    }
}

/// A kernel call's inputs, readable while one of its outputs is written
/// ([`KernelArgs::inputs_and_output`]).
pub(crate) struct KernelInputs<'b> {
    name: &'b str,
    inputs: &'b [(Shape, Dtype, Buffer)],
}

impl<'b> KernelInputs<'b> {
    /// Input `i` as a row-major slice of `T` (which must be its dtype).
    pub(crate) fn get<T: Element>(&self, i: usize) -> Result<&'b [T]> {
        let (shape, dtype, buf) = self.inputs.get(i).ok_or_else(|| no_such(self.name, "input", i, self.inputs.len()))?;
        check::<T>(self.name, "input", i, *dtype)?;
        // Safety: a contiguous buffer of numel(shape) elements of T, distinct from the outputs'.
        Ok(unsafe { std::slice::from_raw_parts(buf.ptr::<T>(), numel(shape)) })
    }
}

/// Refuses to read a kernel's input or output as a `T` other than its dtype.
fn check<T: Element>(name: &str, what: &str, i: usize, dtype: Dtype) -> Result<()> {
    if T::DTYPE != dtype {
        return Err(Error::dtype("custom_kernel", format!("kernel '{name}' read {what} {i} of dtype {dtype} as {}", T::DTYPE)));
    }
    Ok(())
}

/// The error for an input or output index past the end.
fn no_such(name: &str, what: &str, i: usize, n: usize) -> Error {
    Error::value("custom_kernel", format!("kernel '{name}' has {n} {what}s, asked for {what} {i}"))
}

/// One call of a user kernel: its body and declared outputs. Compares by identity, so two calls
/// are never merged (a kernel may be impure).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KernelCall(Shared<Site>);

struct Site {
    name: String,
    body: KernelBody,
    outputs: Vec<(Shape, Dtype)>,
    /// Outputs an eager run made that are not yet taken by their arrays.
    pending: Mutex<Vec<Option<Buffer>>>,
}

/// What a kernel runs.
#[derive(Clone)]
pub(crate) enum KernelBody {
    /// A Rust function, on the CPU.
    Host(Arc<KernelFn>),
    /// CUDA C, on a GPU.
    Cuda(Arc<crate::cuda_kernel::CudaCall>),
}

impl std::fmt::Debug for KernelCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "custom_kernel '{}'", self.0.name)
    }
}

impl KernelCall {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// The declared shape and dtype of output `index`.
    pub(crate) fn output(&self, index: usize) -> (Shape, Dtype) {
        self.0.outputs[index].clone()
    }
    /// How many outputs the kernel declares.
    pub(crate) fn outputs(&self) -> usize {
        self.0.outputs.len()
    }
    /// The error for a transform the kernel has no rule for. kiln's own host kernels (the
    /// `linalg.*` factorizations) say that the op has no such rule, not what a user should wrap.
    pub(crate) fn no_transform(&self, transform: &str) -> Error {
        if self.0.name.starts_with("linalg.") {
            return Error::unsupported(
                &self.0.name,
                format!("{transform} through {} is not supported (mlx has no such rule either); vmap is", self.0.name),
            );
        }
        Error::unsupported(
            "custom_kernel",
            format!(
                "{transform} cannot see inside kernel '{}'; wrap the call in a CustomFunction that \
                 gives its {transform} rule",
                self.0.name
            ),
        )
    }
    /// Whether the kernel is CUDA C (runs on a GPU).
    pub(crate) fn is_cuda(&self) -> bool {
        matches!(self.0.body, KernelBody::Cuda(_))
    }

    /// A call of a kernel named `name` running `body` on `inputs`: one lazy array per output.
    pub(crate) fn call(name: &str, body: KernelBody, inputs: &[Array], outputs: &[(Vec<usize>, Dtype)]) -> Result<Vec<Array>> {
        let call = KernelCall(Shared::new(Site {
            name: name.to_string(),
            body,
            outputs: outputs.iter().map(|(s, d)| (Shape::from_slice(s), *d)).collect(),
            pending: Mutex::new(Vec::new()),
        }));
        (0..call.outputs())
            .map(|index| {
                Array::from_op(Op::Kernel { call: call.clone(), index }, inputs.to_vec()).map_err(|e| {
                    let shapes: Vec<String> = inputs.iter().map(|a| fmt_shape(a.shape())).collect();
                    let op = if call.is_cuda() { "cuda_kernel" } else { "custom_kernel" };
                    Error::new(op, e.kind, format!("kernel '{name}' on inputs {}: {}", shapes.join(", "), e.message))
                })
            })
            .collect()
    }

    /// Runs the kernel on `stream`, returning every output.
    pub(crate) fn run_all(&self, stream: crate::Stream, inputs: &[Input]) -> Result<Vec<Buffer>> {
        match &self.0.body {
            KernelBody::Host(body) => self.run_host(body.as_ref(), inputs),
            KernelBody::Cuda(call) => crate::backend::cuda::user_kernel::run(stream, &self.0.name, call, inputs, &self.0.outputs),
        }
    }

    /// Output `index` of an eager run: the first output evaluated runs the kernel and keeps the
    /// others until their arrays take them.
    pub(crate) fn run_one(&self, stream: crate::Stream, index: usize, inputs: &[Input]) -> Result<Buffer> {
        let mut pending = self.0.pending.lock().unwrap();
        if let Some(b) = pending.get_mut(index).and_then(Option::take) {
            return Ok(b);
        }
        let mut all: Vec<Option<Buffer>> = self.run_all(stream, inputs)?.into_iter().map(Some).collect();
        let mine = all[index].take().expect("a run gives every output");
        *pending = all;
        Ok(mine)
    }

    /// Runs a Rust body on the CPU.
    fn run_host(&self, body: &KernelFn, inputs: &[Input]) -> Result<Vec<Buffer>> {
        crate::backend::to_host(&self.0.name, inputs)?;
        let inputs = inputs
            .iter()
            .map(|i| {
                let b = if i.is_contiguous_as(&i.shape) && i.buffer.offset == 0 {
                    i.buffer.clone()
                } else {
                    crate::backend::cpu::elementwise::copy_to_row_major(i, &i.shape)
                };
                (i.shape.clone(), i.dtype, b)
            })
            .collect();
        let outputs = self
            .0
            .outputs
            .iter()
            .map(|(s, d)| (s.clone(), *d, crate::backend::cpu::strided::alloc(s, *d)))
            .collect();
        let mut args = KernelArgs { name: &self.0.name, inputs, outputs };
        body(&mut args).map_err(|e| {
            Error::new("custom_kernel", e.kind, format!("kernel '{}' failed: {}", self.0.name, e.message))
        })?;
        Ok(args.outputs.into_iter().map(|(_, _, b)| b).collect())
    }
}

/// Calls a user kernel on `inputs`, declaring its outputs' shapes and dtypes; returns one lazy
/// array per output. `body` fills every output from the inputs' row-major data. Under `grad`,
/// `jvp` or `vmap` a kernel is an error that says to give its rules through a `CustomFunction`.
pub fn custom_kernel(
    name: &str,
    inputs: &[Array],
    outputs: &[(Vec<usize>, Dtype)],
    body: impl Fn(&mut KernelArgs) -> Result<()> + Send + Sync + 'static,
) -> Result<Vec<Array>> {
    if outputs.is_empty() {
        return Err(Error::new(
            "custom_kernel",
            ErrorKind::Value,
            format!("kernel '{name}' declares no outputs; give at least one (shape, dtype)"),
        ));
    }
    KernelCall::call(name, KernelBody::Host(Arc::new(body)), inputs, outputs)
}
