"""``mx.fast.cuda_kernel``: definitions and calls that cannot work raise clear errors everywhere;
on a GPU, kernels written as for mlx give numpy's results (templates, scalar and bfloat16 inputs,
strided inputs, helpers in a header, initial values with atomics, a compiled function around a
kernel)."""

import numpy as np
import pytest

import kiln.core as mx

HAS_GPU = mx.is_available(mx.gpu)
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no usable GPU")
ELEM = "auto elem = cooperative_groups::this_grid().thread_rank();\n"


def test_bad_definitions_and_arguments_raise():
    with pytest.raises(ValueError, match="not a C identifier"):
        mx.fast.cuda_kernel("two words", ["a"], ["out"], "")
    with pytest.raises(ValueError, match="names no outputs"):
        mx.fast.cuda_kernel("k", ["a"], [], "")
    with pytest.raises(ValueError, match="names 'a' twice"):
        mx.fast.cuda_kernel("k", ["a"], ["a"], "")
    with pytest.raises(RuntimeError, match="no Metal backend"):
        mx.fast.metal_kernel("k", ["a"], ["out"], "")
    k = mx.fast.cuda_kernel("k", ["a"], ["out"], ELEM + "out[elem] = a[elem];")
    a = mx.array([1.0, 2.0])
    call = dict(inputs=[a], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2,)], output_dtypes=[mx.float32])
    with pytest.raises(ValueError, match="runs on a GPU"):
        k(**call, stream=mx.cpu)
    with pytest.raises(ValueError, match="negative dimension"):
        k(**{**call, "output_shapes": [(-2,)]})
    with pytest.raises(ValueError, match="1 output_shapes but 2 output_dtypes"):
        k(**{**call, "output_dtypes": [mx.float32, mx.int32]})
    with pytest.raises(TypeError, match="template value T is a float"):
        k(**call, template=[("T", 1.5)], stream=mx.cpu)
    with pytest.raises(TypeError):
        k([a])  # arguments are keyword-only, as in mlx


@needs_gpu
def test_templates_scalars_and_bfloat16_inputs(rng):
    a = rng.standard_normal((3, 6)).astype(np.float32)
    c = (np.round(rng.standard_normal((2, 2)) * 8) / 8).astype(np.float32)
    source = ELEM + """
        T tmp = a[0];
        if (e) { out1[elem] = a[1] + b[2] + static_cast<float>(c[3]) + d[0] + f; } else { out1[elem] = 1; }
        out2[elem] = a[1] + b[2] + static_cast<float>(c[1]) - d[0];
    """
    k = mx.fast.cuda_kernel("arg_test", ["a", "b", "c", "d"], ["out1", "out2"], source)
    out = k(
        inputs=[mx.array(a), mx.array([3, 4, 5]), mx.array(c).astype(mx.bfloat16), 7.25],
        template=[("e", True), ("f", 3), ("T", mx.float16)],
        grid=(6, 1, 1),
        threadgroup=(2, 1, 1),
        output_shapes=[(3, 2), (3, 2)],
        output_dtypes=[mx.float32, mx.int32],
        stream=mx.gpu,
    )
    want1 = np.float64(a.flat[1]) + 5 + c.flat[3] + 7.25 + 3
    np.testing.assert_allclose(np.array(out[0]), np.full((3, 2), want1), rtol=1e-6)
    want2 = np.trunc(np.float64(a.flat[1]) + 5 + c.flat[1] - 7.25)
    np.testing.assert_array_equal(np.array(out[1]), np.full((3, 2), want2, np.int32))


@needs_gpu
@pytest.mark.parametrize("contiguous", [True, False])
def test_strided_inputs(rng, contiguous):
    a = rng.standard_normal((3, 6)).astype(np.float32)
    x = mx.tile(mx.array(a)[::2], [4, 1])
    if contiguous:
        source = ELEM + "T tmp = inp[elem]; out[elem] = exp(tmp) * WARP_SIZE;"
    else:
        source = ELEM + "auto loc = elem_to_loc(elem, inp_shape.data(), inp_strides.data(), inp_ndim);\n" \
            "T tmp = inp[loc]; out[elem] = exp(tmp) * WARP_SIZE;"
    k = mx.fast.cuda_kernel(f"myexp{contiguous}", ["inp"], ["out"], source, ensure_row_contiguous=contiguous)
    out = k(inputs=[x], template=[("T", mx.float32)], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
            output_shapes=[x.shape], output_dtypes=[x.dtype], stream=mx.gpu)[0]
    np.testing.assert_allclose(np.array(out), np.exp(np.tile(a[::2], (4, 1)).astype(np.float64)) * 32, rtol=1e-6)


