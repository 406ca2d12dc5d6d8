//! Finding the CUDA libraries at run time, so kiln builds and runs with no CUDA toolkit.
//!
//! The driver (`libcuda`) comes with the NVIDIA driver and is found by the system's loader.
//! NVRTC and cuBLASLt come with a toolkit or with NVIDIA's Python wheels, often in folders the
//! loader does not search: each is looked for in `$KILN_CUDA_PATH`, `$CUDA_HOME`, `$CUDA_PATH`,
//! `/usr/local/cuda` and the wheels' folders (`$KILN_CUDA_WHEEL_PATH`, which the Python package
//! sets), then by name. A library found is loaded by its full path and kept loaded; cudarc, which
//! makes the calls, loads libraries by name, and the system loader hands it the one already loaded
//! under that name. A library not found is an error that lists every path tried, never a panic.

use crate::error::{Error, ErrorKind, Result};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A CUDA library kiln loads: its name for messages and the file names it may have.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wanted {
    /// How messages name it.
    pub name: &'static str,
    /// File names, newest first.
    pub files: &'static [&'static str],
    /// Whether it lives with the driver (searched by name only) rather than with a toolkit.
    pub driver: bool,
    /// Its slot among the libraries loaded once per process.
    slot: usize,
}

/// The CUDA driver.
pub(super) const DRIVER: Wanted = Wanted { name: "the CUDA driver (libcuda)", files: &["libcuda.so.1", "libcuda.so"], driver: true, slot: 0 };
/// The run-time compiler of CUDA C.
pub(super) const NVRTC: Wanted = Wanted {
    name: "NVRTC (libnvrtc)",
    files: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    driver: false,
    slot: 1,
};
/// NVIDIA's matrix-product library, for matmul.
pub(super) const CUBLASLT: Wanted = Wanted {
    name: "cuBLASLt (libcublasLt)",
    files: &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
    driver: false,
    slot: 2,
};
/// The folders a toolkit library is looked for in, in order.
pub(super) fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut add_root = |root: PathBuf| {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib", ""] {
            dirs.push(if sub.is_empty() { root.clone() } else { root.join(sub) });
        }
    };
    for var in ["KILN_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            add_root(PathBuf::from(v));
        }
    }
    add_root(PathBuf::from("/usr/local/cuda"));
    if let Some(v) = std::env::var_os("KILN_CUDA_WHEEL_PATH") {
        dirs.extend(std::env::split_paths(&v));
    }
    dirs
}

/// The folders holding the CUDA toolkit's headers (`cuda_fp16.h`, `cooperative_groups.h`), which
/// user kernels include: the `include` folder beside each library folder searched (a toolkit's,
/// or a wheel's `nvidia/cu13/include`), with its `cccl` folder (`cuda/std`, moved there in CUDA
/// 13) when present. Empty when no toolkit headers are found. Looked for once per process.
pub fn header_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(find_header_dirs)
}

fn find_header_dirs() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for dir in search_dirs() {
        for candidate in [dir.join("include"), dir.join("..").join("include")] {
            let Ok(candidate) = candidate.canonicalize() else { continue };
            if candidate.join("cuda_fp16.h").exists() && !found.contains(&candidate) {
                found.push(candidate);
            }
        }
    }
    let cccl: Vec<PathBuf> = found.iter().map(|d| d.join("cccl")).filter(|d| d.is_dir()).collect();
    found.extend(cccl);
    found
}

/// Loads `wanted`, or explains where it was looked for.
fn load(wanted: Wanted) -> std::result::Result<libloading::Library, String> {
    let mut tried = Vec::new();
    if !wanted.driver {
        for dir in search_dirs() {
            for file in wanted.files {
                let path = dir.join(file);
                if path.exists() {
                    // Safety: loading a CUDA library runs only its initialisers.
                    match unsafe { libloading::Library::new(&path) } {
                        Ok(lib) => return Ok(lib),
                        Err(e) => tried.push(format!("{} ({e})", path.display())),
                    }
                } else {
                    tried.push(path.display().to_string());
                }
            }
        }
    }
    for file in wanted.files {
        // Safety: as above.
        match unsafe { libloading::Library::new(*file) } {
            Ok(lib) => return Ok(lib),
            Err(e) => tried.push(format!("{file} by the system loader ({e})")),
        }
    }
    let fix = if wanted.driver {
        "Install the NVIDIA driver (CUDA 12 or newer) to use the GPU; the CPU needs nothing"
    } else {
        "Set KILN_CUDA_PATH to the folder of a CUDA 12 or 13 toolkit (or install NVIDIA's wheels, \
         e.g. pip install nvidia-cuda-nvrtc nvidia-cublas)"
    };
    Err(format!("{} was not found; tried {}. {fix}", wanted.name, tried.join(", ")))
}

/// Makes sure `wanted` is loaded (once per process), or returns why it cannot be.
pub(super) fn require(op: &str, wanted: Wanted) -> Result<()> {
    type Loaded = OnceLock<std::result::Result<libloading::Library, String>>;
    static LOADED: [Loaded; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = &LOADED[wanted.slot];
    match slot.get_or_init(|| load(wanted)) {
        Ok(_) => Ok(()),
        Err(why) => Err(Error::new(op, ErrorKind::Device, why.clone())),
    }
}
