"""The DirectML replay host's Python side, without DirectML: job files, result reading, the restart logic.

Runs everywhere. The numbers in ``job.txt`` are DirectML.h's enum values (directml-facts.md section 1) and
the struct fields the C host fills, so a job a test writes is exactly what the host hands DirectML.
The host process itself is stood in for by a small Python script (``launcher``) that plays its protocol,
crashes included; tests/test_directml_real.py runs the real one.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dml.enums import DataType
from dmlshim.dml.operators import GatherElementsDesc, ScatterNdDesc
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.dxdispatch import load_model_file, single_operator_model
from dmlshim.dxdispatch.compare import compare_export
from dmlshim.dxdispatch.host_build import HOST_SOURCE, build_host, find_compiler
from dmlshim.dxdispatch.host_jobs import job_text, read_result, write_job, write_outputs
from dmlshim.dxdispatch.host_run import DeviceInfo, run_host
from dmlshim.dxdispatch.host_stack import HostStack, StackMissingError, load_stack
from dmlshim.errors import BadInputError

SEEDS = Path(__file__).resolve().parent / "seeds"


def _strided_gather_elements() -> tuple[GatherElementsDesc, dict[str, np.ndarray]]:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    # indices [3, 2] over a [3, 4] buffer on axis 0: a window of the first 2 columns, strides (4, 1)
    desc = GatherElementsDesc(
        BufferTensorDesc(DataType.FLOAT32, (3, 2), (4, 1)),
        BufferTensorDesc(DataType.INT64, (3, 2)),
        BufferTensorDesc(DataType.FLOAT32, (3, 2)),
        axis=0,
    )
    inputs = {
        "InputTensor": data.reshape(-1)[:10],
        "IndicesTensor": np.array([[2, -1], [0, 1], [1, 0]], np.int64),
    }
    return desc, inputs


def test_job_text_holds_directml_enum_values_and_struct_fields() -> None:
    desc, inputs = _strided_gather_elements()
    model = single_operator_model(desc, inputs, dispatchable="op", output_file="dml_output.npy")
    text = job_text(model, {"input": "buf0.bin", "indices": "buf1.bin", "output": None})
    lines = text.splitlines()
    assert lines[0] == "dmlreplay-job 1"
    assert lines[1] == f"buffers {len(model.resources)}"
    # DML_OPERATOR_GATHER_ELEMENTS = 107, no execution flags, 3 tensors, 1 UINT (Axis)
    assert "op 107 0 3 1" in lines
    op = lines.index("op 107 0 3 1")
    # t DataType Flags DimensionCount TotalTensorSizeInBytes GuaranteedBaseOffsetAlignment has_strides ...
    # InputTensor: FLOAT32 (1), strides (4, 1): (2*4 + 1*1 + 1) = 10 elements = 40 bytes
    assert lines[op + 1] == "t 1 0 2 40 0 1 3 2 4 1"
    assert lines[op + 2] == "t 11 0 2 48 0 0 3 2"  # INT64 = 11, 6 elements
    assert lines[op + 3] == "t 1 0 2 24 0 0 3 2"
    assert lines[op + 4] == "u 0"
    assert lines[-2].startswith("d 0 ")
    assert lines[-1] == "end"


def test_job_text_scatter_nd_field_order() -> None:
    desc = ScatterNdDesc(
        BufferTensorDesc(DataType.INT32, (1, 8)),
        BufferTensorDesc(DataType.UINT32, (4, 1)),
        BufferTensorDesc(DataType.INT32, (1, 4)),
        BufferTensorDesc(DataType.INT32, (1, 8)),
        input_dimension_count=1,
        indices_dimension_count=2,
    )
    inputs = {
        "InputTensor": np.arange(8, dtype=np.int32).reshape(1, 8),
        "IndicesTensor": np.array([[4], [3], [1], [7]], np.uint32),
        "UpdatesTensor": np.array([[9, 10, 11, 12]], np.int32),
    }
    model = single_operator_model(desc, inputs, dispatchable="op", output_file="o.npy")
    lines = job_text(model, {}).splitlines()
    # DML_OPERATOR_SCATTER_ND = 109; INT32 = 6, UINT32 = 3; the UINTs in struct order
    op = lines.index("op 109 0 4 2")
    assert [line.split()[1] for line in lines[op + 1 : op + 5]] == ["6", "3", "6", "6"]
    assert lines[op + 5] == "u 1 2"
    names = list(model.resources)
    bound = [names.index(model.commands[0].bindings[f]) for f in desc.TENSOR_FIELDS]  # type: ignore[union-attr]
    assert lines[-2] == "d 0 " + " ".join(map(str, bound))


def test_job_text_execution_flags() -> None:
    model = load_model_file(SEEDS / "scatter_nd" / "model.json")
    doc = model.to_json()
    doc["dispatchables"]["op"]["executionFlags"] = ["DISABLE_META_COMMANDS", "DESCRIPTORS_VOLATILE"]
    from dmlshim.dxdispatch import model_from_json

    flagged = model_from_json(doc)
    assert "op 109 6 4 2" in job_text(flagged, {}).splitlines()  # 2 | 4


def test_read_result_fields_and_missing(tmp_path: Path) -> None:
    assert read_result(tmp_path).status == "missing"
    (tmp_path / "result.txt").write_text(
        "status error\nstage create_operator\nindex 0\nhr 0x80070057\nmessage refused\nms_compile 1.5\n"
    )
    result = read_result(tmp_path)
    assert (result.status, result.stage, result.index, result.hresult) == (
        "error",
        "create_operator",
        0,
        0x80070057,
    )
    assert "E_INVALIDARG" in result.describe()
    assert result.ms_compile == 1.5


def test_device_info_parse() -> None:
    info = DeviceInfo.parse(
        "directml_dll Z:\\x\\DirectML.dll\ndirectml_version 1.15.4.0\nadapter llvmpipe (LLVM 19)\n"
        "created_feature_level 0x6400\nmax_feature_level 0x6400\ndata_types 1 2 3 11\nok\n"
    )
    assert info.max_feature_level == 0x6400
    assert info.data_types == (1, 2, 3, 11)
    assert info.describe() == "DirectML 1.15.4.0 (feature level 6_4) on 'llvmpipe (LLVM 19)'"


def test_load_stack_missing_names_the_setup(tmp_path: Path) -> None:
    with pytest.raises(StackMissingError, match="dmlshim directml setup"):
        load_stack(tmp_path / "stack.json")


def test_load_stack_reads_wine_env_and_dll(tmp_path: Path) -> None:
    dll = tmp_path / "DirectML.dll"
    dll.write_bytes(b"MZ")
    (tmp_path / "stack.json").write_text(
        json.dumps({"wine": "/usr/bin/wine", "directml_dll": str(dll), "env": {"WINEDEBUG": "-all"}})
    )
    stack = load_stack(tmp_path / "stack.json")
    assert stack.directml_dll == dll
    assert stack.env == {"WINEDEBUG": "-all"}
    if sys.platform != "win32":
        assert stack.launcher == ("/usr/bin/wine",)
    dll.unlink()
    with pytest.raises(BadInputError, match="gone"):
        load_stack(tmp_path / "stack.json")


# A stand-in for dml_replay_host.exe speaking its protocol: device.txt, then per job result.txt and
# out<i>.bin (each buffer's initial bytes, unchanged). A job folder holding a file named "crash" kills
# the process mid-job, as a crash would.
_FAKE_HOST = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    run = Path(".")
    if (run / "start_fails").exists():  # its count: how many starts die before the device is made
        left = int((run / "start_fails").read_text())
        if left:
            (run / "start_fails").write_text(str(left - 1))
            sys.exit(1)
    device = "directml_version 1.15.4.0\\nadapter fake\\nmax_feature_level 0x6400\\nok\\n"
    (run / "device.txt").write_text(device)
    for job in (run / "jobs.txt").read_text().split():
        folder = run / job
        (folder / "result.txt").write_text("status running\\n")
        if (folder / "crash").exists():
            os._exit(4)
        lines = (folder / "job.txt").read_text().splitlines()
        count = int(lines[1].split()[1])
        for i, line in enumerate(lines[2 : 2 + count]):
            _, size, name = line.split()
            data = (folder / name).read_bytes() if name != "-" else b""
            (folder / f"out{i}.bin").write_bytes(data.ljust(int(size), b"\\0"))
        (folder / "result.txt").write_text("status ok\\nms_total 1\\n")
    """
)


