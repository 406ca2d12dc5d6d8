"""kiln.core.distributed: mlx.core.distributed's groups and collectives, with its names and
arguments (``mx.distributed``).

kiln has no multi-process backend yet (no MPI, ring, NCCL or JACCL), so ``is_available()`` is
False and ``init()`` gives the group of this process alone: rank 0 of size 1. On it, as in mlx,
the reductions, ``all_gather`` and ``sum_scatter`` return their input's values (a group of one
has nothing to combine), while ``send``, ``recv`` and ``split`` refuse, as there is no peer to
reach. The ops check their arguments and the group's size and rank, then hand the work to the
group's backend, so code written against them (``nn``'s sharded layers) runs unchanged on a
larger group once a backend provides one.
"""

from __future__ import annotations

import numbers
from typing import Optional, Sequence

from kiln import _core as _c
from kiln.core._streams import on_stream

__all__ = [
    "Group",
    "is_available",
    "init",
    "all_sum",
    "all_max",
    "all_min",
    "all_gather",
    "sum_scatter",
    "send",
    "recv",
    "recv_like",
]

# The backends mlx can be asked for by name ("any": the first that starts).
_BACKENDS = ("any", "mpi", "ring", "nccl", "jaccl")


class _Alone:
    """The backend of a group of one process (what mlx falls back to without a backend): rank 0
    of size 1, nothing to communicate with. The ops answer a size-1 group themselves, so only
    ``split`` reaches it."""

    rank = 0
    size = 1

    def split(self, color: int, key: int):
        raise RuntimeError(
            "Group.split: this group is one process (kiln has no distributed backend yet), so it "
            "cannot be split further"
        )


class Group:
    """A group of processes that communicate: this process is ``rank()`` of ``size()``. Groups
    come from :func:`init` (and :meth:`split`); they are not constructed directly."""

    __slots__ = ("_backend",)

    def __init__(self, *args, **kwargs):
        raise TypeError("Group: groups are not constructed directly; distributed.init() returns the global one")

    @classmethod
    def _over(cls, backend) -> "Group":
        """The group a backend serves (it has ``rank``, ``size`` and the collectives)."""
        group = object.__new__(cls)
        group._backend = backend
        return group

    def rank(self) -> int:
        """This process's rank in the group, from 0 to ``size() - 1``."""
        return self._backend.rank

    def size(self) -> int:
        """How many processes the group has."""
        return self._backend.size

    def split(self, color: int, key: int = -1) -> "Group":
        """The subgroup of the processes that pass the same ``color``, ranked by ``key`` (by
        their rank in this group where ``key`` is negative). A group of one process cannot be
        split: a RuntimeError, as in mlx."""
        _require_int("Group.split", "color", color)
        _require_int("Group.split", "key", key)
        return Group._over(self._backend.split(int(color), int(key)))

    def __repr__(self) -> str:
        return f"Group(rank={self.rank()}, size={self.size()})"


# The group init() returns: the one process, as no backend can start.
_WORLD = Group._over(_Alone())


def is_available(backend: str = "any") -> bool:
    """Whether kiln can start the distributed ``backend`` (any of them, by default): False, as
    kiln has none yet (mlx answers False for names it does not know, too)."""
    if not isinstance(backend, str):
        raise TypeError(f"is_available: backend must be a str, got {type(backend).__name__}")
    return False


def init(strict: bool = False, backend: str = "any", *, all_gather_factory=None) -> Group:
    """The global group. kiln has no distributed backend yet, so it is this process alone (rank 0
    of size 1); with ``strict`` that is a RuntimeError instead. ``backend`` is one of ``"any"``,
    ``"mpi"``, ``"ring"``, ``"nccl"`` and ``"jaccl"``; ``all_gather_factory`` (a callable) is taken
    with ``"jaccl"`` only, as in mlx."""
    if not isinstance(strict, bool):
        raise TypeError(f"init: strict must be a bool, got {type(strict).__name__}")
    if not isinstance(backend, str):
        raise TypeError(f"init: backend must be a str, got {type(backend).__name__}")
    if backend not in _BACKENDS:
        raise ValueError(f"init: backend must be one of {', '.join(map(repr, _BACKENDS))}, got {backend!r}")
    if all_gather_factory is not None:
        if not callable(all_gather_factory):
            raise TypeError(f"init: all_gather_factory must be callable, got {type(all_gather_factory).__name__}")
        if backend != "jaccl":
            raise ValueError(f"init: all_gather_factory is only taken with backend='jaccl', got backend={backend!r}")
    if strict:
        raise RuntimeError(
            f"init: no distributed backend is available in kiln yet (asked for backend={backend!r}); "
            "init(strict=False) gives the group of this process alone"
        )
    return _WORLD


