"""``mx.fast`` as in mlx: the layer ops (``rms_norm``, ``layer_norm``, ``rope``,
``scaled_dot_product_attention``: kiln's ``ops::fast``, each a compiled, fused composition) and
user GPU kernels from source strings.

``cuda_kernel`` builds a CUDA kernel from the body of a ``__global__`` function (kiln prints the
signature, the template constants and the CUDA toolkit's headers around it) and returns a
callable that runs it on the GPU. ``metal_kernel`` exists for code written for Apple GPUs and
says that kiln has no Metal backend.
"""

from kiln._core import fast as _native
CudaKernel = _native.CudaKernel
cuda_kernel = _native.cuda_kernel
rms_norm = _native.rms_norm
layer_norm = _native.layer_norm
rope = _native.rope
scaled_dot_product_attention = _native.scaled_dot_product_attention


def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True, atomic_outputs=False):
    """Metal kernels need Apple's Metal backend, which kiln does not have: use ``cuda_kernel``."""
    raise RuntimeError(
        f"[metal_kernel] kernel '{name}': kiln has no Metal backend (it runs on CPUs and NVIDIA GPUs); "
        "write the kernel in CUDA C and use mx.fast.cuda_kernel"
    )
