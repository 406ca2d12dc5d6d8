//! CUDA C to GPU code at run time: NVRTC builds a cubin for the device's architecture, cached in
//! memory per GPU and on disk in kiln's cache directory (keyed by a hash of the source, the
//! architecture and the NVRTC version), so a fresh process loads a kernel it has built before in
//! well under a millisecond. A source that does not build is an error carrying NVRTC's log and the
//! source with line numbers.
//!
//! Kernels are built with `--fmad=false`: a multiply and an add stay two roundings, as in Rust,
//! and fused multiply-adds appear only where the source writes `fmaf` (as the CPU's float32
//! functions use FMA), so GPU results equal the CPU's where the math is exact.

use super::context::{device_error, Gpu};
use super::libraries::{self, NVRTC};
use crate::error::{Error, ErrorKind, Result};
use cudarc::driver::{result as cu, sys};
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};
use crate::fast_hash::FastMap;
use std::hash::Hash;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// NVRTC's version, e.g. (13, 0).
pub fn version(op: &str) -> Result<(i32, i32)> {
    libraries::require(op, NVRTC)?;
    static VERSION: OnceLock<(i32, i32)> = OnceLock::new();
    Ok(*VERSION.get_or_init(|| {
        let (mut major, mut minor) = (0, 0);
        // Safety: two out-parameters.
        let _ = unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) };
        (major, minor)
    }))
}

/// The options every kernel is built with, besides the architecture.
const OPTIONS: &[&str] = &["--fmad=false", "-std=c++17", "-default-device"];

/// Builds `source` for architecture `arch` (e.g. `sm_90a`) and returns the cubin.
pub fn build(op: &str, source: &str, arch: &str) -> Result<Vec<u8>> {
    build_with_headers(op, source, arch, &[])
}

