"""kiln.core.distributed and nn's sharded layers against numpy references: the collectives on the
group of one process (all kiln has without a backend), their errors, and the sharded layers both
on that group (where they compute what Linear and QuantizedLinear compute) and on simulated
larger groups (a test backend serving one rank of several), which check the slicing by rank and
where the collectives are called."""

import numpy as np
import pytest

import kiln.core as mx
import kiln.nn as nn
from kiln.core.distributed import Group
from kiln.nn.distributed import shard_inplace, shard_linear
from kiln.nn.utils import clip_grad_norm_sharded
from kiln.utils import tree_flatten

dist = mx.distributed


def np_(a):
    return np.array(a, dtype=np.float64)


class Echo:
    """A test backend for rank ``rank`` of ``size`` processes that records each collective call
    and answers with the input itself (as if the other ranks contributed nothing): enough to see
    what a layer hands the collectives and what it does with the answer."""

    def __init__(self, rank, size):
        self.rank, self.size, self.calls = rank, size, []

    def all_sum(self, x, stream):
        self.calls.append(("all_sum", x))
        return x

    def send(self, x, dst, stream):
        self.calls.append(("send", dst))
        return x


def simulated(rank, size):
    """Rank ``rank`` of a group of ``size`` served by an ``Echo`` backend (``group._backend``)."""
    return Group._over(Echo(rank, size))


def dequantized(layer):
    return np_(mx.dequantize(layer.weight, layer.scales, layer.get("biases"), group_size=layer.group_size, bits=layer.bits, mode=layer.mode))


# --- groups and init --------------------------------------------------------------------------


def test_init_gives_the_single_process_group():
    g = dist.init()
    assert isinstance(g, Group) and (g.rank(), g.size()) == (0, 1)
    assert dist.init() is g
    for backend in ("any", "mpi", "ring", "nccl", "jaccl"):
        assert dist.init(backend=backend).size() == 1
        assert dist.is_available(backend) is False
    assert dist.is_available() is False and dist.is_available("no-such-backend") is False
    assert repr(g) == "Group(rank=0, size=1)"


def test_init_errors():
    with pytest.raises(RuntimeError, match="no distributed backend is available in kiln"):
        dist.init(strict=True)
    with pytest.raises(RuntimeError, match="backend='ring'"):
        dist.init(True, "ring")
    with pytest.raises(ValueError, match="'any', 'mpi', 'ring', 'nccl', 'jaccl'.*'tcp'"):
        dist.init(backend="tcp")
    with pytest.raises(TypeError, match="init: backend"):
        dist.init(backend=3)
    with pytest.raises(TypeError, match="init: strict"):
        dist.init(strict="yes")
    with pytest.raises(ValueError, match="jaccl"):
        dist.init(backend="ring", all_gather_factory=lambda rank, size: lambda src, n: b"")
    with pytest.raises(TypeError, match="callable"):
        dist.init(backend="jaccl", all_gather_factory="not callable")
    assert dist.init(backend="jaccl", all_gather_factory=lambda rank, size: None).size() == 1
    with pytest.raises(TypeError, match="is_available"):
        dist.is_available(None)


def test_group_split_and_construction():
    g = dist.init()
    with pytest.raises(RuntimeError, match="cannot be split"):
        g.split(0)
    with pytest.raises(RuntimeError, match="cannot be split"):
        g.split(1, key=0)
    with pytest.raises(TypeError, match="color"):
        g.split("a")
    with pytest.raises(TypeError, match="key"):
        g.split(0, 1.5)
    with pytest.raises(TypeError, match="not constructed directly"):
        Group()


