//! Native code for fused kernels: the CPU's second way to run the fused IR, besides the tile
//! interpreter. Each pass of a kernel is printed as a C function ([`source`]) that computes all
//! of the pass's element instructions for a tile in one loop with the values in registers, built
//! by the system C compiler and loaded ([`toolchain`]).
//!
//! Building takes a compiler run (0.1 to 0.5 s), far over the first-call budget, so it happens on
//! a background thread: a kernel's first runs are interpreted, and once its library is loaded
//! later runs call it (a library already in the on-disk cache is loaded at once). The results
//! are the same either way, bit for bit. Kernels C can't express exactly (float16/bfloat16 values
//! and a few ops, see [`source`]) and machines without a compiler stay interpreted.
//!
//! `KILN_NATIVE=0` turns native code off; `KILN_LOG=compile` logs each build.

mod source;
mod toolchain;

use crate::backend::cpu::fused::Pass;
use crate::fused::Kernel;
pub(in crate::backend::cpu) use source::{Layout, Read, Write};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// A pass function: `(in, out, row, acc, n)`, see [`source::pass_function`].
pub(in crate::backend::cpu) type PassFn =
    unsafe extern "C" fn(*const *const u8, *const *mut u8, *const u64, *mut u64, usize);

/// Which engine runs fused kernels on the calling thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Native code once it is built in the background; the interpreter until then.
    Auto,
    /// Always the tile interpreter.
    Interpreter,
    /// Native code, built on the calling thread first if needed (the interpreter when the
    /// kernel has no C form or no compiler works).
    NativeNow,
}

