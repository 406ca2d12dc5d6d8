"""kiln.core.linalg: mlx.core.linalg's functions.

The factorizations, inverses, determinants and solves are native (``kiln::linalg``, on faer, run
on the CPU whatever the stream, as mlx runs them on its CPU stream); ``norm`` and ``cross`` are
written here over kiln's ops.
"""

import math
import numbers

from kiln import _core as _c
from kiln._core import linalg as _native
from kiln.core._streams import on_stream

inv = _native.inv
tri_inv = _native.tri_inv
cholesky = _native.cholesky
cholesky_inv = _native.cholesky_inv
pinv = _native.pinv
qr = _native.qr
svd = _native.svd
eigh = _native.eigh
eigvalsh = _native.eigvalsh
eig = _native.eig
eigvals = _native.eigvals
lu = _native.lu
lu_factor = _native.lu_factor
det = _native.det
slogdet = _native.slogdet
solve = _native.solve
solve_triangular = _native.solve_triangular


def _as_float(a):
    # Integers and bools become float32; floats and complex numbers stay as they are (the norms
    # of complex arrays go through abs, the factorizations refuse them clearly).
    a = a if isinstance(a, _c.array) else _c.array(a)
    return a if _c.issubdtype(a.dtype, _c.inexact) else a.astype(_c.float32)


def _axes(op, axis, ndim):
    """``axis`` as a tuple of non-negative axes of an array with ``ndim`` axes."""
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for ax in axes:
        if not isinstance(ax, numbers.Integral) or not -ndim <= ax < ndim:
            raise ValueError(f"{op}: axis {ax} is out of range for an array with {ndim} dimensions")
        out.append(int(ax) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axes in {axis}")
    return tuple(out)


def _vector_norm(x, ord, axis, keepdims):
    a = _c.abs(x)
    if ord is None or ord == 2:
        return _c.sqrt(_c.sum(a * a, axis=axis, keepdims=keepdims))
    if ord == math.inf:
        return _c.max(a, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return _c.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _c.sum(a != 0, axis=axis, keepdims=keepdims).astype(x.dtype)
    if ord == 1:
        return _c.sum(a, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"linalg.norm: ord {ord!r} is a matrix norm; vector norms take a number")
    return _c.power(_c.sum(_c.power(a, ord), axis=axis, keepdims=keepdims), 1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    a = _c.abs(x)
    if ord is None or ord == "fro":
        return _c.sqrt(_c.sum(a * a, axis=axes, keepdims=keepdims))
    if ord in (math.inf, -math.inf, 1, -1):
        # inf: the largest row sum; 1: the largest column sum (the smallest for -inf, -1).
        summed, picked = (col, row) if ord in (math.inf, -math.inf) else (row, col)
        pick = _c.max if ord > 0 else _c.min
        out = pick(_c.sum(a, axis=summed, keepdims=True), axis=picked, keepdims=True)
        return out if keepdims else _c.squeeze(out, axis=axes)
    if ord in ("nuc", 2, -2):
        rest = [i for i in range(x.ndim) if i not in axes]
        s = svd(_c.transpose(x, rest + [row, col]), compute_uv=False)
        out = {"nuc": _c.sum, 2: _c.max, -2: _c.min}[ord](s, axis=-1)
        return _c.expand_dims(out, sorted(axes)) if keepdims else out
    raise ValueError(f"linalg.norm: invalid matrix norm order {ord!r}; use None, 'fro', 'nuc', ±1, ±2 or ±inf")


def norm(a, ord=None, axis=None, keepdims=False, *, stream=None):
    """The vector norm (one axis) or matrix norm (two axes) of ``a``, as numpy's: with neither
    ``ord`` nor ``axis``, the 2-norm of all elements; with ``ord`` alone, over every axis of a
    1-D or 2-D array."""
    with on_stream(stream):
        x = _as_float(a)
        if axis is None:
            if ord is None:
                return _c.sqrt(_c.sum(_c.abs(x) * _c.abs(x), keepdims=keepdims))
            if x.ndim not in (1, 2):
                raise ValueError(f"linalg.norm: ord {ord!r} without axis needs a 1-D or 2-D array, got shape {x.shape}")
            axis = tuple(range(x.ndim))
        axes = _axes("linalg.norm", axis, x.ndim)
        if len(axes) == 1:
            return _vector_norm(x, ord, axes[0], keepdims)
        if len(axes) == 2:
            return _matrix_norm(x, ord, axes, keepdims)
        raise ValueError(f"linalg.norm: axis must name one or two axes, got {axis}")


def cross(a, b, axis=-1, *, stream=None):
    """The cross product of 3-vectors along ``axis`` of ``a`` and ``b`` (broadcast together)."""
    with on_stream(stream):
        a = a if isinstance(a, _c.array) else _c.array(a)
        b = b if isinstance(b, _c.array) else _c.array(b)
        for name, x in (("a", a), ("b", b)):
            if x.ndim == 0 or not -x.ndim <= axis < x.ndim or x.shape[axis] != 3:
                raise ValueError(f"linalg.cross: {name} of shape {x.shape} needs size 3 along axis {axis}")
        a0, a1, a2 = _c.split(a, 3, axis=axis)
        b0, b1, b2 = _c.split(b, 3, axis=axis)
        return _c.concatenate([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=axis)
