//! Native code for fused kernels: the CPU's second way to run the fused IR, besides the tile
//! interpreter. Each pass of a kernel is printed as a C function ([`source`]) that computes all
//! of the pass's element instructions for a tile in one loop with the values in registers, built
//! by the system C compiler and loaded ([`toolchain`]). A row kernel also gets a rows function
//! that runs every pass over a run of rows in one call, row steps included, where its inputs
//! are read in place row by row (the interpreter's per-row loop otherwise). A column kernel's
//! passes are column functions ([`columns`]) that walk a block of columns through every reduced
//! position.
//!
//! Building takes a compiler run (0.1 to 0.5 s), far over the first-call budget, so it happens on
//! a background thread: a kernel's first runs are interpreted, and once its library is loaded
//! later runs call it (a library already in the on-disk cache is loaded at once). The results
//! are the same either way, bit for bit. Kernels C can't express exactly (float16/bfloat16 values
//! and a few ops, see [`source`]) and machines without a compiler stay interpreted.
//!
//! Native code replaces the interpreter only once it is measured no slower ([`Trial`]): a
//! kernel's first runs after its library is loaded alternate between the two engines and are
//! timed; a kernel whose native code was slower stays interpreted.
//!
//! The instruction set is the host's (`-march=native`) unless `KILN_NATIVE_ARCH` (or
//! [`with_arch`]) names a lower level, so the code of every level this CPU can run is built,
//! tested and benchmarked on it. `KILN_NATIVE=0` turns native code off; `KILN_LOG=compile` logs
//! each build and each verdict.

mod columns;
mod source;
mod toolchain;

use crate::backend::cpu::fused::Pass;
use crate::fused::Kernel;
pub(in crate::backend::cpu) use columns::COLUMN_PADDING;
pub(in crate::backend::cpu) use source::{Layout, Read, Write};
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use toolchain::Target;

/// The writes (or outputs) a `stream` mask of a pass or rows function can name, one bit each;
/// later ones are never streamed.
pub(in crate::backend::cpu) const STREAM_BITS: usize = 64;

/// A pass function: `(in, out, row, acc, n, stream)`, see [`source::pass_function`].
pub(in crate::backend::cpu) type PassFn =
    unsafe extern "C" fn(*const *const u8, *const *mut u8, *const u64, *mut u64, usize, u64);

/// A column function: `(in, step, out, width, acc, n, count)`, see
/// [`columns::column_function`].
pub(in crate::backend::cpu) type ColumnFn =
    unsafe extern "C" fn(*const *const u8, *const i64, *const *mut u8, usize, *const *mut u8, usize, usize);

