//! The host bodies of the `linalg` ops: each reads its batch of row-major matrices, calls faer on
//! each matrix, and writes the row-major results. All in float64 (see the module above).

use super::Batch;
use crate::complex::Complex64;
use crate::error::{Error, Result};
use crate::kernel::KernelArgs;
use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::{c64, Mat, MatMut, MatRef, Par, Side};

/// Matrix `i` (m × n) of a row-major batch.
fn matrix(data: &[f64], i: usize, m: usize, n: usize) -> MatRef<'_, f64> {
    MatRef::from_row_major_slice(&data[i * m * n..(i + 1) * m * n], m, n)
}

/// Writes `mat` as block `i` of the row-major batch `out`; with `keep`, only the entries it
/// accepts (row, column), zeros elsewhere.
fn store(out: &mut [f64], i: usize, mat: MatRef<'_, f64>, keep: impl Fn(usize, usize) -> bool) {
    let (r, c) = (mat.nrows(), mat.ncols());
    let block = &mut out[i * r * c..(i + 1) * r * c];
    for row in 0..r {
        for col in 0..c {
            block[row * c + col] = if keep(row, col) { *mat.get(row, col) } else { 0.0 };
        }
    }
}

fn all(_: usize, _: usize) -> bool {
    true
}

/// Keeps the upper (`upper`) or lower triangle, diagonal included.
fn triangle(upper: bool) -> impl Fn(usize, usize) -> bool {
    move |r, c| if upper { c >= r } else { c <= r }
}

fn identity(n: usize) -> Mat<f64> {
    Mat::from_fn(n, n, |i, j| if i == j { 1.0 } else { 0.0 })
}

/// Matrix `i` of the op's batch is singular: the error for ops that need an inverse.
fn singular(op: &str, i: usize) -> Error {
    Error::value(op, format!("matrix {i} of the batch is singular (a zero pivot in its LU factorization); linalg.pinv or linalg.lstsq-style methods handle such matrices"))
}

pub(crate) fn inverse(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for i in 0..b.count {
        let m = matrix(&a, i, b.n, b.n);
        let lu = m.partial_piv_lu();
        if is_singular(m, lu.U()) {
            return Err(singular("linalg.inv", i));
        }
        store(out, i, lu.inverse().as_ref(), all);
    }
    Ok(())
}

/// The inverse of a triangular matrix, the other triangle zero.
fn triangular_inverse_of(m: MatRef<'_, f64>, upper: bool) -> Mat<f64> {
    let mut inv = Mat::zeros(m.nrows(), m.ncols());
    if upper {
        faer::linalg::triangular_inverse::invert_upper_triangular(inv.as_mut(), m, Par::Seq);
    } else {
        faer::linalg::triangular_inverse::invert_lower_triangular(inv.as_mut(), m, Par::Seq);
    }
    inv
}

pub(crate) fn triangular_inverse(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for i in 0..b.count {
        store(out, i, triangular_inverse_of(matrix(&a, i, b.n, b.n), b.flag).as_ref(), triangle(b.flag));
    }
    Ok(())
}

pub(crate) fn cholesky(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for i in 0..b.count {
        let m = matrix(&a, i, b.n, b.n);
        let l = match m.llt(Side::Lower) {
            Ok(llt) => llt.L().to_owned(),
            Err(_) => semidefinite_cholesky(m, b.eps)
                .ok_or_else(|| Error::value("linalg.cholesky", format!("matrix {i} of the batch is not positive definite")))?,
        };
        if b.flag {
            store(out, i, l.as_ref().transpose(), triangle(true));
        } else {
            store(out, i, l.as_ref(), triangle(false));
        }
    }
    Ok(())
}

