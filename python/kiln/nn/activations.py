"""Activation functions and their modules, as ``mlx.nn``'s (``nn.relu6(x)``, ``nn.ReLU6()(x)``),
each written from its definition over ``kiln.core`` ops so that compile fuses it with its
neighbours and autodiff differentiates it."""

from __future__ import annotations

import math
import numbers

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module

# SELU's constants (Klambauer et al., 2017): the fixed point of mean 0 and variance 1.
_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def _input(x):
    """``x`` as an array (numbers and nested lists are converted; anything else is refused by
    ``asarray`` with a TypeError or ValueError)."""
    return x if isinstance(x, mx.array) else mx.asarray(x)


def _real(op: str, **settings) -> None:
    """Each of ``settings`` is a real number or an array; else a TypeError naming it."""
    for name, value in settings.items():
        if not isinstance(value, (numbers.Real, mx.array)):
            raise TypeError(f"{op}: {name} must be a number, got {type(value).__name__}")


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    x = _input(x)
    return mx.sigmoid(x)


def tanh(x):
    """The hyperbolic tangent."""
    x = _input(x)
    return mx.tanh(x)


def relu(x):
    """max(x, 0)."""
    x = _input(x)
    return mx.maximum(x, 0)


def relu2(x):
    """relu(x) squared."""
    x = _input(x)
    return mx.square(relu(x))


def relu6(x):
    """min(max(x, 0), 6)."""
    x = _input(x)
    return mx.minimum(mx.maximum(x, 0), 6)


def leaky_relu(x, negative_slope: float = 0.01):
    """x where positive, ``negative_slope`` * x elsewhere."""
    x = _input(x)
    _real("leaky_relu", negative_slope=negative_slope)
    return mx.maximum(negative_slope * x, x)


def elu(x, alpha: float = 1.0):
    """x where positive, alpha * (exp(x) - 1) elsewhere."""
    x = _input(x)
    _real("elu", alpha=alpha)
    return mx.where(x > 0, x, alpha * mx.expm1(x))


def selu(x):
    """elu scaled by SELU's constants."""
    x = _input(x)
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def celu(x, alpha: float = 1.0):
    """max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1)."""
    x = _input(x)
    _real("celu", alpha=alpha)
    return mx.maximum(x, 0) + alpha * mx.expm1(mx.minimum(x, 0) / alpha)


def gelu(x):
    """x * Φ(x), with the exact normal CDF."""
    x = _input(x)
    return x * (1 + mx.erf(x / math.sqrt(2))) / 2


def gelu_approx(x):
    """The tanh approximation of gelu."""
    x = _input(x)
    return 0.5 * x * (1 + mx.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_fast_approx(x):
    """x * sigmoid(1.702 x)."""
    x = _input(x)
    return x * mx.sigmoid(1.702 * x)


def silu(x):
    """x * sigmoid(x)."""
    x = _input(x)
    return x * mx.sigmoid(x)


def softplus(x):
    """log(1 + exp(x)), computed without overflow."""
    x = _input(x)
    return mx.logaddexp(x, 0)


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    x = _input(x)
    return -softplus(-x)


def softsign(x):
    """x / (1 + |x|)."""
    x = _input(x)
    return x / (1 + mx.abs(x))


def softshrink(x, lambd: float = 0.5):
    """x moved towards 0 by ``lambd``, and 0 within ``lambd`` of it."""
    x = _input(x)
    _real("softshrink", lambd=lambd)
    return mx.where(mx.abs(x) > lambd, x - mx.sign(x) * lambd, 0)


def hard_shrink(x, lambd: float = 0.5):
    """x, and 0 within ``lambd`` of 0."""
    x = _input(x)
    _real("hard_shrink", lambd=lambd)
    return mx.where(mx.abs(x) > lambd, x, 0)


def hard_tanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """x clipped to [``min_val``, ``max_val``]."""
    x = _input(x)
    _real("hard_tanh", min_val=min_val, max_val=max_val)
    return mx.minimum(mx.maximum(x, min_val), max_val)


def hardswish(x):
    """x * relu6(x + 3) / 6."""
    x = _input(x)
    return x * relu6(x + 3) / 6


def mish(x):
    """x * tanh(softplus(x))."""
    x = _input(x)
    return x * mx.tanh(softplus(x))


def prelu(x, alpha):
    """relu(x) plus ``alpha`` times the negative part (``alpha`` broadcasts against x)."""
    x = _input(x)
    _real("prelu", alpha=alpha)
    return mx.maximum(x, 0) + alpha * mx.minimum(x, 0)


def step(x, threshold: float = 0.0):
    """1 where x >= ``threshold``, else 0."""
    x = _input(x)
    _real("step", threshold=threshold)
    return mx.where(x >= threshold, 1, 0)


def glu(x, axis: int = -1):
    """The gated linear unit: x split in two along ``axis``, the first half times the sigmoid of
    the second."""
    x = _input(x)
    a, b = mx.split(x, 2, axis=axis)
    return a * mx.sigmoid(b)


def softmax(x, axis: int = -1):
    """softmax along ``axis``."""
    x = _input(x)
    return mx.softmax(x, axis=axis)


def softmin(x, axis: int = -1):
    """softmax of -x along ``axis``."""
    x = _input(x)
    return mx.softmax(-x, axis=axis)


def log_softmax(x, axis: int = -1):
    """x minus the log of the sum of its exponentials along ``axis``, computed from the values
    less their maximum (so equal large logits give log(1/n) rather than 0 or nan)."""
    x = _input(x)
    shifted = x - mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))
    return shifted - mx.log(mx.sum(mx.exp(shifted), axis=axis, keepdims=True))


