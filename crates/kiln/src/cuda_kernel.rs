//! User CUDA kernels from source strings, as mlx's `mx.fast.cuda_kernel`: the user writes the
//! body of a `__global__` function; kiln prints its signature (inputs as `const T*`, outputs as
//! `T*`, shapes and strides where the body names them), its template constants, and the CUDA
//! toolkit's headers around it, builds it with NVRTC and launches it on the GPU.
//!
//! A call is an [`Op::Kernel`](crate::primitive::Op) like a user CPU kernel, so inside a compiled
//! function it is an opaque boundary: the ops before and after it fuse into their own kernels.
//! Built kernels are cached by their full source (which holds the template values and dtypes),
//! in memory per GPU and on disk, so two kernels sharing a name but not a source never collide.
//!
//! ```no_run
//! use kiln::cuda_kernel::{CudaKernel, CudaLaunch, TemplateArg};
//! use kiln::{Array, Dtype};
//! let kernel = CudaKernel::new(
//!     "scale", &["x"], &["out"],
//!     "auto i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = x[i] * 2;",
//! ).unwrap();
//! let x = Array::from_vec(vec![1.0f32, 2.0, 3.0]);
//! let launch = CudaLaunch::new(vec![(vec![3], Dtype::F32)], [3, 1, 1], [32, 1, 1])
//!     .template("n", TemplateArg::Int(3));
//! let out = kiln::with_device(kiln::Device::gpu(0), || kernel.call(&[x], &launch)).unwrap().unwrap();
//! ```

use crate::array::Array;
use crate::device::{current_stream, DeviceKind};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernel::{KernelBody, KernelCall};
use crate::shape::fmt_shape;

const OP: &str = "cuda_kernel";

/// The most axes an input may have when the body reads its `_shape` or `_strides`.
pub const MAX_NDIM: usize = 10;

/// Helpers every user kernel can use (`Shape`, `Strides`, `elem_to_loc`, `WARP_SIZE`, `inf`).
const PRELUDE: &str = include_str!("backend/cuda/user_kernel.cu");

/// A template value: printed as a compile-time constant (`constexpr bool`, `constexpr int`) or a
/// type alias (`using T = float;`) at the top of the kernel body.
#[derive(Clone, Debug, PartialEq)]
pub enum TemplateArg {
    /// `constexpr bool name = value;`
    Bool(bool),
    /// `constexpr int name = value;`
    Int(i32),
    /// `using name = <the dtype's CUDA type>;`
    Dtype(Dtype),
}

/// A kernel definition: names, source and options; [`CudaKernel::call`] runs it.
#[derive(Clone, Debug)]
pub struct CudaKernel {
    name: String,
    input_names: Vec<String>,
    output_names: Vec<String>,
    source: String,
    header: String,
    ensure_row_contiguous: bool,
    atomic_outputs: bool,
    shared_memory: u32,
    /// Per input, which of its shape, strides and rank the source reads (found once, here).
    shape_uses: Vec<ShapeUse>,
}

/// How one call runs: the outputs, the launch shape and the template values.
#[derive(Clone, Debug)]
pub struct CudaLaunch {
    /// Each output's shape and dtype, in `output_names` order.
    pub outputs: Vec<(Vec<usize>, Dtype)>,
    /// The grid in threads (as mlx, for compatibility with Metal): blocks are
    /// `ceil(grid / threadgroup)` along each axis.
    pub grid: [usize; 3],
    /// Threads per block along each axis.
    pub threadgroup: [usize; 3],
    /// Template constants and types, in order.
    pub template: Vec<(String, TemplateArg)>,
    /// A value every output is filled with before the kernel runs (else outputs start
    /// uninitialised).
    pub init_value: Option<f64>,
    /// Print the generated source on each call.
    pub verbose: bool,
}

impl CudaLaunch {
    /// A launch of `grid` threads in blocks of `threadgroup`, producing `outputs`.
    pub fn new(outputs: Vec<(Vec<usize>, Dtype)>, grid: [usize; 3], threadgroup: [usize; 3]) -> CudaLaunch {
        CudaLaunch { outputs, grid, threadgroup, template: Vec::new(), init_value: None, verbose: false }
    }

    /// Adds template value `name`.
    pub fn template(mut self, name: &str, value: TemplateArg) -> CudaLaunch {
        self.template.push((name.to_string(), value));
        self
    }
}

/// Which of an input's shape, strides and rank the body reads (only those are passed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ShapeUse {
    pub shape: bool,
    pub strides: bool,
    pub ndim: bool,
}

/// What the GPU backend needs to run one call: the printed source and how to launch it.
#[derive(Debug)]
pub(crate) struct CudaCall {
    /// The full CUDA C source.
    pub source: String,
    /// The `extern "C"` entry point.
    pub entry: String,
    /// Blocks along each axis.
    pub blocks: [u32; 3],
    /// Threads per block along each axis.
    pub threads: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory: u32,
    /// The value outputs start with.
    pub init_value: Option<f64>,
    /// Whether inputs are copied to row-major order first.
    pub ensure_row_contiguous: bool,
    /// Per input, which of its shape, strides and rank are parameters.
    pub shape_uses: Vec<ShapeUse>,
}

