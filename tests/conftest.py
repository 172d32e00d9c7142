from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


@pytest.fixture
def shared_dir() -> Path:
    """``../shared`` beside the checkout; tests that need it are skipped with a message when absent."""
    if not SHARED.is_dir():
        pytest.skip(f"../shared not found at {SHARED}: the seeds and WebNN cases are not available")
    return SHARED