thread_local! {
    static ENGINE: Cell<Engine> = const { Cell::new(Engine::Auto) };
    static NATIVE_RUNS: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` with fused kernels run by `engine` on this thread (for tests and benchmarks that
/// compare the engines).
pub fn with_engine<R>(engine: Engine, f: impl FnOnce() -> R) -> R {
    let before = ENGINE.with(|e| e.replace(engine));
    let result = f();
    ENGINE.with(|e| e.set(before));
    result
}

/// How many fused kernel runs on this thread used native code.
pub fn native_runs() -> u64 {
    NATIVE_RUNS.with(|n| n.get())
}

/// Whether `KILN_NATIVE` turns native code off.
fn disabled() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("KILN_NATIVE").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "false")))
}

/// A kernel's loaded pass functions, indexed like its layouts.
pub(in crate::backend::cpu) struct Loaded {
    fns: Vec<PassFn>,
}

/// How the CPU runs a fused kernel, for introspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// As native code built from the C source at `source`.
    Native { source: PathBuf },
    /// Interpreted until its native code is built in the background (or loaded from the on-disk
    /// cache on its next run); `source` is where its C source is (or will be) kept.
    Pending { source: PathBuf },
    /// Interpreted, for the reason given.
    Interpreted(String),
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Native { source } => write!(f, "native code (C source: {})", source.display()),
            Status::Pending { source } => {
                write!(f, "interpreted until its native code is built in the background (C source: {})", source.display())
            }
            Status::Interpreted(why) => write!(f, "interpreted: {why}"),
        }
    }
}

/// The native form of one kernel: its C source and layouts, and the loaded library once built.
pub(in crate::backend::cpu) struct Native {
    /// Err (why) when some instruction has no exact C form.
    lowered: std::result::Result<Lowered, String>,
    /// Set once: the loaded functions, or why building or loading failed.
    loaded: Arc<OnceLock<std::result::Result<Loaded, String>>>,
    /// Whether a background build was queued.
    queued: AtomicBool,
}

struct Lowered {
    source: Arc<str>,
    /// Where its library is (or will be) in the on-disk cache: hashed once, when first needed.
    library: OnceLock<Arc<Path>>,
    /// `(variant, pass)` of each layout and function.
    index: Vec<(usize, usize)>,
    layouts: Vec<Layout>,
}

/// The queue of background builds, and how many are unfinished.
struct Builds {
    queue: Mutex<std::sync::mpsc::Sender<Job>>,
    pending: Mutex<usize>,
    done: Condvar,
}

impl Lowered {
    /// Where its library is (or will be) in the on-disk cache.
    fn library(&self) -> &Arc<Path> {
        self.library.get_or_init(|| toolchain::library_path(&self.source).into())
    }
}

struct Job {
    source: Arc<str>,
    library: Arc<Path>,
    symbols: Vec<String>,
    loaded: Arc<OnceLock<std::result::Result<Loaded, String>>>,
}

/// Builds `source` into `library` (unless it is there) and loads its `symbols`; the error (also
/// logged) when that fails.
fn build_and_load(source: &str, library: &Path, symbols: &[String]) -> std::result::Result<Loaded, String> {
    let start = std::time::Instant::now();
    let result = toolchain::build(source, library).and_then(|()| toolchain::load(library, symbols));
    let log = crate::transforms::compile::log_enabled();
    match result {
        Ok(ptrs) => {
            if log {
                eprintln!("[kiln compile] native kernel ready ({} functions, {:.0} ms)", symbols.len(), start.elapsed().as_secs_f64() * 1e3);
            }
            // Safety: each symbol is a pass function printed with the PassFn signature.
            let fns = ptrs.into_iter().map(|p| unsafe { std::mem::transmute::<*const std::ffi::c_void, PassFn>(p) }).collect();
            Ok(Loaded { fns })
        }
        Err(e) => {
            if log {
                eprintln!("[kiln compile] native kernel unavailable, staying interpreted: {e}");
            }
            Err(e)
        }
    }
}

fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("kiln-native-build".into())
            .spawn(move || {
                for job in rx {
                    job.loaded.get_or_init(|| build_and_load(&job.source, &job.library, &job.symbols));
                    let b = builds();
                    *b.pending.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                    b.done.notify_all();
                }
            })
            .expect("spawning the native build thread");
        Builds { queue: Mutex::new(tx), pending: Mutex::new(0), done: Condvar::new() }
    })
}

/// Waits until every queued background build has finished (benchmarks call it after warm-up so
/// they measure the steady state).
pub fn wait_for_builds() {
    let b = builds();
    let mut pending = b.pending.lock().unwrap_or_else(|e| e.into_inner());
    while *pending > 0 {
        pending = b.done.wait(pending).unwrap_or_else(|e| e.into_inner());
    }
}

impl Native {
    /// The native form of kernel `k`, whose passes are `(variant, pass, schedule, folds)`.
    pub(in crate::backend::cpu) fn new(k: &Kernel, passes: &[(usize, usize, &Pass, &[usize])]) -> Native {
        let lowered = source::kernel_source(k, passes, crate::backend::cpu::simd::has_avx2_fma()).map(|(source, layouts)| {
            Lowered { source: source.into(), library: OnceLock::new(), index: passes.iter().map(|&(v, p, ..)| (v, p)).collect(), layouts }
        });
        Native { lowered, loaded: Arc::new(OnceLock::new()), queued: AtomicBool::new(false) }
    }

    /// The loaded functions to run with now, following the thread's [`Engine`]: may queue a
    /// background build, or build on this thread.
    pub(in crate::backend::cpu) fn select(&self) -> Option<&Loaded> {
        let lowered = self.lowered.as_ref().ok()?;
        let engine = ENGINE.with(|e| e.get());
        if engine == Engine::Interpreter || (engine == Engine::Auto && disabled()) {
            return None;
        }
        let symbols = || lowered.index.iter().map(|&(v, p)| source::symbol(v, p)).collect::<Vec<_>>();
        let library = || lowered.library();
        let now = || build_and_load(&lowered.source, library(), &symbols());
        let loaded = match engine {
            Engine::NativeNow => self.loaded.get_or_init(now).as_ref().ok(),
            _ => {
                if let Some(done) = self.loaded.get() {
                    done.as_ref().ok()
                } else if !self.queued.load(Ordering::Relaxed) && library().exists() {
                    // Built by an earlier process or kernel: loading is quick.
                    self.loaded.get_or_init(now).as_ref().ok()
                } else {
                    if !self.queued.swap(true, Ordering::Relaxed) {
                        let b = builds();
                        *b.pending.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                        let job = Job {
                            source: lowered.source.clone(),
                            library: library().clone(),
                            symbols: symbols(),
                            loaded: self.loaded.clone(),
                        };
                        if b.queue.lock().unwrap_or_else(|e| e.into_inner()).send(job).is_err() {
                            *b.pending.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
                        }
                    }
                    None
                }
            }
        };
        if loaded.is_some() {
            NATIVE_RUNS.with(|n| n.set(n.get() + 1));
        }
        loaded
    }

    /// How this kernel runs now (on a thread with the default engine).
    pub(in crate::backend::cpu) fn status(&self) -> Status {
        let lowered = match &self.lowered {
            Ok(l) => l,
            Err(why) => return Status::Interpreted(format!("{why} has no exact C form")),
        };
        if disabled() {
            return Status::Interpreted("KILN_NATIVE=0 turns native code off".into());
        }
        let source = toolchain::source_path(lowered.library());
        match self.loaded.get() {
            Some(Ok(_)) => Status::Native { source },
            Some(Err(e)) => Status::Interpreted(format!("building its native code failed: {e}")),
            None => Status::Pending { source },
        }
    }

    /// The function and layout of pass `p` of row-cache variant `variant`.
    pub(in crate::backend::cpu) fn pass<'a>(&'a self, loaded: &'a Loaded, variant: usize, p: usize) -> (PassFn, &'a Layout) {
        let lowered = self.lowered.as_ref().expect("loaded kernels are lowered");
        let j = lowered.index.iter().position(|&x| x == (variant, p)).expect("every pass is lowered");
        (loaded.fns[j], &lowered.layouts[j])
    }

    /// The largest number of writes of any pass (tile buffers a task needs).
    pub(in crate::backend::cpu) fn max_writes(&self) -> usize {
        self.lowered.as_ref().map_or(0, |l| l.layouts.iter().map(|l| l.writes.len()).max().unwrap_or(0))
    }
}
