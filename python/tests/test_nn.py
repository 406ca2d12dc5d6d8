"""kiln.nn against numpy references: layers, losses, initialisers, Module bookkeeping, weights
files, and training compiled versus uncompiled."""

import math
from functools import partial

import numpy as np
import pytest

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim
from kiln.utils import tree_flatten, tree_map, tree_unflatten


def np_(a):
    return np.array(a, dtype=np.float64)


def test_linear_and_sequential_match_numpy(rng):
    mx.random.seed(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
    x = rng.standard_normal((3, 5)).astype(np.float32)
    l0, l2 = model.layers[0], model.layers[2]
    want = np.maximum(x @ np_(l0.weight).T + np_(l0.bias), 0) @ np_(l2.weight).T
    np.testing.assert_allclose(np.array(model(mx.array(x))), want, rtol=1e-5, atol=1e-6)
    assert "bias" not in l2
    bound = 1 / math.sqrt(5)
    assert np.abs(np_(l0.weight)).max() <= bound


def test_module_parameters_update_freeze():
    model = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))
    flat = dict(tree_flatten(model.parameters()))
    assert set(flat) == {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}
    model.layers[1].freeze()
    trainable = dict(tree_flatten(model.trainable_parameters()))
    assert set(trainable) == {"layers.0.weight", "layers.0.bias"}
    model.unfreeze()
    assert len(tree_flatten(model.trainable_parameters())) == 4
    new = tree_map(lambda p: mx.zeros_like(p), model.parameters())
    model.update(new)
    assert all(np.all(np.array(v) == 0) for _, v in tree_flatten(model.parameters()))
    with pytest.raises(ValueError, match="no parameter"):
        model.update({"nonexistent": mx.zeros((1,))})
    assert model.state is model
    assert len(model.modules()) == 3
    leaves = tree_flatten(model.leaf_modules(), is_leaf=nn.Module.is_module)
    assert [path for path, _ in leaves] == ["layers.0", "layers.1"] and leaves[1][1] is model.layers[1]
    model.eval()
    assert not model.layers[0].training
    model.train()
    assert model.layers[1].training


