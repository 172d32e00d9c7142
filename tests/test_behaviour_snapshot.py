"""conformance/behaviour_snapshot.py: its normaliser, array digests and the diff's exit code (tiny inputs)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "conformance" / "behaviour_snapshot.py"
_spec = importlib.util.spec_from_file_location("behaviour_snapshot", _PATH)
assert _spec is not None and _spec.loader is not None
snap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(snap)


def test_normalise_drops_only_timings_pids_and_versions() -> None:
    doc = {
        "schema_version": 2,
        "elapsed_seconds": 1.7,
        "pid": 4242,
        "onnxruntime_version": "1.24.1",
        "nodes": [{"since_version": 13, "status": "dml", "timings": {"run": 0.1}, "notes": [{"code": "x"}]}],
        "record": {"path": "whole-model check", "translations_computed": 2},
    }
    assert snap.normalise(doc) == {
        "schema_version": 2,
        "nodes": [{"since_version": 13, "status": "dml", "notes": [{"code": "x"}]}],
        "record": {"path": "whole-model check", "translations_computed": 2},
    }


def test_normalise_replaces_root_and_temp_names() -> None:
    subs = (("/tmp/snapabc", "<tmp>"), ("/work/wt/x", "<root>"))
    doc = {
        "output_file": "/tmp/snapabc/run_cpu.npz",
        "model": "/work/wt/x/onnx_models/a.onnx",
        "msg": "wrote /tmp/tmpq1w2e3/model.onnx",
        "rel": "onnx_models/a.onnx",
    }
    assert snap.normalise(doc, subs) == {
        "output_file": "<tmp>/run_cpu.npz",
        "model": "<root>/onnx_models/a.onnx",
        "msg": "wrote <tmp>/model.onnx",
        "rel": "onnx_models/a.onnx",
    }


def test_array_digest_covers_dtype_shape_and_bytes() -> None:
    a = np.arange(6, dtype=np.int32)
    expected = hashlib.sha256(b"<i4|(6,)|" + a.tobytes()).hexdigest()
    assert snap.array_digest(a) == {"dtype": "<i4", "shape": [6], "sha256": expected}
    same_bytes = [a.reshape(2, 3), a.view(np.float32)]
    digests = {snap.array_digest(x)["sha256"] for x in [a, *same_bytes]}
    assert len(digests) == 3
    assert snap.array_digest(np.asfortranarray(a.reshape(2, 3))) == snap.array_digest(a.reshape(2, 3))


def _write(folder: Path, name: str, doc: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))


def test_diff_exit_codes_and_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    doc = {"run_cpu": {"rc": 0, "stdout": {"record": {"nodes": [{"status": "dml"}]}}}}
    _write(old, "m.onnx.json", doc)
    _write(new, "m.onnx.json", doc)
    assert snap.main(["diff", str(old), str(new)]) == 0
    assert capsys.readouterr().out == ""

    changed = {"run_cpu": {"rc": 0, "stdout": {"record": {"nodes": [{"status": "fallback"}]}}}}
    _write(new, "m.onnx.json", changed)
    _write(new, "extra.onnx.json", doc)
    assert snap.main(["diff", str(old), str(new)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "extra.onnx.json: only in NEW",
        'm.onnx.json: .run_cpu.stdout.record.nodes[0].status: "dml" -> "fallback"',
    ]


def test_diff_refuses_empty_folders(tmp_path: Path) -> None:
    assert snap.main(["diff", str(tmp_path), str(tmp_path)]) == 2


def test_diff_tells_a_type_change() -> None:
    assert snap.differences({"a": 1}, {"a": 1.0}) == [".a: 1 -> 1.0"]
    assert snap.differences([1, 2], [1]) == [": length 2 -> 1"]
