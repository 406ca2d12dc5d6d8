"""kiln: a lazy array framework whose heart is ``compile``.

``kiln.core`` mirrors ``mlx.core``: code written for mlx runs after changing
``import mlx.core as mx`` to ``import kiln.core as mx``.
"""

from kiln import _cuda_paths

_cuda_paths.export()

from kiln import core  # noqa: E402

__version__ = core.__version__
