"""Normalisation layers, as ``mlx.nn``'s: LayerNorm, RMSNorm, GroupNorm, InstanceNorm and
BatchNorm, over channels-last inputs ``(N, ..., C)``. Each normalises to zero mean and unit
variance (RMSNorm: unit root mean square) over its own set of axes, then applies the learned
per-channel scale and shift."""

from __future__ import annotations

import numbers

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module


def _require_eps(op: str, eps) -> None:
    """eps, added under a square root, must be a positive number: zero or less gives NaN rows."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{op}: eps must be a positive number, got {type(eps).__name__}")
    if not eps > 0:
        raise ValueError(f"{op}: eps must be positive, got {eps}")


def _normalize(x, axes, eps):
    """x less its mean over ``axes``, divided by the root of its variance plus ``eps``: the axes
    moved last and flattened for ``mx.fast.layer_norm``, which computes in float32 (so float16
    inputs whose squares overflow float16 still normalise)."""
    axes = [a % x.ndim for a in axes]
    kept = [a for a in range(x.ndim) if a not in axes]
    order = kept + axes
    moved = mx.transpose(x, order)
    y = mx.fast.layer_norm(moved.reshape(*moved.shape[: len(kept)], -1), None, None, eps)
    return mx.transpose(y.reshape(moved.shape), [order.index(a) for a in range(x.ndim)])


class _Affine(Module):
    """A normalisation with an optional per-channel scale (``weight``, ones) and shift (``bias``,
    zeros) of ``dims`` channels."""

    def __init__(self, op: str, dims: int, eps: float, affine: bool, bias: bool = True):
        super().__init__()
        require_positive(op, dims=dims)
        _require_eps(op, eps)
        self.dims, self.eps = dims, eps
        if affine:
            self.weight = mx.ones((dims,))
            if bias:
                self.bias = mx.zeros((dims,))

    def _scale_and_shift(self, y):
        if "weight" in self:
            y = y * self.weight
        if "bias" in self:
            y = y + self.bias
        return y

    def _extra_repr(self) -> str:
        return f"{self.dims}, eps={self.eps}, affine={'weight' in self}"


class LayerNorm(_Affine):
    """Normalises the last axis (``mx.fast.layer_norm``), then scales and shifts."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = True, bias: bool = True):
        super().__init__("LayerNorm", dims, eps, affine, bias)

    def __call__(self, x):
        return mx.fast.layer_norm(x, self.get("weight"), self.get("bias"), self.eps)


class RMSNorm(Module):
    """Divides the last axis by its root mean square (``mx.fast.rms_norm``), then scales."""

    def __init__(self, dims: int, eps: float = 1e-5):
        super().__init__()
        require_positive("RMSNorm", dims=dims)
        _require_eps("RMSNorm", eps)
        self.eps = eps
        self.weight = mx.ones((dims,))

    def __call__(self, x):
        return mx.fast.rms_norm(x, self.weight, self.eps)

    def _extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GroupNorm(_Affine):
    """Normalises each of ``num_groups`` groups of channels over the spatial axes and the group's
    channels. The groups are interleaved (channel c is in group c mod num_groups), as mlx's
    default; ``pytorch_compatible`` groups consecutive channels, as PyTorch."""

    def __init__(self, num_groups: int, dims: int, eps: float = 1e-5, affine: bool = True, pytorch_compatible: bool = False):
        require_positive("GroupNorm", num_groups=num_groups)
        super().__init__("GroupNorm", dims, eps, affine)
        if dims % num_groups:
            raise ValueError(f"GroupNorm: the {dims} channels must divide into num_groups={num_groups} equal groups")
        self.num_groups, self.pytorch_compatible = num_groups, pytorch_compatible

    def __call__(self, x):
        batch, channels = x.shape[0], x.shape[-1]
        if channels != self.dims:
            raise ValueError(f"GroupNorm: expected {self.dims} channels in the last axis, got input of shape {x.shape}")
        if self.pytorch_compatible:
            grouped = x.reshape(batch, -1, self.num_groups, channels // self.num_groups)
            y = _normalize(grouped, (1, 3), self.eps)
        else:
            y = _normalize(x.reshape(batch, -1, self.num_groups), (1,), self.eps)
        return self._scale_and_shift(y.reshape(x.shape))

    def _extra_repr(self) -> str:
        return f"{self.num_groups}, {super()._extra_repr()}, pytorch_compatible={self.pytorch_compatible}"


class InstanceNorm(_Affine):
    """Normalises each channel of each example over the spatial axes (inputs ``(N, ..., C)`` with
    at least one spatial axis); the scale and shift are off by default."""

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = False):
        super().__init__("InstanceNorm", dims, eps, affine)

    def __call__(self, x):
        if x.ndim < 3:
            raise ValueError(f"InstanceNorm: the input must be (N, ..., C) with a spatial axis, got shape {x.shape}")
        return self._scale_and_shift(_normalize(x, list(range(1, x.ndim - 1)), self.eps))


class BatchNorm(_Affine):
    """Normalises each channel over the batch and spatial axes (inputs ``(N, C)``, ``(N, L, C)`` or
    ``(N, H, W, C)``). In training it uses the batch's statistics and, with
    ``track_running_stats``, moves ``running_mean`` and ``running_var`` (the unbiased variance)
    towards them by ``momentum``; in eval mode it uses the running ones. The running statistics
    are state, never trainable."""

    _always_frozen = ("running_mean", "running_var")

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True, track_running_stats: bool = True):
        super().__init__("BatchNorm", num_features, eps, affine)
        self.num_features, self.momentum, self.track_running_stats = num_features, momentum, track_running_stats
        if track_running_stats:
            self.running_mean = mx.zeros((num_features,))
            self.running_var = mx.ones((num_features,))
            self.freeze(keys=["running_mean", "running_var"], recurse=False)

    def __call__(self, x):
        if not 2 <= x.ndim <= 4:
            raise ValueError(f"BatchNorm: the input must have 2, 3 or 4 axes, got shape {x.shape}")
        axes = tuple(range(x.ndim - 1))
        if self.training and x.size // x.shape[-1] == 1:
            raise ValueError(f"BatchNorm: training needs more than one value per channel, got shape {x.shape}")
        mean, var = mx.mean(x, axis=axes), mx.var(x, axis=axes)
        if self.training and self.track_running_stats:
            m = self.momentum
            self.running_mean = (1 - m) * self.running_mean + m * mean
            self.running_var = (1 - m) * self.running_var + m * mx.var(x, axis=axes, ddof=1)
        elif self.track_running_stats:
            mean, var = self.running_mean, self.running_var
        return self._scale_and_shift((x - mean) * mx.rsqrt(var + self.eps))

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()}, momentum={self.momentum}, track_running_stats={self.track_running_stats}"
