//! A flat sampling profiler for machines without `perf` (the lent GPU machine has none): with
//! `KILN_BENCH_PROFILE=FILE`, a high-resolution timer (wall clock: CPU-time timers tick only at
//! the kernel's jiffies) sends SIGPROF every 50 µs, and the handler records the instruction
//! address of the thread it interrupted (mostly the main thread, which runs the timed loops). At exit FILE gets the process's
//! memory map and the addresses; `scripts/profile-symbols` names the functions with the
//! unstripped binary. Self time only (no call stacks), which is what finding a per-call host
//! cost of a few microseconds needs.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most samples kept (later ones are dropped).
const CAPACITY: usize = 1 << 21;
/// Sampling interval in microseconds.
const INTERVAL_US: i64 = 50;

static SAMPLES: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The timer `start` made.
static TIMER: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_sample(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // Safety: a SA_SIGINFO handler's third argument is the interrupted thread's ucontext_t.
    let ip = unsafe { (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize] } as usize;
    let i = COUNT.fetch_add(1, Ordering::Relaxed);
    if i < CAPACITY {
        SAMPLES[i].store(ip, Ordering::Relaxed);
    }
}

/// Starts sampling when `KILN_BENCH_PROFILE` names a file; returns that file.
pub fn start() -> Option<String> {
    let path = std::env::var("KILN_BENCH_PROFILE").ok()?;
    // Safety: installs a handler that only touches atomics, then arms a process timer.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_sample;
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut());
        let mut event: libc::sigevent = std::mem::zeroed();
        event.sigev_notify = libc::SIGEV_SIGNAL;
        event.sigev_signo = libc::SIGPROF;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        if libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) != 0 {
            eprintln!("no profiling timer: {}", std::io::Error::last_os_error());
            return None;
        }
        let tick = libc::timespec { tv_sec: 0, tv_nsec: INTERVAL_US * 1000 };
        libc::timer_settime(timer, 0, &libc::itimerspec { it_interval: tick, it_value: tick }, std::ptr::null_mut());
        TIMER.store(timer as usize, Ordering::Relaxed);
    }
    Some(path)
}

/// Stops sampling and writes the memory map and the samples to `path`.
pub fn finish(path: &str) {
    // Safety: deletes the timer made by `start`.
    unsafe { libc::timer_delete(TIMER.load(Ordering::Relaxed) as libc::timer_t) };
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let n = COUNT.load(Ordering::Relaxed).min(CAPACITY);
    let write = || -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "maps")?;
        f.write_all(maps.as_bytes())?;
        writeln!(f, "samples {n}")?;
        for s in &SAMPLES[..n] {
            writeln!(f, "{:x}", s.load(Ordering::Relaxed))?;
        }
        Ok(())
    };
    if let Err(e) = write() {
        eprintln!("could not write the profile to {path}: {e}");
    }
}
