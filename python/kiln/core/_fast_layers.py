"""The layer ops of ``mx.fast`` (``rms_norm``, ``layer_norm``, ``rope``,
``scaled_dot_product_attention``) with mlx's arguments, checks and dtypes, written over kiln's
core ops. They compute in float32 whatever the input dtype (as mlx's kernels do), so half-
precision inputs lose nothing in the reductions; under ``compile`` each norm is one fused
kernel, and grad, vjp, jvp and vmap come from the core ops they are made of.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import kiln.core as mx
from kiln.core._arguments import require_array
from kiln.core._streams import on_stream


def _check_last_axis(op: str, x, name: str, p) -> None:
    require_array(f"[{op}]", name, p, optional=True)
    if p is not None and (p.ndim != 1 or p.shape[0] != x.shape[-1]):
        raise ValueError(
            f"[{op}] {name} must be one-dimensional with the size of the last axis of x "
            f"({x.shape[-1]}), got shape {tuple(p.shape)}"
        )


def _check_real(op: str, *arrays) -> None:
    """The norms compute in float32: a complex input would lose its imaginary part there."""
    for a in arrays:
        if a is not None and a.dtype == mx.complex64:
            raise ValueError(f"[{op}] complex64 inputs are not supported (the norm computes in float32); pass a real array")


def rms_norm(x, weight, eps: float, *, stream=None):
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last axis (``weight`` may be None),
    computed in float32; the result has ``x``'s dtype promoted with ``weight``'s."""
    if require_array("[rms_norm]", "x", x).ndim == 0:
        raise ValueError("[rms_norm] x must have at least one dimension, got a scalar")
    _check_last_axis("rms_norm", x, "weight", weight)
    _check_real("rms_norm", x, weight)
    with on_stream(stream):
        out_type = mx.result_type(x, weight) if weight is not None else x.dtype
        xf = x.astype(mx.float32)
        y = (xf * mx.rsqrt(mx.mean(mx.square(xf), axis=-1, keepdims=True) + eps)).astype(out_type)
        return y if weight is None else y * weight


