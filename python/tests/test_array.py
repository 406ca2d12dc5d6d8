"""The array type: construction, properties, conversion to Python and numpy, printing, errors."""

import ctypes
import io

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


def test_unsupported_elements_are_refused():
    with pytest.raises(ValueError, match="nested list"):
        mx.array([1, "two"])
    with pytest.raises(TypeError, match="cannot make an array"):
        mx.array(object())


def test_list_of_arrays_stacks():
    a = mx.array([mx.array([1.0, 2.0]), mx.array([3.0, 4.0])])
    assert a.shape == (2, 2)
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]


ALL_NUMPY_DTYPES = [
    (np.bool_, mx.bool_, "?"),
    (np.uint8, mx.uint8, "B"),
    (np.uint16, mx.uint16, "H"),
    (np.uint32, mx.uint32, "I"),
    (np.uint64, mx.uint64, "Q"),
    (np.int8, mx.int8, "b"),
    (np.int16, mx.int16, "h"),
    (np.int32, mx.int32, "i"),
    (np.int64, mx.int64, "q"),
    (np.float16, mx.float16, "e"),
    (np.float32, mx.float32, "f"),
    (np.float64, mx.float64, "d"),
]


@pytest.mark.parametrize(
    "np_dtype, kiln_dtype",
    # float64 input becomes float32, as in mlx (tested below).
    [(n, k) for n, k, _ in ALL_NUMPY_DTYPES if n is not np.float64],
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


@pytest.mark.parametrize("np_dtype, kiln_dtype, fmt", ALL_NUMPY_DTYPES)
def test_memoryview_exports_every_dtype_in_place(rng, np_dtype, kiln_dtype, fmt):
    x = (rng.standard_normal((3, 4)) * 10).astype(np_dtype)
    a = mx.array(x, dtype=kiln_dtype)
    m = memoryview(a)
    assert (m.format, m.itemsize, m.shape, m.ndim) == (fmt, x.itemsize, (3, 4), 2)
    assert m.strides == x.strides and m.nbytes == x.nbytes
    assert m.readonly and m.c_contiguous
    np.testing.assert_array_equal(np.asarray(m), x)
    assert bytes(m) == x.tobytes()
    # The view is kiln's own memory, not a copy.
    assert np.asarray(m).__array_interface__["data"][0] == a.__array_interface__["data"][0]


@pytest.mark.parametrize("view", ["transpose", "step", "reverse", "column"])
def test_memoryview_of_a_strided_view_follows_its_strides(rng, view):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    a = mx.array(x)
    make = {
        "transpose": lambda v: v.T,
        "step": lambda v: v[::2, 1::3],
        "reverse": lambda v: v[::-1, ::-2],
        "column": lambda v: v[:, 2],
    }[view]
    want, got = make(x), make(a)
    m = memoryview(got)
    assert m.shape == want.shape and m.strides == want.strides
    np.testing.assert_array_equal(np.asarray(m), want)
    assert m.tolist() == want.tolist()
    # Consumers that need contiguous memory get it in logical (row-major) order.
    assert bytes(got) == np.ascontiguousarray(want).tobytes()


def test_memoryview_of_scalars_and_empty_arrays():
    m = memoryview(mx.array(3.5))
    assert (m.ndim, m.shape, m.format) == (0, (), "f")
    assert np.asarray(m) == np.float32(3.5)
    e = memoryview(mx.zeros((0, 3)))
    assert e.shape == (0, 3) and e.nbytes == 0 and e.tolist() == []


def test_memoryview_keeps_the_exported_data_alive():
    a = mx.arange(6, dtype=mx.float32)
    m = memoryview(a + 1)  # the temporary array dies here; its memory must not
    a += 100  # in place: `a` now stands for new data; views of the old stay as they were
    n = memoryview(mx.arange(6, dtype=mx.float32) * 0 - 7)
    assert m.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert n.tolist() == [-7.0] * 6
    m.release()
    assert memoryview(a).tolist() == [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]


def test_memoryview_is_read_only():
    a = mx.array([1.0, 2.0])
    m = memoryview(a)
    with pytest.raises(TypeError):
        m[0] = 5.0
    with pytest.raises((BufferError, TypeError)):
        io.BytesIO(b"12345678").readinto(a)
    assert a.tolist() == [1.0, 2.0]


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer, to make buffer requests with explicit flags."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


def _request(obj, flags):
    """(data as bytes in memory order, strides or None) of a buffer request with `flags`."""
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.POINTER(_PyBuffer)]
    view = _PyBuffer()
    get(obj, ctypes.byref(view), flags)
    try:
        strides = [view.strides[i] for i in range(view.ndim)] if view.strides else None
        return ctypes.string_at(view.buf, view.len), strides
    finally:
        release(ctypes.byref(view))