# --- collectives on one process ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.int32, mx.uint8, mx.bool_, mx.complex64])
def test_reductions_and_gather_on_one_process_give_the_input(rng, dtype, device):
    if dtype == mx.complex64 and device == "gpu":
        pytest.skip("complex64 arrays are computed on the CPU only")
    values = rng.standard_normal((3, 4)) * 5
    x = mx.array(values).astype(dtype)
    want = np.array(x)
    g = dist.init()
    for op in (dist.all_sum, dist.all_max, dist.all_min, dist.all_gather, dist.sum_scatter):
        for kwargs in ({}, {"group": g}, {"stream": mx.cpu}, {"group": g, "stream": mx.default_stream(mx.cpu)}):
            y = op(x, **kwargs)
            assert y.dtype == x.dtype and y.shape == x.shape, op
            np.testing.assert_array_equal(np.array(y), want)


def test_collectives_convert_their_input_and_return_a_new_array():
    assert dist.all_sum(2.5).item() == 2.5 and dist.all_sum(2.5).dtype == mx.float32
    assert dist.all_sum(3).dtype == mx.int32
    np.testing.assert_array_equal(np.array(dist.all_max([[1, 2], [3, 4]])), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.array(dist.all_min(np.arange(4.0))), np.arange(4.0))
    # A scalar stays a scalar (mlx returns the input of a one-process gather as it is).
    assert dist.all_gather(mx.array(7.0)).shape == ()
    # The result is its own array: writing into it leaves the input alone.
    x = mx.array([1.0, 2.0, 3.0])
    y = dist.all_sum(x)
    y[0] = 10.0
    np.testing.assert_array_equal(np.array(x), [1, 2, 3])
    np.testing.assert_array_equal(np.array(y), [10, 2, 3])


def test_collectives_pass_gradients_through(rng):
    x = mx.array(rng.standard_normal((2, 3)).astype(np.float32))
    w = rng.standard_normal((2, 3))
    for op in (dist.all_sum, dist.all_max, dist.all_min, dist.all_gather, dist.sum_scatter):
        grad = mx.grad(lambda a: (op(a) * mx.array(w.astype(np.float32))).sum())(x)
        np.testing.assert_allclose(np_(grad), w, rtol=1e-6)


def test_send_and_recv_have_no_peer_on_one_process():
    x = mx.ones((2,))
    with pytest.raises(ValueError, match=r"send: cannot send to rank 1: the group has size 1"):
        dist.send(x, 1)
    with pytest.raises(ValueError, match=r"send: cannot send to rank 0: the group has size 1"):
        dist.send(x, 0, group=dist.init())
    with pytest.raises(ValueError, match=r"recv: cannot receive from rank 0: the group has size 1"):
        dist.recv((2, 3), mx.float32, 0)
    with pytest.raises(ValueError, match=r"recv_like: cannot receive from rank 2: the group has size 1"):
        dist.recv_like(x, 2)


def test_collectives_refuse_bad_arguments():
    x = mx.ones((2,))
    with pytest.raises(TypeError, match="all_sum: x must be an array"):
        dist.all_sum("abc")
    with pytest.raises(TypeError, match="all_gather: x must be an array"):
        dist.all_gather(None)
    with pytest.raises(ValueError, match="sum_scatter: x must be an array"):
        dist.sum_scatter([[1, 2], [3]])
    with pytest.raises(TypeError, match="all_max: group must be"):
        dist.all_max(x, group=1)
    with pytest.raises(TypeError):
        dist.all_min(x, stream="cpu")
    with pytest.raises(TypeError):
        dist.all_sum(x, dist.init())  # group is keyword-only
    with pytest.raises(TypeError, match="send: dst must be an int"):
        dist.send(x, 1.0)
    with pytest.raises(TypeError, match="recv: shape"):
        dist.recv(3, mx.float32, 0)
    with pytest.raises(ValueError, match="recv: shape .* negative"):
        dist.recv((2, -1), mx.float32, 0)
    with pytest.raises(TypeError, match="recv: dtype"):
        dist.recv((2,), "float32", 0)
    with pytest.raises(TypeError, match="recv_like: src"):
        dist.recv_like(x, None)


