"""The command defers the cycle collector while it imports and turns it back on when its work starts; a
library import leaves the collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from dmlshim import startup


def _run(code: str) -> str:
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return done.stdout.strip()


def test_deferred_while_starting_and_back_when_the_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "started_as_command", lambda: True)
    assert gc.isenabled()
    try:
        startup.defer_collection_while_starting()
        assert not gc.isenabled()
        startup.interrupts_raise()
        assert gc.isenabled()
        startup.interrupts_raise()  # once only: a collector the command turns off itself stays off
        gc.disable()
        startup.interrupts_raise()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_library_import_leaves_the_collector_on() -> None:
    code = "import gc, dmlshim, dmlshim.cli.main; print(gc.isenabled())"
    assert _run(code) == "True"


def test_the_command_runs_with_the_collector_on() -> None:
    """As ``python -m dmlshim`` (``sys.orig_argv`` says so): importing the package defers the collector,
    and the command's start (``interrupts_raise``, before its work) turns it back on."""
    code = (
        "import runpy, sys, gc\n"
        "sys.orig_argv = [sys.executable, '-m', 'dmlshim']\n"
        "import dmlshim\n"
        "assert not gc.isenabled()\n"
        "from dmlshim.startup import interrupts_raise\n"
        "interrupts_raise()\n"
        "print(gc.isenabled())\n"
    )
    assert _run(code) == "True"
