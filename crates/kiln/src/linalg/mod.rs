//! Matrix factorizations and solvers (`mx.linalg`): inverses, Cholesky, QR, SVD, the symmetric
//! and the general eigendecompositions, LU, determinants and linear solves. The numerical work is faer's (a
//! LAPACK-quality Rust library), not factorizations written here; this module checks shapes and
//! dtypes, broadcasts batches and wraps each op as one host kernel call
//! ([`crate::custom_kernel`]) over the batch of matrices in the leading axes. So every op is lazy,
//! is an opaque boundary inside compiled functions, and runs on the CPU whatever its input's
//! device, as mlx runs these on its CPU stream.
//!
//! Every float dtype is computed in float64 and the results rounded once to the input's dtype:
//! faer's blocked factorizations order their operations differently from LAPACK, so a float32
//! factorization would differ from numpy's and mlx's by its own rounding (1e-4 relative on a
//! matrix of condition 10³); rounding the float64 result differs only by theirs. Integer and bool
//! inputs are an error naming the op (as in mlx), except for `det` and `slogdet`, which promote
//! them to float32. The results of `lu` and `lu_factor` follow mlx:
//! `L[P] @ U == A`, and LAPACK-style row swaps.

mod kernels;

use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernel::{custom_kernel, KernelArgs};
use crate::ops::{self, AsArray};
use crate::shape::{broadcast_shapes, fmt_shape, numel};
use crate::transforms::CustomFunction;

/// The batch of matrices a kernel sees: `count` matrices of `m` × `n`, and for solves `k`
/// right-hand columns; `flag` is the op's one switch (upper triangle, compute_uv); `eps` the
/// relative rounding of the input's dtype (what counts as zero for a semidefinite Cholesky).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    pub count: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub flag: bool,
    pub eps: f64,
}

/// The relative rounding (machine epsilon) of a float dtype.
fn epsilon(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => f64::powi(2.0, -10),
        Dtype::BF16 => f64::powi(2.0, -7),
        Dtype::F64 => f64::EPSILON,
        _ => f64::from(f32::EPSILON),
    }
}

/// A kernel body (float64), over a batch.
type Body = fn(&mut KernelArgs, Batch) -> Result<()>;

/// `a` in float64, as every op computes, with the dtype its results take. Integers and bools are
/// refused unless `promote`, which gives them float32 results.
fn float_input(op: &str, a: &Array, promote: bool) -> Result<(Array, Dtype)> {
    match a.dtype() {
        Dtype::C64 => Err(Error::dtype(
            op,
            format!(
                "complex64 matrices are not supported yet (shape {}); of kiln's linalg ops only eig, eigvals, eigh, eigvalsh and svd take them",
                fmt_shape(a.shape())
            ),
        )),
        d if d.is_float() => Ok((ops::astype(a, Dtype::F64)?, d)),
        _ if promote => Ok((ops::astype(a, Dtype::F64)?, Dtype::F32)),
        d => Err(Error::dtype(
            op,
            format!("expects a floating point array, got {d} of shape {}; cast it with astype(float32)", fmt_shape(a.shape())),
        )),
    }
}

/// The batch of `a`, which must have at least two axes (and be square if `square`).
fn matrices(op: &str, a: &Array, square: bool) -> Result<Batch> {
    let s = a.shape();
    if s.len() < 2 {
        return Err(Error::value(op, format!("expects an array with at least 2 dimensions, got shape {}", fmt_shape(s))));
    }
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    if square && m != n {
        return Err(Error::value(op, format!("expects square matrices in the last two axes, got shape {}", fmt_shape(s))));
    }
    Ok(Batch { count: numel(&s[..s.len() - 2]), m, n, k: 0, flag: false, eps: 0.0 })
}

/// `shape` with its last two axes replaced by `tail`.
fn with_tail(shape: &[usize], tail: &[usize]) -> Vec<usize> {
    let mut out = shape[..shape.len() - 2].to_vec();
    out.extend_from_slice(tail);
    out
}