def test_ops_hand_larger_groups_to_their_backend():
    g = simulated(1, 3)
    x = mx.arange(6.0).reshape(3, 2)
    assert dist.all_sum(x, group=g) is x and g._backend.calls == [("all_sum", x)]
    assert dist.send(x, 2, group=g) is x and g._backend.calls[-1] == ("send", 2)
    with pytest.raises(ValueError, match="send: rank 3 is not in the group, whose ranks are 0 to 2"):
        dist.send(x, 3, group=g)
    with pytest.raises(ValueError, match="recv: rank -1 is not in the group"):
        dist.recv((2,), mx.float32, -1, group=g)
    with pytest.raises(ValueError, match="sum_scatter: x of shape \\(2, 3\\) cannot be split among a group of size 3"):
        dist.sum_scatter(mx.ones((2, 3)), group=g)


# --- sharded layers on one process ------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_sharded_linear_layers_compute_the_linear_map(rng, bias):
    mx.random.seed(3)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    for cls in (nn.AllToShardedLinear, nn.ShardedToAllLinear):
        layer = cls(8, 6, bias=bias)
        assert layer.weight.shape == (6, 8) and layer.group is dist.init()
        assert ("bias" in layer) == bias and (not bias or layer.bias.shape == (6,))
        want = x @ np_(layer.weight).T + (np_(layer.bias) if bias else 0)
        np.testing.assert_allclose(np_(layer(mx.array(x))), want, rtol=1e-5, atol=1e-5)
        assert np.abs(np_(layer.weight)).max() <= 1 / np.sqrt(8)
        assert f"input_dims=8, output_dims=6, bias={bias}" in repr(layer)


def test_from_linear_keeps_the_weights_and_the_outputs(rng):
    x = mx.array(rng.standard_normal((4, 16)).astype(np.float32))
    for bias in (True, False):
        lin = nn.Linear(16, 12, bias=bias)
        want = np_(lin(x))
        for sharded in (nn.AllToShardedLinear.from_linear(lin), nn.ShardedToAllLinear.from_linear(lin, segments=2)):
            np.testing.assert_array_equal(np_(sharded.weight), np_(lin.weight))
            assert ("bias" in sharded) == bias
            if bias:
                np.testing.assert_array_equal(np_(sharded.bias), np_(lin.bias))
            np.testing.assert_allclose(np_(sharded(x)), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="from_linear: expected an nn.Linear"):
        nn.AllToShardedLinear.from_linear(nn.ReLU())


@pytest.mark.parametrize("mode,group_size,bits", [("affine", 64, 4), ("affine", 32, 8), ("affine", 64, 3), ("mxfp8", 32, 8)])
def test_quantized_sharded_layers_compute_the_quantized_map(rng, mode, group_size, bits):
    x = mx.array(rng.standard_normal((3, 128)).astype(np.float32))
    lin = nn.Linear(128, 64)
    qlin = lin.to_quantized(group_size=group_size, bits=bits, mode=mode)
    want = np_(x) @ dequantized(qlin).T + np_(qlin.bias)
    for cls in (nn.QuantizedAllToShardedLinear, nn.QuantizedShardedToAllLinear):
        s = cls.from_quantized_linear(qlin)
        assert (s.mode, s.group_size, s.bits) == (mode, group_size, bits)
        for name in ("weight", "scales", "biases", "bias"):
            assert (name in s) == (name in qlin), name
            if name in s:
                assert s[name].shape == qlin[name].shape and s[name].dtype == qlin[name].dtype
                np.testing.assert_array_equal(np.array(s[name]), np.array(qlin[name]))
        np.testing.assert_allclose(np_(s(x)), want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np_(s(x)), np_(qlin(x)), rtol=1e-5, atol=1e-5)
        assert f"input_dims=128, output_dims=64, bias=True, group_size={group_size}, bits={bits}, mode={mode}" in repr(s)
        # Trainable as QuantizedLinear: the float bias only.
        assert [k for k, _ in tree_flatten(s.trainable_parameters())] == ["bias"]
        s.unfreeze()
        assert [k for k, _ in tree_flatten(s.trainable_parameters())] == [k for k, _ in tree_flatten(qlin.unfreeze().trainable_parameters())]


