"""Ops whose edge cases follow numpy (or mlx where it departs from numpy), checked against numpy:
0-d numpy inputs, pad modes, roll with several shifts, arange's dtype and integer steps,
argmin/argmax with keepdims, isclose with infinities, integer powers, meshgrid, *_like dtypes."""

import itertools

import numpy as np
import pytest

import kiln.core as mx


def test_numpy_scalars_and_0d_arrays_stay_0d():
    for value in [np.int64(3), np.float32(2.5), np.asarray(1.5, dtype=np.float32), np.bool_(True)]:
        a = mx.array(value)
        assert a.shape == ()
        assert a.item() == value.item()


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric"])
def test_pad_modes_match_numpy_including_widths_beyond_the_axis(mode):
    rng = np.random.default_rng(0)
    cases = [((8,), [(2, 3)]), ((4,), [(10, 7)]), ((3,), [(9, 1)]), ((1,), [(3, 2)]), ((2,), [(5, 6)]),
             ((5, 6), [(9, 9), (11, 0)]), ((3, 4, 5), [(4, 4), (0, 0), (7, 3)])]
    for shape, widths in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        got = mx.pad(mx.array(x), widths, mode=mode)
        np.testing.assert_array_equal(np.array(got), np.pad(x, widths, mode=mode), err_msg=f"{mode} {shape} {widths}")


def test_pad_width_forms_and_errors():
    a = mx.zeros((1, 1, 1))
    for width, shape in [(1, (3, 3, 3)), ((1,), (3, 3, 3)), ([1], (3, 3, 3)), ((1, 2), (4, 4, 4)),
                         ([1, 2], (4, 4, 4)), ([(1, 2)], (4, 4, 4)), (((1, 2), (2, 1), (2, 2)), (4, 4, 5))]:
        assert mx.pad(a, width).shape == shape
    for mode in ["reflect", "symmetric", "edge"]:
        with pytest.raises(ValueError, match="empty"):
            mx.pad(mx.zeros((0, 3)), [(1, 1), (0, 0)], mode=mode)
        assert mx.pad(mx.zeros((0, 3)), [(0, 0), (2, 1)], mode=mode).shape == (0, 6)
    with pytest.raises(ValueError, match="wrap"):
        mx.pad(a, 1, mode="wrap")


def test_roll_pairs_shifts_and_axes_as_numpy():
    x = np.arange(10).reshape(2, 5)
    shifts = [1, -2, (1, 1), (-1, 2), (33, 33), (3, -1, 2)]
    axes = [None, 0, 1, -1, (1, 0), (0, 0), (1, 1)]
    for s, ax in itertools.product(shifts, axes):
        try:
            want = np.roll(x, s, ax)
        except ValueError:
            with pytest.raises(ValueError):
                mx.roll(mx.array(x), s, ax)
            continue
        np.testing.assert_array_equal(np.array(mx.roll(mx.array(x), s, ax)), want, err_msg=f"{s} {ax}")


def test_arange_infers_int64_for_large_bounds_and_truncates_integer_steps():
    assert mx.arange(2**40, 2**40 + 3).dtype == mx.int64
    assert mx.arange(2**40, 2**40 + 3).tolist() == [2**40, 2**40 + 1, 2**40 + 2]
    assert mx.arange(2**31 - 3, 2**31 - 1).dtype == mx.int32
    # An integer range steps by the step truncated (mlx): the length comes from the float step.
    assert mx.arange(0, 3, 0.2, dtype=mx.int32).tolist() == [0] * 15
    assert mx.arange(-1, -20, -1.2, dtype=mx.int32).tolist() == list(range(-1, -17, -1))
    assert mx.arange(stop=2, step=0.5).tolist() == [0.0, 0.5, 1.0, 1.5]
    assert mx.arange(-3, step=-1).tolist() == [0, -1, -2]
    # An infinite step gives the start alone when it lies before the stop (mlx).
    assert mx.arange(0, 10, float("inf")).tolist() == [0]
    assert mx.arange(0, -10, float("-inf")).tolist() == [0]
    assert mx.arange(10, 0, float("inf")).tolist() == []
    with pytest.raises(TypeError):
        mx.arange(start=1, step=2)
    for bad in [(float("nan"), 1, 5), (0, 2, float("nan")), (float("inf"), 1, 5), (0, 2**40, 1)]:
        with pytest.raises(ValueError):
            mx.arange(*bad)
    with pytest.raises(ValueError, match="at least 0"):
        mx.linspace(0, 1, -1)


def test_argmin_argmax_keepdims_over_all_axes_keeps_every_axis():
    data = np.random.default_rng(1).random((4, 5, 6))
    for name in ["argmin", "argmax"]:
        got = getattr(mx, name)(mx.array(data), keepdims=True)
        want = getattr(np, name)(data, keepdims=True)
        assert got.shape == want.shape and got.tolist() == want.tolist()


def test_isclose_counts_only_equal_infinities_as_close():
    a = mx.array([np.inf, np.inf, -np.inf, 1.0, np.inf])
    b = mx.array([np.inf, -np.inf, -np.inf, np.inf, 1.0])
    want = np.isclose(np.array(a), np.array(b))
    assert mx.isclose(a, b).tolist() == want.tolist()


def test_negative_integer_exponents_give_zero_as_in_mlx():
    for dtype in [mx.int8, mx.int16, mx.int32, mx.int64]:
        x = mx.power(mx.array([2, -2, 1, -1, 3], dtype), mx.array([-1, -3, -9, -2, 2], dtype))
        assert x.tolist() == [0, 0, 0, 0, 9]


