//! Batching rules: for each op, the batched op given inputs that carry a batch axis (or not).
//! Most rules move the batch axis to the front and shift the op's axes by one; elementwise ops
//! align ranks so unbatched inputs broadcast; gathers and scatters index the batch axis with an
//! extra index array. Every rule is one op on the whole batch, never a loop over it.

use super::vjp_rules::as_i64;
use crate::array::Array;
use crate::dtype::Dtype;
use crate::error::Result;
use crate::ops;
use crate::primitive::Op;

/// An input as the batching rules see it: the array and its batch axis (`None` if unbatched).
pub(crate) type Batched = (Array, Option<usize>);

/// `x` with its batch axis first; an unbatched `x` is broadcast along a new first axis of `size`.
pub(crate) fn to_front(x: &Batched, size: usize) -> Result<Array> {
    match x.1 {
        Some(0) => Ok(x.0.clone()),
        Some(ax) => ops::moveaxis(&x.0, ax as i64, 0),
        None => {
            let mut shape = vec![size];
            shape.extend_from_slice(x.0.shape());
            ops::broadcast_to(ops::expand_dims(&x.0, &[0])?, &shape)
        }
    }
}

/// `x` with its batch axis first, or a size-1 one where it is unbatched (for ops that broadcast
/// it along the batch themselves).
fn batch_first(x: &Batched) -> Result<Array> {
    match x.1 {
        None => ops::expand_dims(&x.0, &[0]),
        Some(_) => to_front(x, 1),
    }
}

/// The per-example rank of a batched input.
fn example_rank(x: &Batched) -> usize {
    x.0.ndim() - usize::from(x.1.is_some())
}

/// A front-batched array of per-example rank `from` given per-example rank `to` by inserting
/// size-1 axes after the batch axis, so it broadcasts against other per-example shapes.
fn align_rank(x: Array, from: usize, to: usize) -> Result<Array> {
    if from == to {
        return Ok(x);
    }
    let axes: Vec<i64> = (1..=(to - from) as i64).collect();
    ops::expand_dims(&x, &axes)
}

/// Written slice bounds with the batch axis in front taken whole.
fn batch_whole(written: &Option<Vec<ops::AxisBound>>) -> Option<Vec<ops::AxisBound>> {
    let whole = ops::AxisBound::Range(ops::SliceSpec::ALL);
    written.as_ref().map(|w| [whole].into_iter().chain(w.iter().copied()).collect())
}

/// Shifts each axis past the batch axis at the front.
fn shift(axes: &[usize]) -> Vec<usize> {
    axes.iter().map(|a| a + 1).collect()
}

