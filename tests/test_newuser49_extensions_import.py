"""A new user's custom-op engine beside transformers (newuser-49): importing onnxruntime-extensions.

``import onnxruntime_extensions`` imports transformers, tokenizers and torch for its converters when they
are installed, as they are beside optimum: the custom-op engine's first session took 11.1 s to build a
537 MB Gemma2-shaped step against onnxruntime's 3.6 s (7.8 s of it that import, 350 MB of RSS). It also
set ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` for every child process. dmlshim now imports the
package without them (unless the program imported them itself) and leaves the environment as it was.
Outputs are compared with onnxruntime CPU's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime_extensions")

_CHILD = r"""
import json, os, sys
import numpy as np
import onnxruntime
from onnx import TensorProto, helper
if sys.argv[1] == "preimport":
    import torch  # the program's own import: onnxruntime-extensions then gets it as usual
import dmlshim

graph = helper.make_graph(
    [helper.make_node("Gather", ["t", "i"], ["y"], name="g", axis=0)], "g",
    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [5, 3]),
     helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
feeds = {"t": np.arange(15, dtype=np.float32).reshape(5, 3), "i": np.array([4, 0, -1, 2], np.int64)}
want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
got = dmlshim.InferenceSession(model, engine="customop").run(None, feeds)[0]
import onnxruntime_extensions.cvt as cvt
print(json.dumps({
    "same": got.tobytes() == want.tobytes(),
    "loaded": sorted(m for m in ("torch", "transformers", "tokenizers") if m in sys.modules),
    "torch_available_to_extensions": cvt._is_torch_available,
    "env": os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"),
}))
"""


def _child(mode: str, env_value: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
    if env_value is not None:
        env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = env_value
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env_value", [None, "upb"])
def test_the_custom_op_engine_imports_no_converter_dependency(env_value: str | None) -> None:
    found = _child("plain", env_value)
    assert found["same"] is True
    assert found["loaded"] == []
    assert found["env"] == env_value  # not the "python" onnxruntime-extensions sets


def test_a_program_that_imported_torch_keeps_it_for_onnxruntime_extensions() -> None:
    pytest.importorskip("torch")
    found = _child("preimport", None)
    assert found["same"] is True
    assert "torch" in found["loaded"]
    assert found["torch_available_to_extensions"] is True
    assert found["env"] is None


def test_only_the_importing_thread_is_refused_those_modules(tmp_path: Path) -> None:
    from dmlshim.execute.custom_ops import ext_import

    (tmp_path / "nu49_optional_mod.py").write_text("VALUE = 7\n")
    sys.path.insert(0, str(tmp_path))
    try:
        finder = ext_import._Unavailable(["nu49_optional_mod"], threading.get_ident())
        sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
        try:
            with pytest.raises(ModuleNotFoundError):
                __import__("nu49_optional_mod")
            seen: list[int] = []
            worker = threading.Thread(target=lambda: seen.append(__import__("nu49_optional_mod").VALUE))
            worker.start()
            worker.join()
            assert seen == [7]
        finally:
            sys.meta_path.remove(finder)  # type: ignore[arg-type]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("nu49_optional_mod", None)