/// The Cholesky factor of a positive semidefinite matrix that faer refuses (a pivot at or just
/// below zero, by rounding), reading its lower triangle: a pivot within `n · eps · max |diagonal|`
/// of zero counts as zero, with a zero column below it, which holds when the column's entries are
/// within that rounding too (as semidefiniteness implies); None for anything else.
fn semidefinite_cholesky(a: MatRef<'_, f64>, eps: f64) -> Option<Mat<f64>> {
    let n = a.nrows();
    let scale = (0..n).map(|d| a.get(d, d).abs()).fold(0.0, f64::max);
    let tolerance = n as f64 * eps * scale;
    let mut l = Mat::<f64>::zeros(n, n);
    for j in 0..n {
        let pivot = *a.get(j, j) - (0..j).map(|k| l[(j, k)] * l[(j, k)]).sum::<f64>();
        if pivot.is_nan() || pivot < -tolerance {
            return None;
        }
        let ljj = pivot.max(0.0).sqrt();
        l[(j, j)] = if pivot > tolerance { ljj } else { 0.0 };
        for r in j + 1..n {
            let v = *a.get(r, j) - (0..j).map(|k| l[(r, k)] * l[(j, k)]).sum::<f64>();
            if pivot > tolerance {
                l[(r, j)] = v / ljj;
            } else if v.abs() > (tolerance * scale).sqrt() {
                return None;
            }
        }
    }
    Some(l)
}

pub(crate) fn cholesky_inverse(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for i in 0..b.count {
        let f = triangular_inverse_of(matrix(&a, i, b.n, b.n), b.flag);
        // A = L Lᵀ gives A⁻¹ = L⁻ᵀ L⁻¹; A = Uᵀ U gives A⁻¹ = U⁻¹ U⁻ᵀ.
        let inv = if b.flag { f.as_ref() * f.as_ref().transpose() } else { f.as_ref().transpose() * f.as_ref() };
        store(out, i, inv.as_ref(), all);
    }
    Ok(())
}

pub(crate) fn qr(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    if b.m.min(b.n) == 0 {
        return Ok(());
    }
    let mut results = Vec::with_capacity(b.count);
    for i in 0..b.count {
        let qr = matrix(&a, i, b.m, b.n).qr();
        results.push((qr.compute_thin_Q(), qr.thin_R().to_owned()));
    }
    for (k, pick) in [0, 1].into_iter().enumerate() {
        let out = args.output::<f64>(k)?;
        for (i, (q, r)) in results.iter().enumerate() {
            let m = if pick == 0 { q.as_ref() } else { r.as_ref() };
            store(out, i, m, |row, col| pick == 0 || col >= row);
        }
    }
    Ok(())
}

fn svd_error(op: &str, i: usize) -> Error {
    Error::value(op, format!("the SVD of matrix {i} of the batch did not converge (does it hold NaN or infinity?)"))
}

pub(crate) fn svd(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let k = b.m.min(b.n);
    if !b.flag {
        let out = args.output::<f64>(0)?;
        for i in 0..b.count {
            let s = if k == 0 { Vec::new() } else { matrix(&a, i, b.m, b.n).singular_values().map_err(|_| svd_error("linalg.svd", i))? };
            out[i * k..(i + 1) * k].copy_from_slice(&s);
        }
        return Ok(());
    }
    let mut results = Vec::with_capacity(b.count);
    for i in 0..b.count {
        if k == 0 {
            results.push((identity(b.m), Vec::new(), identity(b.n)));
            continue;
        }
        let svd = matrix(&a, i, b.m, b.n).svd().map_err(|_| svd_error("linalg.svd", i))?;
        let s = (0..k).map(|d| *svd.S().column_vector().get(d)).collect();
        results.push((svd.U().to_owned(), s, svd.V().transpose().to_owned()));
    }
    for (i, (u, s, vt)) in results.iter().enumerate() {
        store(args.output::<f64>(0)?, i, u.as_ref(), all);
        args.output::<f64>(1)?[i * k..(i + 1) * k].copy_from_slice(s);
        store(args.output::<f64>(2)?, i, vt.as_ref(), all);
    }
    Ok(())
}

