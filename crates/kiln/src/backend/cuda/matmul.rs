//! Matrix products on a GPU through cuBLASLt, for float32, float16, bfloat16 and float64
//! (integers and booleans go to [`super::integer_matmul`]).
//!
//! kiln's arrays are row-major and cuBLASLt's matrices column-major, so `C = A B` is computed as
//! `Cᵀ = Bᵀ Aᵀ`: a row-major operand is its transpose in column-major order, and a transposed view
//! (unit row stride) is passed with cuBLASLt's transpose flag, without a copy. Operands no layout
//! expresses (both strides other than one, negative or zero strides) are copied to row-major
//! first. Batch axes merged into one stride run as one strided-batched call; others loop.
//!
//! float16 and bfloat16 accumulate in float32, as the CPU does. float32 uses full float32 products
//! unless TF32 is allowed ([`set_allow_tf32`], as PyTorch's `allow_tf32`), which trades about
//! three decimal digits for the tensor cores' speed. Each problem's plan (descriptors and the
//! heuristic's algorithm) is made once and kept.

use super::context::{device_error, Gpu};
use super::elementwise;
use super::libraries::{self, CUBLASLT};
use super::memory::DeviceBlock;
use super::switch::Switch;
use crate::backend::Input;
use crate::buffer::{Buffer, Storage};
use crate::dtype::Dtype;
use crate::error::{Error, ErrorKind, Result};
use crate::shape::row_major_strides;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys as lt_sys;
use cudarc::driver::{result as cu, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// Whether float32 products may use TF32 tensor cores.
static ALLOW_TF32: Switch = Switch::new("KILN_ALLOW_TF32", false);

/// Whether float32 matmuls on a GPU may round their inputs to TF32 (10-bit mantissas) for speed.
/// Off unless `KILN_ALLOW_TF32=1` or [`set_allow_tf32`] turned it on.
pub fn allow_tf32() -> bool {
    ALLOW_TF32.get()
}

/// Allows (or forbids) TF32 in float32 matmuls on a GPU; returns the previous setting.
pub fn set_allow_tf32(on: bool) -> bool {
    ALLOW_TF32.set(on)
}

/// The most workspace a product may use (what cuBLAS itself uses on Hopper).
const WORKSPACE: usize = 32 << 20;

/// One operand as cuBLASLt sees it: the stored column-major matrix, whether the product reads
/// it transposed, and the element step between batch members.
#[derive(Clone, Copy, Hash, PartialEq, Eq, Debug)]
struct Layout {
    transposed: bool,
    rows: u64,
    cols: u64,
    ld: i64,
    batch_stride: i64,
}

/// What a plan depends on.
#[derive(Clone, Copy, Hash, PartialEq, Eq, Debug)]
struct PlanKey {
    gpu: usize,
    dtype: Dtype,
    tf32: bool,
    a: Layout,
    b: Layout,
    d: Layout,
    batch: i32,
    /// The alignment in bytes of each operand's start and batch step (A, B, D).
    align: [u32; 3],
}

/// Descriptors and the algorithm of one product, made once.
struct Plan {
    desc: lt_sys::cublasLtMatmulDesc_t,
    layouts: [lt_sys::cublasLtMatrixLayout_t; 3],
    algo: lt_sys::cublasLtMatmulAlgo_t,
    workspace: usize,
}

// Safety: descriptors are host objects; cuBLASLt allows using them from any thread.
unsafe impl Send for Plan {}

/// Plans made so far.
static PLANS: Mutex<Option<HashMap<PlanKey, Plan>>> = Mutex::new(None);
/// Each GPU's cuBLASLt handle (as an address).
static HANDLES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

fn blas_error(what: &str, e: lt::CublasError) -> Error {
    Error::new("matmul", ErrorKind::Device, format!("cuBLASLt {what} failed: {:?}", e.0))
}

/// The cuBLASLt handle of `gpu`, created on first use.
fn handle(gpu: &Gpu) -> Result<lt_sys::cublasLtHandle_t> {
    libraries::require("matmul", CUBLASLT)?;
    let mut handles = HANDLES.lock().unwrap();
    let handles = handles.get_or_insert_with(HashMap::new);
    if let Some(&h) = handles.get(&gpu.ordinal) {
        return Ok(h as lt_sys::cublasLtHandle_t);
    }
    let h = lt::create_handle().map_err(|e| blas_error("creating a handle", e))?;
    handles.insert(gpu.ordinal, h as usize);
    Ok(h)
}

/// A row-major `rows × cols` operand with strides `(sr, sc)` as a column-major matrix: its
/// leading dimension, and whether it is stored transposed (unit row stride). None when neither
/// stride is one or the other is too small for a leading dimension.
fn stored(rows: usize, cols: usize, sr: isize, sc: isize) -> Option<(bool, i64)> {
    let (r, c) = (rows as isize, cols as isize);
    if (sc == 1 || cols == 1) && (rows == 1 || sr >= c.max(1)) {
        Some((false, (if rows == 1 { c.max(1) } else { sr }) as i64))
    } else if (sr == 1 || rows == 1) && (cols == 1 || sc >= r.max(1)) {
        Some((true, (if cols == 1 { r.max(1) } else { sc }) as i64))
    } else {
        None
    }
}

/// Batch axes merged where both operands step through them as one axis: (size, a's stride, b's
/// stride) per merged axis, size-1 axes dropped.
fn merged_batch(shape: &[usize], sa: &[isize], sb: &[isize]) -> Vec<(usize, isize, isize)> {
    let mut out: Vec<(usize, isize, isize)> = Vec::new();
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == sa[d] * shape[d] as isize && last.2 == sb[d] * shape[d] as isize => {
                *last = (last.0 * shape[d], sa[d], sb[d]);
            }
            _ => out.push((shape[d], sa[d], sb[d])),
        }
    }
    out
}

