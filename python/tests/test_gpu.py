"""The GPU from Python: availability, device errors, memory statistics, and (where a GPU is
present) ops on ``mx.gpu`` giving the CPU's results, with numpy conversion copying to the host."""

import numpy as np
import pytest

import kiln.core as mx

HAS_GPU = mx.is_available(mx.gpu)
# The default device the process started with (read at collection, before any test's fixture
# sets one).
STARTUP_DEFAULT = mx.default_device()


def test_the_cpu_is_always_available_and_the_default_follows_the_gpu():
    assert mx.is_available(mx.cpu)
    expected = mx.gpu if HAS_GPU else mx.cpu
    assert STARTUP_DEFAULT == expected


def test_memory_statistics_and_transfer_counts():
    a = mx.array(np.ones(1024, np.float32))
    mx.eval(a)
    assert mx.get_active_memory() >= 4096
    assert mx.get_peak_memory() >= mx.get_active_memory()
    assert isinstance(mx.get_cache_memory(), int)
    t = mx.transfers()
    assert set(t) == {"to_device", "to_device_bytes", "to_host", "to_host_bytes"}
    previous = mx.set_cache_limit(1 << 30)
    mx.set_cache_limit(previous)
    mx.clear_cache()


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_without_a_gpu_asking_for_one_is_a_clear_error():
    with pytest.raises(ValueError, match="gpu|GPU|driver|libcuda"):
        mx.set_default_device(mx.gpu)
    with pytest.raises(ValueError, match="libcuda|driver|GPU"):
        mx.exp(mx.array([1.0]), stream=mx.gpu)
    with pytest.raises(ValueError):
        mx.new_stream(mx.gpu)
    assert mx.default_device().type == mx.cpu


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_a_stream_scope_on_a_missing_gpu_fails_on_entry_and_leaves_no_scope():
    with pytest.raises(ValueError, match="libcuda|driver|GPU"):
        with mx.stream(mx.gpu):
            pass
    with mx.stream(mx.cpu) as s:
        assert s == mx.default_stream(mx.cpu)
        y = mx.exp(mx.array([0.0]))
    assert y.item() == 1.0


@pytest.mark.skipif(not HAS_GPU, reason="no usable GPU")
def test_a_stream_scope_places_its_ops():
    x = mx.array(np.arange(8, dtype=np.float32))
    before = mx.transfers()["to_device"]
    with mx.stream(mx.cpu):
        mx.eval(mx.exp(x))
    assert mx.transfers()["to_device"] == before
    with mx.stream(mx.gpu):
        y = mx.exp(x)
        mx.eval(y)
    assert mx.transfers()["to_device"] == before + 1
    np.testing.assert_allclose(np.asarray(y), np.exp(np.arange(8, dtype=np.float32)), rtol=1e-6)


@pytest.mark.skipif(not HAS_GPU, reason="no usable GPU")
def test_ops_on_the_gpu_give_the_cpu_results():
    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((33, 65)).astype(np.float32))
    idx = mx.array(np.array([3, 0, 3, 32, -1], np.int32))
    for f in (lambda s: mx.exp(x, stream=s), lambda s: mx.sum(x * x, axis=1, stream=s),
              lambda s: mx.maximum(x, 0.5, stream=s), lambda s: mx.sort(x, axis=-1, stream=s),
              lambda s: mx.argsort(x, axis=0, stream=s), lambda s: mx.cumsum(x, axis=1, stream=s),
              lambda s: mx.cummax(x, axis=0, reverse=True, stream=s), lambda s: mx.take(x, idx, axis=0, stream=s),
              lambda s: mx.sort(mx.topk(x, 5, axis=-1, stream=s), axis=-1)):
        np.testing.assert_allclose(np.asarray(f(mx.gpu)), np.asarray(f(mx.cpu)), rtol=2e-6, atol=1e-6)
    with mx.stream(mx.gpu):
        added = x.at[idx].add(1.0)
    np.testing.assert_allclose(np.asarray(added), np.asarray(x.at[idx].add(1.0)), rtol=1e-6)
    s = mx.new_stream(mx.gpu)
    y = mx.exp(x, stream=s)
    mx.synchronize(s)
    np.testing.assert_allclose(np.asarray(y), np.exp(np.asarray(x)), rtol=1e-5)


def test_tf32_is_off_by_default_and_switchable():
    assert mx.allow_tf32() is False
    previous = mx.set_allow_tf32(True)
    try:
        assert previous is False and mx.allow_tf32() is True
    finally:
        mx.set_allow_tf32(previous)
    assert mx.allow_tf32() is False


@pytest.mark.skipif(not HAS_GPU, reason="no usable GPU")
def test_matmul_and_creation_on_the_gpu_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 70, 40)).astype(np.float32)
    b = rng.standard_normal((40, 50)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = mx.matmul(mx.array(a), mx.array(b), stream=mx.gpu)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(mx.arange(-3, 40, 0.5, stream=mx.gpu)), np.arange(-3, 40, 0.5, dtype=np.float32))
    key = mx.random.key(3)
    with mx.stream(mx.gpu):
        on_gpu = mx.random.uniform(shape=(4, 9), key=key)
    np.testing.assert_array_equal(np.asarray(on_gpu), np.asarray(mx.random.uniform(shape=(4, 9), key=key, stream=mx.cpu)))
    x = mx.array(rng.integers(0, 4, (5, 30)).astype(np.int32))
    np.testing.assert_array_equal(np.asarray(mx.argmax(x, axis=1, stream=mx.gpu)), np.argmax(np.asarray(x), axis=1))