def test_norms_and_activations_match_numpy(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x64 = x.astype(np.float64)
    ln = nn.LayerNorm(6)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.array(ln(mx.array(x))), want, rtol=1e-5, atol=1e-5)
    rms = nn.RMSNorm(6)
    np.testing.assert_allclose(np.array(rms(mx.array(x))), x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5), rtol=1e-5)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(np.array(nn.GELU()(mx.array(x))), x64 * (1 + erf(x64 / math.sqrt(2))) / 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(nn.SiLU()(mx.array(x))), x64 / (1 + np.exp(-x64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(nn.Tanh()(mx.array(x))), np.tanh(x64), rtol=1e-5, atol=1e-6)
    sm = np.exp(x64) / np.exp(x64).sum(-1, keepdims=True)
    np.testing.assert_allclose(np.array(nn.Softmax()(mx.array(x))), sm, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="approx"):
        nn.GELU(approx="bogus")


def _softplus64(x):
    return np.logaddexp(x, 0.0)


# name -> (function, module class with settings, numpy float64 reference with the same settings)
ACTIVATIONS = {
    "relu6": (nn.relu6, nn.ReLU6(), lambda x: np.clip(x, 0, 6)),
    "relu2": (nn.relu2, nn.ReLU2(), lambda x: np.maximum(x, 0) ** 2),
    "leaky_relu": (partial(nn.leaky_relu, negative_slope=0.2), nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (partial(nn.elu, alpha=1.5), nn.ELU(alpha=1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    "selu": (nn.selu, nn.SELU(), lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))),
    "celu": (partial(nn.celu, alpha=0.7), nn.CELU(0.7), lambda x: np.maximum(x, 0) + 0.7 * np.expm1(np.minimum(x, 0) / 0.7)),
    "softplus": (nn.softplus, nn.Softplus(), _softplus64),
    "log_sigmoid": (nn.log_sigmoid, nn.LogSigmoid(), lambda x: -_softplus64(-x)),
    "softsign": (nn.softsign, nn.Softsign(), lambda x: x / (1 + np.abs(x))),
    "softshrink": (partial(nn.softshrink, lambd=0.3), nn.Softshrink(lambd=0.3), lambda x: np.where(np.abs(x) > 0.3, x - np.sign(x) * 0.3, 0)),
    "hard_shrink": (partial(nn.hard_shrink, lambd=0.3), nn.HardShrink(0.3), lambda x: np.where(np.abs(x) > 0.3, x, 0)),
    "hard_tanh": (partial(nn.hard_tanh, min_val=-0.5, max_val=2), nn.HardTanh(-0.5, 2), lambda x: np.clip(x, -0.5, 2)),
    "hardswish": (nn.hardswish, nn.Hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "mish": (nn.mish, nn.Mish(), lambda x: x * np.tanh(_softplus64(x))),
    "step": (partial(nn.step, threshold=0.5), nn.Step(0.5), lambda x: (x >= 0.5).astype(np.float64)),
    "glu": (partial(nn.glu, axis=0), nn.GLU(axis=0), lambda x: x[:2] / (1 + np.exp(-x[2:]))),
    "softmin": (partial(nn.softmin, axis=0), nn.Softmin(axis=0), lambda x: np.exp(-x) / np.exp(-x).sum(0, keepdims=True)),
    "log_softmax": (nn.log_softmax, nn.LogSoftmax(), lambda x: x - np.log(np.exp(x).sum(-1, keepdims=True))),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_functions_and_modules_match_numpy(rng, name):
    fn, module, reference = ACTIVATIONS[name]
    x = (rng.standard_normal((4, 6)) * 3).astype(np.float32)
    want = reference(x.astype(np.float64))
    for got in (fn(mx.array(x)), module(mx.array(x))):
        assert got.shape == want.shape
        np.testing.assert_allclose(np.array(got, dtype=np.float64), want, rtol=2e-6, atol=2e-6, err_msg=name)


def test_activations_edge_cases_and_learned_slopes(rng):
    # Equal logits of any size normalise to log(1/n).
    for v in (1.0, 1e20, 1e36):
        np.testing.assert_allclose(np.array(nn.log_softmax(mx.array([[v, v]]))), [[-math.log(2)] * 2], atol=1e-6)
    assert nn.activations.sigmoid is not None and nn.Identity(3, bias=True)(mx.array([1.0])).item() == 1.0
    # PReLU: one slope per channel, learned.
    x = rng.standard_normal((5, 3)).astype(np.float32)
    layer = nn.PReLU(num_parameters=3, init=0.1)
    assert layer.weight.shape == (3,)
    slopes = np.array([0.1, -0.2, 0.3], dtype=np.float32)
    layer.update({"weight": mx.array(slopes)})
    np.testing.assert_allclose(np.array(layer(mx.array(x))), np.maximum(x, 0) + slopes * np.minimum(x, 0), rtol=1e-6)
    grad = nn.value_and_grad(layer, lambda x: layer(x).sum())(mx.array(x))[1]
    np.testing.assert_allclose(np.array(grad["weight"]), np.minimum(x, 0).sum(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="unexpected"):
        nn.ELU(beta=2.0)


def _np_normalize(x, axes, eps=1e-5):
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def test_group_instance_and_batch_norms_match_numpy(rng):
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    x64 = x.astype(np.float64)
    # mlx's grouping interleaves channels (c in group c % groups); PyTorch's takes runs of them.
    interleaved = _np_normalize(x64.reshape(2, -1, 4), 1).reshape(x.shape)
    runs = _np_normalize(x64.reshape(2, -1, 4, 2), (1, 3)).reshape(x.shape)
    for layer, want in ((nn.GroupNorm(4, 8), interleaved), (nn.GroupNorm(4, 8, pytorch_compatible=True), runs)):
        np.testing.assert_allclose(np.array(layer(mx.array(x))), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(nn.InstanceNorm(8)(mx.array(x))), _np_normalize(x64, (1, 2)), rtol=1e-4, atol=1e-5)
    # float16 whose squares overflow float16 still normalise.
    big = mx.array(np.where(rng.random((1, 4, 4, 2)) < 0.5, -512, 512).astype(np.float16))
    y = nn.InstanceNorm(2)(big)
    assert y.dtype == mx.float16 and np.isfinite(np.array(y, dtype=np.float32)).all()
    # BatchNorm: batch statistics and running ones moved by momentum in training, running ones in eval.
    bn = nn.BatchNorm(8, momentum=0.25)
    np.testing.assert_allclose(np.array(bn(mx.array(x))), _np_normalize(x64, (0, 1, 2)), rtol=1e-4, atol=1e-5)
    mean, var = x64.mean((0, 1, 2)), x64.var((0, 1, 2), ddof=1)
    np.testing.assert_allclose(np.array(bn.running_mean), 0.25 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(bn.running_var), 0.75 + 0.25 * var, rtol=1e-5)
    bn.eval()
    want = (x64 - 0.25 * mean) / np.sqrt(0.75 + 0.25 * var + 1e-5)
    np.testing.assert_allclose(np.array(bn(mx.array(x))), want, rtol=1e-4, atol=1e-5)
    assert set(dict(tree_flatten(bn.trainable_parameters()))) == {"weight", "bias"}
    bn.unfreeze()
    assert set(dict(tree_flatten(bn.trainable_parameters()))) == {"weight", "bias"}
    assert set(dict(tree_flatten(bn.parameters()))) == {"weight", "bias", "running_mean", "running_var"}


def test_norms_refuse_bad_settings():
    for build in (lambda eps: nn.LayerNorm(4, eps=eps), lambda eps: nn.RMSNorm(4, eps=eps), lambda eps: nn.GroupNorm(2, 4, eps=eps),
                  lambda eps: nn.InstanceNorm(4, eps=eps), lambda eps: nn.BatchNorm(4, eps=eps)):
        for eps in (0.0, -1e-30):
            with pytest.raises(ValueError, match="must be positive"):
                build(eps)
        build(1e-30)
    with pytest.raises(ValueError, match="equal groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="num_groups"):
        nn.GroupNorm(0, 8)
    with pytest.raises(ValueError, match="spatial"):
        nn.InstanceNorm(4)(mx.ones((2, 4)))
    with pytest.raises(ValueError, match="more than one value"):
        nn.BatchNorm(4)(mx.ones((1, 4)))


def test_channel_dropout_bilinear_and_causal_masks(rng):
    mx.random.seed(3)
    for p, layer, shape in ((0.5, nn.Dropout2d(0.5), (3, 4, 5, 16)), (0.25, nn.Dropout3d(0.25), (2, 3, 4, 5, 16))):
        y = np.array(layer(mx.ones(shape)))
        # Each channel of each example is dropped or kept as a whole, kept ones scaled by 1/(1-p).
        per_channel = y.reshape(shape[0], -1, shape[-1])
        assert (per_channel == per_channel[:, :1]).all()
        assert (np.isclose(y, 0) | np.isclose(y, 1 / (1 - p))).all() and 0 < (y == 0).mean() < 1
        assert np.array_equal(np.array(layer.eval()(mx.ones(shape))), np.ones(shape))
    with pytest.raises(ValueError, match="3 or 4 axes"):
        nn.Dropout2d()(mx.ones((2, 3)))
    bl = nn.Bilinear(3, 4, 5)
    x1, x2 = rng.standard_normal((2, 6, 3)).astype(np.float32), rng.standard_normal((2, 6, 4)).astype(np.float32)
    want = np.einsum("bni,oji,bnj->bno", x1, np_(bl.weight), x2) + np_(bl.bias)
    np.testing.assert_allclose(np.array(bl(mx.array(x1), mx.array(x2))), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="Bilinear"):
        bl(mx.array(x2), mx.array(x1))
    for dtype in (mx.float32, mx.float16, mx.bfloat16):
        mask = nn.MultiHeadAttention.create_additive_causal_mask(4, dtype)
        m = np.array(mask.astype(mx.float32))
        assert mask.dtype == dtype and np.isfinite(m).all()
        assert (m[np.tril_indices(4)] == 0).all() and (m[np.triu_indices(4, 1)] < -6e4).all()


def test_positional_encodings_match_their_formulas():
    pe = nn.SinusoidalPositionalEncoding(8, min_freq=0.01, max_freq=2.0)
    x = np.arange(5, dtype=np.float64)
    freqs = np.exp(np.log(0.01) + (1 - np.arange(4) / 3) * (np.log(2.0) - np.log(0.01)))
    angles = x[:, None] * freqs
    want = np.concatenate([np.sin(angles), np.cos(angles)], -1) * math.sqrt(2 / 8)
    np.testing.assert_allclose(np.array(pe(mx.array(x.astype(np.float32)))), want, rtol=1e-5, atol=1e-6)
    for dims in (0, 3, 2.0):
        with pytest.raises(ValueError, match="even"):
            nn.SinusoidalPositionalEncoding(dims)
    # ALiBi's slopes: 2^(-8(i+1)/n) for 8 heads; 6 heads take 4 heads' and every other of 8's.
    np.testing.assert_allclose(np.array(nn.ALiBi.create_alibi_slope(8)).ravel(), 2.0 ** (-np.arange(1, 9)), rtol=1e-6)
    six = [2 ** (-8 * (i + 1) / 4) for i in range(4)] + [2 ** (-(i + 1)) for i in range(8)][0::2][:2]
    np.testing.assert_allclose(np.array(nn.ALiBi.create_alibi_slope(6)).ravel(), six, rtol=1e-6)
    scores = mx.zeros((1, 8, 3, 5))
    biased = np.array(nn.ALiBi()(scores, offset=2))
    q, k = np.arange(2, 5)[:, None], np.arange(5)[None]
    np.testing.assert_allclose(biased, -np.abs(q - k)[None, None] * 2.0 ** (-np.arange(1, 9))[None, :, None, None], rtol=1e-6)
    x = mx.random.normal((2, 4, 6))
    rope = nn.RoPE(4, traditional=True, base=500, scale=0.5)
    assert mx.array_equal(rope(x, offset=3), mx.fast.rope(x, 4, traditional=True, base=500, scale=0.5, offset=3))


def _np_pool(x, kernel, stride, padding, reduce):
    """Pooling by its definition: each output position reduces its window of the padded input."""
    fill = -np.inf if reduce == "max" else 0.0
    xp = np.pad(x.astype(np.float64), [(0, 0)] + [(p, p) for p in padding] + [(0, 0)], constant_values=fill)
    out_sizes = [(n - k) // s + 1 for n, k, s in zip(xp.shape[1:-1], kernel, stride)]
    out = np.empty((x.shape[0], *out_sizes, x.shape[-1]))
    for pos in np.ndindex(*out_sizes):
        window = xp[(slice(None),) + tuple(slice(o * s, o * s + k) for o, s, k in zip(pos, stride, kernel))]
        axes = tuple(range(1, len(kernel) + 1))
        out[(slice(None),) + pos] = window.max(axes) if reduce == "max" else window.mean(axes)
    return out


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_pooling_matches_the_definition(rng, dims):
    x = rng.standard_normal((2, *([7, 6, 5][:dims]), 3)).astype(np.float32)
    for kernel, stride, padding in (((2,) * dims, None, (0,) * dims), ((3, 2, 2)[:dims], (2, 1, 3)[:dims], (1, 0, 1)[:dims])):
        for reduce in ("max", "avg"):
            layer = getattr(nn, f"{reduce.capitalize()}Pool{dims}d")(kernel, stride, padding)
            want = _np_pool(x, kernel, stride or kernel, padding, reduce)
            np.testing.assert_allclose(np.array(layer(mx.array(x))), want, rtol=1e-6, atol=1e-6, err_msg=f"{layer}")
    # Integers keep their dtype through a padded max pool.
    ints = mx.array(rng.integers(-50, 50, (1, 5, 5, 2)).astype(np.int32))
    pooled = nn.MaxPool2d(2, padding=1)(ints)
    assert pooled.dtype == mx.int32
    np.testing.assert_array_equal(np.array(pooled), _np_pool(np.array(ints), (2, 2), (2, 2), (1, 1), "max"))


def test_pooling_refuses_bad_settings():
    with pytest.raises(ValueError, match="kernel_size"):
        nn.MaxPool2d((2, 2, 2))
    with pytest.raises(ValueError, match="stride"):
        nn.AvgPool1d(2, stride=0)
    with pytest.raises(ValueError, match=r"\(N, 2 spatial axes, C\)"):
        nn.MaxPool2d(2)(mx.ones((4, 4)))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        nn.AvgPool1d(5)(mx.ones((1, 3, 2)))
    assert str(nn.MaxPool2d(3, stride=2, padding=1)) == "MaxPool2d(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))"


def _sigmoid64(v):
    return 1 / (1 + np.exp(-v))


def test_recurrent_layers_match_numpy_steps(rng):
    mx.random.seed(5)
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    h0 = rng.standard_normal((2, 4)).astype(np.float32)
    c0 = rng.standard_normal((2, 4)).astype(np.float32)
    x64, h = x.astype(np.float64), h0.astype(np.float64)

    rnn = nn.RNN(3, 4)
    W, U, b = np_(rnn.Wxh), np_(rnn.Whh), np_(rnn.bias)
    want, state = [], h
    for t in range(6):
        state = np.tanh(x64[:, t] @ W.T + b + state @ U.T)
        want.append(state)
    np.testing.assert_allclose(np.array(rnn(mx.array(x), mx.array(h0))), np.stack(want, 1), rtol=1e-5, atol=1e-5)

    gru = nn.GRU(3, 4)
    W, U, b, bhn = np_(gru.Wx), np_(gru.Wh), np_(gru.b), np_(gru.bhn)
    want, state = [], np.zeros((2, 4))
    for t in range(6):
        gx, gh = x64[:, t] @ W.T + b, state @ U.T
        r, z = _sigmoid64(gx[:, :4] + gh[:, :4]), _sigmoid64(gx[:, 4:8] + gh[:, 4:8])
        n = np.tanh(gx[:, 8:] + r * (gh[:, 8:] + bhn))
        state = (1 - z) * n + z * state
        want.append(state)
    np.testing.assert_allclose(np.array(gru(mx.array(x))), np.stack(want, 1), rtol=1e-5, atol=1e-5)

    lstm = nn.LSTM(3, 4, bias=False)
    assert "bias" not in lstm
    W, U = np_(lstm.Wx), np_(lstm.Wh)
    hs, cs, state, cell = [], [], h, c0.astype(np.float64)
    for t in range(6):
        g = x64[:, t] @ W.T + state @ U.T
        cell = _sigmoid64(g[:, 4:8]) * cell + _sigmoid64(g[:, :4]) * np.tanh(g[:, 8:12])
        state = _sigmoid64(g[:, 12:]) * np.tanh(cell)
        hs.append(state)
        cs.append(cell)
    got_h, got_c = lstm(mx.array(x), mx.array(h0), mx.array(c0))
    np.testing.assert_allclose(np.array(got_h), np.stack(hs, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(got_c), np.stack(cs, 1), rtol=1e-5, atol=1e-5)
    # Unbatched sequences, and gradients reach every weight.
    assert gru(mx.array(x[0])).shape == (6, 4)
    grads = nn.value_and_grad(lstm, lambda v: lstm(v)[0].sum())(mx.array(x))[1]
    assert {k: v.shape for k, v in grads.items()} == {"Wx": (16, 3), "Wh": (16, 4)}
    with pytest.raises(ValueError, match="callable"):
        nn.RNN(3, 4, nonlinearity="tanh")
    with pytest.raises(ValueError, match=r"\(N, L, 3\)"):
        rnn(mx.ones((2, 6, 5)))


def _np_attention(mha, q_in, kv_in, heads, mask=None):
    """Multi-head attention by its definition, with ``mha``'s projections (no biases)."""
    q, k, v = (a @ np_(p.weight).T for a, p in ((q_in, mha.query_proj), (kv_in, mha.key_proj), (kv_in, mha.value_proj)))
    split = lambda a: a.reshape(a.shape[0], a.shape[1], heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + (0 if mask is None else mask)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    out = (weights / weights.sum(-1, keepdims=True)) @ v
    return out.transpose(0, 2, 1, 3).reshape(q_in.shape[0], q_in.shape[1], -1) @ np_(mha.out_proj.weight).T


@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_encoder_layer_matches_numpy(rng, norm_first):
    mx.random.seed(9)
    layer = nn.TransformerEncoderLayer(dims=8, num_heads=2, mlp_dims=16, norm_first=norm_first)
    x = rng.standard_normal((2, 5, 8))
    mask = np.triu(np.full((5, 5), -1e9), 1)
    ln = lambda a: _np_normalize(a, -1)  # noqa: E731  (weights 1, biases 0 as initialised)
    mlp = lambda a: np.maximum(a @ np_(layer.linear1.weight).T + np_(layer.linear1.bias), 0) @ np_(layer.linear2.weight).T + np_(layer.linear2.bias)  # noqa: E731
    if norm_first:
        h = x + _np_attention(layer.attention, ln(x), ln(x), 2, mask)
        want = h + mlp(ln(h))
    else:
        h = ln(x + _np_attention(layer.attention, x, x, 2, mask))
        want = ln(h + mlp(h))
    got = layer(mx.array(x.astype(np.float32)), mx.array(mask.astype(np.float32)))
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)


def test_transformer_stacks_with_checkpointing_equal_without(rng):
    mx.random.seed(2)
    model = nn.Transformer(dims=8, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, mlp_dims=16)
    src, tgt = mx.array(rng.standard_normal((2, 6, 8)).astype(np.float32)), mx.array(rng.standard_normal((2, 4, 8)).astype(np.float32))
    mask = nn.MultiHeadAttention.create_additive_causal_mask(4)
    loss = lambda: model(src, tgt, None, mask, None).square().sum()  # noqa: E731
    value, grads = nn.value_and_grad(model, lambda: loss())()
    for stack in (model.encoder, model.decoder):
        stack.checkpoint = True
    value_ckpt, grads_ckpt = nn.value_and_grad(model, lambda: loss())()
    np.testing.assert_allclose(value_ckpt.item(), value.item(), rtol=1e-5)
    for (name, g), (_, h) in zip(tree_flatten(grads), tree_flatten(grads_ckpt)):
        np.testing.assert_allclose(np.array(h), np.array(g), rtol=1e-4, atol=1e-5, err_msg=name)
    assert len(tree_flatten(grads)) == len(tree_flatten(model.trainable_parameters()))
    custom = nn.Transformer(dims=8, num_heads=2, custom_encoder=nn.Identity(), custom_decoder=nn.Identity())
    assert isinstance(custom.encoder, nn.Identity) and isinstance(custom.decoder, nn.Identity)


def test_embedding_and_attention_shapes_and_values(rng):
    emb = nn.Embedding(10, 4)
    idx = mx.array([[1, 3], [9, 0]])
    np.testing.assert_array_equal(np.array(emb(idx)), np.array(emb.weight)[np.array(idx)])
    attn = nn.MultiHeadAttention(8, 2)
    q = mx.array(rng.standard_normal((2, 3, 8)).astype(np.float32))
    kv = mx.array(rng.standard_normal((2, 5, 8)).astype(np.float32))
    out = attn(q, kv, kv)
    assert out.shape == (2, 3, 8)
    # Reference: numpy attention with the same projections.
    W = {k: np_(attn[k].weight) for k in ("query_proj", "key_proj", "value_proj", "out_proj")}
    Q, K, V = np_(q) @ W["query_proj"].T, np_(kv) @ W["key_proj"].T, np_(kv) @ W["value_proj"].T
    split = lambda t: t.reshape(t.shape[0], t.shape[1], 2, 4).transpose(0, 2, 1, 3)  # noqa: E731
    s = split(Q) @ split(K).transpose(0, 1, 3, 2) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ split(V)).transpose(0, 2, 1, 3).reshape(2, 3, 8) @ W["out_proj"].T
    np.testing.assert_allclose(np.array(out), o, rtol=1e-4, atol=1e-5)
    mask = nn.MultiHeadAttention.create_additive_causal_mask(3)
    assert np.array(mask)[0, 1] < -1e8 and np.array(mask)[1, 0] == 0


def test_dropout_scales_and_is_off_in_eval():
    mx.random.seed(0)
    d = nn.Dropout(0.25)
    y = np.array(d(mx.ones((1000,))))
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1 / 0.75, rtol=1e-6)
    assert 0.65 < len(kept) / 1000 < 0.85
    d.eval()
    np.testing.assert_array_equal(np.array(d(mx.ones((5,)))), np.ones(5))


def test_losses_match_numpy(rng):
    logits = rng.standard_normal((5, 4))
    targets = rng.integers(0, 4, 5)
    lse = np.log(np.exp(logits).sum(-1))
    ce = lse - logits[np.arange(5), targets]
    L, T = mx.array(logits, dtype=mx.float64), mx.array(targets)
    np.testing.assert_allclose(np.array(nn.losses.cross_entropy(L, T)), ce, rtol=1e-10)
    smooth = lse - (0.9 * logits[np.arange(5), targets] + 0.1 * logits.mean(-1))
    np.testing.assert_allclose(np.array(nn.losses.cross_entropy(L, T, label_smoothing=0.1)), smooth, rtol=1e-10)
    onehot = np.eye(4)[targets]
    np.testing.assert_allclose(np.array(nn.losses.cross_entropy(L, mx.array(onehot, dtype=mx.float64), reduction="mean")), ce.mean())
    z, y = rng.standard_normal(6), rng.integers(0, 2, 6).astype(np.float64)
    bce = np.mean(np.log1p(np.exp(z)) - z * y)
    np.testing.assert_allclose(nn.losses.binary_cross_entropy(mx.array(z, dtype=mx.float64), mx.array(y, dtype=mx.float64)).item(), bce, rtol=1e-10)
    p = 1 / (1 + np.exp(-z))
    bce_p = np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)))
    got = nn.losses.binary_cross_entropy(mx.array(p, dtype=mx.float64), mx.array(y, dtype=mx.float64), with_logits=False)
    np.testing.assert_allclose(got.item(), bce_p, rtol=1e-8)
    a, b = rng.standard_normal(7), rng.standard_normal(7)
    A, B = mx.array(a, dtype=mx.float64), mx.array(b, dtype=mx.float64)
    np.testing.assert_allclose(nn.losses.mse_loss(A, B).item(), np.mean((a - b) ** 2))
    np.testing.assert_allclose(nn.losses.l1_loss(A, B, reduction="sum").item(), np.sum(np.abs(a - b)))
    err = np.abs(a - b)
    hub = np.where(err <= 0.5, 0.5 * err**2, 0.5 * (err - 0.25))
    np.testing.assert_allclose(np.array(nn.losses.huber_loss(A, B, delta=0.5)), hub)
    logp = logits - lse[:, None]
    np.testing.assert_allclose(np.array(nn.losses.nll_loss(mx.array(logp, dtype=mx.float64), T)), -logp[np.arange(5), targets])
    with pytest.raises(ValueError, match="reduction"):
        nn.losses.mse_loss(A, B, reduction="avg")


def test_initialisers():
    mx.random.seed(2)
    w = mx.zeros((200, 300))
    g = np.array(nn.init.glorot_uniform()(w))
    limit = math.sqrt(6 / 500)
    assert np.abs(g).max() <= limit and np.abs(g).max() > 0.9 * limit
    h = np.array(nn.init.he_normal()(w))
    assert abs(h.std() - 1 / math.sqrt(300)) < 0.005
    np.testing.assert_array_equal(np.array(nn.init.constant(0.5)(w)), np.full((200, 300), 0.5))
    np.testing.assert_array_equal(np.array(nn.init.identity()(mx.zeros((3, 3)))), np.eye(3))


@pytest.mark.parametrize("ext", [".npz", ".safetensors"])
def test_save_and_load_weights(tmp_path, ext):
    model = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    path = str(tmp_path / f"w{ext}")
    model.save_weights(path)
    other = nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))
    other.load_weights(path)
    for (k1, v1), (k2, v2) in zip(tree_flatten(model.parameters()), tree_flatten(other.parameters())):
        assert k1 == k2
        np.testing.assert_array_equal(np.array(v1), np.array(v2))
    with pytest.raises(ValueError, match="missing"):
        nn.Sequential(nn.Linear(3, 2)).load_weights(path)


def test_save_load_arrays_all_formats(tmp_path):
    a = mx.array([[1.5, 2.0]], dtype=mx.float16)
    mx.save(str(tmp_path / "a.npy"), a)
    b = mx.load(str(tmp_path / "a.npy"))
    assert b.dtype == mx.float16 and b.tolist() == [[1.5, 2.0]]
    mx.savez(str(tmp_path / "z.npz"), x=mx.arange(3), y=mx.array([True]))
    z = mx.load(str(tmp_path / "z.npz"))
    assert z["x"].tolist() == [0, 1, 2] and z["y"].dtype == mx.bool_
    bf = mx.array([1.0, -3.5, 1e30], dtype=mx.bfloat16)
    mx.save_safetensors(str(tmp_path / "s.safetensors"), {"bf": bf, "i": mx.array([7], dtype=mx.int64)}, metadata={"k": "v"})
    s, meta = mx.load(str(tmp_path / "s.safetensors"), return_metadata=True)
    assert s["bf"].dtype == mx.bfloat16 and np.array_equal(np.array(s["bf"]), np.array(bf))
    assert s["i"].dtype == mx.int64 and meta == {"k": "v"}


def test_tree_utils_round_trip():
    tree = {"a": [mx.array(1), {"b": mx.array(2)}], "c": mx.array(3)}
    flat = tree_flatten(tree)
    assert [k for k, _ in flat] == ["a.0", "a.1.b", "c"]
    back = tree_unflatten(flat)
    assert back["a"][1]["b"].item() == 2
    doubled = tree_map(lambda x: x * 2, tree)
    assert doubled["c"].item() == 6


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda: optim.SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
        lambda: optim.Adam(learning_rate=0.01, bias_correction=True),
        lambda: optim.AdamW(learning_rate=0.01),
        lambda: optim.RMSprop(learning_rate=0.01),
        lambda: optim.Adagrad(learning_rate=0.1),
    ],
)
def test_training_compiled_and_uncompiled_reach_the_same_loss(rng, make_opt):
    x = mx.array(rng.standard_normal((32, 6)).astype(np.float32))
    y = mx.array(rng.integers(0, 3, 32))

    def loss_fn(model, x, y):
        return nn.losses.cross_entropy(model(x), y, reduction="mean")

    def train(compiled):
        mx.random.seed(7)
        model, opt = _mlp(), make_opt()
        state = [model.state, opt.state]

        def step(x, y):
            loss, grads = nn.value_and_grad(model, loss_fn)(model, x, y)
            opt.update(model, grads)
            return loss

        if compiled:
            step = partial(mx.compile, inputs=state, outputs=state)(step)
        losses = []
        for _ in range(15):
            losses.append(step(x, y).item())
            mx.eval(state)
        return losses

    eager, comp = train(False), train(True)
    np.testing.assert_allclose(comp, eager, rtol=2e-4, atol=1e-5)
    assert eager[-1] < eager[0]


