"""``inspect --html`` and ``validate --html`` at the level of the page's elements (no browser: this runs in
CI): every gather/scatter node listed and drawn with the colour of where it runs, its details, the
verdict, bounds for large graphs, a page that needs no network, the careful writer, and the error when
the html extra is missing. tests/test_html_browser.py opens the pages in Chromium."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.cli.main import main
from dmlshim.extras import install_command
from tests.html_pages import COLOURS, Page, four_places_model, gather_scatter_names, three_places_model
from tests.oracle import IR_VERSION

pytest.importorskip("igraph", reason=f"the html extra (igraph) is not installed: {install_command('html')}")

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted(ROOT.glob("*.onnx"))
REAL = sorted((ROOT / "real").glob("*.onnx"))


def _inspect_page(tmp_path: Path, model: Path, *extra: str) -> tuple[int, Page, str]:
    out = tmp_path / (model.stem + ".html")
    code = main(["inspect", str(model), "--html", str(out), *extra])
    text = out.read_text(encoding="utf-8")
    return code, Page(text), text


def _check_every_node(model: Path, page: Page) -> None:
    expected = gather_scatter_names(model)
    assert expected, model
    assert sorted(page.rows) == sorted(expected)
    drawn = page.drawn()
    assert sorted(drawn) == sorted(expected)
    for name, key in drawn.items():
        category = page.rows[name].split("cat-")[1].split()[0]
        assert category in COLOURS
        assert f"fill:#{''.join(f'{c:02x}' for c in COLOURS[category])}" in page.fills[key]
        assert page.titles[key].startswith(name + ": ")


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.stem)
def test_every_shipped_model_shows_every_gather_scatter_node(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, _ = _inspect_page(tmp_path, model)
    out, err = capsys.readouterr()
    assert code in (0, 1)
    assert "HTML report written to" in err
    _check_every_node(model, page)
    # The verdict on top is inspect's own (the text report is printed as usual).
    first = [line.strip() for line in out.splitlines() if line.startswith("  DirectML operators at")]
    assert first and first[0] in page.verdict


@pytest.mark.slow
@pytest.mark.parametrize("model", REAL, ids=lambda p: p.stem)
def test_every_real_model_shows_every_gather_scatter_node(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, text = _inspect_page(tmp_path, model)
    capsys.readouterr()
    assert code in (0, 1)
    _check_every_node(model, page)
    assert len(text.encode()) < 1_500_000


def test_colour_and_details_follow_where_each_node_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = four_places_model(tmp_path / "four.onnx")
    code, page, _ = _inspect_page(tmp_path, model)
    capsys.readouterr()
    assert code == 1  # a fallback and a node of unknown rank
    assert {name: cls for name, cls in page.rows.items()} == {
        "on_dml": "gs cat-dml",
        "shape_gather": "gs cat-shape",
        "scatter_add": "gs cat-fallback",
        "unknown_rank": "gs cat-error",
    }
    on_dml = page.rows_of("on_dml")
    assert on_dml["where it runs"] == "DirectML operator"
    assert on_dml["DML operator"] == "DML_OPERATOR_GATHER"
    # Gather axis=1 of a [4, 3] input with 2 indices: DirectML's GATHER descriptor (Axis, IndexDimensions).
    assert on_dml["descriptor"].startswith("Axis=") and "Output[" in on_dml["descriptor"]
    assert on_dml["lowest feature level"].startswith("DML_FEATURE_LEVEL_")
    assert page.rows_of("shape_gather")["onnxruntime-directml places it on"] == "CPUExecutionProvider"
    assert "[placement] EP_CPU_PREFERRED" in page.rows_of("shape_gather")
    scatter = page.rows_of("scatter_add")
    assert scatter["where it runs"] == "CPU fallback"
    assert "reduction='add'" in scatter["[fallback] SCATTER_REDUCTION_UNSUPPORTED"]
    assert "[error] SHAPE_UNKNOWN" in page.rows_of("unknown_rank")
    assert "PARTIAL" in page.verdict
    # Every other node is drawn too, plain.
    plain = [a for a in page.boxes.values() if "plain" in a["class"].split()]
    assert len(plain) == 2  # Shape, Reshape


def test_validate_page_shows_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ROOT / "gnn_scatter_reduce.onnx"
    out = tmp_path / "v.html"
    code = main(["validate", str(model), "--inputs", str(model.with_suffix(".npz")), "--html", str(out)])
    text, _ = capsys.readouterr()
    assert code == 0
    page = Page(out.read_text(encoding="utf-8"))
    _check_every_node(model, page)
    assert "verdict: MATCH" in page.verdict
    for name in gather_scatter_names(model):
        rows = page.rows_of(name)
        assert rows["in dmlshim's run"] and rows["output against the reference"]
    # The ScatterND-18 with reduction="add" ran on onnxruntime's CPU provider (DirectML has no reduction).
    assert page.rows["node_ScatterND_18"] == "gs cat-fallback"
    assert page.rows_of("node_ScatterND_18")["in dmlshim's run"].startswith("onnxruntime CPU")
    assert text.strip().splitlines()[-1] in page.verdict


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
def test_validate_page_colours_where_each_engine_ran_the_nodes(
    tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = three_places_model(tmp_path / "three.onnx")
    out = tmp_path / "three.html"
    assert main(["validate", str(model), "--engine", engine, "--html", str(out)]) == 0
    capsys.readouterr()
    page = Page(out.read_text(encoding="utf-8"))
    assert page.rows == {
        "on_dml": "gs cat-dml",
        "shape_gather": "gs cat-shape",
        "scatter_add": "gs cat-fallback",
    }
    assert page.rows_of("on_dml")["in dmlshim's run"] == "emulated as DML_OPERATOR_GATHER"
    assert page.rows_of("shape_gather")["in dmlshim's run"].startswith("onnxruntime CPU")
    assert page.rows_of("on_dml")["output against the reference"] in ("match", "-")


def test_page_needs_nothing_from_the_network(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, page, text = _inspect_page(tmp_path, ROOT / "tiny_decoder_step.onnx")
    capsys.readouterr()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert re.findall(r"https?://[^\s\"']+", text) == ["http://www.w3.org/2000/svg"]  # a name, never fetched
    for tag, attrs in page.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed"), tag
        assert "src" not in attrs and "href" not in attrs, (tag, attrs)


def test_hostile_node_names_stay_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "</script><img src=x onerror=alert(1)>&amp;"
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name=name)],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 2])],
        initializer=[helper.make_tensor("i", T.INT64, [2], [2, 0])],
    )
    path = tmp_path / "hostile.onnx"
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION), path
    )
    _, page, text = _inspect_page(tmp_path, path)
    capsys.readouterr()
    assert "<img" not in text
    assert list(page.rows) == [name]
    assert page.drawn() == {name: "n0"}


def _chain(path: Path, length: int, every: int) -> tuple[Path, list[str]]:
    """A chain of ``length`` nodes whose every ``every``-th node is a Gather (the others Relu/Neg)."""
    nodes, gathers, value = [], [], "x"
    for k in range(length):
        out = f"v{k}"
        if k % every == every - 1:
            nodes.append(helper.make_node("Gather", [value, "i"], [out], axis=0, name=f"gather_{k}"))
            gathers.append(f"gather_{k}")
        else:
            nodes.append(helper.make_node("Relu" if k % 2 else "Neg", [value], [out], name=f"op_{k}"))
        value = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 4])],
        [helper.make_tensor_value_info(value, T.FLOAT, [4, 4])],
        initializer=[helper.make_tensor("i", T.INT64, [4], [3, 2, 1, 0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    onnx.save(model, path)
    return path, gathers


def test_large_graph_draws_the_gathers_neighbourhood(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, gathers = _chain(tmp_path / "long.onnx", 5000, 250)  # 20 Gathers among 5,000 nodes
    start = time.perf_counter()
    _, page, text = _inspect_page(tmp_path, model)
    elapsed = time.perf_counter() - start
    capsys.readouterr()
    assert sorted(page.drawn()) == sorted(gathers)
    plain = [a for a in page.boxes.values() if "plain" in a["class"].split()]
    groups = [a for a in page.boxes.values() if "group" in a["class"].split()]
    # Two nodes either side of each Gather (the last Gather ends the chain), one group per stretch between.
    assert len(plain) == 4 * len(gathers) - 2
    assert len(groups) == len(gathers)
    assert "5000 nodes" in text and "grey groups" in text
    assert len(text.encode()) < 200_000
    assert elapsed < 60


def test_more_gathers_than_drawn_are_still_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dmlshim.report.html.graph_view import MAX_DRAWN

    model, gathers = _chain(tmp_path / "gathers.onnx", MAX_DRAWN + 300, 1)
    _, page, _ = _inspect_page(tmp_path, model)
    capsys.readouterr()
    assert sorted(page.rows) == sorted(gathers)
    assert len(page.drawn()) == MAX_DRAWN
    undrawn = [g for g in gathers if g not in page.drawn()]
    assert len(undrawn) == 300
    assert "not drawn" in page.rows_of(undrawn[0])["picture"]


def test_existing_report_needs_overwrite_and_the_model_is_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ROOT / "embedding_gather.onnx"
    out = tmp_path / "r.html"
    out.write_text("keep")
    assert main(["inspect", str(model), "--html", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_text() == "keep"
    assert main(["inspect", str(model), "--html", str(out), "--overwrite"]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    copy = tmp_path / "m.onnx"
    copy.write_bytes(model.read_bytes())
    assert main(["inspect", str(copy), "--html", str(copy), "--overwrite"]) == 2
    assert "refusing to replace an input" in capsys.readouterr().err
    assert copy.read_bytes() == model.read_bytes()


def test_validate_html_takes_one_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(MODELS[0]), str(MODELS[1]), "--html", str(tmp_path / "r.html")])
    assert code == 2
    assert "--html take one model" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_missing_extra_is_named_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "igraph", None)  # import igraph raises ImportError
    out = tmp_path / "r.html"
    for command in ("inspect", "validate"):
        assert main([command, str(ROOT / "embedding_gather.onnx"), "--html", str(out)]) == 2
        err = capsys.readouterr().err
        assert install_command("html") in err and "igraph" in err  # its form: tests/test_extras_hint.py
        assert not out.exists()


def test_a_node_where_validate_saw_the_divergence_start_is_marked(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from dmlshim.execute.record import NodeRecord
    from dmlshim.report.html import PageText, page_html, validate_marks
    from dmlshim.validate import NodeValidation

    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="g")],
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 2])],
        initializer=[helper.make_tensor("i", T.INT64, [2], [2, 0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    record = NodeRecord("g", "Gather", placement="dml", status="dml", operator="DML_OPERATOR_GATHER")
    # Its input agreed with the reference and its output did not: the divergence starts here.
    node = NodeValidation("g", "Gather", record=record, output_match=False, input_matches=(("x", True),))
    marks = validate_marks(SimpleNamespace(nodes=(node,)))  # type: ignore[arg-type]
    assert marks["g"].alert and marks["g"].category == "dml"
    page = Page(page_html(model, marks, PageText("t", ("verdict: MISMATCH",), False, "")))
    assert page.boxes[page.drawn()["g"]]["class"] == "node gs cat-dml alert"
    assert page.rows_of("g")["output against the reference"] == "DIVERGES HERE"
