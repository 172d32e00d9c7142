"""bench/small_run_cost.py in this process: one side's measurement, and --partitioned (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

from bench.small_run_cost import measure_side

MODELS = Path(__file__).resolve().parents[1] / "onnx_models"


def test_partitioned_measures_the_partitioned_steps() -> None:
    model = str(MODELS / "tiny_decoder_step.onnx")
    assert measure_side(model, "dmlshim", 3)["path"] == "whole-model check"
    found = measure_side(model, "dmlshim", 3, partitioned=True)
    assert found["path"] == "partitioned" and found["us"] > 0
