"""Convolution layers as ``mlx.nn``'s: channels last (``(N, ..., C)`` inputs), weights of shape
``(out_channels, *kernel_size, in_channels // groups)`` drawn uniformly in ``±sqrt(1 / fan_in)``
and a zero bias, so mlx checkpoints load unchanged."""

from __future__ import annotations

import math

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module


def _per_axis(value, dims: int):
    """An int repeated ``dims`` times, or the given tuple."""
    return (value,) * dims if isinstance(value, int) else tuple(value)


class _Conv(Module):
    """A convolution over ``_dims`` spatial axes (``_transposed``: its transpose)."""

    _dims = 1
    _transposed = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        output_padding=0,
    ):
        # (output_padding is the transposed layers' own argument; see _ConvTranspose.)
        super().__init__()
        d = self._dims
        kernel_size = _per_axis(kernel_size, d)
        require_positive(type(self).__name__, in_channels=in_channels, out_channels=out_channels, groups=groups)
        require_positive(type(self).__name__, **{f"kernel_size[{i}]": k for i, k in enumerate(kernel_size)})
        if in_channels % groups != 0:
            raise ValueError(
                f"The number of input channels ({in_channels}) must be divisible by the number of groups ({groups})"
            )
        scale = math.sqrt(1.0 / (in_channels * math.prod(kernel_size)))
        self.weight = mx.random.uniform(-scale, scale, shape=(out_channels, *kernel_size, in_channels // groups))
        if bias:
            self.bias = mx.zeros((out_channels,))
        # mlx keeps the 1-D layers' settings as given (ints) and the others as tuples.
        keep = (lambda v: v) if d == 1 else (lambda v: _per_axis(v, d))
        self.stride, self.padding, self.dilation = keep(stride), keep(padding), keep(dilation)
        self.groups = groups
        if self._transposed:
            self.output_padding = keep(output_padding)

    def _extra_repr(self):
        kernel = self.weight.shape[1:-1]
        text = (
            f"{self.weight.shape[-1] * self.groups}, {self.weight.shape[0]}, "
            f"kernel_size={kernel[0] if self._dims == 1 else tuple(kernel)}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
        )
        if self._transposed:
            text += f"output_padding={self.output_padding}, "
        return text + f"bias={'bias' in self}"

    def __call__(self, x):
        if self._transposed:
            op = (mx.conv_transpose1d, mx.conv_transpose2d, mx.conv_transpose3d)[self._dims - 1]
            y = op(x, self.weight, self.stride, self.padding, self.dilation, self.output_padding, self.groups)
        else:
            op = (mx.conv1d, mx.conv2d, mx.conv3d)[self._dims - 1]
            y = op(x, self.weight, self.stride, self.padding, self.dilation, self.groups)
        if "bias" in self:
            y = y + self.bias
        return y


class _ConvTranspose(_Conv):
    """A transposed convolution over ``_dims`` spatial axes, with mlx's argument order."""

    _transposed = True

    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, output_padding=0, bias=True, groups=1
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, output_padding)


class Conv1d(_Conv):
    """1-D convolution over ``(N, L, C_in)`` inputs."""


class Conv2d(_Conv):
    """2-D convolution over ``(N, H, W, C_in)`` inputs."""

    _dims = 2


class Conv3d(_Conv):
    """3-D convolution over ``(N, D, H, W, C_in)`` inputs."""

    _dims = 3


class ConvTranspose1d(_ConvTranspose):
    """1-D transposed convolution over ``(N, L, C_in)`` inputs."""


class ConvTranspose2d(_ConvTranspose):
    """2-D transposed convolution over ``(N, H, W, C_in)`` inputs."""

    _dims = 2


class ConvTranspose3d(_ConvTranspose):
    """3-D transposed convolution over ``(N, D, H, W, C_in)`` inputs."""

    _dims = 3