def test_sgd_momentum_matches_the_numpy_update():
    p, g = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    opt = optim.SGD(learning_rate=0.1, momentum=0.9, weight_decay=0.01)
    params = {"w": mx.array(p, dtype=mx.float64)}
    v = np.zeros(2)
    for _ in range(3):
        params = opt.apply_gradients({"w": mx.array(g, dtype=mx.float64)}, params)
        gd = g + 0.01 * p
        v = 0.9 * v + gd
        p = p - 0.1 * v
    np.testing.assert_allclose(np.array(params["w"]), p, rtol=1e-6)
    assert opt.step.item() == 3


def test_adam_matches_the_numpy_update():
    p, g = np.array([1.0, -2.0]), np.array([0.5, 0.25])
    opt = optim.Adam(learning_rate=0.1, betas=[0.8, 0.9], bias_correction=True)
    params = {"w": mx.array(p, dtype=mx.float64)}
    m = v = np.zeros(2)
    for t in range(1, 4):
        params = opt.apply_gradients({"w": mx.array(g, dtype=mx.float64)}, params)
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        p = p - 0.1 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.9**t)) + 1e-8)
    np.testing.assert_allclose(np.array(params["w"]), p, rtol=1e-5)


def test_schedules():
    steps = mx.arange(0, 12).astype(mx.uint64)
    np.testing.assert_allclose(np.array(optim.step_decay(1.0, 0.5, 4)(steps)), 0.5 ** (np.arange(12) // 4), rtol=1e-6)
    cos = np.array(optim.cosine_decay(1.0, 10)(steps))
    np.testing.assert_allclose(cos, 0.5 * (1 + np.cos(np.pi * np.minimum(np.arange(12), 10) / 10)), atol=1e-6)
    lin = np.array(optim.linear_schedule(0.0, 1.0, 4)(steps))
    np.testing.assert_allclose(lin, np.minimum(np.arange(12), 4) / 4)
    joined = optim.join_schedules([optim.linear_schedule(0.0, 1.0, 4), optim.cosine_decay(1.0, 8)], [4])
    j = np.array(joined(steps))
    np.testing.assert_allclose(j[:4], np.arange(4) / 4)
    np.testing.assert_allclose(j[4:], 0.5 * (1 + np.cos(np.pi * np.arange(8) / 8)), atol=1e-6)
    # As mlx: update k (from 0) uses the schedule at step k, and the step count then includes it.
    opt = optim.SGD(learning_rate=optim.step_decay(1.0, 0.5, 1))
    w = opt.apply_gradients({"w": mx.array(1.0)}, {"w": mx.array(0.0)})["w"]
    assert opt.learning_rate.item() == pytest.approx(1.0) and w.item() == pytest.approx(-1.0) and opt.step.item() == 1
    w = opt.apply_gradients({"w": mx.array(1.0)}, {"w": w})["w"]
    assert opt.learning_rate.item() == pytest.approx(0.5) and w.item() == pytest.approx(-1.5)
    assert optim.schedulers.cosine_decay(1.0, 10)(5).item() == pytest.approx(0.5)


def test_seed_training_example_compiled():
    """seed 004's compiled training loop, as written."""
    x = mx.random.uniform(shape=(4, 10))
    y = mx.array([0, 1, 0, 1])
    model = nn.Linear(10, 1)
    optimizer = optim.SGD(learning_rate=0.1, momentum=0.8)

    def loss_fn(model, x, y):
        logits = model(x).squeeze()
        return nn.losses.binary_cross_entropy(logits, y)

    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(x, y):
        loss_and_grad_fn = nn.value_and_grad(model, loss_fn)
        loss, grads = loss_and_grad_fn(model, x, y)
        optimizer.update(model, grads)
        return loss

    losses = []
    for it in range(10):
        loss = step(x, y)
        mx.eval(state)
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert step.trace_count <= 2


def test_dropout_in_a_compiled_step_draws_fresh_masks_with_random_state():
    mx.random.seed(5)
    model = nn.Sequential(nn.Dropout(0.5))
    state = [model.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def fwd(x):
        return model(x)

    x = mx.ones((64,))
    a, b = np.array(fwd(x)), np.array(fwd(x))
    assert fwd.trace_count == 1
    assert not np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 2.0}


def test_apply_with_a_filter_and_strict_freeze():
    model = nn.Linear(2, 3)
    model.apply(lambda p: mx.zeros_like(p), filter_fn=lambda m, k, v: k == "bias")
    assert np.all(np.array(model.bias) == 0) and np.any(np.array(model.weight) != 0)
    model.apply(lambda p: p + 1)
    assert np.all(np.array(model.bias) == 1)
    model.freeze(keys=["bias"], strict=True)
    assert set(model.trainable_parameters()) == {"weight"}
    with pytest.raises(ValueError, match="no parameters"):
        model.freeze(keys=["nonexistent"], strict=True)
    with pytest.raises(KeyError, match="no parameters"):
        model.unfreeze(keys=["nonexistent"], strict=True)


def test_module_trees_keep_list_positions_and_update_checks_types():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1), mx.sigmoid)
    params = model.parameters()
    assert [sorted(p) for p in params["layers"]] == [["bias", "weight"], [], ["bias", "weight"], []]
    assert [type(c).__name__ for c in model.children()["layers"]] == ["Linear", "ReLU", "Linear", "dict"]
    # Saved weights skip the parameterless layers and load back into their positions.
    flat = tree_flatten(params)
    assert [k for k, _ in flat] == ["layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"]
    rebuilt = tree_unflatten(flat)
    assert rebuilt["layers"][1] == {} and rebuilt["layers"][2]["weight"] is params["layers"][2]["weight"]
    assert tree_flatten(params, destination={})["layers.2.bias"] is params["layers"][2]["bias"]
    for bad in ({"layers": [{"value": mx.zeros(1)}]}, {"layers": ["hello"]}, {"layers": [{"weight": "hi"}]}):
        with pytest.raises(ValueError):
            model.update(bad)
    model.update({"layers": [{}, {}, {"bias": mx.full((1,), 7.0)}]})
    assert model.layers[2].bias.item() == 7.0
    # Frozen parameters are left out, not None; a string key is one key.
    model.freeze(keys="bias")
    assert [k for k, _ in tree_flatten(model.trainable_parameters())] == ["layers.0.weight", "layers.2.weight"]
    model.unfreeze()
    # update_modules replaces submodules in place and refuses anything else.
    model.update_modules({"layers": [{}, {}, nn.Linear(3, 4)]})
    assert model.layers[2].weight.shape == (4, 3)
    with pytest.raises(ValueError):
        model.update_modules({"layers": [0]})
    with pytest.raises(ValueError):
        model.update_modules({"layers": [{}, {}, {}, {}, nn.Linear(1, 1)]})
    # set_dtype converts the floating parameters (every one with predicate=None).
    model.set_dtype(mx.float16)
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.float16}
    model.set_dtype(mx.int32, predicate=None)
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.int32}
    # A plain attribute does not hide an array assigned later under the same name.
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.value = None
            self.value = mx.array(2.0)

    assert Holder().value.item() == 2.0


