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
