"""compile from Python: every example of seeds 003 and 004 that needs only kiln.core, run as
written with the import changed, plus caching, constants, pytrees, state capture and errors."""

import gc
import math
import os
import subprocess
import sys
from functools import partial

import numpy as np
import pytest

import kiln.core as mx


def test_basics_match_the_eager_function():
    def fun(x, y):
        return mx.exp(-x) + y

    x, y = mx.array(1.0), mx.array(2.0)
    compiled_fun = mx.compile(fun)
    assert compiled_fun(x, y).item() == pytest.approx(fun(x, y).item())
    assert compiled_fun(x, y).item() == pytest.approx(math.exp(-1) + 2, rel=1e-6)


def test_recompiles_exactly_on_shape_dtype_rank_and_argument_count():
    def fun(*args):
        return sum(mx.abs(a) for a in args)

    c = mx.compile(fun)
    c(mx.array([1.0, 2.0]))
    c(mx.array([3.0, 4.0]))
    assert c.trace_count == 1
    c(mx.array([1.0, 2.0, 3.0]))  # shape
    assert c.trace_count == 2
    c(mx.array([1, 2]))  # dtype
    assert c.trace_count == 3
    c(mx.array([[1.0, 2.0]]))  # rank
    assert c.trace_count == 4
    c(mx.array([1.0, 2.0]), mx.array([1.0, 2.0]))  # argument count
    assert c.trace_count == 5
    c(mx.array([5.0, 6.0]))
    assert c.trace_count == 5


def test_array_only_calls_and_calls_with_constants_or_keywords_keep_their_own_traces():
    # Calls with arrays only take a shorter path to their cache key; mixing them with calls that
    # pass constants, keywords or trees must still pick the right trace and result structure.
    def fun(x, y=None, scale=1.0):
        out = mx.exp(-x) * scale
        return out if y is None else (out + y, y * 2)

    c = mx.compile(fun)
    x, y = mx.array([1.0, 2.0]), mx.array([3.0, -1.0])
    calls = [((x,), {}), ((x, y), {}), ((x,), {"scale": 3.0}), ((x, y), {}), ((x,), {}), ((x,), {"y": y})]
    for args, kwargs in calls * 2:
        got, want = c(*args, **kwargs), fun(*args, **kwargs)
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-6)
        else:
            assert isinstance(got, mx.array)
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6)
    assert c.trace_count == 4


def test_compiling_the_same_function_again_shares_the_cache():
    def fun(x, y):
        return mx.exp(-x) + y

    x, y = mx.array(1.0), mx.array(2.0)
    compiled_fun = mx.compile(fun)
    compiled_fun(x, y)
    compiled_fun(x, y)
    again = mx.compile(fun)
    again(x, y)
    assert again.trace_count == 1
    assert again.__name__ == "fun"


def test_gelu_fuses_to_one_kernel_and_matches_eager(device):
    def gelu(x):
        return x * (1 + mx.erf(x / math.sqrt(2))) / 2

    x = mx.random.uniform(shape=(32, 100, 64))
    c = mx.compile(gelu)
    np.testing.assert_allclose(np.array(c(x)), np.array(gelu(x)), rtol=1e-6, atol=1e-7)
    report = c.explain(x)
    assert "1 compiled" in report and "eager" in report
    if device == "cpu":
        assert "runs as: native code (C source: " in report or "runs as: interpreted until" in report, report
    else:
        # The report shows the kernel's CUDA source and how the plan is launched.
        assert "extern \"C\" __global__" in report and "GPU replay: " in report, report


def test_native_code_runs_after_its_build_and_timing_trial(on_cpu):
    from kiln import _core

    def gelu(x):
        return x * (1 + mx.erf(x / math.sqrt(2))) / 2

    x = mx.random.uniform(shape=(64, 1024))
    c = mx.compile(gelu)
    want = np.array(gelu(x))
    np.testing.assert_array_equal(np.array(c(x)), want)
    _core.wait_for_native_builds()
    for _ in range(2 * _core.native_trial_runs()):
        np.testing.assert_array_equal(np.array(c(x)), want)
    target = _core.native_target()
    assert target.startswith("native ("), target
    runs_as = [line for line in c.explain(x).splitlines() if line.startswith("runs as: ")]
    assert len(runs_as) == 1, runs_as
    kept = runs_as[0].startswith("runs as: native code (C source: ") and f"built for {target}, measured " in runs_as[0]
    dropped = runs_as[0].startswith(f"runs as: interpreted: its native code (built for {target}, ") and "measured slower" in runs_as[0]
    assert kept or dropped, runs_as[0]