def test_load_weights_checks_names_types_and_shapes():
    layer = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="missing"):
        layer.load_weights([("weight", mx.ones((2, 2)))])
    with pytest.raises(ValueError, match="must be an array"):
        layer.load_weights([("weight", mx.ones((2, 2))), ("bias", 3)])
    with pytest.raises(ValueError, match="shape"):
        layer.load_weights([("weight", mx.ones((2, 2))), ("bias", mx.ones((2, 1)))])
    seq = nn.Sequential(nn.Linear(2, 2))
    seq.load_weights([("layers.0.weight", mx.ones((2, 2))), ("layers.1.weight", mx.ones((2, 2)))], strict=False)
    assert len(seq.layers) == 1 and np.all(np.array(seq.layers[0].weight) == 1)


def test_more_losses_match_numpy(rng):
    a, b, c = (rng.standard_normal((4, 5)) for _ in range(3))
    signs = np.where(rng.random((4, 5)) < 0.5, -1.0, 1.0)
    var = rng.random((4, 5)) + 0.1
    f32 = lambda v: mx.array(v.astype(np.float32))  # noqa: E731
    L = nn.losses
    d = np.abs(a - b)
    cases = {
        "smooth_l1": (L.smooth_l1_loss(f32(a), f32(b), beta=0.5, reduction="none"), np.where(d < 0.5, d**2 / (2 * 0.5), d - 0.25)),
        "triplet": (L.triplet_loss(f32(a), f32(b), f32(c), margin=0.3), np.maximum(np.sqrt(((a - b) ** 2).sum(-1) + 1e-6) - np.sqrt(((a - c) ** 2).sum(-1) + 1e-6) + 0.3, 0)),
        "hinge": (L.hinge_loss(f32(a), f32(signs)), np.maximum(1 - a * signs, 0)),
        "log_cosh": (L.log_cosh_loss(f32(a), f32(b)), np.log(np.cosh(a - b))),
        "cosine": (L.cosine_similarity_loss(f32(a), f32(b), axis=1), (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))),
        "margin_ranking": (L.margin_ranking_loss(f32(a), f32(b), f32(signs), margin=0.2), np.maximum(0, -signs * (a - b) + 0.2)),
        "kl_div": (L.kl_div_loss(f32(a), f32(b)), (np.exp(b) * (b - a)).sum(-1)),
        "gaussian_nll": (L.gaussian_nll_loss(f32(a), f32(b), f32(var), full=True, reduction="sum"), (0.5 * (np.log(var) + (b - a) ** 2 / var) + 0.5 * np.log(2 * np.pi)).sum()),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
    # Cross entropy depends only on the gaps between logits, however large the offset.
    # Logits on a 1/16 grid, so that adding 1e6 is exact in float32.
    logits, labels = np.round(rng.standard_normal((3, 4)) * 16) / 16, np.array([0, 3, 1])
    want = np.log(np.exp(logits).sum(-1)) - logits[np.arange(3), labels]
    for offset in (0.0, 1e6):
        got = L.cross_entropy(f32(logits + offset), mx.array(labels))
        np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)
    probs = rng.random((3, 4)) * 0.5  # not summing to one: the shift must not change the loss
    want = np.log(np.exp(logits).sum(-1)) - (logits * probs).sum(-1)
    np.testing.assert_allclose(np.array(L.cross_entropy(f32(logits), f32(probs))), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="shapes must match"):
        L.margin_ranking_loss(f32(a), f32(b), f32(signs[:2]))


