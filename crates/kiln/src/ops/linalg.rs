//! Matrix products.

use super::creation::arange;
use super::elementwise::{astype, greater_equal, less, logical_and, multiply, where_};
use super::index::take;
use super::shape::{
    broadcast_against, broadcast_arrays, broadcast_to, expand_dims, flatten, reshape, slice, slice_axis, squeeze,
    SliceSpec,
};
use super::{promote_pair, AsArray};
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::primitive::Op;
use crate::shape::{broadcast_shapes, fmt_shape};

/// Matrix product with numpy rules: 1-d operands are promoted to a row / column and the added axis
/// removed; leading (batch) axes broadcast. Integer products wrap in their dtype and boolean
/// ones are ORs of ANDs, as numpy's (mlx refuses both).
pub fn matmul(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let (a, b) = promote_pair("matmul", &a.as_array(), &b.as_array())?;
    let (a, b, a1, b1) = matrix_operands("matmul", a, b)?;
    let (na, nb) = (a.ndim(), b.ndim());
    let batch = broadcast_shapes("matmul", &a.shape()[..na - 2], &b.shape()[..nb - 2])?;
    let operands = [a.clone(), b.clone()];
    let with_batch = |x: &Array| -> Result<Array> {
        let n = x.ndim();
        let mut s = batch.clone();
        s.extend_from_slice(&x.shape()[n - 2..]);
        broadcast_against(x, &operands, 2, &s)
    };
    let out = Array::from_op(Op::Matmul, vec![with_batch(&a)?, with_batch(&b)?])?;
    without_vector_axes(out, a1, b1)
}

/// mlx's `gather_mm`: matrix products of the matrices `lhs_indices` picks from `a`'s batch (its
/// leading axes, flattened) with those `rhs_indices` picks from `b`'s, the two index arrays
/// broadcast together; an omitted index array picks its operand's matrices in order. The result
/// has the indices' broadcast shape followed by (M, N); 1-d operands follow matmul's rule.
/// `sorted_indices` is mlx's hint that the indices are sorted (it picks a faster kernel there);
/// the result does not depend on it. Indices out of range are clamped, as in `take`.
pub fn gather_mm(
    a: impl AsArray,
    b: impl AsArray,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    _sorted_indices: bool,
) -> Result<Array> {
    let (a, b) = (a.as_array(), b.as_array());
    if lhs_indices.is_none() && rhs_indices.is_none() {
        return matmul(a, b).map_err(|e| e.in_op("gather_mm"));
    }
    let (a, b, a1, b1) = float_operands("gather_mm", a, b)?;
    // Each operand as a stack of matrices, and the indices into that stack.
    let stack_and_indices = |x: &Array, indices: Option<&Array>| -> Result<(Array, Array)> {
        let stack = if x.ndim() == 2 { expand_dims(x, &[0])? } else { flatten(x, 0, -3)? };
        let indices = match indices {
            Some(i) if !i.dtype().is_integer() => {
                return Err(Error::dtype("gather_mm", format!("indices must be integers, got {}", i.dtype())));
            }
            Some(i) => i.clone(),
            None => {
                let batch: Vec<i64> = x.shape()[..x.ndim() - 2].iter().map(|&d| d as i64).collect();
                reshape(arange(0.0, stack.shape()[0] as f64, 1.0, Dtype::U32)?, &batch)?
            }
        };
        Ok((stack, indices))
    };
    let (a_stack, lhs) = stack_and_indices(&a, lhs_indices)?;
    let (b_stack, rhs) = stack_and_indices(&b, rhs_indices)?;
    let both = broadcast_arrays(&[lhs, rhs]).map_err(|e| e.in_op("gather_mm"))?;
    let out = matmul(take(&a_stack, &both[0], Some(0))?, take(&b_stack, &both[1], Some(0))?)?;
    without_vector_axes(out, a1, b1)
}

/// The operands of a product promoted to a real floating type (`op` names the caller in
/// errors) and checked as matmul checks them ([`matrix_operands`]).
fn float_operands(op: &str, a: Array, b: Array) -> Result<(Array, Array, bool, bool)> {
    let (a, b) = promote_pair(op, &a, &b)?;
    if !a.dtype().is_float() {
        return Err(Error::dtype(op, format!("needs real floating-point inputs, got {} (cast with astype(float32))", a.dtype())));
    }
    matrix_operands(op, a, b)
}

