"""The array type: construction, properties, conversion to Python and numpy, printing, errors."""

import numpy as np
import pytest

import kiln.core as mx


def test_scalars_and_lists_take_mlx_default_dtypes():
    assert mx.array(1).dtype == mx.int32
    assert mx.array(1.5).dtype == mx.float32
    assert mx.array(True).dtype == mx.bool_
    assert mx.array([1, 2, 3]).dtype == mx.int32
    assert mx.array([1, 2.5]).dtype == mx.float32
    assert mx.array([True, False]).dtype == mx.bool_
    assert mx.array([2**40]).dtype == mx.int64
    assert mx.array([]).shape == (0,)


def test_nested_lists_keep_their_shape_and_values():
    data = [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]]
    a = mx.array(data)
    assert a.shape == (2, 3, 2)
    assert a.ndim == 3 and a.size == 12
    assert a.tolist() == data


def test_dtype_argument_casts():
    a = mx.array([1.7, -2.2], dtype=mx.int32)
    assert a.dtype == mx.int32
    assert a.tolist() == [1, -2]
    assert mx.array(3, dtype=mx.float16).dtype == mx.float16


def test_ragged_list_is_a_value_error():
    with pytest.raises(ValueError, match="ragged"):
        mx.array([[1, 2], [3]])


def test_unsupported_element_is_a_type_error():
    with pytest.raises(TypeError, match="nested list"):
        mx.array([1, "two"])
    with pytest.raises(TypeError, match="cannot make an array"):
        mx.array(object())


def test_list_of_arrays_stacks():
    a = mx.array([mx.array([1.0, 2.0]), mx.array([3.0, 4.0])])
    assert a.shape == (2, 2)
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize(
    "np_dtype,kiln_dtype",
    [
        (np.bool_, mx.bool_),
        (np.uint8, mx.uint8),
        (np.uint16, mx.uint16),
        (np.uint32, mx.uint32),
        (np.uint64, mx.uint64),
        (np.int8, mx.int8),
        (np.int16, mx.int16),
        (np.int32, mx.int32),
        (np.int64, mx.int64),
        (np.float16, mx.float16),
        (np.float32, mx.float32),
    ],
)
def test_numpy_round_trip_keeps_dtype_and_values(rng, np_dtype, kiln_dtype):
    x = (rng.standard_normal((3, 4)) * 10).astype(np_dtype)
    a = mx.array(x)
    assert a.dtype == kiln_dtype
    assert a.shape == (3, 4)
    back = np.array(a)
    assert back.dtype == x.dtype
    np.testing.assert_array_equal(back, x)


def test_numpy_float64_becomes_float32_as_in_mlx(rng):
    x = rng.standard_normal(5)
    assert mx.array(x).dtype == mx.float32
    assert mx.array(x, dtype=mx.float64).dtype == mx.float64
    np.testing.assert_allclose(np.array(mx.array(x)), x, rtol=1e-6)


def test_non_contiguous_numpy_input_is_read_in_logical_order(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    view = x[::2, ::-3].T
    np.testing.assert_array_equal(np.array(mx.array(view)), view)


def test_asarray_shares_memory_and_follows_strides():
    a = mx.arange(12).reshape(3, 4)
    t = a.T
    v = np.asarray(t)
    assert v.shape == (4, 3)
    assert not v.flags.writeable
    np.testing.assert_array_equal(v, np.arange(12).reshape(3, 4).T)
    # A view of a view: numpy reads the same block kiln holds.
    assert np.shares_memory(np.asarray(a), v)


def test_bfloat16_converts_to_float32_for_numpy():
    a = mx.array([1.5, -2.0], dtype=mx.bfloat16)
    n = np.array(a)
    assert n.dtype == np.float32
    np.testing.assert_array_equal(n, [1.5, -2.0])


def test_item_and_python_conversions():
    assert mx.array(3).item() == 3 and isinstance(mx.array(3).item(), int)
    assert mx.array(2.5).item() == 2.5
    assert mx.array(True).item() is True
    assert mx.array([2**63 - 1], dtype=mx.uint64).item() == 2**63 - 1
    assert int(mx.array(7)) == 7
    assert float(mx.array(0.25)) == 0.25
    assert bool(mx.array([1]))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(mx.array([1, 2]))
    with pytest.raises(ValueError, match="one element"):
        mx.array([1, 2]).item()


def test_len_and_iteration_walk_the_first_axis():
    a = mx.array([[1, 2], [3, 4], [5, 6]])
    assert len(a) == 3
    rows = [r.tolist() for r in a]
    assert rows == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError):
        len(mx.array(1))


def test_properties():
    a = mx.zeros((2, 5), dtype=mx.float16)
    assert a.itemsize == 2
    assert a.nbytes == 20
    assert a.T.shape == (5, 2)
    assert mx.float32.size == 4


def test_repr_prints_like_mlx():
    assert repr(mx.array([1, 2, 3])) == "array([1, 2, 3], dtype=int32)"
    assert repr(mx.array(True)) == "array(True, dtype=bool)"
    assert repr(mx.float32) == "kiln.core.float32"


def test_arrays_hash_by_identity():
    a, b = mx.array(1), mx.array(1)
    assert len({a, b}) == 2


def test_dtype_categories():
    assert mx.issubdtype(mx.float16, mx.floating)
    assert mx.issubdtype(mx.int8, mx.signedinteger)
    assert mx.issubdtype(mx.uint8, mx.integer)
    assert not mx.issubdtype(mx.int32, mx.floating)
    assert mx.issubdtype(mx.floating, mx.number)
    assert not mx.issubdtype(mx.bool_, mx.number)


def test_devices():
    assert mx.default_device() == mx.Device(mx.cpu)
    mx.synchronize()
    with pytest.raises(RuntimeError, match="not available"):
        mx.set_default_device(mx.gpu)
    with pytest.raises(RuntimeError, match="not available"):
        mx.add(mx.array(1), 2, stream=mx.gpu)
    assert mx.add(mx.array(1), 2, stream=mx.cpu).item() == 3


def test_lists_of_numpy_scalars():
    a = mx.array([np.float32(1.5), np.int64(2)])
    assert a.dtype == mx.float32 and a.tolist() == [1.5, 2.0]
    assert mx.array([np.int32(1), np.int64(2)]).dtype == mx.int32


def test_objects_with_only_dunder_array_convert_through_numpy():
    class Foreign:
        def __array__(self, dtype=None, copy=None):
            return np.arange(6, dtype=np.int16).reshape(2, 3)

    a = mx.array(Foreign())
    assert a.dtype == mx.int16 and a.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_dunder_array_refuses_copy_false_when_it_must_convert():
    a = mx.array([1.0, 2.0])
    np.testing.assert_array_equal(a.__array__(copy=False), [1.0, 2.0])
    with pytest.raises(ValueError, match="copy=False"):
        a.__array__(np.float64, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        mx.array([1.0], dtype=mx.bfloat16).__array__(copy=False)
