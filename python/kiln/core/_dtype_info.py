"""Facts about dtypes as mlx gives them: ``finfo`` (float limits), ``iinfo`` (integer limits),
``result_type`` (the dtype that arithmetic between arrays and dtypes promotes to) and
``can_cast`` (whether a conversion keeps every value)."""

from __future__ import annotations

from kiln.core._numpy import numpy as _np
from kiln._core import Dtype, array, bfloat16, complex64, float32, issubdtype, floating, integer, where, zeros

# bfloat16's largest finite value (numpy has no bfloat16 to ask).
_BFLOAT16_MAX = float.fromhex("0x1.fep127")


class finfo:
    """Limits of a floating point dtype: ``min``, ``max``, ``eps``, ``smallest_normal``,
    ``bits`` and ``dtype``. complex64 gives the limits of its float32 parts, as numpy."""

    def __init__(self, dtype: Dtype):
        if dtype == complex64:
            dtype = float32
        if not isinstance(dtype, Dtype) or not issubdtype(dtype, floating):
            raise ValueError(f"[finfo] dtype must be a floating point or complex type, got {dtype}")
        self.dtype = dtype
        if dtype == bfloat16:
            self.bits, self.max, self.eps, self.smallest_normal = 16, _BFLOAT16_MAX, 2.0**-7, 2.0**-126
        else:
            info = _np().finfo(f"float{dtype.size * 8}")
            self.bits, self.max, self.eps = info.bits, float(info.max), float(info.eps)
            self.smallest_normal = float(info.smallest_normal)
        self.min = -self.max

    def __repr__(self) -> str:
        return f"finfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


class iinfo:
    """Limits of an integer dtype: ``min``, ``max`` and ``dtype``."""

    def __init__(self, dtype: Dtype):
        if not isinstance(dtype, Dtype) or not issubdtype(dtype, integer):
            raise ValueError(f"[iinfo] dtype must be an integer type, got {dtype}")
        self.dtype = dtype
        name = str(dtype).rsplit(".", 1)[-1]
        info = _np().iinfo(name)
        self.min, self.max = int(info.min), int(info.max)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def result_type(*arrays_and_dtypes) -> Dtype:
    """The dtype that combining the given arrays and dtypes promotes to (as an op such as
    ``where`` or ``add`` would)."""
    if not arrays_and_dtypes:
        raise ValueError("[result_type] give at least one array or dtype")
    out = None
    for a in arrays_and_dtypes:
        if isinstance(a, array):
            d = a.dtype
        elif isinstance(a, Dtype):
            d = a
        else:
            raise TypeError(f"[result_type] expected arrays and dtypes, got {type(a).__name__}")
        value = zeros((1,), d)
        out = value if out is None else where(array(True), out, value)
    return out.dtype


def can_cast(from_, to) -> bool:
    """Whether ``from_`` (a dtype, or an array's dtype) converts to ``to`` without losing values:
    combining the two gives ``to`` (int8 to int16 yes, int16 to int8 no, uint16 to int16 no)."""
    source = from_.dtype if isinstance(from_, array) else from_
    for name, d in (("from_", source), ("to", to)):
        if not isinstance(d, Dtype):
            raise TypeError(f"[can_cast] {name} must be a dtype or an array, got {type(d).__name__}")
    return result_type(source, to) == to
