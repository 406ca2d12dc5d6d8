"""Parameter initialisers, as ``mlx.nn.init``: each returns a function that takes an array and
returns a new array of its shape (and of ``dtype``) drawn from the distribution."""

from __future__ import annotations

import math
from typing import Callable, Tuple

import kiln.core as mx


def _fans(a: mx.array) -> Tuple[int, int]:
    if a.ndim < 2:
        raise ValueError(f"init: fan in and fan out need at least 2 dimensions, got shape {a.shape}")
    receptive = math.prod(a.shape[1:-1]) if a.ndim > 2 else 1
    return a.shape[-1] * receptive, a.shape[0] * receptive


def _fan(a: mx.array, mode: str) -> int:
    """The fan of ``a`` that ``mode`` ("fan_in" or "fan_out") names."""
    fan_in, fan_out = _fans(a)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return fan_in if mode == "fan_in" else fan_out


def constant(value: float, dtype=mx.float32) -> Callable:
    """Every element ``value``."""
    return lambda a: mx.full(a.shape, value, dtype=dtype)


def normal(mean: float = 0.0, std: float = 1.0, dtype=mx.float32) -> Callable:
    """Normal samples of mean ``mean`` and standard deviation ``std``."""
    return lambda a: mx.random.normal(shape=a.shape, dtype=dtype, loc=mean, scale=std)


def uniform(low: float = 0.0, high: float = 1.0, dtype=mx.float32) -> Callable:
    """Uniform samples in ``[low, high)``."""
    return lambda a: mx.random.uniform(low, high, shape=a.shape, dtype=dtype)


def identity(dtype=mx.float32) -> Callable:
    """The identity matrix (square 2-d arrays only)."""

    def init(a):
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise ValueError(f"init.identity: needs a square matrix, got shape {a.shape}")
        return mx.eye(a.shape[0], dtype=dtype)

    return init


def glorot_normal(dtype=mx.float32) -> Callable:
    """Normal with std ``gain * sqrt(2 / (fan_in + fan_out))``."""

    def init(a, gain: float = 1.0):
        fan_in, fan_out = _fans(a)
        return mx.random.normal(shape=a.shape, dtype=dtype, scale=gain * math.sqrt(2.0 / (fan_in + fan_out)))

    return init


def glorot_uniform(dtype=mx.float32) -> Callable:
    """Uniform in ``±gain * sqrt(6 / (fan_in + fan_out))``."""

    def init(a, gain: float = 1.0):
        fan_in, fan_out = _fans(a)
        limit = gain * math.sqrt(6.0 / (fan_in + fan_out))
        return mx.random.uniform(-limit, limit, shape=a.shape, dtype=dtype)

    return init


def he_normal(dtype=mx.float32) -> Callable:
    """Normal with std ``gain / sqrt(fan)`` (fan_in by default)."""

    def init(a, mode: str = "fan_in", gain: float = 1.0):
        fan = _fan(a, mode)
        return mx.random.normal(shape=a.shape, dtype=dtype, scale=gain / math.sqrt(fan))

    return init


def he_uniform(dtype=mx.float32) -> Callable:
    """Uniform in ``±gain * sqrt(3 / fan)`` (fan_in by default)."""

    def init(a, mode: str = "fan_in", gain: float = 1.0):
        fan = _fan(a, mode)
        limit = gain * math.sqrt(3.0 / fan)
        return mx.random.uniform(-limit, limit, shape=a.shape, dtype=dtype)

    return init


def _require_matrix(op: str, a) -> None:
    if a.ndim != 2:
        raise ValueError(f"init.{op}: needs a 2D array, got a {a.ndim}D array of shape {a.shape}")


def orthogonal(gain: float = 1.0, dtype=mx.float32) -> Callable:
    """A matrix with orthonormal rows or columns (whichever are fewer), times ``gain``: the Q of
    the QR factorisation of a normal sample, its signs fixed by R's diagonal so that the result
    is uniformly distributed over such matrices."""

    def init(a):
        _require_matrix("orthogonal", a)
        rows, cols = a.shape
        sample = mx.random.normal(shape=(max(rows, cols), min(rows, cols)))
        q, r = mx.linalg.qr(sample, stream=mx.cpu)
        q = q * mx.sign(mx.diagonal(r))
        q = q if rows >= cols else q.T
        return (gain * q).astype(dtype)

    return init


def sparse(sparsity: float, mean: float = 0.0, std: float = 1.0, dtype=mx.float32) -> Callable:
    """Normal samples with ``ceil(sparsity * columns)`` entries of each row set to zero, at random
    places (so every output feature keeps the same number of inputs)."""
    if not 0 <= sparsity <= 1:
        raise ValueError(f"init.sparse: sparsity must be in [0, 1], got {sparsity}")

    def init(a):
        _require_matrix("sparse", a)
        rows, cols = a.shape
        zeros = int(math.ceil(sparsity * cols))
        values = mx.random.normal(shape=a.shape, loc=mean, scale=std)
        # Each row's zeros at the places of its `zeros` smallest random keys.
        ranks = mx.argsort(mx.argsort(mx.random.uniform(shape=a.shape), axis=1), axis=1)
        return mx.where(ranks < zeros, 0, values).astype(dtype)

    return init
