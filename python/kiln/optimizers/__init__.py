"""kiln.optimizers: SGD, Adam, AdamW, RMSprop and Adagrad with learning-rate schedules, as
``mlx.optimizers`` (``import kiln.optimizers as optim``).

An optimizer keeps its state in ``optimizer.state``, a dict of arrays (the step count, the
learning rate, and one entry per parameter, created on the first update), so that a compiled
training step can capture it with ``compile(inputs=..., outputs=...)``.
"""

from __future__ import annotations

import math
from typing import Callable, List, Sequence, Union

import kiln.core as mx

Schedule = Callable[[mx.array], mx.array]


def _map(fn, grads, params, state):
    """``fn(grad, param, state_entry)`` over matching trees; state entries are created as dicts."""
    if isinstance(grads, dict):
        return {k: _map(fn, g, params[k], state.setdefault(k, _empty_like(g))) for k, g in grads.items()}
    if isinstance(grads, (list, tuple)):
        while len(state) < len(grads):
            state.append(_empty_like(grads[len(state)]))
        return [_map(fn, g, p, s) for g, p, s in zip(grads, params, state)]
    if isinstance(grads, mx.array):
        return fn(grads, params, state)
    return params


def _empty_like(grads):
    """An empty state container for a gradient subtree: a list for lists, else a dict."""
    return [] if isinstance(grads, (list, tuple)) else {}