/// [`build`] with `headers` on the include path (the toolkit's, for user kernels).
pub fn build_with_headers(op: &str, source: &str, arch: &str, headers: &[PathBuf]) -> Result<Vec<u8>> {
    version(op)?;
    let src = CString::new(source).map_err(|_| Error::value(op, "a kernel source holds a NUL byte"))?;
    let err = |what: &str, e: rtc::NvrtcError| Error::new(op, ErrorKind::Device, format!("NVRTC {what} failed: {e:?}"));
    let program = rtc::create_program(&src, None).map_err(|e| err("creating a program", e))?;
    let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    options.extend(headers.iter().map(|d| format!("-I{}", d.display())));
    // Safety: the program is valid until destroyed below.
    let compiled = unsafe { rtc::compile_program(program, &options) };
    let result = match compiled {
        Ok(()) => cubin(program).map_err(|e| err("reading the cubin", e)),
        Err(_) => {
            let log = unsafe { rtc::get_program_log(program) }
                .map(|l| l.iter().map(|&c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(Error::new(
                op,
                ErrorKind::Device,
                format!(
                    "the CUDA C kernel did not build for {arch}:\n{}\n--- source ---\n{}",
                    log.trim_end_matches('\0').trim_end(),
                    numbered(source)
                ),
            ))
        }
    };
    // Safety: destroyed once.
    let _ = unsafe { rtc::destroy_program(program) };
    wait_at_exit_after_this_build();
    result
}

/// The source with line numbers, as build errors show it.
pub fn numbered(source: &str) -> String {
    source.lines().enumerate().map(|(i, l)| format!("{:4} | {l}\n", i + 1)).collect()
}

fn cubin(program: rtc_sys::nvrtcProgram) -> std::result::Result<Vec<u8>, rtc::NvrtcError> {
    let mut size = 0usize;
    // Safety: the program compiled; the buffer has the size NVRTC reports.
    unsafe {
        rtc_sys::nvrtcGetCUBINSize(program, &mut size).result()?;
        let mut out = vec![0u8; size];
        rtc_sys::nvrtcGetCUBIN(program, out.as_mut_ptr() as *mut std::ffi::c_char).result()?;
        Ok(out)
    }
}

/// Where the cubin of `source` for `arch` (built with `headers`) is kept on disk.
fn disk_path(op: &str, source: &str, arch: &str, headers: &[PathBuf]) -> Result<PathBuf> {
    let (major, minor) = version(op)?;
    let headers: Vec<String> = headers.iter().map(|d| d.display().to_string()).collect();
    let key = crate::backend::stable_hash(&[source, arch, &OPTIONS.join(" "), &headers.join(" ")]);
    Ok(crate::backend::cache_root().join("cuda").join(format!("{arch}-nvrtc{major}.{minor}")).join(format!("{key:016x}.cubin")))
}

/// The cubin of `source` for `arch`, from the disk cache or built (and then stored, with its
/// source beside it so what runs can be read). `KILN_LOG=compile` logs each build and disk hit.
fn cached_cubin(op: &str, source: &str, arch: &str, headers: &[PathBuf]) -> Result<Vec<u8>> {
    let path = disk_path(op, source, arch, headers)?;
    let log = crate::transforms::compile::log_enabled();
    if let Ok(bytes) = std::fs::read(&path) {
        if log {
            eprintln!("[kiln compile] {op}: cubin for {arch} read from the disk cache ({})", path.display());
        }
        return Ok(bytes);
    }
    let started = std::time::Instant::now();
    let bytes = build_with_headers(op, source, arch, headers)?;
    if log {
        eprintln!(
            "[kiln compile] {op}: NVRTC built {} lines of CUDA C for {arch} in {:.1} ms ({} bytes of cubin, cached at {})",
            source.lines().count(),
            started.elapsed().as_secs_f64() * 1e3,
            bytes.len(),
            path.display()
        );
    }
    // The cache is an optimisation: a read-only or full disk only costs a rebuild next time.
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
        let _ = std::fs::write(path.with_extension("cu"), source);
    }
    Ok(bytes)
}

/// A loaded kernel: the function to launch.
#[derive(Clone, Copy)]
pub struct Function(pub sys::CUfunction);

// Safety: a function handle is usable from any thread with its context current.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl Function {
    /// Queues the kernel on `stream` with `grid` blocks of `block` threads; `args` point at
    /// values of the kernel's parameter types, in order.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn launch(self, op: &str, stream: sys::CUstream, grid: usize, block: u32, args: &mut [*mut std::ffi::c_void]) -> Result<()> {
        self.launch_shared(op, stream, grid, block, 0, args)
    }

    /// [`Function::launch`] with `shared` bytes of dynamic shared memory per block (above 48 KiB
    /// the kernel is first allowed that much).
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn launch_shared(self, op: &str, stream: sys::CUstream, grid: usize, block: u32, shared: u32, args: &mut [*mut std::ffi::c_void]) -> Result<()> {
        let grid = u32::try_from(grid).ok().filter(|&g| g <= i32::MAX as u32).ok_or_else(|| {
            Error::unsupported(op, format!("{grid} blocks are more than one GPU launch covers (2^31 - 1)"))
        })?;
        self.launch_3d(op, stream, [grid.max(1), 1, 1], [block, 1, 1], shared, args)
    }

    /// Queues the kernel with a three-axis `grid` of blocks of `block` threads and `shared` bytes
    /// of dynamic shared memory (allowed above 48 KiB first).
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn launch_3d(self, op: &str, stream: sys::CUstream, grid: [u32; 3], block: [u32; 3], shared: u32, args: &mut [*mut std::ffi::c_void]) -> Result<()> {
        if shared > 48 * 1024 {
            let attribute = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // Safety: a loaded function of the current context.
            unsafe { cu::function::set_function_attribute(self.0, attribute, shared as i32) }
                .map_err(|e| device_error(op, &format!("allowing a kernel {shared} bytes of shared memory"), e))?;
        }
        // Safety: the caller passes the kernel's parameters; the buffers they address hold what
        // the kernel indexes.
        unsafe { cu::launch_kernel(self.0, (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), shared, stream, args) }
            .map_err(|e| device_error(op, "launching a kernel", e))
    }

    /// Queues a kernel whose parameters are all 8 bytes (device addresses, 64-bit integers),
    /// given in order as `params`, with `shared` bytes of dynamic shared memory per block.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn launch_params(self, op: &str, stream: sys::CUstream, grid: usize, block: u32, shared: u32, params: &mut [u64]) -> Result<()> {
        let mut args: Vec<*mut std::ffi::c_void> = params.iter_mut().map(|p| p as *mut u64 as *mut std::ffi::c_void).collect();
        self.launch_shared(op, stream, grid, block, shared, &mut args)
    }

    /// Queues a kernel whose one parameter is a struct of 8-byte `words`, with enough blocks of
    /// `block` threads for `work` items (at most 16 blocks per multiprocessor; the kernel loops).
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
    pub fn launch_words(self, op: &str, gpu: &Gpu, stream: sys::CUstream, block: u32, work: usize, words: &mut [u64]) -> Result<()> {
        self.launch(op, stream, gpu.grid_for(block, work), block, &mut [words.as_mut_ptr() as *mut std::ffi::c_void])
    }
}

