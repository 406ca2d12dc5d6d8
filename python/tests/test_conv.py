"""Convolutions from Python: results against numpy loops written from the definitions (float64),
numpy's own convolve, gradients against finite differences, and mlx's errors."""

import itertools

import numpy as np
import pytest

import kiln.core as mx


def reference_conv(x, w, stride, lo, hi, kdil, idil, groups, flip):
    """conv_general by its definition, in float64 loops: mlx's layouts (N, ..., C)."""
    d = x.ndim - 2
    n, c_in, c_out = x.shape[0], x.shape[-1], w.shape[0]
    cg, og = c_in // groups, c_out // groups
    dilated = [(s - 1) * i + 1 for s, i in zip(x.shape[1:-1], idil)]
    spans = [(k - 1) * kd + 1 for k, kd in zip(w.shape[1:-1], kdil)]
    outs = [(dl + l + h - sp) // st + 1 for dl, l, h, sp, st in zip(dilated, lo, hi, spans, stride)]
    out = np.zeros([n, *outs, c_out])
    for o in itertools.product(*map(range, outs)):
        for k in itertools.product(*map(range, w.shape[1:-1])):
            pos = [oo * st + kk * kd - l for oo, st, kk, kd, l in zip(o, stride, k, kdil, lo)]
            if any(p < 0 or p % i or p // i >= s for p, i, s in zip(pos, idil, x.shape[1:-1])):
                continue
            xi = tuple(p // i for p, i in zip(pos, idil))
            tap = tuple(s - 1 - kk for s, kk in zip(w.shape[1:-1], k)) if flip else k
            for g in range(groups):
                xs = x[(slice(None), *xi, slice(g * cg, (g + 1) * cg))]
                ws = w[(slice(g * og, (g + 1) * og), *tap, slice(None))]
                out[(slice(None), *o, slice(g * og, (g + 1) * og))] += xs @ ws.T
    return out


@pytest.mark.parametrize(
    "xs, ws, kwargs",
    [
        ((2, 9, 4), (6, 3, 2), dict(stride=2, padding=1, kernel_dilation=2, groups=2)),
        ((1, 7, 2), (3, 2, 2), dict(stride=3, padding=([-1], [1]), input_dilation=2)),
        ((2, 6, 5, 3), (4, 3, 2, 3), dict(stride=[1, 2], padding=([1, 0], [1, 2]), kernel_dilation=[1, 2], flip=True)),
        ((1, 4, 5, 3, 2), (3, 2, 2, 2, 2), dict(stride=[1, 2, 1], padding=1, input_dilation=[1, 2, 1])),
    ],
)
def test_conv_general_matches_the_definition(xs, ws, kwargs):
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, xs), rng.uniform(-1, 1, ws)
    d = len(xs) - 2
    per = lambda v, default: [v] * d if isinstance(v, int) else list(v) if v is not None else [default] * d
    pad = kwargs.get("padding", 0)
    lo, hi = (pad[0], pad[1]) if isinstance(pad, tuple) else (pad, pad)
    want = reference_conv(
        x,
        w,
        per(kwargs.get("stride"), 1),
        per(lo, 0),
        per(hi, 0),
        per(kwargs.get("kernel_dilation"), 1),
        per(kwargs.get("input_dilation"), 1),
        kwargs.get("groups", 1),
        kwargs.get("flip", False),
    )
    got = mx.conv_general(mx.array(x, dtype=mx.float64), mx.array(w, dtype=mx.float64), **kwargs)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.array(got), want, rtol=1e-12, atol=1e-12)


def test_conv1d_2d_3d_in_float32():
    rng = np.random.default_rng(1)
    for d, op in [(1, mx.conv1d), (2, mx.conv2d), (3, mx.conv3d)]:
        x = rng.uniform(-1, 1, (2, *[6] * d, 4)).astype(np.float32)
        w = rng.uniform(-1, 1, (6, *[3] * d, 2)).astype(np.float32)
        got = op(mx.array(x), mx.array(w), stride=2, padding=1, dilation=1, groups=2)
        want = reference_conv(x.astype(np.float64), w.astype(np.float64), [2] * d, [1] * d, [1] * d, [1] * d, [1] * d, 2, False)
        assert got.dtype == mx.float32 and got.shape == want.shape
        np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-5)


