"""Hostile pass h7 (issue 35), files a model names: external-data entries with keys, offsets and lengths
onnxruntime refuses. dmlshim refuses exactly those, with onnxruntime's class (``Fail``; onnxruntime 1.24
and 1.32 alike) and a message naming the initializer and the value; what onnxruntime reads it reads too.
Each expectation is asked of onnxruntime CPU in the test (tests/oracle.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import BadModelError

from .oracle import IR_VERSION, ort_session

ENGINES = ("partitioned", "customop", "cpu")

_ENTRIES: dict[str, list[tuple[str, str]]] = {
    "unknown_key": [("location", "w.bin"), ("evil", "1")],
    "basepath_key": [("location", "w.bin"), ("basepath", "..")],
    "capitalised_key": [("location", "w.bin"), ("Location", "w.bin")],
    "checksum_key": [("location", "w.bin"), ("checksum", "deadbeef")],  # read by onnxruntime: accepted
    "offset_empty": [("location", "w.bin"), ("offset", "")],
    "offset_plus": [("location", "w.bin"), ("offset", "+0")],
    "offset_hex": [("location", "w.bin"), ("offset", "0x0")],
    "offset_negative": [("location", "w.bin"), ("offset", "-4")],
    "offset_beyond": [("location", "w.bin"), ("offset", "4096")],
    "offset_int64_max": [("location", "w.bin"), ("offset", str(2**63 - 1))],
    "offset_unaligned": [("location", "w.bin"), ("offset", "3"), ("length", "48")],  # accepted
    "length_float": [("location", "w.bin"), ("length", "48.0")],
    "length_short": [("location", "w.bin"), ("length", "8")],
    "length_past_end": [("location", "w.bin"), ("offset", "8"), ("length", "48")],
    "location_empty": [("location", "")],
    "location_missing": [("offset", "0")],
    "location_twice": [("location", "w.bin"), ("location", "w.bin")],
}


def _external(folder: Path, entries: list[tuple[str, str]]) -> str:
    np.arange(13, dtype=np.float32).tofile(folder / "w.bin")  # 52 bytes for a [3, 4] float tensor
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[3, 4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in entries:
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "x"], ["y"], name="g")],
        "h7",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


@pytest.mark.parametrize("case", sorted(_ENTRIES))
def test_external_data_entries_are_read_or_refused_as_onnxruntime_does(case: str, tmp_path: Path) -> None:
    """An unknown key ('evil') was ignored by the partitioned and cpu engines and `validate` (exit 0) where
    onnxruntime refuses the model ("model format error!"); malformed offsets and lengths were refused as
    InvalidGraph where onnxruntime raises Fail."""
    path = _external(tmp_path, _ENTRIES[case])
    feeds = {"x": np.array([1, -1])}
    try:
        want = ort_session(path).run(None, feeds)
    except Exception as exc:
        want, theirs = None, exc
    if case == "location_twice" and want is not None:
        pytest.skip("onnxruntime 1.24 reads a repeated location key; dmlshim refuses it, as 1.32 does")
    for engine in ENGINES:
        if want is not None:
            got = dmlshim.InferenceSession(path, engine=engine).run(None, feeds)
            np.testing.assert_array_equal(got[0], want[0])
            continue
        with pytest.raises(type(theirs)) as info:
            dmlshim.InferenceSession(path, engine=engine).run(None, feeds)
        assert isinstance(info.value, BadModelError) and info.value.tensor == "W"
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "validate", path, "-q"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == (0 if want is not None else 2), done.stderr
    assert "Traceback" not in done.stderr
    if want is None:
        assert "initializer 'W'" in done.stderr


@pytest.mark.parametrize("content", [b"root:x:0:0:root:/root:/bin/bash\n", b"", b"\x80\x04K\x01."])
def test_a_dml_output_that_is_no_numpy_file_is_named_as_such(content: bytes, tmp_path: Path) -> None:
    """compare read a dml_output.npy that is no .npy file (a link to /etc/passwd, an empty file, a pickle)
    through numpy.load, whose message advised loading it 'unsafely' with allow_pickle; nothing is
    unpickled and the message says what the file is not."""
    path = _external(tmp_path, [("location", "w.bin")])
    np.savez(tmp_path / "in.npz", x=np.array([1, -1]))
    export = subprocess.run(
        [sys.executable, "-m", "dmlshim", "export", path, "--inputs", "in.npz", "-o", "exp", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert export.returncode == 0, export.stderr
    (tmp_path / "exp" / "000_g" / "dml_output.npy").write_bytes(content)
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", "compare", "exp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "is not a numpy array file" in done.stdout
    assert "allow_pickle=" not in done.stdout + done.stderr
