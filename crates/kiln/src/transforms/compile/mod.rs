//! `compile`: trace a function once per input signature, simplify its graph, fuse it into
//! kernels, and replay the prepared plan on later calls.
//!
//! The behaviour follows the seeds: the first call traces with placeholder arrays (reading their
//! data is an error that points at [`disable_compile`]); arrays captured from outside are
//! constants of the trace; state the function reads or writes besides its arguments is declared
//! as implicit inputs and outputs ([`CompileOptions::inputs`], [`CompileOptions::outputs`], the
//! random state); the cache recompiles on a change of argument count, dtype, ndim, shape (unless
//! shapeless) or constant arguments, and never otherwise.
//!
//! A compiled call evaluates its inputs and runs the plan at once: replay works on buffers and
//! builds no graph. Under another transform (grad, vjp, jvp, vmap) or inside another compiled
//! function's trace, a compiled function is inlined: the function itself runs, so derivatives and
//! batching see through it, and the outer compile fuses across it.
//!
//! ```
//! use kiln::{compile, ops, Array};
//! let gelu = compile(|x: &[Array]| {
//!     let x = &x[0];
//!     let inner = ops::erf(ops::divide(x, 2f64.sqrt())?)?;
//!     Ok(vec![ops::divide(ops::multiply(x, ops::add(inner, 1.0)?)?, 2.0)?])
//! });
//! let x = Array::from_vec(vec![-1.0f32, 0.0, 1.0]);
//! let y = gelu.call(&[x.clone()]).unwrap();
//! assert_eq!(gelu.trace_count(), 1);
//! gelu.call(&[x.clone()]).unwrap(); // replayed, not traced again
//! assert_eq!(gelu.trace_count(), 1);
//! // One fused kernel instead of five eager ones.
//! let report = gelu.inspect(&[x], &[]).unwrap();
//! assert_eq!(report.compiled_kernels, 1);
//! ```

mod cache;
pub(crate) mod eager;
mod fuse;
mod group_set;
mod plan;
mod report;
mod shapeless;
mod simplify;
mod state;
mod trace;

pub use report::{GroupReport, Report};
pub use state::{ArrayList, Constant, Implicit};
pub use trace::note_shape_read;
pub(crate) use trace::{is_compile_tracing, is_shapeless_tracing, shape_was_read};

use crate::array::Array;
use crate::device::current_stream;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::shape::Shape;
use cache::{InputKey, Lru, Signature};
use fuse::Grouping;
use plan::Plan;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use trace::{Tape, TracedFn};

/// Debugging modes of a compiled function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompileMode {
    /// Trace, simplify, fuse and replay.
    #[default]
    Full,
    /// Run the function itself on every call (as [`disable_compile`], for this function only).
    Disabled,
    /// Trace and fuse, but do not simplify (no merging of constants or common subexpressions).
    NoSimplify,
    /// Trace and simplify, but run every op as its own kernel.
    NoFuse,
}

/// How to compile a function.
#[derive(Clone)]
pub struct CompileOptions {
    /// One trace serves all input shapes of the same ndims and dtypes.
    pub shapeless: bool,
    /// Debugging mode.
    pub mode: CompileMode,
    /// State read on every call besides the arguments.
    pub inputs: Vec<Implicit>,
    /// State written back after every call.
    pub outputs: Vec<Implicit>,
    /// How many signatures the cache keeps (least recently used ones are dropped).
    pub cache_capacity: usize,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions { shapeless: false, mode: CompileMode::Full, inputs: vec![], outputs: vec![], cache_capacity: 64 }
    }
}