def test_conv_transpose_is_the_gradient_of_conv_with_respect_to_its_input():
    # conv_transpose(y, w) = d/dx <conv(x, w), y> for the matching stride, padding and dilation.
    rng = np.random.default_rng(2)
    for d, conv, transpose in [(1, mx.conv1d, mx.conv_transpose1d), (2, mx.conv2d, mx.conv_transpose2d)]:
        x = mx.array(rng.uniform(-1, 1, (2, *[7] * d, 3)), dtype=mx.float64)
        w = mx.array(rng.uniform(-1, 1, (4, *[3] * d, 3)), dtype=mx.float64)
        y = conv(x, w, stride=2, padding=1, dilation=2)
        cot = mx.array(rng.uniform(-1, 1, y.shape), dtype=mx.float64)
        grad = mx.grad(lambda x: (conv(x, w, stride=2, padding=1, dilation=2) * cot).sum())(x)
        wt = mx.swapaxes(w, 0, -1)  # (C_in, K..., C_out): the transposed op maps C_out back to C_in
        got = transpose(cot, wt, stride=2, padding=1, dilation=2, output_padding=(7 + 2 * 1 - 2 * 2 - 1) % 2)
        assert got.shape == x.shape
        np.testing.assert_allclose(np.array(got), np.array(grad), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m, n", [(1, 1), (25, 5), (24, 4), (4, 24), (5, 25)])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_matches_numpy(m, n, mode):
    rng = np.random.default_rng(3)
    a, v = rng.uniform(-1, 1, m).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
    got = mx.convolve(mx.array(a), mx.array(v), mode=mode)
    want = np.convolve(a.astype(np.float64), v.astype(np.float64), mode=mode)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def test_conv_weight_gradient_matches_finite_differences():
    rng = np.random.default_rng(4)
    x = mx.array(rng.uniform(-1, 1, (2, 6, 5, 4)), dtype=mx.float64)
    w = rng.uniform(-1, 1, (2, 2, 3, 2))
    f = lambda w: (mx.conv2d(x, w, stride=(2, 1), padding=(1, 0), groups=2) ** 2).sum()
    grad = np.array(mx.grad(f)(mx.array(w, dtype=mx.float64)))
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (1, 1, 2, 1), (0, 1, 1, 1)]:
        up, down = w.copy(), w.copy()
        up[idx] += eps
        down[idx] -= eps
        fd = (f(mx.array(up, dtype=mx.float64)).item() - f(mx.array(down, dtype=mx.float64)).item()) / (2 * eps)
        assert abs(grad[idx] - fd) < 1e-6 * max(1.0, abs(fd)), (idx, grad[idx], fd)


def test_conv_errors_name_the_op_and_shapes():
    x = mx.zeros((1, 8, 3))
    w = mx.zeros((2, 3, 3))
    with pytest.raises(ValueError, match="floating point"):
        mx.conv1d(x.astype(mx.int32), w)
    with pytest.raises(ValueError, match=r"groups=2.*\(1, 8, 3\)"):
        mx.conv1d(x, w, groups=2)
    with pytest.raises(ValueError, match=r"stride \[1, 1\] does not fit a 1D convolution"):
        mx.conv2d(x, w)
    with pytest.raises(ValueError, match="stride must be an int or 2 ints"):
        mx.conv2d(mx.zeros((1, 4, 4, 3)), mx.zeros((2, 3, 3, 3)), stride=(1, 1, 1))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        mx.conv1d(x, w, dilation=5)
    with pytest.raises(ValueError, match="mode must be"):
        mx.convolve(mx.zeros(3), mx.zeros(2), mode="middle")
    with pytest.raises(TypeError):
        mx.conv1d(x, w, stride="2")


def test_conv_layers_have_mlx_parameter_shapes_and_compute_conv_plus_bias():
    import kiln.nn as nn

    x = mx.random.normal((2, 8, 8, 6))
    for layer, op, args in [
        (nn.Conv2d(6, 4, 3, stride=2, padding=1, groups=2), mx.conv2d, ((2, 2), (1, 1), (1, 1), 2)),
        (nn.ConvTranspose2d(6, 4, (3, 2), stride=2, padding=1, output_padding=1), mx.conv_transpose2d, ((2, 2), (1, 1), (1, 1), (1, 1), 1)),
    ]:
        kernel = layer.weight.shape[1:3]
        assert layer.weight.shape == (4, *kernel, 6 // args[-1]) and layer.bias.shape == (4,)
        layer.bias = mx.arange(4, dtype=mx.float32)
        want = op(x, layer.weight, *args) + layer.bias
        np.testing.assert_allclose(np.array(layer(x)), np.array(want), rtol=1e-6, atol=1e-6)
    conv1 = nn.Conv1d(3, 5, 4, bias=False)
    assert conv1.weight.shape == (5, 4, 3) and "bias" not in conv1
    assert conv1(mx.zeros((1, 10, 3))).shape == (1, 7, 5)
    conv3 = nn.Conv3d(2, 3, (2, 3, 1))
    assert conv3(mx.zeros((1, 4, 5, 6, 2))).shape == (1, 3, 3, 6, 3)
    with pytest.raises(ValueError, match="divisible by the number of groups"):
        nn.Conv2d(5, 4, 3, groups=2)
