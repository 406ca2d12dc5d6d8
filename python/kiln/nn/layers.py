"""Layers, as ``mlx.nn``: Identity, Linear, Bilinear, Sequential, Embedding, Dropout (and its 2-D
and 3-D forms), MultiHeadAttention (activations are in ``kiln.nn.activations``, normalisations in
``kiln.nn.normalization``, positional encodings in ``kiln.nn.positional``)."""

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

    def to_quantized(self, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine", quantize_input: bool = False):
        """This layer as a ``QuantizedLinear``, or with ``quantize_input`` (nvfp4 or mxfp8) as a
        ``QQLinear``, whose input is quantized too."""
        from kiln.nn.quantized import QQLinear, QuantizedLinear

        if quantize_input:
            if mode not in ("nvfp4", "mxfp8"):
                raise ValueError(f"Linear.to_quantized: quantized inputs need mode 'nvfp4' or 'mxfp8', got {mode!r}")
            return QQLinear.from_linear(self, group_size, bits, mode)
        return QuantizedLinear.from_linear(self, group_size, bits, mode)


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

    def to_quantized(self, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine", quantize_input: bool = False):
        """This layer as a ``QuantizedEmbedding`` (whose lookups take no quantized input)."""
        from kiln.nn.quantized import QuantizedEmbedding

        if quantize_input:
            raise ValueError("Embedding.to_quantized: an embedding's input is indices; quantize_input does not apply")
        return QuantizedEmbedding.from_embedding(self, group_size, bits, mode)


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode, scaling the rest by 1/(1-p).
    It draws from ``random.state``: capture that when compiling a training step."""

    # How many axes before the channels one mask value covers (whole feature maps in the 2-D and
    # 3-D forms), and the input ranks the form takes (None: any).
    _shared_axes = 0
    _ranks: Optional[tuple] = None

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"{type(self).__name__}: p must be in [0, 1), got {p}")
        self._p_1 = 1 - p

    def __call__(self, x):
        if self._ranks is not None and x.ndim not in self._ranks:
            raise ValueError(
                f"{type(self).__name__}: the input must have {' or '.join(map(str, self._ranks))} axes "
                f"(channels last), got shape {x.shape}"
            )
        if self._p_1 == 1 or not self.training:
            return x
        shape = list(x.shape)
        for axis in range(2, 2 + self._shared_axes):
            shape[-axis] = 1
        mask = mx.random.bernoulli(self._p_1, shape)
        return (mask * x) * (1 / self._p_1)

    def _extra_repr(self) -> str:
        return f"p={1 - self._p_1:g}"


class Dropout2d(Dropout):
    """Dropout of whole channels of ``(N, H, W, C)`` or ``(H, W, C)`` inputs: one draw per channel
    and example, shared by its H x W values."""

    _shared_axes = 2
    _ranks = (3, 4)


class Dropout3d(Dropout):
    """Dropout of whole channels of ``(N, D, H, W, C)`` or ``(D, H, W, C)`` inputs."""

    _shared_axes = 3
    _ranks = (4, 5)


class Bilinear(Module):
    """``y = x1ᵀ W x2 + b`` for each output: ``weight`` is ``(output_dims, input2_dims,
    input1_dims)``, initialised uniformly in ±sqrt(1/input1_dims) as mlx's."""

    def __init__(self, input1_dims: int, input2_dims: int, output_dims: int, bias: bool = True):
        super().__init__()
        require_positive("Bilinear", input1_dims=input1_dims, input2_dims=input2_dims, output_dims=output_dims)
        scale = math.sqrt(1.0 / input1_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input2_dims, input1_dims))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, (output_dims,))

    def __call__(self, x1, x2):
        out, in2, in1 = self.weight.shape
        if x1.shape[-1] != in1 or x2.shape[-1] != in2 or x1.shape[:-1] != x2.shape[:-1]:
            raise ValueError(
                f"Bilinear: expected inputs (..., {in1}) and (..., {in2}) with the same leading axes, "
                f"got {x1.shape} and {x2.shape}"
            )
        # (..., in1) @ (in1, out·in2) -> (..., out, in2), then contracted with x2.
        left = (x1 @ self.weight.reshape(out * in2, in1).T).reshape(*x1.shape[:-1], out, in2)
        y = mx.sum(left * mx.expand_dims(x2, -2), axis=-1)
        return y + self.bias if "bias" in self else y


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
        """Attention of ``queries`` ``(B, L, D)`` over ``keys``/``values`` ``(B, S, D)``; ``mask``
        is an additive array, a boolean array (False: masked out) or "causal", as
        ``mx.fast.scaled_dot_product_attention`` takes it."""
        q, k, v = self.query_proj(queries), self.key_proj(keys), self.value_proj(values)
        h = self.num_heads
        B, L, _ = q.shape
        S = k.shape[1]
        q = q.reshape(B, L, h, -1).transpose(0, 2, 1, 3)
        k = k.reshape(B, S, h, -1).transpose(0, 2, 1, 3)
        v = v.reshape(B, S, h, -1).transpose(0, 2, 1, 3)
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]), mask=mask)
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    @staticmethod
    def create_additive_causal_mask(N: int, dtype: Any = mx.float32):
        """A (N, N) mask to add to attention scores: 0 on and below the diagonal, the dtype's most
        negative finite value above it (finite, so that no sum becomes NaN)."""
        idx = mx.arange(N)
        return mx.where(idx[:, None] < idx[None], mx.finfo(dtype).min, 0).astype(dtype)
