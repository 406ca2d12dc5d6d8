"""Shared fixtures: a seeded numpy generator so every run draws the same inputs."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)