def test_buffer_requests_get_the_layout_they_ask_for(rng):
    simple, strided, c_contig, f_contig, writable = 0, 0x18, 0x38, 0x58, 0x1
    x = rng.standard_normal((3, 5)).astype(np.float32)
    t = mx.array(x).T  # a transposed view: column-major in memory
    want = x.T
    data, strides = _request(t, strided)
    assert strides == list(want.strides)  # in place: no copy was needed
    data, strides = _request(t, simple)
    assert strides is None and data == np.ascontiguousarray(want).tobytes()
    data, strides = _request(t, c_contig)
    assert strides == [12, 4] and data == np.ascontiguousarray(want).tobytes()
    data, strides = _request(t, f_contig)
    assert strides == [4, 20] and data == np.asfortranarray(want).tobytes(order="A")
    step = mx.array(x)[:, ::2]
    data, strides = _request(step, f_contig)
    assert strides == [4, 12] and data == np.asfortranarray(x[:, ::2]).tobytes(order="A")
    with pytest.raises(BufferError, match="read-only"):
        _request(t, writable)


def test_memoryview_refuses_bfloat16_with_the_conversion_to_use():
    with pytest.raises(BufferError, match="astype"):
        memoryview(mx.array([1.0], dtype=mx.bfloat16))


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
    # test_gpu.py covers the GPU and the errors without one.
    mx.synchronize()
    assert mx.add(mx.array(1), 2, stream=mx.cpu).item() == 3
    assert mx.Device(mx.cpu).type == mx.cpu


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


def test_pickling_round_trips_every_dtype(device):
    import pickle

    complex64 = [mx.complex64] if device == "cpu" else []  # the GPU refuses complex64 arithmetic
    for dtype in [mx.bool_, mx.uint8, mx.int16, mx.int64, mx.float16, mx.bfloat16, mx.float32, *complex64]:
        x = mx.array([[1, 0], [3, 4]], dtype=dtype)
        y = pickle.loads(pickle.dumps(x))
        assert y.dtype == dtype and y.shape == (2, 2)
        assert mx.array_equal(y, x).item()
    t = mx.arange(6).reshape(2, 3).T  # a strided view pickles as its values
    assert pickle.loads(pickle.dumps(t)).tolist() == np.arange(6).reshape(2, 3).T.tolist()


def test_arrays_from_bytes_buffers_and_lists_holding_arrays():
    assert mx.array(b"Hi").tolist() == [72, 105] and mx.array(b"Hi").dtype == mx.uint8
    assert mx.array(bytearray([1, 2])).tolist() == [1, 2]
    assert mx.array(memoryview(np.array([1.5, 2.5], np.float32))).tolist() == [1.5, 2.5]
    x, y = mx.array([True]), mx.array([False])
    z = mx.array([[x, [2.0]], [[3.0], y]])
    assert z.dtype == mx.float32 and z.tolist() == [[[1.0], [2.0]], [[3.0], [0.0]]]
    assert mx.array(1.0).__array_namespace__() is mx