impl CompileOptions {
    /// Default options: full compile, shapes in the cache key.
    pub fn new() -> CompileOptions {
        CompileOptions::default()
    }
    /// Sets shapeless mode.
    pub fn shapeless(mut self, on: bool) -> CompileOptions {
        self.shapeless = on;
        self
    }
    /// Sets the debugging mode.
    pub fn mode(mut self, mode: CompileMode) -> CompileOptions {
        self.mode = mode;
        self
    }
    /// Declares a list the function reads: its current arrays are inputs of every call.
    pub fn inputs(mut self, list: &ArrayList) -> CompileOptions {
        self.inputs.push(Implicit::List(list.clone()));
        self
    }
    /// Declares a list the function writes: the arrays it leaves there are written back.
    pub fn outputs(mut self, list: &ArrayList) -> CompileOptions {
        self.outputs.push(Implicit::List(list.clone()));
        self
    }
    /// Declares the global random state as read and written, so random draws inside the
    /// function advance it and differ from call to call.
    pub fn random_state(mut self) -> CompileOptions {
        self.inputs.push(Implicit::RandomState);
        self.outputs.push(Implicit::RandomState);
        self
    }
    /// Sets how many signatures the cache keeps.
    pub fn cache_capacity(mut self, n: usize) -> CompileOptions {
        self.cache_capacity = n;
        self
    }
}

/// 0: not read yet, 1: enabled, 2: disabled.
static ENABLED: AtomicU8 = AtomicU8::new(0);

/// Whether compiled functions compile (false after [`disable_compile`] or with the environment
/// variable `KILN_DISABLE_COMPILE` set to anything but `0` or empty).
pub fn is_compile_enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let off = std::env::var("KILN_DISABLE_COMPILE").is_ok_and(|v| !v.is_empty() && v != "0");
            ENABLED.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// Makes every compiled function run its function directly (for debugging: printing and
/// evaluating inside the function then work).
pub fn disable_compile() {
    ENABLED.store(2, Ordering::Relaxed);
}

/// Undoes [`disable_compile`] (and the environment variable).
pub fn enable_compile() {
    ENABLED.store(1, Ordering::Relaxed);
}

/// Whether `KILN_LOG` asks for compile logs (`KILN_LOG=compile`).
pub(crate) fn log_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_LOG").is_ok_and(|v| v.split(',').any(|p| p.trim() == "compile")))
}

/// What grouping needs to know of the current stream's device: on a GPU, its multiprocessors
/// (which decide when a long reduction's rows are split over blocks).
fn fuse_target() -> fuse::Target {
    let device = current_stream().device;
    let gpu_multiprocessors = match device.kind {
        crate::DeviceKind::Gpu => crate::backend::cuda::context::gpu("compile", device.index).ok().map(|g| g.multiprocessors as usize),
        crate::DeviceKind::Cpu => None,
    };
    fuse::Target { gpu_multiprocessors, gpu: device.kind == crate::DeviceKind::Gpu, elementwise_only: false }
}

/// A compiled function: call it like the function. Clones share one cache, which is freed with
/// the last clone. `Send + Sync`: threads may call it at once.
#[derive(Clone)]
pub struct Compiled(Arc<Inner>);

struct Inner {
    f: Arc<TracedFn>,
    options: CompileOptions,
    cache: Mutex<Lru<Signature, Entry>>,
    traces: AtomicUsize,
    last: Mutex<Option<Signature>>,
}

/// What one trace produced, with the plans prepared from it (one per concrete input shapes).
struct Entry {
    traced: Tape,
    explicit: usize,
    implicit: Vec<usize>,
    prepared: Mutex<Lru<Vec<Shape>, Prepared>>,
}

/// A plan for concrete shapes, with the stages that led to it (for introspection).
struct Prepared {
    simplified: Tape,
    grouping: Grouping,
    plan: Plan,
    shapes: Vec<Shape>,
    dtypes: Vec<Dtype>,
}

/// Compiles `f`, a function of a list of arrays.
pub fn compile<F>(f: F) -> Compiled
where
    F: Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
{
    compile_with(f, CompileOptions::default())
}

/// Compiles `f` with `options`.
pub fn compile_with<F>(f: F, options: CompileOptions) -> Compiled
where
    F: Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync + 'static,
{
    compile_with_constants(move |a: &[Array], _: &[Constant]| f(a), options)
}

/// Compiles `f`, which also takes non-array constants (part of the cache key).
pub fn compile_with_constants<F>(f: F, options: CompileOptions) -> Compiled
where
    F: Fn(&[Array], &[Constant]) -> Result<Vec<Array>> + Send + Sync + 'static,
{
    Compiled(Arc::new(Inner {
        f: Arc::new(f),
        cache: Mutex::new(Lru::new(options.cache_capacity)),
        options,
        traces: AtomicUsize::new(0),
        last: Mutex::new(None),
    }))
}