def _fake_stack(tmp_path: Path) -> HostStack:
    script = tmp_path / "fake_host.py"
    script.write_text(_FAKE_HOST)
    dll = tmp_path / "DirectML.dll"
    dll.write_bytes(b"MZ")
    # the launcher runs "<python> fake_host.py <exe> . <dll>": the script ignores its arguments
    return HostStack(dll, launcher=(sys.executable, str(script)))


def test_run_host_goes_on_after_a_crash(tmp_path: Path) -> None:
    model = load_model_file(SEEDS / "scatter_nd" / "model.json")
    run_dir = tmp_path / "run"
    jobs = ["a", "b", "c"]
    for job in jobs:
        (run_dir / job).mkdir(parents=True)
        write_job(model, run_dir / job)
    (run_dir / "b" / "crash").write_text("")
    run = run_host(Path("host.exe"), run_dir, jobs, _fake_stack(tmp_path), timeout_s=60)
    assert run.device.directml_version == "1.15.4.0"
    assert [run.results[j].status for j in jobs] == ["ok", "crash", "ok"]
    assert "exit code 4" in run.results["b"].message
    assert run.processes == 3  # the crashing job is tried twice


def test_replay_folders_writes_outputs_and_records(tmp_path: Path) -> None:
    from dmlshim.dxdispatch.real_replay import replay_folders

    folder = tmp_path / "node"
    shutil.copytree(SEEDS / "scatter_nd", folder)
    (folder / "dml_output.npy").write_bytes(b"stale")
    replay = replay_folders([folder], stack=_fake_stack(tmp_path), exe=Path("host.exe"))
    assert replay.all_ran
    # the stand-in leaves every buffer as it was: the output buffer's zeros, written by writeFile
    written = np.load(folder / "output.npy")
    np.testing.assert_array_equal(written, np.zeros(8, np.float32))
    record = json.loads((folder / "dml_replay.json").read_text())
    assert record["result"]["status"] == "ok"
    assert record["device"]["directml_version"] == "1.15.4.0"


