"""The parts of mlx.core that are Python utilities rather than ops (the ops are native, in
``kiln::ops``): ``isdtype``, ``broadcast_shapes``, and the constants ``pi``, ``e``,
``euler_gamma``, ``inf``, ``nan``, ``newaxis``."""

from __future__ import annotations

import math
import numbers

from kiln import _core as _c

pi = math.pi
e = math.e
euler_gamma = 0.5772156649015329
inf = math.inf
nan = math.nan
newaxis = None


def broadcast_shapes(*shapes) -> tuple:
    """The shape that arrays of all ``shapes`` broadcast to (numpy's rules: axes aligned from the
    end, each size equal or 1)."""
    if not shapes:
        raise ValueError("[broadcast_shapes] give at least one shape")
    for s in shapes:
        if not isinstance(s, (tuple, list)) or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in s):
            raise TypeError(f"[broadcast_shapes] each shape must be a tuple of integers, got {s!r}")
        if any(d < 0 for d in s):
            raise ValueError(f"[broadcast_shapes] shape {tuple(s)} has a negative size")
    out = []
    for i in range(1, max(len(s) for s in shapes) + 1):
        sizes = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(sizes) > 1:
            raise ValueError(f"[broadcast_shapes] shapes {', '.join(map(str, shapes))} do not broadcast: axis -{i} has sizes {sorted(sizes)}")
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype, a name (``'bool'``, ``'signed integer'``,
    ``'unsigned integer'``, ``'integral'``, ``'real floating'``, ``'complex floating'``,
    ``'numeric'``), or a tuple of them (any matches)."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, _c.Dtype):
        return dtype == kind
    categories = {
        "bool": lambda d: d == _c.bool_,
        "signed integer": lambda d: _c.issubdtype(d, _c.signedinteger),
        "unsigned integer": lambda d: _c.issubdtype(d, _c.unsignedinteger),
        "integral": lambda d: _c.issubdtype(d, _c.integer),
        "real floating": lambda d: _c.issubdtype(d, _c.floating),
        "complex floating": lambda d: _c.issubdtype(d, _c.complexfloating),
        "numeric": lambda d: d != _c.bool_,
    }
    if kind not in categories:
        raise ValueError(f"[isdtype] unknown kind {kind!r}; use a dtype or one of {sorted(categories)}")
    return categories[kind](dtype)
