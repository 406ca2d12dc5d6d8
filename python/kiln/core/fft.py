"""kiln.core.fft: mlx.core.fft's discrete Fourier transforms.

The n-dimensional transforms are native (``kiln::ops::fft``, on rustfft, computed in float64 on
the CPU); the one- and two-dimensional forms, the shifts and the sample frequencies are written
here over them and kiln's ops.
"""

from kiln import _core as _c
from kiln._core import fft as _native

fftn = _native.fftn
ifftn = _native.ifftn
rfftn = _native.rfftn
irfftn = _native.irfftn


def _one(transform, a, n, axis, norm, stream):
    return transform(a, s=None if n is None else [n], axes=[axis], norm=norm, stream=stream)


def fft(a, n=None, axis=-1, norm="backward", *, stream=None):
    """The one-dimensional discrete Fourier transform along ``axis``, cropped or zero-padded to
    ``n`` values."""
    return _one(fftn, a, n, axis, norm, stream)


def ifft(a, n=None, axis=-1, norm="backward", *, stream=None):
    """The one-dimensional inverse discrete Fourier transform."""
    return _one(ifftn, a, n, axis, norm, stream)


def rfft(a, n=None, axis=-1, norm="backward", *, stream=None):
    """The transform of a real array along ``axis``: n // 2 + 1 complex values."""
    return _one(rfftn, a, n, axis, norm, stream)


def irfft(a, n=None, axis=-1, norm="backward", *, stream=None):
    """The inverse of ``rfft``: ``n`` real values (default 2 * (m - 1) for m inputs)."""
    return _one(irfftn, a, n, axis, norm, stream)


def fft2(a, s=None, axes=(-2, -1), norm="backward", *, stream=None):
    """The two-dimensional transform over ``axes``."""
    return fftn(a, s=s, axes=axes, norm=norm, stream=stream)


def ifft2(a, s=None, axes=(-2, -1), norm="backward", *, stream=None):
    """The two-dimensional inverse transform."""
    return ifftn(a, s=s, axes=axes, norm=norm, stream=stream)


def rfft2(a, s=None, axes=(-2, -1), norm="backward", *, stream=None):
    """The two-dimensional transform of a real array."""
    return rfftn(a, s=s, axes=axes, norm=norm, stream=stream)


def irfft2(a, s=None, axes=(-2, -1), norm="backward", *, stream=None):
    """The inverse of ``rfft2``."""
    return irfftn(a, s=s, axes=axes, norm=norm, stream=stream)


def _shift(name, a, axes, sign, stream):
    a = a if isinstance(a, _c.array) else _c.array(a)
    if axes is None:
        axes = list(range(a.ndim))
    elif isinstance(axes, int):
        axes = [axes]
    axes = list(axes)
    for ax in axes:
        if not isinstance(ax, int) or not -a.ndim <= ax < a.ndim:
            raise ValueError(f"[{name}] axis {ax!r} is out of range for an array of {a.ndim} dimensions")
    if not axes or a.size == 0:
        return a
    shifts = [sign * (a.shape[ax] // 2) for ax in axes]
    return _c.roll(a, shifts, axis=axes, stream=stream)


def fftshift(a, axes=None, *, stream=None):
    """Moves the zero-frequency term to the centre: a roll by n // 2 along each of ``axes``
    (default all)."""
    return _shift("fftshift", a, axes, 1, stream)


def ifftshift(a, axes=None, *, stream=None):
    """The inverse of ``fftshift``: a roll by -(n // 2)."""
    return _shift("ifftshift", a, axes, -1, stream)


def _check_length(name, n):
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ValueError(f"[{name}] n must be a positive integer, got {n!r}")


def _check_spacing(name, d):
    if float(d) == 0.0:
        raise ValueError(f"[{name}] the sample spacing d must be non-zero")


def fftfreq(n, d=1.0, *, stream=None):
    """The sample frequencies of an ``n``-point transform with spacing ``d``: 0, 1, ...,
    then the negative ones, over d * n (float32, each value rounded once from float64)."""
    _check_length("fftfreq", n)
    _check_spacing("fftfreq", d)
    k = _c.arange(n, dtype=_c.int64, stream=_c.cpu)
    k = _c.where(k < (n + 1) // 2, k, k - n, stream=_c.cpu)
    return _c.divide(k.astype(_c.float64, stream=_c.cpu), float(d) * n, stream=_c.cpu).astype(_c.float32, stream=stream)


def rfftfreq(n, d=1.0, *, stream=None):
    """The sample frequencies of an ``n``-point real transform: 0 ... n // 2, over d * n."""
    _check_length("rfftfreq", n)
    _check_spacing("rfftfreq", d)
    k = _c.arange(n // 2 + 1, dtype=_c.float64, stream=_c.cpu)
    return _c.divide(k, float(d) * n, stream=_c.cpu).astype(_c.float32, stream=stream)
