//! `Array`: a cheap-clone handle to a node of the lazy graph.
//!
//! A node knows its shape, dtype, weak-scalar flag and stream from the moment it is built. Until
//! evaluated it holds its op and input handles; evaluation replaces them with a [`Buffer`], which
//! drops the node's references to its inputs so intermediates are freed as soon as their last
//! consumer has run.

use crate::buffer::{Buffer, Storage};
use crate::device::{current_stream, Stream};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, ErrorKind, Result};
use crate::primitive::Op;
use crate::shape::{fmt_shape, numel, row_major_strides, Shape};
use std::sync::{Arc, Mutex, MutexGuard};

/// A lazily evaluated n-dimensional array. Cloning is cheap (a reference count).
#[derive(Clone)]
pub struct Array(pub(crate) Arc<Node>);

/// One graph node.
pub(crate) struct Node {
    pub(crate) shape: Shape,
    pub(crate) dtype: Dtype,
    pub(crate) weak: bool,
    /// The exact value of a weak literal, so promotion can materialise it in the target dtype
    /// without rounding through its default dtype.
    pub(crate) literal: Option<Literal>,
    pub(crate) stream: Stream,
    /// Built while a transform traced a function: evaluating it during the trace keeps its op
    /// and inputs, so the transform can still walk the graph through it.
    pub(crate) traced: bool,
    /// Creation order: a node can only depend on nodes with smaller serials, so a custom
    /// function can tell the arrays it captured from those it built.
    pub(crate) serial: u64,
    pub(crate) state: Mutex<State>,
}

/// The next node serial.
static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The exact value of a weak scalar literal.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    /// A Rust/Python integer.
    Int(i64),
    /// A Rust/Python float.
    Float(f64),
}

/// Whether a node still has to be computed, or has data.
pub(crate) enum State {
    /// Not yet computed: the op and its inputs.
    Pending { op: Op, inputs: Vec<Array> },
    /// Computed (or created with data).
    Ready(Buffer),
    /// Computed during a transform's trace: the data, plus the op and inputs the transform walks.
    Traced { buffer: Buffer, op: Op, inputs: Vec<Array> },
    /// A stand-in with a shape and dtype but no data (the per-example input vmap traces with);
    /// the string names the transform, for the error evaluating it raises.
    Placeholder(&'static str),
}

impl Drop for Node {
    /// Drops long chains of pending nodes iteratively, so deep graphs cannot overflow the stack.
    fn drop(&mut self) {
        let mut stack = take_inputs(self.state.get_mut().unwrap_or_else(|e| e.into_inner()));
        while let Some(a) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(a.0) {
                stack.extend(take_inputs(node.state.get_mut().unwrap_or_else(|e| e.into_inner())));
            }
        }
    }
}

fn take_inputs(state: &mut State) -> Vec<Array> {
    match state {
        State::Pending { inputs, .. } | State::Traced { inputs, .. } => std::mem::take(inputs),
        State::Ready(_) | State::Placeholder(_) => Vec::new(),
    }
}