@needs_gpu
def test_header_helpers_block_size_and_atomics_with_an_initial_value(rng):
    header = "template <typename T> __device__ T do_exp(T x) { return exp(x); }"
    a = rng.standard_normal((2, 2)).astype(np.float32)
    k = mx.fast.cuda_kernel("helper", ["a"], ["out1"], ELEM + "out1[elem] = do_exp(a[elem]);", header=header)
    out = k(inputs=[mx.array(a)], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)],
            output_dtypes=[mx.float32], stream=mx.gpu)[0]
    np.testing.assert_allclose(np.array(out), np.exp(a.astype(np.float64)), rtol=1e-6)
    k = mx.fast.cuda_kernel("test_fun", ["a"], ["out"], "out[0] = blockDim.x;")
    out = k(inputs=[mx.zeros((1, 1))], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(1, 1)],
            output_dtypes=[mx.uint32], stream=mx.gpu)[0]
    assert out.item() == 2
    bins = rng.integers(0, 8, 5000).astype(np.int32)
    k = mx.fast.cuda_kernel("hist", ["x"], ["counts"], ELEM + "if (elem < n) atomicAdd(&counts[x[elem]], 1.0f);",
                            atomic_outputs=True)
    out = k(inputs=[mx.array(bins)], template=[("n", 5000)], grid=(5000, 1, 1), threadgroup=(128, 1, 1),
            output_shapes=[(8,)], output_dtypes=[mx.float32], init_value=2.0, stream=mx.gpu)[0]
    np.testing.assert_array_equal(np.array(out), np.bincount(bins, minlength=8) + 2.0)


@needs_gpu
def test_a_compiled_function_fuses_around_a_kernel(rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)
    k = mx.fast.cuda_kernel("twice", ["inp"], ["out"], ELEM + "if (elem < n) out[elem] = 2 * inp[elem];")

    def f(v):
        pre = mx.maximum(v * 1.5 + 0.25, 0)
        out = k(inputs=[pre], template=[("n", pre.size)], grid=(pre.size, 1, 1), threadgroup=(256, 1, 1),
                output_shapes=[pre.shape], output_dtypes=[pre.dtype])[0]
        return mx.exp(-out) + 1

    with mx.stream(mx.gpu):
        compiled = mx.compile(f)(mx.array(x))
        eager = f(mx.array(x))
    want = np.exp(-2 * np.maximum(x.astype(np.float64) * 1.5 + 0.25, 0)) + 1
    np.testing.assert_allclose(np.array(compiled), want, rtol=1e-6)
    np.testing.assert_allclose(np.array(compiled), np.array(eager), rtol=1e-6)


# The layer ops against numpy in float64 (written here from their definitions).


def _np_rms_norm(x, w, eps):
    x = x.astype(np.float64)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def _np_layer_norm(x, w, b, eps):
    x = x.astype(np.float64)
    c = x - x.mean(axis=-1, keepdims=True)
    y = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _np_rope(x, dims, traditional, base, scale, offset):
    x = x.astype(np.float64)
    n = x.shape[-2]
    pos = (np.asarray(offset, dtype=np.float64).reshape((-1,) + (1,) * (x.ndim - 2)) + np.arange(n)) * scale
    inv = base ** (-np.arange(dims // 2) * 2.0 / dims)
    theta = pos[..., None] * inv
    out = x.copy()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2] = a * np.cos(theta) - b * np.sin(theta)
        out[..., 1:dims:2] = a * np.sin(theta) + b * np.cos(theta)
    else:
        h = dims // 2
        a, b = x[..., :h], x[..., h:dims]
        out[..., :h] = a * np.cos(theta) - b * np.sin(theta)
        out[..., h:dims] = a * np.sin(theta) + b * np.cos(theta)
    return out


def _np_attention(q, k, v, scale, mask):
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    repeats = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, repeats, axis=1), np.repeat(v, repeats, axis=1)
    s = q @ np.swapaxes(k, -1, -2) * scale
    if isinstance(mask, str):
        L, S = q.shape[2], k.shape[2]
        s = np.where(np.arange(L)[:, None] + S - L >= np.arange(S)[None], s, -np.inf)
    elif mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True) @ v


