"""What a clone or a wheel carries: the license, the WebNN cases, the seeds' tables, complete results."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dmlshim
from dmlshim.conformance import webnn

from .conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_file_matches_the_metadata() -> None:
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


def test_webnn_cases_are_package_data() -> None:
    """The cases file sits inside the package, which the wheel ships whole, so wheels carry it."""
    # The installed package (a wheel install in CI, the source tree in an editable install).
    package_dir = Path(dmlshim.__file__).resolve().parent
    webnn.PACKAGED_CASES.resolve().relative_to(package_dir)
    assert PYPROJECT["build-system"]["build-backend"] == "hatchling.build"
    assert PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["provider/dmlshim"]
    assert webnn.PACKAGED_CASES.is_file()
    assert (package_dir / "py.typed").is_file()
    assert (package_dir / "ort" / "boot" / "sitecustomize.py").is_file()


def test_committed_results_include_every_part() -> None:
    text = (REPO / "conformance" / "RESULTS.md").read_text(encoding="utf-8")
    assert "Not run" not in text
    assert "| error | 74 | 0 | 4 |" in text and "| clamp | 78 | 0 | 0 |" in text


def test_generate_results_never_writes_a_part_not_run(tmp_path: Path) -> None:
    target = tmp_path / "RESULTS.md"
    target.write_text("the committed tables\n", encoding="utf-8")
    env = dict(os.environ, DMLSHIM_WEBNN_CASES=str(tmp_path / "missing.json"))
    env["PYTHONPATH"] = str(REPO / "provider")
    proc = subprocess.run(
        [sys.executable, str(REPO / "conformance" / "generate_results.py"), "-o", str(target)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "missing.json" in proc.stderr and "left as it is" in proc.stderr
    assert target.read_text(encoding="utf-8") == "the committed tables\n"


def test_a_clone_without_shared_runs_the_data_tests_unskipped(tmp_path: Path) -> None:
    """Copied where no ../shared exists, the tests that once read it run and pass, none skipped."""
    clone = tmp_path / "clone" / "dmlshim"
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info")
    for part in ("provider", "tests", "conformance"):
        shutil.copytree(REPO / part, clone / part, ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", clone / "pyproject.toml")
    assert not (clone.parent / "shared").exists()
    env = dict(os.environ, PYTHONPATH=str(clone / "provider"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("DMLSHIM_WEBNN_CASES", None)
    tests = [
        "tests/test_validate_support.py::test_table_matches_seed_pages",
        "tests/test_webnn_cases.py::test_run_all_default_mode",
        "tests/test_webnn_cases.py::test_run_all_clamp_mode",
        "tests/test_webnn_cases.py::test_shipped_copies_are_the_same_file",
        "tests/test_webnn_cases.py::test_default_path_is_the_shipped_copy",
        "tests/test_seeds.py",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "skipped" not in proc.stdout, proc.stdout[-3000:]
    assert " passed" in proc.stdout