/// cuBLASLt's element type, compute type and scale type for `dtype`.
fn types(dtype: Dtype, tf32: bool) -> Option<(lt_sys::cudaDataType, lt_sys::cublasComputeType_t, lt_sys::cudaDataType)> {
    use lt_sys::cublasComputeType_t as C;
    use lt_sys::cudaDataType as T;
    Some(match dtype {
        Dtype::F32 => (T::CUDA_R_32F, if tf32 { C::CUBLAS_COMPUTE_32F_FAST_TF32 } else { C::CUBLAS_COMPUTE_32F }, T::CUDA_R_32F),
        Dtype::F64 => (T::CUDA_R_64F, C::CUBLAS_COMPUTE_64F, T::CUDA_R_64F),
        Dtype::F16 => (T::CUDA_R_16F, C::CUBLAS_COMPUTE_32F, T::CUDA_R_32F),
        Dtype::BF16 => (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F, T::CUDA_R_32F),
        _ => return None,
    })
}

/// The largest power of two (up to 256) dividing every address in `addresses`.
fn alignment(addresses: &[u64]) -> u32 {
    let bits = addresses.iter().fold(256u64, |acc, &a| acc | a);
    1 << bits.trailing_zeros().min(8)
}

/// `a @ b` of inputs with equal batch shape (the op layer broadcasts batch axes) into a new
/// row-major array of `shape`.
#[allow(clippy::not_unsafe_ptr_arg_deref)] // a stream is an opaque driver handle, never dereferenced here
pub fn run(gpu: &Gpu, stream: sys::CUstream, a: &Input, b: &Input, shape: &[usize], dtype: Dtype) -> Result<Buffer> {
    let op = "matmul";
    let tf32 = dtype == Dtype::F32 && allow_tf32();
    let Some((element, compute, scale)) = types(dtype, tf32) else {
        return super::integer_matmul::run(gpu, stream, a, b, shape, dtype);
    };
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.shape[nd - 1]);
    let size = dtype.size();
    let total: usize = shape.iter().product();
    let out = DeviceBlock::new(op, gpu, stream, total * size)?;
    let out_ptr = out.ptr;
    let result = Buffer { storage: Storage::on_device(out), offset: 0, strides: row_major_strides(shape) };
    if total == 0 {
        return Ok(result);
    }
    if k == 0 {
        // Empty sums: the product is all zeros.
        // Safety: the block holds `total * size` bytes of this context.
        unsafe { cu::memset_d8_async(out_ptr, 0, total * size, stream) }.map_err(|e| device_error(op, "zeroing the output", e))?;
        return Ok(result);
    }
    // Operands in a layout cuBLASLt takes, copied to row-major where none fits.
    let fit = |x: &Input, rows: usize, cols: usize| -> Result<(Buffer, (bool, i64))> {
        let s = &x.buffer.strides;
        if let Some(l) = stored(rows, cols, s[nd - 2], s[nd - 1]) {
            if s[..nd - 2].iter().all(|&v| v >= 0) {
                return Ok((x.buffer.clone(), l));
            }
        }
        let copy = elementwise::contiguous(op, gpu, stream, x)?;
        let l = stored(rows, cols, copy.strides[nd - 2], copy.strides[nd - 1]).expect("row-major fits");
        Ok((copy, l))
    };
    let (ab, (a_t, lda)) = fit(a, m, k)?;
    let (bb, (b_t, ldb)) = fit(b, k, n)?;
    let batch = merged_batch(&shape[..nd - 2], &ab.strides[..nd - 2], &bb.strides[..nd - 2]);
    let (inner, sa, sb) = batch.last().copied().unwrap_or((1, 0, 0));
    let outer: Vec<(usize, isize, isize)> = batch.iter().rev().skip(1).rev().copied().collect();
    let start = |x: &Buffer| x.gpu_start(op, gpu.ordinal, stream, size);
    let (a_ptr, b_ptr) = (start(&ab)?, start(&bb)?);
    // cuBLASLt computes Cᵀ (n × m) = Bᵀ (n × k) · Aᵀ (k × m).
    let cu_a = Layout {
        transposed: b_t,
        rows: (if b_t { k } else { n }) as u64,
        cols: (if b_t { n } else { k }) as u64,
        ld: ldb,
        batch_stride: sb as i64,
    };
    let cu_b = Layout {
        transposed: a_t,
        rows: (if a_t { m } else { k }) as u64,
        cols: (if a_t { k } else { m }) as u64,
        ld: lda,
        batch_stride: sa as i64,
    };
    let cu_d = Layout { transposed: false, rows: n as u64, cols: m as u64, ld: n as i64, batch_stride: (m * n) as i64 };
    let step = |s: isize| if inner > 1 { (s as u64) * size as u64 } else { 0 };
    let outer_steps = |pick: fn(&(usize, isize, isize)) -> isize| -> Vec<u64> {
        outer.iter().map(|t| (pick(t) as u64).wrapping_mul(size as u64)).collect()
    };
    let (a_outer, b_outer) = (outer_steps(|t| t.1), outer_steps(|t| t.2));
    let key = PlanKey {
        gpu: gpu.ordinal,
        dtype,
        tf32,
        a: cu_a,
        b: cu_b,
        d: cu_d,
        batch: i32::try_from(inner).map_err(|_| Error::unsupported(op, format!("a batch of {inner} products is more than cuBLASLt takes")))?,
        align: [
            alignment(&[b_ptr, step(sb)].into_iter().chain(b_outer.iter().copied()).collect::<Vec<_>>()),
            alignment(&[a_ptr, step(sa)].into_iter().chain(a_outer.iter().copied()).collect::<Vec<_>>()),
            alignment(&[out_ptr, step((m * n) as isize)]),
        ],
    };
    let h = handle(gpu)?;
    let mut plans = PLANS.lock().unwrap();
    let plans = plans.get_or_insert_with(HashMap::new);
    let plan = match plans.entry(key) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(plan(h, &key, element, compute, scale)?),
    };
    let workspace = DeviceBlock::new(op, gpu, stream, plan.workspace)?;
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if dtype == Dtype::F64 {
        (&one64 as *const f64 as *const c_void, &zero64 as *const f64 as *const c_void)
    } else {
        (&one32 as *const f32 as *const c_void, &zero32 as *const f32 as *const c_void)
    };
    let products: usize = outer.iter().map(|t| t.0).product();
    let product_bytes = (inner * m * n * size) as u64;
    for p in 0..products {
        // Offsets of this member of the outer batch axes.
        let (mut rest, mut da, mut db) = (p, 0u64, 0u64);
        for (j, t) in outer.iter().enumerate().rev() {
            let i = (rest % t.0) as u64;
            rest /= t.0;
            da = da.wrapping_add(i.wrapping_mul(a_outer[j]));
            db = db.wrapping_add(i.wrapping_mul(b_outer[j]));
        }
        let d_ptr = out_ptr + p as u64 * product_bytes;
        // Safety: the plan's layouts describe the operands at these addresses (sizes, leading
        // dimensions and batch strides inside their blocks); the workspace holds what the
        // algorithm asked for; all work is ordered on `stream`.
        unsafe {
            lt::matmul(
                h,
                plan.desc,
                alpha,
                beta,
                b_ptr.wrapping_add(db) as *const c_void,
                plan.layouts[0],
                a_ptr.wrapping_add(da) as *const c_void,
                plan.layouts[1],
                d_ptr as *const c_void,
                plan.layouts[2],
                d_ptr as *mut c_void,
                plan.layouts[2],
                &plan.algo,
                workspace.ptr as *mut c_void,
                plan.workspace,
                stream as lt_sys::cudaStream_t,
            )
        }
        .map_err(|e| blas_error("matmul", e))?;
    }
    Ok(result)
}

