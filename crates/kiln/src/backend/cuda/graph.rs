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
//! they save are captured (at most `COPY_BYTES_PER_STEP` per kernel launched), and a graph keeps
//! at most `MAX_KEPT_BYTES` of temporaries. The copies are two kernel nodes (one for the inputs,
//! one for the outputs) whose address lists are updated before each launch; copy nodes would not
//! take addresses from another allocator than the captured ones. Capture runs on a private
//! stream that no other thread uses (the plan's ops ask for the caller's stream and get the
//! private one while this thread captures), and anything that cannot be recorded (a copy between
//! host and GPU, a host read, an op that runs on the CPU) makes the capture fail; the plan then
//! keeps launching its kernels one by one, which is always correct.
//!
//! Graphs are on by default: on an H100 a compiled MLP training step (about 20 kernels) took
//! 0.075 ms as a graph against 0.17 ms launched kernel by kernel. `KILN_CUDA_GRAPHS=0` or
//! [`set_enabled`] turns them off.
//!
//! A graph's buffers are plain allocations kept between its launches (every temporary of the
//! recorded steps, not their peak). They count as cached memory (`cache_memory`: memory kept for
//! reuse, not held by arrays), and `clear_cache` releases every graph; a plan whose graph was
//! released records it again at its next call. Graphs live in one registry for that, and each
//! plan names its graph there. Known limit: a `clear_cache` or an out-of-memory retry on another
//! thread while a plan is being recorded synchronises the context, which ends that recording
//! (the plan then runs kernel by kernel until its signature changes).

use super::context::{device_error, Gpu};
use crate::fast_hash::FastMap;
use super::memory::DeviceBlock;
use super::switch::Switch;
use crate::buffer::{Buffer, Storage};
use crate::device::Stream;
use crate::error::{Error, ErrorKind, Result};
use crate::shape::{Shape, Strides};
use cudarc::driver::{result as cu, sys};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of input and output copies a graph may add per step it launches: about what an H100
/// copies in the time the host spends launching one kernel.
const COPY_BYTES_PER_STEP: usize = 1 << 20;

/// The most bytes of temporaries a graph keeps alive for its plan's life.
const MAX_KEPT_BYTES: usize = 256 << 20;

/// Graph launches so far (for tests and the report).
static REPLAYS: AtomicUsize = AtomicUsize::new(0);

/// Bytes live graphs hold that no other statistic counts.
static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes the CUDA graphs of compiled plans hold between launches (their input buffers, kept
/// temporaries and outputs): part of `cache_memory`.
pub fn held_bytes() -> usize {
    HELD_BYTES.load(Ordering::Relaxed)
}

/// Every live graph, by the id its plan knows it by.
static GRAPHS: Mutex<Option<FastMap<u64, CudaGraph>>> = Mutex::new(None);
/// The id of the next graph put in [`GRAPHS`].
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(0);

/// Releases every plan's graph (for `clear_cache`); plans record theirs again when called. While
/// a graph is being launched (the registry busy), nothing is released.
pub(super) fn release_all() {
    let released: Vec<CudaGraph> = match GRAPHS.try_lock() {
        Ok(mut graphs) => graphs.as_mut().map(|m| m.drain().map(|(_, g)| g).collect()).unwrap_or_default(),
        Err(_) => return,
    };
    drop(released);
}

/// Graph launches so far, over every compiled plan.
pub fn replays() -> usize {
    REPLAYS.load(Ordering::Relaxed)
}

/// Whether compiled plans become CUDA graphs.
static ENABLED: Switch = Switch::new("KILN_CUDA_GRAPHS", true);

/// Whether compiled plans of several steps are replayed as CUDA graphs: on unless
/// `KILN_CUDA_GRAPHS=0` or [`set_enabled`] turned it off.
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
    refuse_while_capturing(op, "a copy between host and GPU")
}

/// Fails when `op` would do `what`, which a CUDA graph cannot hold, while this thread captures.
pub(super) fn refuse_while_capturing(op: &str, what: &str) -> Result<()> {
    if capturing() {
        return Err(Error::new(op, ErrorKind::Unsupported, format!("{what} cannot be part of a CUDA graph")));
    }
    Ok(())
}

/// Whether a plan launching `steps` kernels is worth a graph that copies `copied` bytes in and
/// out (the plan checks that graphs are on and that there are several steps).
fn worth_a_graph(steps: usize, copied: usize) -> bool {
    copied <= steps * COPY_BYTES_PER_STEP
}

