"""Positional encodings, as ``mlx.nn``'s: RoPE (rotary, on ``mx.fast.rope``), sinusoidal
encodings of positions, and ALiBi's linear attention biases."""

from __future__ import annotations

import math
from typing import Optional

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module


class RoPE(Module):
    """Rotary positional encoding of the first ``dims`` features of ``(..., L, D)`` inputs, with
    frequencies ``base ** (-2i / dims)``, positions scaled by ``scale`` and starting at ``offset``
    (``traditional`` rotates adjacent pairs instead of the two halves)."""

    def __init__(self, dims: int, traditional: bool = False, base: float = 10000, scale: float = 1.0):
        super().__init__()
        require_positive("RoPE", dims=dims)
        self.dims, self.traditional, self.base, self.scale = dims, traditional, base, scale

    def __call__(self, x, offset: int = 0):
        return mx.fast.rope(x, self.dims, traditional=self.traditional, base=self.base, scale=self.scale, offset=offset)

    def _extra_repr(self) -> str:
        return f"{self.dims}, traditional={self.traditional}"


class SinusoidalPositionalEncoding(Module):
    """Maps positions ``x`` to ``(..., dims)`` features: the sines then the cosines (or the
    reverse, ``cos_first``) of x times ``dims / 2`` frequencies spaced geometrically from
    ``max_freq`` down to ``min_freq`` (times 2π with ``full_turns``), scaled by ``scale``
    (default sqrt(2 / dims), which gives each row unit norm)."""

    def __init__(
        self,
        dims: int,
        min_freq: float = 0.0001,
        max_freq: float = 1,
        scale: Optional[float] = None,
        cos_first: bool = False,
        full_turns: bool = False,
    ):
        super().__init__()
        if not isinstance(dims, int) or dims <= 0 or dims % 2:
            raise ValueError(f"SinusoidalPositionalEncoding: dims must be a positive even integer, got {dims!r}")
        half = dims // 2
        # From 1 down to 0 across the frequencies (a single frequency sits at max_freq).
        fraction = mx.array([1.0]) if half == 1 else 1 - mx.arange(half) / (half - 1)
        log_min, log_max = math.log(min_freq), math.log(max_freq)
        self._frequencies = mx.exp(log_min + fraction * (log_max - log_min)) * (2 * math.pi if full_turns else 1)
        self.scale = math.sqrt(2 / dims) if scale is None else scale
        self.cos_first = cos_first

    def __call__(self, x):
        angles = mx.expand_dims(x, -1) * self._frequencies
        parts = [mx.cos(angles), mx.sin(angles)] if self.cos_first else [mx.sin(angles), mx.cos(angles)]
        y = mx.concatenate(parts, axis=-1)
        return y * self.scale if self.scale != 1 else y


class ALiBi(Module):
    """Adds ALiBi's biases to attention scores ``(B, heads, L, S)``: minus each head's slope times
    the distance between query and key positions (queries start at ``offset``), plus ``mask``."""

    @staticmethod
    def create_alibi_slope(num_heads: int, dtype=mx.float32):
        """The heads' slopes, ``(num_heads, 1, 1)``: for a power of two n, 2^(-8 (i+1) / n); for
        other counts, those of the power of two below, then every other slope of twice that."""

        def slopes(n: int) -> list:
            if n & (n - 1) == 0:
                return [2 ** (-8 * (i + 1) / n) for i in range(n)]
            below = 1 << (n.bit_length() - 1)
            return slopes(below) + slopes(2 * below)[0::2][: n - below]

        require_positive("ALiBi", num_heads=num_heads)
        return mx.array(slopes(num_heads), dtype=dtype).reshape(num_heads, 1, 1)

    @staticmethod
    def create_alibi_matrix(q_sequence_length: int, k_sequence_length: int, num_heads: int, offset: int, dtype=mx.float32):
        """The biases ``(1, num_heads, q_sequence_length - offset, k_sequence_length)``."""
        queries = mx.arange(offset, q_sequence_length)
        keys = mx.arange(k_sequence_length)
        distance = -mx.abs(queries[:, None] - keys[None, :])
        return (distance[None, None] * ALiBi.create_alibi_slope(num_heads, dtype)).astype(dtype)

    def __call__(self, attention_scores, offset: int = 0, mask=None):
        biases = ALiBi.create_alibi_matrix(
            attention_scores.shape[-2] + offset, attention_scores.shape[-1], attention_scores.shape[1], offset, attention_scores.dtype
        )
        if mask is not None:
            biases = biases + mask
        return attention_scores + biases
