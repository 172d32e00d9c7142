"""One CLI: a flag means one thing everywhere, misspellings get suggestions, progress stays off pipes."""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import re
from collections import defaultdict
from pathlib import Path

import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from dmlshim.cli import validate_files, validate_many
from dmlshim.cli.main import build_parser, main
from dmlshim.cli.progress import Progress
from dmlshim.comparison import DEFAULT_ATOL, DEFAULT_RTOL
from dmlshim.text import shape_text
from dmlshim.validate.tolerances import parse_tolerances

from .conftest import REPO

MODELS = REPO / "onnx_models"
TOPK = str(MODELS / "topk_gather.onnx")
EMBEDDING = str(MODELS / "embedding_gather.onnx")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _add_model(path: Path) -> Path:
    """A model with no gather/scatter node at all."""
    info = [oh.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b", "c")]
    graph = oh.make_graph([oh.make_node("Add", ["a", "b"], ["c"], name="add")], "g", info[:2], info[2:])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


# ---------------------------------------------------------------------------------------------------------
# One meaning per flag


def test_every_shared_option_is_the_same_kind_of_option_in_every_command() -> None:
    kinds: dict[str, set[tuple[str, object]]] = defaultdict(set)
    for sub in _subparsers().values():
        for action in sub._actions:
            for option in action.option_strings:
                kinds[option].add((type(action).__name__, action.nargs))
    assert {o: k for o, k in kinds.items() if len(k) > 1} == {}
    assert len(kinds["--feature-level"]) == 1 and len(kinds["--json"]) == 1


def test_minus_o_is_the_output_path_in_every_command() -> None:
    commands = {}
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if "-o" in action.option_strings:
                assert set(action.option_strings) == {"-o", "--output"}, (name, action.option_strings)
                commands[name] = action.dest
    assert set(commands) >= {"run", "lower", "export", "replay"}


def test_old_output_spellings_still_work_but_are_hidden() -> None:
    subs = _subparsers()
    export = build_parser().parse_args(["export", TOPK, "--output-dir", "d"])
    assert export.output_dir == "d"
    assert build_parser().parse_args(["export", TOPK, "-o", "d"]).output_dir == "d"
    replay = build_parser().parse_args(["replay", "m.json", "--output-path", "p"])
    assert replay.output_path == "p"
    assert build_parser().parse_args(["replay", "m.json", "-o", "p"]).output_path == "p"
    assert "--output-dir" not in subs["export"].format_help()
    assert "--output-path" not in subs["replay"].format_help()


@pytest.mark.parametrize("option", ["--rtol", "--atol"])
def test_tolerances_parse_alike_and_default_to_the_one_policy(option: str) -> None:
    parser = build_parser()
    for command in ("validate", "compare"):
        target = TOPK if command == "validate" else "DIR"
        dest = option.lstrip("-")
        default = parse_tolerances(getattr(parser.parse_args([command, target]), dest), None)
        assert (default.rtol, default.atol, default.given) == (DEFAULT_RTOL, DEFAULT_ATOL, False)
        given = parse_tolerances(getattr(parser.parse_args([command, target, option, "1e-5"]), dest), None)
        assert (given.rtol, given.given) == (1e-5, True)
        for bad in ("-1", "nan", "x", ":1"):
            with pytest.raises(SystemExit):
                parser.parse_args([command, target, option, bad])
    assert DEFAULT_RTOL == DEFAULT_ATOL == 0.0


def test_one_shape_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shape_text((1, 2, 8, 8)) == "[1,2,8,8]"
    assert shape_text(()) == "[]"
    assert shape_text(("batch", None, 4)) == "[batch,?,4]"
    assert main(["run", TOPK, "--inputs", str(MODELS / "topk_gather.npz")]) == 0
    run_out = capsys.readouterr().out
    assert main(["validate", TOPK, "--inputs", str(MODELS / "topk_gather.npz")]) == 0
    validate_out = capsys.readouterr().out
    # The model's outputs are [2,3,8] and [2,3] (features [2,10,8], top-3 along axis 1).
    for out in (run_out, validate_out):
        assert "[2,3,8]" in out and "[2,3]" in out
        assert "[2, 3" not in out


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", str(MODELS / "tiny_decoder_step.onnx"), "--descriptors"],
        ["inspect", str(MODELS / "gathernd_dynamic_batch.onnx")],
        ["validate", str(MODELS / "tiny_decoder_step.onnx")],
        ["run", str(MODELS / "gnn_scatter_reduce.onnx")],
    ],
)
def test_text_reports_print_shapes_one_way(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) in (0, 1)
    out = capsys.readouterr().out
    assert re.search(r"\[\w+,\w+", out), "no shape printed: the check below would be vacuous"
    assert not re.search(r"\[\w+, \w+", out), re.search(r".*\[\w+, \w+.*", out)