def layer_norm(x, weight, bias, eps: float, *, stream=None):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (``weight`` and
    ``bias`` may be None), computed in float32; the result has the promoted dtype of ``x`` and
    the parameters given."""
    if require_array("[layer_norm]", "x", x).ndim == 0:
        raise ValueError("[layer_norm] x must have at least one dimension, got a scalar")
    _check_last_axis("layer_norm", x, "weight", weight)
    _check_last_axis("layer_norm", x, "bias", bias)
    _check_real("layer_norm", x, weight, bias)
    with on_stream(stream):
        params = [p for p in (weight, bias) if p is not None]
        out_type = mx.result_type(x, *params) if params else x.dtype
        xf = x.astype(mx.float32)
        centred = xf - mx.mean(xf, axis=-1, keepdims=True)
        var = mx.mean(mx.square(centred), axis=-1, keepdims=True)
        y = (centred * mx.rsqrt(var + eps)).astype(out_type)
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        return y


def _rope_angles(a, dims: int, base, scale: float, offset, freqs):
    """The rotation angles, float32, shaped to broadcast against the rotated halves of ``a``."""
    n = a.shape[-2]
    positions = mx.arange(n, dtype=mx.float32)
    if isinstance(offset, mx.array) and offset.size > 1:
        if offset.ndim != 1 or offset.shape[0] != a.shape[0]:
            raise ValueError(
                f"[rope] offset must be a scalar or a vector with one entry per batch element "
                f"({a.shape[0]}), got shape {tuple(offset.shape)}"
            )
        per_batch = mx.reshape(offset.astype(mx.float32), (a.shape[0],) + (1,) * (a.ndim - 2))
        positions = per_batch + positions
    else:
        positions = positions + (offset.astype(mx.float32) if isinstance(offset, mx.array) else float(offset))
    positions = positions * scale
    if freqs is None:
        inv_freqs = mx.exp(mx.arange(0.0, dims // 2, dtype=mx.float32) * (-math.log(base) / (dims // 2)))
    else:
        inv_freqs = 1.0 / freqs.astype(mx.float32)
    return mx.expand_dims(positions, -1) * inv_freqs


def rope(
    a,
    dims: int,
    *,
    traditional: bool,
    base: Optional[float],
    scale: float,
    offset: Union[int, "mx.array"],
    freqs=None,
    stream=None,
):
    """Rotary position embedding of the first ``dims`` features of ``a`` (the rest pass
    through): feature pairs (adjacent ones when ``traditional``, else the two halves) rotated by
    ``(offset + position) * scale * frequency``, the frequencies ``base ** (-2i / dims)`` or
    ``1 / freqs``. Positions run along axis -2; ``offset`` is a scalar or one per batch element."""
    require_array("[rope]", "a", a)
    require_array("[rope]", "freqs", freqs, optional=True)
    if not isinstance(dims, int) or dims <= 0 or dims % 2 or a.ndim < 1 or dims > a.shape[-1]:
        last = a.shape[-1] if a.ndim else "none"
        raise ValueError(f"[rope] dims must be a positive even number at most the last axis ({last}), got {dims}")
    if a.ndim < 3:
        raise ValueError(f"[rope] the input must have at least 3 dimensions, got shape {tuple(a.shape)}")
    if not mx.issubdtype(a.dtype, mx.floating):
        raise ValueError(f"[rope] the input must be a floating point array, got {a.dtype}")
    if freqs is None and base is None:
        raise ValueError("[rope] give either base or freqs")
    if freqs is not None and (freqs.ndim != 1 or freqs.shape[0] != dims // 2):
        raise ValueError(f"[rope] freqs must be one-dimensional with dims // 2 = {dims // 2} entries, got shape {tuple(freqs.shape)}")
    with on_stream(stream):
        theta = _rope_angles(a, dims, base, scale, offset, freqs)
        cos, sin = mx.cos(theta), mx.sin(theta)
        x = a.astype(mx.float32)
        if traditional:
            x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        else:
            x1, x2 = x[..., : dims // 2], x[..., dims // 2 : dims]
        r1 = x1 * cos - x2 * sin
        r2 = x1 * sin + x2 * cos
        if traditional:
            rotated = mx.reshape(mx.stack([r1, r2], axis=-1), r1.shape[:-1] + (dims,))
        else:
            rotated = mx.concatenate([r1, r2], axis=-1)
        if dims < a.shape[-1]:
            rotated = mx.concatenate([rotated, x[..., dims:]], axis=-1)
        return rotated.astype(a.dtype)


def scaled_dot_product_attention(q, k, v, *, scale: float, mask=None, sinks=None, stream=None):
    """``softmax(q @ k.T * scale + mask) @ v`` over arrays of shape (batch, heads, length,
    features), the softmax in float32. Keys and values may have fewer heads than queries
    (grouped-query attention: query heads share them in equal groups). ``mask`` is None,
    ``"causal"``, a boolean array (False hides a score) or an additive array, broadcast to the
    scores' shape; ``sinks`` (one per query head) add a score that takes probability but no value."""
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        if require_array("[scaled_dot_product_attention]", name, t).ndim != 4:
            raise ValueError(f"[scaled_dot_product_attention] {name} must have 4 dimensions (batch, heads, length, features), got shape {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"[scaled_dot_product_attention] queries and keys must have the same features, got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"[scaled_dot_product_attention] keys and values must have the same batch, heads and length, got shapes {tuple(k.shape)} and {tuple(v.shape)}")
    n_heads, n_kv = q.shape[1], k.shape[1]
    if n_heads % n_kv:
        raise ValueError(f"[scaled_dot_product_attention] query heads ({n_heads}) must be a multiple of key/value heads ({n_kv})")
    if isinstance(mask, str) and mask != "causal":
        raise ValueError(f"[scaled_dot_product_attention] the only mask named by a string is 'causal', got {mask!r}")
    dtype = mx.result_type(q, k, v)
    if not mx.issubdtype(dtype, mx.floating):
        raise ValueError(f"[scaled_dot_product_attention] queries, keys and values must be floating point, got {dtype}")
    if sinks is not None:
        if mx.result_type(sinks, dtype) != dtype:
            raise ValueError(f"[scaled_dot_product_attention] sinks of {sinks.dtype} do not promote to the output's {dtype}")
        if sinks.ndim != 1 or sinks.shape[0] != n_heads:
            raise ValueError(f"[scaled_dot_product_attention] sinks must have one entry per query head ({n_heads}), got shape {tuple(sinks.shape)}")
    with on_stream(stream):
        q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
        b, length, keys = q.shape[0], q.shape[2], k.shape[2]
        repeats = n_heads // n_kv
        queries = q * mx.array(scale, q.dtype)
        if repeats > 1:
            queries = mx.reshape(queries, (b, n_kv, repeats, length, q.shape[-1]))
            k, v = mx.expand_dims(k, 2), mx.expand_dims(v, 2)
        scores = queries @ mx.swapaxes(k, -1, -2)
        if isinstance(mask, str):
            mask = (mx.arange(length) + (keys - length))[:, None] >= mx.arange(keys)[None]
        if mask is not None:
            if repeats > 1 and mask.ndim >= 3:
                mask = mx.expand_dims(mask, -3) if mask.shape[-3] == 1 else mx.unflatten(mask, -3, (n_kv, repeats))
            if mask.dtype == mx.bool_:
                scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
            else:
                scores = scores + mask
        if sinks is not None:
            column = mx.expand_dims(sinks, (0, 2, 3))
            if repeats > 1:
                column = mx.unflatten(column, 1, (n_kv, repeats))
            column = mx.broadcast_to(column.astype(scores.dtype), scores.shape[:-1] + (1,))
            scores = mx.concatenate([column, scores], axis=-1)
        weights = mx.softmax(scores, axis=-1, precise=True)
        if sinks is not None:
            weights = weights[..., 1:]
        out = weights @ v
        if repeats > 1:
            out = mx.reshape(out, (b, n_heads, length, v.shape[-1]))
        return out
