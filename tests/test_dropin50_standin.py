"""Under ``dmlshim.install()`` a program's ``isinstance(arg, onnxruntime.NodeArg)`` and
``isinstance(meta, onnxruntime.ModelMetadata)`` hold for what its sessions return, as with onnxruntime
(found by a parity harness running one client on onnxruntime and on dmlshim). The same client runs in a
subprocess on plain onnxruntime for the expected answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import REPO

CLIENT = textwrap.dedent(
    """
    import json, sys
    if sys.argv[1] == "dmlshim":
        import dmlshim
        dmlshim.install()
    import onnxruntime as ort
    sess = ort.InferenceSession(sys.argv[2], providers=ort.get_available_providers())
    arg = sess.get_inputs()[0]
    print(json.dumps({
        "input is NodeArg": isinstance(arg, ort.NodeArg),
        "output is NodeArg": isinstance(sess.get_outputs()[0], ort.NodeArg),
        "overridable": all(isinstance(a, ort.NodeArg) for a in sess.get_overridable_initializers()),
        "meta is ModelMetadata": isinstance(sess.get_modelmeta(), ort.ModelMetadata),
        "class names": [type(arg).__name__, type(sess.get_modelmeta()).__name__],
    }))
    """
)


def _client(tmp_path: Path, binding: str) -> dict[str, object]:
    script = tmp_path / "client.py"
    script.write_text(CLIENT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(REPO / "provider")
    env["DMLSHIM_ORT_SUMMARY"] = "off"
    model = REPO / "onnx_models" / "embedding_gather.onnx"
    done = subprocess.run(
        [sys.executable, str(script), binding, str(model)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("binding", ["dmlshim"])
def test_nodeargs_are_instances_of_the_bound_modules_class(tmp_path: Path, binding: str) -> None:
    expected = _client(tmp_path, "onnxruntime")
    assert expected["input is NodeArg"] and expected["meta is ModelMetadata"]
    assert _client(tmp_path, binding) == expected
