"""``nn.Module``: a dict of parameters (arrays) and submodules, as mlx's.

Arrays, modules, lists and dicts assigned as attributes become dict items, so a module is a
pytree: ``parameters()`` is its nested dict of arrays, ``update()`` writes new arrays into it in
place, and ``state`` (the module itself) can be captured by ``compile(inputs=..., outputs=...)``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

import kiln.core as mx
from kiln.utils import tree_flatten, tree_map, tree_unflatten


class MissingParameterError(KeyError, ValueError):
    """A parameter name a strict ``freeze``/``unfreeze`` did not find: a KeyError, as mlx raises,
    and a ValueError, as every other bad argument in kiln is."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _is_tree_value(v: Any) -> bool:
    return isinstance(v, (mx.array, dict, list, tuple))


class Module(dict):
    """Base class of layers and models; subclasses define ``__call__``.

    Its trees (``parameters()``, ``children()``, ...) are built by :meth:`filter_and_map`, as
    mlx's: a module or dict becomes a dict of the entries the filter keeps; a list keeps its
    length, with ``{}`` where an entry is filtered out, so paths and indices stay aligned with the
    module (a ``Sequential`` of Linear, ReLU, Linear has parameters ``layers.0.*`` and
    ``layers.2.*``)."""

    # Parameters no unfreeze makes trainable (a quantized layer's packed weight, BatchNorm's
    # running statistics).
    _always_frozen: Tuple[str, ...] = ()

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
            # An ordinary attribute of the same name would hide the item.
            if key in self.__dict__:
                object.__delattr__(self, key)
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

    @staticmethod
    def is_module(value: Any) -> bool:
        """Whether ``value`` is a module (an ``is_leaf`` for ``tree_flatten`` of module trees)."""
        return isinstance(value, Module)

    @staticmethod
    def valid_child_filter(module: "Module", key: str, value: Any) -> bool:
        """Entries that may hold submodules: modules, dicts and lists."""
        return isinstance(value, (dict, list))

    @staticmethod
    def valid_parameter_filter(module: "Module", key: str, value: Any) -> bool:
        """Entries that are or may hold parameters (names starting with ``_`` are private)."""
        return isinstance(value, (dict, list, mx.array)) and not key.startswith("_")

    @staticmethod
    def trainable_parameter_filter(module: "Module", key: str, value: Any) -> bool:
        """Parameters not frozen."""
        return Module.valid_parameter_filter(module, key, value) and key not in module._no_grad

    def filter_and_map(
        self,
        filter_fn: Callable[["Module", str, Any], bool],
        map_fn: Optional[Callable[[Any], Any]] = None,
        is_leaf_fn: Optional[Callable[["Module", str, Any], bool]] = None,
    ) -> dict:
        """The tree of the entries ``filter_fn(module, key, value)`` keeps, down to the leaves
        ``is_leaf_fn`` names (by default anything but modules, dicts and lists), each passed
        through ``map_fn``. Keys inside dicts and lists are paths from their module
        (``"weights.w1"``), as freezing uses them."""
        map_fn = map_fn or (lambda v: v)
        # Tuples are leaves, as mlx's: settings such as a convolution's stride, not containers.
        is_leaf_fn = is_leaf_fn or (lambda m, k, v: not isinstance(v, (Module, dict, list)))

        def walk(owner, key, value):
            if is_leaf_fn(owner, key, value):
                return map_fn(value)
            if isinstance(value, Module):
                return {k: walk(value, k, v) for k, v in value.items() if filter_fn(value, k, v)}
            if isinstance(value, dict):
                return {k: walk(owner, f"{key}.{k}", v) if filter_fn(owner, f"{key}.{k}", v) else {} for k, v in value.items()}
            if isinstance(value, list):
                return [walk(owner, f"{key}.{i}", v) if filter_fn(owner, f"{key}.{i}", v) else {} for i, v in enumerate(value)]
            raise ValueError(f"filter_and_map: unexpected leaf {type(value).__name__} at {key!r} of {type(owner).__name__}")

        return {k: walk(self, k, v) for k, v in self.items() if filter_fn(self, k, v)}

    def parameters(self) -> dict:
        """Every array of the module and its submodules, as nested dicts and lists."""
        return self.filter_and_map(self.valid_parameter_filter)

    def trainable_parameters(self) -> dict:
        """The arrays not frozen (frozen ones are left out, ``{}`` in lists)."""
        return self.filter_and_map(self.trainable_parameter_filter)

    def children(self) -> dict:
        """The direct submodules, in the dicts and lists that hold them."""
        return self.filter_and_map(self.valid_child_filter, is_leaf_fn=lambda m, k, v: isinstance(v, Module))

    def leaf_modules(self) -> dict:
        """The submodules with no submodules of their own, in the dicts and lists that hold them."""

        def is_leaf_module(m, k, v):
            return isinstance(v, Module) and not tree_flatten(v.children())

        return self.filter_and_map(self.valid_child_filter, is_leaf_fn=is_leaf_module)

    def apply_to_modules(self, apply_fn: Callable[[str, "Module"], Any]) -> "Module":
        """Calls ``apply_fn(path, module)`` on this module (path ``""``) and every submodule."""
        stack = [("", self)]
        while stack:
            path, module = stack.pop()
            apply_fn(path, module)
            stack.extend(tree_flatten(module.children(), prefix=f".{path}" if path else "", is_leaf=self.is_module))
        return self

    def named_modules(self) -> List[Tuple[str, "Module"]]:
        """``(path, module)`` for this module and every submodule."""
        found: list = []
        self.apply_to_modules(lambda path, m: found.append((path, m)))
        return found

    def modules(self) -> List["Module"]:
        """This module and every submodule."""
        return [m for _, m in self.named_modules()]

    def update(self, parameters: dict, strict: bool = True) -> "Module":
        """Writes the arrays of ``parameters`` (a tree shaped like ``parameters()``, possibly
        partial; ``{}`` skips an entry) into the module in place. With ``strict``, a name the
        module lacks or a value that is not an array where it has one is a ValueError."""

        def put(target, values, path):
            if isinstance(values, dict):
                for k, v in values.items():
                    if k not in target:
                        if strict:
                            raise ValueError(f"update: the module has no parameter {path + str(k)!r}")
                        continue
                    put_entry(target, k, v, f"{path}{k}")
            elif isinstance(values, (list, tuple)):
                for i, v in enumerate(values):
                    if i >= len(target):
                        if strict:
                            raise ValueError(f"update: {path.rstrip('.') or 'the list'} has no entry {i}")
                        break
                    put_entry(target, i, v, f"{path}{i}")
            elif strict:
                raise ValueError(f"update: expected a dict or list of parameters at {path.rstrip('.') or 'the top'}, got {type(values).__name__}")

        def put_entry(target, key, value, path):
            current = target[key]
            if isinstance(value, dict) and not value:
                return  # {}: the place of an entry left out (a frozen one, say)
            if isinstance(current, mx.array):
                if not isinstance(value, mx.array):
                    if strict:
                        raise ValueError(f"update: {path!r} must be an array, got {type(value).__name__}")
                    return
                target[key] = value
            elif isinstance(current, (dict, list)):
                put(current, value, path + ".")
            elif strict:
                raise ValueError(f"update: the module has no parameter {path!r}")

        put(self, parameters, "")
        return self

    def update_modules(self, modules: dict, strict: bool = True) -> "Module":
        """Replaces submodules by the modules in ``modules`` (a tree shaped like ``children()``,
        possibly partial; ``{}`` skips an entry). With ``strict``, a name the module lacks or a
        value that is not a module where one is expected is a ValueError."""

        def put(target, values, path):
            if isinstance(values, dict):
                items = values.items()
            elif isinstance(values, (list, tuple)):
                if len(values) > len(target) and strict:
                    raise ValueError(f"update_modules: {path.rstrip('.')} has {len(target)} entries, got {len(values)}")
                items = list(enumerate(values))[: len(target)]
            else:
                if strict:
                    raise ValueError(f"update_modules: expected a module, dict or list at {path.rstrip('.') or 'the top'}, got {type(values).__name__}")
                return
            for k, new in items:
                if isinstance(target, dict) and k not in target:
                    if strict:
                        raise ValueError(f"update_modules: the module has no submodule {path + str(k)!r}")
                    continue
                current = target[k]
                if isinstance(current, Module) and isinstance(new, Module):
                    target[k] = new
                elif isinstance(current, (dict, list)):
                    put(current, new, f"{path}{k}.")
                elif strict and not (isinstance(new, dict) and not new):
                    raise ValueError(f"update_modules: {path + str(k)!r} is not a submodule; got {type(new).__name__}")

        put(self, modules, "")
        return self

    def apply(self, map_fn: Callable[[mx.array], mx.array], filter_fn: Optional[Callable] = None) -> "Module":
        """Replaces every parameter ``p`` by ``map_fn(p)``; with ``filter_fn(module, name, p)``
        only the entries it keeps."""
        return self.update(self.filter_and_map(filter_fn or self.valid_parameter_filter, map_fn))

    def set_dtype(self, dtype, predicate: Optional[Callable] = lambda d: mx.issubdtype(d, mx.floating)) -> "Module":
        """Converts the parameters whose dtype ``predicate`` accepts (floating ones by default;
        every one with ``predicate=None``) to ``dtype``."""
        predicate = predicate or (lambda d: True)
        return self.apply(lambda p: p.astype(dtype) if predicate(p.dtype) else p)

    def _local_parameter_names(self) -> List[str]:
        """The paths of this module's own parameters (not its submodules')."""
        local = self.filter_and_map(lambda m, k, v: not isinstance(v, Module) and self.valid_parameter_filter(m, k, v))
        return [k for k, _ in tree_flatten(local)]

    def _freeze_targets(self, recurse: bool, keys, strict: bool, what: str):
        """The modules ``freeze``/``unfreeze`` act on and the keys (a string is one key). With
        ``strict``, each key must name a parameter of this module or, when recursing, of some
        submodule."""
        if isinstance(keys, str):
            keys = [keys]
        targets = self.modules() if recurse else [self]
        if strict and keys is not None:
            known = {k for m in targets for k in m._local_parameter_names()}
            missing = [k for k in keys if k not in known]
            if missing:
                raise MissingParameterError(f"{what}: {type(self).__name__} has no parameters {missing}")
        return targets, keys

    def freeze(self, *, recurse: bool = True, keys=None, strict: bool = False) -> "Module":
        """Excludes parameters from ``trainable_parameters()``: all of them, or those named
        ``keys`` (a name or a list of names)."""
        targets, keys = self._freeze_targets(recurse, keys, strict, "freeze")
        for m in targets:
            m._no_grad.update(keys if keys is not None else m._local_parameter_names())
        return self

    def unfreeze(self, *, recurse: bool = True, keys=None, strict: bool = False) -> "Module":
        """Makes parameters trainable again: all of them, or those named ``keys``."""
        targets, keys = self._freeze_targets(recurse, keys, strict, "unfreeze")
        for m in targets:
            if keys is None:
                m._no_grad.clear()
            else:
                m._no_grad.difference_update(keys)
            m._no_grad.update(k for k in m._always_frozen if k in m)
        return self

    def train(self, mode: bool = True) -> "Module":
        """Sets training mode on this module and its submodules."""
        self.apply_to_modules(lambda _, m: m._set_training_mode(mode))
        return self

    def _set_training_mode(self, mode: bool) -> None:
        """Records the mode; a layer whose state depends on it (``QQLinear``) extends this."""
        object.__setattr__(self, "_training", mode)

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
        """Loads parameters from a ``.npz``/``.safetensors`` file or a list of ``(name, array)``.
        With ``strict``, the names, types and shapes must match the module's exactly; without,
        names the module lacks are skipped."""
        weights = list(mx.load(file_or_weights).items()) if isinstance(file_or_weights, str) else list(file_or_weights)
        current = dict(tree_flatten(self.parameters()))
        given = dict(weights)
        if strict:
            missing = sorted(set(current) - set(given))
            extra = sorted(set(given) - set(current))
            if missing or extra:
                raise ValueError(f"load_weights: missing parameters {missing}, unexpected parameters {extra}")
            for k, v in given.items():
                if not isinstance(v, mx.array):
                    raise ValueError(f"load_weights: {k} must be an array, got {type(v).__name__}")
                if v.shape != current[k].shape:
                    raise ValueError(f"load_weights: {k} has shape {v.shape}, the module expects {current[k].shape}")
        else:
            weights = [(k, v) for k, v in weights if k in current]
        if weights:
            self.update(tree_unflatten(weights), strict=False)
        return self

    def __repr__(self):
        return f"{type(self).__name__}({self._extra_repr()})"

    def _extra_repr(self) -> str:
        return ""


def _over_parameters(model: Module, fn: Callable, transform: Callable) -> Callable:
    """``transform`` applied to ``fn`` seen as a function of ``model``'s trainable parameters
    (its first argument, written into the model before ``fn`` runs) and ``fn``'s arguments; the
    result is called with ``fn``'s arguments only."""

    def inner(params, *args, **kwargs):
        model.update(params)
        return fn(*args, **kwargs)

    transformed = transform(inner)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return transformed(model.trainable_parameters(), *args, **kwargs)

    return wrapper


def value_and_grad(model: Module, fn: Callable):
    """A function returning ``(fn(*args), grads)`` where grads are with respect to
    ``model.trainable_parameters()``."""
    return _over_parameters(model, fn, mx.value_and_grad)


def checkpoint(module: Module, fn: Optional[Callable] = None):
    """``fn`` (default: ``module`` itself) with gradient checkpointing over ``module``'s trainable
    parameters and ``fn``'s inputs: the backward pass recomputes ``fn``'s intermediates instead of
    keeping them alive (memory for compute)."""
    return _over_parameters(module, module if fn is None else fn, mx.checkpoint)