def test_meshgrid_returns_a_tuple_and_like_ops_take_a_dtype():
    x = mx.array([1, 2, 3])
    grids = mx.meshgrid(x, mx.array([4, 5]))
    assert isinstance(grids, tuple)
    want = np.meshgrid(np.array([1, 2, 3]), np.array([4, 5]))
    for g, w in zip(grids, want):
        np.testing.assert_array_equal(np.array(g), w)
    for like, value in [(mx.zeros_like, 0), (mx.ones_like, 1), (mx.empty_like, 0)]:
        z = like(x, mx.float16)
        assert z.dtype == mx.float16 and z.tolist() == [value] * 3
        assert like(x).dtype == mx.int32


def test_searchsorted_puts_nan_after_every_number():
    a = np.array([1, 2, 3, np.nan], np.float32)
    v = np.array([np.nan, 2, 5, -1], np.float32)
    for side in ["left", "right"]:
        got = mx.searchsorted(mx.array(a), mx.array(v), side=side)
        assert got.tolist() == np.searchsorted(a, v, side=side).tolist()


def test_kron_refuses_empty_inputs():
    with pytest.raises(ValueError, match="empty"):
        mx.kron(mx.array([]), mx.array([1, 2]))
    np.testing.assert_array_equal(np.array(mx.kron(mx.array([1, 2]), mx.array([3, 4]))), np.kron([1, 2], [3, 4]))


def test_comparisons_with_lists_and_strings_follow_mlx():
    a = mx.array([1, 2, 3])
    # Equality with anything that is not an array, a number or a numpy array is plain False.
    assert (a == [1, 2, 3]) is False and (a != (1, 2, 3)) is True and (a == "x") is False
    assert (a == np.array([1, 2, 4])).tolist() == [True, True, False]
    for other in ["hello", [1, 2, 3], (1, 2, 3)]:
        for compare in [lambda x, y: x < y, lambda x, y: x <= y, lambda x, y: x > y, lambda x, y: x >= y]:
            with pytest.raises(ValueError):
                compare(a, other)
    assert (a < 2).tolist() == [True, False, False]


def test_python_ints_that_do_not_fit_the_array_dtype_are_errors():
    y = mx.array(2_000_000_000, dtype=mx.int32)
    with pytest.raises(ValueError, match="3000000000"):
        y + 3_000_000_000
    with pytest.raises(ValueError, match="int8"):
        mx.add(mx.array([1], dtype=mx.int8), 300)
    with pytest.raises(ValueError, match="uint8"):
        mx.multiply(mx.array([1], dtype=mx.uint8), -1)
    assert (mx.array([1], dtype=mx.int64) + 3_000_000_000).tolist() == [3_000_000_001]


def test_float64_arrays_keep_python_float_precision():
    x = 39.14223403241
    assert mx.array(x, dtype=mx.float64).item() == x
    assert mx.array([x, 1], dtype=mx.float64).tolist() == [x, 1.0]


def test_format_specs_apply_to_0d_arrays_only():
    assert f"{mx.arange(3)[1]:.2f}" == "1.00"
    assert f"{mx.array(0.35487):.1f}" == "0.4"
    assert f"{mx.array([1, 2, 3])}" == "array([1, 2, 3], dtype=int32)"
    with pytest.raises(TypeError):
        f"{mx.arange(3):.2f}"


def test_arrays_take_weak_references_and_can_cast_follows_promotion():
    import weakref

    a = mx.array([1.0])
    ref = weakref.ref(a)
    assert ref() is a
    del a
    assert ref() is None
    for source, target in itertools.product([mx.int8, mx.int16, mx.uint8, mx.uint16, mx.float32, mx.float64], repeat=2):
        want = np.can_cast(np.dtype(str(source).split(".")[-1]), np.dtype(str(target).split(".")[-1]))
        assert mx.can_cast(source, target) == want, (source, target)


def test_broadcast_shapes_matches_numpy():
    cases = [[(1, 2, 3), (3,)], [(4, 1, 6), (5, 6)], [(1, 1), (1, 8), (7, 1)], [(2, 3)], [(), ()], [(), (1,)],
             [(1, 0, 5), (3, 1, 5)], [(5, 0), (0, 5, 0)]]
    for shapes in cases:
        assert mx.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)
    for bad in [[(3, 4), (4, 3)], [(2, 3, 4), (2, 5, 4)], []]:
        with pytest.raises(ValueError):
            mx.broadcast_shapes(*bad)


def test_as_strided_matches_numpy_and_refuses_reads_outside_the_input():
    x = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    for shape, strides in [((10, 10), (3, 3)), ((5, 5), (7, 1)), ((2, 20), (1, 5)), ((10,), (4,))]:
        for offset in [0, 1, 3]:
            want = np.lib.stride_tricks.as_strided(x[offset:], shape, np.multiply(strides, 4))
            np.testing.assert_array_equal(np.array(mx.as_strided(mx.array(x), shape, strides, offset)), want)
    y = mx.arange(32)
    assert mx.as_strided(y, (32,), (-1,), 31).tolist() == list(range(31, -1, -1))
    assert mx.as_strided(y.reshape(4, 8)).tolist() == y.reshape(4, 8).tolist()
    with pytest.raises(ValueError, match="negative"):
        mx.as_strided(y, (-2, 3), (3, 1), 0)
    with pytest.raises(ValueError, match="outside"):
        mx.as_strided(y, (4,), (10,), 5)