pub(crate) fn pseudo_inverse(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    if b.m.min(b.n) == 0 {
        out.fill(0.0);
        return Ok(());
    }
    for i in 0..b.count {
        let svd = matrix(&a, i, b.m, b.n).thin_svd().map_err(|_| svd_error("linalg.pinv", i))?;
        let s = svd.S().column_vector();
        let largest = *s.get(0);
        let cutoff = largest * b.m.max(b.n) as f64 * f64::EPSILON;
        // A⁺ = V diag(1/s) Uᵀ over the singular values above the cutoff.
        let scaled = Mat::from_fn(b.n, s.nrows(), |r, c| {
            let sv = *s.get(c);
            if sv > cutoff { *svd.V().get(r, c) / sv } else { 0.0 }
        });
        store(out, i, (scaled.as_ref() * svd.U().transpose()).as_ref(), all);
    }
    Ok(())
}

fn side(upper: bool) -> Side {
    if upper {
        Side::Upper
    } else {
        Side::Lower
    }
}

fn eigen_error(op: &str, i: usize) -> Error {
    Error::value(op, format!("the eigendecomposition of matrix {i} of the batch did not converge (does it hold NaN or infinity?)"))
}

pub(crate) fn eigh(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let mut results = Vec::with_capacity(b.count);
    for i in 0..b.count {
        if b.n == 0 {
            break;
        }
        let e = matrix(&a, i, b.n, b.n).self_adjoint_eigen(side(b.flag)).map_err(|_| eigen_error("linalg.eigh", i))?;
        let w: Vec<f64> = (0..b.n).map(|d| *e.S().column_vector().get(d)).collect();
        results.push((w, e.U().to_owned()));
    }
    for (i, (w, v)) in results.iter().enumerate() {
        args.output::<f64>(0)?[i * b.n..(i + 1) * b.n].copy_from_slice(w);
        store(args.output::<f64>(1)?, i, v.as_ref(), all);
    }
    Ok(())
}

pub(crate) fn eigvalsh(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for i in 0..b.count {
        if b.n == 0 {
            break;
        }
        let w = matrix(&a, i, b.n, b.n).self_adjoint_eigenvalues(side(b.flag)).map_err(|_| eigen_error("linalg.eigvalsh", i))?;
        out[i * b.n..(i + 1) * b.n].copy_from_slice(&w);
    }
    Ok(())
}

/// Matrix `i` (m × n) of a row-major complex64 batch, in complex float64.
fn complex_matrix(data: &[Complex64], i: usize, m: usize, n: usize) -> Mat<c64> {
    Mat::from_fn(m, n, |r, c| {
        let z = data[i * m * n + r * n + c];
        c64::new(z.re as f64, z.im as f64)
    })
}

fn narrow(z: &c64) -> Complex64 {
    Complex64::new(z.re as f32, z.im as f32)
}

/// Writes `mat` as block `i` of the row-major complex64 batch `out`.
fn store_complex(out: &mut [Complex64], i: usize, mat: MatRef<'_, c64>) {
    let (r, c) = (mat.nrows(), mat.ncols());
    for row in 0..r {
        for col in 0..c {
            out[i * r * c + row * c + col] = narrow(mat.get(row, col));
        }
    }
}

/// One general eigendecomposition: eigenvalues and, when asked, eigenvector columns scaled to
/// unit 2-norm, as LAPACK's geev returns them.
type GeneralEigen = (Vec<c64>, Option<Mat<c64>>);

fn general_eigen_of<M>(m: MatRef<'_, M>, vectors: bool) -> std::result::Result<GeneralEigen, faer::linalg::evd::EvdError>
where
    M: faer::traits::Conjugate<Canonical = M> + faer::traits::ComplexField<Real = f64>,
{
    if !vectors {
        return Ok((m.eigenvalues()?, None));
    }
    let e = m.eigen()?;
    let n = m.nrows();
    let w = (0..n).map(|d| *e.S().column_vector().get(d)).collect();
    let norms: Vec<f64> = (0..n).map(|c| (0..n).map(|r| e.U().get(r, c).norm_sqr()).sum::<f64>().sqrt()).collect();
    let v = Mat::from_fn(n, n, |r, c| e.U().get(r, c) / if norms[c] > 0.0 { norms[c] } else { 1.0 });
    Ok((w, Some(v)))
}

/// Writes the eigenvalues (output 0) and, with `b.flag`, the eigenvectors (output 1) of each
/// matrix, as complex64.
fn write_general_eigen(args: &mut KernelArgs, b: Batch, results: Vec<GeneralEigen>) -> Result<()> {
    for (i, (w, v)) in results.iter().enumerate() {
        let out = args.output::<Complex64>(0)?;
        w.iter().enumerate().for_each(|(d, z)| out[i * b.n + d] = narrow(z));
        if let Some(v) = v {
            store_complex(args.output::<Complex64>(1)?, i, v.as_ref());
        }
    }
    Ok(())
}

fn eig_op(b: Batch) -> &'static str {
    if b.flag { "linalg.eig" } else { "linalg.eigvals" }
}