def test_quantized_sharded_constructors():
    for cls in (nn.QuantizedAllToShardedLinear, nn.QuantizedShardedToAllLinear):
        layer = cls(256, 32, bias=False)
        assert (layer.group_size, layer.bits, layer.mode) == (64, 4, "affine")
        assert layer.weight.shape == (32, 256 * 4 // 32) and layer.scales.shape == (32, 4) and "bias" not in layer
        layer = cls(64, 16, mode="mxfp8")
        assert (layer.group_size, layer.bits) == (32, 8) and layer.get("biases") is None
        with pytest.raises(TypeError, match="from_quantized_linear: expected an nn.QuantizedLinear"):
            cls.from_quantized_linear(nn.Linear(64, 64))


def test_shard_linear_picks_the_layer_type(rng):
    lin = nn.Linear(64, 32)
    kinds = {
        ("all-to-sharded", False): nn.AllToShardedLinear,
        ("sharded-to-all", False): nn.ShardedToAllLinear,
        ("all-to-sharded", True): nn.QuantizedAllToShardedLinear,
        ("sharded-to-all", True): nn.QuantizedShardedToAllLinear,
    }
    x = mx.array(rng.standard_normal((2, 64)).astype(np.float32))
    for (sharding, quantized), cls in kinds.items():
        source = lin.to_quantized(group_size=32) if quantized else lin
        layer = shard_linear(source, sharding)
        assert type(layer) is cls
        np.testing.assert_allclose(np_(layer(x)), np_(source(x)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="'all-to-sharded' or 'sharded-to-all'"):
        shard_linear(lin, "all-to-all")
    with pytest.raises(TypeError, match="shard_linear: module must be"):
        shard_linear(nn.Embedding(4, 4), "all-to-sharded")
    with pytest.raises(TypeError, match="segments"):
        shard_linear(lin, "all-to-sharded", segments="3")


def test_sharded_mlp_gradients_match_the_unsharded_one(rng):
    mx.random.seed(7)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    sharded = nn.Sequential(shard_linear(model.layers[0], "all-to-sharded"), nn.ReLU(), shard_linear(model.layers[2], "sharded-to-all"))
    x = mx.array(rng.standard_normal((4, 16)).astype(np.float32))
    t = mx.array(rng.standard_normal((4, 16)).astype(np.float32))

    def loss(m):
        return lambda x, t: ((m(x) - t) ** 2).mean()

    l1, g1 = nn.value_and_grad(model, loss(model))(x, t)
    l2, g2 = nn.value_and_grad(sharded, loss(sharded))(x, t)
    np.testing.assert_allclose(l1.item(), l2.item(), rtol=1e-6)
    for (k1, a), (k2, b) in zip(tree_flatten(g1), tree_flatten(g2)):
        assert k1 == k2
        np.testing.assert_allclose(np_(a), np_(b), rtol=1e-5, atol=1e-7)


def test_shard_inplace_and_fully_shard_on_one_process(rng):
    mx.random.seed(5)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    before = {k: np_(v) for k, v in tree_flatten(model.parameters())}
    shard_inplace(model, "all-to-sharded", segments=2)
    shard_inplace(model, lambda path, w: (0, [0.25, 0.5]))
    after = {k: np_(v) for k, v in tree_flatten(model.parameters())}
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)
    assert nn.fully_shard(model) is model
    x = mx.array(rng.standard_normal((3, 8)).astype(np.float32))
    wrapped = nn.FullyShardedModule(model)
    np.testing.assert_allclose(np_(wrapped(x)), np_(model.layers[1](model.layers[0](x))), rtol=1e-6)
    g = nn.value_and_grad(wrapped, lambda x: wrapped(x).sum())(x)[1]
    want = nn.value_and_grad(model, lambda x: model(x).sum())(x)[1]
    for (k1, a), (k2, b) in zip(tree_flatten(g["module"]), tree_flatten(want)):
        assert k1 == k2
        np.testing.assert_allclose(np_(a), np_(b), rtol=1e-6)
    with pytest.raises(ValueError, match="all-to-sharded"):
        shard_inplace(model, "rows")
    with pytest.raises(TypeError, match="shard_inplace: sharding must be"):
        shard_inplace(model, 0)
    with pytest.raises(ValueError, match="the sharding rule must return"):
        shard_inplace(model, lambda path, w: "rows")
    with pytest.raises(TypeError, match="fully_shard: expected an nn.Module"):
        nn.fully_shard([model])


# --- sharded layers on simulated larger groups --------------------------------------------------


def test_sharded_layers_split_the_weight_by_rank(rng):
    n = 4
    lin = nn.Linear(8, 12)
    w, b = np_(lin.weight), np_(lin.bias)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    outputs, partials = [], []
    for r in range(n):
        a = nn.AllToShardedLinear.from_linear(lin, group=simulated(r, n))
        np.testing.assert_array_equal(np_(a.weight), w[3 * r : 3 * r + 3])
        np.testing.assert_array_equal(np_(a.bias), b[3 * r : 3 * r + 3])
        outputs.append(np_(a(mx.array(x))))
        assert "input_dims=8, output_dims=12" in repr(a)

        s = nn.ShardedToAllLinear.from_linear(lin, group=simulated(r, n))
        np.testing.assert_array_equal(np_(s.weight), w[:, 2 * r : 2 * r + 2])
        np.testing.assert_array_equal(np_(s.bias), b)
        y = s(mx.array(x[:, 2 * r : 2 * r + 2]))
        # The partial product goes through all_sum, the bias is added after it.
        [(op, partial)] = s.group._backend.calls
        assert op == "all_sum"
        np.testing.assert_allclose(np_(y), np_(partial) + b, rtol=1e-6)
        partials.append(np_(partial))
    want = x @ w.T + b
    np.testing.assert_allclose(np.concatenate(outputs, axis=-1), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sum(partials) + b, want, rtol=1e-5, atol=1e-6)


def test_all_to_sharded_sums_the_input_gradient_over_the_group(rng):
    group = simulated(1, 2)
    layer = nn.AllToShardedLinear(6, 4, group=group)
    x = mx.array(rng.standard_normal((2, 6)).astype(np.float32))
    assert group._backend.calls == []
    dx = mx.grad(lambda x: layer(x).sum())(x)
    [(op, cotangent)] = group._backend.calls
    assert op == "all_sum" and cotangent.shape == x.shape
    np.testing.assert_allclose(np_(dx), np.ones((2, 2)) @ np_(layer.weight), rtol=1e-6)


def test_segments_slice_each_stacked_matrix(rng):
    n = 2
    lin = nn.Linear(4, 12)  # a fused projection: three 4x4 matrices stacked
    w, b = np_(lin.weight), np_(lin.bias)
    for r in range(n):
        layer = shard_linear(lin, "all-to-sharded", segments=3, group=simulated(r, n))
        rows = np.concatenate([np.arange(4 * k + 2 * r, 4 * k + 2 * r + 2) for k in range(3)])
        np.testing.assert_array_equal(np_(layer.weight), w[rows])
        np.testing.assert_array_equal(np_(layer.bias), b[rows])
        # Split points as fractions or indices give the same slices.
        for segments in ([1 / 3, 2 / 3], [4, 8]):
            other = shard_linear(lin, "all-to-sharded", segments=segments, group=simulated(r, n))
            np.testing.assert_array_equal(np_(other.weight), w[rows])


def test_quantized_sharded_layers_split_the_quantized_weight(rng):
    n = 2
    lin = nn.Linear(128, 32)
    qlin = lin.to_quantized(group_size=32, bits=4)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    want = x @ dequantized(qlin).T + np_(qlin.bias)
    outputs, partials = [], []
    for r in range(n):
        a = nn.QuantizedAllToShardedLinear.from_quantized_linear(qlin, group=simulated(r, n))
        for name in ("weight", "scales", "biases", "bias"):
            np.testing.assert_array_equal(np.array(a[name]), np.array(qlin[name])[16 * r : 16 * r + 16])
        outputs.append(np_(a(mx.array(x))))
        s = nn.QuantizedShardedToAllLinear.from_quantized_linear(qlin, group=simulated(r, n))
        np.testing.assert_array_equal(np.array(s.weight), np.array(qlin.weight)[:, 8 * r : 8 * r + 8])
        np.testing.assert_array_equal(np.array(s.scales), np.array(qlin.scales)[:, 2 * r : 2 * r + 2])
        np.testing.assert_array_equal(np.array(s.bias), np.array(qlin.bias))
        assert "input_dims=128, output_dims=32" in repr(s) and "input_dims=128, output_dims=32" in repr(a)
        y = s(mx.array(x[:, 64 * r : 64 * r + 64]))
        [(op, partial)] = s.group._backend.calls
        partials.append(np_(partial))
        np.testing.assert_allclose(np_(y), partials[-1] + np_(qlin.bias), rtol=1e-6)
    np.testing.assert_allclose(np.concatenate(outputs, axis=-1), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sum(partials) + np_(qlin.bias), want, rtol=1e-4, atol=1e-4)


def test_uneven_splits_are_refused():
    g = simulated(0, 2)
    with pytest.raises(ValueError, match="the output of size 5 cannot be split evenly among 2"):
        nn.AllToShardedLinear(4, 5, group=g)
    with pytest.raises(ValueError, match="the input of size 3 cannot be split evenly among 2"):
        nn.ShardedToAllLinear(3, 4, group=g)
    with pytest.raises(ValueError, match="cannot shard 'weight' of shape \\(4, 6\\) along axis 0"):
        shard_inplace(nn.Linear(6, 4), lambda path, w: (0, 3), group=g)
    with pytest.raises(TypeError, match="group must be"):
        nn.AllToShardedLinear(4, 4, group="world")


def test_shard_inplace_slices_by_the_rule(rng):
    model = nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 6))
    w0, w1, b1 = np_(model.layers[0].weight), np_(model.layers[1].weight), np_(model.layers[1].bias)
    shard_inplace(model, lambda path, w: None if path.endswith("bias") else (0 if path.startswith("layers.0") else -1), group=simulated(1, 2))
    np.testing.assert_array_equal(np_(model.layers[0].weight), w0[2:])
    np.testing.assert_array_equal(np_(model.layers[1].weight), w1[:, 2:])
    np.testing.assert_array_equal(np_(model.layers[1].bias), b1)


