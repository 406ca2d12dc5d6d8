//! User CUDA kernels (`cuda_kernel`): every generated source builds with NVRTC (wherever NVRTC
//! and the toolkit's headers are found), and on a GPU the kernels give what host references
//! compute: templates, scalar and half-precision inputs, strided inputs, 3-axis grids, initial
//! values with atomics, dynamic shared memory, one run for several outputs, caching by source,
//! and a kernel inside a compiled function between fused segments (seed 001's rmsnorm).

mod common;

use common::gpu::{gpu, nvrtc_found};
use common::{array, assert_close, with_layout, Rng};
use kiln::backend::cuda::{libraries, nvrtc};
use kiln::cuda_kernel::{CudaKernel, CudaLaunch, TemplateArg};
use kiln::ops;
use kiln::{with_device, Array, Device, Dtype, ErrorKind};

/// The toolkit's headers, or `None` after printing why the test is skipped.
fn headers(test: &str) -> Option<&'static [std::path::PathBuf]> {
    if !nvrtc_found(test) {
        return None;
    }
    let dirs = libraries::header_dirs();
    if dirs.is_empty() {
        println!("skipped {test}: the CUDA toolkit's headers were not found (pip install nvidia-cuda-runtime nvidia-cuda-cccl)");
        return None;
    }
    Some(dirs)
}

fn launch(outputs: Vec<(Vec<usize>, Dtype)>, grid: [usize; 3], threadgroup: [usize; 3]) -> CudaLaunch {
    CudaLaunch::new(outputs, grid, threadgroup)
}

#[test]
fn user_kernel_sources_build_with_nvrtc_for_every_dtype_and_option() {
    let Some(dirs) = headers("user_kernel_sources_build_with_nvrtc_for_every_dtype_and_option") else { return };
    let body = "auto i = cooperative_groups::this_grid().thread_rank();\n\
                auto loc = elem_to_loc(i, a_shape.data(), a_strides.data(), a_ndim);\n\
                if (flag && i < n) out[i] = static_cast<T>(a[loc]);";
    for d in Dtype::REAL {
        let k = CudaKernel::new("copy_any", &["a"], &["out"], body).unwrap().ensure_row_contiguous(false);
        let l = launch(vec![(vec![4], d)], [4, 1, 1], [32, 1, 1])
            .template("T", TemplateArg::Dtype(d))
            .template("n", TemplateArg::Int(4))
            .template("flag", TemplateArg::Bool(true));
        let source = k.source_for(&[d], &l);
        nvrtc::build_with_headers("test", &source, "sm_90a", dirs).unwrap_or_else(|e| panic!("{d}: {}", e.message));
    }
    for d in [Dtype::F32, Dtype::F64, Dtype::I32, Dtype::U32, Dtype::U64, Dtype::F16, Dtype::BF16] {
        let k = CudaKernel::new("count", &["x"], &["hist"], "atomicAdd(&hist[0], static_cast<T>(x[threadIdx.x]));")
            .unwrap()
            .atomic_outputs(true);
        let l = launch(vec![(vec![1], d)], [32, 1, 1], [32, 1, 1]).template("T", TemplateArg::Dtype(d));
        let source = k.source_for(&[Dtype::F32], &l);
        nvrtc::build_with_headers("test", &source, "sm_90a", dirs).unwrap_or_else(|e| panic!("atomics on {d}: {}", e.message));
    }
    let k = CudaKernel::new("broken", &["x"], &["y"], "y[0] = no_such_name(x[0]);").unwrap();
    let source = k.source_for(&[Dtype::F32], &launch(vec![(vec![1], Dtype::F32)], [1, 1, 1], [1, 1, 1]));
    let e = nvrtc::build_with_headers("test", &source, "sm_90a", dirs).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Device);
    assert!(e.message.contains("no_such_name") && e.message.contains(" | extern \"C\" __global__ void kiln_user_broken"), "{}", e.message);
}

