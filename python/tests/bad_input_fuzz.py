"""The bad-input fuzzer of kiln's Python boundary: every public function and class of
``kiln.core`` (with ``kiln.core.random``, ``kiln.core.fast``, ``kiln.core.linalg``, ``kiln.core.fft`` and ``kiln.core.distributed``), ``kiln.nn``
(with its losses, init functions, distributed layers and utils) and ``kiln.optimizers`` is called with random wrong arguments: wrong types, None,
nested lists of mixed types, arrays of wrong shapes and dtypes, out-of-range and negative axes,
empty arrays, huge sizes, NaN where an integer belongs, non-contiguous numpy arrays and numpy
arrays of dtypes kiln lacks. Results are evaluated, so errors that laziness would defer show too.

Each call must return or raise ValueError, TypeError, IndexError, RuntimeError or OverflowError
(what mlx raises); anything else is a finding. A crash, abort or hang kills the process: run this
as a subprocess (``test_bad_input.py`` does), which names the call that was running.

    python python/tests/bad_input_fuzz.py [--calls N] [--seed S]

prints a JSON summary (calls, outcomes, findings) and exits 1 if there were findings."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import random
import sys
import types

import numpy as np

import kiln.core as mx
import kiln.nn as nn
import kiln.optimizers as optim

ALLOWED = (ValueError, TypeError, IndexError, RuntimeError, OverflowError)

# The memory kiln may hold (huge sizes must be refused, not allocated), and the largest result
# copied into numpy.
MEMORY_LIMIT = 1 << 30

# Functions that change process-wide state or write files: calling them with random arguments
# would change what the other calls see (or litter the disk), not test their argument checks.
SKIPPED = {
    "set_default_device", "set_memory_limit", "set_cache_limit", "set_allow_tf32", "seed", "save",
    "savez", "savez_compressed", "save_safetensors", "export_to_dot", "clear_cache", "reset_peak_memory",
    "enable_compile", "disable_compile", "wait_for_native_builds", "new_stream", "synchronize",
    "Module",  # an abstract base: constructing it is fine, but it has no behaviour of its own
}

KEYWORDS = ["axis", "axes", "keepdims", "dtype", "shape", "k", "stream", "kind", "ddof", "decimals", "indices",
            "bias", "dims", "eps", "affine", "learning_rate", "reduction", "num_classes", "padding", "stride"]


def targets():
    """(qualified name, callable) for every public function and class to fuzz."""
    modules = [("kiln.core", mx), ("kiln.core.random", mx.random), ("kiln.core.fast", mx.fast), ("kiln.core.linalg", mx.linalg), ("kiln.core.fft", mx.fft),
               ("kiln.core.distributed", mx.distributed), ("kiln.nn", nn), ("kiln.nn.losses", nn.losses), ("kiln.nn.init", nn.init),
               ("kiln.nn.distributed", nn.distributed), ("kiln.nn.utils", nn.utils), ("kiln.optimizers", optim)]
    out, seen = [], set()
    for prefix, module in modules:
        # A module's __all__, where it has one, leaves out the helpers it imports.
        for name in sorted(getattr(module, "__all__", None) or dir(module)):
            obj = getattr(module, name)
            if name.startswith("_") or name in SKIPPED or isinstance(obj, types.ModuleType) or not callable(obj):
                continue
            owner = getattr(obj, "__module__", "") or ""
            if isinstance(obj, type) and not owner.startswith("kiln"):
                continue  # typing helpers and the like re-exported by a module
            if inspect.isfunction(obj) and not owner.startswith("kiln"):
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            out.append((f"{prefix}.{name}", obj))
    return out


def bad_values():
    """Argument values, most of them wrong for most parameters (and some right, so calls get past
    their first check)."""
    strided = np.arange(12.0).reshape(3, 4)[:, ::2]
    return [
        None, True, False, 0, 1, 2, -1, -100, 99, 2**31, 2**70, -(2**70), 0.5, -2.5, math.nan, math.inf, -math.inf,
        1 + 2j, "", "abc", "float32", b"\x00", [], [1, "a"], [[1, 2], [3]], [[[]]], [None], [1.5, 2.5], (2, 3), (-1,),
        (0,), (10**12, 10**12), (2**62, 4), [0.5] * 3, {}, {"a": 1}, {1, 2}, object(), slice(1, 2), Ellipsis,
        lambda *a, **k: a[0] if a else 0, mx.float32, mx.int64, mx.bool_, mx.cpu, mx.array(1.5), mx.array(3),
        mx.zeros((0,)), mx.zeros((2, 0, 3)), mx.ones((2, 3)), mx.ones((3, 2, 4)), mx.array([True, False]),
        mx.arange(6).reshape(2, 3), mx.zeros((2, 3), dtype=mx.float16), mx.array([1, 2], dtype=mx.uint8),
        mx.array([-1, 7], dtype=mx.int64), mx.array([[0.5, math.nan], [math.inf, -0.0]]), mx.zeros((1, 1, 1, 1, 1)),
        mx.array([[1 + 2j, -0.5j], [math.nan, 3]]), mx.complex64,
        np.zeros((2, 3)), strided, np.array([1 + 2j]), np.array(["a", "b"]), np.array([object()], dtype=object),
        np.zeros(2, dtype=np.longdouble), np.array(["2020-01-01"], dtype="datetime64[D]"), np.float64(2.5),
        np.int64(-3), np.zeros((0, 4), dtype=np.int32),
    ]


def arrays_in(x, depth=0):
    """The kiln arrays inside a result (tuples, lists, dicts, modules' parameters)."""
    if depth > 4:
        return
    if isinstance(x, mx.array):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from arrays_in(v, depth + 1)
    elif isinstance(x, dict):
        for v in x.values():
            yield from arrays_in(v, depth + 1)
    elif isinstance(x, nn.Module):
        yield from arrays_in(x.parameters(), depth + 1)


def parameter_names(fn) -> list:
    """The names ``fn`` takes by keyword, where its signature is known (else an empty list)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def describe(value) -> str:
    if isinstance(value, mx.array):
        return f"mx.array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, np.ndarray):
        return f"np.ndarray(shape={value.shape}, dtype={value.dtype}, contiguous={value.flags.c_contiguous})"
    if isinstance(value, types.LambdaType) and value.__name__ == "<lambda>":
        return "lambda *a, **k: a[0]"
    return repr(value)[:80]


def fuzz(calls: int, seed: int, trail) -> dict:
    rng = random.Random(seed)
    values = bad_values()
    arrays = [v for v in values if isinstance(v, mx.array)]
    plausible = arrays + [0, 1, 2, -1, None, 0.5, (2, 3), mx.float32]
    fns = targets()
    outcomes = {"returned": 0, "raised": 0}
    raised_by_type: dict = {}
    findings = []
    for i in range(calls):
        name, fn = fns[i % len(fns)] if i < len(fns) else rng.choice(fns)
        names = parameter_names(fn)
        n = rng.choice([0, 1, 1, 2, 2, 3, 4])
        if rng.random() < 0.5:
            # Plausible arguments with one wrong value: past the first checks, into the op.
            args = [rng.choice(plausible) for _ in range(n)]
            if args:
                args[rng.randrange(n)] = rng.choice(values)
        else:
            args = [rng.choice(values) for _ in range(n)]
            if args and rng.random() < 0.6:
                args[0] = rng.choice(arrays)
        keywords = names or KEYWORDS
        kwargs = {k: rng.choice(values) for k in rng.sample(keywords, min(len(keywords), rng.choice([0, 0, 0, 1, 2])))}
        call = f"{name}({', '.join([describe(a) for a in args] + [f'{k}={describe(v)}' for k, v in kwargs.items()])})"
        trail.write(f"{i}: {call}\n")
        trail.flush()
        try:
            result = fn(*args, **kwargs)
            for a in arrays_in(result):
                mx.eval(a)
                if a.dtype != mx.bfloat16 and not copied_to_numpy(a):
                    outcomes["too large to copy"] = outcomes.get("too large to copy", 0) + 1
            outcomes["returned"] += 1
        except ALLOWED as e:
            outcomes["raised"] += 1
            raised_by_type[type(e).__name__] = raised_by_type.get(type(e).__name__, 0) + 1
        except BaseException as e:  # noqa: BLE001 -- every other exception is what this looks for
            if isinstance(e, KeyboardInterrupt):
                raise
            findings.append(f"{call}: {type(e).__name__}: {str(e)[:300]}")
    return {"calls": calls, "targets": len(fns), **outcomes, "raised_by_type": raised_by_type, "findings": findings}


def copied_to_numpy(a) -> bool:
    """Copies ``a`` into numpy; False when numpy cannot allocate the copy. kiln may hold a result
    larger than memory as a view without allocating it (``tile(x, 2**31)`` broadcasts), and
    numpy's MemoryError for its own contiguous copy is numpy's limit, not a failure of kiln.
    Copies past the memory limit the fuzzer sets for kiln are not tried (they would take the
    machine's memory and seconds of page faults to prove nothing more)."""
    if a.nbytes > MEMORY_LIMIT:
        return False
    try:
        np.array(a, copy=True)
    except MemoryError:
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trail", default=os.devnull, help="file naming each call before it runs")
    opts = parser.parse_args()
    mx.set_memory_limit(MEMORY_LIMIT)
    with open(opts.trail, "w") as trail:
        report = fuzz(opts.calls, opts.seed, trail)
    print(json.dumps(report, indent=1))
    sys.exit(1 if report["findings"] else 0)


if __name__ == "__main__":
    main()
