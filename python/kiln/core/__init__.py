"""kiln.core: arrays, dtypes, devices and ops, with mlx.core's names and arguments.

The array type and the ops are native (``kiln._core``); this package re-exports them.
"""

from kiln._core import *  # noqa: F401,F403
from kiln._core import __version__  # noqa: F401