/// How a plan runs while graphs are off (for the report).
pub const OFF: &str = "the plan's kernels are launched one by one (no CUDA graph: graphs were turned off, by KILN_CUDA_GRAPHS=0 or set_enabled)";

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

/// The most arrays one copy node moves (its addresses travel as one kernel parameter).
const MAX_COPIES: usize = 64;

/// The copy kernel's text: block row `y` copies array `y` (16-byte vectors when both addresses
/// allow, else bytes). Its parameter is [`CopyList`]; `K_MAX_COPIES` is defined as [`MAX_COPIES`].
const COPIES_BODY: &str = r#"
struct KCopyList { u64 src[K_MAX_COPIES]; u64 dst[K_MAX_COPIES]; u64 bytes[K_MAX_COPIES]; };
extern "C" __global__ void kiln_graph_copies(const KCopyList c) {
    const u64 n = c.bytes[blockIdx.y];
    const unsigned char* s = (const unsigned char*)c.src[blockIdx.y];
    unsigned char* d = (unsigned char*)c.dst[blockIdx.y];
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 done = 0;
    if (((c.src[blockIdx.y] | c.dst[blockIdx.y]) & 15) == 0) {
        const u64 vectors = n / 16;
        for (u64 v = first; v < vectors; v += stride) ((uint4*)d)[v] = ((const uint4*)s)[v];
        done = vectors * 16;
    }
    for (u64 b = done + first; b < n; b += stride) d[b] = s[b];
}
"#;

/// The copy kernel's parameter, laid out as `KCopyList`.
#[repr(C)]
struct CopyList {
    src: [u64; MAX_COPIES],
    dst: [u64; MAX_COPIES],
    bytes: [u64; MAX_COPIES],
}

/// One kernel node of a graph that copies several arrays between device addresses: the graph's
/// inputs in, or its outputs out. Kernel nodes (unlike copy nodes) take any new addresses at
/// each launch, whatever allocator made them.
struct CopyNode {
    node: sys::CUgraphNode,
    params: sys::CUDA_KERNEL_NODE_PARAMS,
    list: Box<CopyList>,
}

impl CopyNode {
    /// Adds to `graph`, after `after`, a node copying `bytes[i]` bytes from `src[i]` to
    /// `dst[i]` for each i (at most [`MAX_COPIES`], none empty).
    ///
    /// # Safety
    /// `graph` and the nodes in `after` belong to the current context, as do the addresses.
    unsafe fn add(
        op: &str,
        gpu: &Gpu,
        graph: sys::CUgraph,
        after: &[sys::CUgraphNode],
        src: &[u64],
        dst: &[u64],
        bytes: &[usize],
    ) -> Result<CopyNode> {
        let definitions = format!("#define K_MAX_COPIES {MAX_COPIES}");
        let function = super::nvrtc::handwritten(op, gpu, COPIES_BODY, definitions, "kiln_graph_copies")?;
        let mut list = Box::new(CopyList { src: [0; MAX_COPIES], dst: [0; MAX_COPIES], bytes: [0; MAX_COPIES] });
        list.src[..src.len()].copy_from_slice(src);
        list.dst[..dst.len()].copy_from_slice(dst);
        for (b, &n) in list.bytes.iter_mut().zip(bytes) {
            *b = n as u64;
        }
        const BLOCK: u32 = 256;
        let largest = bytes.iter().copied().max().unwrap_or(1);
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: function.0,
            gridDimX: gpu.grid_for(BLOCK, largest.div_ceil(16)) as u32,
            gridDimY: bytes.len() as u32,
            gridDimZ: 1,
            blockDimX: BLOCK,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut node = CopyNode { node: std::ptr::null_mut(), params, list };
        let mut args = [&mut *node.list as *mut CopyList as *mut std::ffi::c_void];
        node.params.kernelParams = args.as_mut_ptr();
        // Safety: as the caller promises; the driver copies the parameter values.
        let r = unsafe { sys::cuGraphAddKernelNode_v2(&mut node.node, graph, after.as_ptr(), after.len(), &node.params) };
        node.params.kernelParams = std::ptr::null_mut();
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(device_error(op, "adding a copy kernel to a CUDA graph", cu::DriverError(r)));
        }
        Ok(node)
    }

    /// Points the node, in the instantiated `exec`, at new addresses (`None` keeps a side).
    fn update(&mut self, op: &str, exec: sys::CUgraphExec, src: Option<&[u64]>, dst: Option<&[u64]>) -> Result<()> {
        if let Some(src) = src {
            self.list.src[..src.len()].copy_from_slice(src);
        }
        if let Some(dst) = dst {
            self.list.dst[..dst.len()].copy_from_slice(dst);
        }
        let mut args = [&mut *self.list as *mut CopyList as *mut std::ffi::c_void];
        self.params.kernelParams = args.as_mut_ptr();
        // Safety: a kernel node of the graph `exec` was instantiated from, with its own function
        // and launch shape; the driver copies the parameter values.
        let r = unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, self.node, &self.params) };
        self.params.kernelParams = std::ptr::null_mut();
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(device_error(op, "updating a CUDA graph's copies", cu::DriverError(r)));
        }
        Ok(())
    }
}