/// A rows function: `(base, step, cache, outs, row, r0, r1, n, stream)`, see [`source`]'s
/// `rows_function`.
pub(in crate::backend::cpu) type RowsFn =
    unsafe extern "C" fn(*const *const u8, *const i64, *const *mut u8, *const *mut u8, *mut u64, usize, usize, usize, u64);

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
    static ROWS_RUNS: Cell<u64> = const { Cell::new(0) };
    static COLUMNS_RUNS: Cell<u64> = const { Cell::new(0) };
    static ARCH: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` with the native kernels it creates on this thread built for level `arch` (as
/// `KILN_NATIVE_ARCH=arch` would), for tests and benchmarks that compare levels.
pub fn with_arch<R>(arch: &str, f: impl FnOnce() -> R) -> R {
    let before = ARCH.with(|a| a.replace(Some(arch.to_string())));
    let result = f();
    ARCH.with(|a| *a.borrow_mut() = before);
    result
}

/// The instruction-set levels this CPU can run native code of, lowest first (`x86-64-v2`,
/// `x86-64-v3`, `x86-64-v4`; `armv8-a`): each is a valid [`with_arch`] / `KILN_NATIVE_ARCH`.
pub fn levels() -> Vec<&'static str> {
    toolchain::levels()
}

/// The flags every native build passes to the C compiler besides the target's (for tests that
/// build the generated sources with another compiler, such as a cross compiler).
pub fn compiler_flags() -> &'static [&'static str] {
    toolchain::FLAGS
}

/// What native kernels created on this thread are built for: [`with_arch`]'s level, else
/// `KILN_NATIVE_ARCH`, else the host's own CPU; why not when that level is unknown or too high.
fn target() -> std::result::Result<Target, String> {
    let chosen = ARCH.with(|a| a.borrow().clone()).or_else(|| std::env::var("KILN_NATIVE_ARCH").ok());
    let name = chosen.as_deref().map(str::trim).filter(|n| !n.is_empty()).unwrap_or("native");
    Target::named(name)
}

/// The name of the level native kernels are built for now (e.g. `native (x86-64-v3)`), or why
/// none can be: for benchmarks and reports.
pub fn target_name() -> String {
    target().map_or_else(|why| format!("none: {why}"), |t| t.name)
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

/// How many native runs of row kernels on this thread ran as whole rows in C (a rows function:
/// row steps in C too), not through the per-row loop: for tests that check which way ran.
pub fn rows_runs() -> u64 {
    ROWS_RUNS.with(|n| n.get())
}

/// How many native runs of column kernels on this thread ran their blocks in C (not interpreted
/// for an input's layout): for tests that check which way ran.
pub fn columns_runs() -> u64 {
    COLUMNS_RUNS.with(|n| n.get())
}

/// How a native run of a row or column kernel went over its rows, for [`Status`]: it depends on the
/// layout of the inputs each run gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowPath {
    /// Runs of rows in one call of the kernel's rows function each, row steps in C too.
    Whole,
    /// Row by row from Rust, a pass function call per tile: some input is not read in place one
    /// row apart (transposed, or broadcast along its rows), or an output is donated.
    Layout,
    /// Row by row from Rust: the kernel has no rows function (a row step or finish has no plain
    /// C form).
    NoRowsFunction,
    /// A few long rows, each split across threads.
    Split,
    /// A column kernel's blocks of columns, each pass over a block in one call of C.
    Columns,
    /// A column kernel's blocks interpreted: an input is not read in place along the columns.
    ColumnsLayout,
}

impl RowPath {
    const ALL: [RowPath; 6] =
        [RowPath::Whole, RowPath::Layout, RowPath::NoRowsFunction, RowPath::Split, RowPath::Columns, RowPath::ColumnsLayout];
}

impl std::fmt::Display for RowPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RowPath::Whole => "whole runs of rows in C",
            RowPath::Layout => "row by row from Rust (an input not read in place one row apart, or a donated output)",
            RowPath::NoRowsFunction => "row by row from Rust (a row step or finish without a plain C form)",
            RowPath::Split => "a few long rows, each split across threads",
            RowPath::Columns => "blocks of columns in C",
            RowPath::ColumnsLayout => {
                "blocks of columns interpreted (an input not read in place with unit steps along the columns and one step per position)"
            }
        })
    }
}

/// Whether `KILN_NATIVE` turns native code off.
fn disabled() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var("KILN_NATIVE").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "false")))
}

/// A kernel's loaded pass functions (or a column kernel's column functions), indexed like its
/// layouts, and its rows functions by row-cache variant.
pub(in crate::backend::cpu) struct Loaded {
    fns: Vec<PassFn>,
    /// A column kernel's functions, in place of `fns`.
    column_fns: Vec<ColumnFn>,
    rows: Vec<(usize, RowsFn)>,
}

impl Loaded {
    /// The rows function of row-cache variant `variant`, where the kernel has one.
    pub(in crate::backend::cpu) fn rows(&self, variant: usize) -> Option<RowsFn> {
        self.rows.iter().find(|&&(v, _)| v == variant).map(|&(_, f)| f)
    }
}

/// How the CPU runs a fused kernel, for introspection.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// As native code built for `target` from the C source at `source`; `speedup` is its
    /// measured speed over the interpreter's, once measured; `rows`, for a row or column kernel
    /// that ran natively, how its last native run went over the rows or columns.
    Native { source: PathBuf, target: String, speedup: Option<f64>, rows: Option<RowPath> },
    /// Interpreted until its native code is built in the background (or loaded from the on-disk
    /// cache on its next run); `source` is where its C source is (or will be) kept.
    Pending { source: PathBuf },
    /// Interpreted, for the reason given.
    Interpreted(String),
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Native { source, target, speedup, rows } => {
                write!(f, "native code (C source: {}) built for {target}, ", source.display())?;
                match speedup {
                    Some(x) => write!(f, "measured {x:.2}x the interpreter's speed")?,
                    None => write!(f, "being timed against the interpreter")?,
                }
                match rows {
                    Some(path) => write!(f, "; its last native run: {path}"),
                    None => Ok(()),
                }
            }
            Status::Pending { source } => {
                write!(f, "interpreted until its native code is built in the background (C source: {})", source.display())
            }
            Status::Interpreted(why) => write!(f, "interpreted: {why}"),
        }
    }
}

/// The native form of one kernel: its C source and layouts, and the loaded library once built.
pub(in crate::backend::cpu) struct Native {
    /// Err (why) when some instruction has no exact C form or no target can be built for.
    lowered: std::result::Result<Lowered, String>,
    /// Set once: the loaded functions, or why building or loading failed.
    loaded: Arc<OnceLock<std::result::Result<Loaded, String>>>,
    /// Whether a background build was queued.
    queued: AtomicBool,
    /// Whether the loaded code is measured no slower than the interpreter.
    trial: Trial,
    /// The [`RowPath`] of the last native run (its index in `RowPath::ALL`, plus one), or 0.
    last_rows: AtomicU8,
}

struct Lowered {
    source: Arc<str>,
    target: Target,
    /// Where its library is (or will be) in the on-disk cache: hashed once, when first needed.
    library: OnceLock<Arc<Path>>,
    /// `(variant, pass)` of each layout and function.
    index: Vec<(usize, usize)>,
    layouts: Vec<Layout>,
    /// The row-cache variants that have a rows function.
    rows: Vec<usize>,
    /// Whether the functions are column functions ([`ColumnFn`]) rather than pass functions.
    columns: bool,
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
        self.library.get_or_init(|| toolchain::library_path(&self.source, &self.target).into())
    }

    /// The symbols to load: the pass functions in layout order, then the rows functions.
    fn symbols(&self) -> Vec<String> {
        let passes = self.index.iter().map(|&(v, p)| source::symbol(v, p));
        passes.chain(self.rows.iter().map(|&v| source::rows_symbol(v))).collect()
    }
}

struct Job {
    source: Arc<str>,
    target: Target,
    library: Arc<Path>,
    symbols: Vec<String>,
    /// The variants of the rows functions, the last symbols.
    rows: Vec<usize>,
    /// Whether the first symbols are column functions.
    columns: bool,
    loaded: Arc<OnceLock<std::result::Result<Loaded, String>>>,
}

/// Builds `source` into `library` (unless it is there) and loads its `symbols`: pass functions
/// (column functions where `columns`), then the rows functions of variants `rows`; the error
/// (also logged) when that fails.
fn build_and_load(
    source: &str,
    target: &Target,
    library: &Path,
    symbols: &[String],
    rows: &[usize],
    columns: bool,
) -> std::result::Result<Loaded, String> {
    let start = Instant::now();
    let result = toolchain::build(source, target, library).and_then(|()| toolchain::load(library, symbols));
    let log = crate::transforms::compile::log_enabled();
    match result {
        Ok(ptrs) => {
            if log {
                eprintln!(
                    "[kiln compile] native kernel ready ({} functions for {}, {:.0} ms)",
                    symbols.len(),
                    target.name,
                    start.elapsed().as_secs_f64() * 1e3
                );
            }
            let passes = ptrs.len() - rows.len();
            let (pass_ptrs, column_ptrs) = if columns { (&ptrs[..0], &ptrs[..passes]) } else { (&ptrs[..passes], &ptrs[..0]) };
            // Safety: the first symbols are pass functions printed with the PassFn signature (or
            // column functions printed with the ColumnFn one), the rest rows functions printed
            // with the RowsFn one.
            let fns = pass_ptrs.iter().map(|&p| unsafe { std::mem::transmute::<*const std::ffi::c_void, PassFn>(p) });
            let column_fns =
                column_ptrs.iter().map(|&p| unsafe { std::mem::transmute::<*const std::ffi::c_void, ColumnFn>(p) });
            let row_fns = ptrs[passes..].iter().map(|&p| unsafe { std::mem::transmute::<*const std::ffi::c_void, RowsFn>(p) });
            Ok(Loaded { fns: fns.collect(), column_fns: column_fns.collect(), rows: rows.iter().copied().zip(row_fns).collect() })
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
                    job.loaded.get_or_init(|| {
                        build_and_load(&job.source, &job.target, &job.library, &job.symbols, &job.rows, job.columns)
                    });
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

/// Runs timed per engine before a kernel's verdict: the best of these is compared. A kernel's
/// first `2 * TRIAL_RUNS` runs after its build are the trial; benchmarks timing the steady state
/// run that many first.
pub const TRIAL_RUNS: u32 = 3;

/// The timing of one engine's runs of a kernel: the count and the fastest time per element.
#[derive(Clone, Copy, Default)]
struct Timings {
    runs: u32,
    best: f64,
}

impl Timings {
    fn add(&mut self, ns_per_element: f64) {
        self.best = if self.runs == 0 { ns_per_element } else { self.best.min(ns_per_element) };
        self.runs += 1;
    }
}

/// The measurement that decides whether a kernel's native code replaces the interpreter: once
/// its library is loaded, its runs alternate between the engines and are timed, [`TRIAL_RUNS`]
/// of each (runs during the build are not: the compiler shares the CPU then); native code is
/// kept only when its best time per element is no worse than the interpreter's.
#[derive(Default)]
struct Trial {
    /// `UNDECIDED`, `KEPT` or `DROPPED`.
    verdict: AtomicU8,
    /// `(interpreted, native)` timings until the verdict.
    timings: Mutex<(Timings, Timings)>,
    /// The verdict's numbers: native speed over the interpreter's, and the two times.
    result: OnceLock<(f64, f64, f64)>,
}

const UNDECIDED: u8 = 0;
const KEPT: u8 = 1;
const DROPPED: u8 = 2;

/// Which engine a kernel run uses, and whether its time goes into the [`Trial`].
pub(in crate::backend::cpu) struct Choice<'a> {
    /// The native functions to run with; None to interpret.
    pub loaded: Option<&'a Loaded>,
    timed: bool,
}

impl Native {
    /// The native form of kernel `k`, whose passes are `(variant, pass, schedule, folds)`, and
    /// whose row steps before each pass (and after the last) are `row_steps`.
    pub(in crate::backend::cpu) fn new(k: &Kernel, passes: &[(usize, usize, &Pass, &[usize])], row_steps: &[Vec<usize>]) -> Native {
        let fma = crate::backend::cpu::simd::has_avx2_fma();
        let lowered = target().and_then(|target| {
            let source =
                source::kernel_source(k, passes, row_steps, fma).map_err(|inst| format!("{inst} has no exact C form"))?;
            let index = passes.iter().map(|&(v, p, ..)| (v, p)).collect();
            let (text, layouts, rows) = (source.text, source.layouts, source.rows);
            let columns = k.inner > 0;
            Ok(Lowered { source: text.into(), target, library: OnceLock::new(), index, layouts, rows, columns })
        });
        let (loaded, queued) = (Arc::new(OnceLock::new()), AtomicBool::new(false));
        Native { lowered, loaded, queued, trial: Trial::default(), last_rows: AtomicU8::new(0) }
    }

    /// The loaded functions, once built (or loaded from the on-disk cache); queues a background
    /// build, or builds on this thread when `now`.
    fn ready(&self, lowered: &Lowered, now: bool) -> Option<&Loaded> {
        let build_here = || {
            build_and_load(&lowered.source, &lowered.target, lowered.library(), &lowered.symbols(), &lowered.rows, lowered.columns)
        };
        if now {
            return self.loaded.get_or_init(build_here).as_ref().ok();
        }
        if let Some(done) = self.loaded.get() {
            return done.as_ref().ok();
        }
        if !self.queued.load(Ordering::Relaxed) && lowered.library().exists() {
            // Built by an earlier process or kernel: loading is quick.
            return self.loaded.get_or_init(build_here).as_ref().ok();
        }
        if !self.queued.swap(true, Ordering::Relaxed) {
            let b = builds();
            *b.pending.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            let job = Job {
                source: lowered.source.clone(),
                target: lowered.target.clone(),
                library: lowered.library().clone(),
                symbols: lowered.symbols(),
                rows: lowered.rows.clone(),
                columns: lowered.columns,
                loaded: self.loaded.clone(),
            };
            if b.queue.lock().unwrap_or_else(|e| e.into_inner()).send(job).is_err() {
                *b.pending.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            }
        }
        None
    }

    /// The engine for the next run, following the thread's [`Engine`] and the [`Trial`]: may
    /// queue a background build, or build on this thread.
    pub(in crate::backend::cpu) fn select(&self) -> Choice<'_> {
        let interpret = Choice { loaded: None, timed: false };
        let Ok(lowered) = self.lowered.as_ref() else { return interpret };
        let engine = ENGINE.with(|e| e.get());
        let choice = match engine {
            Engine::Interpreter => return interpret,
            Engine::Auto if disabled() => return interpret,
            Engine::NativeNow => Choice { loaded: self.ready(lowered, true), timed: false },
            Engine::Auto => match self.trial.verdict.load(Ordering::Acquire) {
                KEPT => Choice { loaded: self.ready(lowered, false), timed: false },
                DROPPED => interpret,
                _ => match self.ready(lowered, false) {
                    // Runs while the build is under way share the CPU with the compiler: untimed.
                    None => interpret,
                    // Alternating, interpreted first, so both engines see alike machines.
                    Some(loaded) => {
                        let (interpreted, native) = *self.trial.timings.lock().unwrap_or_else(|e| e.into_inner());
                        Choice { loaded: (interpreted.runs > native.runs).then_some(loaded), timed: true }
                    }
                },
            },
        };
        if choice.loaded.is_some() {
            NATIVE_RUNS.with(|n| n.set(n.get() + 1));
        }
        choice
    }

    /// Records a run's time on `elements` elements for the [`Trial`] when `choice` was timed;
    /// decides once both engines have enough runs.
    pub(in crate::backend::cpu) fn record(&self, choice: &Choice<'_>, elements: usize, time: Duration) {
        if !choice.timed || elements == 0 {
            return;
        }
        let per_element = time.as_secs_f64() * 1e9 / elements as f64;
        let mut timings = self.trial.timings.lock().unwrap_or_else(|e| e.into_inner());
        if choice.loaded.is_some() { &mut timings.1 } else { &mut timings.0 }.add(per_element);
        let (interpreted, native) = *timings;
        if native.runs < TRIAL_RUNS || interpreted.runs < TRIAL_RUNS || self.trial.verdict.load(Ordering::Acquire) != UNDECIDED {
            return;
        }
        let speedup = interpreted.best / native.best;
        let _ = self.trial.result.set((speedup, native.best, interpreted.best));
        let kept = native.best <= interpreted.best;
        self.trial.verdict.store(if kept { KEPT } else { DROPPED }, Ordering::Release);
        if crate::transforms::compile::log_enabled() {
            eprintln!(
                "[kiln compile] native kernel {}: {:.3} ns per element against {:.3} interpreted ({speedup:.2}x)",
                if kept { "kept" } else { "dropped, staying interpreted" },
                native.best,
                interpreted.best
            );
        }
    }

    /// How this kernel runs now (on a thread with the default engine).
    pub(in crate::backend::cpu) fn status(&self) -> Status {
        let lowered = match &self.lowered {
            Ok(l) => l,
            Err(why) => return Status::Interpreted(why.clone()),
        };
        if disabled() {
            return Status::Interpreted("KILN_NATIVE=0 turns native code off".into());
        }
        let source = toolchain::source_path(lowered.library());
        let target = lowered.target.name.clone();
        let measured = self.trial.result.get().copied();
        match (self.loaded.get(), self.trial.verdict.load(Ordering::Acquire), measured) {
            (Some(Err(e)), ..) => Status::Interpreted(format!("building its native code failed: {e}")),
            (Some(Ok(_)), DROPPED, Some((_, native, interpreted))) => Status::Interpreted(format!(
                "its native code (built for {target}, C source: {}) was measured slower: {native:.3} ns per element against {interpreted:.3} interpreted",
                source.display()
            )),
            (Some(Ok(_)), _, measured) => {
                let rows = RowPath::ALL.get((self.last_rows.load(Ordering::Relaxed) as usize).wrapping_sub(1)).copied();
                Status::Native { source, target, speedup: measured.map(|m| m.0), rows }
            }
            (None, ..) => Status::Pending { source },
        }
    }

    /// Notes how a native run went over the rows (see [`RowPath`]); whole rows in C also count
    /// in [`rows_runs`], column blocks in C in [`columns_runs`].
    pub(in crate::backend::cpu) fn note_rows(&self, path: RowPath) {
        match path {
            RowPath::Whole => ROWS_RUNS.with(|n| n.set(n.get() + 1)),
            RowPath::Columns => COLUMNS_RUNS.with(|n| n.set(n.get() + 1)),
            _ => {}
        }
        let index = RowPath::ALL.iter().position(|&p| p == path).expect("every path is listed");
        self.last_rows.store(index as u8 + 1, Ordering::Relaxed);
    }

    /// The function and layout of pass `p` of row-cache variant `variant`.
    pub(in crate::backend::cpu) fn pass<'a>(&'a self, loaded: &'a Loaded, variant: usize, p: usize) -> (PassFn, &'a Layout) {
        let lowered = self.lowered.as_ref().expect("loaded kernels are lowered");
        let j = lowered.index.iter().position(|&x| x == (variant, p)).expect("every pass is lowered");
        (loaded.fns[j], &lowered.layouts[j])
    }

    /// The function and layout of pass `p` of a column kernel.
    pub(in crate::backend::cpu) fn column<'a>(&'a self, loaded: &'a Loaded, p: usize) -> (ColumnFn, &'a Layout) {
        let lowered = self.lowered.as_ref().expect("loaded kernels are lowered");
        let j = lowered.index.iter().position(|&x| x == (0, p)).expect("every pass is lowered");
        (loaded.column_fns[j], &lowered.layouts[j])
    }

    /// The largest number of writes of any pass (tile buffers a task needs).
    pub(in crate::backend::cpu) fn max_writes(&self) -> usize {
        self.lowered.as_ref().map_or(0, |l| l.layouts.iter().map(|l| l.writes.len()).max().unwrap_or(0))
    }
}