/// Runs the host kernel `op`; its outputs are float64 (cast to `result`) unless given a dtype.
fn run(op: &str, inputs: &[Array], outputs: &[(Vec<usize>, Option<Dtype>)], result: Dtype, batch: Batch, body: Body) -> Result<Vec<Array>> {
    let declared: Vec<(Vec<usize>, Dtype)> = outputs.iter().map(|(s, d)| (s.clone(), d.unwrap_or(Dtype::F64))).collect();
    let arrays = custom_kernel(op, inputs, &declared, move |args| body(args, batch))?;
    arrays
        .into_iter()
        .zip(outputs)
        .map(|(a, (_, fixed))| if fixed.is_none() && result != Dtype::F64 { ops::astype(&a, result) } else { Ok(a) })
        .collect()
}

/// `op` as a function `vmap` can batch: its batch rule moves each batched argument's axis to
/// the front (an unbatched one gets a leading axis of 1, which broadcasts) and calls `op` again,
/// since every op here batches over its leading axes. Other transforms meet the host kernel,
/// which refuses them by name (mlx has no derivatives of these either), unless a rule is added.
fn batchable(name: &str, op: impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static) -> CustomFunction {
    let again = op.clone();
    CustomFunction::new(name, op).vmap(move |args, axes| {
        let front = args
            .iter()
            .zip(axes)
            .map(|(a, axis)| match axis {
                Some(axis) => ops::moveaxis(a, *axis as i64, 0),
                None => ops::expand_dims(a, &[0]),
            })
            .collect::<Result<Vec<_>>>()?;
        let out = again(&front)?;
        let axes = vec![Some(0); out.len()];
        Ok((out, axes))
    })
}

/// Calls `op` on `args` through [`batchable`].
fn call(name: &str, args: &[Array], op: impl Fn(&[Array]) -> Result<Vec<Array>> + Clone + Send + Sync + 'static) -> Result<Vec<Array>> {
    batchable(name, op).into_fn()(args)
}

/// An op of one square matrix per batch entry whose result has the input's shape.
fn square_op(op: &'static str, a: &Array, flag: bool, body: Body) -> Result<Array> {
    let (x, dtype) = float_input(op, a, false)?;
    let b = Batch { flag, eps: epsilon(dtype), ..matrices(op, &x, true)? };
    let shape = x.shape().to_vec();
    Ok(run(op, &[x], &[(shape, None)], dtype, b, body)?.remove(0))
}

/// The inverse of each square matrix; a singular matrix is an error. Differentiable:
/// d(A⁻¹) = -A⁻¹ dA A⁻¹.
pub fn inv(a: impl AsArray) -> Result<Array> {
    let op = "linalg.inv";
    let f = batchable(op, move |x: &[Array]| Ok(vec![square_op(op, &x[0], false, kernels::inverse)?])).vjp(|_, cotangents, outputs| {
        let yt = ops::swapaxes(&outputs[0], -1, -2)?;
        Ok(vec![ops::negative(ops::matmul(ops::matmul(&yt, &cotangents[0])?, &yt)?)?])
    });
    Ok(f.into_fn()(&[a.as_array()])?.remove(0))
}

/// The inverse of each triangular matrix (`upper` or lower; the other triangle is not read, and
/// is zero in the result).
pub fn tri_inv(a: impl AsArray, upper: bool) -> Result<Array> {
    let op = "linalg.tri_inv";
    Ok(call(op, &[a.as_array()], move |x| Ok(vec![square_op(op, &x[0], upper, kernels::triangular_inverse)?]))?.remove(0))
}

/// The Cholesky factor of each symmetric positive definite matrix: lower `L` with `A = L Lᵀ`, or
/// upper `U = Lᵀ`. Only the lower triangle of `A` is read. A semidefinite matrix whose zero
/// pivots its dtype's rounding hides (a LAPACK `potrf` in that dtype would round them either
/// way) gets zeros there; a clearly indefinite one is an error.
pub fn cholesky(a: impl AsArray, upper: bool) -> Result<Array> {
    let op = "linalg.cholesky";
    Ok(call(op, &[a.as_array()], move |x| Ok(vec![square_op(op, &x[0], upper, kernels::cholesky)?]))?.remove(0))
}

/// The inverse of `A` from its Cholesky factor (lower `L`, or upper `U` when `upper`).
pub fn cholesky_inv(factor: impl AsArray, upper: bool) -> Result<Array> {
    let op = "linalg.cholesky_inv";
    Ok(call(op, &[factor.as_array()], move |x| Ok(vec![square_op(op, &x[0], upper, kernels::cholesky_inverse)?]))?.remove(0))
}