# --- gradient helpers ---------------------------------------------------------------------------


def test_average_gradients():
    grads = [mx.ones((10,)) * i for i in range(10)]
    assert nn.average_gradients(grads) is grads
    # On a simulated group of 2 whose all_sum echoes: each array halved, sent in runs.
    for size, calls in ((32 * 1024**2, 1), (4 * 50, 2), (0, 10)):
        g = simulated(0, 2)
        out = nn.average_gradients(grads, group=g, all_reduce_size=size)
        assert len(g._backend.calls) == calls
        for i, a in enumerate(out):
            assert a.shape == (10,)
            np.testing.assert_allclose(np_(a), np.full(10, i / 2))
    mixed = {"a": mx.ones((3,)), "b": mx.ones((2, 2), dtype=mx.float16)}
    g = simulated(0, 2)
    out = nn.average_gradients(mixed, group=g)
    assert len(g._backend.calls) == 2 and out["b"].dtype == mx.float16 and out["b"].shape == (2, 2)
    with pytest.raises(TypeError, match="all_reduce_size"):
        nn.average_gradients(grads, all_reduce_size="big")


def test_clip_grad_norm_sharded():
    grads = {"a": mx.ones((4, 3)) * 3.0, "b": mx.ones((5,)) * 3.0}
    norm = np.sqrt(17) * 3.0
    clipped, got = clip_grad_norm_sharded(grads, max_norm=1e9)
    np.testing.assert_allclose(got.item(), norm, rtol=1e-6)
    np.testing.assert_allclose(np_(clipped["a"]), np.full((4, 3), 3.0), rtol=1e-6)
    clipped, got = clip_grad_norm_sharded(grads, max_norm=1.0, group=dist.init())
    np.testing.assert_allclose(np_(clipped["b"]), np.full(5, 3.0 / (norm + 1e-6)), rtol=1e-5)
    with pytest.raises(TypeError, match="max_norm"):
        clip_grad_norm_sharded(grads, max_norm="1")