/// Whether `name` is a C identifier.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The CUDA type of `dtype` in user kernels (the toolkit's half types).
pub fn cuda_type(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::Bool => "bool",
        Dtype::F16 => "__half",
        Dtype::BF16 => "__nv_bfloat16",
        Dtype::F32 => "float",
        Dtype::F64 => "double",
        _ => dtype.stdint_name().expect("the other dtypes are integers"),
    }
}

/// Dtypes CUDA's `atomicAdd` accepts, for `atomic_outputs`.
fn has_atomics(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::I32 | Dtype::U32 | Dtype::U64 | Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64)
}

impl CudaKernel {
    /// A kernel named `name` (a C identifier) whose body `source` reads the inputs and writes
    /// the outputs by the names given, with the defaults of mlx: no header, inputs made
    /// row-contiguous, plain outputs, no dynamic shared memory.
    pub fn new(name: &str, input_names: &[&str], output_names: &[&str], source: &str) -> Result<CudaKernel> {
        if !is_identifier(name) {
            return Err(Error::value(OP, format!("the kernel name '{name}' is not a C identifier (letters, digits, '_')")));
        }
        if output_names.is_empty() {
            return Err(Error::value(OP, format!("kernel '{name}' names no outputs; give at least one output name")));
        }
        let mut seen: Vec<&str> = Vec::new();
        for n in input_names.iter().chain(output_names) {
            if !is_identifier(n) {
                return Err(Error::value(OP, format!("kernel '{name}': '{n}' is not a C identifier, so it cannot name a parameter")));
            }
            if seen.contains(n) {
                return Err(Error::value(OP, format!("kernel '{name}' names '{n}' twice among its inputs and outputs")));
            }
            seen.push(n);
        }
        let reads = |n: &str, what: &str| source.contains(&format!("{n}_{what}"));
        let shape_uses = input_names
            .iter()
            .map(|n| ShapeUse { shape: reads(n, "shape"), strides: reads(n, "strides"), ndim: reads(n, "ndim") })
            .collect();
        Ok(CudaKernel {
            name: name.to_string(),
            input_names: input_names.iter().map(|s| s.to_string()).collect(),
            output_names: output_names.iter().map(|s| s.to_string()).collect(),
            source: source.to_string(),
            header: String::new(),
            ensure_row_contiguous: true,
            atomic_outputs: false,
            shared_memory: 0,
            shape_uses,
        })
    }

    /// Code placed before the kernel (helper functions, includes).
    pub fn header(mut self, header: &str) -> CudaKernel {
        self.header = header.to_string();
        self
    }

    /// Whether inputs are copied to row-major order before the kernel reads them (default
    /// true); when false the body gets each input's first element and reads its layout from
    /// `<name>_strides`.
    pub fn ensure_row_contiguous(mut self, on: bool) -> CudaKernel {
        self.ensure_row_contiguous = on;
        self
    }

    /// Outputs updated with atomics (`atomicAdd` and its kin) by many threads: their pointers
    /// lose `__restrict__` and their dtypes must be ones CUDA's atomics take.
    pub fn atomic_outputs(mut self, on: bool) -> CudaKernel {
        self.atomic_outputs = on;
        self
    }