def test_dlpack_hands_host_memory_to_numpy_in_place():
    a = mx.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    t = mx.transpose(a, stream=mx.cpu)
    assert t.__dlpack_device__() == (1, 0)
    got = np.from_dlpack(t)
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.float32).reshape(3, 4).T)
    assert got.strides == (4, 16), "the transposed view itself, not a copy"
    with pytest.raises(BufferError, match="device type 4"):
        a.__dlpack__(dl_device=(4, 0))


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_dlpack_to_a_missing_gpu_is_a_clear_error():
    a = mx.array([1.0, 2.0])
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(ValueError, match="libcuda|driver|GPU"):
        a.__dlpack__(dl_device=(2, 0))


@pytest.mark.skipif(not HAS_GPU, reason="no usable GPU")
def test_dlpack_exchanges_gpu_memory_with_torch_in_place():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    before = mx.transfers()["to_device"]
    a = mx.array(t)
    b = mx.array(t.T)
    assert a.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(np.asarray(mx.add(a, 1, stream=mx.gpu)), t.cpu().numpy() + 1)
    np.testing.assert_array_equal(np.asarray(mx.add(b, 1, stream=mx.gpu)), t.cpu().numpy().T + 1)
    assert mx.transfers()["to_device"] == before, "torch's memory was read in place"
    t.add_(100)  # the same memory: kiln sees torch's in-place change
    np.testing.assert_array_equal(np.asarray(mx.multiply(a, 1, stream=mx.gpu)), t.cpu().numpy())
    c = mx.multiply(a, 2, stream=mx.gpu)
    tc = torch.from_dlpack(c)
    assert tc.device.type == "cuda" and tc.dtype == torch.float32
    np.testing.assert_array_equal(tc.cpu().numpy(), 2 * t.cpu().numpy())
    for dtype in (torch.bfloat16, torch.int64, torch.bool, torch.float16):
        x = (torch.arange(6, device="cuda") % 3).to(dtype)
        np.testing.assert_array_equal(np.asarray(mx.array(x).astype(mx.float32)), x.float().cpu().numpy())
        back = torch.from_dlpack(mx.array(x))
        assert back.dtype == dtype and torch.equal(back, x)
    # asarray and from_dlpack share torch's memory unless asked to copy.
    u = torch.zeros(4, device="cuda")
    shared, copied, imported = mx.asarray(u, copy=False), mx.asarray(u, copy=True), mx.from_dlpack(u)
    u.add_(5)  # after asarray returned: the copy is a snapshot from before
    assert np.asarray(shared).tolist() == [5.0] * 4 and np.asarray(imported).tolist() == [5.0] * 4
    assert np.asarray(copied).tolist() == [0.0] * 4


def test_devices_equal_their_kinds_and_describe_themselves():
    # As in mlx: a kind is its device 0, both ways, with equal hashes.
    assert mx.Device(mx.cpu) == mx.cpu and mx.cpu == mx.Device(mx.cpu)
    assert mx.Device(mx.gpu, 1) != mx.gpu and mx.cpu != mx.gpu
    assert hash(mx.Device(mx.cpu)) == hash(mx.cpu)
    assert len({mx.cpu, mx.Device(mx.cpu, 0)}) == 1
    assert mx.Device(mx.cpu) != "cpu"
    assert mx.device_count(mx.cpu) == 1
    assert (mx.device_count(mx.gpu) >= 1) == HAS_GPU
    info = mx.device_info(mx.cpu)
    assert info["device_name"] and info["architecture"]
    assert not mx.metal.is_available()
    assert mx.cuda.is_available() == HAS_GPU
    if HAS_GPU:
        gpu = mx.device_info(mx.gpu)
        assert gpu["architecture"].startswith("sm_") and gpu["memory_size"] > 0
    else:
        with pytest.raises(ValueError, match="GPU"):
            mx.device_info(mx.gpu)


def test_asarray_shares_what_it_can_and_copies_as_asked():
    a = mx.array([1.0, -0.0, 3.0])
    assert mx.asarray(a) is not None and mx.asarray(a).tolist() == a.tolist()
    c = mx.asarray(a, copy=True)
    assert c.tolist() == a.tolist() and np.signbit(np.array(c))[1], "a copy keeps the bits"
    assert mx.asarray(a, mx.int32).dtype == mx.int32
    with pytest.raises(ValueError, match="copy=False.*float32 to int32"):
        mx.asarray(a, mx.int32, copy=False)
    host = np.arange(6, dtype=np.int32)
    x = mx.asarray(host, copy=True)
    host[0] = 99
    assert x.tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="copy=False.*ndarray"):
        mx.asarray(host, copy=False)
    assert mx.from_dlpack(np.arange(3.0)).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="copy=False"):
        mx.from_dlpack(np.arange(3.0), copy=False)
    with pytest.raises(TypeError, match="from_dlpack"):
        mx.from_dlpack([1, 2])
