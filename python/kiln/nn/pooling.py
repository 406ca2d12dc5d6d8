"""Pooling layers, as ``mlx.nn``'s: MaxPool and AvgPool over 1, 2 or 3 spatial axes of
channels-last inputs ``(N, ..., C)``. A pool is the elementwise maximum (or the mean) of the
input's strided windows, one strided slice per kernel position, so compile fuses it into one
kernel and autodiff needs no rule of its own. Padding adds -inf for the maximum (the dtype's
lowest value for integers) and zeros for the mean, which counts them, as mlx's."""

from __future__ import annotations

import functools
import itertools
import math

import kiln.core as mx
from kiln.nn.module import Module


def _per_axis(op: str, name: str, value, dims: int, least: int) -> tuple:
    """``value`` (an int, or one per spatial axis) as a tuple of ``dims`` ints of at least ``least``."""
    values = (value,) * dims if isinstance(value, int) and not isinstance(value, bool) else tuple(value) if isinstance(value, (tuple, list)) else None
    if values is None or len(values) != dims or any(isinstance(v, bool) or not isinstance(v, int) or v < least for v in values):
        raise ValueError(f"{op}: {name} must be an int or {dims} ints, each at least {least}; got {value!r}")
    return values


class _Pool(Module):
    """A pool over ``_dims`` spatial axes; ``_reduce`` names the kind ("max" or "avg")."""

    _dims = 1
    _reduce = "max"

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        op = type(self).__name__
        self._kernel_size = _per_axis(op, "kernel_size", kernel_size, self._dims, 1)
        self._stride = self._kernel_size if stride is None else _per_axis(op, "stride", stride, self._dims, 1)
        self._padding = _per_axis(op, "padding", padding, self._dims, 0)

    def _extra_repr(self) -> str:
        return f"kernel_size={self._kernel_size}, stride={self._stride}, padding={self._padding}"

    def _pad_value(self, dtype):
        if self._reduce == "avg":
            return 0
        if mx.issubdtype(dtype, mx.integer):
            return mx.iinfo(dtype).min
        return -math.inf if dtype != mx.bool_ else False

    def __call__(self, x):
        d = self._dims
        if x.ndim != d + 2:
            raise ValueError(f"{type(self).__name__}: the input must be (N, {d} spatial axes, C), got shape {x.shape}")
        if any(self._padding):
            widths = [(0, 0)] + [(p, p) for p in self._padding] + [(0, 0)]
            x = mx.pad(x, widths, constant_values=self._pad_value(x.dtype))
        sizes = x.shape[1:-1]
        out = [(n - k) // s + 1 for n, k, s in zip(sizes, self._kernel_size, self._stride)]
        if any(o <= 0 for o in out):
            raise ValueError(
                f"{type(self).__name__}: the padded input's spatial sizes {tuple(sizes)} are smaller than the kernel {self._kernel_size}"
            )
        windows = []
        for offsets in itertools.product(*(range(k) for k in self._kernel_size)):
            index = tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offsets, out, self._stride))
            windows.append(x[(slice(None),) + index])
        if self._reduce == "max":
            return functools.reduce(mx.maximum, windows)
        return functools.reduce(mx.add, windows) / math.prod(self._kernel_size)


def _pool(name: str, dims: int, reduce: str, doc: str):
    return type(name, (_Pool,), {"_dims": dims, "_reduce": reduce, "__doc__": doc})


MaxPool1d = _pool("MaxPool1d", 1, "max", "The maximum over windows of ``(N, L, C)`` inputs.")
MaxPool2d = _pool("MaxPool2d", 2, "max", "The maximum over windows of ``(N, H, W, C)`` inputs.")
MaxPool3d = _pool("MaxPool3d", 3, "max", "The maximum over windows of ``(N, D, H, W, C)`` inputs.")
AvgPool1d = _pool("AvgPool1d", 1, "avg", "The mean over windows of ``(N, L, C)`` inputs.")
AvgPool2d = _pool("AvgPool2d", 2, "avg", "The mean over windows of ``(N, H, W, C)`` inputs.")
AvgPool3d = _pool("AvgPool3d", 3, "avg", "The mean over windows of ``(N, D, H, W, C)`` inputs.")
