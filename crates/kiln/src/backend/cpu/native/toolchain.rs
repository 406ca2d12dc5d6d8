//! Turns C source into loaded functions: the system C compiler builds a shared library into an
//! on-disk cache keyed by a hash of the source, the flags and the CPU, and `dlopen` loads it.
//! A second process (or a second kernel with the same code) finds the library already built.
//!
//! The compiler is `$KILN_CC`, else `$CC`, else `cc`; the cache directory `$KILN_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`, else the temporary directory. The C source is
//! kept beside each library, so what runs can be read.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Flags that keep C's arithmetic Rust's: no contraction into fused multiply-adds except the
/// explicit ones, wrapping signed integers, no assumptions from type-based aliasing. (Not
/// `-fno-trapping-math`: it lets gcc turn `(float)(int)x` into `truncf(x)`, which keeps the sign
/// of a negative zero.) The element loops are explicit vector code, so no flag is needed to make
/// them vectorise; the instruction set comes from the [`Target`].
pub(crate) const FLAGS: &[&str] = &[
    "-O3",
    "-fPIC",
    "-shared",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fwrapv",
    "-fno-strict-aliasing",
    "-w",
];

/// The instruction-set levels native code can be built for on this architecture, lowest first,
/// each with the CPU features it needs (as `is_x86_feature_detected!` names them) and its flags.
#[cfg(target_arch = "x86_64")]
const LEVELS: &[(&str, &[&str], &[&str])] = &[
    ("x86-64-v2", &["sse4.2", "ssse3", "popcnt"], &["-march=x86-64-v2"]),
    ("x86-64-v3", &["avx2", "fma", "bmi1", "bmi2", "f16c", "lzcnt", "movbe"], &["-march=x86-64-v3"]),
    // gcc's tuning prefers 256-bit vectors for most AVX-512 CPUs; the kernels' explicit 512-bit
    // vectors are what this level is for.
    ("x86-64-v4", &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"], &["-march=x86-64-v4", "-mprefer-vector-width=512"]),
];
#[cfg(target_arch = "aarch64")]
const LEVELS: &[(&str, &[&str], &[&str])] = &[("armv8-a", &[], &["-march=armv8-a"])];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const LEVELS: &[(&str, &[&str], &[&str])] = &[];

/// Whether this CPU has every feature in `features`.
fn has_features(features: &[&str]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        features.iter().all(|f| match *f {
            "sse4.2" => is_x86_feature_detected!("sse4.2"),
            "ssse3" => is_x86_feature_detected!("ssse3"),
            "popcnt" => is_x86_feature_detected!("popcnt"),
            "avx2" => is_x86_feature_detected!("avx2"),
            "fma" => is_x86_feature_detected!("fma"),
            "bmi1" => is_x86_feature_detected!("bmi1"),
            "bmi2" => is_x86_feature_detected!("bmi2"),
            "f16c" => is_x86_feature_detected!("f16c"),
            "lzcnt" => is_x86_feature_detected!("lzcnt"),
            "movbe" => is_x86_feature_detected!("movbe"),
            "avx512f" => is_x86_feature_detected!("avx512f"),
            "avx512bw" => is_x86_feature_detected!("avx512bw"),
            "avx512cd" => is_x86_feature_detected!("avx512cd"),
            "avx512dq" => is_x86_feature_detected!("avx512dq"),
            "avx512vl" => is_x86_feature_detected!("avx512vl"),
            _ => false,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        features.is_empty()
    }
}

/// The named levels this CPU can run, lowest first.
pub(crate) fn levels() -> Vec<&'static str> {
    LEVELS.iter().filter(|(_, features, _)| has_features(features)).map(|(name, ..)| *name).collect()
}

/// What native code is built for: a level's name and its compiler flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `native (x86-64-v3)` for the host's own CPU, else the level's name.
    pub name: String,
    flags: Vec<&'static str>,
}

impl Target {
    /// The target called `name` (`native`, or one of [`LEVELS`]); an error saying why when it is
    /// unknown or this CPU can't run its code.
    pub(crate) fn named(name: &str) -> Result<Target, String> {
        let runnable = levels();
        if name == "native" {
            let best = runnable.last().copied().unwrap_or("baseline");
            // The host's own tuning and every extension it has; 512-bit vectors where it has them.
            let mut flags = vec![if cfg!(target_arch = "aarch64") { "-mcpu=native" } else { "-march=native" }];
            if best == "x86-64-v4" {
                flags.push("-mprefer-vector-width=512");
            }
            return Ok(Target { name: format!("native ({best})"), flags });
        }
        let known: Vec<&str> = LEVELS.iter().map(|(n, ..)| *n).collect();
        let Some((_, features, flags)) = LEVELS.iter().find(|(n, ..)| *n == name) else {
            return Err(format!("KILN_NATIVE_ARCH={name} is not a level native code can be built for here; use native or one of: {}", known.join(", ")));
        };
        if !runnable.contains(&name) {
            return Err(format!("KILN_NATIVE_ARCH={name} needs CPU features this machine lacks ({}); it can run: native, {}", features.join(", "), runnable.join(", ")));
        }
        Ok(Target { name: name.to_string(), flags: flags.to_vec() })
    }
}

