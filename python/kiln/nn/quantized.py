"""Quantized layers, as ``mlx.nn``'s: ``QuantizedLinear`` and ``QuantizedEmbedding`` keep their
weight quantized (``mx.quantize``: uint32 words with per-group ``scales``, and ``biases`` in
affine mode) and multiply with ``mx.quantized_matmul``; ``QQLinear`` quantizes its input too
(``mx.qqmm``); ``nn.quantize`` swaps them in for the layers of a model that have
``to_quantized``. Quantized weights are frozen (only a float ``bias`` trains); a ``QQLinear``
in training mode keeps a float weight that trains through the quantization."""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module
from kiln.utils import tree_map_with_path

# Group size and bits each mode defaults to (mlx's).
_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "nvfp4": (16, 4), "mxfp8": (32, 8)}


def _settings(mode: str, group_size: Optional[int], bits: Optional[int]):
    if mode not in _DEFAULTS:
        raise ValueError(f"quantize: mode must be one of {sorted(_DEFAULTS)}, got {mode!r}")
    default_group, default_bits = _DEFAULTS[mode]
    return (default_group if group_size is None else group_size), (default_bits if bits is None else bits)


class _Quantized(Module):
    """The quantized weight, its scales and (affine) biases, and their settings. The packed
    weight (integers) is never trainable."""

    _always_frozen = ("weight",)

    def _set_weight(self, weight, group_size, bits, mode):
        self.group_size, self.bits = _settings(mode, group_size, bits)
        self.mode = mode
        self.weight, self.scales, *biases = mx.quantize(weight, self.group_size, self.bits, mode=mode)
        if biases:
            self.biases = biases[0]
        self.freeze()

    def _product(self, x, transpose: bool = True):
        return mx.quantized_matmul(
            x, self.weight, self.scales, self.get("biases"), transpose=transpose, group_size=self.group_size, bits=self.bits, mode=self.mode
        )


class QuantizedLinear(_Quantized):
    """``Linear`` with a quantized weight (initialised as ``Linear``'s, then quantized)."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine"):
        super().__init__()
        require_positive("QuantizedLinear", input_dims=input_dims, output_dims=output_dims)
        scale = math.sqrt(1 / input_dims)
        self._set_weight(mx.random.uniform(-scale, scale, (output_dims, input_dims)), group_size, bits, mode)
        if bias:
            self.bias = mx.zeros((output_dims,))
            self.unfreeze(keys=["bias"], recurse=False)

    def __call__(self, x):
        y = self._product(x)
        return y + self.bias if "bias" in self else y

    def _extra_repr(self) -> str:
        out_dims, words = self.weight.shape
        return (
            f"input_dims={words * 32 // self.bits}, output_dims={out_dims}, bias={'bias' in self}, "
            f"group_size={self.group_size}, bits={self.bits}, mode={self.mode}"
        )

    @classmethod
    def from_linear(cls, linear_layer: Module, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine"):
        """``linear_layer`` with its weight quantized (and its bias kept)."""
        output_dims, input_dims = linear_layer.weight.shape
        layer = cls(input_dims, output_dims, False, group_size, bits, mode)
        layer._set_weight(linear_layer.weight, group_size, bits, mode)
        if "bias" in linear_layer:
            layer.bias = linear_layer.bias
            layer.unfreeze(keys=["bias"], recurse=False)
        return layer


class QuantizedEmbedding(_Quantized):
    """``Embedding`` with a quantized table: a lookup dequantizes the rows it takes."""

    def __init__(self, num_embeddings: int, dims: int, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine"):
        super().__init__()
        require_positive("QuantizedEmbedding", num_embeddings=num_embeddings, dims=dims)
        self.num_embeddings, self.dims = num_embeddings, dims
        self._set_weight(mx.random.normal(shape=(num_embeddings, dims), scale=math.sqrt(1 / dims)), group_size, bits, mode)

    def __call__(self, x):
        biases = self.get("biases")
        return mx.dequantize(
            self.weight[x], self.scales[x], biases[x] if biases is not None else None, group_size=self.group_size, bits=self.bits, mode=self.mode
        )

    def as_linear(self, x):
        """``x`` times the table transposed (for tied output layers)."""
        return self._product(x)

    def _extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.dims}, group_size={self.group_size}, bits={self.bits}, mode={self.mode}"

    @classmethod
    def from_embedding(cls, embedding_layer: Module, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "affine"):
        """``embedding_layer`` with its table quantized."""
        num_embeddings, dims = embedding_layer.weight.shape
        layer = cls(num_embeddings, dims, group_size, bits, mode)
        layer._set_weight(embedding_layer.weight, group_size, bits, mode)
        return layer


def quantize(
    model: Module,
    group_size: Optional[int] = None,
    bits: Optional[int] = None,
    *,
    mode: str = "affine",
    quantize_input: bool = False,
    class_predicate: Optional[Callable[[str, Module], Union[bool, dict]]] = None,
) -> None:
    """Replaces, in place, the leaf modules of ``model`` that ``class_predicate(path, module)``
    accepts (by default every one with ``to_quantized``) by their quantized versions; a dict from
    the predicate gives that module's own ``to_quantized`` arguments."""
    if not isinstance(model, Module):
        raise TypeError(f"quantize: model must be an nn.Module, got {type(model).__name__}")
    class_predicate = class_predicate or (lambda _, m: hasattr(m, "to_quantized"))

    def convert(path, module):
        chosen = class_predicate(path, module)
        if not chosen:
            return module
        if not hasattr(module, "to_quantized"):
            raise ValueError(f"quantize: {path} ({type(module).__name__}) cannot be quantized")
        if isinstance(chosen, dict):
            return module.to_quantized(**chosen)
        if chosen is True:
            extra = {"quantize_input": True} if quantize_input else {}
            return module.to_quantized(group_size=group_size, bits=bits, mode=mode, **extra)
        raise ValueError(f"quantize: class_predicate must return a bool or a dict of to_quantized arguments, got {type(chosen).__name__}")

    model.update_modules(tree_map_with_path(convert, model.leaf_modules(), is_leaf=Module.is_module))


