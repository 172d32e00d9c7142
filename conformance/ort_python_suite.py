"""onnxruntime's own Python API tests, run unmodified against onnxruntime and under each dmlshim binding.

The way cudf.pandas proves itself on pandas' suite: each test file of an onnxruntime source checkout's
``onnxruntime/test/python`` folder runs in its own pytest process, once on plain onnxruntime and once in
each binding form of docs/coming-from.md, and every test that passes on onnxruntime but not under a form is
reported. The files and their ``testdata`` are onnxruntime's and are never copied into this repository::

    python conformance/ort_python_suite.py /path/to/onnxruntime/onnxruntime/test/python
    python conformance/ort_python_suite.py DIR --forms ort,install --files onnxruntime_test_python.py \
        --json out.json

The exit status is 1 when any test is lost under a form, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field

CPU_FILES = (
    "onnxruntime_test_python.py",
    "onnxruntime_test_python_backend.py",
    "onnxruntime_test_python_backend_mlops.py",
    "onnxruntime_test_python_mlops.py",
    "onnxruntime_test_python_iobinding.py",
    "onnxruntime_test_python_global_threadpool.py",
    "onnxruntime_test_python_nested_control_flow_op.py",
    "onnxruntime_test_python_sparse_matmul.py",
    "onnxruntime_test_python_symlink_data.py",
    "onnxruntime_test_scatternd.py",
)
"""The ten files of onnxruntime/test/python that test the CPU Python API (no other provider, no training,
no compiled test library of their own)."""

EXCLUDED: dict[str, str] = {}
"""Tests left out by name (``file::Class::test``), each with its reason: tests of other providers or of
training, which test nothing on a CPU machine."""

_PREFIX = "import sys, pytest\n"
_FORMS: dict[str, list[str]] = {
    "ort": ["-m", "pytest"],
    "install": [
        "-c",
        _PREFIX + "import dmlshim\ndmlshim.install(summary='off')\nsys.exit(pytest.main(sys.argv[1:]))",
    ],
    "runner": ["-m", "dmlshim.ort", "--summary", "off", "-m", "pytest"],
    "classpatch": [
        "-c",
        _PREFIX + "import onnxruntime, dmlshim\nonnxruntime.InferenceSession = dmlshim.InferenceSession\n"
        "sys.exit(pytest.main(sys.argv[1:]))",
    ],
}
"""How each form starts pytest: plain onnxruntime, ``dmlshim.install()``, ``python -m dmlshim.ort -m
pytest`` (options after the module included) and the class patch."""


@dataclass(frozen=True)
class FileRun:
    """One test file run in one form: each test's outcome (passed, failed, skipped, error)."""

    file: str
    form: str
    outcomes: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0


def _outcomes(junit: str) -> dict[str, str]:
    if not os.path.exists(junit):
        return {}
    found: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if tag in kinds:
                outcome = {"failure": "failed"}.get(tag, tag)
                break
        found[name] = outcome
    return found


def run_file(python_dir: str, testdata: str, name: str, form: str, timeout: float) -> FileRun:
    """Run one file of ``python_dir`` in its own pytest process, in ``form``, from a fresh folder whose
    ``testdata`` is onnxruntime's (the tests read it relative to the working folder)."""
    with tempfile.TemporaryDirectory(prefix="ort_suite_") as work:
        os.symlink(os.path.abspath(testdata), os.path.join(work, "testdata"))
        junit = os.path.join(work, "junit.xml")
        args = [
            sys.executable,
            *_FORMS[form],
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "--rootdir",
            python_dir,
            os.path.join(os.path.abspath(python_dir), name),
        ]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            done = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = -1
        return FileRun(name, form, _outcomes(junit), code)


def lost(reference: FileRun, other: FileRun) -> list[str]:
    """Tests passing on onnxruntime and not in ``other``, excluded ones left out."""
    return sorted(
        t
        for t, outcome in reference.outcomes.items()
        if outcome == "passed"
        and other.outcomes.get(t) != "passed"
        and f"{reference.file}::{t}" not in EXCLUDED
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("python_dir", help="an onnxruntime checkout's onnxruntime/test/python folder")
    parser.add_argument("--testdata", help="onnxruntime's testdata folder (default: ../testdata beside it)")
    parser.add_argument("--files", default=",".join(CPU_FILES), help="comma-separated test files")
    parser.add_argument("--forms", default=",".join(_FORMS), help="comma-separated: " + ",".join(_FORMS))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per file and form")
    parser.add_argument("--json", help="write every outcome and every lost test to this file")
    args = parser.parse_args(argv)
    testdata = args.testdata or os.path.join(args.python_dir, "..", "testdata")
    forms = [f for f in args.forms.split(",") if f]
    if "ort" not in forms:
        forms.insert(0, "ort")
    report: dict[str, object] = {"excluded": EXCLUDED, "files": {}}
    any_lost = False
    print(f"{'file':48} " + " ".join(f"{f:>10}" for f in forms))
    for name in [f for f in args.files.split(",") if f]:
        runs = {form: run_file(args.python_dir, testdata, name, form, args.timeout) for form in forms}
        ref = runs["ort"]
        kept = [t for t, o in ref.outcomes.items() if o == "passed" and f"{name}::{t}" not in EXCLUDED]
        cells, entry = [], {}
        for form, run in runs.items():
            gone = lost(ref, run) if form != "ort" else []
            any_lost = any_lost or bool(gone)
            passed = sum(1 for t in kept if run.outcomes.get(t) == "passed")
            cells.append(f"{passed:>4} of {len(kept):<3}" if form == "ort" else f"{passed:>10}")
            entry[form] = {"exit": run.exit_code, "outcomes": run.outcomes, "lost": gone}
        report["files"][name] = entry  # type: ignore[index]
        print(f"{name:48} " + " ".join(cells), flush=True)
        for form in forms[1:]:
            for t in entry[form]["lost"]:  # type: ignore[index]
                print(f"    lost under {form}: {t} ({runs[form].outcomes.get(t, 'not run')})", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1, sort_keys=True)
    return 1 if any_lost else 0


if __name__ == "__main__":
    sys.exit(main())
