"""``dmlshim compare``: planted mismatches and missing outputs are reported, exit codes, tolerances."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dxdispatch.compare import compare_arrays, compare_export
from dmlshim.dxdispatch.export import export_model
from dmlshim.errors import BadInputError

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "onnx_models"


def _inputs(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS / f"{name}.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def replayed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_decoder_step exported (float outputs) and replayed with dmlshim's kernels."""
    out = tmp_path_factory.mktemp("template") / "export"
    result = export_model(MODELS / "tiny_decoder_step.onnx", out, inputs=_inputs("tiny_decoder_step"))
    for node in result.exported:
        folder = out / node.folder
        assert main(["replay", str(folder / "model.json"), "--output-path", str(folder)]) == 0
    return out


@pytest.fixture
def replayed(replayed_template: Path, tmp_path: Path) -> Path:
    """A private copy the test may damage."""
    target = tmp_path / "export"
    shutil.copytree(replayed_template, target)
    return target


def _folders(directory: Path) -> list[Path]:
    index = json.loads((directory / "index.json").read_text())
    return [directory / e["folder"] for e in index["exported"]]


def test_all_match_after_replay(replayed: Path, capsys: Any) -> None:
    report = compare_export(replayed)
    assert report.all_match and len(report.nodes) == 5
    assert all(n.max_abs_diff == 0.0 and n.first_mismatch is None for n in report.nodes)
    assert main(["compare", str(replayed)]) == 0
    out = capsys.readouterr().out
    for header in ("node", "op", "status", "max abs diff", "first mismatch"):
        assert header in out
    assert "5 match, 0 mismatch, 0 missing of 5 node(s)" in out


def test_planted_float_mismatch_is_reported(replayed: Path, capsys: Any) -> None:
    folder = _folders(replayed)[1]  # a ScatterND on float32 data
    out_file = folder / "dml_output.npy"
    actual = np.load(out_file)
    assert actual.dtype == np.float32
    position = tuple(s - 1 for s in actual.shape)
    actual[position] += 0.5
    np.save(out_file, actual)

    report = compare_export(replayed)
    assert not report.all_match
    bad = [n for n in report.nodes if n.status != "match"]
    assert len(bad) == 1
    node = bad[0]
    assert node.status == "mismatch" and node.folder == folder.name
    assert node.first_mismatch == position
    assert node.mismatches == 1
    assert node.max_abs_diff == pytest.approx(0.5, rel=1e-6)

    assert main(["compare", str(replayed)]) == 1
    out = capsys.readouterr().out
    assert "mismatch" in out and str(list(position)) in out
    assert "4 match, 1 mismatch, 0 missing" in out


def test_planted_integer_mismatch_is_exact(tmp_path: Path) -> None:
    folder = tmp_path / "export" / "000_node"
    folder.mkdir(parents=True)
    expected = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.save(folder / "expected_output.npy", expected)
    (folder / "model.json").write_text("{}")
    actual = expected.copy()
    actual[2, 1] += 1
    np.save(folder / "dml_output.npy", actual)
    # No index.json: the folders holding a model.json are compared.
    report = compare_export(tmp_path / "export", rtol=1.0, atol=10.0)
    (node,) = report.nodes
    assert node.status == "mismatch"  # tolerances never apply to integers
    assert node.first_mismatch == (2, 1)
    assert node.max_abs_diff == 1.0


