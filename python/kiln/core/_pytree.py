"""Flattening of pytrees for the transforms and ``compile``: the arrays of a nested structure of
lists, tuples and dicts, in order, and a structure description (a ``Treedef``) that holds
everything else (the containers, dict keys, and non-array leaves, which ``compile`` treats as
constants) and rebuilds the tree from new arrays.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from kiln._core import array

_ARRAY = object()  # marks where an array leaf goes in a Treedef


class Treedef:
    """The structure of a pytree with its array leaves taken out."""

    __slots__ = ("node", "count")

    def __init__(self, node: Any, count: int):
        self.node = node
        self.count = count

    def key(self) -> str:
        """A string naming the structure and its constants, for cache keys. Fails with a
        ``ValueError`` on a constant compile cannot key on. Computed once per structure."""
        try:
            return _KEYS[self.node]
        except KeyError:
            if len(_KEYS) > 4096:
                _KEYS.clear()
            k = _KEYS[self.node] = _key(self.node)
            return k
        except TypeError:  # an unhashable constant: _key names it in its error
            return _key(self.node)

    def unflatten(self, leaves: List[array]) -> Any:
        """The tree with ``leaves`` in the array positions."""
        it = iter(leaves)
        return _build(self.node, it)

    def has_constants(self) -> bool:
        """Whether the tree had leaves other than arrays (which the differentiating transforms
        refuse, as mlx does)."""
        return _has_constants(self.node)


def _has_constants(node) -> bool:
    if node is _ARRAY:
        return False
    if node[0] == "const":
        return True
    children = node[2] if node[0] == "dict" else node[1]
    return any(_has_constants(c) for c in children)


def flatten(tree: Any) -> Tuple[List[array], Treedef]:
    """The array leaves of ``tree`` and its structure."""
    leaves: List[array] = []
    node = _walk(tree, leaves)
    return leaves, Treedef(node, len(leaves))


def _walk(tree, leaves):
    if isinstance(tree, array):
        leaves.append(tree)
        return _ARRAY
    if isinstance(tree, dict):
        return ("dict", tuple(tree.keys()), tuple(_walk(v, leaves) for v in tree.values()))
    if isinstance(tree, tuple):
        return ("tuple", tuple(_walk(v, leaves) for v in tree), type(tree))
    if isinstance(tree, list):
        return ("list", tuple(_walk(v, leaves) for v in tree))
    # The type and, for floats, the repr make the node compare and hash like the cache key:
    # 1, 1.0 and True differ, and so do 0.0 and -0.0.
    return ("const", tree, type(tree), repr(tree) if isinstance(tree, float) else None)


def fill_in_place(tree: Any, leaves: List[array]) -> Any:
    """``tree`` with ``leaves`` in its array positions (in ``flatten``'s order), its lists and
    dicts written in place and its tuples rebuilt: the differentiating transforms hand their
    tracers to a function inside the caller's own containers, as mlx does, so writes the function
    makes into them stay (see ``restore_in_place``)."""
    return _fill(tree, iter(leaves))


def _fill(tree, it):
    if isinstance(tree, array):
        return next(it)
    if isinstance(tree, dict):
        for k, v in tree.items():
            tree[k] = _fill(v, it)
        return tree
    if isinstance(tree, list):
        for i, v in enumerate(tree):
            tree[i] = _fill(v, it)
        return tree
    if isinstance(tree, tuple):
        return rebuild_tuple(type(tree), [_fill(v, it) for v in tree])
    return tree


def restore_in_place(tree: Any, placed: List[array], originals: List[array]) -> None:
    """Undoes ``fill_in_place`` in the lists and dicts of ``tree``: each array position that
    still holds the array placed there gets its original back; a position the function wrote
    keeps what it wrote."""
    _restore(tree, placed, originals, [0])


def _restore(tree, placed, originals, at):
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, (list, tuple)):
        items = list(enumerate(tree))
    else:
        return
    for k, v in items:
        if isinstance(v, array):
            i = at[0]
            at[0] += 1
            if i < len(placed) and v is placed[i] and not isinstance(tree, tuple):
                tree[k] = originals[i]
        else:
            _restore(v, placed, originals, at)


def rebuild_tuple(kind: type, items: list) -> tuple:
    """A tuple of type ``kind`` (a tuple, a NamedTuple or another tuple subclass) holding ``items``."""
    if kind is tuple:
        return tuple(items)
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def _build(node, it):
    if node is _ARRAY:
        return next(it)
    kind = node[0]
    if kind == "dict":
        return {k: _build(v, it) for k, v in zip(node[1], node[2])}
    if kind == "tuple":
        return rebuild_tuple(node[2], [_build(v, it) for v in node[1]])
    if kind == "list":
        return [_build(v, it) for v in node[1]]
    return node[1]


_CONSTANT_TYPES = (type(None), bool, int, float, str)

# Keys of the structures seen so far (a structure's node is hashable when its constants are).
_KEYS: dict = {}


def _key(node) -> str:
    if node is _ARRAY:
        return "A"
    kind = node[0]
    if kind == "dict":
        return "{" + ",".join(f"{k!r}:{_key(v)}" for k, v in zip(node[1], node[2])) + "}"
    if kind in ("tuple", "list"):
        open_, close = ("(", ")") if kind == "tuple" else ("[", "]")
        # A tuple subclass (a NamedTuple, say) is another structure than a plain tuple.
        named = "" if kind == "list" or node[2] is tuple else f"{node[2].__module__}.{node[2].__qualname__}"
        return named + open_ + ",".join(_key(v) for v in node[1]) + close
    value = node[1]
    if not isinstance(value, _CONSTANT_TYPES):
        raise ValueError(
            f"compile: unsupported argument type {type(value).__name__}; compiled functions take arrays, "
            "pytrees (lists, tuples, dicts) of arrays, and None, bool, int, float or str constants"
        )
    return f"{type(value).__name__}:{value!r}"


def replace_leaves(tree: Any, new: List[array]) -> None:
    """Writes ``new`` into the array positions of ``tree`` in place (lists and dicts; the state
    that ``compile(inputs=..., outputs=...)`` captures). Tuples are walked but cannot be
    written, so an array directly inside a tuple is an error."""
    it = iter(new)
    _replace(tree, it)


def _replace(tree, it):
    if isinstance(tree, dict):
        for k, v in tree.items():
            if isinstance(v, array):
                tree[k] = next(it)
            else:
                _replace(v, it)
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            if isinstance(v, array):
                tree[i] = next(it)
            else:
                _replace(v, it)
    elif isinstance(tree, tuple):
        for v in tree:
            if isinstance(v, array):
                raise ValueError("compile: captured state must keep its arrays in lists or dicts, not tuples")
            _replace(v, it)