/// The reduced QR factorization of each matrix: `Q` (m × k, orthonormal columns) and `R` (k × n,
/// upper triangular), k = min(m, n).
pub fn qr(a: impl AsArray) -> Result<(Array, Array)> {
    let op = "linalg.qr";
    let mut r = call(op, &[a.as_array()], move |a| {
        let (x, dtype) = float_input(op, &a[0], false)?;
        let b = matrices(op, &x, false)?;
        let k = b.m.min(b.n);
        let outputs = [(with_tail(x.shape(), &[b.m, k]), None), (with_tail(x.shape(), &[k, b.n]), None)];
        run(op, &[x], &outputs, dtype, b, kernels::qr)
    })?;
    let rr = r.pop().unwrap();
    Ok((r.pop().unwrap(), rr))
}

/// The singular value decomposition of each matrix: `[U (m × m), S (min(m, n), nonincreasing),
/// Vt (n × n)]` with `A = U[:, :k] diag(S) Vt[:k]`, or `[S]` alone without `compute_uv`. A
/// complex64 matrix gives complex64 factors (Vt is Vᴴ) and float32 singular values.
pub fn svd(a: impl AsArray, compute_uv: bool) -> Result<Vec<Array>> {
    let op = "linalg.svd";
    call(op, &[a.as_array()], move |a| {
        // Complex matrices: complex64 factors and float32 singular values.
        let complex = a[0].dtype() == Dtype::C64;
        let (x, dtype) = if complex { (a[0].clone(), Dtype::C64) } else { float_input(op, &a[0], false)? };
        let b = Batch { flag: compute_uv, ..matrices(op, &x, false)? };
        let (factor, values) = if complex { (Some(Dtype::C64), Some(Dtype::F32)) } else { (None, None) };
        let s = x.shape()[..x.ndim() - 2].iter().copied().chain([b.m.min(b.n)]).collect();
        let outputs = if compute_uv {
            vec![(with_tail(x.shape(), &[b.m, b.m]), factor), (s, values), (with_tail(x.shape(), &[b.n, b.n]), factor)]
        } else {
            vec![(s, values)]
        };
        run(op, &[x], &outputs, dtype, b, if complex { kernels::svd_complex } else { kernels::svd })
    })
}

/// The pseudo-inverse of each matrix (n × m), from its SVD: singular values below
/// `max(m, n) · eps · largest` count as zero.
pub fn pinv(a: impl AsArray) -> Result<Array> {
    let op = "linalg.pinv";
    let mut r = call(op, &[a.as_array()], move |a| {
        let (x, dtype) = float_input(op, &a[0], false)?;
        let b = matrices(op, &x, false)?;
        let shape = with_tail(x.shape(), &[b.n, b.m]);
        run(op, &[x], &[(shape, None)], dtype, b, kernels::pseudo_inverse)
    })?;
    Ok(r.remove(0))
}

/// The eigenvalues (nondecreasing) and eigenvectors (columns) of each symmetric matrix, reading
/// the lower triangle (`uplo` "L") or the upper ("U"). Complex Hermitian matrices give float32
/// eigenvalues and complex64 eigenvectors.
pub fn eigh(a: impl AsArray, uplo: &str) -> Result<(Array, Array)> {
    let mut r = symmetric_eigen("linalg.eigh", &a.as_array(), uplo, true)?;
    let v = r.pop().unwrap();
    Ok((r.pop().unwrap(), v))
}

/// The eigenvalues (nondecreasing) of each symmetric matrix; see [`eigh`].
pub fn eigvalsh(a: impl AsArray, uplo: &str) -> Result<Array> {
    Ok(symmetric_eigen("linalg.eigvalsh", &a.as_array(), uplo, false)?.remove(0))
}