def test_norms_match_numpy_in_every_float_dtype(rng):
    for dtype, tol in ((mx.float32, 2e-5), (mx.float16, 2e-2), (mx.bfloat16, 8e-2)):
        x = rng.normal(size=(3, 5, 33)).astype(np.float32)
        w = rng.uniform(0.5, 1.5, 33).astype(np.float32)
        b = rng.normal(size=33).astype(np.float32)
        X, W, B = (mx.array(t).astype(dtype) for t in (x, w, b))
        xs, ws, bs = (np.array(t.astype(mx.float32)) for t in (X, W, B))
        got = mx.fast.rms_norm(X, W, 1e-5)
        assert got.dtype == dtype
        np.testing.assert_allclose(np.array(got.astype(mx.float32)), _np_rms_norm(xs, ws, 1e-5), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.array(mx.fast.rms_norm(X, None, 1e-5).astype(mx.float32)), _np_rms_norm(xs, None, 1e-5), rtol=tol, atol=tol)
        for wp, bp in ((W, B), (W, None), (None, B), (None, None)):
            want = _np_layer_norm(xs, None if wp is None else ws, None if bp is None else bs, 1e-5)
            got = mx.fast.layer_norm(X, wp, bp, 1e-5)
            np.testing.assert_allclose(np.array(got.astype(mx.float32)), want, rtol=tol, atol=tol)
    # A float16 input with float32 weights gives float32, as arithmetic between them would.
    assert mx.fast.rms_norm(mx.ones((2, 4), mx.float16), mx.ones((4,)), 1e-5).dtype == mx.float32


def test_rope_matches_numpy_for_both_layouts_partial_dims_and_offsets(rng):
    x = rng.normal(size=(3, 2, 7, 16)).astype(np.float32)
    for traditional in (False, True):
        for dims in (16, 8):
            for offset in (0, 5, mx.array(2), mx.array([0, 3, 9])):
                got = mx.fast.rope(mx.array(x), dims, traditional=traditional, base=10000.0, scale=0.5, offset=offset)
                off = np.array(offset) if isinstance(offset, mx.array) else offset
                want = _np_rope(x, dims, traditional, 10000.0, 0.5, off)
                np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-4)
    # A large offset in bfloat16 keeps its positions exact (they are float32 inside).
    far = mx.fast.rope(mx.array(x).astype(mx.bfloat16), 16, traditional=False, base=10000.0, scale=1.0, offset=4000)
    np.testing.assert_allclose(np.array(far.astype(mx.float32)), _np_rope(x, 16, False, 10000.0, 1.0, 4000), atol=5e-2)


def test_attention_matches_numpy_with_masks_and_grouped_heads(rng):
    q = rng.normal(size=(2, 4, 5, 8)).astype(np.float32)
    k = rng.normal(size=(2, 2, 7, 8)).astype(np.float32)
    v = rng.normal(size=(2, 2, 7, 6)).astype(np.float32)
    additive = rng.normal(size=(2, 4, 5, 7)).astype(np.float32)
    boolean = rng.uniform(size=(5, 7)) < 0.7
    boolean[:, 0] = True
    for mask in (None, "causal", additive, boolean):
        m = mx.array(mask) if isinstance(mask, np.ndarray) else mask
        got = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(k), mx.array(v), scale=0.3, mask=m)
        assert got.shape == (2, 4, 5, 6)
        np.testing.assert_allclose(np.array(got), _np_attention(q, k, v, 0.3, mask), rtol=1e-4, atol=1e-5)