impl Array {
    /// Builds a node computing `op` on `inputs` on the current stream; shape and dtype come from
    /// [`Op::infer`]. The result is weak only when every input is weak and the op is elementwise,
    /// or when it is an identity of a weak input.
    pub(crate) fn from_op(op: Op, inputs: Vec<Array>) -> Result<Array> {
        let refs: Vec<&Array> = inputs.iter().collect();
        let (shape, dtype) = op.infer(&refs)?;
        if shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d)).is_none_or(|n| n > isize::MAX as usize) {
            return Err(crate::Error::value(
                op.name(),
                format!("shape {} of {dtype} is more bytes than memory can address", crate::shape::fmt_shape(&shape)),
            ));
        }
        let weak = match &op {
            Op::Unary(_) | Op::Binary(_) => !inputs.is_empty() && inputs.iter().all(|a| a.is_weak()),
            // Identities keep their input's weakness (transform tracers, stop_gradient, custom).
            Op::StopGradient => inputs[0].is_weak(),
            Op::Reshape { shape, .. } => inputs[0].is_weak() && shape.as_slice() == inputs[0].shape(),
            Op::ExpandDims(axes) => inputs[0].is_weak() && axes.is_empty(),
            Op::Custom { index, .. } => inputs[*index].is_weak(),
            _ => false,
        };
        Ok(Array(Arc::new(Node {
            shape,
            dtype,
            weak,
            literal: None,
            stream: current_stream(),
            traced: crate::transforms::is_tracing(),
            serial: next_serial(),
            state: Mutex::new(State::Pending { op, inputs }),
        })))
    }

    /// An evaluated array wrapping `buffer`.
    pub(crate) fn from_buffer(shape: Shape, dtype: Dtype, buffer: Buffer) -> Array {
        Array::leaf(shape, dtype, State::Ready(buffer))
    }

    /// A data-less stand-in of `shape` and `dtype` for tracing a function; evaluating anything
    /// that depends on it fails with an error naming `transform`.
    pub(crate) fn placeholder(shape: &[usize], dtype: Dtype, transform: &'static str) -> Array {
        Array::leaf(shape.into(), dtype, State::Placeholder(transform))
    }

    fn leaf(shape: Shape, dtype: Dtype, state: State) -> Array {
        Array(Arc::new(Node {
            shape,
            dtype,
            weak: false,
            literal: None,
            stream: current_stream(),
            traced: false,
            serial: next_serial(),
            state: Mutex::new(state),
        }))
    }

    /// An array holding a copy of `data` with `shape`; fails if the sizes differ.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Array> {
        if numel(shape) != data.len() {
            return Err(Error::shape(
                "array",
                format!("{} elements cannot fill shape {}", data.len(), fmt_shape(shape)),
            ));
        }
        // Safety: elements are plain data, so their memory reads as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) };
        Array::from_bytes(bytes, shape, T::DTYPE)
    }

    /// An array of `dtype` and `shape` holding a copy of `bytes`, the elements in row-major order
    /// and native byte order (how foreign buffers such as numpy arrays come in); fails if the
    /// byte count does not match.
    pub fn from_bytes(bytes: &[u8], shape: &[usize], dtype: Dtype) -> Result<Array> {
        let needed = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        if needed != Some(bytes.len()) {
            return Err(Error::shape(
                "array",
                format!("{} bytes cannot fill shape {} of {dtype}", bytes.len(), fmt_shape(shape)),
            ));
        }
        let storage = Storage::new(bytes.len());
        // Safety: the new block holds at least bytes.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), storage.ptr(), bytes.len()) };
        let buf = Buffer { storage, offset: 0, strides: row_major_strides(shape) };
        Ok(Array::from_buffer(shape.into(), dtype, buf))
    }

    /// A 1-d array holding `data`.
    pub fn from_vec<T: Element>(data: Vec<T>) -> Array {
        let n = data.len();
        Array::from_slice(&data, &[n]).expect("a vector fills its own length")
    }

    /// A 0-d array of `value` with the dtype of `T`.
    pub fn scalar<T: Element>(value: T) -> Array {
        Array::from_slice(&[value], &[]).expect("one element fills shape ()")
    }

    /// A 0-d *weak* float scalar: like a Python float, it adopts the dtype of a float array it
    /// meets (`x_f16 * 2.0` stays float16) and is float32 otherwise.
    pub fn weak_float(value: f64) -> Array {
        Array::weak_literal(Array::scalar(value as f32), Literal::Float(value))
    }

    /// A 0-d *weak* integer scalar: like a Python int, it adopts the dtype of the array it meets
    /// and is int32 otherwise.
    pub fn weak_int(value: i64) -> Array {
        Array::weak_literal(Array::scalar(value as i32), Literal::Int(value))
    }

    fn weak_literal(default: Array, literal: Literal) -> Array {
        let node = Node {
            shape: Shape::new(),
            dtype: default.dtype(),
            weak: true,
            literal: Some(literal),
            stream: current_stream(),
            traced: false,
            serial: next_serial(),
            state: Mutex::new(State::Ready(default.buffer().expect("a scalar has data"))),
        };
        Array(Arc::new(node))
    }

    /// The exact value of a weak literal scalar, if this is one.
    pub fn literal(&self) -> Option<Literal> {
        self.0.literal
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// The extent of `axis` (negative counts from the end).
    pub fn dim(&self, axis: i64) -> Result<usize> {
        Ok(self.shape()[crate::shape::normalize_axis("dim", axis, self.ndim())?])
    }

    /// The number of axes.
    pub fn ndim(&self) -> usize {
        self.0.shape.len()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        numel(&self.0.shape)
    }

    /// The number of bytes of the elements.
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype().size()
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.0.dtype
    }

    /// Whether this is a weak scalar (a Rust/Python number that adopts its partner's dtype).
    pub fn is_weak(&self) -> bool {
        self.0.weak
    }

    /// The stream the node runs on.
    pub fn stream(&self) -> Stream {
        self.0.stream
    }

    /// Whether the array has data (was evaluated or created with data).
    pub fn is_evaluated(&self) -> bool {
        matches!(*self.lock(), State::Ready(_) | State::Traced { .. })
    }

    /// The node's identity (its address), for maps keyed by node.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// When the node was created, relative to other nodes.
    pub(crate) fn serial(&self) -> u64 {
        self.0.serial
    }

    /// Whether two handles refer to the same node.
    pub fn same_node(&self, other: &Array) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether both arrays are evaluated and their data live in the same memory block (a view and
    /// its base, like numpy's `shares_memory`).
    pub fn shares_memory(&self, other: &Array) -> bool {
        match (self.buffer(), other.buffer()) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.storage, &b.storage),
            _ => false,
        }
    }

    /// The node's op and inputs: `None` for leaves (data, placeholders) and for nodes evaluated
    /// outside a transform's trace, which dropped them to free memory.
    pub fn op_and_inputs(&self) -> Option<(Op, Vec<Array>)> {
        match &*self.lock() {
            State::Pending { op, inputs } | State::Traced { op, inputs, .. } => {
                Some((op.clone(), inputs.clone()))
            }
            State::Ready(_) | State::Placeholder(_) => None,
        }
    }

    /// Whether this is a placeholder (a traced stand-in without data).
    pub fn is_placeholder(&self) -> bool {
        matches!(*self.lock(), State::Placeholder(_))
    }

    /// Forgets the op and inputs kept when the node was evaluated during a trace, so they can be
    /// freed once the trace is over.
    pub(crate) fn release_trace(&self) {
        let mut state = self.lock();
        if let State::Traced { buffer, .. } = &*state {
            *state = State::Ready(buffer.clone());
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The data buffer, if evaluated.
    pub(crate) fn buffer(&self) -> Option<Buffer> {
        match &*self.lock() {
            State::Ready(b) | State::Traced { buffer: b, .. } => Some(b.clone()),
            State::Pending { .. } | State::Placeholder(_) => None,
        }
    }

    /// Computes this array (and everything it depends on) if not done yet.
    pub fn eval(&self) -> Result<()> {
        crate::eval::eval(std::slice::from_ref(self))
    }

    /// Evaluates and copies the elements out in row-major order. `T` must be the array's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::dtype(
                "to_vec",
                format!(
                    "requested {} elements from an array of dtype {}; call astype first",
                    T::DTYPE,
                    self.dtype()
                ),
            ));
        }
        self.eval()?;
        let buf = self.buffer().ok_or_else(|| Error::new("to_vec", ErrorKind::NoData, "no data"))?;
        buf.storage.to_host("to_vec")?;
        let mut out = Vec::with_capacity(self.size());
        crate::backend::cpu::strided::for_each_offset(self.shape(), &buf.strides, |off| {
            // Safety: every offset produced lies inside the view.
            out.push(unsafe { *buf.ptr::<T>().offset(off) });
        });
        Ok(out)
    }

    /// Evaluates and returns the address of element 0 and the stride of each axis in elements,
    /// for lending the memory to another library without a copy. The memory stays valid while
    /// this array (or a clone) lives; it must not be written through.
    pub fn raw_parts(&self) -> Result<(*const u8, Vec<isize>)> {
        self.eval()?;
        let buf = self.buffer().ok_or_else(|| Error::new("raw_parts", ErrorKind::NoData, "no data"))?;
        buf.storage.to_host("raw_parts")?;
        let start = buf.start_address(self.dtype().size()) as *const u8;
        Ok((start, buf.strides.to_vec()))
    }

    /// Evaluates and returns an array holding this one's elements row-major on the host (this
    /// array when its view already is, else a copy) with the address of its first element, for
    /// readers of plain row-major memory (files, C callers). The memory stays valid while the
    /// returned array lives; it must not be written through.
    pub fn row_major_parts(&self) -> Result<(Array, *const u8)> {
        let (ptr, strides) = self.raw_parts()?;
        if crate::backend::cpu::strided::is_row_contiguous(self.shape(), &strides) {
            return Ok((self.clone(), ptr));
        }
        let copy = crate::ops::copy(self)?;
        let (ptr, _) = copy.raw_parts()?;
        Ok((copy, ptr))
    }

    /// Evaluates and copies the elements out as f64 whatever the real dtype (handy for tests and
    /// printing); complex64 values, which have two parts, are an error (use `to_vec::<Complex64>`).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        if self.dtype().is_complex() {
            return Err(Error::dtype("to_f64_vec", "complex64 values have two parts: read them with to_vec::<Complex64>()"));
        }
        crate::with_dtype!(self.dtype(), T => Ok(self.to_vec::<T>()?.into_iter().map(Element::to_f64).collect()))
    }

    /// The single element of a size-1 array.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.size() != 1 {
            return Err(Error::shape(
                "item",
                format!("item() needs an array of one element, got shape {}", fmt_shape(self.shape())),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }
}

