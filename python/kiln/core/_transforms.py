"""The function transforms over pytrees: ``grad``, ``value_and_grad`` (argnums, argnames),
``vjp``, ``jvp``, ``vmap`` (in_axes, out_axes), ``checkpoint`` and ``custom_function``.

Each flattens its arguments into a list of arrays, hands a flat version of the function to the
native transform, and rebuilds the results' structure. Non-array leaves pass through unchanged
and are not differentiated.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Union

from kiln import _core
from kiln._core import array
from kiln.core._pytree import fill_in_place, flatten, restore_in_place


def _as_list(out: Any) -> list:
    """A function's result as a list of arrays (an array, or a list or tuple of them)."""
    if isinstance(out, array):
        return [out]
    if isinstance(out, (list, tuple)) and all(isinstance(o, array) for o in out):
        return list(out)
    raise ValueError(f"the function must return an array or a list or tuple of arrays, got {type(out).__name__}")


class _Flat:
    """A function of flat lists of arrays for the native transforms: ``call`` maps the input
    arrays to a result pytree; the result's structure is kept to rebuild the outputs."""

    def __init__(self, call: Callable, empty_error: Optional[str] = None):
        self.call = call
        self.empty_error = empty_error
        self.out_def = None

    def __call__(self, xs: list) -> list:
        leaves, self.out_def = flatten(self.call(xs))
        if not leaves and self.empty_error:
            raise ValueError(self.empty_error)
        return leaves

    def rebuild(self, outs: list) -> Any:
        """The result pytree with ``outs`` in its array positions."""
        return self.out_def.unflatten(outs)


def vjp(fun: Callable, primals: Sequence[array], cotangents: Sequence[array]):
    """``(outputs, vjps)``: ``fun``'s outputs at ``primals`` and the vector-Jacobian products
    with ``cotangents`` (one per output), one per primal."""
    flat = lambda args: _as_list(fun(*args))
    outs, grads = _core._vjp(flat, list(primals), list(cotangents))
    return outs, grads


def jvp(fun: Callable, primals: Sequence[array], tangents: Sequence[array]):
    """``(outputs, jvps)``: ``fun``'s outputs at ``primals`` and the Jacobian-vector products
    with ``tangents`` (one per primal), one per output."""
    flat = lambda args: _as_list(fun(*args))
    return _core._jvp(flat, list(primals), list(tangents))


def _argument_numbers(argnums: Any, names: tuple, tag: str) -> tuple:
    """``argnums`` as a tuple of distinct non-negative ints (mlx's rules), checked when the
    transform is made."""
    if argnums is None:
        return () if names else (0,)
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not isinstance(nums, (list, tuple)) or not all(isinstance(n, int) for n in nums):
        raise TypeError(f"{tag}: argnums must be an int or a sequence of ints, got {argnums!r}")
    nums = tuple(nums)
    if not nums and not names:
        raise ValueError(f"{tag}: no argument to differentiate (argnums is empty and argnames is not given)")
    if any(n < 0 for n in nums):
        raise ValueError(f"{tag}: argnums must not be negative, got {argnums!r}")
    if len(set(nums)) != len(nums):
        raise ValueError(f"{tag}: argnums {argnums!r} names an argument twice")
    return nums


def _loss_of(out: Any, tag: str, scalar_only: bool) -> Any:
    """Checks what the differentiated function returned: a scalar array (grad), or for
    value_and_grad also a non-empty tuple whose first element is one (the rest are auxiliary
    values, returned as they are)."""
    first = out
    if not isinstance(out, array):
        if scalar_only or not isinstance(out, tuple) or not out or not isinstance(out[0], array):
            wanted = "a scalar array" if scalar_only else "a scalar array, or a tuple whose first element is one"
            got = f"a tuple whose first element is a {type(out[0]).__name__}" if isinstance(out, tuple) and out else f"a {type(out).__name__}"
            raise ValueError(f"{tag}: the function must return {wanted}, got {got}")
        first = out[0]
    if first.ndim != 0:
        raise ValueError(f"{tag}: the function must return a scalar (0-d) array to differentiate, got shape {first.shape}")
    return out


