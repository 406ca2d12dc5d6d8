"""The transformer of "Attention Is All You Need", as ``mlx.nn``'s, with its module names (so
its checkpoints load): encoder and decoder layers, stacks of them with a final LayerNorm, and
the encoder-decoder ``Transformer``. Every sub-layer is a residual around attention or the MLP,
with the LayerNorm before it (``norm_first``, the default) or after the sum."""

from __future__ import annotations

from typing import Any, Callable, Optional

import kiln.core as mx
from kiln.nn.activations import relu
from kiln.nn.layers import Dropout, Linear, MultiHeadAttention
from kiln.nn.module import Module
from kiln.nn.normalization import LayerNorm


def _residual(x, sublayer: Callable, norm: Module, norm_first: bool):
    """x + sublayer(norm(x)) when ``norm_first``, else norm(x + sublayer(x))."""
    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))


class _Layer(Module):
    """What both layer kinds share: the MLP (``linear1``, activation, dropout, ``linear2``) and
    the settings."""

    def __init__(self, dims: int, mlp_dims: Optional[int], dropout: float, activation: Callable, norm_first: bool, mlp_dropout: str):
        super().__init__()
        mlp_dims = mlp_dims or 4 * dims
        self.linear1 = Linear(dims, mlp_dims)
        self.linear2 = Linear(mlp_dims, dims)
        self.activation = activation
        self.norm_first = norm_first
        self._mlp_dropout = mlp_dropout
        setattr(self, mlp_dropout, Dropout(dropout))

    def _mlp(self, x):
        return self.linear2(self[self._mlp_dropout](self.activation(self.linear1(x))))


class TransformerEncoderLayer(_Layer):
    """Self-attention, then the MLP, each a residual sub-layer."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
    ):
        super().__init__(dims, mlp_dims, dropout, activation, norm_first, "dropout2")
        self.attention = MultiHeadAttention(dims, num_heads)
        self.ln1, self.ln2 = LayerNorm(dims), LayerNorm(dims)
        self.dropout1 = Dropout(dropout)

    def __call__(self, x, mask):
        x = _residual(x, lambda y: self.dropout1(self.attention(y, y, y, mask)), self.ln1, self.norm_first)
        return _residual(x, self._mlp, self.ln2, self.norm_first)


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention over the encoder's output (``memory``), then the MLP."""

    def __init__(
        self,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        norm_first: bool = True,
    ):
        super().__init__(dims, mlp_dims, dropout, activation, norm_first, "dropout3")
        self.self_attention = MultiHeadAttention(dims, num_heads)
        self.cross_attention = MultiHeadAttention(dims, num_heads)
        self.ln1, self.ln2, self.ln3 = LayerNorm(dims), LayerNorm(dims), LayerNorm(dims)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def __call__(self, x, memory, x_mask, memory_mask):
        x = _residual(x, lambda y: self.dropout1(self.self_attention(y, y, y, x_mask)), self.ln1, self.norm_first)
        x = _residual(x, lambda y: self.dropout2(self.cross_attention(y, memory, memory, memory_mask)), self.ln2, self.norm_first)
        return _residual(x, self._mlp, self.ln3, self.norm_first)


class _Stack(Module):
    """``num_layers`` layers of the subclass's ``_layer`` kind, then a LayerNorm; with
    ``checkpoint`` each layer's intermediates are recomputed in the backward pass instead of
    kept."""

    _layer: type = Module

    def __init__(
        self,
        num_layers: int,
        dims: int,
        num_heads: int,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation=relu,
        norm_first: bool = True,
        checkpoint: bool = False,
    ):
        super().__init__()
        self.layers = [self._layer(dims, num_heads, mlp_dims, dropout, activation, norm_first) for _ in range(num_layers)]
        self.ln = LayerNorm(dims)
        self.checkpoint = checkpoint

    def _run(self, x, *rest):
        for layer in self.layers:
            x = mx.checkpoint(layer)(x, *rest) if self.checkpoint else layer(x, *rest)
        return self.ln(x)


class TransformerEncoder(_Stack):
    """A stack of encoder layers."""

    _layer = TransformerEncoderLayer

    def __call__(self, x, mask):
        return self._run(x, mask)


class TransformerDecoder(_Stack):
    """A stack of decoder layers."""

    _layer = TransformerDecoderLayer

    def __call__(self, x, memory, x_mask, memory_mask):
        return self._run(x, memory, x_mask, memory_mask)


class Transformer(Module):
    """An encoder over ``src`` and a decoder over ``tgt`` attending to the encoder's output; a
    ``custom_encoder`` or ``custom_decoder`` module replaces the default stack."""

    def __init__(
        self,
        dims: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        mlp_dims: Optional[int] = None,
        dropout: float = 0.0,
        activation: Callable[[Any], Any] = relu,
        custom_encoder: Optional[Any] = None,
        custom_decoder: Optional[Any] = None,
        norm_first: bool = True,
        checkpoint: bool = False,
    ):
        super().__init__()
        settings = (dims, num_heads, mlp_dims, dropout, activation, norm_first, checkpoint)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(num_encoder_layers, *settings)
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(num_decoder_layers, *settings)

    def __call__(self, src, tgt, src_mask, tgt_mask, memory_mask):
        return self.decoder(tgt, self.encoder(src, src_mask), tgt_mask, memory_mask)