def _require_int(op: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")


def _resolve(op: str, group) -> Group:
    """``group``, or the global group where it is None; anything else is a TypeError."""
    if group is None:
        return init()
    if not isinstance(group, Group):
        raise TypeError(f"{op}: group must be a distributed.Group or None, got {type(group).__name__}")
    return group


def _as_array(op: str, x):
    """``x`` as an array, converted as kiln's ops convert their inputs (numbers, lists, numpy
    arrays); what cannot be converted is an error naming the op."""
    if isinstance(x, _c.array):
        return x
    try:
        return _c.array(x)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{op}: x must be an array (or convertible to one): {e}") from None


def _unchanged(x):
    """A new array with ``x``'s shape, dtype and values (and gradient): what a collective over a
    single process gives. A new array object, so that writing into the result leaves ``x``
    alone."""
    return _c.reshape(x, x.shape)


def _reduction(op: str, x, group, stream):
    x = _as_array(op, x)
    group = _resolve(op, group)
    with on_stream(stream):
        if group.size() == 1:
            return _unchanged(x)
        return getattr(group._backend, op)(x, stream)


def all_sum(x, *, group: Optional[Group] = None, stream=None):
    """The elementwise sum of ``x`` over the processes of ``group`` (the global group where None),
    every process getting the sum. On a group of one, ``x``'s values."""
    return _reduction("all_sum", x, group, stream)


def all_max(x, *, group: Optional[Group] = None, stream=None):
    """The elementwise maximum of ``x`` over the processes of ``group``, every process getting it.
    On a group of one, ``x``'s values."""
    return _reduction("all_max", x, group, stream)


def all_min(x, *, group: Optional[Group] = None, stream=None):
    """The elementwise minimum of ``x`` over the processes of ``group``, every process getting it.
    On a group of one, ``x``'s values."""
    return _reduction("all_min", x, group, stream)


def all_gather(x, *, group: Optional[Group] = None, stream=None):
    """The ``x`` of every process of ``group`` concatenated along the first axis in rank order
    (a scalar counts as one element), every process getting it; the arrays must have the same
    shape. On a group of one, ``x`` itself (a scalar stays a scalar, as in mlx)."""
    return _reduction("all_gather", x, group, stream)


def sum_scatter(x, *, group: Optional[Group] = None, stream=None):
    """The sum of ``x`` over the processes of ``group``, split along the first axis: the rank-r
    process gets the r-th of ``size()`` equal parts (``x.shape[0]`` must divide evenly). On a
    group of one, ``x``'s values."""
    x = _as_array("sum_scatter", x)
    group = _resolve("sum_scatter", group)
    n = group.size()
    with on_stream(stream):
        if n == 1:
            return _unchanged(x)
        if x.ndim == 0 or x.shape[0] % n:
            raise ValueError(
                f"sum_scatter: x of shape {x.shape} cannot be split among a group of size {n}: its "
                "first axis must exist and divide evenly"
            )
        return group._backend.sum_scatter(x, stream)


def _peer(op: str, direction: str, peer, group: Group) -> int:
    """Checks that ``peer`` is another rank of ``group`` that ``op`` can reach."""
    n = group.size()
    if n == 1:
        raise ValueError(
            f"{op}: cannot {direction} rank {peer}: the group has size 1 (this process alone, rank 0), "
            "so there is no peer to reach (kiln has no distributed backend yet)"
        )
    if not 0 <= peer < n:
        raise ValueError(f"{op}: rank {peer} is not in the group, whose ranks are 0 to {n - 1}")
    return int(peer)


def send(x, dst: int, *, group: Optional[Group] = None, stream=None):
    """Sends ``x`` to the process of rank ``dst`` in ``group``; returns an array equal to ``x``
    whose evaluation performs the send. A group of one has no peer: a ValueError."""
    x = _as_array("send", x)
    _require_int("send", "dst", dst)
    group = _resolve("send", group)
    dst = _peer("send", "send to", dst, group)
    with on_stream(stream):
        return group._backend.send(x, dst, stream)


def _require_shape(op: str, shape) -> tuple:
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"{op}: shape must be a sequence of ints, got {type(shape).__name__}")
    for d in shape:
        _require_int(op, "each size of shape", d)
        if d < 0:
            raise ValueError(f"{op}: shape {tuple(shape)} has a negative size")
    return tuple(int(d) for d in shape)


def recv(shape: Sequence[int], dtype, src: int, *, group: Optional[Group] = None, stream=None):
    """Receives an array of ``shape`` and ``dtype`` from the process of rank ``src`` in
    ``group``. A group of one has no peer: a ValueError."""
    shape = _require_shape("recv", shape)
    if not isinstance(dtype, _c.Dtype):
        raise TypeError(f"recv: dtype must be a Dtype, got {type(dtype).__name__}")
    _require_int("recv", "src", src)
    group = _resolve("recv", group)
    src = _peer("recv", "receive from", src, group)
    with on_stream(stream):
        return group._backend.recv(shape, dtype, src, stream)


def recv_like(x, src: int, *, group: Optional[Group] = None, stream=None):
    """Receives from the process of rank ``src`` an array of ``x``'s shape and dtype (``recv``
    with them). A group of one has no peer: a ValueError."""
    x = _as_array("recv_like", x)
    _require_int("recv_like", "src", src)
    group = _resolve("recv_like", group)
    src = _peer("recv_like", "receive from", src, group)
    with on_stream(stream):
        return group._backend.recv(x.shape, x.dtype, src, stream)