fn symmetric_eigen(op: &'static str, a: &Array, uplo: &str, vectors: bool) -> Result<Vec<Array>> {
    let upper = match uplo {
        "L" => false,
        "U" => true,
        other => return Err(Error::value(op, format!("UPLO must be \"L\" or \"U\", got {other:?}"))),
    };
    call(op, std::slice::from_ref(a), move |a| {
        // Complex Hermitian matrices: float32 eigenvalues and complex64 eigenvectors.
        let complex = a[0].dtype() == Dtype::C64;
        let (x, dtype) = if complex { (a[0].clone(), Dtype::C64) } else { float_input(op, &a[0], false)? };
        let b = Batch { flag: upper, ..matrices(op, &x, true)? };
        let (values, vectors_dtype) = if complex { (Some(Dtype::F32), Some(Dtype::C64)) } else { (None, None) };
        let w = (x.shape()[..x.ndim() - 1].to_vec(), values);
        let outputs = if vectors { vec![w, (x.shape().to_vec(), vectors_dtype)] } else { vec![w] };
        let body = match (complex, vectors) {
            (false, true) => kernels::eigh,
            (false, false) => kernels::eigvalsh,
            (true, true) => kernels::eigh_complex,
            (true, false) => kernels::eigvalsh_complex,
        };
        run(op, &[x], &outputs, dtype, b, body)
    })
}

/// The eigenvalues and right eigenvectors (columns, unit 2-norm) of each general square matrix,
/// real or complex64, as complex64 (real matrices have complex eigenvalues in conjugate pairs),
/// in faer's order: `A @ V == V * w[..., None, :]`. Computed in float64 and rounded once.
pub fn eig(a: impl AsArray) -> Result<(Array, Array)> {
    let mut r = general_eigen("linalg.eig", &a.as_array(), true)?;
    let v = r.pop().unwrap();
    Ok((r.pop().unwrap(), v))
}

/// The eigenvalues of each general square matrix, as complex64; see [`eig`].
pub fn eigvals(a: impl AsArray) -> Result<Array> {
    Ok(general_eigen("linalg.eigvals", &a.as_array(), false)?.remove(0))
}

fn general_eigen(op: &'static str, a: &Array, vectors: bool) -> Result<Vec<Array>> {
    call(op, std::slice::from_ref(a), move |a| {
        let complex = a[0].dtype() == Dtype::C64;
        let x = if complex { a[0].clone() } else { float_input(op, &a[0], false)?.0 };
        let b = Batch { flag: vectors, ..matrices(op, &x, true)? };
        let w = (x.shape()[..x.ndim() - 1].to_vec(), Some(Dtype::C64));
        let outputs = if vectors { vec![w, (x.shape().to_vec(), Some(Dtype::C64))] } else { vec![w] };
        run(op, &[x], &outputs, Dtype::C64, b, if complex { kernels::eig_complex } else { kernels::eig })
    })
}

/// The LU factorization with partial pivoting of each matrix: `[P (m, uint32), L (m × k, unit
/// lower), U (k × n)]`, k = min(m, n), with `L[P] @ U == A`.
pub fn lu(a: impl AsArray) -> Result<(Array, Array, Array)> {
    let op = "linalg.lu";
    let mut r = call(op, &[a.as_array()], move |a| {
        let (x, dtype) = float_input(op, &a[0], false)?;
        let b = matrices(op, &x, false)?;
        let k = b.m.min(b.n);
        let p = (x.shape()[..x.ndim() - 1].to_vec(), Some(Dtype::U32));
        let outputs = [p, (with_tail(x.shape(), &[b.m, k]), None), (with_tail(x.shape(), &[k, b.n]), None)];
        run(op, &[x], &outputs, dtype, b, kernels::lu)
    })?;
    let u = r.pop().unwrap();
    let l = r.pop().unwrap();
    Ok((r.pop().unwrap(), l, u))
}

/// The LU factorization packed as LAPACK's: `[LU (m × n: L below the diagonal, its unit diagonal
/// implied, U on and above), pivots (k, uint32)]`, where row i was swapped with row pivots[i].
pub fn lu_factor(a: impl AsArray) -> Result<(Array, Array)> {
    let op = "linalg.lu_factor";
    let mut r = call(op, &[a.as_array()], move |a| {
        let (x, dtype) = float_input(op, &a[0], false)?;
        let b = matrices(op, &x, false)?;
        let k = b.m.min(b.n);
        let pivots = (x.shape()[..x.ndim() - 2].iter().copied().chain([k]).collect(), Some(Dtype::U32));
        let outputs = [(x.shape().to_vec(), None), pivots];
        run(op, &[x], &outputs, dtype, b, kernels::lu_factor)
    })?;
    let p = r.pop().unwrap();
    Ok((r.pop().unwrap(), p))
}

