"""Shared fixtures. Every test runs once per available device: the autouse ``device`` fixture
makes it the default device for the test (the same body and assertions on the CPU and, where one
can be used, the GPU). The run ends with one line naming the devices used; without a GPU, it says
that the GPU half was skipped, and why."""

import numpy as np
import pytest

import kiln.core as mx

HAS_GPU = mx.is_available(mx.gpu)


def _gpu_unavailable_reason():
    try:
        mx.default_stream(mx.gpu)
    except ValueError as e:
        return str(e)
    return "unknown"


def _devices_line():
    if HAS_GPU:
        return f"kiln devices: cpu and gpu ({mx.device_info(mx.gpu)['device_name']}): every test runs on both"
    return f"kiln devices: cpu only; the GPU half of every test is skipped: {_gpu_unavailable_reason()}"


def pytest_terminal_summary(terminalreporter):
    # Printed at the end of every run, quiet (-q) ones included.
    terminalreporter.write_line(_devices_line())


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        # Tests of the CPU's own engines (the on_cpu fixture) run on the CPU only.
        gpu = ["gpu"] if HAS_GPU and "on_cpu" not in metafunc.fixturenames else []
        metafunc.parametrize("device", ["cpu", *gpu], indirect=True)


@pytest.fixture(autouse=True)
def device(request):
    """The default device for one test ("cpu" or "gpu"), restored after it."""
    previous = mx.default_device()
    mx.set_default_device(getattr(mx, request.param))
    yield request.param
    mx.set_default_device(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def on_cpu():
    """Marks a test of the CPU's own engines: it runs with the CPU as the default device only."""
    assert mx.default_device() == mx.cpu