def _value_and_grad(fun: Callable, argnums: Any, argnames: Any, tag: str, scalar_only: bool) -> Callable:
    names = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    nums = _argument_numbers(argnums, names, tag)
    # As in mlx, one argument number gives its gradient alone, even when passed as a sequence.
    single = len(nums) == 1

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        for n in nums:
            if n >= len(args):
                raise ValueError(f"{tag}: argnums {n} is out of range for {len(args)} positional arguments")
        for name in names:
            if name not in kwargs:
                raise ValueError(f"{tag}: argname '{name}' was not passed as a keyword argument")
        # Only the differentiated arguments are flattened; the others reach `fun` unchanged
        # (a model passed alongside its parameters stays a model).
        positions = list(nums)
        selected = [args[i] for i in positions] + [kwargs[k] for k in names]
        leaves, treedef = flatten(selected)
        if treedef.has_constants():
            raise ValueError(f"{tag}: the differentiated arguments must be arrays or trees of arrays only")

        def call(xs):
            # The tracers go into the caller's own lists and dicts (mlx's rule): entries the
            # function overwrites keep the new value, the others get their arrays back.
            trees = fill_in_place(list(selected), xs)
            try:
                a, kw = list(args), dict(kwargs)
                for tree, i in zip(trees, positions):
                    a[i] = tree
                for tree, k in zip(trees[len(positions) :], names):
                    kw[k] = tree
                return _loss_of(fun(*a, **kw), tag, scalar_only)
            finally:
                restore_in_place(selected, xs, leaves)

        flat = _Flat(call, f"{tag}: the function must return a scalar array (or a tuple starting with one)")
        outs, grads = _core._value_and_grad(flat, leaves, list(range(len(leaves))))
        value = flat.rebuild(outs)
        trees = treedef.unflatten(grads)
        pos_trees = trees[: len(positions)]
        pos_grads = pos_trees[0] if single else tuple(pos_trees)
        if names:
            kw_grads = dict(zip(names, trees[len(positions) :]))
            return value, (pos_grads if nums else None, kw_grads)
        return value, pos_grads

    return wrapper


def value_and_grad(fun: Callable, argnums: Union[None, int, Sequence[int]] = None, argnames: Union[str, Sequence[str]] = ()):
    """A function returning ``(value, grads)``: ``fun``'s result and its gradient with respect to
    the positional arguments ``argnums`` (default 0 unless ``argnames`` is given; distinct and
    non-negative, as in mlx) and the keyword arguments ``argnames``. ``fun`` returns a scalar
    loss, or a tuple whose first element is one (the rest are returned with it, undifferentiated).
    With ``argnames``, grads is ``(positional grads, {name: grad})``."""
    return _value_and_grad(fun, argnums, argnames, "value_and_grad", scalar_only=False)


def grad(fun: Callable, argnums: Union[None, int, Sequence[int]] = None, argnames: Union[str, Sequence[str]] = ()):
    """A function returning the gradient of ``fun``, which returns a scalar array (see
    ``value_and_grad``, which also allows auxiliary values)."""
    vg = _value_and_grad(fun, argnums, argnames, "grad", scalar_only=True)

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return wrapper