/// The determinant of each square matrix (integers promote to float32; 1 for 0 × 0).
pub fn det(a: impl AsArray) -> Result<Array> {
    Ok(determinant("linalg.det", &a.as_array(), kernels::det, 1)?.remove(0))
}

/// The sign (-1, 0 or 1) and the log of the absolute value of each determinant: exact where the
/// determinant itself would overflow; (0, -inf) for a singular matrix.
pub fn slogdet(a: impl AsArray) -> Result<(Array, Array)> {
    let mut r = determinant("linalg.slogdet", &a.as_array(), kernels::slogdet, 2)?;
    let l = r.pop().unwrap();
    Ok((r.pop().unwrap(), l))
}

/// `outputs` arrays of the batch shape from the determinant body `body`.
fn determinant(op: &'static str, a: &Array, body: Body, outputs: usize) -> Result<Vec<Array>> {
    call(op, std::slice::from_ref(a), move |a| {
        let (x, dtype) = float_input(op, &a[0], true)?;
        let b = matrices(op, &x, true)?;
        let shape = (x.shape()[..x.ndim() - 2].to_vec(), None);
        run(op, &[x], &vec![shape; outputs], dtype, b, body)
    })
}

/// Solves `a @ x = b` for each square `a`. `b` is one vector (n) or a batch of matrices
/// (..., n, k), as in mlx and numpy 2; batch axes broadcast.
pub fn solve(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    linear_solve("linalg.solve", &a.as_array(), &b.as_array(), None)
}

/// Solves `a @ x = b` for each triangular `a` (`upper` or lower; the other triangle is not read);
/// `b` as in [`solve`].
pub fn solve_triangular(a: impl AsArray, b: impl AsArray, upper: bool) -> Result<Array> {
    linear_solve("linalg.solve_triangular", &a.as_array(), &b.as_array(), Some(upper))
}

/// Whether `b` is one vector is decided here, from the call's own shapes: under vmap the
/// batched `b` of vectors has two axes, and stays a batch of vectors.
fn linear_solve(op: &'static str, a: &Array, b: &Array, triangular: Option<bool>) -> Result<Array> {
    let vector = b.ndim() == 1;
    Ok(call(op, &[a.clone(), b.clone()], move |x| Ok(vec![solve_batch(op, &x[0], &x[1], triangular, vector)?]))?.remove(0))
}

fn solve_batch(op: &str, a: &Array, b: &Array, triangular: Option<bool>, vector: bool) -> Result<Array> {
    let (_, dtype) = float_input(op, &ops::astype(a, crate::dtype::promote_types(a.dtype(), b.dtype()))?, false)?;
    let a = ops::astype(a, Dtype::F64)?;
    let b = ops::astype(b, Dtype::F64)?;
    let ba = matrices(op, &a, true)?;
    let b = if vector { ops::expand_dims(&b, &[-1])? } else { b };
    if b.ndim() < 2 || b.shape()[b.ndim() - 2] != ba.n {
        return Err(Error::shape(
            op,
            format!("the right-hand side must have {} rows to match a of shape {}, got shape {}", ba.n, fmt_shape(a.shape()), fmt_shape(b.shape())),
        ));
    }
    let k = b.shape()[b.ndim() - 1];
    let batch = broadcast_shapes(op, &a.shape()[..a.ndim() - 2], &b.shape()[..b.ndim() - 2])
        .map_err(|_| Error::shape(op, format!("batch shapes of a {} and b {} do not broadcast", fmt_shape(a.shape()), fmt_shape(b.shape()))))?;
    let a = ops::broadcast_to(&a, &[batch.as_slice(), &[ba.n, ba.n]].concat())?;
    let b = ops::broadcast_to(&b, &[batch.as_slice(), &[ba.n, k]].concat())?;
    let plan = Batch { count: numel(&batch), m: ba.n, n: ba.n, k, flag: triangular.unwrap_or(false), eps: epsilon(dtype) };
    let body = if triangular.is_some() { kernels::solve_triangular } else { kernels::solve };
    let shape = b.shape().to_vec();
    let x = run(op, &[a, b], &[(shape, None)], dtype, plan, body)?.remove(0);
    if vector {
        ops::squeeze(&x, Some(&[-1]))
    } else {
        Ok(x)
    }
}
