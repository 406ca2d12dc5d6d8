"""kiln.optimizers: SGD, Adam, AdamW, Adamax, RMSprop, Adagrad, AdaDelta, Lion, Adafactor, Muon
and MultiOptimizer, ``clip_grad_norm`` and learning-rate schedules, as ``mlx.optimizers``
(``import kiln.optimizers as optim``).

An optimizer keeps its state in ``optimizer.state``, a dict of arrays laid out as mlx's: the step
count, the learning rate, and beside them the parameters' tree with each parameter's state
(created on the first update), so that a compiled training step can capture it with
``compile(inputs=..., outputs=...)`` and mlx's saved optimizer states load.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import kiln.core as mx
from kiln import utils as _utils

from kiln.optimizers import schedulers  # noqa: F401  (mlx's module path)
from kiln.optimizers.schedulers import (  # noqa: F401
    Schedule,
    cosine_decay,
    exponential_decay,
    join_schedules,
    linear_schedule,
    step_decay,
)


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


def _require_eps(op: str, eps: float) -> None:
    """An accumulator that starts at zero divides by eps on a zero gradient: it must be >0."""
    if not eps > 0:
        raise ValueError(f"{op}: eps must be >0, got {eps}")


def _empty_like(grads):
    """An empty state container for a gradient subtree: a list for lists, else a dict."""
    return [] if isinstance(grads, (list, tuple)) else {}


class Optimizer:
    """Base class: subclasses implement ``apply_single(gradient, parameter, state)``."""

    # Whether the optimizer may be made without a learning rate (Adafactor's relative steps).
    _learning_rate_optional = False

    def __init__(self, learning_rate: Union[float, Schedule, None]):
        if learning_rate is None and not self._learning_rate_optional:
            raise ValueError(f"{type(self).__name__}: give a learning_rate (a number or a schedule)")
        self._schedule = learning_rate if callable(learning_rate) else None
        self.state = {"step": mx.array(0, dtype=mx.uint64)}
        if self._schedule is not None:
            self.state["learning_rate"] = self._schedule(self.state["step"]).astype(mx.float32)
        elif learning_rate is not None:  # None: the optimizer finds its own step size (Adafactor)
            self.state["learning_rate"] = mx.array(float(learning_rate))

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
        _map(lambda g, p, s: self._state_for(p, s), parameters, parameters, self.state)

    def init_single(self, parameter: mx.array, state: dict) -> None:
        """Fills ``state`` for one parameter (nothing by default)."""

    def _state_for(self, parameter: mx.array, state: dict) -> dict:
        """``state``, filled by ``init_single`` on first use."""
        if not state:
            self.init_single(parameter, state)
        return state

    def apply_gradients(self, gradients: dict, parameters: dict) -> dict:
        """The updated parameters for ``gradients``."""
        per_param = self.state

        def one(g, p, s):
            return self.apply_single(g, p, self._state_for(p, s))

        # As mlx: this update's learning rate is the schedule's at the steps taken so far; the
        # update itself sees the step count including it (for bias corrections).
        if self._schedule is not None:
            self.state["learning_rate"] = self._schedule(self.state["step"]).astype(mx.float32)
        self.state["step"] = self.state["step"] + 1
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
        # Kept even without momentum, as mlx's (so states have one layout).
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
        _require_eps("RMSprop", eps)
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
        _require_eps("Adagrad", eps)
        super().__init__(learning_rate)
        self.eps = eps

    def init_single(self, parameter, state):
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        lr = self.learning_rate.astype(gradient.dtype)
        v = state["v"] + mx.square(gradient)
        state["v"] = v
        return parameter - lr * gradient / (mx.sqrt(v) + self.eps)


class Adamax(Optimizer):
    """Adam with the infinity norm: divides the moving average of the gradient by the decayed
    maximum of its magnitude."""

    def __init__(self, learning_rate, betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8):
        if eps < 0:
            raise ValueError(f"Adamax: eps must be non-negative, got {eps}")
        super().__init__(learning_rate)
        self.betas, self.eps = tuple(betas), eps

    def init_single(self, parameter, state):
        state["m"] = mx.zeros_like(parameter)
        state["v"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        b1, b2 = self.betas
        lr = self.learning_rate.astype(gradient.dtype)
        m = b1 * state["m"] + (1 - b1) * gradient
        v = mx.maximum(b2 * state["v"], mx.abs(gradient))
        state["m"], state["v"] = m, v
        return parameter - lr * m / (v + self.eps)


class AdaDelta(Optimizer):
    """Steps scaled by the ratio of the root mean squared past steps to the root mean squared
    gradient (both decayed by ``rho``)."""

    def __init__(self, learning_rate, rho: float = 0.9, eps: float = 1e-6):
        if rho < 0:
            raise ValueError(f"AdaDelta: rho must be non-negative, got {rho}")
        _require_eps("AdaDelta", eps)
        super().__init__(learning_rate)
        self.rho, self.eps = rho, eps

    def init_single(self, parameter, state):
        state["v"] = mx.zeros_like(parameter)
        state["u"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        rho = self.rho
        lr = self.learning_rate.astype(gradient.dtype)
        v = rho * state["v"] + (1 - rho) * mx.square(gradient)
        step = mx.sqrt(state["u"] + self.eps) / mx.sqrt(v + self.eps) * gradient
        state["v"], state["u"] = v, rho * state["u"] + (1 - rho) * mx.square(step)
        return parameter - lr * step


class Lion(Optimizer):
    """Steps of the sign of an interpolation (``betas[0]``) between the momentum and the gradient;
    the momentum moves by ``betas[1]``; decoupled weight decay."""

    def __init__(self, learning_rate, betas: Sequence[float] = (0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(learning_rate)
        self.betas, self.weight_decay = tuple(betas), weight_decay

    def init_single(self, parameter, state):
        state["m"] = mx.zeros_like(parameter)

    def apply_single(self, gradient, parameter, state):
        b1, b2 = self.betas
        lr = self.learning_rate.astype(gradient.dtype)
        direction = mx.sign(b1 * state["m"] + (1 - b1) * gradient)
        state["m"] = b2 * state["m"] + (1 - b2) * gradient
        if self.weight_decay:
            parameter = parameter * (1 - lr * self.weight_decay)
        return parameter - lr * direction


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern, 2018): the second moment of matrices kept as its row and
    column means (memory linear in the sides), updates clipped to RMS ``clip_threshold``, a
    relative step size ``min(1e-2, 1/sqrt(step))`` (or the learning rate, with
    ``relative_step=False``) scaled by the parameter's RMS, optional first moment ``beta_1``."""

    _learning_rate_optional = True

    def __init__(
        self,
        learning_rate: Union[float, Schedule, None] = None,
        eps: Tuple[float, float] = (1e-30, 1e-3),
        clip_threshold: float = 1.0,
        decay_rate: float = -0.8,
        beta_1: Optional[float] = None,
        weight_decay: float = 0.0,
        scale_parameter: bool = True,
        relative_step: bool = True,
        warmup_init: bool = False,
    ):
        if learning_rate is None and not relative_step:
            raise ValueError("Adafactor: without relative_step, give a learning_rate")
        super().__init__(learning_rate)
        self.eps, self.clip_threshold, self.decay_rate, self.beta_1 = tuple(eps), clip_threshold, decay_rate, beta_1
        self.weight_decay, self.scale_parameter, self.relative_step, self.warmup_init = weight_decay, scale_parameter, relative_step, warmup_init

    def init_single(self, parameter, state):
        if parameter.ndim >= 2:
            state["exp_avg_sq_row"] = mx.zeros(parameter.shape[:-1], dtype=parameter.dtype)
            state["exp_avg_sq_col"] = mx.zeros(parameter.shape[:-2] + parameter.shape[-1:], dtype=parameter.dtype)
        else:
            state["exp_avg_sq"] = mx.zeros_like(parameter)
        if self.beta_1 is not None:
            state["exp_avg"] = mx.zeros_like(parameter)

    @staticmethod
    def _rms(x):
        return mx.sqrt(mx.mean(mx.square(x)))

    @staticmethod
    def _approximate_exp_moving_avg(exp_avg_sq_row, exp_avg_sq_col):
        """The rank-one estimate row ⊗ col / mean(row) of a matrix's second moment, inverted
        under the root (mlx's name, for subclasses that change it)."""
        row_factor = mx.rsqrt(exp_avg_sq_row / mx.mean(exp_avg_sq_row, axis=-1, keepdims=True))
        return mx.expand_dims(row_factor, -1) * mx.expand_dims(mx.rsqrt(exp_avg_sq_col), -2)

    def apply_single(self, gradient, parameter, state):
        step = self.step.astype(gradient.dtype)
        parameter_rms = self._rms(parameter)
        if self.relative_step:
            size = mx.minimum(1e-6 * step if self.warmup_init else 1e-2, mx.rsqrt(step))
        else:
            size = self.learning_rate.astype(gradient.dtype)
        lr = size * (mx.maximum(self.eps[1], parameter_rms) if self.scale_parameter else 1.0)
        beta_2 = 1.0 - step**self.decay_rate
        squared = mx.square(gradient) + self.eps[0]
        if gradient.ndim >= 2:
            row = beta_2 * state["exp_avg_sq_row"] + (1 - beta_2) * mx.mean(squared, axis=-1)
            col = beta_2 * state["exp_avg_sq_col"] + (1 - beta_2) * mx.mean(squared, axis=-2)
            state["exp_avg_sq_row"], state["exp_avg_sq_col"] = row, col
            update = self._approximate_exp_moving_avg(row, col) * gradient
        else:
            second = beta_2 * state["exp_avg_sq"] + (1 - beta_2) * squared
            state["exp_avg_sq"] = second
            update = mx.rsqrt(second) * gradient
        update = lr * (update / mx.maximum(1.0, self._rms(update) / self.clip_threshold))
        if self.beta_1 is not None:
            update = self.beta_1 * state["exp_avg"] + (1 - self.beta_1) * update
            state["exp_avg"] = update
        if self.weight_decay:
            parameter = parameter - self.weight_decay * lr * parameter
        return parameter - update