/// The operands of a product with at least one dimension each and matching inner dimensions,
/// 1-d ones made a row (`a`) or a column (`b`); with whether each was 1-d, so the caller removes
/// that axis from the result again ([`without_vector_axes`]).
fn matrix_operands(op: &str, a: Array, b: Array) -> Result<(Array, Array, bool, bool)> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(Error::shape(op, "inputs must have at least one dimension; use multiply for scalars"));
    }
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    let a = if a1 { expand_dims(&a, &[0])? } else { a };
    let b = if b1 { expand_dims(&b, &[-1])? } else { b };
    if a.shape()[a.ndim() - 1] != b.shape()[b.ndim() - 2] {
        return Err(Error::shape(
            op,
            format!(
                "last dimension of the first input must equal the second-to-last of the second, got {} and {}",
                fmt_shape(a.shape()),
                fmt_shape(b.shape())
            ),
        ));
    }
    Ok((a, b, a1, b1))
}

/// `out` without the axes added for 1-d operands (see [`matrix_operands`]).
fn without_vector_axes(out: Array, a1: bool, b1: bool) -> Result<Array> {
    let out = if a1 { squeeze(&out, Some(&[-2]))? } else { out };
    if b1 { squeeze(&out, Some(&[-1])) } else { Ok(out) }
}

/// mlx's `block_masked_mm`: a matrix product whose operands and result are masked in square
/// blocks of `block_size`. Each mask has one entry per block (`ceil(rows / block_size)` by
/// `ceil(cols / block_size)`, edge blocks partial) and broadcasts to the batch: `mask_lhs` over
/// `a`'s (M, K), `mask_rhs` over `b`'s (K, N), `mask_out` over the (M, N) result. A boolean mask
/// keeps or zeroes its blocks; a float mask scales them (operand masks select only when both are
/// boolean, as in mlx). Without masks this is `matmul`. mlx's kernels take block sizes 32 and
/// 64 only; any positive size works here.
pub fn block_masked_mm(
    a: impl AsArray,
    b: impl AsArray,
    block_size: usize,
    mask_out: Option<&Array>,
    mask_lhs: Option<&Array>,
    mask_rhs: Option<&Array>,
) -> Result<Array> {
    const OP: &str = "block_masked_mm";
    let (a, b) = (a.as_array(), b.as_array());
    if mask_out.is_none() && mask_lhs.is_none() && mask_rhs.is_none() {
        return matmul(a, b).map_err(|e| e.in_op(OP));
    }
    if block_size == 0 {
        return Err(Error::value(OP, "block_size must be positive"));
    }
    let (a, b, a1, b1) = float_operands(OP, a, b)?;
    let (m, k, n) = (a.shape()[a.ndim() - 2], a.shape()[a.ndim() - 1], b.shape()[b.ndim() - 1]);
    let batch = broadcast_shapes(OP, &a.shape()[..a.ndim() - 2], &b.shape()[..b.ndim() - 2])?;
    let dtype = a.dtype();
    // A mask at element resolution: its blocks repeated, cut to (rows, cols); `vector_axis` is
    // where a 1-d operand's missing axis goes in the mask.
    let expand = |name: &str, mask: &Array, rows: usize, cols: usize, vector_axis: Option<i64>| -> Result<Array> {
        let mask = match vector_axis {
            Some(axis) => expand_dims(mask, &[axis])?,
            None => mask.clone(),
        };
        let blocks = [rows.div_ceil(block_size), cols.div_ceil(block_size)];
        let mut want = batch.clone();
        want.extend_from_slice(&blocks);
        if mask.ndim() < 2 || broadcast_shapes(OP, mask.shape(), &want).map_or(true, |s| s != want) {
            return Err(Error::shape(
                OP,
                format!(
                    "{name} of shape {} must broadcast to {} (one entry per block of {block_size})",
                    fmt_shape(mask.shape()),
                    fmt_shape(&want)
                ),
            ));
        }
        let tiled = [&batch[..], &[blocks[0], block_size, blocks[1], block_size]].concat();
        let mut flat: Vec<i64> = batch.iter().map(|&d| d as i64).collect();
        flat.extend([(blocks[0] * block_size) as i64, (blocks[1] * block_size) as i64]);
        let tiles = reshape(broadcast_to(&expand_dims(&mask, &[-3, -1])?, &tiled)?, &flat)?;
        let nb = batch.len();
        let mut specs = vec![SliceSpec::ALL; nb];
        specs.extend([SliceSpec::range(0, rows as i64), SliceSpec::range(0, cols as i64)]);
        slice(&tiles, &specs)
    };
    let apply = |x: Array, mask: &Array, select: bool| -> Result<Array> {
        if select {
            where_(mask, x, 0.0)
        } else {
            multiply(x, astype(mask, dtype)?)
        }
    };
    let is_bool = |m: Option<&Array>| m.is_none_or(|m| m.dtype() == Dtype::Bool);
    let select_operands = is_bool(mask_lhs) && is_bool(mask_rhs);
    let (row, col) = (a1.then_some(-2), b1.then_some(-1));
    let a = match mask_lhs {
        Some(mask) => apply(a, &expand("mask_lhs", mask, m, k, row)?, select_operands)?,
        None => a,
    };
    let b = match mask_rhs {
        Some(mask) => apply(b, &expand("mask_rhs", mask, k, n, col)?, select_operands)?,
        None => b,
    };
    let mut out = matmul(a, b)?;
    if let Some(mask) = mask_out {
        let mask = match (row, col) {
            (Some(r), Some(_)) => expand_dims(mask, &[r, -1])?,
            (Some(r), None) => expand_dims(mask, &[r])?,
            (None, Some(c)) => expand_dims(mask, &[c])?,
            (None, None) => mask.clone(),
        };
        out = apply(out, &expand("mask_out", &mask, m, n, None)?, mask.dtype() == Dtype::Bool)?;
    }
    without_vector_axes(out, a1, b1)
}