def test_constants_are_part_of_the_key_and_reach_the_function():
    def fun(x, power, name="sq", scale=None):
        out = x**power
        return out * scale if scale is not None else out

    c = mx.compile(fun)
    x = mx.array([2.0, 3.0])
    assert c(x, 2).tolist() == [4.0, 9.0]
    assert c(x, 3).tolist() == [8.0, 27.0]
    assert c(x, 3, scale=2.0).tolist() == [16.0, 54.0]
    assert c.trace_count == 3
    c(x, 3)
    assert c.trace_count == 3
    c(x, 3.0)  # a float is a different constant from an int
    assert c.trace_count == 4


def test_unsupported_argument_type_is_a_value_error():
    c = mx.compile(lambda x, obj: x)
    with pytest.raises(ValueError, match="unsupported argument type"):
        c(mx.array(1.0), object())


def test_pytree_arguments_and_outputs_keep_their_structure():
    @mx.compile
    def fun(p, xs):
        return {"y": p["w"] * xs[0] + p["b"], "pair": (xs[1], xs[0] * 2)}

    p = {"w": mx.array(2.0), "b": mx.array(1.0)}
    out = fun(p, [mx.array(3.0), mx.array(5.0)])
    assert out["y"].item() == 7.0
    assert isinstance(out["pair"], tuple) and out["pair"][0].item() == 5.0 and out["pair"][1].item() == 6.0
    out = fun(p, [mx.array(4.0), mx.array(1.0)])
    assert out["y"].item() == 9.0 and fun.trace_count == 1


def test_printing_inside_a_trace_is_a_clear_error_and_disable_compile_allows_it():
    @mx.compile
    def fun(x):
        z = -x
        print(z)
        return mx.exp(z)

    with pytest.raises(RuntimeError, match="disable_compile"):
        fun(mx.array(5.0))
    mx.disable_compile()
    try:
        assert fun(mx.array(5.0)).item() == pytest.approx(math.exp(-5))
    finally:
        mx.enable_compile()


def test_environment_variable_disables_compile():
    code = (
        "import kiln.core as mx\n"
        "f = mx.compile(lambda x: mx.exp(x))\n"
        "f(mx.array(1.0)); f(mx.array(2.0))\n"
        "print(mx.is_compile_enabled(), f.trace_count)\n"
    )
    env = dict(os.environ, KILN_DISABLE_COMPILE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "0"]


def test_returning_state_explicitly():
    state = []

    @mx.compile
    def fun(x, y):
        z = x + y
        state.append(z)
        return mx.exp(z), state

    _, state_out = fun(mx.array(1.0), mx.array(2.0))
    assert repr(state_out) == "[array(3, dtype=float32)]"


def test_state_written_back_follows_the_trace_that_ran():
    # Traces for float32 and int32 arguments return different structures and write the state
    # differently; each call writes back what its own trace wrote.
    state = [mx.array(1.0)]

    @partial(mx.compile, inputs=state, outputs=state)
    def fun(y):
        x = state[0]
        if y.dtype == mx.float32:
            state[0] = 2 * y
            return [x, y, x + y]
        state[0] = state[0] * 3
        return x + y

    want = 1.0
    for step in range(4):
        out = fun(mx.array(float(step)))
        assert isinstance(out, list) and len(out) == 3
        assert out[0].item() == want
        want = 2.0 * step
        assert state[0].item() == want
        out = fun(mx.array(1))
        assert isinstance(out, mx.array) and out.item() == want + 1
        want *= 3
        assert state[0].item() == want
    assert fun.trace_count == 2


def test_outputs_capture_writes_the_state_back():
    state = []

    @partial(mx.compile, outputs=state)
    def fun(x, y):
        z = x + y
        state.append(z)
        return mx.exp(z), state

    fun(mx.array(1.0), mx.array(2.0))
    assert repr(state) == "[array(3, dtype=float32)]"
    fun(mx.array(2.0), mx.array(2.0))
    assert state[0].item() == 4.0