def test_missing_output_is_reported(replayed: Path, capsys: Any) -> None:
    folder = _folders(replayed)[0]
    (folder / "dml_output.npy").unlink()
    report = compare_export(replayed)
    statuses = {n.folder: n.status for n in report.nodes}
    assert statuses[folder.name] == "missing"
    assert list(statuses.values()).count("match") == 4
    assert main(["compare", str(replayed), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["all_match"] is False
    assert doc["counts"] == {"match": 4, "mismatch": 0, "missing": 1, "error": 0}
    assert "dxdispatch.exe" in next(n["detail"] for n in doc["nodes"] if n["status"] == "missing")


def test_before_any_replay_everything_is_missing(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "export"
    export_model(MODELS / "embedding_gather.onnx", out, inputs=_inputs("embedding_gather"))
    assert main(["compare", str(out)]) == 1
    assert "0 match, 0 mismatch, 2 missing" in capsys.readouterr().out


def test_shape_and_dtype_changes_are_mismatches(replayed: Path) -> None:
    first, second = _folders(replayed)[:2]
    np.save(first / "dml_output.npy", np.load(first / "dml_output.npy").astype(np.float64))
    np.save(second / "dml_output.npy", np.load(second / "dml_output.npy").reshape(-1))
    nodes = {n.folder: n for n in compare_export(replayed).nodes}
    assert nodes[first.name].status == "mismatch" and "dtype" in nodes[first.name].detail
    assert nodes[second.name].status == "mismatch" and "shape" in nodes[second.name].detail


def test_unreadable_output_is_a_mismatch(replayed: Path) -> None:
    folder = _folders(replayed)[0]
    (folder / "dml_output.npy").write_bytes(b"not an npy file")
    nodes = {n.folder: n for n in compare_export(replayed).nodes}
    assert nodes[folder.name].status == "mismatch"
    assert "cannot read" in nodes[folder.name].detail


def test_tolerance_options(replayed: Path) -> None:
    folder = _folders(replayed)[1]
    actual = np.load(folder / "dml_output.npy")
    flat = actual.reshape(-1)
    i = int(np.argmax(np.abs(flat)))
    flat[i] = np.nextafter(flat[i], np.float32(np.inf))  # one ulp away
    np.save(folder / "dml_output.npy", actual)
    # Exact by default (dmlshim.comparison's one policy); a tolerance loosens it.
    assert not compare_export(replayed).all_match
    assert main(["compare", str(replayed)]) == 1
    assert compare_export(replayed, rtol=1e-5).all_match
    assert main(["compare", str(replayed), "--rtol", "1e-5"]) == 0


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        ([1.0, np.nan], [1.0, np.nan], True),
        ([np.inf, -np.inf], [np.inf, -np.inf], True),
        ([np.inf], [-np.inf], False),
        ([np.nan], [0.0], False),
        ([0.0], [-0.0], False),  # exact by default: bit for bit, as validate (docs/commands.md)
        ([1.0], [1.0 + 1e-9], True),
        ([1.0], [1.01], False),
    ],
)
def test_compare_arrays_floats(expected: list[float], actual: list[float], ok: bool) -> None:
    count, max_diff, first, _ = compare_arrays(
        np.array(expected, dtype=np.float32), np.array(actual, dtype=np.float32)
    )
    assert (count == 0) is ok
    assert (first is None) is ok
    if not ok:
        assert max_diff is not None and (max_diff > 0 or expected == [0.0])  # -0.0 is 0.0 away


def test_compare_arrays_uint64_extremes() -> None:
    expected = np.array([0, 2**64 - 1], dtype=np.uint64)
    actual = np.array([2**64 - 1, 2**64 - 1], dtype=np.uint64)
    count, max_diff, first, _ = compare_arrays(expected, actual)
    assert count == 1 and first == (0,) and max_diff == float(2**64 - 1)


def test_bad_directory(tmp_path: Path, capsys: Any) -> None:
    assert main(["compare", str(tmp_path / "nope")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["compare", str(empty)]) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "index.json").write_text("{not json")
    assert main(["compare", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "not an export" in err
    with pytest.raises(BadInputError):
        compare_export(tmp_path, rtol=-1.0)


def test_index_pointing_outside_is_missing_not_followed(replayed: Path) -> None:
    index = json.loads((replayed / "index.json").read_text())
    index["exported"].append({"folder": "../../etc", "node": "evil", "op_type": "Gather"})
    (replayed / "index.json").write_text(json.dumps(index))
    nodes = {n.node: n for n in compare_export(replayed).nodes}
    assert nodes["evil"].status == "missing"


def test_index_listing_a_folder_twice_is_refused_not_counted_twice(replayed: Path, capsys: Any) -> None:
    """A hand-edited index.json that lists one node's folder twice would report that node twice (two
    matches for one replay): it is refused, naming the folder, as any malformed index is."""
    index = json.loads((replayed / "index.json").read_text())
    first = index["exported"][0]
    index["exported"].append(dict(first))
    (replayed / "index.json").write_text(json.dumps(index))
    with pytest.raises(BadInputError, match="listed twice") as caught:
        compare_export(replayed)
    assert first["folder"] in str(caught.value)
    assert main(["compare", str(replayed)]) == 2
    assert "listed twice" in capsys.readouterr().err
