"""Hostile round 11 (issue 35 item 6): the DirectML host's wait settings given hostile values.

``DMLSHIM_DIRECTML_STALL`` and ``DMLSHIM_DIRECTML_TIMEOUT`` are seconds. A value that is not a finite
positive number (text, zero, negative, nan, inf) must be refused with a clear dmlshim error naming the
setting and the value (exit 2 in the CLI, never a bare traceback) before the host is started: a refusal
after node.exe was spawned left it running, and ``inf`` made a hung host's wait endless."""

from __future__ import annotations

import math
from typing import Any

import pytest

from dmlshim.directml import host as host_module
from dmlshim.directml import progress
from dmlshim.errors import DmlShimError

HOSTILE = ["-1", "0", "-0", "nan", "NaN", "inf", "-inf", "1e400", "soon", "10s", "0x10", "--5"]


@pytest.mark.parametrize("env", [progress.STALL_ENV, progress.TIMEOUT_ENV])
@pytest.mark.parametrize("raw", HOSTILE)
def test_a_hostile_wait_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, env: str, raw: str
) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(DmlShimError) as caught:
        progress.ProgressWait.for_request("the 'run' request", None, 0)
    message = str(caught.value)
    assert env in message and repr(raw) in message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("raw, seconds", [(" 30 ", 30.0), ("1e6", 1e6), ("0.5", 0.5), ("1e300", 1e300)])
def test_finite_positive_settings_are_taken_as_they_are(
    monkeypatch: pytest.MonkeyPatch, raw: str, seconds: float
) -> None:
    monkeypatch.setenv(progress.STALL_ENV, raw)
    monkeypatch.setenv(progress.TIMEOUT_ENV, raw)
    wait = progress.ProgressWait.for_request("x", None, 0)
    assert wait.stall == seconds and wait.ceiling == seconds and math.isfinite(wait.ceiling)
    wait.check()  # just started: neither window has passed


def test_a_hostile_setting_is_refused_before_the_host_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[Any] = []

    def popen(*args: Any, **kwargs: Any) -> None:
        spawned.append(args)
        raise AssertionError("the host was started with an unusable wait setting")

    monkeypatch.setattr(host_module.subprocess, "Popen", popen)
    monkeypatch.setenv(progress.STALL_ENV, "nan")

    class Stack:  # only what Host.__init__ reads before it starts node.exe
        node_modules = bin_dir = node_exe = wine = "/nonexistent"

        def run_env(self) -> dict[str, str]:
            return {"DISPLAY": ":0"}

    with pytest.raises(DmlShimError, match="DMLSHIM_DIRECTML_STALL='nan'"):
        host_module.Host(Stack())  # type: ignore[arg-type]
    assert spawned == []
