"""Newuser 47, job 2: a client written for onnxruntime's Python API (tests/ort_clients/api_surface_client.py,
which never imports dmlshim) run unchanged under plain onnxruntime and under ``python -m dmlshim.ort``, on
shipped gather/scatter models; every answer must be onnxruntime's but where dmlshim documents otherwise
(``get_providers()`` lists ``DmlExecutionProvider``, ``get_device()`` is ``CPU-DML``: docs/python-api.md).

What it found, fixed here: onnxruntime's IOBinding raises a plain ``RuntimeError`` ("Error in execution:
...") for every failure, while dmlshim's IOBinding errors were also ``InvalidArgument`` and ``Fail`` (and a
``ValueError`` for an unbound input), so a client's ``except InvalidArgument:``/``except ValueError:``
caught them under dmlshim only; and an unknown output name was refused by ``bind_output`` itself, where
onnxruntime refuses it when the binding runs ("Invalid output name").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

import dmlshim

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "tests" / "ort_clients" / "api_surface_client.py"
MODELS = {
    "gs_fp16_gathers_scatters": ROOT / "onnx_models" / "ecosystem" / "gs_fp16_gathers_scatters.onnx",
    "fp16_tiny_decoder_step": ROOT / "onnx_models" / "ecosystem" / "fp16_tiny_decoder_step.onnx",
    "tiny_decoder_step": ROOT / "onnx_models" / "tiny_decoder_step.onnx",
}
DOCUMENTED = {"providers", "back_providers", "device"}
STATE = onnxruntime.capi.onnxruntime_pybind11_state


def _client(model: Path, out: Path, *prefix: str) -> dict[str, Any]:
    out.parent.mkdir(parents=True)
    run = subprocess.run(
        [sys.executable, *prefix, str(CLIENT), str(model), str(model.with_suffix(".npz")), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("gs_fp16_gathers_scatters", "partitioned"),
        ("fp16_tiny_decoder_step", "partitioned"),
        ("tiny_decoder_step", "customop"),
    ],
)
def test_the_client_gets_onnxruntimes_answers(tmp_path: Path, name: str, engine: str) -> None:
    model = MODELS[name]
    theirs = _client(model, tmp_path / "ort" / "r.json")
    summary = tmp_path / "summary.json"
    ours = _client(
        model,
        tmp_path / "dml" / "r.json",
        "-m",
        "dmlshim.ort",
        "--emulate",
        "all",
        "--engine",
        engine,
        "--summary",
        "off",
        "--summary-file",
        str(summary),
    )
    assert sorted(ours) == sorted(theirs)
    differ = {k for k in ours if ours[k] != theirs[k]}
    assert differ <= DOCUMENTED, {k: (theirs[k], ours[k]) for k in differ - DOCUMENTED}
    assert theirs["providers"] == theirs["back_providers"] == ["CPUExecutionProvider"]
    assert ours["providers"] == ours["back_providers"] == ["DmlExecutionProvider", "CPUExecutionProvider"]
    assert ours["cpu_providers"] == ["CPUExecutionProvider"] and ours["device"] == "CPU-DML"
    # the client's calls did reach dmlshim's emulation
    totals = json.loads(summary.read_text())["totals"]
    assert totals["sessions"] >= 1 and totals["runs"] > 10, totals


X = np.arange(12, dtype=np.float32).reshape(4, 3)
IDS = np.array([3, 0], np.int64)
MODEL = ROOT / "onnx_models" / "embedding_gather.onnx"


def _feeds() -> dict[str, np.ndarray]:
    with np.load(MODEL.with_suffix(".npz")) as data:
        return {k: data[k] for k in data.files}


def _bound(module: Any, change: Callable[[dict[str, np.ndarray]], None] | None, output: str | None) -> Any:
    """The error ``run_with_iobinding`` raises, under ``module``, on the changed feeds and bound output."""
    sess = module.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    if module is dmlshim:
        sess = dmlshim.InferenceSession(str(MODEL))  # emulated
    feeds = _feeds()
    if change is not None:
        change(feeds)
    binding = sess.io_binding()
    for key, value in feeds.items():
        binding.bind_cpu_input(key, value)
    binding.bind_output(output or sess.get_outputs()[0].name)
    with pytest.raises(Exception) as err:  # the class is what is compared
        sess.run_with_iobinding(binding)
    return err.value


def _unbind(feeds: dict[str, np.ndarray]) -> None:
    feeds.clear()


CASES: dict[str, tuple[Callable[[dict[str, np.ndarray]], None] | None, str | None, str]] = {
    "wrong dtype": (lambda f: f.update(input_ids=f["input_ids"].astype(np.int32)), None, "data type"),
    "wrong rank": (lambda f: f.update(input_ids=f["input_ids"][None]), None, "rank"),
    "index out of range": (lambda f: f.update(input_ids=np.full_like(f["input_ids"], 10**6)), None, ""),
    "inputs unbound": (_unbind, None, ""),
    "unknown output bound": (None, "nope", "nope"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_iobinding_errors_are_caught_by_what_catches_onnxruntimes(case: str) -> None:
    change, output, fragment = CASES[case]
    theirs = _bound(onnxruntime, change, output)
    ours = _bound(dmlshim, change, output)
    assert isinstance(ours, dmlshim.DmlShimError)
    for cls in (RuntimeError, ValueError, STATE.InvalidArgument, STATE.Fail, STATE.RuntimeException):
        assert isinstance(ours, cls) == isinstance(theirs, cls), (cls.__name__, type(theirs), type(ours))
    assert fragment in str(theirs) and fragment in str(ours)


def test_bind_time_refusals_are_plain_runtime_errors() -> None:
    for module in (onnxruntime, dmlshim):
        sess = module.InferenceSession(str(MODEL))
        binding = sess.io_binding()
        with pytest.raises(RuntimeError) as err:
            binding.bind_cpu_input("nope", IDS)
        assert not isinstance(err.value, (ValueError, STATE.InvalidArgument, STATE.Fail)), module
        binding.bind_output("nope")  # accepted at bind time by both; the run refuses it


_NEGATIVE_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort

model, level = sys.argv[1], sys.argv[2]
with np.load(model[:-5] + ".npz") as data:
    feeds = {k: data[k] for k in data.files}
kwargs = {} if level == "default" else {"feature_level": level}
ort.InferenceSession(model, providers=["DmlExecutionProvider"], **kwargs).run(None, feeds)
"""


