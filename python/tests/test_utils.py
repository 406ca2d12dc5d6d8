"""kiln.utils' pytree helpers, as mlx.utils': tuple types kept, paths, merging, unflattening."""
from typing import NamedTuple

import numpy as np
import pytest

import kiln.core as mx
from kiln.utils import tree_flatten, tree_map, tree_map_with_path, tree_merge, tree_unflatten


class Pair(NamedTuple):
    m: mx.array
    b: mx.array


class Vector(tuple):
    pass


def values(tree):
    return [np.array(v).tolist() for _, v in tree_flatten(tree)]


def test_tree_map_keeps_named_tuples_and_tuple_subclasses():
    pair = Pair(mx.array([0, 1]), mx.array(2))
    vector = Vector([mx.array([0, 1]), mx.array(2)])
    for tree, kind in [(pair, Pair), (vector, Vector), ((pair.m, pair.b), tuple), ([pair.m, pair.b], list)]:
        out = tree_map(lambda x: x + 1, tree)
        assert type(out) is kind
        assert values(out) == [[1, 2], 3]


def test_tree_map_with_path_passes_each_leafs_path_and_the_matching_leaves():
    paths = []
    tree = {"layers": [Pair(mx.array(1.0), mx.array(2.0))], "scale": mx.array(3.0)}
    out = tree_map_with_path(lambda p, x, y: paths.append(p) or x * y, tree, tree)
    assert paths == ["layers.0.0", "layers.0.1", "scale"]
    assert type(out["layers"][0]) is Pair
    assert values(out) == [1.0, 4.0, 9.0]


def test_tree_merge_joins_disjoint_trees_and_needs_merge_fn_for_overlaps():
    merged = tree_merge({"a": {"x": 1}, "l": [1, None]}, {"a": {"y": 2}, "l": [None, 2], "c": 3})
    assert merged == {"a": {"x": 1, "y": 2}, "l": [1, 2], "c": 3}
    assert tree_merge([{"a": 1}, {}], [{"b": 2}, {}]) == [{"a": 1, "b": 2}, {}]
    assert tree_merge({"a": 1, "b": {}, "c": {}}, {"a": {}, "b": {}, "c": 2}) == {"a": 1, "b": {}, "c": 2}
    with pytest.raises(ValueError, match="merge_fn"):
        tree_merge({"a": 0}, {"a": 1})
    with pytest.raises(ValueError, match="empty"):
        tree_merge({}, [])
    summed = tree_merge(Vector([1, 2]), Vector([10, 20]), lambda a, b: a + b)
    assert type(summed) is Vector and summed == (11, 22)


def test_tree_unflatten_makes_lists_only_of_canonical_integer_keys():
    assert tree_unflatten([("0", "a"), ("1", "b"), ("2", "c")]) == ["a", "b", "c"]
    assert tree_unflatten([("01", "a"), ("1", "b"), ("2", "c")]) == {"01": "a", "1": "b", "2": "c"}


def test_compiled_functions_return_named_tuples_and_tuple_subclasses():
    f = mx.compile(lambda p: Pair(p.m + 10, p.b * 10))
    out = f(Pair(mx.array(1.0), mx.array(2.0)))
    assert type(out) is Pair and (out.m.item(), out.b.item()) == (11.0, 20.0)
    g = mx.compile(lambda v: Vector([x * 2 for x in v]))
    out = g(Vector([mx.array(1.0), mx.array(3.0)]))
    assert type(out) is Vector and [x.item() for x in out] == [2.0, 6.0]
    # A NamedTuple argument and a plain tuple of the same arrays are traced apart.
    h = mx.compile(lambda t: t[0] + t[1])
    assert h(Pair(mx.array(1.0), mx.array(2.0))).item() == 3.0
    assert h((mx.array(1.0), mx.array(2.0))).item() == 3.0
    assert h.trace_count == 2


def test_async_eval_computes_and_is_a_value_error_inside_transforms():
    x = mx.array([1.0, 2.0]) + 1
    mx.async_eval(x)
    assert x.tolist() == [2.0, 3.0]

    def fun(x):
        y = x + 1.0
        mx.async_eval(y)
        return mx.exp(y).sum()

    with pytest.raises(ValueError, match="async_eval"):
        mx.grad(fun)(mx.array(1.0))
    with pytest.raises(ValueError, match="async_eval"):
        mx.vmap(fun)(mx.ones((2, 2)))