def test_layer_op_gradients_match_finite_differences(rng):
    x = mx.array(rng.normal(size=(2, 6)).astype(np.float32))
    w = mx.array(rng.uniform(0.5, 1.5, 6).astype(np.float32))
    cases = [
        ("rms_norm", lambda t: (mx.fast.rms_norm(t, w, 1e-5) * mx.arange(12).reshape(2, 6)).sum()),
        ("layer_norm", lambda t: (mx.fast.layer_norm(t, w, w, 1e-5) ** 2).sum()),
        ("rope", lambda t: (mx.fast.rope(t.reshape(1, 2, 6), 4, traditional=True, base=100.0, scale=1.0, offset=1) * t.reshape(1, 2, 6)).sum()),
    ]
    x64 = np.array(x).astype(np.float64)
    for name, f in cases:
        g = np.array(mx.grad(f)(x))
        h = 1e-2
        for i in range(x64.size):
            step = np.zeros(x64.size)
            step[i] = h
            up = f(mx.array((x64.ravel() + step).reshape(2, 6).astype(np.float32))).item()
            down = f(mx.array((x64.ravel() - step).reshape(2, 6).astype(np.float32))).item()
            assert g.ravel()[i] == pytest.approx((up - down) / (2 * h), rel=2e-2, abs=2e-2), (name, i)


def test_layer_ops_reject_bad_arguments_clearly():
    x = mx.ones((2, 4, 8))
    with pytest.raises(ValueError, match="rms_norm: weight must be one-dimensional"):
        mx.fast.rms_norm(x, mx.ones((7,)), 1e-5)
    with pytest.raises(ValueError, match="layer_norm: bias must be"):
        mx.fast.layer_norm(x, None, mx.ones((2, 8)), 1e-5)
    for dims in (0, -2, 7, 10):
        with pytest.raises(ValueError, match="rope: dims"):
            mx.fast.rope(x, dims, traditional=False, base=10000.0, scale=1.0, offset=0)
    with pytest.raises(ValueError, match="floating point"):
        mx.fast.rope(mx.ones((2, 4, 8), mx.int32), 8, traditional=False, base=10000.0, scale=1.0, offset=0)
    with pytest.raises(ValueError, match="one entry per batch element"):
        mx.fast.rope(x, 8, traditional=False, base=10000.0, scale=1.0, offset=mx.array([1, 2, 3]))
    with pytest.raises(ValueError, match="base or freqs"):
        mx.fast.rope(x, 8, traditional=False, base=None, scale=1.0, offset=0)
    q = mx.ones((1, 3, 4, 8))
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        mx.fast.scaled_dot_product_attention(q, mx.ones((1, 2, 4, 8)), mx.ones((1, 2, 4, 8)), scale=1.0)
    with pytest.raises(ValueError, match="'causal'"):
        mx.fast.scaled_dot_product_attention(q, q, q, scale=1.0, mask="upper")
    with pytest.raises(ValueError, match="sinks"):
        mx.fast.scaled_dot_product_attention(q, q, q, scale=1.0, sinks=mx.ones((4,)))


def test_dtype_facts_match_numpy():
    for d, n in ((mx.float16, np.float16), (mx.float32, np.float32), (mx.float64, np.float64)):
        info = mx.finfo(d)
        assert (info.min, info.max, info.eps, info.bits) == (float(np.finfo(n).min), float(np.finfo(n).max), float(np.finfo(n).eps), np.finfo(n).bits)
    assert mx.finfo(mx.bfloat16).max == float.fromhex("0x1.fep127") and mx.finfo(mx.bfloat16).eps == 2.0**-7
    assert (mx.iinfo(mx.uint8).min, mx.iinfo(mx.uint8).max, mx.iinfo(mx.int64).min) == (0, 255, np.iinfo(np.int64).min)
    with pytest.raises(ValueError):
        mx.finfo(mx.int32)
    with pytest.raises(ValueError):
        mx.iinfo(mx.float32)
    assert mx.result_type(mx.array([1], dtype=mx.int8), mx.int16, mx.int32) == mx.int32
    assert mx.result_type(mx.float16, mx.bfloat16) == mx.float32
    with pytest.raises(ValueError):
        mx.result_type()