@pytest.mark.parametrize(("level", "warned"), [("default", False), ("3_0", False), ("2_1", True)])
def test_drop_in_summary_warns_of_negative_indices_only_below_fl_3_0(
    tmp_path: Path, level: str, warned: bool
) -> None:
    """The graphsurgeon model's four gathers have negative constant indices: DirectML takes them from
    feature level 3_0 (validate warns only below it, NEGATIVE_INDICES_BELOW_FL_3_0); the drop-in's exit
    summary warned at every level, 5_0 (the drop-in's default, what onnxruntime-directml needs) included."""
    script = tmp_path / "client.py"
    script.write_text(_NEGATIVE_SCRIPT)
    summary = tmp_path / "summary.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlshim.ort",
            "--summary",
            "off",
            "--summary-file",
            str(summary),
            str(script),
            str(MODELS["gs_fp16_gathers_scatters"]),
            level,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(summary.read_text())
    negative = sorted(w["node"] for w in doc["warnings"] if w["code"] == "negative_indices")
    expected = ["gather_elements_neg", "gather_rows_neg", "gathernd_batch1_neg", "table_lookup_neg"]
    assert negative == (expected if warned else [])
    nodes = {n["name"]: n for n in doc["sessions"][0]["nodes"]}
    assert all(nodes[name]["negative_indices"] for name in expected)  # recorded at every level