def _module(name: str, fn, doc: str, **settings):
    """A module class applying ``fn``; each of ``settings`` (name to default) becomes a
    constructor argument, kept as an attribute of that name (``GLU().axis``) and passed to
    ``fn`` by keyword."""
    names = list(settings)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments ({len(args)} given)")
        unknown = set(kwargs) - set(names)
        if unknown:
            raise TypeError(f"{name}() got unexpected keyword arguments {sorted(unknown)}")
        for key, value in dict(settings, **dict(zip(names, args)), **kwargs).items():
            setattr(self, key, value)

    def __call__(self, x):
        return fn(x, **{key: getattr(self, key) for key in names})

    return type(name, (Module,), {"__init__": __init__, "__call__": __call__, "__doc__": doc})


Sigmoid = _module("Sigmoid", sigmoid, "Applies sigmoid.")
Tanh = _module("Tanh", tanh, "Applies tanh.")
ReLU = _module("ReLU", relu, "Applies relu.")
ReLU2 = _module("ReLU2", relu2, "Applies relu2.")
ReLU6 = _module("ReLU6", relu6, "Applies relu6.")
LeakyReLU = _module("LeakyReLU", leaky_relu, "Applies leaky_relu.", negative_slope=0.01)
ELU = _module("ELU", elu, "Applies elu.", alpha=1.0)
SELU = _module("SELU", selu, "Applies selu.")
CELU = _module("CELU", celu, "Applies celu.", alpha=1.0)
SiLU = _module("SiLU", silu, "Applies silu.")
Softplus = _module("Softplus", softplus, "Applies softplus.")
LogSigmoid = _module("LogSigmoid", log_sigmoid, "Applies log_sigmoid.")
Softsign = _module("Softsign", softsign, "Applies softsign.")
Softshrink = _module("Softshrink", softshrink, "Applies softshrink.", lambd=0.5)
HardShrink = _module("HardShrink", hard_shrink, "Applies hard_shrink.", lambd=0.5)
HardTanh = _module("HardTanh", hard_tanh, "Applies hard_tanh.", min_val=-1.0, max_val=1.0)
Hardswish = _module("Hardswish", hardswish, "Applies hardswish.")
Mish = _module("Mish", mish, "Applies mish.")
Step = _module("Step", step, "Applies step.", threshold=0.0)
GLU = _module("GLU", glu, "Applies glu.", axis=-1)
Softmax = _module("Softmax", softmax, "Applies softmax.", axis=-1)
Softmin = _module("Softmin", softmin, "Applies softmin.", axis=-1)
LogSoftmax = _module("LogSoftmax", log_softmax, "Applies log_softmax.", axis=-1)


class PReLU(Module):
    """relu with a learned slope for the negative part: ``num_parameters`` slopes (one shared, or
    one per channel of the last axis), starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        require_positive("PReLU", num_parameters=num_parameters)
        _real("PReLU", init=init)
        self.weight = mx.full((num_parameters,), init)

    def __call__(self, x):
        return prelu(x, self.weight)


class GELU(Module):
    """Applies gelu: ``approx`` is "none" (exact), "precise"/"tanh" or "fast"."""

    def __init__(self, approx: str = "none"):
        super().__init__()
        fns = {"none": gelu, "precise": gelu_approx, "tanh": gelu_approx, "fast": gelu_fast_approx}
        if approx not in fns:
            raise ValueError(f"GELU: approx must be one of {sorted(fns)}, got {approx!r}")
        self._fn = fns[approx]

    def __call__(self, x):
        return self._fn(x)
