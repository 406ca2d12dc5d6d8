"""``nn.Upsample``, as mlx's: resizes the spatial axes of channels-last inputs ``(N, ..., C)`` by
``scale_factor`` (one per axis, or one for all), by nearest neighbour, linear or cubic (Keys,
a = -0.75) interpolation, axis by axis. ``align_corners`` maps the corner samples onto each
other; otherwise sample centres are aligned. ``antialias`` (linear and cubic) widens the kernel
by 1/scale when shrinking, so that every input contributes, with the weights normalised."""

from __future__ import annotations

import math
from typing import Tuple, Union

import kiln.core as mx
from kiln.nn.module import Module

_MODES = ("nearest", "linear", "cubic")


def _source_positions(n: int, m: int, scale: float, align_corners: bool):
    """Where each of the ``m`` outputs of an axis of ``n`` inputs samples it (float positions)."""
    i = mx.arange(m, dtype=mx.float32)
    if align_corners:
        return i * ((n - 1) / max(m - 1, 1))
    step = 1 / scale
    return i * step - ((m - 1) * step - n + 1) / 2


def _nearest_taps(n: int, m: int, scale: float, align_corners: bool):
    """One tap per output: the nearest input (centred when enlarging, as mlx's)."""
    i = mx.arange(m, dtype=mx.float32)
    index = mx.round((i + 0.5) * (n / m) - 0.5) if m > n else mx.floor(i * (n / m))
    return [(mx.clip(index, 0, n - 1).astype(mx.int32), None)]


def _linear_taps(n: int, m: int, scale: float, align_corners: bool):
    """The two inputs around each position, weighted by nearness."""
    pos = mx.clip(_source_positions(n, m, scale, align_corners), 0, n - 1)
    left = mx.floor(pos)
    frac = pos - left
    return [(left.astype(mx.int32), 1 - frac), (mx.ceil(pos).astype(mx.int32), frac)]


def _keys(distance, a: float = -0.75):
    """Keys' cubic convolution kernel."""
    near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
    far = (((distance - 5) * distance + 8) * distance - 4) * a
    return mx.where(distance <= 1, near, mx.where(distance < 2, far, 0.0))


def _cubic_taps(n: int, m: int, scale: float, align_corners: bool):
    """The four inputs around each position, Keys-weighted (indices clamped at the edges)."""
    pos = _source_positions(n, m, scale, align_corners)
    base = mx.floor(pos)
    return [(mx.clip(base + k, 0, n - 1).astype(mx.int32), _keys(mx.abs(pos - (base + k)))) for k in (-1, 0, 1, 2)]


def _antialiased_taps(kernel, radius: float):
    """Taps of ``kernel`` (support ``radius``) stretched by 1/scale when shrinking, out-of-range
    taps dropped and the weights of each output normalised."""

    def taps(n: int, m: int, scale: float, align_corners: bool):
        pos = _source_positions(n, m, scale, align_corners)
        stretch = 1 / scale if scale < 1 else 1.0
        reach = math.ceil(radius * stretch) + 1
        base = mx.floor(pos)
        raw = []
        for k in range(-reach + 1, reach):
            index = base + k
            weight = kernel(mx.abs(pos - index) / stretch)
            raw.append((index, mx.where((index >= 0) & (index < n), weight, 0.0)))
        total = sum(w for _, w in raw)
        total = mx.where(total > 0, total, 1.0)
        return [(mx.clip(index, 0, n - 1).astype(mx.int32), w / total) for index, w in raw]

    return taps


class Upsample(Module):
    """Resizes by ``scale_factor`` with ``mode`` "nearest", "linear" or "cubic"."""

    def __init__(
        self,
        scale_factor: Union[float, Tuple[float, ...]],
        mode: str = "nearest",
        align_corners: bool = False,
        antialias: bool = False,
    ):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"Upsample: mode must be one of {_MODES}, got {mode!r}")
        if antialias and (mode == "nearest" or align_corners):
            raise ValueError("Upsample: antialias applies to linear and cubic modes without align_corners")
        scales = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,)
        if not scales or any(not isinstance(s, (int, float)) or isinstance(s, bool) or not s > 0 for s in scales):
            raise ValueError(f"Upsample: scale_factor must be positive numbers, got {scale_factor!r}")
        self.scale_factor = tuple(float(f) for f in scales) if isinstance(scale_factor, (tuple, list)) else float(scale_factor)
        self.mode, self.align_corners, self.antialias = mode, align_corners, antialias

    def _taps(self):
        if self.antialias:
            kernel = (lambda d: mx.maximum(1 - d, 0.0), 1.0) if self.mode == "linear" else (_keys, 2.0)
            return _antialiased_taps(*kernel)
        return {"nearest": _nearest_taps, "linear": _linear_taps, "cubic": _cubic_taps}[self.mode]

    def __call__(self, x):
        dims = x.ndim - 2
        scales = self.scale_factor if isinstance(self.scale_factor, (tuple, list)) else (self.scale_factor,) * dims
        if dims < 1 or len(scales) != dims:
            raise ValueError(f"Upsample: {len(scales)} scale factors for an input of shape {x.shape} (N, ..., C)")
        taps = self._taps()
        for axis, scale in enumerate(scales, start=1):
            n = x.shape[axis]
            m = int(scale * n)
            shape = [1] * x.ndim
            shape[axis] = m
            parts = []
            for index, weight in taps(n, m, scale, self.align_corners):
                sample = mx.take(x, index, axis=axis)
                parts.append(sample if weight is None else sample * weight.reshape(shape))
            x = sum(parts[1:], parts[0])
        return x

    def _extra_repr(self) -> str:
        extra = ", antialias=True" if self.antialias else ""
        return f"scale_factor={self.scale_factor}, mode={self.mode!r}, align_corners={self.align_corners}{extra}"
