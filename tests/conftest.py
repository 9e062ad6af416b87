"""Shared pytest setup."""
from __future__ import annotations

import os

import numpy as np
import pytest

# Keep BLAS/OpenMP from oversubscribing the 2-core CI machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