/// Compiles a plain function. Compiling the same function again while an earlier compiled
/// handle of it is alive returns that handle, cache included (a plain `fn` captures nothing, so
/// its address identifies it); the seeds' `mx.compile(fun)(x, y)` reuses the cached graph.
pub fn compile_fn(f: fn(&[Array]) -> Result<Vec<Array>>) -> Compiled {
    static LIVE: Mutex<Vec<(usize, Weak<Inner>)>> = Mutex::new(Vec::new());
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(_, w)| w.strong_count() > 0);
    if let Some(inner) = live.iter().find(|(k, _)| *k == f as usize).and_then(|(_, w)| w.upgrade()) {
        return Compiled(inner);
    }
    let c = compile(f);
    live.push((f as usize, Arc::downgrade(&c.0)));
    c
}

/// Whether `a` is, or is computed from, a data-less placeholder (an argument vmap traces with)
/// or, while `tracing` (a differentiation runs on some thread), a tracer: then the function is
/// inlined into that trace, so the transform sees its ops. Tracers outlive their trace in pending
/// results (gradients, custom functions' outputs), so they only count while one runs.
fn depends_on_trace(a: &Array, tracing: bool) -> bool {
    if matches!(&*a.lock(), crate::array::State::Ready(_)) {
        return false;
    }
    let mut stack = vec![a.clone()];
    let mut seen = crate::fast_hash::FastSet::default();
    while let Some(x) = stack.pop() {
        if !seen.insert(x.id()) {
            continue;
        }
        match &*x.lock() {
            crate::array::State::Placeholder(_) => return true,
            crate::array::State::Pending { op, inputs } | crate::array::State::Traced { op, inputs, .. } => {
                if tracing && crate::transforms::autodiff::is_tracer_op(op) {
                    return true;
                }
                stack.extend(inputs.iter().cloned())
            }
            crate::array::State::Ready(_) => {}
        }
    }
    false
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Compiled {
    /// Calls the compiled function on arrays.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        self.call_with(args, &[])
    }

    /// Calls the compiled function on arrays and constants.
    pub fn call_with(&self, args: &[Array], constants: &[Constant]) -> Result<Vec<Array>> {
        let inner = &self.0;
        let o = &inner.options;
        if !is_compile_enabled()
            || o.mode == CompileMode::Disabled
            || crate::transforms::is_tracing_on_this_thread()
            || is_compile_tracing()
        {
            return (inner.f)(args, constants);
        }
        let mut all: Vec<Array> = args.to_vec();
        all.extend(o.inputs.iter().flat_map(Implicit::read));
        // Implicit inputs count too: state a trace put its values into must reach that trace.
        let tracing = crate::transforms::is_tracing();
        if all.iter().any(|a| depends_on_trace(a, tracing)) {
            return (inner.f)(args, constants);
        }
        let stream = current_stream();
        crate::device::check_available("compile", stream.device)?;
        let entry = self.entry(&all, args, constants)?;
        let refs: Vec<&Array> = all.iter().collect();
        crate::eval(&refs)?;
        let shapes: Vec<Shape> = all.iter().map(|a| Shape::from_slice(a.shape())).collect();
        let prepared = self.prepared(&entry, &shapes)?;
        let buffers = all.iter().map(|a| a.buffer().expect("inputs are evaluated")).collect();
        drop(all);
        let results = prepared.plan.run(stream, buffers, &prepared.shapes, &prepared.dtypes)?;
        let mut arrays: Vec<Array> = results
            .into_iter()
            .zip(&prepared.plan.outputs)
            .map(|(b, &slot)| Array::from_buffer(prepared.shapes[slot].clone(), prepared.dtypes[slot], b))
            .collect();
        let mut implicit = arrays.split_off(entry.explicit).into_iter();
        for (state, &count) in o.outputs.iter().zip(&entry.implicit) {
            let values: Vec<Array> = implicit.by_ref().take(count).collect();
            match state {
                Implicit::List(l) => {
                    l.replace(values);
                }
                Implicit::RandomState => crate::random::set_state(&values[0])?,
            }
        }
        Ok(arrays)
    }

    /// A closure calling this compiled function, for the transforms (`grad(c.as_fn(), ..)`).
    pub fn as_fn(&self) -> impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static {
        let c = self.clone();
        move |a: &[Array]| c.call(a)
    }

    /// How many times the function was traced.
    pub fn trace_count(&self) -> usize {
        self.0.traces.load(Ordering::Relaxed)
    }

    /// How many signatures the cache holds.
    pub fn cache_len(&self) -> usize {
        lock(&self.0.cache).len()
    }

    /// The compile report for these arguments (tracing first when the signature is new): the
    /// graph before and after simplification, the fused groups with their IR, and kernel counts.
    pub fn inspect(&self, args: &[Array], constants: &[Constant]) -> Result<Report> {
        let mut all: Vec<Array> = args.to_vec();
        all.extend(self.0.options.inputs.iter().flat_map(Implicit::read));
        let entry = self.entry(&all, args, constants)?;
        let shapes: Vec<Shape> = all.iter().map(|a| Shape::from_slice(a.shape())).collect();
        let p = self.prepared(&entry, &shapes)?;
        Ok(Report::new(&entry.traced, &p.simplified, &p.grouping, &p.plan))
    }

    fn signature(&self, all: &[Array], explicit: usize, constants: &[Constant]) -> Signature {
        let shapeless = self.0.options.shapeless;
        Signature {
            inputs: all
                .iter()
                .map(|a| InputKey::new(a.dtype(), a.shape(), shapeless))
                .collect(),
            explicit,
            constants: constants.to_vec(),
            device: current_stream().device,
        }
    }

    /// The cache entry for this call, tracing on a miss. A failed trace leaves nothing behind.
    fn entry(&self, all: &[Array], args: &[Array], constants: &[Constant]) -> Result<Arc<Entry>> {
        let inner = &self.0;
        let sig = self.signature(all, args.len(), constants);
        if let Some(e) = lock(&inner.cache).get(&sig) {
            return Ok(e);
        }
        if log_enabled() {
            let reason = sig.change_from(lock(&inner.last).as_ref());
            eprintln!("[kiln compile] trace #{}: {reason}", inner.traces.load(Ordering::Relaxed) + 1);
        }
        let o = &inner.options;
        let traced = trace::trace(&*inner.f, args, constants, &o.inputs, &o.outputs, o.shapeless)?;
        inner.traces.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            traced: traced.tape,
            explicit: traced.explicit,
            implicit: traced.implicit,
            prepared: Mutex::new(Lru::new(if o.shapeless { o.cache_capacity } else { 1 })),
        });
        lock(&inner.cache).insert(sig.clone(), entry.clone());
        *lock(&inner.last) = Some(sig);
        Ok(entry)
    }

    /// The plan of `entry` for concrete input shapes: simplified and fused once per shapes.
    fn prepared(&self, entry: &Entry, shapes: &[Shape]) -> Result<Arc<Prepared>> {
        if let Some(p) = lock(&entry.prepared).get(&shapes.to_vec()) {
            return Ok(p);
        }
        let o = &self.0.options;
        let traced_shapes: Vec<&Shape> = (0..entry.traced.inputs).map(|i| &entry.traced.nodes[i].shape).collect();
        let tape = if shapes.iter().zip(&traced_shapes).all(|(a, b)| a == *b) {
            entry.traced.clone()
        } else {
            if log_enabled() {
                eprintln!("[kiln compile] shapeless: new plan for input shapes {shapes:?} (no retrace)");
            }
            shapeless::reinfer(&entry.traced, shapes)?
        };
        let simplified = simplify::simplify(&tape, o.mode != CompileMode::NoSimplify);
        let grouping = fuse::fuse(&simplified, o.mode != CompileMode::NoFuse, fuse_target());
        let plan = Plan::new(&simplified, &grouping);
        let p = Arc::new(Prepared {
            shapes: simplified.nodes.iter().map(|n| n.shape.clone()).collect(),
            dtypes: simplified.nodes.iter().map(|n| n.dtype).collect(),
            simplified,
            grouping,
            plan,
        });
        lock(&entry.prepared).insert(shapes.to_vec(), p.clone());
        Ok(p)
    }
}
