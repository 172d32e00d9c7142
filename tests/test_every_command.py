"""Every dmlshim command and both engines on every model shipped in onnx_models/ (the top level, real/
and ecosystem/), against onnxruntime CPU on the model's own sample inputs.

A regression such as the custom-op engine losing initializers of 64 KiB or more (issue 19) shows here on
the first model that has one. Per model: ``inspect`` (exit 0 or 1 with a JSON report), ``validate
--inputs`` (exit 0), ``run --inputs -o`` (the written outputs equal onnxruntime's bit for bit),
``lower`` (the lowered file, run in plain onnxruntime with dmlshim's custom ops registered, equals
onnxruntime on the source), ``export --inputs`` (exit 0, a manifest written), and InferenceSession with
the default and the ``customop`` engine (bit for bit).

``PENDING`` (model, command) pairs fail today and run as ``xfail(strict=True)`` with the failure they
show: delete an entry when its fix lands. The set may only shrink.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.corpus_checks import (
    assert_same,
    cli_run_outputs,
    lowered_outputs,
    ort_reference,
    run_cli,
    session_outputs,
)

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted([*ROOT.glob("*.onnx"), *ROOT.glob("real/*.onnx"), *ROOT.glob("ecosystem/*.onnx")])
COMMANDS = ("inspect", "validate", "run", "lower", "export", "engine_default", "engine_customop")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT).with_suffix(""))


#: (model id, command) -> the failure it shows today. Delete an entry when its fix lands (strict xfail).
PENDING: dict[tuple[str, str], str] = {}


#: tests/test_real_corpus.py already runs these on every model of real/ (same arguments).
COVERED_BY_REAL_CORPUS = frozenset({"inspect", "validate"})


def _cases(command: str) -> list[Any]:
    models = [p for p in MODELS if not (command in COVERED_BY_REAL_CORPUS and p.parent.name == "real")]
    return [
        pytest.param(
            path, id=_id(path), marks=pytest.mark.xfail(strict=True, reason=PENDING[(_id(path), command)])
        )
        if (_id(path), command) in PENDING
        else pytest.param(path, id=_id(path))
        for path in models
    ]


def test_every_model_has_sample_inputs_and_pending_is_real() -> None:
    assert len(MODELS) >= 60
    assert [p for p in MODELS if not p.with_suffix(".npz").exists()] == []
    ids = {_id(p) for p in MODELS}
    assert {m for m, _ in PENDING} <= ids
    assert {c for _, c in PENDING} <= set(COMMANDS)


@pytest.mark.parametrize("path", _cases("inspect"))
def test_inspect(path: Path) -> None:
    run = run_cli("inspect", str(path), "--json", "-q")
    assert run.code in (0, 1) and run.doc is not None, f"exit {run.code}: {run.message}"


@pytest.mark.parametrize("path", _cases("validate"))
def test_validate(path: Path) -> None:
    run = run_cli("validate", str(path), "--inputs", str(path.with_suffix(".npz")), "-q")
    assert run.code == 0, f"exit {run.code}: {run.message}"


@pytest.mark.parametrize("path", _cases("run"))
def test_run_writes_onnxruntime_outputs(path: Path, tmp_path: Path) -> None:
    run, got = cli_run_outputs(path, tmp_path / "out.npz")
    assert run.code == 0, f"exit {run.code}: {run.message}"
    assert_same(got, ort_reference(path)[1], _id(path))


@pytest.mark.parametrize("path", _cases("lower"))
def test_lowered_file_runs_standalone(path: Path, tmp_path: Path) -> None:
    run, got = lowered_outputs(path, tmp_path / "lowered.onnx")
    assert run.code == 0, f"exit {run.code}: {run.message}"
    assert_same(got, ort_reference(path)[1], _id(path))


@pytest.mark.parametrize("path", _cases("export"))
def test_export(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    run = run_cli("export", str(path), "-o", str(out), "--inputs", str(path.with_suffix(".npz")), "-q")
    assert run.code == 0, f"exit {run.code}: {run.message}"
    assert any(out.iterdir())


@pytest.mark.parametrize("path", _cases("engine_default"))
def test_default_engine(path: Path) -> None:
    assert_same(session_outputs(path, None), ort_reference(path)[1], _id(path))


@pytest.mark.parametrize("path", _cases("engine_customop"))
def test_customop_engine(path: Path) -> None:
    assert_same(session_outputs(path, "customop"), ort_reference(path)[1], _id(path))
