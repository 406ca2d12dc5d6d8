"""Pytree utilities, as in ``mlx.utils``: nested lists, tuples and dicts (``nn.Module`` is a dict)
whose leaves are arrays or other values.

- ``tree_flatten(tree, prefix="", is_leaf=None)`` lists ``(path, leaf)`` pairs, paths joined by
  dots (``"layers.0.weight"``); ``tree_unflatten`` rebuilds the tree from such pairs.
- ``tree_map(fn, tree, *rest, is_leaf=None)`` applies ``fn`` leafwise across trees of one
  structure; ``tree_map_with_path`` passes each leaf's path first.
- ``tree_merge(a, b, merge_fn=None)`` joins two trees whose leaves do not overlap (or merges
  overlapping leaves with ``merge_fn``), a deep ``dict.update``.

Tuples keep their type: a NamedTuple or another tuple subclass maps to the same type.
"""

from __future__ import annotations

from itertools import zip_longest
from typing import Any, Callable, Optional

from kiln.core._pytree import rebuild_tuple


def _children(tree: Any):
    """(kind, keys) of a container node, or None for a leaf."""
    if isinstance(tree, dict):
        return "dict", list(tree.keys())
    if isinstance(tree, (list, tuple)):
        return type(tree), list(range(len(tree)))
    return None


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None) -> Any:
    """Applies ``fn`` to the leaves of ``tree`` (and the matching leaves of ``rest``)."""
    return tree_map_with_path(lambda _, *leaves: fn(*leaves), tree, *rest, is_leaf=is_leaf)


def tree_map_with_path(
    fn: Callable, tree: Any, *rest: Any, is_leaf: Optional[Callable] = None, path: Optional[str] = None
) -> Any:
    """Applies ``fn(path, leaf, *matching_leaves)`` to the leaves of ``tree``, the path as
    ``tree_flatten`` writes it (``"layers.0.weight"``)."""
    def at(key) -> str:
        return f"{path}.{key}" if path else str(key)

    if is_leaf is not None and is_leaf(tree):
        return fn(path, tree, *rest)
    if isinstance(tree, dict):
        return {k: tree_map_with_path(fn, v, *(r[k] for r in rest), is_leaf=is_leaf, path=at(k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        items = [tree_map_with_path(fn, v, *(r[i] for r in rest), is_leaf=is_leaf, path=at(i)) for i, v in enumerate(tree)]
        return rebuild_tuple(type(tree), items) if isinstance(tree, tuple) else items
    return fn(path, tree, *rest)


def tree_merge(tree_a: Any, tree_b: Any, merge_fn: Optional[Callable] = None) -> Any:
    """One tree holding the leaves of both: ``None`` and empty containers are empty subtrees,
    dicts join their keys, lists and tuples join position by position. Two leaves at one place
    are merged by ``merge_fn(a, b)``, or are a ``ValueError`` without it."""
    def empty(t) -> bool:
        return isinstance(t, (dict, list, tuple)) and len(t) == 0

    if tree_a is None or tree_b is None:
        return tree_b if tree_a is None else tree_a

    if empty(tree_a) and empty(tree_b):
        if type(tree_a) is not type(tree_b):
            raise ValueError(f"tree_merge: cannot merge an empty {type(tree_a).__name__} with an empty {type(tree_b).__name__}")
        return type(tree_a)()
    a = None if empty(tree_a) else tree_a
    b = None if empty(tree_b) else tree_b
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        items = [tree_merge(x, y, merge_fn) for x, y in zip_longest(a, b)]
        return rebuild_tuple(type(a), items) if isinstance(a, tuple) else items
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: tree_merge(a.get(k), b.get(k), merge_fn) for k in {**a, **b}}
    if merge_fn is None:
        raise ValueError(
            f"tree_merge: both trees hold a value at the same place ({type(a).__name__} and {type(b).__name__}); "
            "pass merge_fn to combine them"
        )
    return merge_fn(a, b)


def tree_flatten(tree: Any, prefix: str = "", is_leaf: Optional[Callable] = None, destination=None):
    """The ``(path, leaf)`` pairs of ``tree`` in order: a list, or added to ``destination`` (a
    list, or a dict from path to leaf) and that returned."""
    out: list = []

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
    if destination is None:
        return out
    if isinstance(destination, dict):
        destination.update(out)
    elif isinstance(destination, list):
        destination.extend(out)
    else:
        raise TypeError(f"tree_flatten: destination must be a list or dict, got {type(destination).__name__}")
    return destination


def tree_unflatten(tree: list) -> Any:
    """Rebuilds a tree from ``(path, leaf)`` pairs; keys that are all canonical integers (``"1"``,
    not ``"01"``) make lists (with ``{}`` at indices no path names), any other keys a dict."""
    if len(tree) == 1 and tree[0][0] == "":
        return tree[0][1]
    children: dict = {}
    for path, value in tree:
        head, _, rest = path.partition(".")
        children.setdefault(head, []).append((rest, value))
    if all(k.isascii() and k.isdecimal() and str(int(k)) == k for k in children):
        # Indices missing from the paths are {} (as in the trees of modules' lists).
        out: list = [{} for _ in range(max(int(k) for k in children) + 1)] if children else []
        for k, v in children.items():
            out[int(k)] = tree_unflatten(v)
        return out
    return {k: tree_unflatten(v) for k, v in children.items()}


def tree_reduce(fn: Callable, tree: Any, initializer: Any = None, is_leaf: Optional[Callable] = None) -> Any:
    """Folds ``fn(accumulator, leaf)`` over the leaves of ``tree``."""
    acc = initializer
    for i, (_, leaf) in enumerate(tree_flatten(tree, is_leaf=is_leaf)):
        acc = leaf if (acc is None and i == 0 and initializer is None) else fn(acc, leaf)
    return acc
