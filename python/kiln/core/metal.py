"""``mx.metal`` as in mlx, for code that asks which GPU backend it has: kiln's GPUs are NVIDIA
ones (``mx.cuda``), so Metal is never available."""


def is_available() -> bool:
    """Whether the Metal backend can be used: never, in kiln."""
    return False