    /// Dynamic shared memory per block in bytes (`extern __shared__` arrays).
    pub fn shared_memory(mut self, bytes: u32) -> CudaKernel {
        self.shared_memory = bytes;
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry point for `template`: the name, then each template value.
    fn entry(&self, template: &[(String, TemplateArg)]) -> String {
        let mut entry = format!("kiln_user_{}", self.name);
        for (_, value) in template {
            entry += &match value {
                TemplateArg::Bool(b) => format!("_{}", if *b { 't' } else { 'f' }),
                TemplateArg::Int(i) if *i < 0 => format!("_n{}", i.unsigned_abs()),
                TemplateArg::Int(i) => format!("_{i}"),
                TemplateArg::Dtype(d) => format!("_{}", d.name()),
            };
        }
        entry
    }

    /// The full CUDA C source for inputs of `input_dtypes` and the outputs and template of
    /// `launch`: what NVRTC builds (and `verbose` prints).
    pub fn source_for(&self, input_dtypes: &[Dtype], launch: &CudaLaunch) -> String {
        let mut params = Vec::new();
        for ((name, dtype), used) in self.input_names.iter().zip(input_dtypes).zip(&self.shape_uses) {
            params.push(format!("const {}* __restrict__ {name}", cuda_type(*dtype)));
            if used.shape {
                params.push(format!("const Shape {name}_shape"));
            }
            if used.strides {
                params.push(format!("const Strides {name}_strides"));
            }
            if used.ndim {
                params.push(format!("const int {name}_ndim"));
            }
        }
        let restrict = if self.atomic_outputs { "" } else { " __restrict__" };
        for (name, (_, dtype)) in self.output_names.iter().zip(&launch.outputs) {
            params.push(format!("{}*{restrict} {name}", cuda_type(*dtype)));
        }
        let constants: String = launch
            .template
            .iter()
            .map(|(name, value)| match value {
                TemplateArg::Bool(b) => format!("    constexpr bool {name} = {b};\n"),
                TemplateArg::Int(i) => format!("    constexpr int {name} = {i};\n"),
                TemplateArg::Dtype(d) => format!("    using {name} = {};\n", cuda_type(*d)),
            })
            .collect();
        format!(
            "{PRELUDE}\n/* header */\n{}\n/* kernel '{}' */\nextern \"C\" __global__ void {}(\n    {}) {{\n{constants}{}\n}}\n",
            self.header,
            self.name,
            self.entry(&launch.template),
            params.join(",\n    "),
            self.source
        )
    }

    /// Runs the kernel on `inputs` with `launch`, on the current stream (which must be a GPU's);
    /// returns one lazy array per output.
    pub fn call(&self, inputs: &[Array], launch: &CudaLaunch) -> Result<Vec<Array>> {
        let call = self.prepare(inputs, launch)?;
        if launch.verbose {
            println!("Generated source code for `{}`:\n```\n{}\n```", call.entry, call.source);
        }
        KernelCall::call(&self.name, KernelBody::Cuda(std::sync::Arc::new(call)), inputs, &launch.outputs)
    }

    /// Checks a call's arguments against the definition and prints its source.
    fn prepare(&self, inputs: &[Array], launch: &CudaLaunch) -> Result<CudaCall> {
        let name = &self.name;
        let stream = current_stream();
        if stream.device.kind != DeviceKind::Gpu {
            return Err(Error::value(
                OP,
                format!("kernel '{name}' is CUDA C and runs on a GPU, but was called on {}; pass stream=gpu or make the GPU the default device", stream.device),
            ));
        }
        let count = |what: &str, got: usize, want: usize| {
            (got != want).then(|| {
                Error::value(OP, format!("kernel '{name}' names {want} {what}, but the call gives {got}"))
            })
        };
        if let Some(e) = count("inputs", inputs.len(), self.input_names.len())
            .or_else(|| count("outputs", launch.outputs.len(), self.output_names.len()))
        {
            return Err(e);
        }
        for ((x, n), used) in inputs.iter().zip(&self.input_names).zip(&self.shape_uses) {
            if (used.shape || used.strides) && x.ndim() > MAX_NDIM {
                return Err(Error::shape(
                    OP,
                    format!("kernel '{name}' reads the shape of input '{n}', whose {} axes ({}) exceed the {MAX_NDIM} a kernel parameter holds", x.ndim(), fmt_shape(x.shape())),
                ));
            }
        }
        if self.atomic_outputs {
            if let Some(((_, d), n)) = launch.outputs.iter().zip(&self.output_names).find(|((_, d), _)| !has_atomics(*d)) {
                return Err(Error::dtype(
                    OP,
                    format!("kernel '{name}' has atomic outputs, but CUDA has no atomics for output '{n}' of dtype {d}; use int32, uint32, uint64, float16, bfloat16, float32 or float64"),
                ));
            }
        }
        for (t, _) in &launch.template {
            if !is_identifier(t) {
                return Err(Error::value(OP, format!("kernel '{name}': the template name '{t}' is not a C identifier")));
            }
        }
        let mut blocks = [0u32; 3];
        let mut threads = [0u32; 3];
        for axis in 0..3 {
            let (g, t) = (launch.grid[axis], launch.threadgroup[axis]);
            if g == 0 || t == 0 {
                return Err(Error::value(
                    OP,
                    format!("kernel '{name}': grid {:?} and threadgroup {:?} must be positive along every axis", launch.grid, launch.threadgroup),
                ));
            }
            let b = g.div_ceil(t);
            let limit = if axis == 0 { i32::MAX as usize } else { 65_535 };
            if b > limit {
                return Err(Error::value(
                    OP,
                    format!("kernel '{name}': grid {:?} in threadgroups {:?} is {b} blocks along axis {axis}; CUDA allows {limit}", launch.grid, launch.threadgroup),
                ));
            }
            blocks[axis] = b as u32;
            threads[axis] = t.min(u32::MAX as usize) as u32;
        }
        let per_block: usize = launch.threadgroup.iter().product();
        if per_block > 1024 || launch.threadgroup[2] > 64 {
            return Err(Error::value(
                OP,
                format!("kernel '{name}': threadgroup {:?} has {per_block} threads; CUDA allows at most 1024 per block (and 64 along z)", launch.threadgroup),
            ));
        }
        let dtypes: Vec<Dtype> = inputs.iter().map(|x| x.dtype()).collect();
        Ok(CudaCall {
            source: self.source_for(&dtypes, launch),
            entry: self.entry(&launch.template),
            blocks,
            threads,
            shared_memory: self.shared_memory,
            init_value: launch.init_value,
            ensure_row_contiguous: self.ensure_row_contiguous,
            shape_uses: self.shape_uses.clone(),
        })
    }
}
