//! CUDA graphs for compiled plans: a plan of several GPU steps is recorded once (stream capture)
//! and each later call replays it with one launch, so a compiled training step pays the host's
//! launch cost once instead of once per kernel.
//!
//! A captured graph holds device addresses, so it owns every buffer its kernels touch:
//! - **inputs** are copied into the graph's own input buffers by its first nodes, whose source
//!   addresses are set to the caller's arrays before each launch;
//! - **intermediates** (and workspaces, scratch space) allocated while capturing are plain
//!   allocations (`cuMemAlloc`: a pool allocation would become a graph allocation node), and every
//!   block dropped while capturing is kept alive by the graph instead of being freed;
//! - **outputs** are copied by its last nodes into fresh blocks allocated for each call, so what
//!   a caller keeps is never overwritten by a later replay.
//!
//! The copies cost GPU bandwidth, so only plans whose copied bytes are small against the launches
//! they save are captured (at most `COPY_BYTES_PER_STEP` per kernel launched). Capture runs on a private stream that no other
//! thread uses (the plan's ops ask for the caller's stream and get the private one while this
//! thread captures), and anything that cannot be recorded (a copy between host and GPU, a host
//! read, an op that runs on the CPU) makes the capture fail; the plan then keeps launching its
//! kernels one by one, which is always correct.
//!
//! Graphs are off by default until they are measured faster on a GPU: `KILN_CUDA_GRAPHS=1` or
//! [`set_enabled`] turns them on. Known limits: a graph's buffers are plain allocations kept
//! for the plan's life (every temporary of the recorded steps, not their peak) and are not
//! counted in the memory statistics; a `clear_cache` or an out-of-memory retry on another thread
//! while a plan is being recorded synchronises the context, which ends that recording (the plan
//! then runs kernel by kernel until its signature changes).

use super::context::{device_error, Gpu};
use super::memory::DeviceBlock;
use super::switch::Switch;
use crate::buffer::{Buffer, Storage};
use crate::device::Stream;
use crate::error::{Error, ErrorKind, Result};
use crate::shape::{Shape, Strides};
use cudarc::driver::{result as cu, sys};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of input and output copies a graph may add per step it launches: about what an H100
/// copies in the time the host spends launching one kernel.
const COPY_BYTES_PER_STEP: usize = 1 << 20;

/// Graph launches so far (for tests and the report).
static REPLAYS: AtomicUsize = AtomicUsize::new(0);

/// Graph launches so far, over every compiled plan.
pub fn replays() -> usize {
    REPLAYS.load(Ordering::Relaxed)
}

/// Whether compiled plans become CUDA graphs.
static ENABLED: Switch = Switch::new("KILN_CUDA_GRAPHS");

/// Whether compiled plans of several steps are replayed as CUDA graphs. Off unless
/// `KILN_CUDA_GRAPHS=1` or [`set_enabled`] turned it on: graphs replace kernel-by-kernel
/// launches by default only once they are measured faster on a GPU.
pub fn enabled() -> bool {
    ENABLED.get()
}

/// Turns CUDA graphs for compiled plans on or off; returns the previous setting. Plans already
/// recorded keep their graph until their signature changes.
pub fn set_enabled(on: bool) -> bool {
    ENABLED.set(on)
}

/// What this thread is capturing: the stream the graph will run on, the private stream its
/// ops are recorded on, and the blocks dropped meanwhile (kept for the graph).
struct Capture {
    gpu: usize,
    launch: sys::CUstream,
    record: sys::CUstream,
    kept: Vec<DeviceBlock>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Capture>> = const { RefCell::new(None) };
}

/// Whether this thread is capturing a graph.
pub fn capturing() -> bool {
    // During thread teardown (blocks dropped by other thread-locals' destructors) nothing captures.
    CAPTURE.try_with(|c| c.borrow().is_some()).unwrap_or(false)
}

/// The stream work asked for `stream` is queued on: the private capture stream while this
/// thread captures for `stream`, else `stream` itself.
pub(super) fn recording_stream(stream: sys::CUstream) -> sys::CUstream {
    CAPTURE
        .try_with(|c| match &*c.borrow() {
            Some(cap) if cap.launch == stream => cap.record,
            _ => stream,
        })
        .unwrap_or(stream)
}