def test_compare_names_directml_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "000_n"
    node.mkdir()
    np.save(node / "expected_output.npy", np.zeros(3, np.float32))
    (node / "model.json").write_text("{}")
    (node / "dml_replay.json").write_text(
        json.dumps(
            {
                "result": {
                    "status": "error",
                    "stage": "create_operator",
                    "hresult": "0x80070057",
                    "message": "IDMLDevice::CreateOperator refused the descriptor",
                }
            }
        )
    )
    report = compare_export(tmp_path)
    (only,) = report.nodes
    assert only.status == "error"
    assert "create_operator" in only.detail and "0x80070057" in only.detail
    assert not report.all_match
    assert main(["compare", str(tmp_path)]) == 1
    assert "1 DirectML error" in capsys.readouterr().out


def test_compare_run_directml_without_stack_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DMLSHIM_DIRECTML_STACK", str(tmp_path / "none" / "stack.json"))
    shutil.copytree(SEEDS / "scatter_nd", tmp_path / "export" / "n")
    assert main(["compare", str(tmp_path / "export"), "--run-directml"]) == 2
    assert "dmlshim directml setup" in capsys.readouterr().err


def test_write_outputs_refuses_a_short_readback(tmp_path: Path) -> None:
    model = load_model_file(SEEDS / "scatter_nd" / "model.json")
    write_job(model, tmp_path)
    with pytest.raises(BadInputError, match="read-back"):
        write_outputs(model, tmp_path, tmp_path / "out")


def test_host_source_is_ours_and_builds(tmp_path: Path) -> None:
    text = HOST_SOURCE.read_text()
    assert "#include <DirectML.h>" not in text  # declared from the published ABI, no Microsoft header
    try:
        find_compiler()
    except BadInputError:
        pytest.skip("no mingw-w64 compiler (Debian: gcc-mingw-w64-x86-64-posix)")
    exe = build_host(target_dir=tmp_path)
    assert exe.read_bytes()[:2] == b"MZ"
    assert build_host(target_dir=tmp_path) == exe  # cached: same source, same compiler


def test_zero_buffers_need_no_file(tmp_path: Path) -> None:
    model = single_operator_model(
        *_strided_gather_elements(), dispatchable="op", output_file="dml_output.npy"
    )
    write_job(model, tmp_path)
    # the output buffer (zeros) has no file: the host zero-fills it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["buf0.bin", "buf1.bin", "job.txt"]


def test_allow_builtin_widens_native_only_overrides() -> None:
    from dmlshim.dxdispatch.host_run import allow_builtin

    assert allow_builtin("d3d12,d3d12core,dxgi,wined3d=n;mscoree,mshtml=") == (
        "d3d12,d3d12core,dxgi,wined3d=n,b;mscoree,mshtml="
    )
    assert allow_builtin("x=b") == "x=b"


@pytest.mark.parametrize("fails", [1, 2])
def test_run_host_starts_again_once_when_it_dies_before_its_device(tmp_path: Path, fails: int) -> None:
    """A host that exits before making its device, saying nothing (a Wine start-up hiccup, seen in CI), is
    started once more; a second such exit is the device error it always was."""
    model = load_model_file(SEEDS / "scatter_nd" / "model.json")
    run_dir = tmp_path / "run"
    (run_dir / "a").mkdir(parents=True)
    write_job(model, run_dir / "a")
    (run_dir / "start_fails").write_text(str(fails))
    if fails == 2:
        with pytest.raises(BadInputError, match="could not create its device"):
            run_host(Path("host.exe"), run_dir, ["a"], _fake_stack(tmp_path), timeout_s=60)
        return
    run = run_host(Path("host.exe"), run_dir, ["a"], _fake_stack(tmp_path), timeout_s=60)
    assert run.results["a"].status == "ok"
    assert run.processes == 2
