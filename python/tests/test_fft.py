"""kiln.core.fft against numpy.fft: every transform over one, two and n axes, with cropping and
padding, the three normalisations, strided inputs, shifts and sample frequencies; gradients
against finite differences in numpy; errors as mlx raises them. The transforms run on the CPU
(complex64 is CPU-only for now)."""

import itertools

import numpy as np
import pytest

import kiln.core as mx


def c64(rng, shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def close(got, want, tol=1e-4):
    got = np.array(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_one_dimensional_transforms_match_numpy(on_cpu, rng):
    a = c64(rng, (6, 20))
    r = rng.standard_normal((6, 20)).astype(np.float32)
    for n, axis in itertools.product([None, 13, 20, 31], [-1, 0]):
        close(mx.fft.fft(mx.array(a), n=n, axis=axis), np.fft.fft(a, n=n, axis=axis))
        close(mx.fft.ifft(mx.array(a), n=n, axis=axis), np.fft.ifft(a, n=n, axis=axis))
        close(mx.fft.rfft(mx.array(r), n=n, axis=axis), np.fft.rfft(r, n=n, axis=axis))
        spectrum = np.fft.rfft(r, axis=axis).astype(np.complex64)
        close(mx.fft.irfft(mx.array(spectrum), n=n, axis=axis), np.fft.irfft(spectrum, n=n, axis=axis))
    assert mx.fft.irfft(mx.array(np.fft.rfft(r).astype(np.complex64))).dtype == mx.float32


def test_n_dimensional_transforms_match_numpy(on_cpu, rng):
    a = c64(rng, (4, 6, 5))
    r = rng.standard_normal((4, 6, 5)).astype(np.float32)
    for axes, s in [(None, None), ((1, 2), None), ((2, 1), None), ((0, 2), (3, 8)), ((2, 0), (7, 2))]:
        kw = dict(axes=axes, s=s)
        close(mx.fft.fftn(mx.array(a), **kw), np.fft.fftn(a, **kw))
        close(mx.fft.ifftn(mx.array(a), **kw), np.fft.ifftn(a, **kw))
        close(mx.fft.rfftn(mx.array(r), **kw), np.fft.rfftn(r, **kw))
        spectrum = np.fft.rfftn(r, axes=axes).astype(np.complex64)
        close(mx.fft.irfftn(mx.array(spectrum), **kw), np.fft.irfftn(spectrum, **kw))
    b = c64(rng, (5, 6))
    for name in ("fft2", "ifft2"):
        close(getattr(mx.fft, name)(mx.array(b)), getattr(np.fft, name)(b))
    rb = b.real.copy()
    close(mx.fft.rfft2(mx.array(rb)), np.fft.rfft2(rb))
    close(mx.fft.irfft2(mx.array(np.fft.rfft2(rb).astype(np.complex64))), np.fft.irfft2(np.fft.rfft2(rb)))


def test_norms_strided_inputs_and_real_dtypes(on_cpu, rng):
    a = c64(rng, (8, 6))
    for norm in ("backward", "ortho", "forward"):
        close(mx.fft.fft(mx.array(a), norm=norm), np.fft.fft(a, norm=norm))
        close(mx.fft.ifftn(mx.array(a), norm=norm), np.fft.ifftn(a, norm=norm))
        close(mx.fft.irfft(mx.array(a), norm=norm), np.fft.irfft(a, norm=norm))
    m = mx.array(a)
    close(mx.fft.fft(m[:, ::2]), np.fft.fft(a[:, ::2]))
    close(mx.fft.fft(m.T), np.fft.fft(a.T))
    close(mx.fft.fft(mx.broadcast_to(m[:1], (3, 6))), np.fft.fft(np.broadcast_to(a[:1], (3, 6))))
    ints = np.arange(12).reshape(3, 4)
    close(mx.fft.fft(mx.array(ints)), np.fft.fft(ints))
    close(mx.fft.rfft(mx.array(ints)), np.fft.rfft(ints))
    f64 = rng.standard_normal(33)
    close(mx.fft.rfft(mx.array(f64, dtype=mx.float64)), np.fft.rfft(f64), 1e-5)


def test_shifts_and_frequencies_match_numpy(on_cpu, rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for axes in (None, 0, (1,), (0, 1), (-1,)):
        np.testing.assert_array_equal(np.array(mx.fft.fftshift(mx.array(x), axes=axes)), np.fft.fftshift(x, axes=axes))
        np.testing.assert_array_equal(np.array(mx.fft.ifftshift(mx.array(x), axes=axes)), np.fft.ifftshift(x, axes=axes))
    for n, d in [(1, 1.0), (4, 0.5), (5, 0.25), (8, -0.5), (7, 3.0)]:
        got = mx.fft.fftfreq(n, d=d)
        assert got.dtype == mx.float32
        np.testing.assert_array_equal(np.array(got), np.fft.fftfreq(n, d=d).astype(np.float32))
        np.testing.assert_array_equal(np.array(mx.fft.rfftfreq(n, d=d)), np.fft.rfftfreq(n, d=d).astype(np.float32))
    with pytest.raises(ValueError):
        mx.fft.fftshift(mx.array(x), axes=[2])
    with pytest.raises(ValueError):
        mx.fft.fftfreq(0)
    with pytest.raises(ValueError):
        mx.fft.rfftfreq(4, d=0.0)
    empty = mx.array([])
    assert mx.fft.fftshift(empty).shape == (0,)


def _finite_difference(f, x, h=1e-3):
    g = np.zeros(x.shape, np.complex128 if np.iscomplexobj(x) else np.float64)
    for idx in np.ndindex(x.shape):
        for unit in ((1, 1j) if np.iscomplexobj(x) else (1,)):
            step = np.zeros(x.shape, g.dtype)
            step[idx] = h * unit
            g[idx] += (f(x + step) - f(x - step)) / (2 * h) * unit
    return g


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 5)])
def test_gradients_match_finite_differences(on_cpu, rng, name, shape):
    real_input = name == "rfftn"
    x = rng.standard_normal(shape) if real_input else c64(rng, shape).astype(np.complex128)
    ours, numpys = getattr(mx.fft, name), getattr(np.fft, name)

    def loss_np(v):
        return np.sum(np.abs(numpys(v)) ** 2 + np.real(numpys(v)))

    def loss_mx(v):
        y = ours(v)
        return mx.sum(mx.abs(y) ** 2 + mx.real(y))

    g = mx.grad(loss_mx)(mx.array(x, dtype=mx.float32 if real_input else mx.complex64))
    np.testing.assert_allclose(np.array(g), _finite_difference(loss_np, x), rtol=2e-3, atol=2e-3)