/// For an allocation on GPU `gpu` while this thread captures: the stream the graph runs on (the
/// block must then be a plain allocation the graph owns).
pub(super) fn capture_owner(gpu: usize) -> Option<sys::CUstream> {
    CAPTURE.try_with(|c| c.borrow().as_ref().filter(|cap| cap.gpu == gpu).map(|cap| cap.launch)).ok().flatten()
}

/// While this thread captures, takes a block being dropped (leaving an empty one) and keeps it
/// alive for the graph, which may address it; false (the block untouched) otherwise.
pub(super) fn keep(block: &mut DeviceBlock) -> bool {
    CAPTURE
        .try_with(|c| match c.try_borrow_mut().as_deref_mut() {
            Ok(Some(cap)) => {
                cap.kept.push(block.take());
                true
            }
            _ => false,
        })
        .unwrap_or(false)
}

/// Fails (ending the capture) when `op` would copy between host and GPU while capturing: a
/// recorded copy would replay stale host bytes.
pub(super) fn refuse_host_copy(op: &str) -> Result<()> {
    if capturing() {
        return Err(Error::new(op, ErrorKind::Unsupported, "a copy between host and GPU cannot be part of a CUDA graph"));
    }
    Ok(())
}

/// Whether a plan launching `steps` kernels is worth a graph that copies `copied` bytes in and
/// out (the plan checks that graphs are on and that there are several steps).
fn worth_a_graph(steps: usize, copied: usize) -> bool {
    copied <= steps * COPY_BYTES_PER_STEP
}

/// How a plan runs while graphs are off (for the report).
pub const OFF: &str = "the plan's kernels are launched one by one (no CUDA graph: graphs are off; KILN_CUDA_GRAPHS=1 turns them on)";

/// The layout a graph's input buffer copies: storage bytes, offset and strides.
fn layout(b: &Buffer) -> (usize, isize, Strides) {
    (b.storage.bytes(), b.offset, b.strides.clone())
}

/// The private stream of each GPU that captures record on, and the lock that makes one capture
/// at a time use it.
static RECORDERS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// This thread's recording on a private stream: ended by [`Recording::end`], or on unwinding.
struct Recording {
    record: sys::CUstream,
    ended: bool,
}

impl Recording {
    /// Starts recording, on `record`, the work this thread asks for on `launch`.
    fn begin(gpu: usize, launch: sys::CUstream, record: sys::CUstream) -> std::result::Result<Recording, cu::DriverError> {
        // Safety: a stream of the current context, used by no one else while RECORDERS is held.
        unsafe { cu::stream::begin_capture(record, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }?;
        CAPTURE.with(|c| *c.borrow_mut() = Some(Capture { gpu, launch, record, kept: Vec::new() }));
        Ok(Recording { record, ended: false })
    }

    /// Ends the recording: the blocks dropped meanwhile, and the graph (or why there is none).
    fn end(&mut self) -> (Vec<DeviceBlock>, std::result::Result<sys::CUgraph, cu::DriverError>) {
        self.ended = true;
        let kept = CAPTURE.with(|c| c.borrow_mut().take()).map(|c| c.kept).unwrap_or_default();
        // Safety: the stream is capturing (begun in `begin`).
        (kept, unsafe { cu::stream::end_capture(self.record) })
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.ended {
            if let (_, Ok(g)) = self.end() {
                // Safety: a graph of an abandoned recording, used by nothing else.
                let _ = unsafe { cu::graph::destroy(g) };
            }
        }
    }
}

/// What one copy node of a graph does: its node, and its parameters (addresses set per call).
struct CopyNode {
    node: sys::CUgraphNode,
    params: sys::CUDA_MEMCPY3D,
}

impl CopyNode {
    /// Adds to `graph`, after `after`, a copy of `bytes` bytes from device address `src` to `dst`.
    ///
    /// # Safety
    /// `graph` and the nodes in `after` belong to the context `ctx`, as do both addresses.
    unsafe fn add(
        graph: sys::CUgraph,
        after: &[sys::CUgraphNode],
        src: u64,
        dst: u64,
        bytes: usize,
        ctx: sys::CUcontext,
    ) -> std::result::Result<CopyNode, sys::CUresult> {
        let params = sys::CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: bytes,
            srcHeight: 1,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: bytes,
            dstHeight: 1,
            WidthInBytes: bytes,
            Height: 1,
            Depth: 1,
        };
        let mut node = std::ptr::null_mut();
        // Safety: as the caller promises.
        let r = unsafe { sys::cuGraphAddMemcpyNode(&mut node, graph, after.as_ptr(), after.len(), &params, ctx) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(r);
        }
        Ok(CopyNode { node, params })
    }
}

