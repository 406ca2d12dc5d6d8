"""mlx's print options: ``set_printoptions``, ``get_printoptions`` and the ``printoptions``
context. The one option is ``precision``: the decimals floats print with, or -1 (the default)
for 6 significant digits, as C's ``%g``. The setting is process-wide, as in mlx."""

from __future__ import annotations

import contextlib

from kiln import _core


class PrintOptions:
    """The print options in force: ``precision`` (decimals, or -1 for 6 significant digits)."""

    def __init__(self, precision: int = -1):
        self.precision = precision

    def __repr__(self) -> str:
        return f"PrintOptions(precision={self.precision})"


def _apply(precision: int) -> int:
    if not isinstance(precision, int) or isinstance(precision, bool):
        raise TypeError(f"[set_printoptions] precision must be an int, got {type(precision).__name__}")
    previous = _core._set_print_precision(None if precision < 0 else precision)
    return -1 if previous is None else previous


def get_printoptions() -> PrintOptions:
    """The print options in force."""
    current = _core._print_precision()
    return PrintOptions(-1 if current is None else current)


def set_printoptions(precision: int = -1) -> None:
    """Prints floats with ``precision`` decimals from now on (-1: 6 significant digits)."""
    _apply(precision)


@contextlib.contextmanager
def printoptions(precision: int = -1):
    """Prints floats with ``precision`` decimals inside the ``with`` block."""
    previous = _apply(precision)
    try:
        yield
    finally:
        _apply(previous)
