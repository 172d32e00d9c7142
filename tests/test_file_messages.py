"""Every file a command writes is named on stderr, without -v (a new user's walk: --save-inputs and
--save-outputs wrote silently); -q silences the lines; stdout stays the report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dmlshim.cli.main import main

MODEL = Path(__file__).resolve().parents[1] / "onnx_models" / "embedding_gather.onnx"
FEEDS = MODEL.with_suffix(".npz")


def test_validate_names_each_file_it_saves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    code = main(
        [
            "validate",
            str(MODEL),
            "--inputs",
            str(FEEDS),
            "--save-inputs",
            str(inputs),
            "--save-outputs",
            str(outputs),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert f"dmlshim validate: inputs written to {inputs}" in lines
    assert f"dmlshim validate: outputs written to {outputs}" in lines
    assert "written to" not in captured.out
    given = dict(np.load(FEEDS))
    with np.load(inputs) as saved:
        assert sorted(saved.files) == sorted(given)
        for name, value in given.items():
            np.testing.assert_array_equal(saved[name], value)


def test_quiet_silences_the_file_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "in.npz"
    assert main(["-q", "validate", str(MODEL), "--save-inputs", str(inputs)]) == 0
    assert "written to" not in capsys.readouterr().err
    assert inputs.is_file()
    assert main(["validate", "-q", str(MODEL), "--save-outputs", str(tmp_path / "o.npz")]) == 0
    assert "written to" not in capsys.readouterr().err