/// A plan captured as a CUDA graph, with every buffer its nodes address.
pub struct CudaGraph {
    gpu: &'static Gpu,
    launch: sys::CUstream,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// One node per input, copying the caller's bytes into the graph's input buffer.
    copy_in: Vec<CopyNode>,
    /// One node per output, copying the graph's result into the call's fresh block.
    copy_out: Vec<CopyNode>,
    /// The outputs as the graph leaves them (their layouts are the returned arrays' layouts).
    outputs: Vec<Buffer>,
    /// Everything else the nodes address: input buffers and the blocks kept while capturing.
    held: Vec<Buffer>,
    kept: Vec<DeviceBlock>,
    nodes: usize,
}

// Safety: graph handles and addresses are plain values usable from any thread; launches of one
// graph are serialised by the plan's lock.
unsafe impl Send for CudaGraph {}
unsafe impl Sync for CudaGraph {}

impl CudaGraph {
    /// Records `run` (a plan over the given inputs) as a graph for `launch` on `gpu`. Returns
    /// `Ok(Err(why))` when the plan cannot be recorded; errors only for a broken device.
    pub fn capture(
        op: &str,
        gpu: &'static Gpu,
        launch: sys::CUstream,
        inputs: &[Buffer],
        run: impl FnOnce(Vec<Buffer>) -> Result<Vec<Buffer>>,
    ) -> Result<std::result::Result<CudaGraph, String>> {
        // One capture at a time (a nested one, from code a recorded step runs, is refused).
        let Ok(mut recorders) = RECORDERS.try_lock() else {
            return Ok(Err("another plan was being recorded".into()));
        };
        let record = match recorders.get_or_insert_with(HashMap::new).get(&gpu.ordinal) {
            Some(&s) => s as sys::CUstream,
            None => match cu::stream::create(cu::stream::StreamKind::NonBlocking) {
                Ok(s) => {
                    recorders.as_mut().expect("made above").insert(gpu.ordinal, s as usize);
                    s
                }
                Err(e) => return Ok(Err(format!("no stream to record on ({})", super::context::describe(e)))),
            },
        };
        // The graph's own input buffers, laid out as the caller's, and where the caller's bytes
        // are. Failing here (out of memory, say) leaves the plan to run kernel by kernel.
        let mut sources = Vec::with_capacity(inputs.len());
        let mut held = Vec::with_capacity(inputs.len());
        for b in inputs {
            let staged = b.storage.on_gpu(op, gpu.ordinal, launch).and_then(|src| {
                let block = DeviceBlock::plain(op, gpu, launch, b.storage.bytes().max(1))?;
                Ok((src, block))
            });
            let (src, block) = match staged {
                Ok(s) => s,
                Err(e) => return Ok(Err(format!("its input buffers could not be made: {}", e.message))),
            };
            sources.push(src);
            held.push(Buffer { storage: Storage::on_device(block), offset: b.offset, strides: b.strides.clone() });
        }
        let mut recording = match Recording::begin(gpu.ordinal, launch, record) {
            Ok(r) => r,
            Err(e) => return Ok(Err(format!("capture did not start ({})", super::context::describe(e)))),
        };
        let recorded = run(held.clone());
        let (kept, ended) = recording.end();
        let (body, outputs) = match (ended, recorded) {
            (Ok(g), Ok(outputs)) => (g, outputs),
            (ended, recorded) => {
                if let Ok(g) = ended {
                    // Safety: a graph just returned by the capture, used by nothing else.
                    let _ = unsafe { cu::graph::destroy(g) };
                }
                return Ok(Err(match (recorded, ended) {
                    (Err(e), _) => format!("not recordable: {}", e.message),
                    (_, Err(e)) => format!("capture failed ({})", super::context::describe(e)),
                    _ => unreachable!("one of the two failed"),
                }));
            }
        };
        let mut graph = CudaGraph {
            gpu,
            launch,
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            copy_in: Vec::new(),
            copy_out: Vec::new(),
            outputs,
            held,
            kept,
            nodes: 0,
        };
        let built = graph.build(op, body, &sources);
        // Safety: the captured body, cloned into the graph by `build` (or not needed any more).
        let _ = unsafe { cu::graph::destroy(body) };
        if let Err(e) = built {
            return Ok(Err(format!("not buildable: {}", e.message)));
        }
        // Safety: a complete graph of this context.
        match unsafe { cu::graph::instantiate(graph.graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => graph.exec = exec,
            Err(e) => return Ok(Err(format!("not instantiable ({})", super::context::describe(e)))),
        }
        Ok(Ok(graph))
    }

    /// Builds the graph around the captured `body`: a copy node per input (from `sources`, the
    /// addresses of this call's inputs, into the graph's input buffers), then the body, then a
    /// copy node per output into a placeholder (each call points it at a fresh block).
    fn build(&mut self, op: &str, body: sys::CUgraph, sources: &[u64]) -> Result<()> {
        let failed = |what: &str, r: sys::CUresult| device_error(op, what, cu::DriverError(r));
        let ctx = self.gpu.context();
        // Safety: plain driver calls on graphs of this context; every node added names nodes of
        // the same graph as its dependencies; the copies address live blocks of this context.
        unsafe {
            let r = sys::cuGraphCreate(&mut self.graph, 0);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(failed("creating a CUDA graph", r));
            }
            let mut count = 0usize;
            if sys::cuGraphGetNodes(body, std::ptr::null_mut(), &mut count) == sys::CUresult::CUDA_SUCCESS {
                self.nodes = count;
            }
            for (b, &src) in self.held.iter().zip(sources) {
                let dst = b.storage.device_block().expect("input buffers are made on the device").ptr;
                let node = CopyNode::add(self.graph, &[], src, dst, b.storage.bytes().max(1), ctx)
                    .map_err(|r| failed("adding a copy to a CUDA graph", r))?;
                self.copy_in.push(node);
            }
            let after: Vec<sys::CUgraphNode> = self.copy_in.iter().map(|c| c.node).collect();
            let mut child = std::ptr::null_mut();
            let r = sys::cuGraphAddChildGraphNode(&mut child, self.graph, after.as_ptr(), after.len(), body);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(failed("adding the recorded kernels to a CUDA graph", r));
            }
            for i in 0..self.outputs.len() {
                let out = self.outputs[i].clone();
                let src = out.storage.on_gpu(op, self.gpu.ordinal, self.launch)?;
                let placeholder = DeviceBlock::plain(op, self.gpu, self.launch, out.storage.bytes().max(1))?;
                let node = CopyNode::add(self.graph, &[child], src, placeholder.ptr, out.storage.bytes().max(1), ctx)
                    .map_err(|r| failed("adding a copy to a CUDA graph", r))?;
                self.copy_out.push(node);
                self.kept.push(placeholder);
            }
        }
        self.nodes += self.copy_in.len() + self.copy_out.len();
        Ok(())
    }

    /// Runs the graph on the caller's `inputs` (laid out as the captured ones) and returns the
    /// outputs in fresh blocks.
    pub fn launch(&mut self, op: &str, inputs: &[Buffer]) -> Result<Vec<Buffer>> {
        let ctx = self.gpu.context();
        for (node, b) in self.copy_in.iter_mut().zip(inputs) {
            node.params.srcDevice = b.storage.on_gpu(op, self.gpu.ordinal, self.launch)?;
            set_copy(op, self.exec, node, ctx)?;
        }
        let mut results = Vec::with_capacity(self.outputs.len());
        for (node, out) in self.copy_out.iter_mut().zip(&self.outputs) {
            let block = DeviceBlock::new(op, self.gpu, self.launch, out.storage.bytes().max(1))?;
            node.params.dstDevice = block.ptr;
            set_copy(op, self.exec, node, ctx)?;
            results.push(Buffer { storage: Storage::on_device(block), offset: out.offset, strides: out.strides.clone() });
        }
        // Safety: an instantiated graph of this context on one of its streams.
        unsafe { cu::graph::launch(self.exec, self.launch) }.map_err(|e| device_error(op, "launching a CUDA graph", e))?;
        REPLAYS.fetch_add(1, Ordering::Relaxed);
        Ok(results)
    }

    /// The graph's node count (kernels and copies).
    pub fn nodes(&self) -> usize {
        self.nodes
    }
}

