"""Argument checks shared by the parts of the package written in Python (``mx.fast``'s layers,
``nn``'s layers and losses): a wrong argument is a TypeError or ValueError naming the function and
the argument, as mlx's typed signatures give, never an AttributeError or ZeroDivisionError from
deep inside."""

from __future__ import annotations

import numbers

from kiln._core import array


def require_array(op: str, name: str, value, optional: bool = False):
    """``value`` when it is an array (or None, where ``optional``); else a TypeError."""
    if isinstance(value, array) or (optional and value is None):
        return value
    wanted = "an array or None" if optional else "an array"
    raise TypeError(f"{op}: {name} must be {wanted}, got {type(value).__name__}")


def require_positive(op: str, **sizes) -> None:
    """Each of ``sizes`` is a positive integer; else a TypeError (not an integer) or ValueError."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{op}: {name} must be a positive integer, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{op}: {name} must be a positive integer, got {value}")
