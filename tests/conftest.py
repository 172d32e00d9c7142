from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .hang_watch import pytest_runtest_protocol, pytest_terminal_summary, pytest_unconfigure  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


@pytest.fixture
def numpy_kernels() -> Iterator[None]:
    """The numpy kernels answer every call of the test (tests that plant a fault in their table): the
    compiled ones of the fast extra, once loaded in ``auto`` mode, would answer instead."""
    from dmlshim.kernels import compiled

    before = compiled.mode()
    compiled.use("numpy")
    try:
        yield
    finally:
        compiled.use(before)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many onnxruntime sessions are built (any thread) after the fixture starts counting."""
    import onnxruntime

    count = [0]
    original = onnxruntime.InferenceSession.__init__

    def counting(self: onnxruntime.InferenceSession, *args: object, **kwargs: object) -> None:
        count[0] += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(onnxruntime.InferenceSession, "__init__", counting)
    yield count


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
    """The one test that runs a zero-depth ScatterND in onnxruntime itself (the ecosystem model
    hw_scatternd_empty_index: "onnxruntime runs it", or one marked ``zero_depth_scatternd``) is skipped,
    with the reason, where the installed onnxruntime crashes on it. Every dmlshim path runs it (dmlshim
    never hands the node to such an onnxruntime), with ONNX's reference as the oracle there."""
    _skip_models_newer_than_onnx(items)
    _bfloat16_capture_needs_ml_dtypes(items)
    affected = [
        item
        for item in items
        if ("hw_scatternd_empty_index" in item.nodeid and "onnxruntime_runs_it" in item.nodeid)
        or item.get_closest_marker("zero_depth_scatternd")
    ]
    if not affected:
        return
    from .oracle import ZERO_DEPTH_SCATTERND_CRASH, ort_crashes_on_zero_depth_scatternd

    if ort_crashes_on_zero_depth_scatternd():
        for item in affected:
            item.add_marker(pytest.mark.skip(reason=ZERO_DEPTH_SCATTERND_CRASH))


def _skip_models_newer_than_onnx(items: list[pytest.Item]) -> None:
    """Shipped models importing an ai.onnx opset the installed onnx does not define (opset 23 needs onnx
    1.18+) are refused by dmlshim with that reason: their tests skip, naming it."""
    import re

    import onnx

    newest = onnx.defs.onnx_opset_version()
    too_new: dict[str, int] = {}
    for path in (REPO / "onnx_models").rglob("*.onnx"):
        model = onnx.load(str(path), load_external_data=False)
        opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
        if opset > newest:
            too_new[path.stem] = opset
    if not too_new:
        return
    for item in items:
        for name in re.findall(r"[\w.-]+", item.nodeid.partition("[")[2]):
            if name.rpartition("/")[2] in too_new:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"{name} imports ai.onnx opset {too_new[name.rpartition('/')[2]]}, newer than "
                        f"onnx {onnx.__version__} defines ({newest}); dmlshim refuses it, naming that"
                    )
                )


def _bfloat16_capture_needs_ml_dtypes(items: list[pytest.Item]) -> None:
    """Exporting hw_bfloat16_casts captures bfloat16 values, which needs an onnx with ml_dtypes types
    (1.18+); older onnx makes export refuse it with that sentence (exit 2): the test skips, naming it."""
    import importlib.util

    import onnx

    if importlib.util.find_spec("ml_dtypes") is not None:
        return
    for item in items:
        if "hw_bfloat16_casts" in item.nodeid and item.name.startswith("test_export"):
            item.add_marker(
                pytest.mark.skip(
                    reason=f"capturing bfloat16 needs onnx 1.18+ (ml_dtypes); onnx {onnx.__version__} is "
                    "installed and export says so"
                )
            )