/// Points one copy node of an instantiated graph at its new addresses.
fn set_copy(op: &str, exec: sys::CUgraphExec, node: &CopyNode, ctx: sys::CUcontext) -> Result<()> {
    // Safety: a memcpy node of the graph `exec` was instantiated from, with 1-D device parameters.
    let r = unsafe { sys::cuGraphExecMemcpyNodeSetParams(exec, node.node, &node.params, ctx) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(device_error(op, "updating a CUDA graph's copy", cu::DriverError(r)));
    }
    Ok(())
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // The blocks go back only after the graph's last launch is done.
        // Safety: a stream and graph handles of this context; failures mean a broken driver.
        unsafe {
            let _ = cu::stream::synchronize(self.launch);
            if !self.exec.is_null() {
                let _ = cu::graph::exec_destroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = cu::graph::destroy(self.graph);
            }
        }
    }
}

/// What a graph is recorded for: every slot's shape, each input's layout (storage bytes,
/// offset, strides) and the stream.
#[derive(PartialEq)]
struct Signature {
    shapes: Vec<Shape>,
    layouts: Vec<(usize, isize, Strides)>,
    stream: usize,
}

/// One plan's graph state: the signature it was captured for and whether capture failed.
#[derive(Default)]
pub struct PlanGraph {
    /// The signature of the last call, and how often in a row it came.
    last: Option<Signature>,
    repeats: usize,
    graph: Option<CudaGraph>,
    /// Why the plan is not replayed as a graph (after a failed capture), if it is not.
    refused: Option<String>,
}