class QQLinear(Module):
    """A bias-free ``Linear`` whose input and weight are both quantized in a float format
    (``nvfp4`` or ``mxfp8``) for the product (``mx.qqmm``). In training mode the weight is kept
    in floating point and trains (the product's vjp is qqmm's straight-through one); ``eval()``
    quantizes it in place (``weight`` becomes words, with ``scales``) and ``train()`` restores a
    float weight from them."""

    def __init__(self, input_dims: int, output_dims: int, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "nvfp4"):
        super().__init__()
        require_positive("QQLinear", input_dims=input_dims, output_dims=output_dims)
        if mode not in ("nvfp4", "mxfp8"):
            raise ValueError(f"QQLinear: mode must be 'nvfp4' or 'mxfp8', got {mode!r}")
        self.group_size, self.bits = _settings(mode, group_size, bits)
        self.mode = mode
        scale = math.sqrt(1 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, (output_dims, input_dims))
        self._quantized = False

    def _extra_repr(self) -> str:
        out_dims, in_dims = self.weight.shape
        if self._quantized:
            in_dims = in_dims * 32 // self.bits
        return f"input_dims={in_dims}, output_dims={out_dims}, group_size={self.group_size}, bits={self.bits}, mode={self.mode}"

    def quantize(self) -> None:
        """Stores the weight quantized (for inference)."""
        if not self._quantized:
            self._float_dtype = self.weight.dtype
            self.weight, self.scales = mx.quantize(self.weight, self.group_size, self.bits, mode=self.mode)
            self._quantized = True

    def dequantize(self) -> None:
        """Stores the weight in floating point again (for training), in its dtype before
        ``quantize``."""
        if self._quantized:
            self.weight = mx.dequantize(
                self.weight, self.scales, group_size=self.group_size, bits=self.bits, mode=self.mode, dtype=self._float_dtype
            )
            del self.scales
            self._quantized = False

    def _set_training_mode(self, mode: bool) -> None:
        super()._set_training_mode(mode)
        if mode:
            self.dequantize()
        else:
            self.quantize()

    def __call__(self, x):
        return mx.qqmm(x, self.weight, scales=self.get("scales"), group_size=self.group_size, bits=self.bits, mode=self.mode)

    @classmethod
    def from_linear(cls, linear_layer: Module, group_size: Optional[int] = None, bits: Optional[int] = None, mode: str = "nvfp4"):
        """``linear_layer`` (which must have no bias) as a ``QQLinear``, in the same mode."""
        output_dims, input_dims = linear_layer.weight.shape
        if "bias" in linear_layer:
            raise ValueError("QQLinear.from_linear: QQLinear has no bias; the layer has one (build it with bias=False)")
        layer = cls(input_dims, output_dims, group_size, bits, mode)
        layer.weight = linear_layer.weight
        layer.train(linear_layer.training)
        return layer
