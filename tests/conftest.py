from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(autouse=True, scope="session")
def _every_export_follows_dxdispatch_rules() -> Iterator[None]:
    """Every DxDispatch model.json the suite writes in-process is checked against DxDispatch's parser
    rules (tests/dxdispatch_rules.py) the moment it is saved, so a format regression fails the test that
    wrote it. Hand-edited files written by tests to provoke errors go through json, not ``save``."""
    from dmlshim.dxdispatch.model_file import DxDispatchModel

    from .dxdispatch_rules import dxdispatch_rule_violations

    original = DxDispatchModel.save

    def checked_save(self: DxDispatchModel, path: Any, *, overwrite: bool = True) -> Path:
        written = original(self, path, overwrite=overwrite)
        problems = dxdispatch_rule_violations(written)
        assert not problems, f"{written} breaks DxDispatch's rules: {problems}"
        return written

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DxDispatchModel, "save", checked_save)
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that run a zero-depth ScatterND (the ecosystem model hw_scatternd_empty_index, or marked
    ``zero_depth_scatternd``) are skipped, with the reason, where the installed onnxruntime crashes on it."""
    affected = [
        item
        for item in items
        if "hw_scatternd_empty_index" in item.nodeid or item.get_closest_marker("zero_depth_scatternd")
    ]
    if not affected:
        return
    from .oracle import ZERO_DEPTH_SCATTERND_CRASH, ort_crashes_on_zero_depth_scatternd

    if ort_crashes_on_zero_depth_scatternd():
        for item in affected:
            item.add_marker(pytest.mark.skip(reason=ZERO_DEPTH_SCATTERND_CRASH))
