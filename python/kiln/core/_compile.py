"""``compile`` over pytrees, as mlx's: ``compile(fun, inputs=None, outputs=None, shapeless=False)``.

- Arguments and keyword arguments may be pytrees of arrays; their non-array leaves (None, bool,
  int, float, str) are constants. The structure and the constants form part of the cache key
  (passed to the native cache as one string constant), so a new constant traces again.
- ``inputs``/``outputs`` capture state (lists, dicts, ``model.state``, ``optimizer.state``,
  ``random.state``): its arrays travel as extra arguments and results, are replaced by the
  trace's placeholders while the function is traced, and the results are written back after
  every call.
- The result's structure is remembered per signature, so a replay returns the same pytree.
- Compiling the same function again (with the same options) while it is alive shares one cache.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Optional

from kiln import _core
from kiln._core import array
from kiln.core._pytree import _ARRAY, flatten, replace_leaves


class _Shared:
    """The cache of one compiled function and options: the native compiled function and the
    structures seen per signature key. It holds the function only weakly, so that the registry
    entry dies with the function."""

    def __init__(self, fun: Callable, inputs: Any, outputs: Any, shapeless: bool):
        self.fun_ref = _weak(fun)
        self.inputs = inputs
        self.outputs = outputs
        self.shapeless = shapeless
        self.signatures: dict = {}  # key -> (argument treedef, number of argument arrays)
        self.results: dict = {}  # key -> (result treedef, number of result arrays), last traced
        # Keys whose traces for different dtypes or shapes returned different structures, and
        # the structure each (key, layout) traced: the native cache keeps one trace per layout.
        self.varying: set = set()
        self.results_by_layout: dict = {}
        self.flat_keys: dict = {}  # number of arguments -> key, for calls with arrays only
        # The native function holds the trace callback weakly: a bound method would make a cycle
        # through the native object, which Python's collector cannot break, and the cache would
        # outlive every compiled function using it.
        shared = weakref.ref(self)
        self.native = _core._Compiled(lambda arrays, constants: shared()._trace(arrays, constants), shapeless)

    def _trace(self, arrays: list, constants: list) -> list:
        key = constants[0]
        treedef, n_args = self.signatures[key]
        args, kwargs = treedef.unflatten(arrays[:n_args])
        fun = self.fun_ref()
        saved = flatten(self.inputs)[0] if self.inputs is not None else []
        if self.inputs is not None:
            replace_leaves(self.inputs, arrays[n_args:])
        try:
            out = fun(*args, **kwargs)
            out_leaves, out_def = flatten(out)
            state = flatten(self.outputs)[0] if self.outputs is not None else []
        finally:
            if self.inputs is not None and len(flatten(self.inputs)[0]) == len(saved):
                replace_leaves(self.inputs, saved)
        result = (out_def, len(out_leaves))
        known = self.results.get(key)
        if known is not None and not _same_structure(known, result):
            self.varying.add(key)
        self.results[key] = result
        self.results_by_layout[(key, self.layout(arrays))] = result
        return out_leaves + state

    def layout(self, arrays: list) -> tuple:
        """What tells the native cache's traces of one key apart: each array's dtype, and its
        shape (its ndim when shapeless)."""
        if self.shapeless:
            return tuple((a.dtype, a.ndim) for a in arrays)
        return tuple((a.dtype, a.shape) for a in arrays)

    def result(self, key: str, arrays: list) -> tuple:
        """The result structure of the trace a call with this key and these arrays replayed."""
        if key in self.varying:
            return self.results_by_layout[(key, self.layout(arrays))]
        return self.results[key]


def _same_structure(a: tuple, b: tuple) -> bool:
    """Whether two (treedef, array count) results have one structure; constants that cannot be
    compared count as different."""
    try:
        return a[1] == b[1] and bool(a[0].node == b[0].node)
    except Exception:
        return False


def _weak(fun: Callable):
    try:
        return weakref.ref(fun)
    except TypeError:
        return lambda: fun


# Per function, per options: the cache its live compiled functions share. Both levels are weak,
# as mlx's: an entry lives while the function does and while some compiled function of it is
# alive, so compiling a function again after releasing every compiled one (on any thread) traces
# it again.
_registry: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _shared_for(fun: Callable, inputs: Any, outputs: Any, shapeless: bool) -> _Shared:
    options = (id(inputs), id(outputs), shapeless)
    try:
        per_fun = _registry.setdefault(fun, weakref.WeakValueDictionary())
    except TypeError:
        return _Shared(fun, inputs, outputs, shapeless)
    shared = per_fun.get(options)
    if shared is None:
        shared = _Shared(fun, inputs, outputs, shapeless)
        per_fun[options] = shared
    return shared


class _CompiledFunction:
    """What ``compile`` returns: called like the function it wraps."""

    def __init__(self, fun: Callable, inputs: Any, outputs: Any, shapeless: bool):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._shared = _shared_for(fun, inputs, outputs, shapeless)

    def _signature(self, args, kwargs):
        sh = self._shared
        if not kwargs and sh.inputs is None and all(type(a) is array for a in args):
            # The common call, arrays only: its structure depends on the count alone.
            known = sh.flat_keys.get(len(args))
            if known is not None:
                return list(args), known
        leaves, treedef = flatten((args, kwargs))
        key = treedef.key()
        if sh.inputs is not None:
            state, state_def = flatten(sh.inputs)
            leaves = leaves + state
            key = key + "|" + state_def.key()
        sh.signatures[key] = (treedef, treedef.count)
        if not kwargs and sh.inputs is None and treedef.count == len(args) == len(leaves):
            sh.flat_keys[len(args)] = key
        return leaves, key

    def __call__(self, *args, **kwargs):
        sh = self._shared
        arrays, key = self._signature(args, kwargs)
        outs = sh.native(arrays, [key])
        out_def, n_out = sh.result(key, arrays)
        if sh.outputs is not None:
            replace_leaves(sh.outputs, outs[n_out:])
        if out_def.node is _ARRAY:
            return outs[0]
        return out_def.unflatten(outs[:n_out])

    def explain(self, *args, **kwargs) -> str:
        """What compile did for these arguments: the graph before and after simplification, the
        fused kernels with their IR, and the kernel counts of an eager and a compiled run."""
        arrays, key = self._signature(args, kwargs)
        return self._shared.native.explain(arrays, [key])

    @property
    def trace_count(self) -> int:
        """How many times the function was traced."""
        return self._shared.native.trace_count


def compile(fun: Callable, inputs: Optional[Any] = None, outputs: Optional[Any] = None, shapeless: bool = False):
    """``fun`` compiled: traced once per signature (argument structure, constants, dtypes, ndims
    and, unless ``shapeless``, shapes), simplified, fused and replayed on later calls.
    ``inputs``/``outputs`` name state the function reads and writes (see the module notes)."""
    if not callable(fun):
        raise TypeError(f"compile: expected a function, got {type(fun).__name__}")
    return _CompiledFunction(fun, inputs, outputs, shapeless)
