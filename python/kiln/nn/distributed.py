"""Sharded layers, as ``mlx.nn``'s distributed ones (``mlx.nn.layers.distributed``): each process
of a ``mx.distributed`` group keeps a slice of a linear layer's weight and the collectives
combine the slices.

``AllToShardedLinear`` keeps a block of the output rows: every process takes the same input and
gives its slice of the output (the gradient of the input is summed over the group).
``ShardedToAllLinear`` keeps a block of the input columns: every process takes its slice of the
input and the partial products are summed (``all_sum``), so all get the whole output. Chaining
the two makes a tensor-parallel MLP. The ``Quantized`` versions do the same with a quantized
weight. ``shard_linear`` makes one of these from a ``Linear`` or ``QuantizedLinear``,
``shard_inplace`` slices a module's parameters in place by a rule, and ``fully_shard`` keeps only
a slice of every parameter, gathering the whole ones for each call.

A slice is rank r's r-th of ``group.size()`` equal parts; where ``segments`` says that a weight
is several matrices stacked (a fused QKV projection: 3), each is sliced and the slices are joined.
On a group of one process (all kiln has until it has a backend) a slice is the whole parameter
and the layers compute what ``Linear`` and ``QuantizedLinear`` compute.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache
from typing import Callable, Optional, Union

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.core.distributed import Group, _resolve
from kiln.nn.layers import Linear
from kiln.nn.module import Module
from kiln.nn.quantized import QuantizedLinear, _Quantized
from kiln.utils import tree_flatten, tree_map_with_path, tree_unflatten

__all__ = [
    "AllToShardedLinear",
    "ShardedToAllLinear",
    "QuantizedAllToShardedLinear",
    "QuantizedShardedToAllLinear",
    "FullyShardedModule",
    "fully_shard",
    "shard_linear",
    "shard_inplace",
]

_SHARDINGS = ("all-to-sharded", "sharded-to-all")


@lru_cache
def _summing_gradients(group: Group) -> Callable:
    """The identity, whose vjp sums the cotangent over ``group``: each process's slice of the
    output contributes to the gradient of the input all of them share."""
    if group.size() == 1:
        return lambda x: x

    @mx.custom_function
    def identity(x):
        return x

    @identity.vjp
    def identity_vjp(x, cotangent, output):
        return mx.distributed.all_sum(cotangent, group=group)

    return identity


def _check_segments(op: str, segments):
    if isinstance(segments, bool) or not isinstance(segments, (numbers.Integral, list, tuple)):
        raise TypeError(f"{op}: segments must be an int or a list of split points, got {type(segments).__name__}")
    if isinstance(segments, numbers.Integral):
        if segments <= 0:
            raise ValueError(f"{op}: segments must be positive, got {segments}")
        return
    if not segments or not all(isinstance(s, numbers.Real) and not isinstance(s, bool) for s in segments):
        raise ValueError(f"{op}: segments as a list must be a non-empty list of split points (ints) or fractions, got {segments!r}")
    if len({isinstance(s, numbers.Integral) for s in segments}) > 1:
        raise ValueError(f"{op}: segments mixes split indices (ints) and fractions (floats): {segments!r}; use one kind")


def _pieces(weight, segments, axis: int) -> list:
    """``weight`` cut along ``axis`` into its segments: a count of equal parts, split indices
    (ints), or split points as fractions of the axis (floats)."""
    if isinstance(segments, numbers.Integral) or all(isinstance(s, numbers.Integral) for s in segments):
        return mx.split(weight, segments if isinstance(segments, numbers.Integral) else list(segments), axis=axis)
    size = weight.shape[axis]
    return mx.split(weight, [int(f * size) for f in segments], axis=axis)


def _shard(op: str, parameters, rule: Callable, group: Group):
    """``parameters`` with each array that ``rule(path, array)`` names an axis for replaced by
    this process's slice along it: the rule returns None (keep the array whole), an axis, or
    ``(axis, segments)``."""
    n, r = group.size(), group.rank()

    def shard(path, weight):
        if not isinstance(weight, mx.array):
            return weight
        how = rule(path, weight)
        if how is None:
            return weight
        if isinstance(how, tuple) and len(how) == 2:
            axis, segments = how
        elif isinstance(how, numbers.Integral) and not isinstance(how, bool):
            axis, segments = how, 1
        else:
            raise ValueError(f"{op}: the sharding rule must return None, an axis or (axis, segments), got {how!r} for {path!r}")
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -weight.ndim <= axis < weight.ndim:
            raise ValueError(f"{op}: cannot shard {path!r} of shape {weight.shape} along axis {axis!r}")
        _check_segments(op, segments)
        try:
            parts = [mx.split(piece, n, axis=axis)[r] for piece in _pieces(weight, segments, axis)]
        except ValueError as e:
            raise ValueError(
                f"{op}: cannot shard {path!r} of shape {weight.shape} along axis {axis} in {segments} segment(s) "
                f"among {n} processes: {e}"
            ) from None
        return mx.contiguous(mx.concatenate(parts, axis=axis))

    return tree_map_with_path(shard, parameters)


def _all_to_sharded(segments) -> Callable:
    """The rule that slices a linear layer's outputs: rows of the weight (the second-last axis),
    entries of the bias."""
    return lambda path, w: (-1, segments) if path.endswith("bias") else (max(w.ndim - 2, 0), segments)


def _sharded_to_all(segments) -> Callable:
    """The rule that slices a linear layer's inputs: columns of the weight; the bias stays whole
    (it is added once, after the sum)."""
    return lambda path, w: None if path.endswith("bias") else (-1, segments)


def _check_sharding(op: str, sharding) -> None:
    if sharding not in _SHARDINGS:
        raise ValueError(f"{op}: sharding must be 'all-to-sharded' or 'sharded-to-all', got {sharding!r}")


def _require_module(op: str, module, kind=Module) -> None:
    if not isinstance(module, kind):
        raise TypeError(f"{op}: expected an nn.{kind.__name__}, got {type(module).__name__}")


def _split_size(op: str, what: str, dims: int, group: Group) -> int:
    n = group.size()
    if dims % n:
        raise ValueError(f"{op}: {what} of size {dims} cannot be split evenly among {n} processes")
    return dims // n


class _Split:
    """How a sharded layer is split among the processes of its group: ``_SPLIT`` says which
    dimension of the whole layer each process holds a slice of, "output" (its rows of the weight
    and its entries of the bias) or "input" (its columns of the weight; the bias stays whole)."""

    _SPLIT: str

    def _sliced_dims(self, op: str, input_dims: int, output_dims: int):
        """(input_dims, output_dims) of this process's slice of the layer."""
        if self._SPLIT == "output":
            return input_dims, _split_size(op, "the output", output_dims, self.group)
        return _split_size(op, "the input", input_dims, self.group), output_dims

    def _whole_dims(self, input_dims: int, output_dims: int):
        """(input_dims, output_dims) of the whole layer, from this process's slice."""
        n = self.group.size()
        return (input_dims, output_dims * n) if self._SPLIT == "output" else (input_dims * n, output_dims)

    @classmethod
    def _rule(cls, segments) -> Callable:
        """The rule that slices a whole layer's parameters as this class splits them."""
        return (_all_to_sharded if cls._SPLIT == "output" else _sharded_to_all)(segments)