/// A plan captured as a CUDA graph, with every buffer its nodes address.
pub struct CudaGraph {
    gpu: &'static Gpu,
    launch: sys::CUstream,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The node copying the caller's inputs into the graph's input buffers (none without inputs).
    copy_in: Option<CopyNode>,
    /// The node copying the graph's results into the call's fresh blocks (none without outputs).
    copy_out: Option<CopyNode>,
    /// The outputs as the graph leaves them (their layouts are the returned arrays' layouts).
    outputs: Vec<Buffer>,
    /// Everything else the nodes address: input buffers and the blocks kept while capturing.
    held: Vec<Buffer>,
    _kept: Vec<DeviceBlock>,
    nodes: usize,
    /// Bytes of `held`, `outputs` and the kept blocks that no other statistic counts.
    bytes: usize,
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
        if inputs.len() > MAX_COPIES {
            return Ok(Err(format!("a CUDA graph copies at most {MAX_COPIES} inputs")));
        }
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
        // A graph keeps every temporary of its steps: past a budget, kernel by kernel is better.
        let kept_bytes: usize = kept.iter().map(|b| b.bytes).sum();
        let recorded = recorded.and_then(|outputs| {
            if kept_bytes > MAX_KEPT_BYTES {
                let why = format!("its steps' temporaries ({} MiB) are more than a graph keeps ({} MiB)", kept_bytes >> 20, MAX_KEPT_BYTES >> 20);
                return Err(Error::unsupported(op, why));
            }
            Ok(outputs)
        });
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
        let storage_bytes = |bs: &[Buffer]| bs.iter().map(|b| b.storage.bytes()).sum::<usize>();
        let uncounted_kept: usize = kept.iter().filter(|b| b.uncounted()).map(|b| b.bytes).sum();
        let bytes = storage_bytes(&held) + storage_bytes(&outputs) + uncounted_kept;
        HELD_BYTES.fetch_add(bytes, Ordering::Relaxed);
        let mut graph = CudaGraph {
            gpu,
            launch,
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            copy_in: None,
            copy_out: None,
            outputs,
            held,
            _kept: kept,
            nodes: 0,
            bytes,
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

    /// Builds the graph around the captured `body`: a node copying the inputs (from `sources`,
    /// the addresses of this call's inputs) into the graph's input buffers, then the body, then a
    /// node copying the outputs out (each call points it at fresh blocks).
    fn build(&mut self, op: &str, body: sys::CUgraph, sources: &[u64]) -> Result<()> {
        let failed = |what: &str, r: sys::CUresult| device_error(op, what, cu::DriverError(r));
        // (The inputs were counted before capturing.)
        if self.outputs.len() > MAX_COPIES {
            return Err(Error::unsupported(op, format!("a CUDA graph copies at most {MAX_COPIES} outputs")));
        }
        let sizes = |bs: &[Buffer]| bs.iter().map(|b| b.storage.bytes().max(1)).collect::<Vec<usize>>();
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
            if !self.held.is_empty() {
                let dst: Vec<u64> = self.held.iter().map(|b| b.storage.device_block().expect("input buffers are made on the device").ptr).collect();
                self.copy_in = Some(CopyNode::add(op, self.gpu, self.graph, &[], sources, &dst, &sizes(&self.held))?);
                self.nodes += 1;
            }
            let after: Vec<sys::CUgraphNode> = self.copy_in.iter().map(|c| c.node).collect();
            let mut child = std::ptr::null_mut();
            let r = sys::cuGraphAddChildGraphNode(&mut child, self.graph, after.as_ptr(), after.len(), body);
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(failed("adding the recorded kernels to a CUDA graph", r));
            }
            if !self.outputs.is_empty() {
                let src = self.outputs.iter().map(|b| b.storage.on_gpu(op, self.gpu.ordinal, self.launch)).collect::<Result<Vec<u64>>>()?;
                // Until each launch points them at the call's blocks, the outputs copy onto themselves.
                self.copy_out = Some(CopyNode::add(op, self.gpu, self.graph, &[child], &src, &src, &sizes(&self.outputs))?);
                self.nodes += 1;
            }
        }
        Ok(())
    }

    /// Runs the graph on the caller's `inputs` (laid out as the captured ones) and returns the
    /// outputs in fresh blocks.
    pub fn launch(&mut self, op: &str, inputs: &[Buffer]) -> Result<Vec<Buffer>> {
        if let Some(node) = self.copy_in.as_mut() {
            let src = inputs.iter().map(|b| b.storage.on_gpu(op, self.gpu.ordinal, self.launch)).collect::<Result<Vec<u64>>>()?;
            node.update(op, self.exec, Some(&src), None)?;
        }
        let mut results = Vec::with_capacity(self.outputs.len());
        let mut dst = Vec::with_capacity(self.outputs.len());
        for out in &self.outputs {
            let block = DeviceBlock::new(op, self.gpu, self.launch, out.storage.bytes().max(1))?;
            dst.push(block.ptr);
            results.push(Buffer { storage: Storage::on_device(block), offset: out.offset, strides: out.strides.clone() });
        }
        if let Some(node) = self.copy_out.as_mut() {
            node.update(op, self.exec, None, Some(&dst))?;
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

impl Drop for CudaGraph {
    fn drop(&mut self) {
        HELD_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
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
    /// The plan's graph in [`GRAPHS`] (gone from there after a `clear_cache`), and its nodes.
    graph: Option<(u64, usize)>,
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
            self.forget_graph();
            self.refused = None;
            self.repeats = 0;
            self.last = Some(Signature {
                shapes: shapes.to_vec(),
                layouts: inputs.iter().map(layout).collect(),
                stream: stream as usize,
            });
        }
        if let Some((id, _)) = self.graph {
            let mut graphs = GRAPHS.lock().unwrap();
            match graphs.as_mut().and_then(|m| m.get_mut(&id)) {
                Some(g) => match g.launch(op, &inputs) {
                    Ok(out) => return Ok(out),
                    Err(e) => {
                        drop(graphs);
                        self.refuse(op, format!("its launch failed: {}", e.message));
                    }
                },
                // Released by clear_cache: recorded again below.
                None => self.graph = None,
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
                    let id = NEXT_GRAPH.fetch_add(1, Ordering::Relaxed);
                    self.graph = Some((id, g.nodes()));
                    GRAPHS.lock().unwrap().get_or_insert_with(FastMap::default).insert(id, g);
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
        self.forget_graph();
        self.refused = Some(why);
    }

    /// Drops the plan's graph, if it has one.
    fn forget_graph(&mut self) {
        if let Some((id, _)) = self.graph.take() {
            // Taken out under the lock, dropped (a wait for its last launch) after it.
            let graph = GRAPHS.lock().unwrap().as_mut().and_then(|m| m.remove(&id));
            drop(graph);
        }
    }

    /// How the plan replays on the GPU, for the compile report (None before it ran there).
    pub fn describe(&self) -> Option<String> {
        self.last.as_ref()?;
        Some(match (&self.graph, &self.refused) {
            (Some((_, nodes)), _) => format!("one CUDA graph launch of {nodes} nodes per call (recorded at the second call of this signature)"),
            (None, Some(why)) => format!("the plan's kernels are launched one by one (no CUDA graph: {why})"),
            (None, None) if !enabled() => OFF.into(),
            (None, None) => "the plan's kernels are launched one by one (a plan of several steps becomes a CUDA graph from the second call of the same signature, when its input and output copies are small)".into(),
        })
    }
}

impl Drop for PlanGraph {
    fn drop(&mut self) {
        self.forget_graph();
    }
}
