//! The last GPU launch of each fused kernel, for compile's report: which variant of the kernel
//! ran, with what grid and block, so the report can show its CUDA source and what the cubin
//! says it uses (registers per thread, shared memory). Recording costs one lookup per launch; the
//! source is printed only when a report asks for it.

use super::nvrtc::Function;
use super::row_source::RowVariant;
use super::source::Variant;
use crate::fused::Kernel;
use cudarc::driver::{result as cu, sys};
use crate::fast_hash::FastMap;
use std::sync::Mutex;

/// Which printer made the kernel that ran.
#[derive(Clone, PartialEq)]
pub(super) enum Printed {
    /// An elementwise kernel of this variant.
    Elementwise(Variant),
    /// A row kernel of this variant.
    Rows(RowVariant),
}

struct Record {
    /// What identifies the kernel's code, to tell a reused address apart.
    insts: Vec<crate::fused::Inst>,
    inputs: Vec<crate::dtype::Dtype>,
    printed: Printed,
    function: Function,
    grid: usize,
    block: u32,
}

impl Record {
    /// Whether this record is of `k`'s code (an address may be reused by another kernel).
    fn is_of(&self, k: &Kernel) -> bool {
        self.insts == k.insts && self.inputs == k.inputs
    }
}

/// Records by the address of the kernel that ran (a compiled plan's, stable while it lives).
static LAST: Mutex<Option<FastMap<usize, Record>>> = Mutex::new(None);

/// The most records kept: a bound for processes that make many plans.
const KEPT: usize = 4096;

/// Notes that `k` ran as `printed` through `function` with `grid` blocks of `block` threads.
pub(super) fn record(k: &Kernel, printed: &Printed, function: Function, grid: usize, block: u32) {
    let mut last = LAST.lock().unwrap();
    let map = last.get_or_insert_with(FastMap::default);
    let key = k as *const Kernel as usize;
    if let Some(r) = map.get_mut(&key) {
        if r.is_of(k) && r.printed == *printed {
            (r.grid, r.block, r.function) = (grid, block, function);
            return;
        }
    }
    if map.len() >= KEPT {
        map.clear();
    }
    map.insert(key, Record { insts: k.insts.clone(), inputs: k.inputs.clone(), printed: printed.clone(), function, grid, block });
}

/// How a fused kernel last ran on a GPU.
#[derive(Clone, Debug)]
pub struct GpuLaunch {
    /// The CUDA C that NVRTC built.
    pub source: String,
    /// Blocks launched.
    pub grid: usize,
    /// Threads per block.
    pub block: u32,
    /// Registers per thread, from the cubin.
    pub registers: i32,
    /// Static shared memory per block in bytes, from the cubin.
    pub shared_bytes: i32,
}

impl std::fmt::Display for GpuLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GPU launch: {} blocks x {} threads, {} registers per thread, {} bytes of shared memory per block",
            self.grid, self.block, self.registers, self.shared_bytes
        )
    }
}

/// How `k` (this very kernel, e.g. a compiled plan's) last ran on a GPU, if it did.
pub fn last_launch(k: &Kernel) -> Option<GpuLaunch> {
    let (printed, function, grid, block) = {
        let last = LAST.lock().unwrap();
        let r = last.as_ref()?.get(&(k as *const Kernel as usize))?;
        if !r.is_of(k) {
            return None;
        }
        (r.printed.clone(), r.function, r.grid, r.block)
    };
    let source = match &printed {
        Printed::Elementwise(v) => super::source::elementwise(k, v).ok()?,
        Printed::Rows(v) => super::row_source::rows(k, v).ok()?,
    };
    let attribute = |a: sys::CUfunction_attribute| {
        // Safety: a loaded function; its module stays loaded for the process.
        unsafe { cu::function::get_function_attribute(function.0, a) }.unwrap_or(-1)
    };
    use sys::CUfunction_attribute as A;
    Some(GpuLaunch {
        source,
        grid,
        block,
        registers: attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS),
        shared_bytes: attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
    })
}