class _ShardedLinear(_Split, Module):
    """A ``Linear`` split among the processes of ``group`` (the global group where None)."""

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group: Optional[Group] = None):
        super().__init__()
        op = type(self).__name__
        require_positive(op, input_dims=input_dims, output_dims=output_dims)
        self.group = _resolve(op, group)
        inputs, outputs = self._sliced_dims(op, input_dims, output_dims)
        scale = math.sqrt(1.0 / input_dims)
        self.weight = mx.random.uniform(-scale, scale, shape=(outputs, inputs))
        if bias:
            self.bias = mx.random.uniform(-scale, scale, shape=(outputs,))

    def _extra_repr(self) -> str:
        input_dims, output_dims = self._whole_dims(self.weight.shape[1], self.weight.shape[0])
        return f"input_dims={input_dims}, output_dims={output_dims}, bias={'bias' in self}"

    @classmethod
    def from_linear(cls, linear_layer: Module, *, segments: Union[int, list] = 1, group: Optional[Group] = None):
        """This process's slice of ``linear_layer`` (a ``Linear``), split as this class splits
        (``segments`` stacked matrices in its weight are sliced each)."""
        op = f"{cls.__name__}.from_linear"
        _require_module(op, linear_layer, Linear)
        group = _resolve(op, group)
        output_dims, input_dims = linear_layer.weight.shape
        layer = cls(input_dims, output_dims, "bias" in linear_layer, group)
        layer.update(_shard(op, linear_layer.parameters(), cls._rule(segments), group))
        return layer


