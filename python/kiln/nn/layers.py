"""Layers, as ``mlx.nn``: Identity, Linear, Sequential, Embedding, Dropout, MultiHeadAttention
(activations are in ``kiln.nn.activations``, normalisations in ``kiln.nn.normalization``)."""

from __future__ import annotations

import math
from typing import Any, Optional

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments (as mlx's, so that it can
    stand in for another layer)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__()

    def __call__(self, x):
        return x


class Linear(Module):
    """``y = x W^T + b`` with W of shape (output_dims, input_dims), initialised uniformly in
    ``±1/sqrt(input_dims)``."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True):
        super().__init__()
        require_positive("Linear", input_dims=input_dims, output_dims=output_dims)
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, shape=(output_dims, input_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, shape=(output_dims,))

    def _extra_repr(self):
        return f"input_dims={self.weight.shape[1]}, output_dims={self.weight.shape[0]}, bias={'bias' in self}"

    def __call__(self, x):
        if "bias" in self:
            return mx.addmm(self.bias, x, self.weight.T)
        return x @ self.weight.T


class Sequential(Module):
    """Calls its layers in order."""

    def __init__(self, *modules):
        super().__init__()
        self.layers = list(modules)

    def __call__(self, x):
        for m in self.layers:
            x = m(x)
        return x


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of ``dims``, initialised normally with std
    ``1/sqrt(dims)``."""

    def __init__(self, num_embeddings: int, dims: int):
        super().__init__()
        require_positive("Embedding", num_embeddings=num_embeddings, dims=dims)
        self.weight = mx.random.normal(shape=(num_embeddings, dims), scale=math.sqrt(1.0 / dims))

    def __call__(self, x):
        return self.weight[x]

    def as_linear(self, x):
        """``x`` times the table transposed (for tied output layers)."""
        return x @ self.weight.T


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode, scaling the rest by 1/(1-p).
    It draws from ``random.state``: capture that when compiling a training step."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self._p_1 = 1 - p

    def __call__(self, x):
        if self._p_1 == 1 or not self.training:
            return x
        mask = mx.random.bernoulli(self._p_1, x.shape)
        return (mask * x) * (1 / self._p_1)


class MultiHeadAttention(Module):
    """Scaled dot-product attention over ``num_heads`` heads with input and output projections."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        query_input_dims: Optional[int] = None,
        key_input_dims: Optional[int] = None,
        value_input_dims: Optional[int] = None,
        value_dims: Optional[int] = None,
        value_output_dims: Optional[int] = None,
        bias: bool = False,
    ):
        super().__init__()
        require_positive("MultiHeadAttention", dims=dims, num_heads=num_heads)
        if dims % num_heads != 0:
            raise ValueError(f"MultiHeadAttention: dims ({dims}) must be divisible by num_heads ({num_heads})")
        query_input_dims = query_input_dims or dims
        key_input_dims = key_input_dims or dims
        value_input_dims = value_input_dims or key_input_dims
        value_dims = value_dims or dims
        value_output_dims = value_output_dims or dims
        self.num_heads = num_heads
        self.query_proj = Linear(query_input_dims, dims, bias=bias)
        self.key_proj = Linear(key_input_dims, dims, bias=bias)
        self.value_proj = Linear(value_input_dims, value_dims, bias=bias)
        self.out_proj = Linear(value_dims, value_output_dims, bias=bias)

    def __call__(self, queries, keys, values, mask=None):
        q, k, v = self.query_proj(queries), self.key_proj(keys), self.value_proj(values)
        h = self.num_heads
        B, L, D = q.shape
        S = k.shape[1]
        q = q.reshape(B, L, h, -1).transpose(0, 2, 1, 3)
        k = k.reshape(B, S, h, -1).transpose(0, 2, 3, 1)
        v = v.reshape(B, S, h, -1).transpose(0, 2, 1, 3)
        scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k
        if mask is not None:
            scores = scores + mask
        out = mx.softmax(scores, axis=-1) @ v
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    @staticmethod
    def create_additive_causal_mask(N: int, dtype: Any = mx.float32):
        """A (N, N) mask with a large negative value above the diagonal."""
        idx = mx.arange(N)
        mask = idx[:, None] < idx[None]
        return mask.astype(dtype) * -1e9
