"""The stack's self-check: one GatherElements node (with a negative index) runs on real DirectML, with CPU
fallback disabled, and must equal onnxruntime CPU bit for bit."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import EngineUnavailableError
from .host import Host, HostError
from .stack import load_stack


def probe_model() -> onnx.ModelProto:
    """GatherElements(data[3,4] float, indices[3,2] int64, axis=1)."""
    node = helper.make_node("GatherElements", ["data", "indices"], ["out"], axis=1, name="probe_gather")
    graph = helper.make_graph(
        [node],
        "dmlshim_probe",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, [3, 2]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    return model


def verify_stack(folder: Path, stack_json: Path) -> None:
    """Run the probe through a host built from ``stack_json``.

    Raises:
        EngineUnavailableError: the host did not start, DirectML refused, or the values differ.
    """
    import onnxruntime as ort

    stack = load_stack(folder) if stack_json.name == "stack.json" else _load_candidate(folder, stack_json)
    feeds = {
        "data": np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5,
        "indices": np.array([[0, -1], [3, 1], [2, -4]], dtype=np.int64),
    }
    with tempfile.TemporaryDirectory(prefix="dmlshim-probe-") as tmp:
        path = Path(tmp) / "probe.onnx"
        onnx.save(probe_model(), str(path))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        expected = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        host = Host(stack)
        failed = False
        try:
            session = host.load(path, disable_cpu_fallback=True)
            got = host.run(session, feeds, ["out"])[0]
        except HostError as exc:
            failed = True  # the error names the host's log: it is kept
            raise EngineUnavailableError(
                f"the stack is built but DirectML did not run the probe: {exc} (host log: {host.log_path})",
                value="verify",
            ) from exc
        finally:
            host.close(keep_log=failed)
    if got.dtype != expected.dtype or got.shape != expected.shape or not np.array_equal(got, expected):
        raise EngineUnavailableError(
            f"DirectML's GatherElements gave {got.tolist()}, onnxruntime CPU {expected.tolist()}: the stack "
            "computes wrong values (an old lavapipe? see docs/directml-linux.md)",
            value="verify",
        )


def _load_candidate(folder: Path, candidate: Path):  # type: ignore[no-untyped-def]
    import shutil

    with tempfile.TemporaryDirectory(prefix="dmlshim-stack-") as tmp:
        shutil.copy2(candidate, Path(tmp) / "stack.json")
        stack = load_stack(Path(tmp))
    return stack
