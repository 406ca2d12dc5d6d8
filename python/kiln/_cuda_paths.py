"""Tells kiln's native core where NVIDIA's Python wheels keep the CUDA libraries it loads at run
time (NVRTC, cuBLAS), so ``pip install nvidia-cuda-nvrtc`` is enough without a CUDA toolkit."""

import glob
import os
import site
import sys


def wheel_library_dirs():
    """The ``nvidia/*/lib`` folders of every site-packages folder on the path."""
    roots = list(sys.path)
    try:
        roots += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs of old Pythons lack these
        pass
    dirs = []
    for root in roots:
        for d in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
            if d not in dirs:
                dirs.append(d)
    return dirs


def export():
    """Adds the folders to ``KILN_CUDA_WHEEL_PATH`` (read when the GPU is first used)."""
    dirs = wheel_library_dirs()
    if dirs:
        old = os.environ.get("KILN_CUDA_WHEEL_PATH")
        os.environ["KILN_CUDA_WHEEL_PATH"] = os.pathsep.join(dirs + ([old] if old else []))
