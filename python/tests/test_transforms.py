"""Transforms over pytrees, checked against finite differences (float64) and closed forms."""

import numpy as np
import pytest

import kiln.core as mx


def numeric_grad(f, x, eps=1e-6):
    """Central differences of a scalar numpy function at x (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_grad_matches_finite_differences(rng):
    x = rng.uniform(-1, 1, (3, 4))
    w = rng.uniform(-1, 1, (4,))

    def f(a, b):
        return mx.sum(mx.tanh(a @ b) ** 2 + mx.exp(a).mean())

    def f_np(a):
        return np.sum(np.tanh(a @ w) ** 2 + np.exp(a).mean())

    g = mx.grad(f)(mx.array(x, dtype=mx.float64), mx.array(w, dtype=mx.float64))
    np.testing.assert_allclose(np.array(g), numeric_grad(f_np, x), rtol=1e-6, atol=1e-8)


def test_value_and_grad_over_pytrees_and_argnums():
    params = {"w": mx.array([1.0, 2.0]), "b": [mx.array(0.5)]}
    x = mx.array([3.0, -1.0])

    def loss(p, x, scale=1.0):
        return scale * mx.sum(p["w"] * x + p["b"][0]) ** 2, p["w"].sum()

    (value, aux), grads = mx.value_and_grad(loss)(params, x)
    s = 1.0 * 3 + 2.0 * -1 + 2 * 0.5  # the sum inside the square
    assert value.item() == pytest.approx(s**2)
    assert aux.item() == pytest.approx(3.0)
    assert set(grads) == {"w", "b"}
    # As in mlx, a differentiated tree holds arrays only (a float there is a missing mx.array).
    with pytest.raises(ValueError, match="arrays or trees of arrays"):
        mx.value_and_grad(loss)({**params, "name": "linear"}, x)
    np.testing.assert_allclose(np.array(grads["w"]), 2 * s * np.array([3.0, -1.0]))
    assert grads["b"][0].item() == pytest.approx(2 * s * 2)

    gx = mx.grad(lambda p, x: loss(p, x)[0], argnums=1)(params, x)
    np.testing.assert_allclose(np.array(gx), 2 * s * np.array([1.0, 2.0]))
    both = mx.grad(lambda p, x: loss(p, x)[0], argnums=(0, 1))(params, x)
    assert isinstance(both, tuple) and len(both) == 2


def test_argnames_give_keyword_gradients():
    def f(x, *, y):
        return mx.sum(x * y * y)

    x, y = mx.array([1.0, 2.0]), mx.array([3.0, 4.0])
    value, (pos, kw) = mx.value_and_grad(f, argnums=0, argnames="y")(x, y=y)
    assert value.item() == pytest.approx(9 + 32)
    np.testing.assert_allclose(np.array(pos), [9.0, 16.0])
    np.testing.assert_allclose(np.array(kw["y"]), [6.0, 16.0])


def test_grad_errors_are_clear():
    with pytest.raises(ValueError, match="scalar"):
        mx.grad(lambda x: x * 2)(mx.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="argnums"):
        mx.grad(lambda x: x.sum(), argnums=3)(mx.array([1.0]))


def test_exception_in_the_function_reaches_the_caller_unchanged():
    class Boom(Exception):
        pass

    def f(x):
        raise Boom("inside")

    with pytest.raises(Boom, match="inside"):
        mx.grad(f)(mx.array(1.0))


def test_vjp_and_jvp_agree_with_the_jacobian(rng):
    x = rng.standard_normal(3)
    a = mx.array(x, dtype=mx.float64)
    f = lambda v: mx.sin(v) * v  # noqa: E731
    jac = np.diag(np.cos(x) * x + np.sin(x))
    ct = rng.standard_normal(3)
    outs, vjps = mx.vjp(f, [a], [mx.array(ct, dtype=mx.float64)])
    np.testing.assert_allclose(np.array(outs[0]), np.sin(x) * x)
    np.testing.assert_allclose(np.array(vjps[0]), ct @ jac)
    t = rng.standard_normal(3)
    outs, jvps = mx.jvp(f, [a], [mx.array(t, dtype=mx.float64)])
    np.testing.assert_allclose(np.array(jvps[0]), jac @ t)


def test_grad_of_grad():
    d2 = mx.grad(mx.grad(lambda x: mx.sin(x)))
    assert d2(mx.array(0.3)).item() == pytest.approx(-np.sin(0.3), rel=1e-6)


def test_vmap_with_in_axes_and_out_axes(rng):
    xs = rng.standard_normal((5, 3)).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    dot = mx.vmap(lambda x, w: mx.sum(x * w), in_axes=(0, None))
    np.testing.assert_allclose(np.array(dot(mx.array(xs), mx.array(w))), xs @ w, rtol=1e-5)
    cols = mx.vmap(lambda x: x * 2, in_axes=1, out_axes=1)(mx.array(xs))
    np.testing.assert_allclose(np.array(cols), xs * 2)
    tree = mx.vmap(lambda p: {"s": p["a"] + p["b"]}, in_axes=({"a": 0, "b": None},))(
        {"a": mx.array(xs), "b": mx.array(w)}
    )
    np.testing.assert_allclose(np.array(tree["s"]), xs + w, rtol=1e-6)


def test_vmap_of_grad_gives_per_example_gradients(rng):
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    per = mx.vmap(mx.grad(lambda x: mx.sum(x**3)))(mx.array(xs))
    np.testing.assert_allclose(np.array(per), 3 * xs**2, rtol=1e-5)


def test_checkpoint_gives_the_same_gradient(rng):
    x = mx.array(rng.standard_normal(4).astype(np.float32))

    def block(v):
        return mx.tanh(v) * mx.exp(v)

    plain = mx.grad(lambda v: block(v).sum())(x)
    ckpt = mx.grad(lambda v: mx.checkpoint(block)(v).sum())(x)
    np.testing.assert_allclose(np.array(ckpt), np.array(plain), rtol=1e-6)


def test_custom_function_uses_its_vjp():
    @mx.custom_function
    def f(x):
        return mx.exp(x)

    @f.vjp
    def f_vjp(x, cotangent, output):
        # One argument: the rule gets it itself (mlx), not a tuple.
        assert x.shape == (2,)
        return cotangent * 100.0

    x = mx.array([0.0, 1.0])
    np.testing.assert_allclose(np.array(f(x)), np.exp([0.0, 1.0]), rtol=1e-6)
    np.testing.assert_allclose(np.array(mx.grad(lambda v: f(v).sum())(x)), [100.0, 100.0])

    @mx.custom_function
    def g(x, y):
        return x * y

    @g.vjp
    def g_vjp(primals, cotangent, output):
        x, y = primals
        return cotangent * 2.0, cotangent * 3.0

    @g.jvp
    def g_jvp(primals, tangents):
        return tangents[0] * 5.0 + tangents[1]

    gx, gy = mx.grad(lambda a, b: g(a, b).sum(), argnums=(0, 1))(x, x)
    np.testing.assert_allclose(np.array(gx), [2.0, 2.0])
    np.testing.assert_allclose(np.array(gy), [3.0, 3.0])
    _, (t,) = mx.jvp(g, [x, x], [mx.ones(2), mx.ones(2)])
    np.testing.assert_allclose(np.array(t), [6.0, 6.0])


def test_stop_gradient():
    g = mx.grad(lambda x: mx.sum(x * mx.stop_gradient(x)))(mx.array([2.0, 3.0]))
    np.testing.assert_allclose(np.array(g), [2.0, 3.0])


def test_grad_checks_its_arguments_and_result_as_mlx():
    f = lambda x: (x * x).sum()
    with pytest.raises(TypeError, match="argnums"):
        mx.value_and_grad(f, (None, None))
    with pytest.raises(ValueError, match="no argument"):
        mx.value_and_grad(f, ())
    with pytest.raises(ValueError, match="twice"):
        mx.grad(f, argnums=(0, 0))
    with pytest.raises(ValueError, match="negative"):
        mx.grad(f, argnums=-1)
    with pytest.raises(ValueError, match="out of range"):
        mx.grad(f, argnums=2)(mx.array(2.0))
    # The loss must be a 0-d array: a (1, 1) sum is not one.
    with pytest.raises(ValueError, match="scalar"):
        mx.grad(lambda x: mx.sum(x, keepdims=True))(mx.ones((2, 2)))
    # grad takes no auxiliary values; value_and_grad returns them.
    aux = lambda x: ((x * x).sum(), {"n": 3})
    with pytest.raises(ValueError, match="grad: the function must return a scalar array, got a tuple"):
        mx.grad(aux)(mx.ones((2,)))
    (value, extra), g = mx.value_and_grad(aux)(mx.array([1.0, 2.0]))
    assert value.item() == 5.0 and extra == {"n": 3} and g.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="tuple whose first element is a str"):
        mx.value_and_grad(lambda x: ("loss", x))(mx.ones((2,)))


def test_vmap_axes_as_trees_and_one_entry_sequences():
    tree = {"a": mx.array(np.arange(8.0).reshape(2, 4)), "b": (mx.ones((4, 2)), mx.full((4, 2), 2.0))}
    fun = lambda t: (t["a"] + t["b"][0]) * t["b"][1]
    # A dict of axes (not in a list) is the single argument's.
    out = mx.vmap(fun, in_axes={"a": 0, "b": (1, 1)})(tree)
    want = (np.arange(8.0).reshape(2, 4) + 1.0) * 2.0
    np.testing.assert_array_equal(np.array(out), want)
    with pytest.raises(ValueError, match="in_axes"):
        mx.vmap(fun, in_axes={"a": 0, "c": 0})(tree)
    # out_axes=(1,) for one output maps it to axis 1.
    a, b = mx.array(np.arange(6.0).reshape(2, 3)), mx.array(np.ones((2, 2)))
    out = mx.vmap(mx.matmul, in_axes=(1, None), out_axes=(1,))(a, b)
    np.testing.assert_array_equal(np.array(out), np.stack([np.array(a)[:, i] @ np.ones((2, 2)) for i in range(3)], axis=1))


def test_jvp_of_a_comparison_is_zero_in_the_tangents_dtype():
    x = mx.array([1.0, -2.0, 3.0])
    for op in [mx.greater, mx.less, mx.equal, mx.not_equal]:
        (out,), (t,) = mx.jvp(lambda v, op=op: op(v, 0.0), [x], [mx.ones_like(x)])
        assert out.dtype == mx.bool_ and t.dtype == mx.float32
        assert t.tolist() == [0.0, 0.0, 0.0]


def test_grad_puts_tracers_in_the_callers_containers_and_keeps_its_writes():
    # Entries the function leaves alone get their original arrays back; one it overwrites keeps
    # the new value (mlx's rule).
    arrs = [mx.array(1.0), mx.array(2.0), mx.array(3.0)]
    a0, a1, a2 = arrs

    def overwrite_middle(xs):
        xs[1] = xs[0] * xs[2]
        return xs[1] + xs[0]

    g = mx.grad(overwrite_middle)(arrs)
    # d/dx0 (x0*x2 + x0) = x2 + 1, d/dx1 = 0, d/dx2 = x0.
    assert [v.item() for v in g] == [4.0, 0.0, 1.0]
    assert arrs[0] is a0 and arrs[2] is a2 and arrs[1] is not a1
    assert arrs[1].item() == 3.0
    model = {"w": mx.array(2.0), "step": [mx.array(0.0)]}

    def counting_loss(m):
        m["step"][0] = m["step"][0] + 1
        return m["w"] * m["w"]

    g = mx.grad(counting_loss)(model)
    assert g["w"].item() == 4.0 and model["step"][0].item() == 1.0


def test_integer_arguments_have_gradients_in_their_dtype():
    x = mx.array([1, 2, 3])
    g = mx.grad(lambda v: (v * 10 + v * v).sum())(x)
    assert g.dtype == mx.int32 and g.tolist() == [12, 14, 16]
    with pytest.raises(ValueError, match="bool"):
        mx.grad(lambda v: v.astype(mx.float32).sum())(mx.array([True, False]))


def test_vjp_with_respect_to_gather_indices_names_stop_gradient():
    x, idx = mx.array([1.0, 2.0, 3.0]), mx.array([2, 0])
    with pytest.raises(ValueError, match="stop_gradient"):
        mx.vjp(lambda a, i: mx.take(a, i), [x, idx], [mx.ones((2,))])
    with pytest.raises(ValueError, match="stop_gradient"):
        mx.vjp(lambda a, i, u: a.at[i].add(u), [x, idx, mx.ones((2,))], [mx.ones((3,))])
    _, (gx, gi) = mx.vjp(lambda a, i: mx.take(a, mx.stop_gradient(i)), [x, idx], [mx.ones((2,))])
    assert gx.tolist() == [1.0, 0.0, 1.0] and gi.tolist() == [0, 0]


def test_vmap_of_pad_batches_its_constant_values():
    x = mx.arange(8, dtype=mx.float32).reshape(2, 2, 2)
    v = mx.array([3.0, 4.0])
    out = mx.vmap(lambda a, c: mx.pad(a, ((1, 1), (0, 1)), constant_values=c))(x, v)
    want = np.stack([np.pad(np.array(x[i]), ((1, 1), (0, 1)), constant_values=float(v[i].item())) for i in range(2)])
    np.testing.assert_array_equal(np.array(out), want)


def test_a_failed_async_eval_is_reported_by_synchronize():
    a = mx.linalg.inv(mx.array([[1.0, 2.0], [2.0, 4.0]]), stream=mx.cpu)
    mx.async_eval(a)
    with pytest.raises(RuntimeError, match="singular"):
        mx.synchronize(mx.cpu)
    mx.synchronize(mx.cpu)  # reported once
    with pytest.raises(ValueError, match="singular"):
        a.tolist()