impl PlanGraph {
    /// Runs a plan of `steps` steps on `inputs` (its outputs about `output_bytes` bytes): by a
    /// graph once the same signature has come twice in a row, else by `run` (the plan's kernels
    /// one by one).
    pub fn run(
        &mut self,
        stream: Stream,
        steps: usize,
        output_bytes: usize,
        shapes: &[Shape],
        inputs: Vec<Buffer>,
        run: impl Fn(Vec<Buffer>) -> Result<Vec<Buffer>>,
    ) -> Result<Vec<Buffer>> {
        let op = "compile";
        let (gpu, stream) = super::resolve(op, stream)?;
        let same = self.last.as_ref().is_some_and(|s| {
            s.stream == stream as usize
                && s.shapes == shapes
                && s.layouts.len() == inputs.len()
                && s.layouts.iter().zip(&inputs).all(|(l, b)| *l == layout(b))
        });
        if same {
            self.repeats += 1;
        } else {
            self.graph = None;
            self.refused = None;
            self.repeats = 0;
            self.last = Some(Signature {
                shapes: shapes.to_vec(),
                layouts: inputs.iter().map(layout).collect(),
                stream: stream as usize,
            });
        }
        if let Some(g) = self.graph.as_mut() {
            match g.launch(op, &inputs) {
                Ok(out) => return Ok(out),
                Err(e) => self.refuse(op, format!("its launch failed: {}", e.message)),
            }
        }
        if self.refused.is_some() || self.repeats == 0 {
            return run(inputs);
        }
        let copied = inputs.iter().map(|b| b.storage.bytes()).sum::<usize>() + output_bytes;
        if !worth_a_graph(steps, copied) {
            return run(inputs);
        }
        match CudaGraph::capture(op, gpu, stream, &inputs, &run)? {
            Ok(mut g) => match g.launch(op, &inputs) {
                Ok(out) => {
                    self.graph = Some(g);
                    return Ok(out);
                }
                Err(e) => self.refuse(op, format!("its launch failed: {}", e.message)),
            },
            Err(why) => self.refuse(op, why),
        }
        run(inputs)
    }

    /// Gives up graphs for this plan, saying why in the report (and the compile log).
    fn refuse(&mut self, op: &str, why: String) {
        if crate::transforms::compile::log_enabled() {
            eprintln!("[kiln compile] {op}: kernels launched one by one: {why}");
        }
        self.graph = None;
        self.refused = Some(why);
    }

    /// How the plan replays on the GPU, for the compile report (None before it ran there).
    pub fn describe(&self) -> Option<String> {
        self.last.as_ref()?;
        Some(match (&self.graph, &self.refused) {
            (Some(g), _) => format!("one CUDA graph launch of {} nodes per call (recorded at the second call of this signature)", g.nodes()),
            (None, Some(why)) => format!("the plan's kernels are launched one by one (no CUDA graph: {why})"),
            (None, None) if !enabled() => OFF.into(),
            (None, None) => "the plan's kernels are launched one by one (a plan of several steps becomes a CUDA graph from the second call of the same signature, when its input and output copies are small)".into(),
        })
    }
}
