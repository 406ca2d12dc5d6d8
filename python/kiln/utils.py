"""Pytree utilities, as in ``mlx.utils``: nested lists, tuples and dicts (``nn.Module`` is a dict)
whose leaves are arrays or other values.

- ``tree_flatten(tree, prefix="", is_leaf=None)`` lists ``(path, leaf)`` pairs, paths joined by
  dots (``"layers.0.weight"``); ``tree_unflatten`` rebuilds the tree from such pairs.
- ``tree_map(fn, tree, *rest, is_leaf=None)`` applies ``fn`` leafwise across trees of one
  structure.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


def _children(tree: Any):
    """(kind, keys) of a container node, or None for a leaf."""
    if isinstance(tree, dict):
        return "dict", list(tree.keys())
    if isinstance(tree, (list, tuple)):
        return type(tree), list(range(len(tree)))
    return None


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None) -> Any:
    """Applies ``fn`` to the leaves of ``tree`` (and the matching leaves of ``rest``)."""
    if is_leaf is not None and is_leaf(tree):
        return fn(tree, *rest)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v, *(r[k] for r in rest), is_leaf=is_leaf) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [tree_map(fn, v, *(r[i] for r in rest), is_leaf=is_leaf) for i, v in enumerate(tree)]
        if isinstance(tree, tuple):
            return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
        return items
    return fn(tree, *rest)


def tree_flatten(tree: Any, prefix: str = "", is_leaf: Optional[Callable] = None) -> list:
    """The ``(path, leaf)`` pairs of ``tree`` in order."""
    out = []

    def walk(node, path):
        if is_leaf is not None and is_leaf(node):
            out.append((path, node))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{path}.{i}" if path else str(i))
        else:
            out.append((path, node))

    walk(tree, prefix[1:] if prefix.startswith(".") else prefix)
    return out


def tree_unflatten(tree: list) -> Any:
    """Rebuilds a tree from ``(path, leaf)`` pairs; all-integer keys make lists."""
    if len(tree) == 1 and tree[0][0] == "":
        return tree[0][1]
    children: dict = {}
    for path, value in tree:
        head, _, rest = path.partition(".")
        children.setdefault(head, []).append((rest, value))
    if all(k.isdigit() for k in children):
        ordered = sorted(children.items(), key=lambda kv: int(kv[0]))
        return [tree_unflatten(v) for _, v in ordered]
    return {k: tree_unflatten(v) for k, v in children.items()}


def tree_reduce(fn: Callable, tree: Any, initializer: Any = None, is_leaf: Optional[Callable] = None) -> Any:
    """Folds ``fn(accumulator, leaf)`` over the leaves of ``tree``."""
    acc = initializer
    for i, (_, leaf) in enumerate(tree_flatten(tree, is_leaf=is_leaf)):
        acc = leaf if (acc is None and i == 0 and initializer is None) else fn(acc, leaf)
    return acc
