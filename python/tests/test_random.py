"""kiln.core.random: determinism by key, the samplers' ranges and moments, and the state list."""

import numpy as np
import pytest

import kiln.core as mx


def test_same_key_same_numbers_and_split_keys_differ():
    k = mx.random.key(42)
    a = mx.random.uniform(shape=(100,), key=k)
    b = mx.random.uniform(shape=(100,), key=k)
    np.testing.assert_array_equal(np.array(a), np.array(b))
    k1, k2 = mx.random.split(k)
    assert not np.array_equal(np.array(mx.random.normal(shape=(10,), key=k1)), np.array(mx.random.normal(shape=(10,), key=k2)))
    assert mx.random.split(k, 3).shape == (3, 2)


def test_seed_makes_global_draws_repeatable():
    mx.random.seed(11)
    a = np.array(mx.random.normal(shape=(50,)))
    mx.random.seed(11)
    b = np.array(mx.random.normal(shape=(50,)))
    np.testing.assert_array_equal(a, b)
    state = mx.random.state[0]
    assert state.shape == (2,) and state.dtype == mx.uint32


def test_sampler_ranges_and_moments():
    k = mx.random.key(0)
    n = 200_000
    u = np.array(mx.random.uniform(-2.0, 3.0, shape=(n,), key=k))
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.02
    z = np.array(mx.random.normal(shape=(n,), loc=1.0, scale=2.0, key=k))
    assert abs(z.mean() - 1.0) < 0.02 and abs(z.std() - 2.0) < 0.02
    t = np.array(mx.random.truncated_normal(-1.0, 1.0, shape=(n,), key=k))
    assert t.min() >= -1.0 and t.max() <= 1.0
    b = np.array(mx.random.bernoulli(0.3, (n,), key=k))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.01
    r = np.array(mx.random.randint(3, 9, shape=(n,), key=k))
    assert r.min() == 3 and r.max() == 8 and r.dtype == np.int32
    arr_bounds = np.array(mx.random.uniform(mx.array([0.0, 10.0]), mx.array([1.0, 11.0]), key=k))
    assert arr_bounds.shape == (2,) and 0 <= arr_bounds[0] < 1 and 10 <= arr_bounds[1] < 11


def test_categorical_and_permutation():
    k = mx.random.key(3)
    logits = mx.log(mx.array([0.1, 0.6, 0.3]))
    s = np.array(mx.random.categorical(logits, num_samples=50_000, key=k))
    freq = np.bincount(s, minlength=3) / 50_000
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.01)
    assert mx.random.categorical(mx.zeros((4, 5)), key=k).shape == (4,)
    assert mx.random.categorical(mx.zeros((5,)), shape=(2, 3), key=k).shape == (2, 3)
    p = np.array(mx.random.permutation(10, key=k))
    assert sorted(p.tolist()) == list(range(10))
    rows = np.array(mx.random.permutation(mx.arange(12).reshape(4, 3), key=k))
    assert sorted(rows[:, 0].tolist()) == [0, 3, 6, 9]
    with pytest.raises(ValueError, match="at most one"):
        mx.random.categorical(logits, shape=(2,), num_samples=2)


def test_meshgrid_matches_numpy():
    x, y = np.arange(3.0), np.arange(4.0)
    for indexing in ("xy", "ij"):
        for sparse in (False, True):
            got = mx.meshgrid(mx.array(x), mx.array(y), indexing=indexing, sparse=sparse)
            want = np.meshgrid(x, y, indexing=indexing, sparse=sparse)
            for g, w in zip(got, want):
                assert g.shape == w.shape
                np.testing.assert_array_equal(np.array(g), w)


def test_bits_widths_and_uniformity():
    k = mx.random.key(9)
    for width, dtype, top in ((1, mx.uint8, 2**8), (2, mx.uint16, 2**16), (4, mx.uint32, 2**32)):
        b = mx.random.bits((4096,), width=width, key=k)
        assert b.dtype == dtype
        v = np.array(b).astype(np.float64)
        assert abs(v.mean() / top - 0.5) < 0.03
    with pytest.raises(ValueError):
        mx.random.bits((2,), width=3)


def test_parameters_as_arrays_broadcast_to_the_sample_shape():
    key = mx.random.key(3)
    low, high = mx.array([[0], [100]]), mx.array([[3], [102]])
    r = np.array(mx.random.randint(low, high, (2, 5000), key=key))
    assert set(r[0].tolist()) == {0, 1, 2} and set(r[1].tolist()) == {100, 101}
    loc, scale = mx.array([0.0, 10.0]), mx.array([1.0, 3.0])
    for sampler in (mx.random.normal, mx.random.laplace):
        z = np.array(sampler((4, 2), key=key))
        np.testing.assert_allclose(np.array(sampler((4, 2), loc=loc, scale=scale, key=key)), z * [1.0, 3.0] + [0.0, 10.0], rtol=1e-5)
    with pytest.raises(ValueError, match="does not broadcast"):
        mx.random.normal((2, 10, 2), loc=mx.zeros((10,)))
    # truncated_normal's shape defaults to the bounds' broadcast shape.
    t = mx.random.truncated_normal(mx.array([[-2.0, 0.0]]), mx.array([[0.0], [1.0], [2.0]]), key=key)
    assert t.shape == (3, 2)
    c = mx.random.normal((3,), dtype=mx.complex64, loc=3.0 + 1j, key=key)
    assert c.dtype == mx.complex64


def test_multivariate_normal_matches_its_mean_and_covariance():
    mean, cov = np.array([1.0, -2.0]), np.array([[2.0, 0.6], [0.6, 1.0]])
    x = np.array(mx.random.multivariate_normal(mx.array(mean), mx.array(cov), shape=(100_000,), key=mx.random.key(4)))
    assert x.shape == (100_000, 2)
    np.testing.assert_allclose(x.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.05)
    with pytest.raises(ValueError, match="multivariate_normal"):
        mx.random.multivariate_normal(mx.zeros((3,)), mx.zeros((2, 2)))
    with pytest.raises(ValueError, match="float32"):
        mx.random.multivariate_normal(mx.zeros((2,)), mx.eye(2), dtype=mx.float16)
