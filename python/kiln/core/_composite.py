"""Ops of mlx.core built here from the native ones (so autodiff and compile see only
primitives): ``atleast_1d/2d/3d``, ``degrees``, ``radians``, ``nan_to_num``, ``trace``, ``tri``,
``kron``, ``divmod``, and the constants ``pi``, ``e``, ``inf``, ``nan``, ``newaxis``."""

from __future__ import annotations

import math
from typing import Optional

from kiln import _core as _c

pi = math.pi
e = math.e
euler_gamma = 0.5772156649015329
inf = math.inf
nan = math.nan
newaxis = None


def _as_array(a):
    return a if isinstance(a, _c.array) else _c.array(a)


def atleast_1d(*arys, stream=None):
    """Each array with at least one dimension."""
    out = [_c.reshape(a, (1,), stream=stream) if a.ndim == 0 else a for a in map(_as_array, arys)]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys, stream=None):
    """Each array with at least two dimensions (a 1-d array becomes a row)."""
    out = []
    for a in map(_as_array, arys):
        out.append(_c.reshape(a, (1,) * (2 - a.ndim) + a.shape, stream=stream) if a.ndim < 2 else a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys, stream=None):
    """Each array with at least three dimensions (as numpy: (n,) becomes (1, n, 1))."""
    out = []
    for a in map(_as_array, arys):
        if a.ndim == 0:
            a = _c.reshape(a, (1, 1, 1), stream=stream)
        elif a.ndim == 1:
            a = _c.reshape(a, (1, a.shape[0], 1), stream=stream)
        elif a.ndim == 2:
            a = _c.expand_dims(a, 2, stream=stream)
        out.append(a)
    return out[0] if len(out) == 1 else out


def degrees(a, /, *, stream=None):
    """Radians to degrees."""
    return _c.multiply(a, 180.0 / math.pi, stream=stream)


def radians(a, /, *, stream=None):
    """Degrees to radians."""
    return _c.multiply(a, math.pi / 180.0, stream=stream)


def nan_to_num(a, nan: float = 0.0, posinf: Optional[float] = None, neginf: Optional[float] = None, *, stream=None):
    """NaN replaced by ``nan`` and infinities by ``posinf``/``neginf`` (default: the dtype's
    largest and smallest finite values)."""
    a = _as_array(a)
    if not _c.issubdtype(a.dtype, _c.floating):
        return a
    big = {_c.float16: 65504.0, _c.bfloat16: 3.3895313892515355e38, _c.float32: 3.4028234663852886e38}.get(a.dtype, 1.7976931348623157e308)
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    out = _c.where(_c.isnan(a), nan, a, stream=stream)
    out = _c.where(_c.isposinf(out), posinf, out, stream=stream)
    return _c.where(_c.isneginf(out), neginf, out, stream=stream)


def trace(a, /, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None, *, stream=None):
    """The sum of diagonal ``offset`` of the plane (axis1, axis2)."""
    d = _c.diagonal(a, offset, axis1, axis2, stream=stream)
    if dtype is not None:
        d = d.astype(dtype)
    return _c.sum(d, axis=-1, stream=stream)


def tri(n: int, m: Optional[int] = None, k: int = 0, dtype=None, *, stream=None):
    """An n by m matrix with ones at and below diagonal ``k``."""
    ones = _c.ones((n, n if m is None else m), dtype=dtype or _c.float32, stream=stream)
    return _c.tril(ones, k, stream=stream)


def kron(a, b, *, stream=None):
    """The Kronecker product."""
    a, b = _as_array(a), _as_array(b)
    nd = max(a.ndim, b.ndim)
    a = _c.reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = _c.reshape(b, (1,) * (nd - b.ndim) + b.shape)
    # Interleave the axes: a's axis i and b's axis i become adjacent, then merge them.
    sa = [s for d in a.shape for s in (d, 1)]
    sb = [s for d in b.shape for s in (1, d)]
    prod = _c.multiply(_c.reshape(a, sa), _c.reshape(b, sb), stream=stream)
    return _c.reshape(prod, [x * y for x, y in zip(a.shape, b.shape)], stream=stream)


def divmod(a, b, *, stream=None):  # noqa: A001 (mlx's name)
    """``(floor_divide(a, b), remainder(a, b))``."""
    return _c.floor_divide(a, b, stream=stream), _c.remainder(a, b, stream=stream)