def test_vmap_jvp_and_compile(on_cpu, rng):
    a = c64(rng, (3, 8, 6))
    for f in (lambda v: mx.fft.fftn(v, axes=(-1, 0)), lambda v: mx.fft.irfftn(v, axes=(0, 1))):
        expected = mx.stack([f(mx.array(a[i])) for i in range(3)])
        np.testing.assert_allclose(np.array(mx.vmap(f)(mx.array(a))), np.array(expected), rtol=1e-5, atol=1e-5)
    t = c64(rng, (8, 6))
    _, (j,) = mx.jvp(mx.fft.fft2, [mx.array(a[0])], [mx.array(t)])
    close(j, np.fft.fft2(t))
    g = mx.compile(lambda v: mx.fft.irfft(mx.fft.rfft(v) * 2))
    r = rng.standard_normal((4, 10)).astype(np.float32)
    close(g(mx.array(r)), 2 * r)


def test_bad_arguments_raise(on_cpu):
    with pytest.raises(ValueError):
        mx.fft.irfftn(mx.array(3.0))
    with pytest.raises(ValueError, match="norm"):
        mx.fft.fft(mx.array([1.0]), norm="invalid")
    with pytest.raises(ValueError, match="twice"):
        mx.fft.fftn(mx.zeros((2, 2)), axes=(0, 0))
    with pytest.raises(ValueError, match="length"):
        mx.fft.fft(mx.zeros(4), n=0)
    with pytest.raises(ValueError, match="real"):
        mx.fft.rfft(mx.array([1j, 2]))
