"""``nn.Module``: a dict of parameters (arrays) and submodules, as mlx's.

Arrays, modules, lists and dicts assigned as attributes become dict items, so a module is a
pytree: ``parameters()`` is its nested dict of arrays, ``update()`` writes new arrays into it in
place, and ``state`` (the module itself) can be captured by ``compile(inputs=..., outputs=...)``.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import kiln.core as mx
from kiln.utils import tree_flatten, tree_map, tree_unflatten


def _is_tree_value(v: Any) -> bool:
    return isinstance(v, (mx.array, dict, list, tuple))


class Module(dict):
    """Base class of layers and models; subclasses define ``__call__``."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_no_grad", set())
        object.__setattr__(self, "_training", True)

    # Attribute access reads and writes the dict items holding parameters and submodules.
    def __getattr__(self, key: str):
        if key in self:
            return self[key]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def __setattr__(self, key: str, value: Any):
        if _is_tree_value(value):
            self[key] = value
        else:
            if key in self:
                del self[key]
            object.__setattr__(self, key, value)

    def __delattr__(self, key: str):
        if key in self:
            del self[key]
        else:
            object.__delattr__(self, key)

    # dict defines these by content; modules compare and hash by identity, like objects.
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    @property
    def training(self) -> bool:
        """Whether the module is in training mode (Dropout is active)."""
        return self._training

    @property
    def state(self) -> "Module":
        """The module's state (itself: parameters and submodules), for ``compile`` capture."""
        return self

    def _filtered(self, keep: Callable[["Module", str, Any], bool]) -> dict:
        def walk(value, module, key):
            if isinstance(value, Module):
                return {k: r for k, v in value.items() if (r := walk(v, value, k)) is not None}
            if isinstance(value, dict):
                return {k: r for k, v in value.items() if (r := walk(v, module, key)) is not None}
            if isinstance(value, (list, tuple)):
                return [walk(v, module, key) for v in value]
            if isinstance(value, mx.array):
                return value if keep(module, key, value) else None
            return None

        return walk(self, None, None)

    def parameters(self) -> dict:
        """Every array of the module and its submodules, as nested dicts and lists."""
        return self._filtered(lambda m, k, v: True)

    def trainable_parameters(self) -> dict:
        """The arrays not frozen."""
        return self._filtered(lambda m, k, v: k not in m._no_grad)

    def children(self) -> dict:
        """The direct submodules (and lists or dicts of them)."""

        def only_modules(v):
            if isinstance(v, Module):
                return v
            if isinstance(v, dict):
                d = {k: r for k, x in v.items() if (r := only_modules(x)) is not None}
                return d or None
            if isinstance(v, (list, tuple)):
                items = [only_modules(x) for x in v]
                return items if any(i is not None for i in items) else None
            return None

        return {k: r for k, v in self.items() if (r := only_modules(v)) is not None}

    def named_modules(self) -> List[Tuple[str, "Module"]]:
        """``(path, module)`` for this module and every submodule, depth first."""
        out = [("", self)]
        for path, m in tree_flatten(self.children(), is_leaf=lambda v: isinstance(v, Module)):
            out.extend((f"{path}.{p}" if p else path, sub) for p, sub in m.named_modules())
        return out

    def modules(self) -> List["Module"]:
        """This module and every submodule."""
        return [m for _, m in self.named_modules()]

    def leaf_modules(self) -> List["Module"]:
        """The submodules with no submodules of their own."""
        return [m for m in self.modules() if not m.children()]

    def update(self, parameters: dict, strict: bool = True) -> "Module":
        """Writes the arrays of ``parameters`` (a tree shaped like ``parameters()``, possibly
        partial) into the module in place."""

        def put(target, values, path):
            if isinstance(values, dict):
                if not isinstance(target, dict):
                    raise ValueError(f"update: {path or 'the module'} is not a module or dict")
                for k, v in values.items():
                    if k not in target:
                        if strict:
                            raise ValueError(f"update: the module has no parameter {path + k!r}")
                        continue
                    if isinstance(v, mx.array):
                        target[k] = v
                    else:
                        put(target[k], v, f"{path}{k}.")
            elif isinstance(values, (list, tuple)):
                for i, v in enumerate(values):
                    if isinstance(v, mx.array):
                        target[i] = v
                    elif v is not None:
                        put(target[i], v, f"{path}{i}.")

        put(self, parameters, "")
        return self

    def apply(self, map_fn: Callable[[mx.array], mx.array], filter_fn: Optional[Callable] = None) -> "Module":
        """Replaces every parameter ``p`` by ``map_fn(p)``; with ``filter_fn(module, name, p)``
        only the parameters it accepts."""
        chosen = self._filtered(filter_fn or (lambda m, k, v: True))
        self.update(tree_map(lambda p: map_fn(p) if isinstance(p, mx.array) else p, chosen))
        return self

    def _targets(self, recurse: bool, keys: Optional[List[str]], strict: bool, what: str) -> List["Module"]:
        """The modules ``freeze``/``unfreeze`` act on; with ``strict``, every key must name a
        parameter of each of them."""
        targets = self.modules() if recurse else [self]
        if strict and keys is not None:
            for m in targets:
                missing = [k for k in keys if not isinstance(m.get(k), mx.array)]
                if missing:
                    raise ValueError(f"{what}: {type(m).__name__} has no parameters {missing}")
        return targets

    def freeze(self, *, recurse: bool = True, keys: Optional[List[str]] = None, strict: bool = False) -> "Module":
        """Excludes parameters from ``trainable_parameters()`` (all, or those named ``keys``)."""
        for m in self._targets(recurse, keys, strict, "freeze"):
            names = keys if keys is not None else [k for k, v in m.items() if isinstance(v, mx.array)]
            m._no_grad.update(names)
        return self

    def unfreeze(self, *, recurse: bool = True, keys: Optional[List[str]] = None, strict: bool = False) -> "Module":
        """Makes parameters trainable again."""
        for m in self._targets(recurse, keys, strict, "unfreeze"):
            if keys is None:
                m._no_grad.clear()
            else:
                m._no_grad.difference_update(keys)
        return self

    def train(self, mode: bool = True) -> "Module":
        """Sets training mode on this module and its submodules."""
        for m in self.modules():
            object.__setattr__(m, "_training", mode)
        return self

    def eval(self) -> "Module":
        """Sets evaluation mode (Dropout does nothing)."""
        return self.train(False)

    def save_weights(self, file: str) -> None:
        """Saves the parameters to ``.npz`` or ``.safetensors`` (by the file's extension)."""
        flat = dict(tree_flatten(self.parameters()))
        if file.endswith(".safetensors"):
            mx.save_safetensors(file, flat)
        elif file.endswith(".npz"):
            mx.savez(file, **flat)
        else:
            raise ValueError(f"save_weights: unsupported file type {file!r}; use .npz or .safetensors")

    def load_weights(self, file_or_weights, strict: bool = True) -> "Module":
        """Loads parameters from a ``.npz``/``.safetensors`` file or a list of ``(name, array)``;
        with ``strict``, the names and shapes must match the module's exactly."""
        weights = list(mx.load(file_or_weights).items()) if isinstance(file_or_weights, str) else list(file_or_weights)
        if strict:
            current = dict(tree_flatten(self.parameters()))
            given = dict(weights)
            missing = sorted(set(current) - set(given))
            extra = sorted(set(given) - set(current))
            if missing or extra:
                raise ValueError(f"load_weights: missing parameters {missing}, unexpected parameters {extra}")
            for k, v in given.items():
                if v.shape != current[k].shape:
                    raise ValueError(f"load_weights: {k} has shape {v.shape}, the module expects {current[k].shape}")
        self.update(tree_unflatten(weights), strict=strict)
        return self

    def __repr__(self):
        return f"{type(self).__name__}({self._extra_repr()})"

    def _extra_repr(self) -> str:
        return ""


def value_and_grad(model: Module, fn: Callable):
    """A function returning ``(fn(*args), grads)`` where grads are with respect to
    ``model.trainable_parameters()``."""

    def inner(params, *args, **kwargs):
        model.update(params)
        return fn(*args, **kwargs)

    vg = mx.value_and_grad(inner)

    def wrapper(*args, **kwargs):
        return vg(model.trainable_parameters(), *args, **kwargs)

    return wrapper