/// The C compiler to run.
fn compiler() -> String {
    std::env::var("KILN_CC").or_else(|_| std::env::var("CC")).unwrap_or_else(|_| "cc".into())
}

/// Where built libraries are kept.
fn cache_dir() -> PathBuf {
    crate::backend::cache_root().join("native")
}

/// The CPU's model and feature flags: `-march=native` code is only valid on the same CPU.
fn cpu_signature() -> &'static str {
    static SIG: OnceLock<String> = OnceLock::new();
    SIG.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let line = |key: &str| info.lines().find(|l| l.starts_with(key)).unwrap_or_default().to_string();
        format!("{}\n{}\n{}", line("model name"), line("flags"), line("Features"))
    })
}

/// Where the library built from `source` for `target` is kept: named by a hash of everything it
/// depends on.
pub(super) fn library_path(source: &str, target: &Target) -> PathBuf {
    let key = crate::backend::stable_hash(&[source, &compiler(), &FLAGS.join(" "), &target.flags.join(" "), cpu_signature()]);
    cache_dir().join(format!("{key:016x}.so"))
}

/// Where the C source of library `lib` is kept, beside it (so what runs can be read).
pub(super) fn source_path(lib: &std::path::Path) -> PathBuf {
    lib.with_extension("c")
}

/// Builds `source` for `target` into `lib` (its [`library_path`]) unless the cache already has it.
pub(super) fn build(source: &str, target: &Target, lib: &std::path::Path) -> Result<(), String> {
    if lib.exists() {
        return Ok(());
    }
    let cc = compiler();
    let dir = lib.parent().expect("a cache file has a directory").to_path_buf();
    let key = lib.file_stem().expect("a cache file has a name").to_string_lossy().into_owned();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the cache directory {}: {e}", dir.display()))?;
    let c_file = source_path(lib);
    std::fs::write(&c_file, source).map_err(|e| format!("cannot write {}: {e}", c_file.display()))?;
    // Built under a name of its own, then renamed: processes building the same kernel at once
    // never load a half-written library.
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{key}.{}.{n}.tmp", std::process::id()));
    let output = Command::new(&cc)
        .args(FLAGS)
        .args(&target.flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&c_file)
        .arg("-lm")
        .output()
        .map_err(|e| format!("cannot run the C compiler `{cc}` (set KILN_CC, or KILN_NATIVE=0 to stay interpreted): {e}"))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "`{cc}` failed on {}:\n{}",
            c_file.display(),
            String::from_utf8_lossy(&output.stderr).lines().take(20).collect::<Vec<_>>().join("\n")
        ));
    }
    std::fs::rename(&tmp, lib).map_err(|e| format!("cannot move the built library to {}: {e}", lib.display()))
}

#[cfg(unix)]
#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// The last `dlerror` text.
#[cfg(unix)]
fn last_error() -> String {
    // Safety: dlerror returns null or a NUL-terminated string valid until the next dl call.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// Loads `lib` and looks up `symbols`. The library stays loaded for the life of the process
/// (kernels are cached; their code must outlive every plan that may still call it).
#[cfg(unix)]
pub(super) fn load(lib: &std::path::Path, symbols: &[String]) -> Result<Vec<*const c_void>, String> {
    const RTLD_NOW: c_int = 2;
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(lib.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // Safety: a valid path; the library is ours and has no constructors.
    let handle = unsafe { dlopen(path.as_ptr(), RTLD_NOW) };
    if handle.is_null() {
        return Err(format!("cannot load {}: {}", lib.display(), last_error()));
    }
    symbols
        .iter()
        .map(|s| {
            let name = CString::new(s.as_str()).map_err(|e| e.to_string())?;
            // Safety: a loaded handle and a NUL-terminated name.
            let f = unsafe { dlsym(handle, name.as_ptr()) };
            if f.is_null() {
                Err(format!("{} has no symbol {s}: {}", lib.display(), last_error()))
            } else {
                Ok(f as *const c_void)
            }
        })
        .collect()
}

/// Native code needs `dlopen`.
#[cfg(not(unix))]
pub(super) fn load(_lib: &std::path::Path, _symbols: &[String]) -> Result<Vec<*const c_void>, String> {
    Err("native kernels need dlopen (unix)".into())
}
