"""With --json, every command that takes it prints a JSON error object on stdout when it fails (the
one-paragraph message stays on stderr), for dmlshim's own errors and for command-line usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmlshim.cli.main import build_parser
from tests.fuzz_settings import assert_cli_error, run_cli


def _json_commands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {
        name
        for name, p in sub.choices.items()  # type: ignore[union-attr]
        if any("--json" in a.option_strings for a in p._actions)
    }


FAILING = {
    "inspect": ["inspect", "{missing}"],
    "run": ["run", "{missing}"],
    "validate": ["validate", "{missing}"],
    "export": ["export", "{missing}", "-o", "{tmp}/out"],
    "compare": ["compare", "{tmp}/no_such_export"],
    "conformance": ["conformance", "--feature-level", "9_9"],
}


def test_every_json_command_is_covered() -> None:
    assert _json_commands() <= set(FAILING)


@pytest.mark.parametrize("command", sorted(FAILING))
def test_json_error_object_on_stdout(command: str, tmp_path: Path) -> None:
    argv = [a.format(missing=tmp_path / "missing.onnx", tmp=tmp_path) for a in FAILING[command]]
    r = run_cli(*argv, "--json")
    assert r.code == 2, r.err
    doc = json.loads(r.out)
    error = doc["error"]
    assert error["exit_code"] == 2 and error["message"]
    if command == "conformance":
        assert error["type"] == "UsageError" and "9_9" in error["message"]
        assert "9_9" in r.err
    else:
        assert doc["command"] == command
        assert error["type"].endswith("Error") and error["path"]
        assert_cli_error(r.code, r.err)
        assert error["message"] in r.err


def test_without_json_stdout_stays_empty(tmp_path: Path) -> None:
    r = run_cli("validate", tmp_path / "missing.onnx")
    assert r.code == 2 and r.out == ""
