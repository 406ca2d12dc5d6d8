"""``export_to_dot``: the lazy graph behind arrays as Graphviz DOT text, as ``mlx.core``'s."""

from __future__ import annotations

from typing import Any

from kiln._core import _to_dot, array


def export_to_dot(file: Any, *args: Any, **kwargs: Any) -> None:
    """Writes the graph computing the arrays in ``args`` and ``kwargs`` (trees of arrays) to
    ``file``, a path or an object with ``write``, in DOT format: every op an eval would still
    run, back to the evaluated arrays it starts from. Keyword arguments also name their arrays
    in the graph (others are named ``A0``, ``A1``, ...). Draw it with ``dot -Tsvg``."""
    from kiln.utils import tree_flatten

    arrays = []
    for path, leaf in tree_flatten((args, kwargs)):
        if not isinstance(leaf, array):
            raise TypeError(
                f"[export_to_dot] the outputs must be arrays or trees of arrays; "
                f"{path or 'an argument'} is a {type(leaf).__name__}"
            )
        arrays.append(leaf)
    names = [(value, name) for name, value in kwargs.items() if isinstance(value, array)]
    text = _to_dot(arrays, names)
    if isinstance(file, str):
        with open(file, "w") as f:
            f.write(text)
    elif hasattr(file, "write"):
        file.write(text)
    else:
        raise ValueError(
            f"[export_to_dot] file must be a path (str) or an object with a write method, "
            f"not a {type(file).__name__}"
        )