/// The op batched over axis `size`-long batches of its inputs: the output and its batch axis.
pub(crate) fn batch(op: &Op, inputs: &[Batched], size: usize) -> Result<Batched> {
    let front = |i: usize| to_front(&inputs[i], size);
    let front_op = |op: Op| -> Result<Batched> { Ok((Array::from_op(op, vec![front(0)?])?, Some(0))) };
    match op {
        Op::Unary(_) | Op::AsType(_) | Op::StopGradient => {
            Ok((Array::from_op(op.clone(), vec![inputs[0].0.clone()])?, inputs[0].1))
        }
        Op::Binary(_) | Op::Select => elementwise(op, inputs, size),
        Op::Reshape { shape: s, inferred } => {
            let mut shape = vec![size];
            shape.extend_from_slice(s);
            front_op(Op::Reshape { shape: shape.into(), inferred: inferred.map(|a| a + 1) })
        }
        Op::Transpose(perm) => {
            let mut p = vec![0];
            p.extend(shift(perm));
            front_op(Op::Transpose(p))
        }
        Op::BroadcastTo(s) => {
            let x = align_rank(front(0)?, example_rank(&inputs[0]), s.len())?;
            let mut shape = vec![size];
            shape.extend_from_slice(s);
            Ok((Array::from_op(Op::BroadcastTo(shape.into()), vec![x])?, Some(0)))
        }
        Op::BroadcastLike { kept } => {
            // Every input gets its batch axis first (size 1 where unbatched, so the broadcast
            // itself stretches it and follows the batch size in shapeless replay) and as many
            // broadcast (leading) axes as the longest, so their batch axes line up.
            let lead = inputs.iter().map(|x| example_rank(x) - kept).max().unwrap_or(0);
            let aligned = inputs
                .iter()
                .map(|x| align_rank(batch_first(x)?, example_rank(x), lead + kept))
                .collect::<Result<Vec<_>>>()?;
            Ok((Array::from_op(op.clone(), aligned)?, Some(0)))
        }
        Op::SumLike => {
            let (from, to) = (example_rank(&inputs[0]), example_rank(&inputs[1]));
            let summed = front(0)?;
            let (summed, like) = match inputs[1].1 {
                // The reference gains size-1 axes after the batch axis to line up with the
                // summed array; the axes it gained are summed like any other, then dropped.
                Some(_) => (summed, align_rank(front(1)?, to, from)?),
                // An unbatched reference: the axes the broadcast added are summed first, then the
                // reference is stretched along the batch axis by a broadcast that follows it.
                None => {
                    let added: Vec<i64> = (1..=(from - to) as i64).collect();
                    let summed = if added.is_empty() { summed } else { ops::sum(&summed, Some(&added), false)? };
                    let like = Array::from_op(Op::BroadcastLike { kept: to }, vec![batch_first(&inputs[1])?, summed.clone()])?;
                    return Ok((Array::from_op(Op::SumLike, vec![summed, like])?, Some(0)));
                }
            };
            let summed = Array::from_op(Op::SumLike, vec![summed, like])?;
            Ok((ops::squeeze_axes(&summed, (1..=from - to).collect())?, Some(0)))
        }
        Op::Slice { start, step, len, written } => front_op(Op::Slice {
            start: [0].into_iter().chain(start.iter().copied()).collect(),
            step: [1].into_iter().chain(step.iter().copied()).collect(),
            len: [size].into_iter().chain(len.iter().copied()).collect(),
            written: batch_whole(written),
        }),
        Op::Concatenate { axis } => {
            let all = (0..inputs.len()).map(front).collect::<Result<Vec<_>>>()?;
            Ok((Array::from_op(Op::Concatenate { axis: axis + 1 }, all)?, Some(0)))
        }
        Op::SliceUpdate { start, step, written } => {
            let op = Op::SliceUpdate {
                start: [0].into_iter().chain(start.iter().copied()).collect(),
                step: [1].into_iter().chain(step.iter().copied()).collect(),
                written: batch_whole(written),
            };
            Ok((Array::from_op(op, vec![front(0)?, front(1)?])?, Some(0)))
        }
        Op::Reduce { op: r, axes, identity_if_empty } => {
            front_op(Op::Reduce { op: *r, axes: shift(axes), identity_if_empty: *identity_if_empty })
        }
        Op::ArgReduce { op: r, axis } => front_op(Op::ArgReduce { op: *r, axis: axis + 1 }),
        Op::Scan { op: s, axis, reverse, inclusive } => {
            front_op(Op::Scan { op: *s, axis: axis + 1, reverse: *reverse, inclusive: *inclusive })
        }
        Op::Sort { axis } => front_op(Op::Sort { axis: axis + 1 }),
        Op::ArgSort { axis } => front_op(Op::ArgSort { axis: axis + 1 }),
        Op::Partition { kth, axis } => front_op(Op::Partition { kth: *kth, axis: axis + 1 }),
        Op::ArgPartition { kth, axis } => front_op(Op::ArgPartition { kth: *kth, axis: axis + 1 }),
        Op::Gather { axes, slice_sizes } => gather(axes, slice_sizes, inputs, size),
        Op::Scatter { axes, op: how } => {
            let n = inputs.len();
            let (index_batch, indices) = batched_indices(&inputs[1..n - 1], size)?;
            let updates = front(n - 1)?;
            // Updates are (indices..., slice...): a size-1 slice of the batch axis goes after the
            // indices' axes.
            let updates = ops::expand_dims(&updates, &[1 + index_batch as i64])?;
            let mut all = vec![front(0)?];
            all.extend(indices);
            all.push(updates);
            let mut ax = vec![0];
            ax.extend(shift(axes));
            Ok((Array::from_op(Op::Scatter { axes: ax, op: *how }, all)?, Some(0)))
        }
        Op::Matmul => Ok((Array::from_op(Op::Matmul, vec![front(0)?, front(1)?])?, Some(0))),
        Op::Fft { axes, kind } => front_op(Op::Fft { axes: shift(axes), kind: *kind }),
        Op::RandomBits { .. } => front_op(op.clone()),
        Op::Custom { .. } => unreachable!("vmap batches custom calls as a whole"),
        Op::Flatten { start, end } => front_op(Op::Flatten { start: start + 1, end: end + 1 }),
        Op::Squeeze(axes) => front_op(Op::Squeeze(shift(axes))),
        Op::ExpandDims(axes) => front_op(Op::ExpandDims(shift(axes))),
        // The count is the same for every example.
        Op::Count { axes, ddof, dtype } => Ok((
            Array::from_op(Op::Count { axes: shift(axes), ddof: *ddof, dtype: *dtype }, vec![front(0)?])?,
            None,
        )),
        Op::Kernel { call, .. } => Err(call.no_transform("vmap")),
        // Only the last axis changes: with the batch axis in front, examples keep their own last
        // axis (a 0-d example that changes item size is refused as in eager).
        Op::View(d) => {
            crate::primitive::view_shape(&inputs[0].0.shape()[..example_rank(&inputs[0])], inputs[0].0.dtype(), *d)?;
            front_op(op.clone())
        }
        Op::Arange { .. } => unreachable!("arange has no inputs, so it is never batched"),
    }
}