#[test]
fn definitions_and_calls_that_cannot_work_are_clear_errors() {
    let e = CudaKernel::new("bad name", &["x"], &["y"], "").unwrap_err();
    assert!(e.message.contains("'bad name' is not a C identifier"), "{e}");
    let e = CudaKernel::new("k", &["x"], &[], "").unwrap_err();
    assert!(e.message.contains("names no outputs"), "{e}");
    let e = CudaKernel::new("k", &["x"], &["x"], "").unwrap_err();
    assert!(e.message.contains("names 'x' twice"), "{e}");
    let k = CudaKernel::new("k", &["x"], &["y"], "y[0] = x[0];").unwrap();
    let x = Array::from_vec(vec![1.0f32]);
    let one = launch(vec![(vec![1], Dtype::F32)], [1, 1, 1], [1, 1, 1]);
    let e = with_device(Device::cpu(), || k.call(std::slice::from_ref(&x), &one)).unwrap().unwrap_err();
    assert_eq!((e.op.as_str(), e.kind), ("cuda_kernel", ErrorKind::Value));
    assert!(e.message.contains("runs on a GPU") && e.message.contains("stream=gpu"), "{e}");
    let Some((g, _one)) = gpu("definitions_and_calls_that_cannot_work_are_clear_errors") else { return };
    let on_gpu = |k: &CudaKernel, inputs: &[Array], l: &CudaLaunch| with_device(g, || k.call(inputs, l)).unwrap().unwrap_err();
    let e = on_gpu(&k, &[x.clone(), x.clone()], &one);
    assert!(e.message.contains("names 1 inputs, but the call gives 2"), "{e}");
    let e = on_gpu(&k, std::slice::from_ref(&x), &launch(vec![(vec![1], Dtype::F32)], [2048, 1, 1], [2048, 1, 1]));
    assert!(e.message.contains("at most 1024 per block"), "{e}");
    let e = on_gpu(&k, std::slice::from_ref(&x), &launch(vec![(vec![1], Dtype::F32)], [0, 1, 1], [1, 1, 1]));
    assert!(e.message.contains("must be positive"), "{e}");
    let e = on_gpu(&k, std::slice::from_ref(&x), &one.clone().template("not ok", TemplateArg::Int(1)));
    assert!(e.message.contains("template name 'not ok'"), "{e}");
    let atomic = k.clone().atomic_outputs(true);
    let e = on_gpu(&atomic, std::slice::from_ref(&x), &launch(vec![(vec![1], Dtype::I8)], [1, 1, 1], [1, 1, 1]));
    assert_eq!(e.kind, ErrorKind::Dtype, "{e}");
    assert!(e.message.contains("no atomics for output 'y' of dtype int8"), "{e}");
    // A body that does not build names the kernel's compiler error and shows numbered source.
    let broken = CudaKernel::new("broken", &["x"], &["y"], "y[0] = no_such_name(x[0]);").unwrap();
    let e = with_device(g, || broken.call(std::slice::from_ref(&x), &one).and_then(|o| o[0].eval())).unwrap().unwrap_err();
    assert!(e.message.contains("no_such_name") && e.message.contains("   1 | "), "{e}");
    // grad cannot see inside a kernel.
    let e = kiln::grad(|a: &[Array]| k.call(a, &one), &[0]);
    let e = with_device(g, || e(std::slice::from_ref(&x))).unwrap().unwrap_err();
    assert!(e.message.contains("CustomFunction"), "{e}");
}