def _axes_per_leaf(axes: Any, tree: Any, what: str) -> list:
    """An ``in_axes`` entry (an int, None, or a pytree prefix of ``tree``) spread over its leaves."""
    if axes is None or isinstance(axes, int):
        return [axes] * len(flatten(tree)[0])
    if isinstance(tree, (list, tuple)) and isinstance(axes, (list, tuple)) and len(axes) == len(tree):
        return [x for a, t in zip(axes, tree) for x in _axes_per_leaf(a, t, what)]
    if isinstance(tree, dict) and isinstance(axes, dict) and axes.keys() == tree.keys():
        return [x for k in tree for x in _axes_per_leaf(axes[k], tree[k], what)]
    raise ValueError(f"vmap: {what} {axes!r} does not match the structure of the arguments")


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0):
    """``fun`` mapped over axis ``in_axes`` of its arguments (an int, None for unmapped, or a
    pytree per argument); the outputs get their mapped axis at ``out_axes``."""

    @functools.wraps(fun)
    def wrapper(*args):
        # A list or tuple has an entry per argument; anything else (an int, None, a dict) is
        # every argument's, as in mlx.
        spec = in_axes if isinstance(in_axes, (list, tuple)) else [in_axes] * len(args)
        if isinstance(spec, (list, tuple)) and len(spec) != len(args):
            raise ValueError(f"vmap: in_axes has {len(spec)} entries for {len(args)} arguments")
        flat_axes = _axes_per_leaf(tuple(spec) if isinstance(spec, list) else spec, tuple(args), "in_axes")
        leaves, treedef = flatten(tuple(args))
        flat = _Flat(lambda xs: fun(*treedef.unflatten(xs)))
        if out_axes is None or isinstance(out_axes, int):
            return flat.rebuild(_core._vmap(flat, leaves, flat_axes, [out_axes]))
        outs = _core._vmap(flat, leaves, flat_axes, [0])
        tree = flat.rebuild(outs)
        spec_out = out_axes
        if isinstance(out_axes, (list, tuple)) and len(out_axes) == 1 and not isinstance(tree, (list, tuple)):
            # One output matched by a one-entry sequence, as mlx allows (out_axes=(1,)).
            spec_out = out_axes[0]
        per_leaf = _axes_per_leaf(spec_out, tree, "out_axes")
        if any(a is None for a in per_leaf):
            raise ValueError("vmap: None inside a pytree of out_axes is not supported; pass a single None")
        moved = [o if a == 0 else _core.moveaxis(o, 0, a) for o, a in zip(outs, per_leaf)]
        return flat.rebuild(moved)

    return wrapper


def checkpoint(fun: Callable):
    """``fun`` whose gradient recomputes its forward pass instead of storing intermediates."""

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        leaves, treedef = flatten((args, kwargs))

        def call(xs):
            a, kw = treedef.unflatten(xs)
            return fun(*a, **kw)

        flat = _Flat(call)
        return flat.rebuild(_core._checkpoint(flat, leaves))

    return wrapper


def _one_or_all(args: tuple):
    """The arguments as mlx hands them to a custom rule: the one argument itself, or the tuple."""
    return args[0] if len(args) == 1 else args


class custom_function:
    """A function with its own derivative rules, as mlx's ``custom_function``::

        @custom_function
        def f(x): ...

        @f.vjp
        def f_vjp(primals, cotangent, output): ...   # one cotangent per primal

    ``jvp(primals, tangents)`` returns the output tangents and ``vmap(args, axes)`` returns
    ``(outputs, axes)``. As in mlx, a function of one argument gets that argument (and its
    tangent or axis) itself, one of several arguments gets them as a tuple. Rules not given fall
    back to differentiating ``f`` itself.
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._vjp = self._jvp = self._vmap = None

    def vjp(self, rule: Callable):
        self._vjp = rule
        return self

    def jvp(self, rule: Callable):
        self._jvp = rule
        return self

    def vmap(self, rule: Callable):
        self._vmap = rule
        return self

    def __call__(self, *args):
        leaves, treedef = flatten(tuple(args))
        flat = _Flat(lambda xs: self._fun(*treedef.unflatten(xs)))
        vjp_rule = jvp_rule = vmap_rule = None
        if self._vjp is not None:

            def vjp_rule(primals, cotangents, outputs):
                grads = self._vjp(_one_or_all(treedef.unflatten(primals)), flat.rebuild(cotangents), flat.rebuild(outputs))
                return flatten(grads)[0]

        if self._jvp is not None:

            def jvp_rule(primals, tangents):
                return flatten(self._jvp(_one_or_all(treedef.unflatten(primals)), _one_or_all(treedef.unflatten(tangents))))[0]

        if self._vmap is not None:

            def vmap_rule(xs, axes):
                outs, out_axes = self._vmap(_one_or_all(treedef.unflatten(xs)), _one_or_all(treedef.unflatten(list(axes))))
                flat_outs = flatten(outs)[0]
                flat_axes = out_axes if isinstance(out_axes, (list, tuple)) else [out_axes] * len(flat_outs)
                return flat_outs, list(flat_axes)

        name = getattr(self._fun, "__name__", "custom_function")
        return flat.rebuild(_core._custom_function(name, flat, leaves, vjp_rule, jvp_rule, vmap_rule))