class Muon(Optimizer):
    """Muon: SGD momentum (Nesterov by default) whose update of a matrix is orthogonalised by
    ``ns_steps`` quintic Newton-Schulz iterations (its singular values pushed towards 1), the
    step scaled by sqrt(max(1, rows / cols)); vectors take the plain momentum update. Arrays of
    more than two axes are treated as (first axis, the rest) matrices."""

    _COEFFICIENTS = (3.4445, -4.7750, 2.0315)

    def __init__(self, learning_rate, momentum: float = 0.95, weight_decay: float = 0.01, nesterov: bool = True, ns_steps: int = 5):
        super().__init__(learning_rate)
        self.momentum, self.weight_decay, self.nesterov, self.ns_steps = momentum, weight_decay, nesterov, ns_steps

    def init_single(self, parameter, state):
        state["v"] = mx.zeros_like(parameter)

    def _orthogonalize(self, x):
        a, b, c = self._COEFFICIENTS
        wide = x.shape[0] <= x.shape[1]
        x = x if wide else x.T
        x = x / (mx.linalg.norm(x) + 1e-7)
        for _ in range(self.ns_steps):
            gram = x @ x.T
            x = a * x + (b * gram + c * (gram @ gram)) @ x
        return x if wide else x.T

    def apply_single(self, gradient, parameter, state):
        if self.weight_decay:
            gradient = gradient + self.weight_decay * parameter
        v = self.momentum * state["v"] + (1 - self.momentum) * gradient
        state["v"] = v
        update = (1 - self.momentum) * gradient + self.momentum * v if self.nesterov else v
        lr = self.learning_rate.astype(gradient.dtype)
        if update.ndim >= 2:
            matrix = self._orthogonalize(update.reshape(update.shape[0], -1))
            lr = lr * max(1.0, matrix.shape[0] / matrix.shape[1]) ** 0.5
            update = matrix.reshape(update.shape)
        return parameter - lr * update