def test_orthogonal_and_sparse_initialisers():
    mx.random.seed(4)
    for shape in ((5, 5), (7, 3), (3, 7)):
        w = np.array(nn.init.orthogonal(gain=2.0)(mx.zeros(shape)), dtype=np.float64)
        small = min(shape)
        gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
        np.testing.assert_allclose(gram, 4 * np.eye(small), atol=1e-4)
    with pytest.raises(ValueError, match="3D array"):
        nn.init.orthogonal()(mx.zeros((2, 3, 4)))
    w = nn.init.sparse(0.3, dtype=mx.float16)(mx.zeros((6, 10)))
    assert w.dtype == mx.float16
    zeros = (np.array(w, dtype=np.float32) == 0).sum(1)
    assert (zeros == 3).all()
    with pytest.raises(ValueError, match="sparsity"):
        nn.init.sparse(1.5)


def _two_steps(optimizer, p0, grads):
    """The parameter after one update per gradient, from ``p0``."""
    params = {"w": mx.array(p0.astype(np.float32))}
    for g in grads:
        params = optimizer.apply_gradients({"w": mx.array(g.astype(np.float32))}, params)
    return np.array(params["w"], dtype=np.float64)


def test_more_optimizers_match_numpy_updates(rng):
    p0 = rng.standard_normal((3, 4))
    g1, g2 = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    lr = 0.1
    # Adamax
    m = v = np.zeros_like(p0)
    p = p0
    for g in (g1, g2):
        m, v = 0.9 * m + 0.1 * g, np.maximum(0.999 * v, np.abs(g))
        p = p - lr * m / (v + 1e-8)
    np.testing.assert_allclose(_two_steps(optim.Adamax(lr), p0, (g1, g2)), p, rtol=1e-5, atol=1e-6)
    # AdaDelta
    v = u = np.zeros_like(p0)
    p = p0
    for g in (g1, g2):
        v = 0.9 * v + 0.1 * g**2
        d = np.sqrt(u + 1e-6) / np.sqrt(v + 1e-6) * g
        u = 0.9 * u + 0.1 * d**2
        p = p - lr * d
    np.testing.assert_allclose(_two_steps(optim.AdaDelta(lr), p0, (g1, g2)), p, rtol=1e-5, atol=1e-6)
    # Lion with weight decay
    m = np.zeros_like(p0)
    p = p0
    for g in (g1, g2):
        direction = np.sign(0.9 * m + 0.1 * g)
        m = 0.99 * m + 0.01 * g
        p = p * (1 - lr * 0.1) - lr * direction
    np.testing.assert_allclose(_two_steps(optim.Lion(lr, weight_decay=0.1), p0, (g1, g2)), p, rtol=1e-5, atol=1e-6)
    # Adafactor on a vector (unfactored) and a matrix (factored), one step from relative step 1e-2.
    for shape in ((5,), (3, 4)):
        w, g = rng.standard_normal(shape), rng.standard_normal(shape)
        sq = g**2 + 1e-30
        if len(shape) == 1:
            update = g / np.sqrt(sq)  # beta_2 = 1 - 1**-0.8 = 0: the moments are this step's
        else:
            row, col = sq.mean(-1), sq.mean(-2)
            update = g / np.sqrt(row / row.mean())[:, None] / np.sqrt(col)[None, :]
        update = update / max(1.0, np.sqrt((update**2).mean()))
        want = w - 1e-2 * max(1e-3, np.sqrt((w**2).mean())) * update
        np.testing.assert_allclose(_two_steps(optim.Adafactor(), w, (g,)), want, rtol=1e-4, atol=1e-6)
    # Muon: the update of a matrix is nearly orthogonal (singular values near 1).
    muon = optim.Muon(learning_rate=1.0, momentum=0.0, weight_decay=0.0, nesterov=False)
    step = np.array(muon.apply_gradients({"w": mx.array(g1.astype(np.float32))}, {"w": mx.zeros((3, 4))})["w"])
    singular = np.linalg.svd(-step, compute_uv=False)
    assert (singular > 0.5).all() and (singular < 1.3).all(), singular
    with pytest.raises(ValueError, match=">0"):
        optim.RMSprop(0.1, eps=0.0)
    with pytest.raises(ValueError, match="learning_rate"):
        optim.SGD(None)


