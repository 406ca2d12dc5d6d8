"""Window functions of mlx.core (float32, numpy's definitions): ``bartlett``, ``blackman``,
``hamming``, ``hanning``."""

from __future__ import annotations

import math

from kiln import _core as _c
from kiln.core._streams import on_stream


def _window(M: int, shape, stream):
    """``shape(n, M)`` over ``n = 0 .. M-1`` as float32, on ``stream``; empty for ``M < 1``,
    ``[1]`` for 1."""
    with on_stream(stream):
        if M < 1:
            return _c.zeros((0,), _c.float32)
        if M == 1:
            return _c.ones((1,), _c.float32)
        return shape(_c.arange(M, dtype=_c.float32), M).astype(_c.float32)


def bartlett(M: int, *, stream=None):
    """The triangular window of ``M`` points."""
    return _window(M, lambda n, M: 1.0 - _c.abs(n * (2.0 / (M - 1)) - 1.0), stream)


def hanning(M: int, *, stream=None):
    """The Hann window of ``M`` points."""
    return _window(M, lambda n, M: _c.square(_c.sin(n * (math.pi / (M - 1)))), stream)


def hamming(M: int, *, stream=None):
    """The Hamming window of ``M`` points."""
    return _window(M, lambda n, M: 0.54 - 0.46 * _c.cos(n * (2 * math.pi / (M - 1))), stream)


def blackman(M: int, *, stream=None):
    """The Blackman window of ``M`` points."""
    return _window(M, lambda n, M: 0.42 - 0.5 * _c.cos(n * (2 * math.pi / (M - 1))) + 0.08 * _c.cos(n * (4 * math.pi / (M - 1))), stream)