/// mlx's `segmented_mm`: for each `[start, end)` pair in the last axis of `segments`, the product
/// `a[:, start:end] @ b[start:end, :]` (zeros for an empty segment); the result has the
/// segments' leading shape followed by (M, N). `a` and `b` are matrices.
pub fn segmented_mm(a: impl AsArray, b: impl AsArray, segments: impl AsArray) -> Result<Array> {
    const OP: &str = "segmented_mm";
    let (a, b, segments) = (a.as_array(), b.as_array(), &segments.as_array());
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(Error::shape(
            OP,
            format!("takes matrices, got shapes {} and {} (batched products are not supported)", fmt_shape(a.shape()), fmt_shape(b.shape())),
        ));
    }
    if !segments.dtype().is_integer() {
        return Err(Error::dtype(OP, format!("segments must be integers, got {}", segments.dtype())));
    }
    if segments.ndim() < 1 || segments.shape()[segments.ndim() - 1] != 2 {
        return Err(Error::shape(OP, format!("segments must have shape (..., 2), got {}", fmt_shape(segments.shape()))));
    }
    let (a, b, _, _) = float_operands(OP, a, b)?;
    let k = a.shape()[1];
    let positions = arange(0.0, k as f64, 1.0, Dtype::I64)?;
    let bound = |i: i64| -> Result<Array> { astype(slice_axis(segments, -1, i, i + 1)?, Dtype::I64) };
    let inside = logical_and(greater_equal(&positions, bound(0)?)?, less(&positions, bound(1)?)?)?; // (..., K)
    let picked = where_(expand_dims(&inside, &[-2])?, &a, 0.0)?; // (..., M, K)
    matmul(picked, b)
}

/// `beta * c + alpha * (a @ b)`.
/// As mlx, `c` must broadcast to the product's shape (it never enlarges the result).
pub fn addmm(c: impl AsArray, a: impl AsArray, b: impl AsArray, alpha: f64, beta: f64) -> Result<Array> {
    let c = c.as_array();
    let product = || -> Result<Array> {
        let ab = super::multiply(matmul(a, b)?, alpha)?;
        if broadcast_shapes("addmm", c.shape(), ab.shape())?.as_slice() != ab.shape() {
            return Err(Error::shape(
                "addmm",
                format!(
                    "c of shape {} must broadcast to the product's shape {}",
                    fmt_shape(c.shape()),
                    fmt_shape(ab.shape())
                ),
            ));
        }
        super::add(super::multiply(&c, beta)?, ab)
    };
    product().map_err(|e| e.in_op("addmm"))
}

