"""kiln.core: arrays, dtypes, devices, ops, transforms and ``compile``, with mlx.core's names and
arguments (``import kiln.core as mx``).

The array type and the ops are native (``kiln._core``); the transforms and ``compile`` are
written here over pytrees on top of native versions that take flat lists of arrays.
"""

from kiln._core import *  # noqa: F401,F403
from kiln._core import __version__  # noqa: F401

del fast, fft, linalg, random  # noqa: F821 (native submodules: the modules of kiln.core wrap them)
from kiln.core import cuda, distributed, fast, fft, linalg, metal, random  # noqa: E402,F401
from kiln.core._compile import compile  # noqa: E402,F401
from kiln.core._composite import (  # noqa: E402,F401
    broadcast_shapes,
    e,
    euler_gamma,
    inf,
    isdtype,
    nan,
    newaxis,
    pi,
)
from kiln.core._dtype_info import can_cast, finfo, iinfo, result_type  # noqa: E402,F401
from kiln.core._graph import export_to_dot  # noqa: E402,F401
from kiln.core._print import PrintOptions, get_printoptions, printoptions, set_printoptions  # noqa: E402,F401
from kiln.core._io import load, save, save_gguf, save_safetensors, savez, savez_compressed  # noqa: E402,F401
from kiln.core._transforms import (  # noqa: E402,F401
    checkpoint,
    custom_function,
    grad,
    jvp,
    value_and_grad,
    vjp,
    vmap,
)

#: The complex conjugate: mlx's short name for ``conjugate``.
conj = conjugate  # noqa: F405