/// The eigenvalues (output 0) and, with `b.flag`, the eigenvectors (output 1, columns) of each
/// general real matrix, rounded once to complex64.
pub(crate) fn eig(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let results = (0..b.count * usize::from(b.n > 0))
        .map(|i| general_eigen_of(matrix(&a, i, b.n, b.n), b.flag).map_err(|_| eigen_error(eig_op(b), i)))
        .collect::<Result<Vec<_>>>()?;
    write_general_eigen(args, b, results)
}

/// [`eig`] of complex64 matrices.
pub(crate) fn eig_complex(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<Complex64>(0)?.to_vec();
    let results = (0..b.count * usize::from(b.n > 0))
        .map(|i| general_eigen_of(complex_matrix(&a, i, b.n, b.n).as_ref(), b.flag).map_err(|_| eigen_error(eig_op(b), i)))
        .collect::<Result<Vec<_>>>()?;
    write_general_eigen(args, b, results)
}

/// [`eigh`] of complex Hermitian matrices: float32 eigenvalues, complex64 eigenvectors.
pub(crate) fn eigh_complex(args: &mut KernelArgs, b: Batch) -> Result<()> {
    hermitian_eigen(args, b, true)
}

/// [`eigvalsh`] of complex Hermitian matrices: float32 eigenvalues.
pub(crate) fn eigvalsh_complex(args: &mut KernelArgs, b: Batch) -> Result<()> {
    hermitian_eigen(args, b, false)
}

/// The real eigenvalues (output 0, float32) and, with `vectors`, the eigenvectors (output 1,
/// complex64 columns) of each complex Hermitian matrix, reading the triangle `b.flag` names.
fn hermitian_eigen(args: &mut KernelArgs, b: Batch, vectors: bool) -> Result<()> {
    let a = args.input::<Complex64>(0)?.to_vec();
    let op = if vectors { "linalg.eigh" } else { "linalg.eigvalsh" };
    for i in 0..b.count * usize::from(b.n > 0) {
        let e = complex_matrix(&a, i, b.n, b.n).self_adjoint_eigen(side(b.flag)).map_err(|_| eigen_error(op, i))?;
        let w = args.output::<f32>(0)?;
        (0..b.n).for_each(|d| w[i * b.n + d] = e.S().column_vector().get(d).re as f32);
        if vectors {
            store_complex(args.output::<Complex64>(1)?, i, e.U());
        }
    }
    Ok(())
}

/// The SVD of each complex64 matrix: U (output 0, complex64), the singular values (output 1,
/// float32) and Vᴴ (output 2, complex64); the singular values alone (output 0) without `b.flag`.
pub(crate) fn svd_complex(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<Complex64>(0)?.to_vec();
    let k = b.m.min(b.n);
    for i in 0..b.count * usize::from(k > 0) {
        let svd = complex_matrix(&a, i, b.m, b.n).svd().map_err(|_| svd_error("linalg.svd", i))?;
        let s = args.output::<f32>(usize::from(b.flag))?;
        (0..k).for_each(|d| s[i * k + d] = svd.S().column_vector().get(d).re as f32);
        if b.flag {
            store_complex(args.output::<Complex64>(0)?, i, svd.U());
            store_complex(args.output::<Complex64>(2)?, i, svd.V().adjoint().to_owned().as_ref());
        }
    }
    if k == 0 && b.flag {
        // Empty matrices: identity factors, as for real ones.
        for i in 0..b.count {
            store_complex(args.output::<Complex64>(0)?, i, Mat::<c64>::identity(b.m, b.m).as_ref());
            store_complex(args.output::<Complex64>(2)?, i, Mat::<c64>::identity(b.n, b.n).as_ref());
        }
    }
    Ok(())
}

