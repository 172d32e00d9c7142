"""bench/run_profile.py on shipped models: the parts it names are found in the profile (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

from bench.run_profile import profile_model

MODELS = Path(__file__).resolve().parents[1] / "onnx_models"


def test_partitioned_model_profile_names_its_kernel_step() -> None:
    found = profile_model(str(MODELS / "gathernd_batch_dims1.onnx"), runs=3)
    # one emulated node and no CPU segment: the check is tried, and dropped once the gather, whose
    # indices are negative, must still be computed after its proved runs
    assert found["path"] == "partitioned"
    parts = found["us_per_run"]
    # the partitioned steps' gather, by its run plan (execute/plan/step_fast.py)
    assert parts["planned_steps"] > 0 and parts["total"] >= parts["planned_steps"]
    assert parts["onnxruntime"] == 0  # nothing of this model runs in onnxruntime
    assert found["calls_per_run"] > 10


def test_checked_model_profile_names_onnxruntime_and_lean_gathers() -> None:
    found = profile_model(str(MODELS / "real" / "mixtral_moe_dynamo.onnx"), runs=3)
    assert found["path"] == "whole-model check"
    parts = found["us_per_run"]
    # past the proved runs the steady lane answers: one onnxruntime call and the index proofs, no node
    # verified, proved again through its step or recorded anew
    assert parts["onnxruntime"] > 0 and parts["steady_lane"] >= parts["onnxruntime"]
    assert parts["verify"] == parts["proved_again"] == parts["record"] == 0
