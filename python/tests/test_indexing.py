"""Indexing against numpy: basic and advanced reads, `a[...] = v`, and `a.at[...]` updates."""

import numpy as np
import pytest

import kiln.core as mx

X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)

KEYS = [
    1,
    -1,
    (1, 2),
    (0, -1, 3, 4),
    slice(None),
    slice(1, None),
    (slice(None), slice(None, None, -1)),
    (Ellipsis, 2),
    (1, Ellipsis, slice(1, 4, 2)),
    (None, 0),
    (slice(None), None, 1, None),
    (0, slice(-3, None), Ellipsis, None),
    np.array([1, 0, 1]),
    (slice(None), [2, 0]),
    (slice(None), np.array([2, 0]), np.array([1, 3])),
    (slice(None), np.array([[2], [0]]), slice(None), np.array([1, 3])),
    (0, slice(None), np.array([3, -1])),
    (np.array([1, 0]), 2),
    (Ellipsis, np.array([4, 0, 1])),
    (np.array([0, 1]), slice(None), np.array([[1], [2]])),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(key):
    got = mx.array(X)[key]
    want = X[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.array(got), want)


SET_KEYS = [
    1,
    (0, slice(1, 3)),
    (Ellipsis, 0),
    (slice(None), None, 2),
    np.array([1, 0]),
    (slice(None), np.array([2, 0]), 1),
    (0, slice(None), np.array([3, 1]), np.array([0, 4])),
    (slice(1, None), np.array([0, 2])),
    # New axes next to array indices: the value has the full result shape, new axes included.
    (None, np.array([1, 0])),
    (np.array([1, 0]), None, slice(None)),
    (slice(None), np.array([0, 2]), None),
    (0, None, slice(None), np.array([3, 1])),
    (None, Ellipsis, np.array([1, 3])),
]


@pytest.mark.parametrize("key", SET_KEYS, ids=[repr(k) for k in SET_KEYS])
def test_setitem_matches_numpy(key):
    want = X.copy()
    target_shape = want[key].shape
    value = np.arange(np.prod(target_shape), dtype=np.float32).reshape(target_shape) - 100
    want[key] = value
    a = mx.array(X)
    alias = a
    a[key] = mx.array(value)
    np.testing.assert_array_equal(np.array(a), want)
    assert alias is a
    b = mx.array(X)
    b[key] = 7
    want2 = X.copy()
    want2[key] = 7
    np.testing.assert_array_equal(np.array(b), want2)


def test_at_updates_accumulate_repeated_indices():
    a = mx.array([0.0, 1.0, 2.0, 3.0])
    idx = mx.array([0, 2, 0])
    np.testing.assert_array_equal(np.array(a.at[idx].add(1.0)), [2.0, 1.0, 3.0, 3.0])
    np.testing.assert_array_equal(np.array(a.at[idx].subtract(1.0)), [-2.0, 1.0, 1.0, 3.0])
    np.testing.assert_array_equal(np.array((a + 1).at[idx].multiply(3.0)), [9.0, 2.0, 9.0, 4.0])
    np.testing.assert_array_equal(np.array((a + 1).at[idx].divide(2.0)), [0.25, 2.0, 1.5, 4.0])
    np.testing.assert_array_equal(np.array(a.at[1:3].maximum(1.5)), [0.0, 1.5, 2.0, 3.0])
    np.testing.assert_array_equal(np.array(a.at[1:3].minimum(1.5)), [0.0, 1.0, 1.5, 3.0])
    # The original is unchanged.
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_at_add_on_2d_rows():
    a = mx.zeros((3, 2))
    out = a.at[mx.array([2, 2, 0])].add(mx.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    np.testing.assert_array_equal(np.array(out), [[5.0, 6.0], [0.0, 0.0], [4.0, 6.0]])


def test_updates_may_have_extra_leading_axes_of_size_one():
    # mlx accepts a[1:3] = [[5, 6]] and .at[1:3] updates of shape (1, 2), and their gradients.
    a = mx.array([0.0, 1.0, 2.0, 3.0])
    b = mx.array(a)
    b[1:3] = mx.array([[5.0, 6.0]])
    np.testing.assert_array_equal(np.array(b), [0.0, 5.0, 6.0, 3.0])
    np.testing.assert_array_equal(np.array(a.at[1:3].add(mx.array([[1.0, 2.0]]))), [0.0, 2.0, 4.0, 3.0])
    _, vjps = mx.vjp(lambda s, u: s.at[1:3].multiply(u), [a + 1, mx.array([[2.0, 3.0]])], [mx.array([4.0, 5.0, 6.0, 7.0])])
    np.testing.assert_allclose(np.array(vjps[0]), [4.0, 10.0, 18.0, 7.0])
    np.testing.assert_allclose(np.array(vjps[1]), [[10.0, 18.0]])
    with pytest.raises(ValueError):
        a.at[1:3].add(mx.ones((2, 2)))


def test_index_errors():
    a = mx.array(X)
    with pytest.raises(IndexError, match="out of bounds"):
        a[2]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., 0, ...]
    with pytest.raises(TypeError, match="boolean"):
        a[mx.array([True, False])]
    with pytest.raises(TypeError, match="integers"):
        a[mx.array([0.5])]
    with pytest.raises(TypeError, match="cannot index"):
        a["x"]
    with pytest.raises(ValueError, match="zero"):
        a[::0]


def test_dynamic_slice_and_slice_update_match_numpy():
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    a = mx.array(x)
    got = mx.slice(a, mx.array([1, 2]), [0, 1], [2, 3])
    np.testing.assert_array_equal(np.array(got), x[1:3, 2:5])
    # Starts are clamped so that the slice fits.
    np.testing.assert_array_equal(np.array(mx.slice(a, mx.array([4]), [0], [2])), x[3:5])
    up = mx.slice_update(a, mx.zeros((2, 6)), mx.array([3]), [0])
    want = x.copy()
    want[3:5] = 0
    np.testing.assert_array_equal(np.array(up), want)
    # The start may be computed inside a compiled function without retracing.
    f = mx.compile(lambda a, i: mx.slice(a, i, [1], [2]))
    for i in range(4):
        np.testing.assert_array_equal(np.array(f(a, mx.array([i]))), x[:, i : i + 2])
    assert f.trace_count == 1
    with pytest.raises(ValueError, match="start_indices"):
        mx.slice(a, mx.array([1.0]), [0], [2])


def test_assignment_through_a_boolean_mask_matches_numpy():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    mask = np.array([True, False, True, True])
    for v in [np.float32(7.0), rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal((3,)).astype(np.float32)]:
        want = a.copy()
        want[mask] = v
        got = mx.array(a)
        got[mx.array(mask)] = mx.array(v)
        np.testing.assert_array_equal(np.array(got), want)
    # A full-shape mask from numpy, and a list of bools, with one value per true element.
    full = a > 0
    want = a.copy()
    want[full] = np.arange(full.sum(), dtype=np.float32)
    got = mx.array(a)
    got[full] = mx.arange(int(full.sum()), dtype=mx.float32)
    np.testing.assert_array_equal(np.array(got), want)
    got = mx.array([1, 2, 3])
    got[[False, True, True]] = mx.array([9, 8])
    assert got.tolist() == [1, 9, 8]
    # Differentiable in the values (gradient 1 where a value landed) and batched by vmap.
    g = mx.grad(lambda v: _masked(mx.zeros(4), mx.array([True, False, True, False]), v).sum())(mx.ones(2))
    assert g.tolist() == [1.0, 1.0]
    out = mx.vmap(lambda m, v: _masked(mx.zeros(3), m, v))(mx.array([[True, False, True], [False, True, False]]), mx.array([[1.0, 2.0], [3.0, 4.0]]))
    assert out.tolist() == [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    empty = mx.zeros((0,))
    empty[mx.zeros((0,), dtype=mx.bool_)] = mx.zeros((0,))
    assert empty.shape == (0,)
    with pytest.raises(ValueError, match="leading axes"):
        b = mx.zeros((2, 3))
        b[mx.array([True, False, True])] = 1.0


def _masked(dst, mask, values):
    dst[mask] = values
    return dst