/// Binary ops and `where`: batch axes to the front and ranks aligned, so unbatched inputs
/// broadcast against the per-example shapes.
fn elementwise(op: &Op, inputs: &[Batched], size: usize) -> Result<Batched> {
    if inputs.iter().all(|x| x.1.is_none()) {
        // Possible when a custom batching rule returned an unbatched output.
        let all = inputs.iter().map(|x| x.0.clone()).collect();
        return Ok((Array::from_op(op.clone(), all)?, None));
    }
    let rank = inputs.iter().map(example_rank).max().unwrap_or(0);
    let all = inputs
        .iter()
        .map(|x| match x.1 {
            Some(_) => align_rank(to_front(x, size)?, example_rank(x), rank),
            None => Ok(x.0.clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((Array::from_op(op.clone(), all)?, Some(0)))
}

/// Index arrays made batched: each broadcast to `(size, per-example index shape...)`, led by an
/// index of the batch position itself. Returns the per-example index rank and the arrays.
fn batched_indices(indices: &[Batched], size: usize) -> Result<(usize, Vec<Array>)> {
    let mut example_shape: Vec<usize> = Vec::new();
    for i in indices {
        let s = match i.1 {
            Some(ax) => i.0.shape().iter().enumerate().filter(|&(k, _)| k != ax).map(|(_, &d)| d).collect(),
            None => i.0.shape().to_vec(),
        };
        example_shape = crate::shape::broadcast_shapes("vmap", &example_shape, &s)?.to_vec();
    }
    let rank = example_shape.len();
    let mut full = vec![size];
    full.extend_from_slice(&example_shape);
    let position = ops::positions_along(size, 0, rank + 1, Dtype::I32)?;
    let mut out = vec![ops::broadcast_to(&position, &full)?];
    for i in indices {
        let x = match i.1 {
            Some(_) => align_rank(to_front(i, size)?, example_rank(i), rank)?,
            None => i.0.clone(),
        };
        out.push(ops::broadcast_to(&x, &full)?);
    }
    Ok((rank, out))
}

fn gather(axes: &[usize], slice_sizes: &[usize], inputs: &[Batched], size: usize) -> Result<Batched> {
    let a = &inputs[0];
    let mut sizes = vec![size];
    if inputs[1..].iter().all(|i| i.1.is_none()) {
        // Only the source is batched: gather whole batch slices; the batch axis lands after the
        // index axes.
        sizes.extend_from_slice(slice_sizes);
        let mut all = vec![to_front(a, size)?];
        all.extend(inputs[1..].iter().map(|i| i.0.clone()));
        let mut index_shape = crate::shape::Shape::new();
        for i in &inputs[1..] {
            index_shape = crate::shape::broadcast_shapes("vmap", &index_shape, i.0.shape())?;
        }
        let out = Array::from_op(Op::Gather { axes: shift(axes), slice_sizes: sizes }, all)?;
        return Ok((out, Some(index_shape.len())));
    }
    let (index_rank, indices) = batched_indices(&inputs[1..], size)?;
    sizes[0] = 1;
    sizes.extend_from_slice(slice_sizes);
    let mut all = vec![to_front(a, size)?];
    all.extend(indices);
    let mut ax = vec![0];
    ax.extend(shift(axes));
    let out = Array::from_op(Op::Gather { axes: ax, slice_sizes: sizes }, all)?;
    Ok((ops::squeeze(&out, Some(&as_i64(&[1 + index_rank])))?, Some(0)))
}