/// mlx's argument test, checked against host arithmetic: a float32 matrix, an int32 vector, a
/// bfloat16 matrix and a scalar input; bool, int and dtype template values; two outputs.
#[test]
fn templates_scalars_and_half_inputs_reach_the_kernel() {
    let Some((g, _one)) = gpu("templates_scalars_and_half_inputs_reach_the_kernel") else { return };
    let mut rng = Rng::new(7);
    let a_values = rng.vec(18, -2.0, 2.0);
    let c_values: Vec<f64> = rng.vec(4, -2.0, 2.0).iter().map(|v| (v * 8.0).round() / 8.0).collect();
    let a = array(&a_values, &[3, 6], Dtype::F32);
    let b = Array::from_vec(vec![3i32, 4, 5]);
    let c = array(&c_values, &[2, 2], Dtype::BF16);
    let d = Array::scalar(7.25f32);
    let source = "auto elem = cooperative_groups::this_grid().thread_rank();\n\
                  T tmp = a[0];\n\
                  if (e) { out1[elem] = a[1] + b[2] + static_cast<float>(c[3]) + d[0] + f; } else { out1[elem] = 1; }\n\
                  out2[elem] = a[1] + b[2] + static_cast<float>(c[1]) - d[0];";
    let k = CudaKernel::new("arg_test", &["a", "b", "c", "d"], &["out1", "out2"], source).unwrap();
    for flag in [true, false] {
        let l = launch(vec![(vec![3, 2], Dtype::F32), (vec![3, 2], Dtype::I32)], [6, 1, 1], [2, 1, 1])
            .template("e", TemplateArg::Bool(flag))
            .template("f", TemplateArg::Int(3))
            .template("T", TemplateArg::Dtype(Dtype::F16));
        let out = with_device(g, || k.call(&[a.clone(), b.clone(), c.clone(), d.clone()], &l)).unwrap().unwrap();
        let a1 = a_values[1] as f32 as f64;
        let want1 = if flag { a1 + 5.0 + c_values[3] + 7.25 + 3.0 } else { 1.0 };
        let want2 = (a1 + 5.0 + c_values[1] - 7.25).trunc();
        assert_close(&out[0].to_f64_vec().unwrap(), &[want1; 6], 1e-6, 1e-6, "out1");
        assert_eq!(out[1].to_f64_vec().unwrap(), vec![want2; 6], "out2 (float to int32 truncates)");
    }
}

/// A strided input read through `elem_to_loc` (ensure_row_contiguous off) and a copied one read
/// directly (on) both give exp(x) * WARP_SIZE, for every layout of views.
#[test]
fn strided_inputs_are_read_through_their_strides_or_copied() {
    let Some((g, _one)) = gpu("strided_inputs_are_read_through_their_strides_or_copied") else { return };
    let mut rng = Rng::new(8);
    let values = rng.vec(6 * 5, -2.0, 2.0);
    let want: Vec<f64> = values.iter().map(|v| (*v as f32 as f64).exp() * 32.0).collect();
    let strided = "auto elem = cooperative_groups::this_grid().thread_rank();\n\
                   if (elem >= n) return;\n\
                   auto loc = elem_to_loc(elem, inp_shape.data(), inp_strides.data(), inp_ndim);\n\
                   out[elem] = exp(inp[loc]) * WARP_SIZE;";
    let contiguous = "auto elem = cooperative_groups::this_grid().thread_rank();\n\
                      if (elem < n) out[elem] = exp(inp[elem]) * WARP_SIZE;";
    for layout in common::LAYOUTS {
        let x = with_layout(&values, &[6, 5], Dtype::F32, layout);
        for (row_contiguous, source) in [(true, contiguous), (false, strided)] {
            let k = CudaKernel::new("myexp", &["inp"], &["out"], source).unwrap().ensure_row_contiguous(row_contiguous);
            let l = launch(vec![(vec![6, 5], Dtype::F32)], [30, 1, 1], [256, 1, 1]).template("n", TemplateArg::Int(30));
            let out = with_device(g, || k.call(std::slice::from_ref(&x), &l)).unwrap().unwrap();
            let what = format!("{layout:?}, ensure_row_contiguous {row_contiguous}");
            assert_close(&out[0].to_f64_vec().unwrap(), &want, 1e-6, 0.0, &what);
        }
    }
}

