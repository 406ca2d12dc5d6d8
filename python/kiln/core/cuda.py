"""``mx.cuda`` as in mlx: whether kiln's CUDA backend can be used here."""

from kiln._core import gpu as _gpu
from kiln._core import is_available as _is_available


def is_available() -> bool:
    """Whether a GPU can run kiln's ops (the NVIDIA driver and a device are present)."""
    return _is_available(_gpu)
