"""Shared fixtures: a seeded numpy generator so every run draws the same inputs."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def on_cpu():
    """Makes the CPU the default device for one test (for tests of the CPU's own engines, on
    machines whose default device is a GPU), and restores the previous default after it."""
    import kiln.core as mx

    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)