class Optimizer:
    """Base class: subclasses implement ``apply_single(gradient, parameter, state)``."""

    def __init__(self, learning_rate: Union[float, Schedule]):
        self._schedule = learning_rate if callable(learning_rate) else None
        self.state = {"step": mx.array(0, dtype=mx.uint64)}
        if self._schedule is None:
            self.state["learning_rate"] = mx.array(float(learning_rate))
        else:
            self.state["learning_rate"] = self._schedule(self.state["step"]).astype(mx.float32)

    @property
    def step(self) -> mx.array:
        """How many updates have been applied."""
        return self.state["step"]

    @property
    def learning_rate(self) -> mx.array:
        """The learning rate of the current step."""
        return self.state["learning_rate"]

    @learning_rate.setter
    def learning_rate(self, value):
        self.state["learning_rate"] = mx.array(float(value)) if not isinstance(value, mx.array) else value

    def init(self, parameters: dict) -> None:
        """Creates the per-parameter state ahead of the first update."""
        _map(lambda g, p, s: self._state_for(p, s), parameters, parameters, self.state.setdefault("params", {}))

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Fills ``state`` for one parameter (nothing by default)."""

    def _state_for(self, parameter: mx.array, state: dict) -> dict:
        """``state``, filled by ``init_single`` on first use."""
        if not state:
            self.init_single(parameter, state)
        return state

    def apply_gradients(self, gradients: dict, parameters: dict) -> dict:
        """The updated parameters for ``gradients``."""
        per_param = self.state.setdefault("params", {})

        def one(g, p, s):
            return self.apply_single(g, p, self._state_for(p, s))

        step = self.state["step"] + 1
        self.state["step"] = step
        if self._schedule is not None:
            self.state["learning_rate"] = self._schedule(step).astype(mx.float32)
        return _map(one, gradients, parameters, per_param)

    def update(self, model, gradients: dict) -> None:
        """Applies ``gradients`` to ``model``'s parameters in place."""
        model.update(self.apply_gradients(gradients, model))

    def apply_single(self, gradient: mx.array, parameter: mx.array, state: dict) -> mx.array:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""

    def __init__(self, learning_rate, momentum: float = 0.0, weight_decay: float = 0.0, dampening: float = 0.0, nesterov: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs a positive momentum and zero dampening")
        super().__init__(learning_rate)
        self.momentum, self.weight_decay, self.dampening, self.nesterov = momentum, weight_decay, dampening, nesterov

    def init_single(self, parameter, state):
        if self.momentum > 0:
            state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        if self.weight_decay:
            gradient = gradient + self.weight_decay * parameter
        lr = self.learning_rate.astype(gradient.dtype)
        if self.momentum <= 0:
            return parameter - lr * gradient
        v = self.momentum * state["v"] + (1 - self.dampening) * gradient
        state["v"] = v
        update = gradient + self.momentum * v if self.nesterov else v
        return parameter - lr * update


class Adam(Optimizer):
    """Adam: moving averages of the gradient and its square (``betas``), optional bias correction."""

    def __init__(self, learning_rate, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8, bias_correction: bool = False):
        super().__init__(learning_rate)
        self.betas, self.eps, self.bias_correction = tuple(betas), eps, bias_correction

    def init_single(self, parameter, state):
        state["m"] = mx.zeros_like(parameter)
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        b1, b2 = self.betas
        lr = self.learning_rate.astype(gradient.dtype)
        m = b1 * state["m"] + (1 - b1) * gradient
        v = b2 * state["v"] + (1 - b2) * mx.square(gradient)
        state["m"], state["v"] = m, v
        if self.bias_correction:
            step = self.step.astype(gradient.dtype)
            m = m / (1 - b1**step)
            v = v / (1 - b2**step)
        return parameter - lr * m / (mx.sqrt(v) + self.eps)


class AdamW(Adam):
    """Adam with decoupled weight decay: parameters shrink by ``lr * weight_decay`` each step."""

    def __init__(self, learning_rate, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01, bias_correction: bool = False):
        super().__init__(learning_rate, betas, eps, bias_correction)
        self.weight_decay = weight_decay

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        return super().apply_single(gradient, parameter * (1 - lr * self.weight_decay), state)


class RMSprop(Optimizer):
    """Divides by a moving average (``alpha``) of the squared gradient."""

    def __init__(self, learning_rate, alpha: float = 0.99, eps: float = 1e-8):
        if alpha < 0:
            raise ValueError(f"RMSprop: alpha must be non-negative, got {alpha}")
        super().__init__(learning_rate)
        self.alpha, self.eps = alpha, eps

    def init_single(self, parameter, state):
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        v = self.alpha * state["v"] + (1 - self.alpha) * mx.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (mx.sqrt(v) + self.eps)


class Adagrad(Optimizer):
    """Divides by the root of the summed squared gradients."""

    def __init__(self, learning_rate, eps: float = 1e-8):
        super().__init__(learning_rate)
        self.eps = eps

    def init_single(self, parameter, state):
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        v = state["v"] + mx.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (mx.sqrt(v) + self.eps)


def exponential_decay(init: float, decay_rate: float) -> Schedule:
    """``init * decay_rate ** step``."""
    return lambda step: init * (decay_rate ** step.astype(mx.float32))


def step_decay(init: float, decay_rate: float, step_size: int) -> Schedule:
    """``init * decay_rate ** (step // step_size)``."""
    return lambda step: init * (decay_rate ** (step // step_size).astype(mx.float32))


def cosine_decay(init: float, decay_steps: int, end: float = 0.0) -> Schedule:
    """From ``init`` to ``end`` along half a cosine over ``decay_steps``, then ``end``."""

    def schedule(step):
        s = mx.minimum(step.astype(mx.float32), decay_steps)
        return end + (init - end) * 0.5 * (1.0 + mx.cos((math.pi / decay_steps) * s))

    return schedule


def linear_schedule(init: float, end: float, steps: int) -> Schedule:
    """From ``init`` to ``end`` linearly over ``steps``, then ``end`` (a warmup)."""
    if steps < 1:
        raise ValueError(f"linear_schedule: steps must be at least 1, got {steps}")

    def schedule(step):
        s = mx.minimum(step.astype(mx.float32), steps)
        return s * ((end - init) / steps) + init

    return schedule


def join_schedules(schedules: List[Schedule], boundaries: List[int]) -> Schedule:
    """``schedules[i]`` from step ``boundaries[i-1]`` on, each restarted at its boundary."""
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(f"join_schedules: {len(schedules)} schedules need {len(schedules) - 1} boundaries, got {len(boundaries)}")

    def schedule(step):
        out = schedules[0](step)
        for s, b in zip(schedules[1:], boundaries):
            out = mx.where(step < b, out, s(step - b))
        return out

    return schedule
