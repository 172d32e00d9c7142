"""The benchmark machinery (bench/) on tiny inputs: rows with the expected keys, no timing asserts."""

from __future__ import annotations

import json

import pytest
from bench import run as bench_run
from bench.cases import CASE_BUILDERS, build_cases

KERNEL_KEYS = {
    "section",
    "case",
    "op",
    "dml_operator",
    "shape",
    "elements",
    "match",
    "ours_ms",
    "ort_ms",
    "ort1_ms",
    "ratio_ort",
    "ratio_ort1",
    "reference_ms",
    "reference_speedup",
    "reference_note",
    "bridge_ms",
    "bridge_speedup",
    "bridge_note",
    "peak_mb",
    "io_mb",
    "memory_ratio",
}
MODEL_KEYS = {"section", "model", "ort_ms", "partitioned_ms", "ratio_partitioned", "customop_ms"}
TRANSLATION_KEYS = {"section", "nodes", "cold_us_per_node", "warm_us_per_node", "translated"}


@pytest.fixture(scope="module")
def tiny() -> bench_run.Config:
    return bench_run.Config(sizes=(256,), rounds=1, slow_budget=0.5, slow_repeats=1, translation_nodes=12)


def test_every_case_builds_and_matches_onnxruntime(tiny: bench_run.Config) -> None:
    rows = bench_run.bench_kernels(tiny)
    assert len(rows) == len(CASE_BUILDERS)
    for row in rows:
        assert "error" not in row, row
        assert set(row) >= KERNEL_KEYS, set(KERNEL_KEYS) - set(row)
        assert row["section"] == "kernel"
        assert row["match"] is True, row["case"]
        assert row["ours_ms"] > 0 and row["ort_ms"] > 0


def test_cases_are_reproducible() -> None:
    first, second = build_cases(512), build_cases(512)
    for a, b in zip(first, second, strict=True):
        assert a.name == b.name
        assert all((a.feeds[k] == b.feeds[k]).all() for k in a.feeds)


def test_one_model_row() -> None:
    config = bench_run.Config(rounds=1)
    row = bench_run.bench_model(bench_run.MODELS_DIR / "gathernd_batch_dims1.onnx", config)
    assert set(row) >= MODEL_KEYS, set(MODEL_KEYS) - set(row)
    assert row["ort_ms"] > 0


def test_translation_row(tiny: bench_run.Config) -> None:
    (row,) = bench_run.bench_translation(tiny)
    assert set(row) >= TRANSLATION_KEYS, row
    assert row["translated"] == tiny.translation_nodes


def test_targets_and_markdown_from_rows(tiny: bench_run.Config) -> None:
    rows = bench_run.bench_kernels(
        bench_run.Config(sizes=(128,), rounds=1, slow_budget=0.0, cases=("Gather axis=0", "ScatterND"))
    )
    rows += bench_run.bench_translation(tiny)
    goals = bench_run.targets(rows)
    assert {g["target"] for g in goals} >= {
        "kernel <= 1.5x onnxruntime CPU (default options)",
        "translation < 100 us per node",
    }
    text = bench_run.markdown(rows, bench_run.machine())
    assert "### Kernels" in text and "### Targets" in text
    json.dumps({"rows": rows, "targets": goals})


def test_model_rows_carry_latency_build_and_targets() -> None:
    config = bench_run.Config(
        rounds=1, latency_calls=20, memory=False, customop=False, models=("gathernd_batch_dims1",)
    )
    rows = bench_run.bench_models(config)
    assert [r["model"] for r in rows] == ["gathernd_batch_dims1"]
    row = rows[0]
    assert row["partitioned_match"] is True
    for key in ("ort_p50_ms", "ort_p90_ms", "partitioned_p50_ms", "partitioned_p90_ms", "ort_build_ms"):
        assert row[key] > 0, key
    assert row["ort_p90_ms"] >= row["ort_p50_ms"]
    labels = {g["target"] for g in bench_run.targets(rows)}
    assert "models (idle): worst ratio <= 3x onnxruntime CPU" in labels
    assert "session build <= 2x onnxruntime's" in labels
    assert "### Whole models, machine idle" in bench_run.markdown(rows, bench_run.machine())


def test_build_probe_reports_time_and_memory() -> None:
    from bench.models_bench import build_probe

    probe = build_probe("ort", bench_run.MODELS_DIR / "gathernd_batch_dims1.onnx")
    assert probe is not None and probe["seconds"] > 0 and probe["peak_mb"] >= probe["base_mb"]
    # the settled figure runs on past the build (the thread pools' spin): never below the build's own
    assert probe["settled_cpu_seconds"] >= probe["cpu_seconds"] > 0