def test_multi_optimizer_routes_parameters_and_clip_grad_norm():
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    sgd_fast, sgd_slow = optim.SGD(1.0), optim.SGD(0.0)
    multi = optim.MultiOptimizer([sgd_fast, sgd_slow], [lambda path, g: g.ndim > 1])
    before = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    grads = tree_map(mx.ones_like, model.trainable_parameters())
    multi.update(model, grads)
    after = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    for k in before:
        moved = 1.0 if k.endswith("weight") else 0.0  # weights through the fast SGD, biases the frozen one
        np.testing.assert_allclose(after[k], before[k] - moved, rtol=1e-6, err_msg=k)
    assert len(multi.state["states"]) == 2
    with pytest.raises(ValueError, match="filters"):
        optim.MultiOptimizer([sgd_fast, sgd_slow])
    grads = {"a": mx.array([3.0, 4.0]), "b": [mx.array([12.0])]}
    clipped, norm = optim.clip_grad_norm(grads, 6.5)
    assert norm.item() == pytest.approx(13.0)
    np.testing.assert_allclose(np.array(clipped["a"]), [1.5, 2.0], rtol=1e-5)
    unchanged, _ = optim.clip_grad_norm(grads, 100.0)
    np.testing.assert_allclose(np.array(unchanged["b"][0]), [12.0])


