"""Every op against numpy (computed in float64) on random inputs, with mlx's promotion rules."""

import numpy as np
import pytest

import kiln.core as mx

# name -> (numpy function, input low, input high)
UNARY = {
    "abs": (np.abs, -3, 3),
    "negative": (np.negative, -3, 3),
    "sign": (np.sign, -3, 3),
    "exp": (np.exp, -3, 3),
    "expm1": (np.expm1, -3, 3),
    "log": (np.log, 0.1, 5),
    "log1p": (np.log1p, -0.5, 5),
    "log2": (np.log2, 0.1, 5),
    "log10": (np.log10, 0.1, 5),
    "sqrt": (np.sqrt, 0, 5),
    "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 5),
    "square": (np.square, -3, 3),
    "reciprocal": (np.reciprocal, 0.5, 3),
    "sin": (np.sin, -3, 3),
    "cos": (np.cos, -3, 3),
    "tan": (np.tan, -1.2, 1.2),
    "arcsin": (np.arcsin, -0.99, 0.99),
    "arccos": (np.arccos, -0.99, 0.99),
    "arctan": (np.arctan, -3, 3),
    "sinh": (np.sinh, -3, 3),
    "cosh": (np.cosh, -3, 3),
    "tanh": (np.tanh, -3, 3),
    "arcsinh": (np.arcsinh, -3, 3),
    "arccosh": (np.arccosh, 1.01, 5),
    "arctanh": (np.arctanh, -0.99, 0.99),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -5, 5),
    "floor": (np.floor, -3, 3),
    "ceil": (np.ceil, -3, 3),
    "round": (np.round, -3, 3),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(rng, name):
    ref, lo, hi = UNARY[name]
    x = rng.uniform(lo, hi, (7, 5)).astype(np.float32)
    out = getattr(mx, name)(mx.array(x))
    assert out.dtype == mx.float32
    np.testing.assert_allclose(np.array(out), ref(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_erf_and_erfinv_match_float64_references(rng):
    import math

    x = rng.uniform(-3, 3, 200).astype(np.float32)
    expected = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(np.array(mx.erf(mx.array(x))), expected, atol=2e-6)
    y = rng.uniform(-0.95, 0.95, 200).astype(np.float32)
    back = np.array([math.erf(v) for v in np.array(mx.erfinv(mx.array(y))).astype(np.float64)])
    np.testing.assert_allclose(back, y, atol=1e-5)


BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": lambda a, b: np.power(np.abs(a), b),
    "arctan2": np.arctan2,
    "logaddexp": np.logaddexp,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasts_and_matches_numpy(rng, name):
    a = rng.uniform(0.5, 3, (4, 1, 3)).astype(np.float32)
    b = rng.uniform(0.5, 3, (5, 1)).astype(np.float32)
    if name == "power":
        a = np.abs(a)
    out = getattr(mx, name)(mx.array(a), mx.array(b))
    assert out.shape == (4, 5, 3)
    np.testing.assert_allclose(np.array(out), BINARY[name](a.astype(np.float64), b.astype(np.float64)), rtol=3e-6, atol=3e-6)


@pytest.mark.parametrize(
    "name,ref",
    [
        ("equal", np.equal),
        ("not_equal", np.not_equal),
        ("less", np.less),
        ("less_equal", np.less_equal),
        ("greater", np.greater),
        ("greater_equal", np.greater_equal),
    ],
)
def test_comparisons_give_bool(rng, name, ref):
    a = rng.integers(0, 3, (6, 4)).astype(np.int32)
    b = rng.integers(0, 3, (4,)).astype(np.int32)
    out = getattr(mx, name)(mx.array(a), mx.array(b))
    assert out.dtype == mx.bool_
    np.testing.assert_array_equal(np.array(out), ref(a, b))


def test_bitwise_and_logical_ops(rng):
    a = rng.integers(0, 64, 10).astype(np.int32)
    b = rng.integers(0, 64, 10).astype(np.int32)
    ka, kb = mx.array(a), mx.array(b)
    np.testing.assert_array_equal(np.array(ka & kb), a & b)
    np.testing.assert_array_equal(np.array(ka | kb), a | b)
    np.testing.assert_array_equal(np.array(ka ^ kb), a ^ b)
    np.testing.assert_array_equal(np.array(ka << 2), a << 2)
    np.testing.assert_array_equal(np.array(ka >> 1), a >> 1)
    np.testing.assert_array_equal(np.array(~ka), ~a)
    p, q = a > 30, b > 30
    np.testing.assert_array_equal(np.array(mx.logical_and(mx.array(p), mx.array(q))), p & q)
    np.testing.assert_array_equal(np.array(mx.logical_or(mx.array(p), mx.array(q))), p | q)
    np.testing.assert_array_equal(np.array(~mx.array(p)), ~p)
    with pytest.raises(ValueError, match="bitwise_and"):
        mx.array([1.0]) & mx.array([2.0])


def test_operators_with_python_scalars_and_reflection(rng):
    x = rng.uniform(1, 2, (3, 3)).astype(np.float32)
    a = mx.array(x)
    for got, want in [
        (a + 1, x + 1),
        (1 + a, 1 + x),
        (a - 0.5, x - 0.5),
        (2 - a, 2 - x),
        (a * 3, x * 3),
        (3 * a, 3 * x),
        (a / 2, x / 2),
        (2 / a, 2 / x),
        (a // 0.3, x // 0.3),
        (a % 0.3, x % 0.3),
        (a**2, x**2),
        (2**a, 2**x),
        (-a, -x),
        (abs(-a), x),
        (a @ a, x.astype(np.float64) @ x),
    ]:
        assert got.dtype == mx.float32
        np.testing.assert_allclose(np.array(got), want, rtol=2e-6, atol=2e-6)
    b = a + np.ones((3, 3), dtype=np.float32)
    np.testing.assert_allclose(np.array(b), x + 1, rtol=1e-6)


def test_weak_python_scalars_keep_the_array_dtype():
    assert (mx.array([1, 2], dtype=mx.int8) + 1).dtype == mx.int8
    assert (mx.array([1, 2], dtype=mx.int8) * 2.5).dtype == mx.float32
    assert (mx.array([1.0], dtype=mx.float16) * 2.0).dtype == mx.float16
    assert (mx.array([1.0], dtype=mx.bfloat16) + 1).dtype == mx.bfloat16
    assert (mx.array([1], dtype=mx.uint8) + mx.array([1], dtype=mx.int8)).dtype == mx.int16
    assert (mx.array([1.0], dtype=mx.float16) + mx.array([1.0], dtype=mx.float32)).dtype == mx.float32
    assert (mx.array([True]) + 1).dtype == mx.int32


def test_in_place_operators_update_the_array_object():
    a = mx.array([1.0, 2.0])
    alias = a
    a += 1
    a *= 2
    assert alias.tolist() == [4.0, 6.0]


def test_unsupported_operands_raise_as_mlx():
    with pytest.raises(ValueError):
        mx.array([1.0]) + "x"
    with pytest.raises(TypeError):
        mx.array([1.0]) + object()
    with pytest.raises(TypeError):
        mx.add(mx.array([1.0]), object())


def test_broadcast_error_names_op_and_shapes():
    with pytest.raises(ValueError) as e:
        mx.add(mx.zeros((2, 3)), mx.zeros((4,)))
    assert "add" in str(e.value) and "(2, 3)" in str(e.value) and "(4,)" in str(e.value)


REDUCTIONS = {
    "sum": np.sum,
    "prod": np.prod,
    "max": np.max,
    "min": np.min,
    "mean": np.mean,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy(rng, name, axis, keepdims):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    out = getattr(mx, name)(mx.array(x), axis=axis, keepdims=keepdims)
    want = REDUCTIONS[name](x.astype(np.float64), axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(want)
    np.testing.assert_allclose(np.array(out), want, rtol=3e-6)
    method = getattr(mx.array(x), name)(axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(np.array(method), np.array(out))


def test_var_std_logsumexp_softmax(rng):
    x = rng.standard_normal((6, 7)).astype(np.float32)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(np.array(mx.var(mx.array(x), axis=1, ddof=1)), x64.var(axis=1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.array(x).std()), x64.std(), rtol=1e-5)
    lse = np.log(np.exp(x64).sum(axis=-1))
    np.testing.assert_allclose(np.array(mx.logsumexp(mx.array(x), axis=-1)), lse, rtol=1e-6)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(np.array(mx.softmax(mx.array(x), axis=-1)), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_all_any_argmax_argmin(rng):
    x = rng.integers(0, 5, (4, 6)).astype(np.int32)
    a = mx.array(x)
    np.testing.assert_array_equal(np.array(mx.all(a > 0, axis=1)), (x > 0).all(axis=1))
    np.testing.assert_array_equal(np.array(mx.any(a > 3, axis=0)), (x > 3).any(axis=0))
    np.testing.assert_array_equal(np.array(mx.argmax(a, axis=1)), x.argmax(axis=1))
    np.testing.assert_array_equal(np.array(a.argmin(axis=0)), x.argmin(axis=0))
    assert mx.argmax(a).item() == x.argmax()


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
def test_scans_match_numpy(rng, name):
    x = rng.uniform(0.5, 1.5, (3, 5)).astype(np.float32)
    ref = {
        "cumsum": np.cumsum,
        "cumprod": np.cumprod,
        "cummax": np.maximum.accumulate,
        "cummin": np.minimum.accumulate,
        "logcumsumexp": np.logaddexp.accumulate,
    }[name]
    np.testing.assert_allclose(np.array(getattr(mx, name)(mx.array(x), axis=1)), ref(x.astype(np.float64), axis=1), rtol=2e-6)
    rev = getattr(mx.array(x), name)(axis=1, reverse=True)
    np.testing.assert_allclose(np.array(rev), ref(x.astype(np.float64)[:, ::-1], axis=1)[:, ::-1], rtol=2e-6)


def test_logcumsumexp_of_large_values_and_its_gradient_against_numpy(rng):
    x = (rng.standard_normal((4, 6)) * 300).astype(np.float32)
    got = mx.logcumsumexp(mx.array(x), axis=1, reverse=True, inclusive=False)
    want = np.concatenate([np.logaddexp.accumulate(x.astype(np.float64)[:, :0:-1], axis=1)[:, ::-1], np.full((4, 1), -np.inf)], 1)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-6)
    # The gradient of sum(w * logcumsumexp(x)) is sum over later outputs of w_i * softmax weights.
    w = rng.standard_normal((4, 6)).astype(np.float32)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    g = mx.grad(lambda a: (mx.logcumsumexp(a, axis=1) * mx.array(w)).sum())(mx.array(x))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = np.logaddexp.accumulate(x64, axis=1)
    want = np.array([[sum(w64[r, i] * np.exp(x64[r, j] - y[r, i]) for i in range(j, 6)) for j in range(6)] for r in range(4)])
    np.testing.assert_allclose(np.array(g), want, rtol=1e-4, atol=1e-6)


def test_exclusive_cumsum():
    out = mx.cumsum(mx.array([1, 2, 3, 4]), inclusive=False)
    assert out.tolist() == [0, 1, 3, 6]


def test_shape_ops_match_numpy(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = mx.array(x)
    cases = [
        (mx.reshape(a, (4, -1)), x.reshape(4, -1)),
        (a.reshape(6, 4), x.reshape(6, 4)),
        (mx.flatten(a, 1), x.reshape(2, 12)),
        (mx.unflatten(a, 2, (2, 2)), x.reshape(2, 3, 2, 2)),
        (mx.squeeze(mx.expand_dims(a, (0, 2))), x),
        (mx.transpose(a, (2, 0, 1)), x.transpose(2, 0, 1)),
        (a.transpose(1, 2, 0), x.transpose(1, 2, 0)),
        (mx.swapaxes(a, 0, 2), x.swapaxes(0, 2)),
        (mx.moveaxis(a, 0, -1), np.moveaxis(x, 0, -1)),
        (mx.broadcast_to(mx.array(x[:1]), (5, 3, 4)), np.broadcast_to(x[:1], (5, 3, 4))),
        (mx.concatenate([a, a], axis=1), np.concatenate([x, x], axis=1)),
        (mx.concatenate([a, a], axis=None), np.concatenate([x.ravel(), x.ravel()])),
        (mx.stack([a, a], axis=-1), np.stack([x, x], axis=-1)),
        (mx.pad(a, ((0, 0), (1, 2), (0, 1))), np.pad(x, ((0, 0), (1, 2), (0, 1)))),
        (mx.pad(a, 1, mode="edge"), np.pad(x, 1, mode="edge")),
        (mx.tile(a, (1, 2, 1)), np.tile(x, (1, 2, 1))),
        (mx.repeat(a, 2, axis=1), np.repeat(x, 2, axis=1)),
        (mx.tril(a), np.tril(x)),
        (mx.triu(a, 1), np.triu(x, 1)),
        (mx.roll(a, 2, axis=2), np.roll(x, 2, axis=2)),
        (mx.roll(a, 3), np.roll(x, 3)),
        (mx.diagonal(a, 0, 1, 2), np.diagonal(x, 0, 1, 2)),
        (mx.diag(mx.array(x[0])), np.diag(x[0])),
        (mx.take(a, mx.array([2, 0]), axis=1), np.take(x, [2, 0], axis=1)),
        (mx.sort(a, axis=-1), np.sort(x, axis=-1)),
        (mx.argsort(a, axis=1), np.argsort(x, axis=1)),
    ]
    for got, want in cases:
        assert got.shape == want.shape
        np.testing.assert_allclose(np.array(got), want, rtol=1e-6)
    parts = mx.split(a, [1, 3], axis=2)
    for got, want in zip(parts, np.split(x, [1, 3], axis=2)):
        np.testing.assert_array_equal(np.array(got), want)
    assert len(a.split(2, axis=2)) == 2


def test_take_along_axis_and_put_along_axis(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.argsort(x, axis=1)
    np.testing.assert_array_equal(np.array(mx.take_along_axis(mx.array(x), mx.array(idx), axis=1)), np.take_along_axis(x, idx, axis=1))
    y = x.copy()
    np.put_along_axis(y, idx[:, :1], 9.0, axis=1)
    got = mx.put_along_axis(mx.array(x), mx.array(idx[:, :1]), mx.array(9.0), axis=1)
    np.testing.assert_array_equal(np.array(got), y)


def test_creation_ops():
    np.testing.assert_array_equal(np.array(mx.zeros((2, 3))), np.zeros((2, 3)))
    assert mx.zeros(3).dtype == mx.float32
    np.testing.assert_array_equal(np.array(mx.ones((2,), dtype=mx.int32)), [1, 1])
    np.testing.assert_array_equal(np.array(mx.full((2, 2), 7)), np.full((2, 2), 7))
    assert mx.full((2,), 7).dtype == mx.int32
    assert mx.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert mx.arange(5).dtype == mx.int32
    assert mx.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert mx.arange(0.0, 3).dtype == mx.float32
    np.testing.assert_allclose(np.array(mx.linspace(0, 1, 5)), np.linspace(0, 1, 5))
    np.testing.assert_allclose(np.array(mx.linspace(0, 1, 5, endpoint=False)), np.linspace(0, 1, 5, endpoint=False), rtol=1e-6)
    assert mx.topk(mx.array([3.0, 1.0, 2.0]), 0).shape == (0,)
    np.testing.assert_array_equal(np.array(mx.eye(3, 4, k=1)), np.eye(3, 4, k=1))
    np.testing.assert_array_equal(np.array(mx.identity(2)), np.identity(2))
    a = mx.array([[1, 2]], dtype=mx.int8)
    assert mx.zeros_like(a).dtype == mx.int8 and mx.ones_like(a).tolist() == [[1, 1]]
    with pytest.raises(ValueError, match="negative"):
        mx.zeros((-1, 2))


def test_where_clip_and_closeness(rng):
    x = rng.standard_normal(10).astype(np.float32)
    a = mx.array(x)
    np.testing.assert_array_equal(np.array(mx.where(a > 0, a, 0.0)), np.where(x > 0, x, 0))
    np.testing.assert_array_equal(np.array(mx.clip(a, -0.5, 0.5)), np.clip(x, -0.5, 0.5))
    np.testing.assert_array_equal(np.array(mx.clip(a, None, 0.5)), np.minimum(x, 0.5))
    assert mx.allclose(a, a + 1e-7).item()
    assert not mx.allclose(a, a + 1).item()
    assert mx.array_equal(a, mx.array(x)).item()
    assert not mx.array_equal(a, a[:3]).item()
    nan = mx.array([np.nan, 1.0])
    assert not mx.array_equal(nan, nan).item()
    assert mx.array_equal(nan, nan, equal_nan=True).item()
    np.testing.assert_array_equal(np.array(mx.isclose(nan, nan, equal_nan=True)), [True, True])


def test_gather_mm_matches_numpy_indexing_then_matmul(rng):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)  # 6 matrices of (4, 5)
    b = rng.standard_normal((3, 5, 2)).astype(np.float32)  # 3 matrices of (5, 2)
    lhs, rhs = np.array([[5], [0], [2]]), np.array([2, 1])
    got = mx.gather_mm(mx.array(a), mx.array(b), mx.array(lhs), mx.array(rhs))
    want = a.reshape(6, 4, 5)[lhs].astype(np.float64) @ b[rhs].astype(np.float64)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)
    got = mx.gather_mm(mx.array(a[0, 0]), mx.array(b), rhs_indices=mx.array(rhs), sorted_indices=True)
    np.testing.assert_allclose(np.array(got), a[0, 0].astype(np.float64) @ b[rhs], rtol=1e-5, atol=1e-5)
    # Compiled shapeless, the picked matrices follow a new number of rows (mlx's MoE case).
    c = mx.compile(lambda x: mx.gather_mm(x, mx.array(b), mx.array([0, 1, 2]), mx.array([2, 1, 0])), shapeless=True)
    for rows in (4, 7):
        x = rng.standard_normal((3, rows, 5)).astype(np.float32)
        np.testing.assert_allclose(np.array(c(mx.array(x))), x @ b[[2, 1, 0]], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="gather_mm"):
        mx.gather_mm(mx.array(a), mx.array(a), mx.array(lhs))
    with pytest.raises(ValueError, match="integers"):
        mx.gather_mm(mx.array(a), mx.array(b), mx.array([0.5]))


def _block_mask(mask, rows, cols, bs):
    return np.kron(mask, np.ones((bs, bs)))[..., :rows, :cols]


def test_block_masked_mm_and_segmented_mm_match_numpy(rng):
    m, k, n, bs = 70, 40, 33, 32
    a = rng.standard_normal((2, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    tiles = lambda r, c: (-(-r // bs), -(-c // bs))
    lhs = rng.uniform(0, 2, (2,) + tiles(m, k)).astype(np.float32)
    rhs = rng.standard_normal(tiles(k, n)) > 0
    out = rng.standard_normal(tiles(m, n)) > 0
    got = mx.block_masked_mm(mx.array(a), mx.array(b), bs, mx.array(out), mx.array(lhs), mx.array(rhs))
    want = ((a * _block_mask(lhs, m, k, bs)) @ (b * _block_mask(rhs, k, n, bs))) * _block_mask(out, m, n, bs)
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)
    # Gradients reach the operands and the float mask (summed over each block).
    f = lambda x, w: mx.block_masked_mm(x, mx.array(b), bs, None, w, None).sum()
    gx, gw = mx.grad(f, argnums=(0, 1))(mx.array(a), mx.array(lhs))
    ones = np.ones((2, m, n), np.float32)
    np.testing.assert_allclose(np.array(gx), (ones @ b.T) * _block_mask(lhs, m, k, bs), rtol=1e-4, atol=1e-4)
    per_element = a * (ones @ b.T)
    padded = np.zeros((2, 3 * bs, 2 * bs), np.float32)
    padded[:, :m, :k] = per_element
    np.testing.assert_allclose(np.array(gw), padded.reshape(2, 3, bs, 2, bs).sum(axis=(2, 4)), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="mask_out"):
        mx.block_masked_mm(mx.array(a), mx.array(b), bs, mx.ones((5, 5)))

    segments = np.array([[0, 10], [10, 10], [5, 40]])
    got = mx.segmented_mm(mx.array(a[0]), mx.array(b), mx.array(segments))
    want = np.stack([a[0][:, s:e] @ b[s:e] for s, e in segments])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="segmented_mm"):
        mx.segmented_mm(mx.array(a), mx.array(b), mx.array(segments))


def test_hadamard_transform_matches_the_sylvester_matrix(rng):
    def sylvester(n):
        h = np.ones((1, 1))
        while h.shape[0] < n:
            h = np.block([[h, h], [h, -h]])
        return h

    for n in (1, 4, 256):
        x = rng.standard_normal((3, n)).astype(np.float32)
        got = mx.hadamard_transform(mx.array(x), scale=0.34)
        np.testing.assert_allclose(np.array(got), 0.34 * x @ sylvester(n).T, rtol=1e-5, atol=2e-4)
    x = rng.standard_normal((2, 5, 64)).astype(np.float32)
    np.testing.assert_allclose(np.array(mx.hadamard_transform(mx.array(x))), x @ sylvester(64).T / 8, rtol=1e-5, atol=1e-5)
    # Orders 12, 20, 28 times powers of two: orthogonal at the default scale, so applying the
    # transform's transpose (its vjp) undoes it.
    for n in (12, 40, 112):
        x = mx.array(rng.standard_normal((2, n)).astype(np.float32))
        _, (back,) = mx.vjp(lambda v: mx.hadamard_transform(v), [x], [mx.hadamard_transform(x)])
        np.testing.assert_allclose(np.array(back), np.array(x), rtol=1e-4, atol=1e-4)
    assert mx.hadamard_transform(mx.array([[1, 2, 3, 4]])).dtype == mx.float32
    with pytest.raises(ValueError, match="m·2\\^k"):
        mx.hadamard_transform(mx.zeros((36,)))


def test_view_matches_numpy_for_every_item_size(rng):
    a = rng.integers(-100, 100, (4, 2, 4)).astype(np.int32)
    for t in (np.int8, np.uint16, np.float32, np.int64, np.float64):
        got = mx.array(a).view(getattr(mx, np.dtype(t).name))
        np.testing.assert_array_equal(np.array(got), a.view(t))
    # As bool, a byte is true when it is not zero (kiln's bools hold 0 or 1).
    np.testing.assert_array_equal(np.array(mx.array(a).view(mx.bool_)), a.view(np.uint8) != 0)
    strided = np.ascontiguousarray(a.transpose(2, 0, 1))
    np.testing.assert_array_equal(np.array(mx.view(mx.array(a).transpose(2, 0, 1), mx.uint8)), strided.view(np.uint8))
    assert mx.array(1, mx.int8).view(mx.uint8).item() == 1
    assert np.array(mx.array(np.uint32(1)).view(mx.float32)).item() == np.float32(1.4e-45)
    with pytest.raises(ValueError, match="0-d"):
        mx.array(1, mx.int32).view(mx.int8)
    with pytest.raises(ValueError, match="bytes"):
        mx.zeros((3,), mx.uint8).view(mx.float32)


def test_linalg_matches_numpy(rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    c = rng.standard_normal((3, 5)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(np.array(mx.matmul(mx.array(a), mx.array(b))), a64 @ b64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.array(mx.addmm(mx.array(c), mx.array(a[0]), mx.array(b), alpha=2.0, beta=0.5)),
        2 * (a64[0] @ b64) + 0.5 * c,
        rtol=1e-5,
        atol=1e-5,
    )
    v, w = rng.standard_normal(3).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(np.array(mx.outer(mx.array(v), mx.array(w))), np.outer(v, w), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.inner(mx.array(a), mx.array(w))), np.inner(a64, w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        np.array(mx.tensordot(mx.array(a), mx.array(b), axes=1)), np.tensordot(a64, b64, axes=1), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        np.array(mx.einsum("bij,jk->bik", mx.array(a), mx.array(b))), np.einsum("bij,jk->bik", a64, b64), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="matmul"):
        mx.matmul(mx.array(a), mx.array(c))


@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("ii->i", [(4, 4)]),
        ("ijij->j", [(2, 3, 2, 3)]),
        ("ab,bc->c", [(5, 1), (8, 2)]),
        ("...ij,...jk->...ik", [(5, 1, 3, 4), (1, 2, 4, 5)]),
        ("...cd,c...->d...", [(2, 3, 4, 5), (4,)]),
        ("ab...,...bc->a...c", [(2, 3), (3, 4)]),
        ("bca,cdb,dbf,afc->", [(3, 4, 2), (4, 5, 3), (5, 3, 6), (2, 6, 4)]),
    ],
)
def test_einsum_and_its_path_match_numpy(rng, subscripts, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = mx.einsum(subscripts, *[mx.array(x) for x in xs])
    want = np.einsum(subscripts, *[x.astype(np.float64) for x in xs])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)
    path, report = mx.einsum_path(subscripts, *[mx.array(x) for x in xs])
    assert path == np.einsum_path(subscripts, *xs)[0][1:]
    assert "Optimized FLOP count" in report


def test_einsum_errors_are_value_errors():
    with pytest.raises(ValueError, match="einsum"):
        mx.einsum("ij,jk", mx.zeros((2, 3)), mx.zeros((2, 4)))
    with pytest.raises(ValueError, match="ellipsis"):
        mx.einsum("a...b...->ab", mx.zeros((2, 3, 4)))


def test_topk_and_partition(rng):
    x = rng.permutation(20).astype(np.float32)
    top = np.sort(np.array(mx.topk(mx.array(x), 5)))
    np.testing.assert_array_equal(top, np.sort(x)[-5:])
    p = np.array(mx.partition(mx.array(x), 7))
    assert p[7] == np.sort(x)[7] and (p[:7] <= p[7]).all() and (p[8:] >= p[7]).all()


def test_composite_ops_match_numpy(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    a = mx.array(x)
    np.testing.assert_allclose(np.array(mx.degrees(a)), np.degrees(x), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.radians(a)), np.radians(x), rtol=1e-6)
    np.testing.assert_allclose(mx.trace(a).item(), np.trace(x), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.trace(mx.array(x), offset=1)), np.trace(x, offset=1), rtol=1e-6)
    np.testing.assert_array_equal(np.array(mx.tri(3, 4, k=1)), np.tri(3, 4, k=1))
    b = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(np.array(mx.kron(a, mx.array(b))), np.kron(x, b), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.kron(mx.array([1.0, 2.0]), mx.array(b))), np.kron([1.0, 2.0], b), rtol=1e-6)
    q, r = mx.divmod(mx.array([7, -7]), 3)
    assert q.tolist() == [2, -3] and r.tolist() == [1, 2]
    y = mx.array([np.nan, np.inf, -np.inf, 1.0])
    np.testing.assert_array_equal(np.array(mx.nan_to_num(y)), np.nan_to_num(np.array([np.nan, np.inf, -np.inf, 1.0], dtype=np.float32)))
    assert mx.atleast_1d(mx.array(1.0)).shape == (1,)
    assert mx.atleast_2d(mx.array([1, 2])).shape == (1, 2)
    assert mx.atleast_3d(mx.array([1, 2])).shape == (1, 2, 1)
    assert mx.atleast_3d(mx.ones((2, 3))).shape == (2, 3, 1)
    assert mx.pi == np.pi and mx.inf == np.inf and mx.newaxis is None


DTYPES = ["bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def expected_promotion(a: str, b: str) -> str:
    """mlx's documented promotion lattice (after JAX), written out independently of kiln."""
    if a == b:
        return a
    if a == "bool_":
        return b
    if b == "bool_":
        return a
    kind = lambda t: "f" if t.startswith(("float", "bfloat")) else ("u" if t.startswith("uint") else "i")  # noqa: E731
    bits = lambda t: int("".join(c for c in t if c.isdigit()))  # noqa: E731
    ka, kb = kind(a), kind(b)
    if ka == "f" or kb == "f":
        if ka != "f":
            return b
        if kb != "f":
            return a
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return a if bits(a) > bits(b) else b
    if ka == kb:
        return a if bits(a) > bits(b) else b
    u, s = (a, b) if ka == "u" else (b, a)
    if bits(u) == 64:
        return "float32"
    if bits(s) > bits(u):
        return s
    return f"int{2 * bits(u)}"


@pytest.mark.parametrize("a", DTYPES)
def test_binary_promotion_follows_the_mlx_table(a):
    for b in DTYPES:
        x = mx.ones((2,), dtype=getattr(mx, a))
        y = mx.ones((2,), dtype=getattr(mx, b))
        assert (x + y).dtype == getattr(mx, expected_promotion(a, b)), (a, b)
        assert mx.maximum(x, y).dtype == getattr(mx, expected_promotion(a, b)), (a, b)


def test_ordering_counting_and_window_ops_match_numpy(rng):
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    x[0, 1, 2] = 0.0
    a = mx.array(x)
    np.testing.assert_array_equal(np.array(mx.flip(a)), np.flip(x))
    np.testing.assert_array_equal(np.array(mx.flip(a, axis=(0, 2))), np.flip(x, axis=(0, 2)))
    for n, axis in ((1, -1), (2, 0), (3, 1), (0, 2)):
        np.testing.assert_allclose(np.array(mx.diff(a, n, axis)), np.diff(x, n, axis), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.array(mx.trunc(a * 3)), np.trunc(x * 3))
    for got, want in zip(mx.unstack(a, axis=1), [x[:, i] for i in range(4)]):
        np.testing.assert_array_equal(np.array(got), want)
    np.testing.assert_allclose(np.array(mx.vecdot(a, a[0], axis=-1)), np.sum(x * x[0], axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(np.array(mx.count_nonzero(a > 0.5, axis=(0, 2))), np.count_nonzero(x > 0.5, axis=(0, 2)))
    np.testing.assert_array_equal(np.array(mx.logical_xor(a > 0, a < 1)), np.logical_xor(x > 0, x < 1))
    for axis in (None, 0, (1, 2), -1):
        np.testing.assert_allclose(np.array(mx.median(a, axis=axis)), np.median(x, axis=axis), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.median(a, axis=1, keepdims=True)), np.median(x, axis=1, keepdims=True), rtol=1e-6)
    with_nan = x.copy()
    with_nan[1, 2, 3] = np.nan
    assert np.isnan(np.array(mx.median(mx.array(with_nan), axis=-1))[1, 2])
    seq = np.sort(rng.integers(0, 10, 12)).astype(np.int32)
    values = rng.integers(-2, 12, (3, 4)).astype(np.int32)
    for side in ("left", "right"):
        got = mx.searchsorted(mx.array(seq), mx.array(values), side=side)
        assert got.dtype == mx.uint32
        np.testing.assert_array_equal(np.array(got), np.searchsorted(seq, values, side=side))
    for m in (0, 1, 2, 7, 16):
        for ours, theirs in ((mx.hanning, np.hanning), (mx.hamming, np.hamming), (mx.bartlett, np.bartlett), (mx.blackman, np.blackman)):
            np.testing.assert_allclose(np.array(ours(m)), theirs(m), atol=1e-6)
    assert mx.isdtype(mx.uint8, ("signed integer", "unsigned integer")) and not mx.isdtype(mx.float16, "integral")
    assert mx.empty_like(a).shape == a.shape and mx.empty_like(a).dtype == a.dtype


def test_composite_ops_reject_bad_arguments():
    a = mx.zeros((2, 3))
    with pytest.raises(ValueError, match=r"flip: axis 2 is out of bounds"):
        mx.flip(a, 2)
    with pytest.raises(ValueError, match=r"diff: the order"):
        mx.diff(a, -1)
    with pytest.raises(ValueError, match=r"median: repeated axis"):
        mx.median(a, axis=(0, -2))
    with pytest.raises(ValueError, match=r"searchsorted: side"):
        mx.searchsorted(mx.array([1, 2]), mx.array([1]), side="middle")
    with pytest.raises(ValueError, match=r"searchsorted: the sorted sequence must be 1-d"):
        mx.searchsorted(a, mx.array([1]))
    with pytest.raises(ValueError, match=r"vecdot: a and b differ"):
        mx.vecdot(a, mx.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\[isdtype\] unknown kind"):
        mx.isdtype(mx.int8, "whole")


def test_composite_ops_run_on_the_stream_they_are_given(rng):
    # On a machine without a GPU, stream=gpu must fail rather than quietly compute on the CPU;
    # with a GPU, the result must equal the CPU's.
    x = mx.array(rng.normal(size=(3, 4)).astype(np.float32))
    seq = mx.array([0.0, 1.0, 2.0])
    calls = {
        "flip": lambda s: mx.flip(x, 1, stream=s),
        "diff": lambda s: mx.diff(x, stream=s),
        "trunc": lambda s: mx.trunc(x * 3, stream=s),
        "unstack": lambda s: mx.unstack(x, stream=s)[1],
        "vecdot": lambda s: mx.vecdot(x, x, stream=s),
        "logical_xor": lambda s: mx.logical_xor(x > 0, x < 1, stream=s),
        "count_nonzero": lambda s: mx.count_nonzero(x > 0, axis=0, stream=s),
        "median": lambda s: mx.median(x, axis=1, stream=s),
        "searchsorted": lambda s: mx.searchsorted(seq, x, stream=s),
        "hanning": lambda s: mx.hanning(5, stream=s),
        "rms_norm": lambda s: mx.fast.rms_norm(x, None, 1e-5, stream=s),
    }
    for name, call in calls.items():
        if mx.is_available(mx.gpu):
            np.testing.assert_allclose(np.array(call(mx.gpu)), np.array(call(mx.cpu)), rtol=1e-5, err_msg=name)
        else:
            with pytest.raises(ValueError, match="GPU"):
                mx.eval(call(mx.gpu))


def test_broadcast_shapes_refuses_what_is_not_a_shape():
    # Found by the bad-input fuzzer: a dict leaked a KeyError.
    assert mx.broadcast_shapes((2, 1), (3,)) == (2, 3)
    with pytest.raises(TypeError, match="broadcast_shapes"):
        mx.broadcast_shapes({"a": 1})
    with pytest.raises(TypeError, match="broadcast_shapes"):
        mx.broadcast_shapes((2,), [1.5])
    with pytest.raises(ValueError, match="negative"):
        mx.broadcast_shapes((2, -1))


def test_diff_of_order_past_the_axis_length_is_empty_like_numpy():
    # Found by the bad-input fuzzer: n = 2**31 looped two billion times, growing memory.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for n in (3, 4, 2**31):
        got = mx.diff(mx.array(x), n=n)
        assert got.shape == np.diff(x, n=min(n, 10)).shape


def test_round_of_integers_keeps_the_dtype_and_rounds_to_tens_like_numpy():
    x = np.array([15, 122, -25, 7], dtype=np.int32)
    for decimals in (0, 2, -1, -2):
        got = mx.round(mx.array(x), decimals=decimals)
        assert got.dtype == mx.int32
        np.testing.assert_array_equal(np.array(got), np.round(x, decimals))


def test_split_refuses_non_positive_section_counts():
    a = mx.arange(6)
    for n in (0, -1):
        with pytest.raises(ValueError, match="split"):
            mx.split(a, n)


def test_fp8_codes_decode_by_definition_and_round_trip():
    # Decoding by the e4m3 definition, in float64: every code but the NaNs round-trips.
    codes = np.arange(256, dtype=np.uint8)
    e, m, s = (codes >> 3) & 15, codes & 7, np.where(codes & 0x80, -1.0, 1.0)
    want = s * np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
    want[(codes & 0x7F) == 0x7F] = np.nan
    got = np.array(mx.from_fp8(mx.array(codes), dtype=mx.float32))
    np.testing.assert_array_equal(got, want.astype(np.float32))
    finite = ~np.isnan(want)
    back = np.array(mx.to_fp8(mx.array(want[finite].astype(np.float32))))
    np.testing.assert_array_equal(np.array(mx.from_fp8(mx.array(back), dtype=mx.float32)), want[finite].astype(np.float32))
    assert mx.from_fp8(mx.to_fp8(mx.array([1000.0]))).item() == 448.0  # saturates
    assert mx.from_fp8(mx.array([0x38], mx.uint8)).dtype == mx.bfloat16


def test_depends_returns_inputs_and_evaluates_dependencies():
    a = mx.array([1.0, 2.0, 3.0])
    b, c = mx.exp(a), mx.log(a)
    out = mx.depends([b], [c])[0]
    np.testing.assert_allclose(np.array(out), np.exp([1.0, 2.0, 3.0]), rtol=1e-6)
    assert isinstance(mx.depends(b, c), mx.array)
    g = mx.grad(lambda x: mx.depends(mx.exp(x), mx.square(x)).sum())(a)
    np.testing.assert_allclose(np.array(g), np.exp([1.0, 2.0, 3.0]), rtol=1e-6)


# e2m1's magnitudes by code, and e4m3's finite non-negative ones (codes 0 to 0x7E).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E4M3 = np.array([(c & 7) / 8 * 2.0**-6 if c < 8 else (1 + (c & 7) / 8) * 2.0 ** ((c >> 3) - 7) for c in range(0x7F)])


def nearest_even(table, magnitudes):
    """The value of ``table`` nearest each magnitude, a tie going to the even code."""
    d = np.abs(magnitudes[..., None] - table)
    tied = d == d.min(-1, keepdims=True)
    even = tied & (np.arange(len(table)) % 2 == 0)
    return table[np.where(even.any(-1), even.argmax(-1), tied.argmax(-1))]


def float_format_round_trip(w, mode, global_scale=None):
    """``w`` quantized in an mlx float format and read back, in float64, from the formats'
    definitions: mx scales are 2^ceil(log2(amax / largest)), nvfp4 scales the nearest e4m3
    value to amax / 6 (times 448·6 / global_scale)."""
    group, table = (16 if mode == "nvfp4" else 32), (E4M3 if mode == "mxfp8" else E2M1)
    groups = w.reshape(-1, group).astype(np.float64)
    ideal = np.abs(groups).max(-1, keepdims=True) / table[-1]
    if mode == "nvfp4":
        encoding = 1.0 if global_scale is None else 448.0 * 6.0 / global_scale
        scale = nearest_even(E4M3, ideal * encoding) / encoding
    else:
        scale = np.where(ideal == 0, 1.0, 2.0 ** np.ceil(np.log2(np.where(ideal == 0, 1.0, ideal))))
    scaled = np.where(scale == 0, 0.0, groups / np.where(scale == 0, 1.0, scale))
    return (np.sign(scaled) * nearest_even(table, np.abs(scaled)) * scale).reshape(w.shape)


def test_float_quantization_formats_match_their_definitions(rng):
    w = (rng.normal(size=(8, 128)) * np.repeat(10.0 ** rng.integers(-3, 3, size=(8, 8)), 16, axis=1)).astype(np.float32)
    x = rng.normal(size=(3, 128)).astype(np.float32)
    for mode, (group, bits) in {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}.items():
        q, s = mx.quantize(mx.array(w), mode=mode)
        assert (q.dtype, q.shape, s.dtype, s.shape) == (mx.uint32, (8, 128 * bits // 32), mx.uint8, (8, 128 // group)), mode
        want = float_format_round_trip(w, mode)
        back = mx.dequantize(q, s, mode=mode)
        assert back.dtype == mx.bfloat16, "mlx's default for the float formats"
        np.testing.assert_array_equal(np.array(mx.dequantize(q, s, mode=mode, dtype=mx.float32)), want, err_msg=mode)
        got = mx.quantized_matmul(mx.array(x), q, s, transpose=True, mode=mode)
        np.testing.assert_allclose(np.array(got), x.astype(np.float64) @ want.T, rtol=1e-4, atol=1e-4, err_msg=mode)
        # Bad settings for the mode are errors naming it.
        with pytest.raises(ValueError, match=mode):
            mx.quantize(mx.array(w), group_size=64, mode=mode)
        with pytest.raises(ValueError, match="no biases"):
            mx.dequantize(q, s, s, mode=mode)
        with pytest.raises(ValueError, match="uint8"):
            mx.dequantize(q, s.astype(mx.float32), mode=mode)
    # nvfp4 with a global scale, and qqmm (both operands rounded) against the reference.
    g = float(np.abs(w).max())
    q, s = mx.quantize(mx.array(w), mode="nvfp4", global_scale=mx.array(g, dtype=mx.float32))
    back = mx.dequantize(q, s, mode="nvfp4", global_scale=mx.array(g, dtype=mx.float32), dtype=mx.float32)
    np.testing.assert_allclose(np.array(back), float_format_round_trip(w, "nvfp4", np.float32(g)), rtol=1e-6, atol=1e-30)
    with pytest.raises(ValueError, match="only used by nvfp4"):
        mx.quantize(mx.array(w), mode="mxfp8", global_scale=mx.array(g, dtype=mx.float32))
    q, s, b = mx.quantize(mx.array(w))
    with pytest.raises(ValueError, match="not affine"):
        mx.quantize(mx.array(w), global_scale=mx.array(g, dtype=mx.float32))
    with pytest.raises(ValueError, match="not affine"):
        mx.dequantize(q, s, b, global_scale=mx.array(g, dtype=mx.float32))
    for mode in ("nvfp4", "mxfp8"):
        got = mx.qqmm(mx.array(x), mx.array(w), mode=mode)
        want = float_format_round_trip(x, mode) @ float_format_round_trip(w, mode).T
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-4, err_msg=mode)
    with pytest.raises(ValueError, match="float format"):
        mx.qqmm(mx.array(x), mx.array(w), mode="affine")


def test_arange_wraps_past_int32_and_diag_of_empty_vectors():
    n = 2**31 - 1
    assert mx.arange(n - 1, n + 3, dtype=mx.int32).tolist() == [n - 1, n, -(2**31), -(2**31) + 1]
    for k in (-2, 0, 1):
        assert mx.diag(mx.zeros((0,)), k=k).shape == np.diag(np.zeros((0,)), k=k).shape


def test_affine_quantization_matches_numpy_products(rng):
    w = rng.normal(size=(6, 128)).astype(np.float32)
    x = rng.normal(size=(3, 128)).astype(np.float32)
    for bits in (2, 3, 4, 6, 8):
        q, s, b = mx.quantize(mx.array(w), group_size=64, bits=bits)
        assert q.dtype == mx.uint32 and q.shape == (6, 128 * bits // 32) and s.shape == b.shape == (6, 2)
        wd = np.array(mx.dequantize(q, s, b, group_size=64, bits=bits))
        # Every value within one level of its group's grid of the original.
        step = np.repeat(np.abs(np.array(s)), 64, axis=1)
        assert np.all(np.abs(wd - w) <= step * 1.5 + 1e-6), bits
        got = mx.quantized_matmul(mx.array(x), q, s, b, transpose=True, group_size=64, bits=bits)
        np.testing.assert_allclose(np.array(got), x.astype(np.float64) @ wd.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="unknown quantization mode 'int4'"):
        mx.quantize(mx.array(w), mode="int4")
    with pytest.raises(ValueError, match="needs biases"):
        mx.dequantize(q, s, None, group_size=64, bits=8)