class MultiOptimizer(Optimizer):
    """Several optimizers over one model: parameter ``(path, gradient)`` goes to the first
    optimizer whose filter accepts it, the rest to the last optimizer (``filters`` has one
    fewer entry than ``optimizers``). Its state is ``{"states": [each optimizer's state]}``."""

    def __init__(self, optimizers: list, filters: Sequence[Callable] = ()):
        if len(filters) != len(optimizers) - 1:
            raise ValueError(f"MultiOptimizer: {len(optimizers)} optimizers need {len(optimizers) - 1} filters, got {len(filters)}")
        self.optimizers = list(optimizers)
        self.filters = list(filters) + [lambda path, gradient: True]

    def _split(self, tree: dict) -> list:
        parts: list = [[] for _ in self.optimizers]
        for path, leaf in _utils.tree_flatten(tree):
            next(part for part, keep in zip(parts, self.filters) if keep(path, leaf)).append((path, leaf))
        return [_utils.tree_unflatten(part) if part else {} for part in parts]

    @property
    def state(self) -> dict:
        return {"states": [o.state for o in self.optimizers]}

    @state.setter
    def state(self, state: dict):
        if not isinstance(state, dict) or len(state.get("states", ())) != len(self.optimizers):
            raise ValueError(f"MultiOptimizer: the state must be {{'states': [{len(self.optimizers)} states]}}")
        for o, s in zip(self.optimizers, state["states"]):
            o.state = s

    @property
    def step(self) -> mx.array:
        return self.optimizers[0].step

    @property
    def learning_rate(self) -> mx.array:
        return self.optimizers[0].learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        for o in self.optimizers:
            o.learning_rate = value

    def init(self, parameters: dict) -> None:
        for o, part in zip(self.optimizers, self._split(parameters)):
            o.init(part)

    def apply_gradients(self, gradients: dict, parameters: dict) -> dict:
        updated: dict = {}
        for o, part in zip(self.optimizers, self._split(gradients)):
            updated = _utils.tree_merge(updated, o.apply_gradients(part, parameters))
        return updated


def clip_grad_norm(grads, max_norm: float):
    """``grads`` scaled so that their global L2 norm is at most ``max_norm``, and that norm
    (before clipping)."""
    if max_norm < 0:
        raise ValueError(f"clip_grad_norm: max_norm must be non-negative, got {max_norm}")
    total = mx.sqrt(_utils.tree_reduce(lambda acc, g: acc + mx.sum(mx.square(g)), grads, 0.0))
    scale = mx.minimum(max_norm / (total + 1e-6), 1.0)
    return _utils.tree_map(lambda g: g * scale, grads), total