/// A header's helper, block and grid sizes along three axes, and an output of another dtype.
#[test]
fn headers_and_three_axis_grids_work() {
    let Some((g, _one)) = gpu("headers_and_three_axis_grids_work") else { return };
    let header = "template <typename T> __device__ T place(T x, T y, T z) { return x + 10 * y + 100 * z; }";
    let source = "unsigned x = blockIdx.x * blockDim.x + threadIdx.x;\n\
                  unsigned y = blockIdx.y * blockDim.y + threadIdx.y;\n\
                  unsigned z = blockIdx.z * blockDim.z + threadIdx.z;\n\
                  if (x < 5 && y < 3 && z < 2) out[(z * 3 + y) * 5 + x] = place(x, y, z);\n\
                  if (x == 0 && y == 0 && z == 0) size[0] = blockDim.x * blockDim.y * blockDim.z;";
    let k = CudaKernel::new("grid3", &[], &["out", "size"], source).unwrap().header(header);
    let l = launch(vec![(vec![2, 3, 5], Dtype::U32), (vec![1], Dtype::U32)], [5, 3, 2], [2, 3, 1]);
    let out = with_device(g, || k.call(&[], &l)).unwrap().unwrap();
    let want: Vec<f64> = (0..2).flat_map(|z| (0..3).flat_map(move |y| (0..5).map(move |x| (x + 10 * y + 100 * z) as f64))).collect();
    assert_eq!(out[0].to_f64_vec().unwrap(), want);
    assert_eq!(out[1].to_f64_vec().unwrap(), vec![6.0]);
}

/// A histogram by atomicAdd into outputs that start at the initial value; elements a kernel
/// does not write keep it.
#[test]
fn initial_values_and_atomic_outputs_count_correctly() {
    let Some((g, _one)) = gpu("initial_values_and_atomic_outputs_count_correctly") else { return };
    let mut rng = Rng::new(9);
    let bins: Vec<f64> = (0..10_000).map(|_| (rng.next_u64() % 8) as f64).collect();
    let x = array(&bins, &[10_000], Dtype::I32);
    let source = "auto i = cooperative_groups::this_grid().thread_rank();\n\
                  if (i < 10000) { atomicAdd(&counts[x[i]], 1.0f); atomicAdd(&total[0], 1u); }";
    let k = CudaKernel::new("histogram", &["x"], &["counts", "total"], source).unwrap().atomic_outputs(true);
    let mut l = launch(vec![(vec![8], Dtype::F32), (vec![2], Dtype::U32)], [10_000, 1, 1], [128, 1, 1]);
    l.init_value = Some(5.0);
    let out = with_device(g, || k.call(std::slice::from_ref(&x), &l)).unwrap().unwrap();
    let mut want = vec![5.0; 8];
    for b in &bins {
        want[*b as usize] += 1.0;
    }
    assert_eq!(out[0].to_f64_vec().unwrap(), want);
    assert_eq!(out[1].to_f64_vec().unwrap(), vec![10_005.0, 5.0], "the element no thread writes keeps the initial value");
}

/// A block-per-row sum through dynamic shared memory matches float64 sums.
#[test]
fn dynamic_shared_memory_serves_block_reductions() {
    let Some((g, _one)) = gpu("dynamic_shared_memory_serves_block_reductions") else { return };
    let mut rng = Rng::new(10);
    let (rows, cols) = (7, 1000);
    let values = rng.vec(rows * cols, -1.0, 1.0);
    let source = "extern __shared__ float part[];\n\
                  float s = 0;\n\
                  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += x[blockIdx.x * cols + j];\n\
                  part[threadIdx.x] = s;\n\
                  __syncthreads();\n\
                  for (int w = blockDim.x / 2; w > 0; w /= 2) { if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w]; __syncthreads(); }\n\
                  if (threadIdx.x == 0) out[blockIdx.x] = part[0];";
    let k = CudaKernel::new("row_sum", &["x"], &["out"], source).unwrap().shared_memory(256 * 4);
    let l = launch(vec![(vec![rows], Dtype::F32)], [rows * 256, 1, 1], [256, 1, 1]).template("cols", TemplateArg::Int(cols as i32));
    let x = array(&values, &[rows, cols], Dtype::F32);
    let out = with_device(g, || k.call(std::slice::from_ref(&x), &l)).unwrap().unwrap();
    let want: Vec<f64> = values.chunks(cols).map(|r| r.iter().map(|v| *v as f32 as f64).sum()).collect();
    assert_close(&out[0].to_f64_vec().unwrap(), &want, 1e-5, 1e-5, "row sums");
}