class Gatherer:
    """A test backend for rank ``rank`` of ``size`` whose all_gather answers with the rows every
    rank contributes (set in ``rows`` by the test) and whose sum_scatter keeps this rank's row
    (as if the other ranks' gradients were zero)."""

    def __init__(self, rank, size, rows):
        self.rank, self.size, self.rows = rank, size, rows

    def all_gather(self, x, stream):
        assert x.shape == self.rows[self.rank].shape
        return mx.concatenate(self.rows)

    def sum_scatter(self, x, stream):
        return x[self.rank : self.rank + 1]


def test_fully_sharded_module_gathers_the_slices(rng):
    mx.random.seed(11)

    def make():
        return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))

    model = make()
    x = mx.array(rng.standard_normal((3, 4)).astype(np.float32))
    want = np_(model(x))
    want_grads = nn.value_and_grad(model, lambda x: model(x).sum())(x)[1]
    rows, ranks = [], []
    for r in range(2):
        copy = make()
        copy.update(model.parameters())
        ranks.append(nn.fully_shard(copy, group=Group._over(Gatherer(r, 2, rows))))
    assert isinstance(ranks[0], nn.FullyShardedModule) and "num_sharded_params=4" in repr(ranks[0])
    # Each rank keeps its half of every parameter's first axis.
    for r, wrapped in enumerate(ranks):
        for (k, a), (_, whole) in zip(tree_flatten(wrapped.module.parameters()), tree_flatten(model.parameters())):
            half = whole.shape[0] // 2
            np.testing.assert_array_equal(np_(a), np_(whole)[r * half : (r + 1) * half], err_msg=k)
        rows.append(mx.concatenate([a.reshape(1, -1) for _, a in tree_flatten(wrapped.module.parameters())], axis=1))
    for r, wrapped in enumerate(ranks):
        np.testing.assert_allclose(np_(wrapped(x)), want, rtol=1e-6)
        assert wrapped.module.layers[0].weight.shape == (3, 4)  # the slices are back after the call
        grads = nn.value_and_grad(wrapped, lambda x: wrapped(x).sum())(x)[1]["module"]
        # This rank's slice of the gradient, divided by the group's size (the others gave zeros).
        for (k, a), (_, whole) in zip(tree_flatten(grads), tree_flatten(want_grads)):
            half = whole.shape[0] // 2
            np.testing.assert_allclose(np_(a), np_(whole)[r * half : (r + 1) * half] / 2, rtol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="'layers.2.weight' of shape \\(3, 4\\) cannot be split along its first axis among 2"):
        nn.FullyShardedModule(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)), group=simulated(0, 2))


def test_review_cases_segments_rules_dtypes_and_half_gradients():
    # Mixed split indices and fractions are ambiguous; segments beside a rule would be ignored;
    # fully_shard checks compute_dtype even where it has nothing to shard.
    layer = nn.Linear(8, 8)
    with pytest.raises(ValueError, match="mixes"):
        shard_linear(layer, "all-to-sharded", segments=[2, 0.5])
    with pytest.raises(ValueError, match="segments"):
        shard_inplace(layer, lambda path, w: None, segments=2)
    with pytest.raises(TypeError, match="compute_dtype"):
        nn.fully_shard(layer, compute_dtype="float16")
    # A half gradient keeps its dtype through the sharded norm clip.
    grads = {"w": mx.array(np.full((4,), 3.0), dtype=mx.float16)}
    clipped, norm = clip_grad_norm_sharded(grads, 1.0)
    assert clipped["w"].dtype == mx.float16
    np.testing.assert_allclose(float(norm), 6.0, rtol=1e-3)