class AllToShardedLinear(_ShardedLinear):
    """A ``Linear`` whose output is split among the processes of ``group`` (the global group
    where None): each takes the whole input and holds ``output_dims / size`` rows of the weight
    (and entries of the bias), giving its slice of the output. The input's gradient is summed
    over the group."""

    _SPLIT = "output"

    def __call__(self, x):
        x = _summing_gradients(self.group)(x)
        if "bias" in self:
            return mx.addmm(self.bias, x, self.weight.T)
        return x @ self.weight.T


class ShardedToAllLinear(_ShardedLinear):
    """A ``Linear`` whose input is split among the processes of ``group``: each takes its
    ``input_dims / size`` slice of the input and holds those columns of the weight; the partial
    products are summed over the group (``all_sum``) and the bias added, so every process gets
    the whole output."""

    _SPLIT = "input"

    def __call__(self, x):
        y = mx.distributed.all_sum(x @ self.weight.T, group=self.group)
        return y + self.bias if "bias" in self else y


class _QuantizedSharded(_Split, _Quantized):
    """A sharded layer with a quantized weight (its slice quantized as ``QuantizedLinear``'s:
    the packed weight, scales and biases are frozen, a float ``bias`` trains)."""

    def __init__(
        self,
        input_dims: int,
        output_dims: int,
        bias: bool = True,
        group_size: Optional[int] = None,
        bits: Optional[int] = None,
        mode: str = "affine",
        group: Optional[Group] = None,
    ):
        super().__init__()
        op = type(self).__name__
        require_positive(op, input_dims=input_dims, output_dims=output_dims)
        self.group = _resolve(op, group)
        inputs, outputs = self._sliced_dims(op, input_dims, output_dims)
        scale = math.sqrt(1 / input_dims)
        self._set_weight(mx.random.uniform(-scale, scale, (outputs, inputs)), group_size, bits, mode)
        if bias:
            self.bias = mx.zeros((outputs,))
            self.unfreeze(keys=["bias"], recurse=False)

    def _extra_repr(self) -> str:
        rows, words = self.weight.shape
        input_dims, output_dims = self._whole_dims(words * 32 // self.bits, rows)
        return (
            f"input_dims={input_dims}, output_dims={output_dims}, bias={'bias' in self}, "
            f"group_size={self.group_size}, bits={self.bits}, mode={self.mode}"
        )

    @classmethod
    def from_quantized_linear(cls, quantized_linear_layer: Module, *, segments: Union[int, list] = 1, group: Optional[Group] = None):
        """This process's slice of ``quantized_linear_layer`` (a ``QuantizedLinear``), split as
        this class splits: its rows or columns (whole quantization groups) of the packed weight,
        scales and biases, and its share of the bias; same quantization."""
        op, layer = f"{cls.__name__}.from_quantized_linear", quantized_linear_layer
        _require_module(op, layer, QuantizedLinear)
        group = _resolve(op, group)
        output_dims, words = layer.weight.shape
        input_dims = words * 32 // layer.bits
        out = cls(input_dims, output_dims, "bias" in layer, group_size=layer.group_size, bits=layer.bits, mode=layer.mode, group=group)
        out.update(_shard(op, layer.parameters(), cls._rule(segments), group))
        return out


class QuantizedAllToShardedLinear(_QuantizedSharded):
    """``AllToShardedLinear`` with a quantized weight: each process holds its rows of the weight
    quantized (``mx.quantize``'s words, scales and, in affine mode, biases), as
    ``QuantizedLinear`` holds the whole."""

    _SPLIT = "output"

    def __call__(self, x):
        y = self._product(_summing_gradients(self.group)(x))
        return y + self.bias if "bias" in self else y


class QuantizedShardedToAllLinear(_QuantizedSharded):
    """``ShardedToAllLinear`` with a quantized weight: each process holds its columns of the
    weight quantized (its slice of the input must be a whole number of quantization groups)."""

    _SPLIT = "input"

    def __call__(self, x):
        y = mx.distributed.all_sum(self._product(x), group=self.group)
        return y + self.bias if "bias" in self else y


def shard_inplace(module: Module, sharding: Union[str, Callable], *, segments: Union[int, list] = 1, group: Optional[Group] = None) -> None:
    """Replaces ``module``'s parameters by this process's slices of them. ``sharding`` is
    ``"all-to-sharded"`` or ``"sharded-to-all"`` (the slicing of ``AllToShardedLinear`` or
    ``ShardedToAllLinear``, with ``segments``), or a rule ``(path, array) -> None | axis | (axis,
    segments)``. The module's code is unchanged: where it must combine slices (``all_sum``), it
    has to call the collectives itself."""
    _require_module("shard_inplace", module)
    if isinstance(sharding, str):
        _check_sharding("shard_inplace", sharding)
        _check_segments("shard_inplace", segments)
        rule = (_all_to_sharded if sharding == "all-to-sharded" else _sharded_to_all)(segments)
    elif callable(sharding):
        if segments != 1:
            raise ValueError("shard_inplace: segments applies to the named shardings; a sharding rule returns (axis, segments) itself")
        rule = sharding
    else:
        raise TypeError(f"shard_inplace: sharding must be 'all-to-sharded', 'sharded-to-all' or a callable, got {type(sharding).__name__}")
    group = _resolve("shard_inplace", group)
    module.update(_shard("shard_inplace", module.parameters(), rule, group))


def shard_linear(module: Module, sharding: str, *, segments: Union[int, list] = 1, group: Optional[Group] = None) -> Module:
    """A new sharded layer made from ``module`` (a ``Linear`` or ``QuantizedLinear``, left
    unchanged): ``"all-to-sharded"`` gives an ``AllToShardedLinear`` (or its quantized version),
    ``"sharded-to-all"`` a ``ShardedToAllLinear``."""
    _check_sharding("shard_linear", sharding)
    _check_segments("shard_linear", segments)
    if isinstance(module, Linear):
        cls = AllToShardedLinear if sharding == "all-to-sharded" else ShardedToAllLinear
        return cls.from_linear(module, segments=segments, group=group)
    if isinstance(module, QuantizedLinear):
        cls = QuantizedAllToShardedLinear if sharding == "all-to-sharded" else QuantizedShardedToAllLinear
        return cls.from_quantized_linear(module, segments=segments, group=group)
    raise TypeError(f"shard_linear: module must be an nn.Linear or nn.QuantizedLinear, got {type(module).__name__}")


def _gathering(group: Group, full_shapes: list, sizes: list, compute_dtype):
    """A function from this process's parameter slices to the whole parameters (``all_gather``
    of them flattened into one row), whose vjp sums the whole gradients over the group and
    keeps this process's slice of the sum, divided by the group's size."""
    n = group.size()
    offsets = [sum(sizes[:i]) for i in range(1, len(sizes))]
    slice_shapes = [(s[0] // n, *s[1:]) for s in full_shapes]

    def cast(x, dtype):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)

    @mx.custom_function
    def gather(slices):
        row = mx.concatenate([cast(s.reshape(1, -1), compute_dtype) for s in slices], axis=1)
        rows = mx.distributed.all_gather(row, group=group)
        return [p.reshape(shape) for p, shape in zip(mx.split(rows, offsets, axis=1), full_shapes)]

    @gather.vjp
    def gather_vjp(slices, cotangents, outputs):
        rows = mx.concatenate([c.reshape(n, -1) for c in cotangents], axis=1)
        mine = mx.distributed.sum_scatter(rows, group=group) / n
        return [cast(p.reshape(shape), s.dtype) for p, shape, s in zip(mx.split(mine, offsets, axis=1), slice_shapes, slices)]

    return gather


def _own_parameter(module, key, value) -> bool:
    """The parameters a ``FullyShardedModule`` slices: not those of a nested one."""
    return not isinstance(value, FullyShardedModule) and Module.valid_parameter_filter(module, key, value)


class FullyShardedModule(Module):
    """Wraps ``module`` so that each process of ``group`` keeps only its slice (along the first
    axis) of every parameter; each call gathers the whole parameters (``all_gather``, cast to
    ``compute_dtype`` if given) and the backward pass gives each process the group's mean
    gradient of its slice. Every parameter's first axis must divide evenly among the group."""

    def __init__(self, module: Module, group: Optional[Group] = None, compute_dtype=None):
        super().__init__()
        _require_module("FullyShardedModule", module)
        if compute_dtype is not None and not isinstance(compute_dtype, mx.Dtype):
            raise TypeError(f"FullyShardedModule: compute_dtype must be a Dtype or None, got {type(compute_dtype).__name__}")
        group = _resolve("FullyShardedModule", group)
        n = group.size()
        flat = tree_flatten(module.filter_and_map(_own_parameter))
        for path, a in flat:
            if a.ndim == 0 or a.shape[0] % n:
                raise ValueError(f"FullyShardedModule: parameter {path!r} of shape {a.shape} cannot be split along its first axis among {n} processes")
        object.__setattr__(self, "_paths", [p for p, _ in flat])
        module.update(_shard("FullyShardedModule", module.filter_and_map(_own_parameter), lambda p, w: 0, group))
        self.module = module
        object.__setattr__(self, "_gather", _gathering(group, [a.shape for _, a in flat], [a.size // n for _, a in flat], compute_dtype))

    def _extra_repr(self) -> str:
        return f"num_sharded_params={len(self._paths)}"

    def _with_whole_parameters(self, fn, *args, **kwargs):
        slices = self.module.filter_and_map(_own_parameter)
        whole = self._gather([a for _, a in tree_flatten(slices)]) if self._paths else []
        self.module.update(tree_unflatten(list(zip(self._paths, whole))) if self._paths else {})
        try:
            return fn(*args, **kwargs)
        finally:
            self.module.update(slices)

    def __call__(self, *args, **kwargs):
        return self._with_whole_parameters(self.module, *args, **kwargs)

    def as_linear(self, *args, **kwargs):
        """The wrapped module's ``as_linear`` (a tied embedding's), with the whole parameters."""
        return self._with_whole_parameters(self.module.as_linear, *args, **kwargs)


def fully_shard(module: Module, *, group: Optional[Group] = None, compute_dtype=None) -> Module:
    """``module`` wrapped in a ``FullyShardedModule``; ``module`` itself where there is nothing
    to shard: a group of one process, a module already wrapped, or one without parameters."""
    _require_module("fully_shard", module)
    group = _resolve("fully_shard", group)
    if compute_dtype is not None and not isinstance(compute_dtype, mx.Dtype):
        raise TypeError(f"fully_shard: compute_dtype must be a Dtype or None, got {type(compute_dtype).__name__}")
    if group.size() == 1 or isinstance(module, FullyShardedModule):
        return module
    wrapped = FullyShardedModule(module, group=group, compute_dtype=compute_dtype)
    return wrapped if wrapped._paths else module