/// The LU factors of each matrix, with `rows[i]`: the row of A that row i of L U is.
struct Lu {
    l: Mat<f64>,
    u: Mat<f64>,
    rows: Vec<usize>,
}

fn lu_of(a: &[f64], i: usize, b: Batch) -> Lu {
    if b.m.min(b.n) == 0 {
        return Lu { l: Mat::zeros(b.m, 0), u: Mat::zeros(0, b.n), rows: (0..b.m).collect() };
    }
    let m = matrix(a, i, b.m, b.n);
    let lu = m.partial_piv_lu();
    if all_finite(m) && !(all_finite(lu.L()) && all_finite(lu.U())) {
        return unblocked_lu(m);
    }
    Lu { l: lu.L().to_owned(), u: lu.U().to_owned(), rows: lu.P().arrays().0.to_vec() }
}

fn all_finite(m: MatRef<'_, f64>) -> bool {
    (0..m.nrows()).all(|r| (0..m.ncols()).all(|c| m.get(r, c).is_finite()))
}

/// Whether the LU factor `u` of the finite matrix `m` shows it singular: a zero pivot, or (faer
/// divides by one) a pivot that is not finite.
fn is_singular(m: MatRef<'_, f64>, u: MatRef<'_, f64>) -> bool {
    all_finite(m) && (0..u.nrows().min(u.ncols())).any(|d| !(*u.get(d, d) != 0.0 && u.get(d, d).is_finite()))
}

/// LAPACK's unblocked LU with partial pivoting (getf2), for the singular matrices faer's leaves
/// with NaN: faer divides by a zero pivot, where LAPACK leaves that column (all zero below the
/// pivot) and goes on, so L[P] U = A still holds, with a zero on U's diagonal.
fn unblocked_lu(a: MatRef<'_, f64>) -> Lu {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    let mut w = a.to_owned();
    let mut rows: Vec<usize> = (0..m).collect();
    for j in 0..k {
        // The first row with the largest magnitude in column j, as LAPACK's pivot search.
        let p = (j..m).fold(j, |best, r| if w[(r, j)].abs() > w[(best, j)].abs() { r } else { best });
        if p != j {
            for c in 0..n {
                let t = w[(p, c)];
                w[(p, c)] = w[(j, c)];
                w[(j, c)] = t;
            }
            rows.swap(p, j);
        }
        let pivot = w[(j, j)];
        for r in j + 1..m {
            if pivot != 0.0 {
                w[(r, j)] /= pivot;
            }
            let l = w[(r, j)];
            for c in j + 1..n {
                w[(r, c)] -= l * w[(j, c)];
            }
        }
    }
    let l = Mat::from_fn(m, k, |r, c| if r == c { 1.0 } else if r > c { w[(r, c)] } else { 0.0 });
    let u = Mat::from_fn(k, n, |r, c| if c >= r { w[(r, c)] } else { 0.0 });
    Lu { l, u, rows }
}

pub(crate) fn lu(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let factors: Vec<Lu> = (0..b.count).map(|i| lu_of(&a, i, b)).collect();
    for (i, f) in factors.iter().enumerate() {
        // mlx's P: L[P] @ U == A, so P[j] is the row of L U that row j of A is.
        let p = &mut args.output::<u32>(0)?[i * b.m..(i + 1) * b.m];
        for (position, &row) in f.rows.iter().enumerate() {
            p[row] = position as u32;
        }
        store(args.output::<f64>(1)?, i, f.l.as_ref(), all);
        store(args.output::<f64>(2)?, i, f.u.as_ref(), all);
    }
    Ok(())
}