/// Outputs evaluated one by one come from one run of the kernel: a run counter in device memory
/// gives both outputs the same number.
#[test]
fn several_outputs_come_from_one_run() {
    let Some((g, _one)) = gpu("several_outputs_come_from_one_run") else { return };
    let header = "__device__ unsigned int kiln_test_runs;";
    let source = "unsigned r = atomicAdd(&kiln_test_runs, 1u); first[0] = r; second[0] = r;";
    let k = CudaKernel::new("counted", &[], &["first", "second"], source).unwrap().header(header);
    let l = launch(vec![(vec![1], Dtype::U32), (vec![1], Dtype::U32)], [1, 1, 1], [1, 1, 1]);
    for _ in 0..3 {
        let out = with_device(g, || k.call(&[], &l)).unwrap().unwrap();
        let first = out[0].to_f64_vec().unwrap();
        let second = out[1].to_f64_vec().unwrap();
        assert_eq!(first, second, "each output ran its own copy of the kernel");
    }
}

/// Two kernels sharing a name but not a source, evaluated together, each run their own code.
#[test]
fn kernels_are_cached_by_source_not_name() {
    let Some((g, _one)) = gpu("kernels_are_cached_by_source_not_name") else { return };
    let x = Array::from_vec((0..32).map(|i| i as f32).collect());
    let call = |body: &str| {
        let source = format!("auto e = cooperative_groups::this_grid().thread_rank(); {body}");
        let k = CudaKernel::new("dup_name", &["inp"], &["out"], &source).unwrap();
        with_device(g, || k.call(std::slice::from_ref(&x), &launch(vec![(vec![32], Dtype::F32)], [32, 1, 1], [32, 1, 1])))
            .unwrap()
            .unwrap()
            .remove(0)
    };
    let doubled = call("out[e] = inp[e] * 2.0f;");
    let shifted = call("out[e] = inp[e] + 100.0f;");
    kiln::eval(&[&doubled, &shifted]).unwrap();
    assert_eq!(doubled.to_f64_vec().unwrap(), (0..32).map(|i| i as f64 * 2.0).collect::<Vec<_>>());
    assert_eq!(shifted.to_f64_vec().unwrap(), (0..32).map(|i| i as f64 + 100.0).collect::<Vec<_>>());
}

