"""Loss functions, as ``mlx.nn.losses``; each takes ``reduction`` "none", "mean" or "sum"."""

from __future__ import annotations

import kiln.core as mx
from kiln.core._arguments import require_array


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return mx.mean(loss)
    if reduction == "sum":
        return mx.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"losses: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def cross_entropy(logits, targets, weights=None, axis: int = -1, label_smoothing: float = 0.0, reduction: str = "none"):
    """Cross entropy of ``logits`` against class indices or probabilities ``targets``, with
    optional label smoothing."""
    require_array("cross_entropy", "logits", logits)
    require_array("cross_entropy", "targets", targets)
    require_array("cross_entropy", "weights", weights, optional=True)
    if not 0 <= label_smoothing < 1:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1), got {label_smoothing}")
    probs_given = targets.ndim == logits.ndim
    if probs_given:
        score = mx.sum(logits * targets, axis=axis)
    else:
        score = mx.squeeze(mx.take_along_axis(logits, mx.expand_dims(targets, axis), axis=axis), axis)
    lse = mx.logsumexp(logits, axis=axis)
    if label_smoothing > 0:
        adjusted = (1 - label_smoothing) * score + label_smoothing * mx.mean(logits, axis=axis)
        loss = lse - adjusted
    else:
        loss = lse - score
    if weights is not None:
        loss = loss * weights
    return _reduce(loss, reduction)


def binary_cross_entropy(inputs, targets, weights=None, with_logits: bool = True, reduction: str = "mean"):
    """Binary cross entropy of logits (or probabilities, with ``with_logits=False``)."""
    require_array("binary_cross_entropy", "inputs", inputs)
    require_array("binary_cross_entropy", "targets", targets)
    require_array("binary_cross_entropy", "weights", weights, optional=True)
    if with_logits:
        loss = mx.logaddexp(0.0, inputs) - inputs * targets
    else:
        eps = 1e-12
        loss = -(targets * mx.log(mx.maximum(inputs, eps)) + (1 - targets) * mx.log(mx.maximum(1 - inputs, eps)))
    if weights is not None:
        loss = loss * weights
    return _reduce(loss, reduction)


def mse_loss(predictions, targets, reduction: str = "mean"):
    """Mean squared error."""
    require_array("mse_loss", "predictions", predictions)
    require_array("mse_loss", "targets", targets)
    if predictions.shape != targets.shape:
        raise ValueError(f"mse_loss: predictions {predictions.shape} and targets {targets.shape} differ in shape")
    return _reduce(mx.square(predictions - targets), reduction)


def l1_loss(predictions, targets, reduction: str = "mean"):
    """Mean absolute error."""
    require_array("l1_loss", "predictions", predictions)
    require_array("l1_loss", "targets", targets)
    if predictions.shape != targets.shape:
        raise ValueError(f"l1_loss: predictions {predictions.shape} and targets {targets.shape} differ in shape")
    return _reduce(mx.abs(predictions - targets), reduction)


def nll_loss(inputs, targets, axis: int = -1, reduction: str = "none"):
    """Negative log likelihood of log-probabilities ``inputs`` at class indices ``targets``."""
    require_array("nll_loss", "inputs", inputs)
    require_array("nll_loss", "targets", targets)
    picked = mx.take_along_axis(inputs, mx.expand_dims(targets, axis), axis=axis)
    return _reduce(-mx.squeeze(picked, axis), reduction)


def huber_loss(inputs, targets, delta: float = 1.0, reduction: str = "none"):
    """Quadratic within ``delta`` of the target, linear beyond."""
    require_array("huber_loss", "inputs", inputs)
    require_array("huber_loss", "targets", targets)
    err = mx.abs(inputs - targets)
    loss = mx.where(err <= delta, 0.5 * mx.square(err), delta * (err - 0.5 * delta))
    return _reduce(loss, reduction)
