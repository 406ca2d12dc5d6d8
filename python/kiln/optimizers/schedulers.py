"""Learning-rate schedules, as ``mlx.optimizers.schedulers``: each maps the step count (an
array or an int) to the learning rate, and can be passed as an optimizer's ``learning_rate``."""

from __future__ import annotations

import math
from typing import Callable, List

import kiln.core as mx

Schedule = Callable[[mx.array], mx.array]


def _steps(schedule: Callable) -> Schedule:
    """``schedule`` taking an int step as well as an array."""
    return lambda step: schedule(step if isinstance(step, mx.array) else mx.array(step))


def exponential_decay(init: float, decay_rate: float) -> Schedule:
    """``init * decay_rate ** step``."""
    return _steps(lambda step: init * (decay_rate ** step.astype(mx.float32)))


def step_decay(init: float, decay_rate: float, step_size: int) -> Schedule:
    """``init * decay_rate ** (step // step_size)``."""
    return _steps(lambda step: init * (decay_rate ** (step // step_size).astype(mx.float32)))


def cosine_decay(init: float, decay_steps: int, end: float = 0.0) -> Schedule:
    """From ``init`` to ``end`` along half a cosine over ``decay_steps``, then ``end``."""

    def schedule(step):
        s = mx.minimum(step.astype(mx.float32), decay_steps)
        return end + (init - end) * 0.5 * (1.0 + mx.cos((math.pi / decay_steps) * s))

    return _steps(schedule)


def linear_schedule(init: float, end: float, steps: int) -> Schedule:
    """From ``init`` to ``end`` linearly over ``steps``, then ``end`` (a warmup)."""
    if steps < 1:
        raise ValueError(f"linear_schedule: steps must be at least 1, got {steps}")

    def schedule(step):
        s = mx.minimum(step.astype(mx.float32), steps)
        return s * ((end - init) / steps) + init

    return _steps(schedule)


def join_schedules(schedules: List[Schedule], boundaries: List[int]) -> Schedule:
    """``schedules[i]`` from step ``boundaries[i-1]`` on, each restarted at its boundary."""
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(f"join_schedules: {len(schedules)} schedules need {len(schedules) - 1} boundaries, got {len(boundaries)}")

    def schedule(step):
        out = schedules[0](step)
        for s, b in zip(schedules[1:], boundaries):
            out = mx.where(step < b, out, s(step - b))
        return out

    return _steps(schedule)
