"""The declared range is the tested range: CI's floor environment (.ci/floors.txt) installs exactly the
lower bounds pyproject.toml declares (issue 34)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]


def _floors(requirements: list[str]) -> dict[str, str]:
    found = {}
    for req in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", req.replace(" ", ""))
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


def _norm(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def test_ci_floor_environment_installs_exactly_the_declared_floors() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _floors(project["dependencies"]) | _floors(project["optional-dependencies"]["test"])
    pinned = {}
    for line in (REPO / ".ci" / "floors.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pinned[name.strip().lower()] = version.strip()
    assert set(pinned) == set(declared)
    for name, version in declared.items():
        assert _norm(pinned[name]) == _norm(version), (name, pinned[name], version)