/// Evaluates several arrays together, sharing the work they have in common.
pub fn eval(arrays: &[&Array]) -> Result<()> {
    let owned: Vec<Array> = arrays.iter().map(|a| (*a).clone()).collect();
    crate::eval::eval(&owned)
}

/// Starts evaluating arrays without waiting for their results, as mlx's `async_eval`: on a GPU
/// the kernels are queued and this returns at once (a later read waits for them); on the CPU the
/// work is done before it returns. A failure of that work is reported by the next
/// [`crate::synchronize`] (and again by any read of the arrays). Inside grad, vjp, jvp, vmap or a
/// compile trace it is an error, since the arrays there stand for values the transform has not
/// computed.
pub fn async_eval(arrays: &[&Array]) -> Result<()> {
    let inside = |why: &str| {
        Error::value(
            "async_eval",
            format!("cannot evaluate inside grad, vjp, jvp, vmap or a compiled function's trace{why}; evaluate the transform's results instead"),
        )
    };
    if crate::transforms::is_tracing_on_this_thread() || crate::transforms::compile::is_compile_tracing() {
        return Err(inside(""));
    }
    // vmap's arrays have no data: evaluating them is the placeholder's error.
    match eval(arrays) {
        Err(e) if e.kind == ErrorKind::NoData => Err(inside(&format!(" ({})", e.message))),
        // A failure of the work itself surfaces at the next synchronize, as in mlx (the arrays
        // stay unevaluated, so reading one raises it again).
        Err(e) => {
            *DEFERRED.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// The failure of the last [`async_eval`] whose work failed, until a synchronize reports it.
static DEFERRED: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);

/// The failure an [`async_eval`] left for the next synchronize, as a device error (taken).
pub(crate) fn take_deferred_failure() -> Result<()> {
    match DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(e) => Err(Error::new(
            "synchronize",
            ErrorKind::Device,
            format!("work started by async_eval failed: {}", e),
        )),
        None => Ok(()),
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