/// The outer product of the flattened inputs.
pub fn outer(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let (a, b) = (a.as_array(), b.as_array());
    let a = super::shape::reshape_to(&a, [a.size(), 1][..].into())?;
    let b = super::shape::reshape_to(&b, [1, b.size()][..].into())?;
    super::multiply(&a, &b)
}

/// Sum product over the last axes of `a` and `b` (a scalar product for 1-d inputs).
pub fn inner(a: impl AsArray, b: impl AsArray) -> Result<Array> {
    let (a, b) = (a.as_array(), b.as_array());
    if a.ndim() == 0 || b.ndim() == 0 {
        return super::multiply(&a, &b);
    }
    let (la, lb) = (a.shape()[a.ndim() - 1], b.shape()[b.ndim() - 1]);
    if la != lb {
        return Err(Error::shape(
            "inner",
            format!("last dimensions must match, got {} and {}", fmt_shape(a.shape()), fmt_shape(b.shape())),
        ));
    }
    tensordot(&a, &b, TensordotAxes::Pairs(vec![-1], vec![-1]))
}

/// Which axes [`tensordot`] contracts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensordotAxes {
    /// The last `n` axes of `a` with the first `n` of `b`.
    Count(usize),
    /// `a`'s axes paired with `b`'s, in order.
    Pairs(Vec<i64>, Vec<i64>),
}

/// Sum of products over paired axes; the result has `a`'s free axes then `b`'s. Computed as one
/// matmul after moving the contracted axes together.
pub fn tensordot(a: impl AsArray, b: impl AsArray, axes: TensordotAxes) -> Result<Array> {
    let op = "tensordot";
    let (a, b) = (a.as_array(), b.as_array());
    let (aa, ba): (Vec<usize>, Vec<usize>) = match axes {
        TensordotAxes::Count(n) => {
            if n > a.ndim() || n > b.ndim() {
                return Err(Error::axis(op, format!("cannot contract {n} axes of {} and {}", fmt_shape(a.shape()), fmt_shape(b.shape()))));
            }
            ((a.ndim() - n..a.ndim()).collect(), (0..n).collect())
        }
        TensordotAxes::Pairs(x, y) => {
            if x.len() != y.len() {
                return Err(Error::axis(op, format!("axis lists {x:?} and {y:?} differ in length")));
            }
            (
                x.iter().map(|&v| crate::shape::normalize_axis(op, v, a.ndim())).collect::<Result<_>>()?,
                y.iter().map(|&v| crate::shape::normalize_axis(op, v, b.ndim())).collect::<Result<_>>()?,
            )
        }
    };
    contract(op, &a, &b, &aa, &ba)
}

/// Contracts axes `aa` of `a` with `ba` of `b` by one matmul; result: free axes of a, then of b.
pub(super) fn contract(op: &str, a: &Array, b: &Array, aa: &[usize], ba: &[usize]) -> Result<Array> {
    if aa.iter().zip(ba).any(|(&i, &j)| a.shape()[i] != b.shape()[j]) {
        return Err(Error::shape(
            op,
            format!("contracted dimensions differ: {} axes {aa:?} vs {} axes {ba:?}", fmt_shape(a.shape()), fmt_shape(b.shape())),
        ));
    }
    let free_a: Vec<usize> = (0..a.ndim()).filter(|i| !aa.contains(i)).collect();
    let free_b: Vec<usize> = (0..b.ndim()).filter(|i| !ba.contains(i)).collect();
    let k: usize = aa.iter().map(|&i| a.shape()[i]).product();
    let m: usize = free_a.iter().map(|&i| a.shape()[i]).product();
    let n: usize = free_b.iter().map(|&i| b.shape()[i]).product();
    let pa: Vec<i64> = free_a.iter().chain(aa).map(|&i| i as i64).collect();
    let pb: Vec<i64> = ba.iter().chain(&free_b).map(|&i| i as i64).collect();
    let a2 = super::shape::reshape_to(&super::shape::transpose(a, Some(&pa))?, [m, k][..].into())?;
    let b2 = super::shape::reshape_to(&super::shape::transpose(b, Some(&pb))?, [k, n][..].into())?;
    let out = matmul(&a2, &b2).map_err(|e| Error::new(op, e.kind, e.message))?;
    let shape: crate::shape::Shape = free_a.iter().map(|&i| a.shape()[i]).chain(free_b.iter().map(|&i| b.shape()[i])).collect();
    super::shape::reshape_to(&out, shape)
}