def test_upsample_matches_numpy_interpolation(rng):
    x = rng.standard_normal((2, 3, 5, 2)).astype(np.float32)

    def interp(values, axis, positions):
        """Linear interpolation of ``values`` along ``axis`` at ``positions`` (clamped)."""
        n = values.shape[axis]
        pos = np.clip(positions, 0, n - 1)
        left = np.floor(pos).astype(int)
        right = np.minimum(left + 1, n - 1)
        frac = (pos - left).reshape([-1 if a == axis else 1 for a in range(values.ndim)])
        return np.take(values, left, axis) * (1 - frac) + np.take(values, right, axis) * frac

    for align in (True, False):
        want = x.astype(np.float64)
        for axis, scale in ((1, 2), (2, 1.5)):
            n = want.shape[axis]
            m = int(scale * n)
            # Corners on corners, or (mlx's) the outputs' grid, spaced 1/scale, centred on the inputs'.
            pos = np.arange(m) * (n - 1) / max(m - 1, 1) if align else (np.arange(m) - (m - 1) / 2) / scale + (n - 1) / 2
            want = interp(want, axis, pos)
        got = nn.Upsample((2, 1.5), mode="linear", align_corners=align)(mx.array(x))
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5, err_msg=f"align_corners={align}")
    np.testing.assert_array_equal(np.array(nn.Upsample(2)(mx.array(x))), x.repeat(2, 1).repeat(2, 2))
    # Cubic at scale 1 reproduces the input; antialiased shrinking keeps constants constant.
    np.testing.assert_allclose(np.array(nn.Upsample(1.0, mode="cubic")(mx.array(x))), x, atol=1e-6)
    flat = nn.Upsample(0.5, mode="cubic", antialias=True)(mx.full((1, 8, 8, 1), 3.0))
    assert flat.shape == (1, 4, 4, 1)
    np.testing.assert_allclose(np.array(flat), 3.0, rtol=1e-5)
    assert str(nn.Upsample((2, 3))) == "Upsample(scale_factor=(2.0, 3.0), mode='nearest', align_corners=False)"
    for bad in (dict(scale_factor=2, mode="area"), dict(scale_factor=0), dict(scale_factor=2, mode="nearest", antialias=True)):
        with pytest.raises(ValueError):
            nn.Upsample(**bad)


def test_quantized_layers_and_nn_quantize(rng):
    mx.random.seed(6)
    linear = nn.Linear(64, 8)
    q = linear.to_quantized(group_size=32, bits=8)
    assert isinstance(q, nn.QuantizedLinear) and q.weight.dtype == mx.uint32
    # The product equals the float product with the dequantized weight.
    w = np.array(mx.dequantize(q.weight, q.scales, q.biases, group_size=32, bits=8), dtype=np.float64)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    want = x.astype(np.float64) @ w.T + np_(linear.bias)
    np.testing.assert_allclose(np.array(q(mx.array(x))), want, rtol=1e-4, atol=1e-4)
    # 8 bits stay close to the original weight (within a step of the groups' scales; mlx's
    # scheme keeps zero exact, which can cost more than half a step at the far edge).
    assert np.abs(w - np_(linear.weight)).max() <= np.abs(np.array(q.scales)).max() + 1e-6
    # Only the float bias trains; unfreezing the scales never unfreezes the packed weight.
    assert set(dict(tree_flatten(q.trainable_parameters()))) == {"bias"}
    q.unfreeze(keys=["scales"])
    assert set(dict(tree_flatten(q.trainable_parameters()))) == {"bias", "scales"}
    q.unfreeze()
    assert "weight" not in dict(tree_flatten(q.trainable_parameters()))
    emb = nn.Embedding(10, 32)
    qe = nn.QuantizedEmbedding.from_embedding(emb, group_size=32, bits=4)
    idx = mx.array([3, 0, 9])
    rows = np.array(mx.dequantize(qe.weight, qe.scales, qe.biases, group_size=32, bits=4))[[3, 0, 9]]
    np.testing.assert_allclose(np.array(qe(idx)), rows, rtol=1e-6)
    model = nn.Sequential(nn.Embedding(5, 64), nn.ReLU(), nn.Linear(64, 64))
    nn.quantize(model, class_predicate=lambda path, m: isinstance(m, nn.Linear))
    assert [type(m).__name__ for m in model.layers] == ["Embedding", "ReLU", "QuantizedLinear"]
    nn.quantize(model, group_size=32, bits=2)
    assert isinstance(model.layers[0], nn.QuantizedEmbedding) and model.layers[0].bits == 2
    with pytest.raises(ValueError, match="quantized inputs need mode"):
        nn.quantize(nn.Sequential(nn.Linear(64, 64)), quantize_input=True)
    with pytest.raises(ValueError, match="mode"):
        nn.Linear(64, 8).to_quantized(mode="int3")
    with pytest.raises(TypeError, match="nn.Module"):
        nn.quantize([nn.Linear(2, 2)])