/// Seed 001's example written for CUDA: fused ops, an rmsnorm kernel, fused ops again. The
/// compiled plan has three kernels (two fused groups and the user kernel), and its result equals
/// the eager run and a float64 reference.
#[test]
fn a_user_kernel_is_an_opaque_boundary_between_fused_segments() {
    let Some((g, _one)) = gpu("a_user_kernel_is_an_opaque_boundary_between_fused_segments") else { return };
    let (rows, cols) = (16, 512);
    let mut rng = Rng::new(11);
    let xv = rng.vec(rows * cols, -2.0, 2.0);
    let wv = rng.vec(cols, 0.5, 1.5);
    let x = array(&xv, &[rows, cols], Dtype::F32);
    let w = array(&wv, &[cols], Dtype::F32);
    let eps = Array::from_vec(vec![1e-5f32]);
    let source = "__shared__ float part[256];\n\
                  const T* row = x + blockIdx.x * cols;\n\
                  float s = 0;\n\
                  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += float(row[j]) * float(row[j]);\n\
                  part[threadIdx.x] = s;\n\
                  __syncthreads();\n\
                  for (int k = blockDim.x / 2; k > 0; k /= 2) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }\n\
                  float scale = rsqrtf(part[0] / cols + eps[0]);\n\
                  for (int j = threadIdx.x; j < cols; j += blockDim.x) out[blockIdx.x * cols + j] = T(float(row[j]) * scale * float(weight[j]));";
    let kernel = CudaKernel::new("rmsnorm", &["x", "weight", "eps"], &["out"], source).unwrap();
    let forward = move |a: &[Array]| -> kiln::Result<Vec<Array>> {
        let pre = ops::maximum(ops::add(ops::multiply(&a[0], 1.5f32)?, 0.25f32)?, 0.0f32)?;
        let rows = pre.shape()[0];
        let l = CudaLaunch::new(vec![(pre.shape().to_vec(), pre.dtype())], [rows * 256, 1, 1], [256, 1, 1])
            .template("T", TemplateArg::Dtype(pre.dtype()))
            .template("cols", TemplateArg::Int(pre.shape()[1] as i32));
        let out = kernel.call(&[pre, a[1].clone(), a[2].clone()], &l)?.remove(0);
        Ok(vec![ops::multiply(ops::exp(ops::negative(&out)?)?, 2.0f32)?])
    };
    let args = [x, w, eps];
    let compiled = kiln::compile(forward.clone());
    let got = with_device(g, || compiled.call(&args)).unwrap().unwrap().remove(0).to_f64_vec().unwrap();
    let eager = with_device(g, || forward(&args)).unwrap().unwrap().remove(0).to_f64_vec().unwrap();
    let report = with_device(g, || compiled.inspect(&args, &[])).unwrap().unwrap();
    assert_eq!(report.compiled_kernels, 3, "{report}");
    assert_eq!(report.groups.len(), 2, "{report}");
    assert!(report.boundaries.len() == 1 && report.boundaries[0].contains("custom_kernel("), "{report}");
    let mut want = Vec::new();
    for r in 0..rows {
        let pre: Vec<f64> = (0..cols).map(|j| (xv[r * cols + j] as f32 as f64 * 1.5 + 0.25).max(0.0)).collect();
        let scale = 1.0 / (pre.iter().map(|v| v * v).sum::<f64>() / cols as f64 + 1e-5).sqrt();
        want.extend((0..cols).map(|j| (-(pre[j] * scale * (wv[j] as f32 as f64))).exp() * 2.0));
    }
    assert_close(&got, &want, 2e-5, 1e-6, "compiled rmsnorm against float64");
    assert_close(&got, &eager, 1e-6, 0.0, "compiled against eager");
}

/// A kernel writing one element per thread without a bounds check, launched on a grid rounded up
/// to its threadgroup (as mlx's examples are), leaves other arrays alone (compute-sanitizer's
/// memcheck, which scripts/gpu-test runs, also sees no write outside an allocation).
#[test]
fn unchecked_writes_of_a_rounded_up_grid_stay_inside_the_output() {
    let Some((g, _one)) = gpu("unchecked_writes_of_a_rounded_up_grid_stay_inside_the_output") else { return };
    let k = CudaKernel::new("fill", &[], &["out"], "out[blockIdx.x * blockDim.x + threadIdx.x] = 7;").unwrap();
    for n in [1usize, 48, 1000] {
        let before = with_device(g, || ops::add(Array::from_vec(vec![1.0f32; 64]), 1.0f32)).unwrap().unwrap();
        before.eval().unwrap();
        let out = with_device(g, || k.call(&[], &launch(vec![(vec![n], Dtype::F32)], [n, 1, 1], [256, 1, 1]))).unwrap().unwrap();
        let after = with_device(g, || ops::add(Array::from_vec(vec![1.0f32; 64]), 1.0f32)).unwrap().unwrap();
        after.eval().unwrap();
        assert_eq!(out[0].to_f64_vec().unwrap(), vec![7.0; n]);
        assert_eq!(before.to_f64_vec().unwrap(), vec![2.0; 64], "an array made before the kernel");
        assert_eq!(after.to_f64_vec().unwrap(), vec![2.0; 64], "an array made after the kernel");
    }
}
