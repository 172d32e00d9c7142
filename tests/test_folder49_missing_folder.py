"""A model file whose initializers are in external data, with or without the
``session.model_external_initializers_file_folder_path`` entry naming a folder that lacks them: dmlshim's
drop-in session refuses it (with onnxruntime's class) or reads the data where the installed onnxruntime does
(1.32 refuses; 1.24.4 reads the model's own folder)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnxruntime as real_ort
import pytest

import dmlshim
from tests.external_folder import model_with_data_in, outcome

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL")


@pytest.fixture(params=[4, 1 << 18], ids=["small", "large"])
def models(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path, int]]:
    """The model with w = 1 in ``a`` and with w = 2 in ``b``; the working directory is ``tmp_path``."""
    size = int(request.param)
    a, b = model_with_data_in(tmp_path / "a", 1.0, size), model_with_data_in(tmp_path / "b", 2.0, size)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield a, b, size
    finally:
        os.chdir(here)


def _compare(source: Callable[[], Any], size: int, folder: str | None) -> None:
    for level in LEVELS:
        want = outcome(real_ort, source(), size, folder, level)
        got = outcome(dmlshim, source(), size, folder, level)
        assert got == want, (level, folder, got, want)


@pytest.mark.parametrize("folder", [None, "", "b", "missing", "ABS_B", "ABS_MISSING"])
def test_path_with_external_data_folder_as_onnxruntime(
    models: tuple[Path, Path, int], folder: str | None
) -> None:
    a, b, size = models
    named = {"ABS_B": str(b.parent), "ABS_MISSING": str(a.parent.parent / "nowhere")}.get(
        folder or "", folder
    )
    _compare(lambda: str(a), size, named)
