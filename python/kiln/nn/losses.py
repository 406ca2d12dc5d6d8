"""Loss functions, as ``mlx.nn.losses``; each takes ``reduction`` "none", "mean" or "sum"."""

from __future__ import annotations

import math

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
    # The loss depends on the gaps between logits: computed from the logits less their maximum,
    # a large shared offset cancels exactly instead of swamping the gaps in float32.
    top = mx.stop_gradient(mx.max(logits, axis=axis, keepdims=True))
    shifted = logits - top
    if probs_given:
        score = mx.sum(shifted * targets, axis=axis)
    else:
        score = mx.squeeze(mx.take_along_axis(shifted, mx.expand_dims(targets, axis), axis=axis), axis)
    lse = mx.logsumexp(shifted, axis=axis)
    if label_smoothing > 0:
        loss = lse - ((1 - label_smoothing) * score + label_smoothing * mx.mean(shifted, axis=axis))
    else:
        loss = lse - score
    if probs_given:
        # What the shift takes from probabilities that do not sum to one.
        loss = loss + mx.squeeze(top, axis) * (1 - label_smoothing) * (1 - mx.sum(targets, axis=axis))
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


def _same_shapes(op: str, **arrays) -> None:
    """Each of ``arrays`` is an array, all of one shape."""
    for name, a in arrays.items():
        require_array(op, name, a)
    shapes = {name: a.shape for name, a in arrays.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"{op}: the shapes must match, got " + ", ".join(f"{k} {v}" for k, v in shapes.items()))


def smooth_l1_loss(predictions, targets, beta: float = 1.0, reduction: str = "mean"):
    """|d|² / (2 beta) where the difference |d| < beta, |d| - beta / 2 elsewhere."""
    _same_shapes("smooth_l1_loss", predictions=predictions, targets=targets)
    diff = mx.abs(predictions - targets)
    return _reduce(mx.where(diff < beta, 0.5 * mx.square(diff) / beta, diff - 0.5 * beta), reduction)


def triplet_loss(anchors, positives, negatives, axis: int = -1, p: int = 2, margin: float = 1.0, eps: float = 1e-6, reduction: str = "none"):
    """max(‖a - p‖ - ‖a - n‖ + margin, 0) with p-norms along ``axis`` (``eps`` inside the root
    keeps its gradient finite at 0)."""
    for name, a in (("anchors", anchors), ("positives", positives), ("negatives", negatives)):
        require_array("triplet_loss", name, a)

    def distance(other):
        return mx.power(mx.sum(mx.power(mx.abs(anchors - other), p), axis=axis) + eps, 1.0 / p)

    return _reduce(mx.maximum(distance(positives) - distance(negatives) + margin, 0), reduction)


def hinge_loss(inputs, targets, reduction: str = "none"):
    """max(1 - inputs * targets, 0), targets in {-1, 1}."""
    require_array("hinge_loss", "inputs", inputs)
    require_array("hinge_loss", "targets", targets)
    return _reduce(mx.maximum(1 - inputs * targets, 0), reduction)


def log_cosh_loss(inputs, targets, reduction: str = "none"):
    """log(cosh(inputs - targets)), as logaddexp(d, -d) - log 2 so that large errors do not
    overflow."""
    require_array("log_cosh_loss", "inputs", inputs)
    require_array("log_cosh_loss", "targets", targets)
    d = inputs - targets
    return _reduce(mx.logaddexp(d, -d) - math.log(2), reduction)


def cosine_similarity_loss(x1, x2, axis: int = 1, eps: float = 1e-8, reduction: str = "none"):
    """The cosine of the angle between x1 and x2 along ``axis`` (the product of their norms
    floored at ``eps``)."""
    require_array("cosine_similarity_loss", "x1", x1)
    require_array("cosine_similarity_loss", "x2", x2)
    norms = mx.linalg.norm(x1, axis=axis) * mx.linalg.norm(x2, axis=axis)
    return _reduce(mx.sum(x1 * x2, axis=axis) / mx.maximum(norms, eps), reduction)


def margin_ranking_loss(inputs1, inputs2, targets, margin: float = 0.0, reduction: str = "none"):
    """max(0, -targets * (inputs1 - inputs2) + margin), targets in {-1, 1} saying which input
    should rank higher."""
    _same_shapes("margin_ranking_loss", inputs1=inputs1, inputs2=inputs2, targets=targets)
    return _reduce(mx.maximum(0, -targets * (inputs1 - inputs2) + margin), reduction)


def kl_div_loss(inputs, targets, axis: int = -1, reduction: str = "none"):
    """KL(targets ‖ inputs) of log-probabilities along ``axis``: Σ exp(t) (t - i)."""
    require_array("kl_div_loss", "inputs", inputs)
    require_array("kl_div_loss", "targets", targets)
    return _reduce(mx.sum(mx.exp(targets) * (targets - inputs), axis=axis), reduction)


def gaussian_nll_loss(inputs, targets, vars, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """The negative log-likelihood of ``targets`` under normals of mean ``inputs`` and variance
    ``vars`` (floored at ``eps``): (log var + (t - mean)² / var) / 2, plus log(2π) / 2 with
    ``full``."""
    _same_shapes("gaussian_nll_loss", inputs=inputs, targets=targets, vars=vars)
    v = mx.maximum(vars, eps)
    loss = 0.5 * (mx.log(v) + mx.square(targets - inputs) / v)
    return _reduce(loss + 0.5 * math.log(2 * math.pi) if full else loss, reduction)
