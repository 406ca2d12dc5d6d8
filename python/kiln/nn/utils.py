"""``mlx.nn.utils``' helpers for training over a ``mx.distributed`` group: ``average_gradients``
(data parallelism: every process's gradients averaged, small arrays sent together) and
``clip_grad_norm_sharded`` (clipping by the norm of gradients split among the processes);
``value_and_grad`` is ``nn.value_and_grad``; ``checkpoint`` recomputes a module's intermediates in
the backward pass. On a group of one process the average is the gradients themselves and the norm
is that of the local gradients."""

from __future__ import annotations

import numbers
from itertools import accumulate
from typing import Any, Optional

import kiln.core as mx
from kiln.core.distributed import Group, _resolve
from kiln.nn.module import checkpoint, value_and_grad  # noqa: F401
from kiln.utils import tree_flatten, tree_map, tree_reduce, tree_unflatten

__all__ = ["average_gradients", "checkpoint", "clip_grad_norm_sharded", "value_and_grad"]


def _batches(sizes: list, itemsize: int, limit: int) -> list:
    """The indices of the arrays, in order, cut into runs of at least ``limit`` bytes each (the
    last run may be smaller)."""
    runs, run, nbytes = [], [], 0
    for i, size in enumerate(sizes):
        run.append(i)
        nbytes += size * itemsize
        if nbytes >= limit:
            runs.append(run)
            run, nbytes = [], 0
    return runs + [run] if run else runs


def average_gradients(gradients: Any, group: Optional[Group] = None, all_reduce_size: int = 32 * 1024**2, communication_stream=None):
    """The mean of ``gradients`` (a tree of arrays, the same structure on every process) over the
    processes of ``group`` (the global group where None). Arrays are flattened and joined into
    runs of at least ``all_reduce_size`` bytes, one ``all_sum`` per run (one per array where it
    is 0 or less, or where the dtypes differ), on ``communication_stream`` if given. On a group
    of one, ``gradients`` itself."""
    group = _resolve("average_gradients", group)
    if isinstance(all_reduce_size, bool) or not isinstance(all_reduce_size, numbers.Integral):
        raise TypeError(f"average_gradients: all_reduce_size must be an int, got {type(all_reduce_size).__name__}")
    n = group.size()
    if n == 1:
        return gradients

    def mean(x):
        return mx.distributed.all_sum(x, group=group, stream=communication_stream) / n

    if all_reduce_size <= 0:
        return tree_map(mean, gradients)
    flat = tree_flatten(gradients)
    if not flat:
        return gradients
    dtypes = {g.dtype for _, g in flat}
    if len(dtypes) > 1:
        return average_gradients(gradients, group, 0, communication_stream)
    sizes = [g.size for _, g in flat]
    out = []
    for run in _batches(sizes, flat[0][1].dtype.size, all_reduce_size):
        joined = mean(mx.concatenate([flat[i][1].reshape(-1) for i in run]))
        offsets = list(accumulate(sizes[i] for i in run[:-1]))
        for i, part in zip(run, mx.split(joined, offsets)):
            out.append((flat[i][0], part.reshape(flat[i][1].shape)))
    return tree_unflatten(out)


def clip_grad_norm_sharded(gradients: Any, max_norm: float, group: Optional[Group] = None):
    """``(clipped, norm)``: ``gradients`` (this process's slice of gradients split among
    ``group``) scaled so that the norm of the whole, over every process, is at most
    ``max_norm``, and that norm (the squared norms summed with ``all_sum``)."""
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"clip_grad_norm_sharded: max_norm must be a number, got {type(max_norm).__name__}")
    group = _resolve("clip_grad_norm_sharded", group)
    squared = tree_reduce(lambda total, g: total + mx.sum(mx.square(g)), gradients, 0.0)
    norm = mx.sqrt(mx.distributed.all_sum(squared, group=group))
    factor = mx.minimum(mx.divide(max_norm, norm + 1e-6), 1.0)
    return tree_map(lambda g: g * factor, gradients), norm