def test_qq_linear_trains_a_float_weight_and_serves_a_quantized_one(rng):
    mx.random.seed(3)
    model = nn.Sequential(nn.Linear(64, 32, bias=False))
    nn.quantize(model, mode="mxfp8", quantize_input=True)
    layer = model.layers[0]
    assert isinstance(layer, nn.QQLinear) and layer.weight.dtype == mx.float32
    x = mx.array(rng.standard_normal((64, 64)).astype(np.float32))
    w = np_(layer.weight)
    np.testing.assert_allclose(np.array(layer(x)), np.array(mx.qqmm(x, mx.array(w), mode="mxfp8")), rtol=1e-6)
    # Training mode: the float weight gets qqmm's straight-through gradient, cᵀ and xᵀ quantized
    # along the batch (for the loss sum(y * c), the output's cotangent is c).
    c = mx.array(rng.standard_normal((64, 32)).astype(np.float32))
    _, grads = nn.value_and_grad(layer, lambda m, x: (m(x) * c).sum())(layer, x)
    want = np.array(mx.qqmm(c.T, x.T, mode="mxfp8"))
    assert grads["weight"].shape == (32, 64)
    np.testing.assert_allclose(np.array(grads["weight"]), want, rtol=1e-6)
    # eval() stores the weight quantized, with the same products; train() restores a float one.
    before = np.array(layer(x))
    layer.eval()
    assert layer.weight.dtype == mx.uint32 and layer.scales.dtype == mx.uint8
    np.testing.assert_array_equal(np.array(layer(x)), before)
    layer.train()
    assert layer.weight.dtype == mx.float32 and "scales" not in layer
    with pytest.raises(ValueError, match="no bias"):
        nn.Linear(64, 32).to_quantized(mode="nvfp4", quantize_input=True)
    with pytest.raises(ValueError, match="nvfp4"):
        nn.QQLinear(64, 32, mode="mxfp4")


def test_the_language_model_example_learns():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "train_lm.py"
    spec = importlib.util.spec_from_file_location("train_lm", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    text = (path.parents[2] / "README.md").read_text(encoding="utf-8")[:20000]
    lines = []
    losses = example.train(text, steps=40, batch=8, context=32, dims=32, layers=1, report_every=20, log=lines.append)
    assert len(losses) == 40 and all(np.isfinite(losses))
    # From about log(vocabulary) towards the characters' statistics.
    assert np.mean(losses[-10:]) < np.mean(losses[:5]) - 0.5, losses
    assert "tokens/s" in lines[-1]


def test_review_cases_tuples_frozen_entries_masks_and_always_frozen(rng):
    mx.random.seed(12)
    # A conv layer keeps tuple settings, which are leaves, not containers: it trains and casts.
    conv = nn.Conv2d(2, 3, 3, padding=1)
    x = mx.array(rng.standard_normal((1, 5, 5, 2)).astype(np.float32))
    _, grads = nn.value_and_grad(conv, lambda v: conv(v).sum())(x)
    assert set(grads) == {"weight", "bias"}
    conv.set_dtype(mx.float16)
    assert conv.weight.dtype == mx.float16
    # A frozen array inside a list leaves {} in the gradients, which update skips.
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.terms = [mx.ones((2,)), mx.ones((2,))]

        def __call__(self):
            return (self.terms[0] * self.terms[1]).sum()

    holder = Holder()
    holder.freeze(keys=["terms.0"])
    _, grads = nn.value_and_grad(holder, lambda: holder())()
    assert grads["terms"][0] == {}
    optim.SGD(1.0).update(holder, grads)
    np.testing.assert_allclose(np.array(holder.terms[1]), [0.0, 0.0])
    np.testing.assert_allclose(np.array(holder.terms[0]), [1.0, 1.0])
    # MultiOptimizer whose parts cover lists of different lengths.
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    multi = optim.MultiOptimizer([optim.SGD(0.5), optim.SGD(0.0)], [lambda path, g: path.startswith("layers.0")])
    before = np.array(model.layers[0].weight)
    multi.update(model, tree_map(mx.ones_like, model.trainable_parameters()))
    np.testing.assert_allclose(np.array(model.layers[0].weight), before - 0.5, rtol=1e-6)
    # Unfreezing a parent keeps quantized weights and running statistics frozen.
    parent = nn.Sequential(nn.Linear(64, 8).to_quantized(), nn.BatchNorm(8))
    parent.unfreeze()
    names = set(dict(tree_flatten(parent.trainable_parameters())))
    assert "layers.0.weight" not in names and "layers.1.running_mean" not in names and "layers.0.scales" in names
    # Attention masks: boolean (False = masked out) and "causal" equal the additive mask.
    mha = nn.MultiHeadAttention(8, 2)
    q = mx.array(rng.standard_normal((2, 4, 8)).astype(np.float32))
    additive = mha(q, q, q, nn.MultiHeadAttention.create_additive_causal_mask(4))
    keep = mx.array(np.tril(np.ones((4, 4), dtype=bool)))
    np.testing.assert_allclose(np.array(mha(q, q, q, keep)), np.array(additive), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(mha(q, q, q, "causal")), np.array(additive), rtol=1e-5, atol=1e-6)
    assert nn.GLU(axis=0).axis == 0 and nn.GLU().children() == {}


def test_utils_checkpoint_gives_the_gradients_of_the_plain_module():
    mx.random.seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))
    x = mx.random.normal((5, 6))

    def loss(forward, x):
        return (forward(x) ** 2).mean()

    plain_value, plain_grads = nn.value_and_grad(model, lambda x: loss(model, x))(x)
    for wrapped in (nn.utils.checkpoint(model), nn.utils.checkpoint(model, model.__call__)):
        value, grads = nn.value_and_grad(model, lambda x: loss(wrapped, x))(x)
        assert np.allclose(np.array(value), np.array(plain_value), rtol=1e-6)
        for (key, g), (_, want) in zip(tree_flatten(grads), tree_flatten(plain_grads)):
            assert np.allclose(np.array(g), np.array(want), rtol=1e-5, atol=1e-7), key
    # The checkpointed call still reads the model's current parameters.
    model.update(tree_map(lambda p: p * 2, model.parameters()))
    assert np.allclose(np.array(nn.utils.checkpoint(model)(x)), np.array(model(x)), rtol=1e-6)


def test_mlx_layer_module_paths_import_kilns_layers():
    # Code written for mlx imports from its layer modules (mlx-lm: mlx.nn.layers.distributed).
    from kiln.nn.layers.base import Module
    from kiln.nn.layers.distributed import AllToShardedLinear, shard_linear
    from kiln.nn.layers.linear import Linear
    from kiln.nn.layers.quantized import QuantizedLinear
    from kiln.nn.layers.transformer import TransformerEncoderLayer

    assert (Module, Linear, QuantizedLinear) == (nn.Module, nn.Linear, nn.QuantizedLinear)
    assert (AllToShardedLinear, shard_linear) == (nn.AllToShardedLinear, nn.distributed.shard_linear)
    assert TransformerEncoderLayer is nn.TransformerEncoderLayer
    assert nn.layers.positional_encoding.RoPE is nn.RoPE