def test_update_errors_and_boolean_scalar_masks():
    with pytest.raises(ValueError, match="a.at"):
        mx.array([1, 2]).at.add(1)
    a = mx.array([1, 2])
    with pytest.raises(ValueError, match="floating-point"):
        a /= 2
    b = mx.array([1.0, 2.0, 3.0])
    b[True] = 5.0
    assert b.tolist() == [5.0, 5.0, 5.0]
    b[mx.array(False)] = 0.0
    assert b.tolist() == [5.0, 5.0, 5.0]


def test_in_place_operators_and_updates_may_read_the_array_itself():
    a = mx.array([[1.0, 2.0], [3.0, 4.0]])
    b = a
    b @= a
    np.testing.assert_array_equal(np.array(a), np.array([[1.0, 2.0], [3.0, 4.0]]) @ np.array([[1.0, 2.0], [3.0, 4.0]]))
    c = mx.array([2.0, 3.0])
    c **= c
    assert c.tolist() == [4.0, 27.0]
    d = mx.array([1.0, -2.0, 3.0])
    d[mx.array([True, False, True])] = d  # mlx's masked scatter: the values in order
    want = np.array([1.0, -2.0, 3.0])
    want[[0, 2]] = want[:2]
    assert d.tolist() == want.tolist()
    e = mx.array([0, 1, 2])
    e[e] = e + 5
    assert e.tolist() == [5, 6, 7]


@pytest.mark.parametrize("other", ["hello", [1, 2, 3], (1, 2, 3)])
def test_operators_refuse_strings_lists_and_tuples_as_mlx(other):
    a = mx.array([1.0, 2.5, 3.25])
    for apply in (lambda: a * other, lambda: other * a, lambda: a + other, lambda: a // other, lambda: a & other):
        with pytest.raises(ValueError, match="an operand must be an array"):
            apply()
    b = mx.array([1.0, 2.5, 3.25])
    with pytest.raises(ValueError, match=r"\*="):
        b *= other
    assert b.tolist() == [1.0, 2.5, 3.25]


def test_unknown_objects_get_their_reflected_operator():
    class Tagged:
        def __radd__(self, other):
            return ("radd", other.tolist())

    assert mx.array([1, 2]) + Tagged() == ("radd", [1, 2])
    # Complex scalars are operands (complex64 runs on the CPU).
    with mx.stream(mx.cpu):
        assert (mx.array([1.0]) == 2j).tolist() == [False]
        assert (mx.array([1.0]) * 2j).tolist() == [2j]


def test_bad_indices_are_both_index_and_value_errors():
    for exc in (IndexError, ValueError):
        with pytest.raises(exc, match="too many indices"):
            a = mx.array(0)
            a[0] = mx.array(1)
        with pytest.raises(exc, match="out of bounds"):
            mx.array([1, 2])[5]


def test_printing_follows_c_formats_and_print_options():
    values = [1.123456789, 1e-5, 1234567.0, -2.5]
    x = mx.array(values, dtype=mx.float64)
    stored = np.array(x).tolist()
    assert str(x) == "array([" + ", ".join("%g" % v for v in stored) + "], dtype=float64)"
    assert mx.get_printoptions().precision == -1
    with mx.printoptions(precision=3):
        assert mx.get_printoptions().precision == 3
        assert str(x) == "array([" + ", ".join("%.3f" % v for v in stored) + "], dtype=float64)"
    assert mx.get_printoptions().precision == -1
    mx.set_printoptions(precision=1)
    try:
        assert str(mx.array([0.25], dtype=mx.float64)) == "array([%.1f], dtype=float64)" % 0.25
    finally:
        mx.set_printoptions(precision=-1)
    # Past six entries an axis is summarised, as mlx prints.
    assert str(mx.arange(7)) == "array([0, 1, 2, ..., 4, 5, 6], dtype=int32)"
