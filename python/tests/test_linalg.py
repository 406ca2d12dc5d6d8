"""kiln.core.linalg against numpy.linalg: norms of every order and axis choice, cross products,
and the factorizations checked by the identities that define them (numpy's own factors may differ
in sign or order), on batches; errors as mlx raises them."""

import itertools
import math

import numpy as np
import pytest

import kiln.core as mx

rng = np.random.default_rng(0)


def close(got, want, tol=1e-5):
    got = np.array(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 3, 4)])
def test_norms_match_numpy_for_every_order_and_axis(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    for k in (1, 2):
        for axis in itertools.permutations(range(-len(shape), len(shape)), k):
            if len({a % len(shape) for a in axis}) < k:
                continue
            ords = [None, 0.5, 0, 1, 2, 3, -1, math.inf, -math.inf] if k == 1 else [None, "fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf]
            for ord_, keepdims in itertools.product(ords, (False, True)):
                want = np.linalg.norm(x, ord=ord_, axis=axis if k == 2 else axis[0], keepdims=keepdims)
                got = mx.linalg.norm(mx.array(x), ord=ord_, axis=axis if k == 2 else axis[0], keepdims=keepdims)
                close(got, want, 1e-4)
    close(mx.linalg.norm(mx.array(x)), np.linalg.norm(x))
    ints = np.arange(1, 7).reshape(2, 3)
    close(mx.linalg.norm(mx.array(ints), ord=1), np.linalg.norm(ints, ord=1))


def test_norm_errors_name_the_problem():
    with pytest.raises(ValueError, match="1-D or 2-D"):
        mx.linalg.norm(mx.zeros((2, 2, 2)), ord=2)
    with pytest.raises(ValueError, match="matrix norm order"):
        mx.linalg.norm(mx.zeros((2, 2)), ord=3, axis=(0, 1))
    with pytest.raises(ValueError, match="out of range"):
        mx.linalg.norm(mx.zeros((2, 2)), axis=5)


def test_cross_products_broadcast_and_promote():
    a, b = rng.standard_normal((2, 1, 3)), rng.standard_normal((1, 4, 3))
    close(mx.linalg.cross(mx.array(a, mx.float64), mx.array(b, mx.float64)), np.cross(a, b), 1e-12)
    close(mx.linalg.cross(mx.array([1, 2, 3]), mx.array([4.0, 5.0, 6.0])), np.cross([1, 2, 3], [4.0, 5.0, 6.0]))
    c = rng.standard_normal((3, 5))
    close(mx.linalg.cross(mx.array(c), mx.array(c[::-1]), axis=0), np.cross(c, c[::-1], axis=0))
    with pytest.raises(ValueError, match="size 3"):
        mx.linalg.cross(mx.array([1.0]), mx.array([2.0]))


def test_factorizations_rebuild_their_matrices():
    a = rng.standard_normal((3, 4, 4))
    x = mx.array(a, mx.float64)
    close(mx.linalg.inv(x) @ x, np.broadcast_to(np.eye(4), a.shape), 1e-10)
    q, r = mx.linalg.qr(x)
    close(q @ r, a, 1e-10)
    u, s, vt = mx.linalg.svd(x)
    close(np.array(u) * np.array(s)[:, None, :] @ np.array(vt), a, 1e-10)
    close(mx.linalg.svd(x, compute_uv=False), np.linalg.svd(a, compute_uv=False), 1e-10)
    p, l, u = mx.linalg.lu(x)
    close(mx.take_along_axis(l, p[..., None], axis=-2) @ u, a, 1e-10)
    spd = a @ a.transpose(0, 2, 1) + 4 * np.eye(4)
    w, v = mx.linalg.eigh(mx.array(spd, mx.float64))
    close(w, np.linalg.eigvalsh(spd), 1e-10)
    close(mx.array(spd, mx.float64) @ v, np.array(v) * np.array(w)[:, None, :], 1e-10)
    ch = mx.linalg.cholesky(mx.array(spd, mx.float64))
    close(ch, np.linalg.cholesky(spd), 1e-10)
    close(mx.linalg.cholesky_inv(ch) @ mx.array(spd, mx.float64), np.broadcast_to(np.eye(4), a.shape), 1e-10)
    close(mx.linalg.det(x), np.linalg.det(a), 1e-10)
    sign, log = mx.linalg.slogdet(x)
    np_sign, np_log = np.linalg.slogdet(a)
    close(sign, np_sign)
    close(log, np_log, 1e-10)
    close(mx.linalg.pinv(mx.array(a[:, :3], mx.float64)), np.linalg.pinv(a[:, :3]), 1e-8)


def test_solves_match_numpy_with_vector_and_matrix_right_hand_sides():
    a = rng.standard_normal((2, 3, 3)).astype(np.float32) + 3 * np.eye(3, dtype=np.float32)
    b = rng.standard_normal((2, 3, 1)).astype(np.float32)
    close(mx.linalg.solve(mx.array(a), mx.array(b)), np.linalg.solve(a, b), 1e-4)
    v = rng.standard_normal(3).astype(np.float32)  # one vector, as numpy 2
    close(mx.linalg.solve(mx.array(a), mx.array(v)), np.linalg.solve(a, v), 1e-4)
    bm = rng.standard_normal((3, 5)).astype(np.float32)
    close(mx.linalg.solve(mx.array(a), mx.array(bm)), np.linalg.solve(a, bm), 1e-4)
    upper = np.triu(a)
    close(mx.linalg.solve_triangular(mx.array(a), mx.array(bm), upper=True), np.linalg.solve(upper, bm), 1e-4)


def test_linalg_errors_are_value_errors_naming_the_op():
    with pytest.raises(ValueError, match="linalg.qr"):
        mx.linalg.qr(mx.array([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        mx.linalg.lu(mx.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="square"):
        mx.linalg.eigh(mx.zeros((3, 2)))
    with pytest.raises(ValueError, match="singular"):
        mx.eval(mx.linalg.inv(mx.array([[1.0, 2.0], [2.0, 4.0]])))
    with mx.stream(mx.cpu), pytest.raises(ValueError, match="complex64 matrices"):
        mx.linalg.inv(mx.eye(2).astype(mx.complex64))


def test_linalg_runs_inside_compiled_functions():
    a = mx.array(rng.standard_normal((3, 3)) + 3 * np.eye(3))
    f = lambda m: mx.linalg.inv(m * 2) + mx.linalg.norm(m)  # noqa: E731
    close(mx.compile(f)(a), f(a), 0)


def test_general_eigendecomposition_matches_numpy():
    rng = np.random.default_rng(3)
    for a in [np.array([[1.0, -1.0], [1.0, 1.0]], np.float32), rng.standard_normal((3, 5, 5)).astype(np.float32)]:
        w, v = mx.linalg.eig(mx.array(a), stream=mx.cpu)
        assert w.dtype == mx.complex64 and v.dtype == mx.complex64
        wn, vn = np.array(w), np.array(v)
        np.testing.assert_allclose(a.astype(np.complex128) @ vn, vn * wn[..., None, :], atol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(vn, axis=-2), 1.0, rtol=1e-5)
        key = lambda z: (round(z.real, 4), round(z.imag, 4))  # noqa: E731
        for got, want in zip(wn.reshape(-1, a.shape[-1]), np.linalg.eigvals(a.astype(np.float64)).reshape(-1, a.shape[-1])):
            np.testing.assert_allclose(sorted(got, key=key), sorted(want, key=key), atol=1e-4)
        np.testing.assert_array_equal(np.array(mx.linalg.eigvals(mx.array(a), stream=mx.cpu)), wn)
    with pytest.raises(ValueError, match="square"):
        mx.linalg.eig(mx.zeros((2, 3)), stream=mx.cpu)