pub(crate) fn lu_factor(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let k = b.m.min(b.n);
    let factors: Vec<Lu> = (0..b.count).map(|i| lu_of(&a, i, b)).collect();
    for (i, f) in factors.iter().enumerate() {
        let packed = Mat::from_fn(b.m, b.n, |r, c| if r > c { *f.l.get(r, c) } else { *f.u.get(r, c) });
        store(args.output::<f64>(0)?, i, packed.as_ref(), all);
        // The row order as LAPACK's sequence of swaps: step j swaps row j with pivots[j].
        let pivots = &mut args.output::<u32>(1)?[i * k..(i + 1) * k];
        let mut order: Vec<usize> = (0..b.m).collect();
        for (j, pivot) in pivots.iter_mut().enumerate() {
            let at = (j..b.m).find(|&p| order[p] == f.rows[j]).expect("a permutation");
            order.swap(j, at);
            *pivot = at as u32;
        }
    }
    Ok(())
}

/// The sign of a permutation (+1 even, -1 odd), by counting its cycles.
fn permutation_sign(rows: &[usize]) -> f64 {
    let mut seen = vec![false; rows.len()];
    let mut sign = 1.0;
    for start in 0..rows.len() {
        let mut at = start;
        let mut length = 0;
        while !seen[at] {
            seen[at] = true;
            at = rows[at];
            length += 1;
        }
        if length % 2 == 0 && length > 0 {
            sign = -sign;
        }
    }
    sign
}

/// The sign and log |det| of matrix `i` (sign 0 and -inf when singular).
fn signed_log_det(a: &[f64], i: usize, b: Batch) -> (f64, f64) {
    let f = lu_of(a, i, b);
    let mut sign = permutation_sign(&f.rows);
    let mut log = 0.0;
    for d in 0..b.n {
        let u = *f.u.get(d, d);
        if u == 0.0 {
            return (0.0, f64::NEG_INFINITY);
        }
        sign *= u.signum();
        log += u.abs().ln();
    }
    (sign, log)
}

pub(crate) fn det(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let out = args.output::<f64>(0)?;
    for (i, o) in out.iter_mut().enumerate() {
        let f = lu_of(&a, i, b);
        let product = (0..b.n).fold(permutation_sign(&f.rows), |p, d| p * f.u.get(d, d));
        *o = product;
    }
    Ok(())
}

pub(crate) fn slogdet(args: &mut KernelArgs, b: Batch) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let results: Vec<(f64, f64)> = (0..b.count).map(|i| signed_log_det(&a, i, b)).collect();
    for (i, (sign, log)) in results.into_iter().enumerate() {
        args.output::<f64>(0)?[i] = sign;
        args.output::<f64>(1)?[i] = log;
    }
    Ok(())
}

/// Solves each system of the batch with `solve_one` (the system's index, its matrix, and its
/// right-hand sides, overwritten with the solution).
fn solve_each(args: &mut KernelArgs, b: Batch, solve_one: impl Fn(usize, MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()>) -> Result<()> {
    let a = args.input::<f64>(0)?.to_vec();
    let rhs = args.input::<f64>(1)?.to_vec();
    let out = args.output::<f64>(0)?;
    if b.n == 0 || b.k == 0 {
        return Ok(());
    }
    for i in 0..b.count {
        let mut x = matrix(&rhs, i, b.n, b.k).to_owned();
        solve_one(i, matrix(&a, i, b.n, b.n), x.as_mut())?;
        store(out, i, x.as_ref(), all);
    }
    Ok(())
}

pub(crate) fn solve(args: &mut KernelArgs, b: Batch) -> Result<()> {
    solve_each(args, b, |i, m, x| {
        let lu = m.partial_piv_lu();
        if is_singular(m, lu.U()) {
            return Err(singular("linalg.solve", i));
        }
        lu.solve_in_place(x);
        Ok(())
    })
}

pub(crate) fn solve_triangular(args: &mut KernelArgs, b: Batch) -> Result<()> {
    solve_each(args, b, |_, m, x| {
        if b.flag {
            faer::linalg::triangular_solve::solve_upper_triangular_in_place(m, x, Par::Seq);
        } else {
            faer::linalg::triangular_solve::solve_lower_triangular_in_place(m, x, Par::Seq);
        }
        Ok(())
    })
}
