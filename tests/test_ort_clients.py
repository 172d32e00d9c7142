"""A real onnxruntime client, unmodified, on dmlshim: optimum exports tiny GPT-2, Llama and BERT models
from local configs (no hub) and generates / classifies with and without cache and IOBinding, under each
binding form and under ``python -m dmlshim.ort``. Tokens and logits must equal what the same program gets
from onnxruntime, and the sessions must really emulate (gather nodes ran as DirectML).

Needs the ``clients`` extra (optimum-onnx, transformers, torch); skipped with that reason without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import REPO

_MISSING = [
    m
    for m in ("optimum.onnxruntime", "transformers", "torch")
    if importlib.util.find_spec(m.split(".")[0]) is None
]
if not _MISSING and importlib.util.find_spec("optimum.onnxruntime") is None:
    _MISSING = ["optimum.onnxruntime (optimum-onnx)"]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"the clients extra is not installed (missing {', '.join(_MISSING)}): "
        "pip install torch==2.13.0 '.[clients]'",
    ),
]

CLIENTS = Path(__file__).resolve().parent / "ort_clients"
DRIVER = CLIENTS / "optimum_driver.py"


def _run(
    args: list[str], cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    env["HF_HUB_OFFLINE"] = "1"
    env.update(extra_env or {})
    proc = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("optimum_models")
    _run([str(CLIENTS / "optimum_export.py"), str(out)], out)
    return out


@pytest.fixture(scope="module")
def theirs(models: Path) -> dict[str, Any]:
    out = models / "theirs.json"
    _run([str(DRIVER), str(models), str(out)], models)
    return json.loads(out.read_text(encoding="utf-8"))


def _prologue_run(
    models: Path, prologue: str, out: Path, *args: str, env: dict[str, str] | None = None
) -> None:
    runner = out.with_suffix(".py")
    runner.write_text(
        prologue
        + "\nimport runpy, sys\n"
        + f"sys.argv = [{str(DRIVER)!r}, {str(models)!r}, {str(out)!r}, *{list(args)!r}]\n"
        + f"runpy.run_path({str(DRIVER)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    _run([str(runner)], models, env)


def _same(ours: dict[str, Any], theirs: dict[str, Any], session_class: str) -> None:
    assert ours.keys() == theirs.keys()
    for case, want in theirs.items():
        got = ours[case]
        assert got.get("tokens", got.get("labels")) == want.get("tokens", want.get("labels")), case
        np.testing.assert_array_equal(np.asarray(got["logits"]), np.asarray(want["logits"]), err_msg=case)
        assert want["session_class"] == "onnxruntime.capi.onnxruntime_inference_collection.InferenceSession"
        assert got["session_class"] == session_class, case
        assert got["providers"][0] == "DmlExecutionProvider", case
        assert got["emulated"] and got["emulated"] >= 1, case  # the embedding Gathers ran as DirectML


def test_the_class_patched(models: Path, theirs: dict[str, Any]) -> None:
    out = models / "patched.json"
    prologue = "import onnxruntime, dmlshim\nonnxruntime.InferenceSession = dmlshim.InferenceSession\n"
    # optimum asks for its default, the CPU provider: DMLSHIM_ORT_EMULATE=all emulates DirectML anyway.
    _prologue_run(models, prologue, out, env={"DMLSHIM_ORT_EMULATE": "all"})
    _same(json.loads(out.read_text(encoding="utf-8")), theirs, "dmlshim.ort.session.InferenceSession")


def test_the_module_replaced(models: Path, theirs: dict[str, Any]) -> None:
    out = models / "replaced.json"
    prologue = "import sys, dmlshim.ort\nsys.modules['onnxruntime'] = dmlshim.ort.standin_module()\n"
    # The stand-in lists DmlExecutionProvider, so optimum accepts it as its provider.
    _prologue_run(models, prologue, out, "DmlExecutionProvider")
    _same(json.loads(out.read_text(encoding="utf-8")), theirs, "dmlshim.ort.standin.InferenceSession")


def test_the_command(models: Path, theirs: dict[str, Any]) -> None:
    out = models / "command.json"
    summary = models / "summary.json"
    proc = _run(
        [
            "-m",
            "dmlshim.ort",
            "--emulate",
            "all",
            "--summary-file",
            str(summary),
            str(DRIVER),
            str(models),
            str(out),
        ],
        models,
    )
    _same(json.loads(out.read_text(encoding="utf-8")), theirs, "dmlshim.ort.standin.InferenceSession")
    report = json.loads(summary.read_text(encoding="utf-8"))
    assert report["totals"]["sessions"] == 7 and report["totals"]["emulated_nodes"] >= 7
    assert proc.stderr.count("dmlshim (DirectML emulated over onnxruntime") == 1