/// Makes the descriptors of `key` and asks cuBLASLt's heuristic for its algorithm.
fn plan(
    h: lt_sys::cublasLtHandle_t,
    key: &PlanKey,
    element: lt_sys::cudaDataType,
    compute: lt_sys::cublasComputeType_t,
    scale: lt_sys::cudaDataType,
) -> Result<Plan> {
    use lt_sys::cublasLtMatmulDescAttributes_t as D;
    use lt_sys::cublasLtMatmulPreferenceAttributes_t as P;
    use lt_sys::cublasLtMatrixLayoutAttribute_t as L;
    let e = |what: &'static str| move |err| blas_error(what, err);
    let desc = lt::create_matmul_desc(compute, scale).map_err(e("creating a product descriptor"))?;
    let layout = |l: &Layout| -> Result<lt_sys::cublasLtMatrixLayout_t> {
        let layout = lt::create_matrix_layout(element, l.rows, l.cols, l.ld).map_err(e("creating a matrix layout"))?;
        if key.batch > 1 {
            // Safety: attributes of the types cuBLASLt documents (int32 count, int64 stride).
            unsafe {
                lt::set_matrix_layout_attribute(layout, L::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &key.batch as *const i32 as *const c_void, 4)
                    .map_err(e("setting the batch count"))?;
                lt::set_matrix_layout_attribute(
                    layout,
                    L::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &l.batch_stride as *const i64 as *const c_void,
                    8,
                )
                .map_err(e("setting the batch stride"))?;
            }
        }
        Ok(layout)
    };
    let layouts = [layout(&key.a)?, layout(&key.b)?, layout(&key.d)?];
    let pref = lt::create_matmul_pref().map_err(e("creating preferences"))?;
    // Safety: attributes of the documented types (int32 flags, uint64 workspace, uint32 alignments).
    let algo = unsafe {
        for (attr, flag) in [(D::CUBLASLT_MATMUL_DESC_TRANSA, key.a.transposed), (D::CUBLASLT_MATMUL_DESC_TRANSB, key.b.transposed)] {
            let v = i32::from(flag);
            lt::set_matmul_desc_attribute(desc, attr, &v as *const i32 as *const c_void, 4).map_err(e("setting a transpose flag"))?;
        }
        let workspace = WORKSPACE as u64;
        lt::set_matmul_pref_attribute(pref, P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace as *const u64 as *const c_void, 8)
            .map_err(e("setting the workspace size"))?;
        let aligns = [
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align[0]),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align[1]),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align[2]),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align[2]),
        ];
        for (attr, bytes) in aligns {
            lt::set_matmul_pref_attribute(pref, attr, &bytes as *const u32 as *const c_void, 4).map_err(e("setting an alignment"))?;
        }
        let found = lt::get_matmul_algo_heuristic(h, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref);
        let _ = lt::destroy_matmul_pref(pref);
        found.map_err(|err| {
            Error::new(
                "matmul",
                ErrorKind::Device,
                format!("cuBLASLt has no algorithm for this product ({:?}; {key:?})", err.0),
            )
        })?
    };
    Ok(Plan { desc, layouts, algo: algo.algo, workspace: algo.workspaceSize })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_map_to_column_major_layouts() {
        // Row-major 3×4: stored as its 4×3 transpose with ld 4.
        assert_eq!(stored(3, 4, 4, 1), Some((false, 4)));
        // A transposed view (strides 1, 3) of a 4×3 row-major array.
        assert_eq!(stored(3, 4, 1, 3), Some((true, 3)));
        // Padded rows keep their stride as the leading dimension.
        assert_eq!(stored(3, 4, 10, 1), Some((false, 10)));
        // Vectors take any stride along their length-1 axis.
        assert_eq!(stored(1, 4, 0, 1), Some((false, 4)));
        assert_eq!(stored(4, 1, 1, 7), Some((false, 1)));
        // Neither stride unit, or a broadcast row: copied first.
        assert_eq!(stored(3, 4, 8, 2), None);
        assert_eq!(stored(3, 4, 0, 1), None);
    }

    #[test]
    fn batch_axes_merge_when_both_operands_step_through_them_as_one() {
        // (2, 3) batches of 4×5 and 5×6 row-major products merge into one axis of 6.
        assert_eq!(merged_batch(&[2, 3], &[60, 20], &[90, 30]), vec![(6, 20, 30)]);
        // b broadcast along the first axis only: two axes.
        assert_eq!(merged_batch(&[2, 3], &[60, 20], &[0, 30]), vec![(2, 60, 0), (3, 20, 30)]);
        // b broadcast along both: one axis of stride 0.
        assert_eq!(merged_batch(&[2, 3], &[60, 20], &[0, 0]), vec![(6, 20, 0)]);
        assert_eq!(merged_batch(&[1, 3, 1], &[9, 9, 9], &[0, 4, 4]), vec![(3, 9, 4)]);
    }

    #[test]
    fn alignment_is_the_largest_common_power_of_two() {
        assert_eq!(alignment(&[0x1000, 0]), 256);
        assert_eq!(alignment(&[0x1004, 0x100]), 4);
        assert_eq!(alignment(&[0x1000, 24]), 8);
    }
}