# ---------------------------------------------------------------------------------------------------------
# Forgiving


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["valdate", TOPK], "did you mean 'validate'"),
        (["inpsect", TOPK], "did you mean 'inspect'"),
        (["confromance"], "did you mean 'conformance'"),
        (["inspect", TOPK, "--jsn"], "did you mean '--json'"),
        (["validate", TOPK, "--feature-levl", "3_0"], "did you mean '--feature-level'"),
    ],
)
def test_misspellings_get_did_you_mean(
    argv: list[str], suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert suggestion in err
    assert "Traceback" not in err


def test_an_unknown_command_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err and "validate" in err and "did you mean" not in err


def test_validate_says_when_nothing_was_emulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _add_model(tmp_path / "add.onnx")
    assert main(["validate", str(model)]) == 0
    out = capsys.readouterr().out
    assert "nothing was emulated: the model has no gather/scatter node" in out
    # Gather/scatter only inside a Loop body: run by onnxruntime, so nothing emulated either.
    assert main(["validate", str(MODELS / "loop_scatternd.onnx")]) == 0
    assert "nothing was emulated: no node ran from its descriptor" in capsys.readouterr().out
    assert main(["validate", TOPK]) == 0
    assert "nothing was emulated" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------
# Progress


def test_progress_only_on_a_terminal_and_not_when_quiet() -> None:
    tty = _Tty()
    progress = Progress.for_args(argparse.Namespace(), tty)
    with progress.status("working"):
        assert tty.getvalue().endswith("working")
    assert tty.getvalue().endswith("\r\033[K")
    for stream, quiet in ((io.StringIO(), False), (_Tty(), True)):
        silent = Progress.for_args(argparse.Namespace(quiet=quiet), stream)
        silent.update("working")
        silent.clear()
        assert stream.getvalue() == ""


@pytest.mark.parametrize("quiet", [False, True])
def test_conformance_over_levels_shows_progress_on_a_terminal(
    quiet: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    argv = ["conformance", "--all-levels", "--json"] + (["--quiet"] if quiet else [])
    assert main(argv) == 0
    json.loads(capsys.readouterr().out)
    if quiet:
        assert tty.getvalue() == ""
    else:
        for level in ("5_0", "3_0", "2_1"):
            assert f"DML_FEATURE_LEVEL_{level} (" in tty.getvalue()
        assert tty.getvalue().endswith("\r\033[K")


def test_no_progress_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", TOPK, EMBEDDING]) == 0
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------------------
# validate MODEL1 MODEL2 ... / a folder


def test_validate_several_models_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add = _add_model(tmp_path / "add.onnx")
    assert main(["validate", TOPK, EMBEDDING, str(add)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dmlshim validate: 3 models at DML_FEATURE_LEVEL_5_0")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:5]}
    # topk_gather: 2 outputs, 1 GatherElements that runs from its descriptor.
    assert rows[TOPK][:5] == ["match", "generated", "2/2", "1", "1"]
    assert rows[str(add)][:5] == ["match", "generated", "1/1", "0", "0"]
    assert "summary: 3 match, 0 mismatch, 0 error, 0 crash of 3 models" in out


def test_validate_a_folder_as_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    _add_model(folder / "sub" / "add.onnx")
    (folder / "topk.onnx").write_bytes(Path(TOPK).read_bytes())
    (folder / "notes.txt").write_text("not a model")
    assert main(["validate", str(folder), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(d["model"]).name for d in lines[:-1]] == ["add.onnx", "topk.onnx"]
    assert all(d["status"] == "match" and d["report"]["match"] is True for d in lines[:-1])
    assert lines[-1]["summary"] == {"match": 2, "mismatch": 0, "error": 0, "crash": 0}
    assert lines[-1]["exit_code"] == 0


def test_a_bad_model_is_reported_and_the_others_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 not a model")
    assert main(["validate", TOPK, str(bad), EMBEDDING]) == 2
    out = capsys.readouterr().out
    assert "summary: 2 match, 0 mismatch, 1 error, 0 crash of 3 models" in out
    assert f"{bad}: error:" in out


def test_a_crash_in_one_model_is_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = validate_files.model_report

    def flaky(args: argparse.Namespace, model: str) -> object:
        if model == EMBEDDING:
            raise ZeroDivisionError("boom")
        return real(args, model)

    monkeypatch.setattr(validate_files, "model_report", flaky)
    assert main(["validate", TOPK, EMBEDDING]) == 2
    out = capsys.readouterr().out
    assert "internal error: ZeroDivisionError: boom" in out
    assert "summary: 1 match, 0 mismatch, 0 error, 1 crash of 2 models" in out


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="patches reach workers by fork")
def test_jobs_give_the_same_table_and_survive_a_dying_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    models = [str(p) for p in sorted(MODELS.glob("*.onnx"))[:4]]
    assert main(["validate", *models, "--json"]) == 0
    serial = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["validate", *models, "--json", "--jobs", "3"]) == 0
    parallel = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    strip = lambda docs: [{k: v for k, v in d.items() if k != "seconds"} for d in docs]  # noqa: E731
    assert strip(parallel) == strip(serial)

    real = validate_files.model_report

    def dies(args: argparse.Namespace, model: str) -> object:
        if model == models[1]:
            os._exit(3)  # the worker process dies, as on a segfault
        return real(args, model)

    monkeypatch.setattr(validate_files, "model_report", dies)
    # Workers are spawned (as on Windows) and would not see the patch: fork them here so they inherit it.
    monkeypatch.setattr(validate_many, "process_context", lambda: multiprocessing.get_context("fork"))
    assert main(["validate", *models, "--jobs", "2"]) == 2
    out = capsys.readouterr().out
    assert f"{models[1]}: crash: the worker process died" in out
    assert "summary: 3 match, 0 mismatch, 0 error, 1 crash of 4 models" in out


def test_single_model_options_are_refused_with_several(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", TOPK, EMBEDDING, "--inputs", str(MODELS / "topk_gather.npz")]) == 2
    assert "--inputs describes one model" in capsys.readouterr().err


def test_an_empty_folder_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path)]) == 2
    assert "holds no .onnx file" in capsys.readouterr().err


def test_outcomes_keep_the_order_given() -> None:
    args = build_parser().parse_args(["validate", EMBEDDING, TOPK])
    outcomes = validate_many.validate_models([EMBEDDING, TOPK], args)
    assert [o.model for o in outcomes] == [EMBEDDING, TOPK]
    assert [o.status for o in outcomes] == ["match", "match"]
    assert validate_many.exit_code(outcomes) == 0


# ---------------------------------------------------------------------------------------------------------
# A wrong file type is named as such


SEED_JSON = str(REPO / "tests" / "seeds" / "scatter_nd" / "model.json")
TOPK_NPZ = str(MODELS / "topk_gather.npz")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["replay", TOPK], "this is an ONNX model, not a DxDispatch JSON model file (dmlshim export"),
        (["replay", TOPK_NPZ], "this is an .npz archive of arrays (numpy.savez), not a DxDispatch JSON"),
        (["validate", SEED_JSON], "this is a JSON file, not an ONNX model (a DxDispatch model.json runs"),
        (["inspect", TOPK_NPZ], "this is an .npz archive of arrays (numpy.savez), not an ONNX model"),
        (["run", SEED_JSON], "this is a JSON file, not an ONNX model"),
        (["export", TOPK_NPZ, "-o", "unused"], "not an ONNX model (inputs go to --inputs)"),
        (["lower", SEED_JSON, "-o", "unused.onnx"], "this is a JSON file, not an ONNX model"),
        (["compare", TOPK], "this is an ONNX model, not a folder: compare takes the folder dmlshim export"),
    ],
)
def test_a_wrong_file_type_is_named(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "UTF-8" not in err and "Wire format" not in err and "Traceback" not in err


def test_the_right_file_types_still_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", SEED_JSON, "-o", str(tmp_path), "-l", "2_1"]) == 0
    assert main(["inspect", TOPK]) == 0
    capsys.readouterr()


def test_a_command_imports_only_its_own_module() -> None:
    """``dmlshim validate`` builds its parser without importing the other commands (their imports cost
    a real-size validate about a tenth of a second); help and unknown commands still see them all."""
    import subprocess
    import sys

    code = (
        "import sys; from dmlshim.cli.main import build_parser; "
        "p = build_parser(sys.argv[1:]); "
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('dmlshim.cli.') "
        "and m.endswith('_cmd')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider")}

    def loaded(*argv: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        return list(json.loads(out.stdout.replace("'", '"')))

    assert loaded("-q", "validate", TOPK) == ["validate_cmd"]
    assert loaded("replay", "m.json") == ["replay_cmd"]
    from dmlshim.cli.main import COMMANDS

    assert len(loaded("--help")) == len(loaded("valdate")) == len(COMMANDS)
    with pytest.raises(SystemExit):
        main(["valdate", TOPK])
