"""Recurrent layers, as ``mlx.nn``'s, with its parameter names (so its checkpoints load): RNN
(``Wxh``, ``Whh``, ``bias``), GRU (``Wx``, ``Wh``, ``b``, ``bhn``) and LSTM (``Wx``, ``Wh``,
``bias``). Inputs are ``(N, L, D)`` or ``(L, D)``; the input projection of every step is one
matmul, then the steps run in order. A missing initial state is zeros."""

from __future__ import annotations

import math
from typing import Callable, Optional

import kiln.core as mx
from kiln.core._arguments import require_positive
from kiln.nn.module import Module


def _uniform(hidden_size: int, *shape):
    """Weights drawn uniformly in ±1/sqrt(hidden_size)."""
    scale = 1.0 / math.sqrt(hidden_size)
    return mx.random.uniform(-scale, scale, shape)


class _Recurrent(Module):
    """The input checks and the shared input projection."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        require_positive(type(self).__name__, input_size=input_size, hidden_size=hidden_size)
        self.hidden_size = hidden_size

    def _project(self, x, weight, bias_name: str):
        """x @ weightᵀ (+ the bias named ``bias_name``), after checking x's shape."""
        if x.ndim not in (2, 3) or x.shape[-1] != weight.shape[1]:
            raise ValueError(f"{type(self).__name__}: the input must be (N, L, {weight.shape[1]}) or (L, {weight.shape[1]}), got shape {x.shape}")
        return mx.addmm(self[bias_name], x, weight.T) if bias_name in self else x @ weight.T

    def _initial(self, x, state):
        """The initial state: ``state``, or zeros of the batch's shape."""
        return mx.zeros((*x.shape[:-2], self.hidden_size), dtype=x.dtype) if state is None else state

    def _extra_repr(self) -> str:
        weight = self["Wxh"] if "Wxh" in self else self["Wx"]
        return f"input_dims={weight.shape[1]}, hidden_size={self.hidden_size}"


class RNN(_Recurrent):
    """h_t = nonlinearity(x_t Wxhᵀ + bias + h_{t-1} Whhᵀ), with tanh by default; returns every
    step's hidden state, ``(N, L, hidden_size)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: Optional[Callable] = None):
        super().__init__(input_size, hidden_size)
        if nonlinearity is not None and not callable(nonlinearity):
            raise ValueError(f"RNN: nonlinearity must be callable, got {nonlinearity!r}")
        self._nonlinearity = nonlinearity or mx.tanh
        self.Wxh = _uniform(hidden_size, hidden_size, input_size)
        self.Whh = _uniform(hidden_size, hidden_size, hidden_size)
        if bias:
            self.bias = _uniform(hidden_size, hidden_size)

    def __call__(self, x, hidden=None):
        projected = self._project(x, self.Wxh, "bias")
        hidden = self._initial(x, hidden)
        steps = []
        for t in range(x.shape[-2]):
            hidden = self._nonlinearity(mx.addmm(projected[..., t, :], hidden, self.Whh.T))
            steps.append(hidden)
        return mx.stack(steps, axis=-2)


class GRU(_Recurrent):
    """The gated recurrent unit, gates in the order reset, update, new:
    r, z = sigmoid(x Wxᵀ + b + h Whᵀ) (their parts), n = tanh(x_n + r * (h Wh_nᵀ + bhn)),
    h' = (1 - z) * n + z * h. Returns every step's hidden state."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size)
        self.Wx = _uniform(hidden_size, 3 * hidden_size, input_size)
        self.Wh = _uniform(hidden_size, 3 * hidden_size, hidden_size)
        if bias:
            self.b = _uniform(hidden_size, 3 * hidden_size)
            self.bhn = _uniform(hidden_size, hidden_size)

    def __call__(self, x, hidden=None):
        h = self.hidden_size
        projected = self._project(x, self.Wx, "b")
        hidden = self._initial(x, hidden)
        steps = []
        for t in range(x.shape[-2]):
            step = projected[..., t, :]
            recurrent = hidden @ self.Wh.T
            r, z = mx.split(mx.sigmoid(step[..., : 2 * h] + recurrent[..., : 2 * h]), 2, axis=-1)
            recurrent_n = recurrent[..., 2 * h :] + self.bhn if "bhn" in self else recurrent[..., 2 * h :]
            n = mx.tanh(step[..., 2 * h :] + r * recurrent_n)
            hidden = (1 - z) * n + z * hidden
            steps.append(hidden)
        return mx.stack(steps, axis=-2)


class LSTM(_Recurrent):
    """Long short-term memory, gates in the order input, forget, cell, output:
    i, f, g, o = x Wxᵀ + bias + h Whᵀ (sigmoid, sigmoid, tanh, sigmoid), c' = f * c + i * g,
    h' = o * tanh(c'). Returns every step's hidden state and cell state."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__(input_size, hidden_size)
        self.Wx = _uniform(hidden_size, 4 * hidden_size, input_size)
        self.Wh = _uniform(hidden_size, 4 * hidden_size, hidden_size)
        if bias:
            self.bias = _uniform(hidden_size, 4 * hidden_size)

    def __call__(self, x, hidden=None, cell=None):
        projected = self._project(x, self.Wx, "bias")
        hidden, cell = self._initial(x, hidden), self._initial(x, cell)
        hiddens, cells = [], []
        for t in range(x.shape[-2]):
            i, f, g, o = mx.split(mx.addmm(projected[..., t, :], hidden, self.Wh.T), 4, axis=-1)
            cell = mx.sigmoid(f) * cell + mx.sigmoid(i) * mx.tanh(g)
            hidden = mx.sigmoid(o) * mx.tanh(cell)
            hiddens.append(hidden)
            cells.append(cell)
        return mx.stack(hiddens, axis=-2), mx.stack(cells, axis=-2)