def test_captured_arrays_are_constants_without_inputs():
    state = [mx.array(1.0)]

    @mx.compile
    def fun(x):
        return x + state[0]

    assert repr(fun(mx.array(1.0))) == "array(2, dtype=float32)"
    state[0] = mx.array(5.0)
    assert repr(fun(mx.array(1.0))) == "array(2, dtype=float32)"


def test_inputs_capture_reads_the_current_state():
    state = [mx.array(1.0)]

    @partial(mx.compile, inputs=state)
    def fun(x):
        return x + state[0]

    assert repr(fun(mx.array(1.0))) == "array(2, dtype=float32)"
    state[0] = mx.array(5.0)
    assert repr(fun(mx.array(1.0))) == "array(6, dtype=float32)"
    assert fun.trace_count == 1


def test_random_state_capture_gives_fresh_numbers_each_call():
    mx.random.seed(3)
    state = [mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def noisy(x):
        return x + mx.random.uniform(shape=x.shape)

    x = mx.zeros((4,))
    a, b = noisy(x), noisy(x)
    assert noisy.trace_count == 1
    assert not np.array_equal(np.array(a), np.array(b))
    # The same draws as eager code from the same seed.
    mx.random.seed(3)
    e1 = x + mx.random.uniform(shape=(4,))
    e2 = x + mx.random.uniform(shape=(4,))
    np.testing.assert_array_equal(np.array(a), np.array(e1))
    np.testing.assert_array_equal(np.array(b), np.array(e2))


def test_compiled_grad_and_grad_of_compiled():
    grad_fn = mx.grad(mx.exp)
    compiled_grad_fn = mx.compile(grad_fn)
    assert grad_fn(mx.array(1.0)).item() == pytest.approx(math.e, rel=1e-6)
    assert compiled_grad_fn(mx.array(1.0)).item() == pytest.approx(math.e, rel=1e-6)
    inner = mx.compile(lambda x: mx.sum(mx.sin(x)))
    g = mx.grad(inner)(mx.array([0.1, 0.2]))
    np.testing.assert_allclose(np.array(g), np.cos([0.1, 0.2]), rtol=1e-6)


def test_compiled_inside_compiled_is_inlined():
    @mx.compile
    def inner(x):
        return mx.exp(-mx.abs(x))

    def outer(x):
        return inner(inner(x))

    fun = mx.compile(outer)
    x = mx.array([0.5, -1.0])
    np.testing.assert_allclose(np.array(fun(x)), np.exp(-np.abs(np.exp(-np.abs([0.5, -1.0])))), rtol=1e-6)


def test_shapeless_serves_every_shape_with_one_trace():
    def fun(x, y):
        return mx.abs(x + y)

    compiled_fun = mx.compile(fun, shapeless=True)
    assert compiled_fun(mx.array(1.0), mx.array(-2.0)).item() == 1.0
    out = compiled_fun(mx.array([1.0, -6.0]), mx.array([-2.0, 3.0]))
    assert out.tolist() == [1.0, 3.0]
    # One trace per rank (the key holds each input's ndim); other shapes of a rank replay it.
    assert compiled_fun.trace_count == 2
    out = compiled_fun(mx.array([1.0, -6.0, 2.0]), mx.array([-2.0, 3.0, 4.0]))
    assert out.tolist() == [1.0, 3.0, 6.0]
    assert compiled_fun.trace_count == 2


def test_shapeless_reshape_reinfers_minus_one_and_flatten_follows_every_shape():
    def merged(x):
        return x.reshape(x.shape[0] * x.shape[1], -1)

    c = mx.compile(merged, shapeless=True)
    c(mx.random.uniform(shape=(2, 3, 4)))
    x = mx.random.uniform(shape=(2, 3, 8))
    out = c(x)
    assert out.shape == (6, 8) and c.trace_count == 1
    np.testing.assert_array_equal(np.array(out), np.array(x).reshape(6, 8))
    with pytest.raises(ValueError, match="reshape"):
        c(mx.random.uniform(shape=(5, 5, 3)))

    def flat(x):
        return x.flatten(0, 1)

    c = mx.compile(flat, shapeless=True)
    c(mx.random.uniform(shape=(2, 3, 4)))
    out = c(mx.random.uniform(shape=(5, 5, 3)))
    assert out.shape == (25, 3) and c.trace_count == 1


def test_compiled_function_keeps_name_and_doc():
    def documented(x):
        """Doubles x."""
        return x * 2

    c = mx.compile(documented)
    assert c.__name__ == "documented" and c.__doc__ == "Doubles x."
    assert mx.compile(partial(documented))(mx.array(2.0)).item() == 4.0


def test_failed_trace_leaves_nothing_and_state_is_restored():
    state = [mx.array(1.0)]

    @partial(mx.compile, inputs=state)
    def bad(x):
        raise KeyError("nope")

    with pytest.raises(KeyError):
        bad(mx.array(1.0))
    assert state[0].item() == 1.0


def test_constants_equal_in_python_are_still_different_keys():
    c = mx.compile(lambda x, k: x + 100 if isinstance(k, bool) else x * k)
    x = mx.array(2.0)
    assert c(x, 1).item() == 2.0
    assert c(x, True).item() == 102.0
    assert c(x, 1.0).item() == 2.0
    assert c.trace_count == 3
    d = mx.compile(lambda x, k: x / k)
    assert d(x, 0.0).item() == math.inf
    assert d(x, -0.0).item() == -math.inf


def test_many_threads_calling_one_compiled_function(rng):
    import threading

    c = mx.compile(lambda x, y: mx.tanh(x) * y + 1)
    inputs = [(rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)) for _ in range(8)]
    results = [None] * len(inputs)

    def work(i):
        x, y = inputs[i]
        for _ in range(20):
            results[i] = np.array(c(mx.array(x), mx.array(y)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (x, y), r in zip(inputs, results):
        np.testing.assert_allclose(r, np.tanh(x) * y + 1, rtol=1e-6, atol=1e-6)
    assert c.trace_count == 1


def test_shapeless_compiled_grad_follows_new_batch_sizes(rng):
    def loss(w, x):
        return mx.mean(mx.logsumexp(x @ w, axis=-1))

    g = mx.compile(mx.grad(loss), shapeless=True)
    w = mx.array(rng.standard_normal((4, 3)).astype(np.float32))
    for batch in (2, 5, 1, 8):
        x = mx.array(rng.standard_normal((batch, 4)).astype(np.float32))
        np.testing.assert_allclose(np.array(g(w, x)), np.array(mx.grad(loss)(w, x)), rtol=1e-5, atol=1e-6)
    assert g.trace_count == 1


def test_shapeless_indexing_written_as_numbers_follows_new_shapes(rng):
    def fun(x):
        y = x[1:, :-1] * 2 + x[-1, :-1]  # a slice, and part of the last row broadcast over it
        x[2] = mx.array([3.0])
        x[:, 0] += 1
        return y, x

    def ref(x):
        y = x[1:, :-1] * 2 + x[-1, :-1]
        x = x.copy()
        x[2] = 3.0
        x[:, 0] += 1
        return y, x

    c = mx.compile(fun, shapeless=True)
    for shape in [(4, 3), (6, 5), (3, 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for got, want in zip(c(mx.array(x)), ref(x)):
            np.testing.assert_allclose(np.array(got), want, rtol=1e-6)
    assert c.trace_count == 1
    with pytest.raises(ValueError, match="out of bounds"):
        c(mx.zeros((2, 3)))  # x[2] needs three rows

    # The gradient of a slice follows new shapes too (next-token style shift).
    g = mx.compile(mx.grad(lambda x: ((x[:, 1:] - x[:, :-1]) ** 2).sum()), shapeless=True)
    for shape in [(2, 5), (3, 8)]:
        x = rng.standard_normal(shape).astype(np.float32)
        d = np.diff(x, axis=1)
        want = np.zeros_like(x)
        want[:, 1:] += 2 * d
        want[:, :-1] -= 2 * d
        np.testing.assert_allclose(np.array(g(mx.array(x))), want, rtol=1e-5, atol=1e-6)
    assert g.trace_count == 1


def test_shapeless_slice_updates_follow_new_batch_sizes_down_to_one_row():
    def zero_first_column(x):
        x[:, 0] = 0
        x[1:] *= mx.array([[2.0, 3.0]])  # a value with a leading size-1 axis
        return x

    c = mx.compile(zero_first_column, shapeless=True)
    for rows in (2, 5, 1):
        x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        want = x.copy()
        want[:, 0] = 0
        want[1:] *= [2.0, 3.0]
        np.testing.assert_array_equal(np.array(c(mx.array(x))), want)
    assert c.trace_count == 1

    def zero_first(x):
        x[:, 0] = 0
        return x

    c = mx.compile(zero_first, shapeless=True)  # traced with one row: the region is (1,)
    for rows in (1, 4):
        x = np.ones((rows, 3), np.float32)
        np.testing.assert_array_equal(np.array(c(mx.array(x))), np.tile([0.0, 1.0, 1.0], (rows, 1)))
    assert c.trace_count == 1


def test_shapeless_slice_bounds_computed_from_a_shape_are_refused_at_new_shapes():
    c = mx.compile(lambda x: x[: x.shape[0] // 2], shapeless=True)
    assert c(mx.arange(4.0)).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="read a shape"):
        c(mx.arange(6.0))  # eager gives 3 elements; a replay with the traced bound would give 2
    rows = mx.compile(lambda x: sum(r for r in x), shapeless=True)  # iterating reads len(x)
    assert rows(mx.ones((2, 3))).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="shapeless"):
        rows(mx.ones((3, 3)))


def test_vmap_and_jvp_of_a_compiled_function(rng):
    c = mx.compile(lambda x: mx.sum(mx.sin(x) * x))
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    per_row = mx.vmap(c)(mx.array(xs))
    np.testing.assert_allclose(np.array(per_row), (np.sin(xs) * xs).sum(1), rtol=1e-5)
    x, t = xs[0], np.ones(3, dtype=np.float32)
    _, (tan,) = mx.jvp(c, [mx.array(x)], [mx.array(t)])
    np.testing.assert_allclose(tan.item(), (np.cos(x) * x + np.sin(x)).sum(), rtol=1e-5)


def test_compiled_functions_share_a_cache_only_while_one_lives():
    traces = []

    def f(x):
        traces.append(1)
        return x + 1

    first = mx.compile(f)
    first(mx.array([1.0]))
    second = mx.compile(f)
    second(mx.array([1.0]))
    assert len(traces) == 1, "a live compiled function's cache serves a new compile of the same function"
    del first, second
    gc.collect()
    assert mx.compile(f)(mx.array([1.0])).tolist() == [2.0]
    assert len(traces) == 2, "with every compiled function released, compiling again traces again"


def test_shapeless_batched_matmul_and_its_gradient_follow_new_batch_shapes(rng):
    f = mx.compile(lambda a, b: a @ b, shapeless=True)
    g = mx.compile(mx.grad(lambda args: (args[0] @ args[1]).sum()), shapeless=True)
    for sa, sb in [((2, 1, 4, 2), (3, 2, 5)), ((3, 1, 4, 2), (2, 2, 5)), ((1, 5, 3, 2), (1, 2, 1))]:
        a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
        np.testing.assert_allclose(np.array(f(mx.array(a), mx.array(b))), a @ b, rtol=1e-5, atol=1e-5)
        ga, gb = g((mx.array(a), mx.array(b)))
        ones = np.ones(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), np.float32)
        # d/da sum(a @ b) = ones @ b^T summed over a's broadcast axes (and likewise for b).
        want_a = (ones @ np.swapaxes(b, -1, -2)).sum(axis=tuple(i for i, d in enumerate(sa) if d == 1 and ones.shape[i] != 1), keepdims=True)
        np.testing.assert_allclose(np.array(ga), want_a.reshape(sa), rtol=1e-4, atol=1e-4)
        assert gb.shape == sb
    xs, ys = mx.compile(lambda x, y: mx.broadcast_arrays(x, y), shapeless=True)(mx.zeros((1, 3)), mx.zeros((2, 1)))
    assert xs.shape == ys.shape == (2, 3)


def test_compile_refuses_a_function_that_uses_its_argument_directly():
    x = mx.array([1, 2, 3]) + 2
    with pytest.raises(ValueError, match="argument 0"):
        mx.compile(lambda a: a + (x + 1))(x)
    assert mx.compile(lambda a: a + x)(mx.array([1, 1, 1])).tolist() == [4, 5, 6]