/// Hand-written kernels (a `.cu` body after the prelude and its definitions) loaded so far, by
/// entry point and definitions.
static HANDWRITTEN: Loaded<(&'static str, String)> = Loaded::new();

/// Entry `entry` of the hand-written kernel `body` specialised by `definitions` (C `#define`s),
/// built on first use.
pub fn handwritten(op: &str, gpu: &Gpu, body: &str, definitions: String, entry: &'static str) -> Result<Function> {
    let source = handwritten_source(body, &definitions);
    HANDWRITTEN.get(op, gpu, (entry, definitions), entry, || Ok(source))
}

/// The CUDA C of hand-written kernel `body` specialised by `definitions`: the prelude, the
/// definitions, the body.
pub fn handwritten_source(body: &str, definitions: &str) -> String {
    format!("{}\n{definitions}\n{body}", super::source::PRELUDE)
}

/// A cubin being built on another thread: empty until the build ends.
type Building = std::sync::Arc<Mutex<Option<Result<Vec<u8>>>>>;

/// Kernels loaded so far, by a key of the caller's (what the source is printed from) and the GPU:
/// a kernel found again costs one lookup, without printing its source.
pub struct Loaded<K> {
    functions: Mutex<Option<FastMap<(K, usize), Function>>>,
    /// Kernels whose cubins NVRTC builds in the background ([`Loaded::get_when_built`]).
    building: Mutex<Option<FastMap<(K, usize), Building>>>,
    /// Whether the sources include the toolkit's headers (user kernels do; kiln's own do not).
    toolkit_headers: bool,
}

impl<K: Hash + Eq> Default for Loaded<K> {
    fn default() -> Loaded<K> {
        Loaded::new()
    }
}

impl<K: Hash + Eq> Loaded<K> {
    /// An empty cache (for a `static`) of kernels that need no headers.
    pub const fn new() -> Loaded<K> {
        Loaded { functions: Mutex::new(None), building: Mutex::new(None), toolkit_headers: false }
    }

    /// An empty cache of kernels built with the CUDA toolkit's headers on the include path.
    pub const fn with_toolkit_headers() -> Loaded<K> {
        Loaded { functions: Mutex::new(None), building: Mutex::new(None), toolkit_headers: true }
    }

    /// The kernel `key` stands for on `gpu`: loaded before, or `entry` of the source `print`
    /// gives, built (or read from the disk cache) and loaded now.
    pub fn get(&self, op: &str, gpu: &Gpu, key: K, entry: &str, print: impl FnOnce() -> Result<String>) -> Result<Function> {
        let key = (key, gpu.ordinal);
        if let Some(f) = self.functions.lock().unwrap().get_or_insert_with(FastMap::default).get(&key) {
            return Ok(*f);
        }
        let headers = if self.toolkit_headers { super::libraries::header_dirs() } else { &[] };
        let f = load(op, gpu, &print()?, entry, headers)?;
        self.functions.lock().unwrap().get_or_insert_with(FastMap::default).insert(key, f);
        Ok(f)
    }

    /// [`Loaded::get`] for callers that have a slower way to do the work meanwhile: a kernel
    /// neither loaded nor in the disk cache is built by NVRTC on another thread, and this returns
    /// `None` until that build has ended (then the kernel is loaded here, on the caller's thread).
    /// A failed build is returned as the error once.
    pub fn get_when_built(&self, op: &str, gpu: &Gpu, key: K, entry: &str, print: impl FnOnce() -> Result<String>) -> Result<Option<Function>> {
        let key = (key, gpu.ordinal);
        if let Some(f) = self.functions.lock().unwrap().get_or_insert_with(FastMap::default).get(&key) {
            return Ok(Some(*f));
        }
        let mut building = self.building.lock().unwrap();
        let building = building.get_or_insert_with(FastMap::default);
        let cubin = match building.get(&key) {
            Some(slot) => match slot.lock().unwrap().take() {
                Some(built) => built,
                None => return Ok(None),
            },
            None => {
                let source = print()?;
                let arch = gpu.arch();
                let slot: Building = Default::default();
                let started = !disk_path(op, &source, &arch, &[])?.exists() && {
                    let (filled, op, source, target) = (slot.clone(), op.to_string(), source.clone(), arch.clone());
                    in_background(&arch, move || *filled.lock().unwrap() = Some(cached_cubin(&op, &source, &target, &[])))
                };
                if started {
                    building.insert(key, slot);
                    return Ok(None);
                }
                // In the disk cache (or no thread to spare): read or built now.
                cached_cubin(op, &source, &arch, &[])
            }
        };
        building.remove(&key);
        let f = load_cubin(op, &cubin?, entry)?;
        self.functions.lock().unwrap().get_or_insert_with(FastMap::default).insert(key, f);
        Ok(Some(f))
    }
}

/// Background builds queued or running. The process waits for them as it exits: a build cut
/// off by exit would run on inside NVRTC while the library is torn down, and crash the process
/// (seen on an H100: `nvrtcCompileProgram` faulting on the builder thread after `main` returned,
/// or hanging there).
static IN_FLIGHT: Mutex<usize> = Mutex::new(0);
static BUILD_ENDED: std::sync::Condvar = std::sync::Condvar::new();
/// Whether the builder thread runs (from then on the exit wait is registered after builds).
static BUILDER_RUNS: AtomicBool = AtomicBool::new(false);
/// Builds after which the exit wait is registered again: NVRTC registers the teardown of state
/// it creates lazily during its first builds, so a few dozen cover it without a registration per
/// build for the life of the process.
static REREGISTRATIONS_LEFT: AtomicUsize = AtomicUsize::new(64);

/// A kernel built before the builder thread starts, on the caller's thread. NVRTC creates much
/// of its process-wide state during its first build and registers that state's teardown with
/// `atexit`; exit handlers run last-registered first, so the exit wait, registered after this
/// build, runs before that teardown even when the process exits during the first real build.
const WARM_UP: &str = "extern \"C\" __global__ void kiln_warm_up(float* x) { x[threadIdx.x] *= 2.0f; }";

/// A build for the background thread.
type Job = Box<dyn FnOnce() + Send>;

extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// Waits (at most a minute) for the background builds queued or running; registered with
/// `atexit`. The builder thread itself never ends (it waits for jobs), so no thread leaves
/// NVRTC's per-thread state to be torn down while the process exits.
extern "C" fn wait_for_background_builds() {
    let mut running = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while *running > 0 {
        let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else { return };
        running = BUILD_ENDED.wait_timeout(running, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// Registers the exit wait again (for the first builds once the builder thread runs): after any
/// teardown a build just registered, so the wait comes first at exit.
fn wait_at_exit_after_this_build() {
    let take = |left: usize| left.checked_sub(1);
    if BUILDER_RUNS.load(Ordering::Acquire) && REREGISTRATIONS_LEFT.fetch_update(Ordering::AcqRel, Ordering::Acquire, take).is_ok() {
        // Safety: the callback is a plain function that lives as long as the process.
        unsafe { atexit(wait_for_background_builds) };
    }
}

/// Counts one queued build off [`IN_FLIGHT`] when dropped (a build that panics included),
/// waking the exit wait.
struct BuildEnded;

impl Drop for BuildEnded {
    fn drop(&mut self) {
        *IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        BUILD_ENDED.notify_all();
    }
}

/// Queues `job` for kiln's one background builder thread (started on first use, after a
/// [`WARM_UP`] build for `arch` on this thread), counted in [`IN_FLIGHT`]; false if the thread
/// could not start.
fn in_background(arch: &str, job: impl FnOnce() + Send + 'static) -> bool {
    static QUEUE: OnceLock<Option<Mutex<std::sync::mpsc::Sender<Job>>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let _ = build("nvrtc warm-up", WARM_UP, arch);
        let (send, receive) = std::sync::mpsc::channel::<Job>();
        let worker = std::thread::Builder::new().name("kiln-nvrtc".into()).spawn(move || {
            for job in receive {
                let _ended = BuildEnded;
                job();
            }
        });
        let runs = worker.is_ok();
        if runs {
            BUILDER_RUNS.store(true, Ordering::Release);
            // Safety: the callback is a plain function that lives as long as the process.
            unsafe { atexit(wait_for_background_builds) };
        }
        runs.then(|| Mutex::new(send))
    });
    let Some(queue) = queue else { return false };
    *IN_FLIGHT.lock().unwrap() += 1;
    if queue.lock().unwrap().send(Box::new(job)).is_err() {
        *IN_FLIGHT.lock().unwrap() -= 1;
        return false;
    }
    true
}

/// The function `entry` of `source` loaded on `gpu`, its cubin built (with `headers` on the
/// include path) or read from the disk cache.
fn load(op: &str, gpu: &Gpu, source: &str, entry: &str, headers: &[PathBuf]) -> Result<Function> {
    load_cubin(op, &cached_cubin(op, source, &gpu.arch(), headers)?, entry)
}

/// The function `entry` of `cubin`, loaded into the current context.
fn load_cubin(op: &str, cubin: &[u8], entry: &str) -> Result<Function> {
    // Safety: the image is a cubin NVRTC built for this device; the module stays loaded for the
    // process (kernels are few and small).
    let module = unsafe { cu::module::load_data(cubin.as_ptr() as *const std::ffi::c_void) }
        .map_err(|e| device_error(op, "loading a kernel (cuModuleLoadData)", e))?;
    let name = CString::new(entry).expect("entry names are identifiers");
    let f = unsafe { cu::module::get_function(module, name) }.map_err(|e| device_error(op, "finding a kernel", e))?;
    Ok(Function(f))
}
