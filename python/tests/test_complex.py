"""complex64 against numpy: creation from Python and numpy values, promotion, arithmetic and the
functions numpy defines for complex numbers, reductions, matmul, printing, gradients against
finite differences of both parts, and errors for what complex numbers do not have. complex64 runs
on the CPU (the GPU refuses it with a clear error, checked at the end)."""

import numpy as np
import pytest

import kiln.core as mx


def c64(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def close(got, want, tol=2e-5):
    got = np.array(got)
    assert got.dtype == np.complex64 or np.asarray(want).dtype != np.complex64, got.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_complex_values_make_complex64_arrays(on_cpu):
    assert mx.array(1 + 2j).dtype == mx.complex64
    a = mx.array([1, 2.5, 3 - 1j])
    assert a.dtype == mx.complex64
    assert a.tolist() == [1 + 0j, 2.5 + 0j, 3 - 1j]
    assert mx.array(np.complex64(2 - 3j)).item() == 2 - 3j
    assert mx.array([np.complex128(1j), 2]).tolist() == [1j, 2 + 0j]
    # numpy complex64 and complex128 arrays (complex128 becomes complex64, as mlx)
    z = np.array([[1 + 2j, -0.5j]], dtype=np.complex128)
    for src in (z, z.astype(np.complex64)):
        m = mx.array(src)
        assert m.dtype == mx.complex64 and m.shape == (1, 2)
        back = np.array(m)
        assert back.dtype == np.complex64
        np.testing.assert_array_equal(back, z.astype(np.complex64))
    assert complex(mx.array(3j)) == 3j
    assert mx.array([1.0, 2.0], dtype=mx.complex64).tolist() == [1 + 0j, 2 + 0j]
    with pytest.raises(TypeError, match="complex"):
        float(mx.array(1j))


def test_promotion_and_dtype_categories(on_cpu):
    x = mx.array([1.0, 2.0], dtype=mx.float16)
    assert (x + 1j).dtype == mx.complex64
    assert (mx.array([1, 2]) * mx.array([1j, 1])).dtype == mx.complex64
    assert (mx.array([1.0], dtype=mx.float64) + mx.array([1j])).dtype == mx.complex64
    z = mx.array([1 + 1j])
    assert (z + 2.5).dtype == mx.complex64 and (z * 2).dtype == mx.complex64
    assert mx.issubdtype(mx.complex64, mx.complexfloating)
    assert mx.issubdtype(mx.complex64, mx.inexact) and mx.issubdtype(mx.complex64, mx.number)
    assert not mx.issubdtype(mx.complex64, mx.floating)
    assert mx.isdtype(mx.complex64, "complex floating") and not mx.isdtype(mx.float32, "complex floating")
    assert mx.complex64.size == 8
    assert mx.finfo(mx.complex64).eps == np.finfo(np.complex64).eps


def test_arithmetic_and_functions_match_numpy(on_cpu, rng):
    a, b = c64(rng, (4, 5)), c64(rng, (5,))
    ma, mb = mx.array(a), mx.array(b)
    close(ma + mb, a + b)
    close(ma - mb, a - b)
    close(ma * mb, a * b)
    close(ma / mb, a / b, 1e-4)
    close(ma ** mb, a ** b, 1e-4)
    close(mx.logaddexp(ma, mb), np.log(np.exp(a.astype(np.complex128)) + np.exp(b.astype(np.complex128))), 1e-4)
    close(2.5 * ma, 2.5 * a)
    close(ma * 1j, a * 1j)
    close(-ma, -a)
    for name in ("exp", "log", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
                 "square", "reciprocal", "log1p", "arcsin", "arccos", "arctan"):
        close(getattr(mx, name)(ma), getattr(np, name)(a), 1e-4)
    close(mx.rsqrt(ma), 1 / np.sqrt(a), 1e-4)
    close(mx.sign(ma), a / np.abs(a))
    np.testing.assert_allclose(np.array(mx.abs(ma)), np.abs(a), rtol=1e-6)
    assert mx.abs(ma).dtype == mx.float32
    np.testing.assert_array_equal(np.array(mx.real(ma)), a.real)
    np.testing.assert_array_equal(np.array(mx.imag(ma)), a.imag)
    np.testing.assert_array_equal(np.array(ma.real), a.real)
    np.testing.assert_array_equal(np.array(ma.imag), a.imag)
    np.testing.assert_array_equal(np.array(mx.round(mx.array([22.2 + 3.5j, 18.5 - 2.5j]))), [22 + 4j, 18 - 2j])
    np.testing.assert_array_equal(np.array(mx.conj(ma)), np.conj(a))
    np.testing.assert_array_equal(np.array(ma.conj()), np.conj(a))
    np.testing.assert_array_equal(np.array(mx.conjugate(ma)), np.conj(a))
    # real arrays: real is the array, imag zeros, conj the array
    r = mx.array([1.5, -2.0])
    assert mx.imag(r).tolist() == [0.0, 0.0] and mx.conj(r).tolist() == [1.5, -2.0]
    # comparisons (numpy's lexicographic order) and predicates
    np.testing.assert_array_equal(np.array(ma == ma), np.ones((4, 5), bool))
    np.testing.assert_array_equal(np.array(ma > mb), a > b)
    np.testing.assert_array_equal(np.array(mx.maximum(ma, mb)), np.maximum(a, b))
    s = np.array([np.nan + 0j, complex(np.inf, 1), 1 + 1j], dtype=np.complex64)
    for name in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(np.array(getattr(mx, name)(mx.array(s))), getattr(np, name)(s))
    # casts: to real drops the imaginary part, to bool tests either part
    np.testing.assert_array_equal(np.array(ma.astype(mx.float32)), a.real)
    np.testing.assert_array_equal(np.array(mx.array([0j, 1j, 2]).astype(mx.bool_)), [False, True, True])


def test_reductions_sorting_and_matmul_match_numpy(on_cpu, rng):
    a = c64(rng, (6, 7))
    m = mx.array(a)
    close(mx.sum(m, axis=1), a.astype(np.complex128).sum(axis=1))
    close(mx.prod(m, axis=0), a.astype(np.complex128).prod(axis=0), 1e-4)
    close(mx.mean(m), a.astype(np.complex128).mean())
    close(mx.cumsum(m, axis=1), np.cumsum(a.astype(np.complex128), axis=1), 1e-4)
    close(mx.max(m, axis=1), a.max(axis=1))
    np.testing.assert_array_equal(np.array(mx.sort(m, axis=1)), np.sort(a, axis=1))
    b = c64(rng, (7, 3))
    close(m @ mx.array(b), a.astype(np.complex128) @ b, 1e-4)
    close(mx.matmul(m.T, m), a.T.astype(np.complex128) @ a, 1e-4)
    # indexing, reshaping, concatenation move complex values whole
    np.testing.assert_array_equal(np.array(m[1:4, ::2]), a[1:4, ::2])
    np.testing.assert_array_equal(np.array(mx.concatenate([m, m], axis=0)), np.concatenate([a, a]))
    np.testing.assert_array_equal(np.array(mx.where(m.real > 0, m, 0)), np.where(a.real > 0, a, 0))
    np.testing.assert_array_equal(np.array(mx.take(m, mx.array([3, 0]), axis=0)), a[[3, 0]])


def test_printing_shows_both_parts(on_cpu):
    assert repr(mx.array([1 + 2j, 0.5 - 1.5j])) == "array([1+2j, 0.5-1.5j], dtype=complex64)"
    assert str(mx.array(2 - 1j)) == "array(2-1j, dtype=complex64)"


def _finite_difference(f, z, h=1e-3):
    """dL/dx + i dL/dy of the real loss f at complex z, by central differences in float64."""
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for unit in (1, 1j):
            step = np.zeros(z.shape, np.complex128)
            step[idx] = h * unit
            d = (f(z + step) - f(z - step)) / (2 * h)
            g[idx] += d * unit
    return g


def test_gradients_are_the_partials_of_both_parts(on_cpu, rng):
    z = c64(rng, (5,)).astype(np.complex128)
    w = c64(rng, (5,)).astype(np.complex128)

    def loss_np(v):
        u = np.exp(v) * w
        return np.sum(np.abs(u) ** 2 + 2 * v.real + np.imag(v / (w + 3)) + np.abs(np.sin(v)))

    def loss_mx(v):
        u = mx.exp(v) * mx.array(w)
        sq = mx.real(u * mx.conj(u))
        return mx.sum(sq + 2 * mx.real(v) + mx.imag(v / (mx.array(w) + 3)) + mx.abs(mx.sin(v)))

    g = mx.grad(loss_mx)(mx.array(z))
    assert g.dtype == mx.complex64
    np.testing.assert_allclose(np.array(g), _finite_difference(loss_np, z), rtol=2e-3, atol=2e-3)
    # value_and_grad, and the value itself
    value, g2 = mx.value_and_grad(loss_mx)(mx.array(z))
    np.testing.assert_allclose(value.item(), loss_np(z.astype(np.complex64).astype(np.complex128)), rtol=1e-5)
    np.testing.assert_array_equal(np.array(g2), np.array(g))
    # the vjp of a holomorphic op is the cotangent times the conjugate derivative
    ct = c64(rng, (5,))
    _, (v,) = mx.vjp(mx.exp, [mx.array(z)], [mx.array(ct)])
    close(v, ct * np.conj(np.exp(z)), 1e-4)
    # the jvp of |z| is real: Re(conj(z) t) / |z|
    t = c64(rng, (5,))
    _, (j,) = mx.jvp(mx.abs, [mx.array(z)], [mx.array(t)])
    assert j.dtype == mx.float32
    np.testing.assert_allclose(np.array(j), np.real(np.conj(z) * t) / np.abs(z), rtol=1e-4, atol=1e-5)


def test_compiled_functions_of_complex_arrays_match_eager(on_cpu, rng):
    z = mx.array(c64(rng, (16, 8)))

    def f(v):
        y = mx.exp(v) * mx.conj(v)
        return mx.sum(y, axis=1), mx.tanh(mx.abs(y) + v.real)

    eager = f(z)
    compiled = mx.compile(f)
    for _ in range(2):
        got = compiled(z)
        for g, e in zip(got, eager):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(np.array(g), np.array(e))


def test_complex_normal_samples(on_cpu):
    z = mx.random.normal((20000,), dtype=mx.complex64, key=mx.random.key(1))
    assert z.dtype == mx.complex64
    v = np.array(z)
    assert abs(v.real.mean()) < 0.03 and abs(v.imag.mean()) < 0.03
    assert abs(v.real.var() - 0.5) < 0.03 and abs(v.imag.var() - 0.5) < 0.03


def test_ops_without_complex_meaning_raise(on_cpu):
    z = mx.array([1 + 2j])
    # expm1 too, as in mlx (numpy has it)
    for f in (mx.floor, mx.erf, mx.sigmoid, mx.expm1, lambda v: mx.argmax(v), lambda v: v % 2,
              lambda v: mx.fast.rms_norm(v, None, 1e-5), lambda v: mx.fast.layer_norm(v, None, None, 1e-5),
              mx.softmax, mx.logsumexp, mx.linalg.inv):
        with pytest.raises(ValueError, match="complex64"):
            f(z)


def test_files_and_dlpack_keep_complex_values(on_cpu, tmp_path, rng):
    a = c64(rng, (3, 2))
    path = str(tmp_path / "z.npy")
    mx.save(path, mx.array(a))
    back = mx.load(path)
    assert back.dtype == mx.complex64
    np.testing.assert_array_equal(np.array(back), a)
    np.save(path, a.astype(np.complex64).astype(">c8"))
    np.testing.assert_array_equal(np.array(mx.load(path)), a)
    np.testing.assert_array_equal(np.from_dlpack(mx.array(a)), a)
    np.testing.assert_array_equal(np.array(memoryview(mx.array(a))), a)


def test_complex_on_the_gpu_is_a_clear_error(device):
    if device != "gpu":
        pytest.skip("checks the GPU's refusal")
    with pytest.raises(RuntimeError, match="CPU"):
        (mx.array([1j]) * 2).eval()
    # on the CPU stream it computes
    assert mx.multiply(mx.array([1j]), 2, stream=mx.cpu).tolist() == [2j]


def test_vecdot_conjugates_its_first_argument_as_numpy(on_cpu, rng):
    a, b = c64(rng, (3, 4)), c64(rng, (3, 4))
    close(mx.vecdot(mx.array(a), mx.array(b)), np.vecdot(a, b))
    close(mx.vecdot(mx.array(a), mx.array(b), axis=0), np.vecdot(a, b, axis=0))


def test_array_equal_with_equal_nan_treats_complex_nans_as_equal(on_cpu):
    a = mx.array([1 + 1j, complex(float("nan"), 2)])
    assert mx.array_equal(a, a, equal_nan=True).item()
    assert not mx.array_equal(a, a).item()


def test_median_of_complex_values_keeps_both_parts(on_cpu):
    z = np.array([3 + 1j, -1 + 2j, 2 - 5j, 0 + 0j], np.complex64)
    close(mx.median(mx.array(z)), np.median(z))
    close(mx.median(mx.array(z[:3])), np.median(z[:3]))
    assert mx.isnan(mx.median(mx.array([1 + 0j, complex(float("nan"), 0), 0j]))).item()


def test_norms_and_nan_to_num_of_complex_values_use_both_parts(on_cpu, rng):
    z = c64(rng, (3, 4))
    np.testing.assert_allclose(np.array(mx.linalg.norm(mx.array(z))), np.linalg.norm(z), rtol=1e-5)
    for ord in (None, 1, 2, np.inf):
        np.testing.assert_allclose(np.array(mx.linalg.norm(mx.array(z[0]), ord=ord)), np.linalg.norm(z[0], ord=ord), rtol=1e-5)
    np.testing.assert_allclose(np.array(mx.linalg.norm(mx.array(z), ord="fro")), np.linalg.norm(z, "fro"), rtol=1e-5)
    w = np.array([complex(np.nan, 1), complex(2, np.inf), complex(-np.inf, np.nan)], np.complex64)
    close(mx.nan_to_num(mx.array(w), nan=0.5, posinf=9.0, neginf=-9.0), np.nan_to_num(w, nan=0.5, posinf=9.0, neginf=-9.0))
