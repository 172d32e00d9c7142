"""The README and docs/ say what the code does: their commands run, their generated parts are current.

Every ```bash and ```python block and every ``$ `` line of a ```console block in README.md and docs/*.md is
run from the repository root, with ``dmlshim`` and ``python`` being this checkout, and must succeed (a
console transcript may exit 1, the documented verdict of inspect/validate, never 2). Examples write only
below ``mktemp -d``: TMPDIR points into pytest's temporary folder, and the repository's file listing must
be the same after them. ```sh blocks are the README's install/test commands (checked against
.ci/run) or carry a ``<!-- not run ...: why -->`` comment; ```powershell needs Windows; ```text is shown,
not run.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from dmlshim.translate import render_markdown

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
CI_RUN = REPO / ".ci" / "run"
README_LIMIT = 12_000  # "under 12 KB", read strictly

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*$")
_SKIP_DIRS = {".git", "__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv"}
_LANGS = {"bash", "sh", "python", "console", "text", "powershell", "json", ""}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    lang: str
    body: str
    preceding: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, bodies dedented by their fence's indent."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group("indent")), i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        found.append(Block(path, start + 1, m.group("lang"), "\n".join(body) + "\n", previous.strip()))
        i += 1
    return found


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def runnable() -> list[tuple[Block, str, str]]:
    """(block, language to run it in, source) for every command the documents hold."""
    out: list[tuple[Block, str, str]] = []
    for path in markdown_files():
        for block in blocks(path):
            if block.lang in ("bash", "python"):
                out.append((block, block.lang, block.body))
            elif block.lang == "console":
                commands = [ln[2:] for ln in block.body.splitlines() if ln.startswith("$ ")]
                out.extend((block, "console", cmd) for cmd in commands)
    return out


RUNNABLE = runnable()


def _listing() -> dict[str, tuple[int, int]]:
    """Every file under the repository (cache folders aside) with its size and mtime."""
    found = {}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            st = (Path(root) / name).lstat()
            found[str((Path(root) / name).relative_to(REPO))] = (st.st_size, st.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def doc_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH with ``dmlshim`` and ``python`` meaning this checkout and this interpreter."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, target in (("dmlshim", f'"{sys.executable}" -m dmlshim'), ("python", f'"{sys.executable}"')):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {target} "$@"\n', encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "provider"), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# ---------------------------------------------------------------------------------------------------------


def test_readme_is_under_12_kb() -> None:
    size = len(README.read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


def test_support_table_in_docs_is_current() -> None:
    text = (DOCS / "support.md").read_text(encoding="utf-8")
    start, end = "<!-- support-table:start -->", "<!-- support-table:end -->"
    embedded = text[text.index(start) + len(start) : text.index(end)].strip()
    assert embedded == render_markdown().strip(), "regenerate docs/support.md's table from SUPPORT_TABLE"


def test_readme_starts_with_what_ci_runs() -> None:
    """The README's first two blocks are .ci/run's install + main job and its test command, exactly."""
    ci = [ln.strip() for ln in CI_RUN.read_text(encoding="utf-8").splitlines()]
    install = ci.index("pip install '.[test]'")
    main_job = ci[install + 1]
    assert main_job.startswith("dmlshim validate onnx_models/")
    first, second = blocks(README)[:2]
    assert first.lang == second.lang == "sh"
    assert first.body.strip().endswith(f"pip install '.[test]' && {main_job}")
    test_command = "python -m pytest -n auto --dist loadfile"
    assert test_command in ci and second.body.strip().endswith(test_command)
    assert README.read_text(encoding="utf-8").index("```sh") < 400, "the two commands belong at the very top"


def test_every_block_has_a_known_language_and_sh_blocks_say_why_not_run() -> None:
    readme_install = blocks(README)[:2]
    for path in markdown_files():
        for block in blocks(path):
            assert block.lang in _LANGS, f"{block.id}: unknown fence language {block.lang!r}"
            if block.lang == "sh" and block not in readme_install:
                assert block.preceding.startswith("<!-- not run"), (
                    f"{block.id}: ```sh blocks are not run; use ```bash, or say why in <!-- not run: ... -->"
                )


def test_relative_links_resolve() -> None:
    link = re.compile(r"\]\(([^)\s]+)\)")
    for path in markdown_files():
        for target in link.findall(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.exists(), f"{path.relative_to(REPO)} links to missing {target}"


def test_documents_hold_commands() -> None:
    """The runner below finds the commands (a parser that found none would pass vacuously)."""
    langs = {lang for _, lang, _ in RUNNABLE}
    assert langs == {"bash", "python", "console"}
    assert len(RUNNABLE) >= 10


@dataclass(frozen=True)
class DocRun:
    """One documented command, run."""

    returncode: int
    stdout: str
    stderr: str


def _run_one(source: str, lang: str, env: dict[str, str], tmp: Path) -> DocRun:
    tmp.mkdir(parents=True)
    env = dict(env, TMPDIR=str(tmp))
    if lang == "python":
        script = tmp / "example.py"
        script.write_text(source, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-c", f"set -euo pipefail\n{source}"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return DocRun(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def doc_runs(
    doc_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[DocRun], list[str]]:
    """Every documented command run once, a few at a time (they are independent), and the files of the
    working tree that changed meanwhile (there must be none: examples write below ``mktemp -d``)."""
    root = tmp_path_factory.mktemp("docs")
    before = _listing()
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
        futures = [
            pool.submit(_run_one, source, lang, doc_env, root / str(i))
            for i, (_, lang, source) in enumerate(RUNNABLE)
        ]
        runs = [f.result() for f in futures]
    after = _listing()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return runs, changed


def test_documented_commands_leave_the_working_tree_alone(doc_runs: tuple[list[DocRun], list[str]]) -> None:
    _, changed = doc_runs
    assert not changed, f"documented commands changed files in the working tree (use mktemp -d): {changed}"


@pytest.mark.parametrize(
    ("index", "block", "lang", "source"),
    [(i, *r) for i, r in enumerate(RUNNABLE)],
    ids=[f"{b.id}:{lang}:{i}" for i, (b, lang, _) in enumerate(RUNNABLE)],
)
def test_documented_command_runs(
    index: int, block: Block, lang: str, source: str, doc_runs: tuple[list[DocRun], list[str]]
) -> None:
    proc = doc_runs[0][index]
    allowed = (0, 1) if lang == "console" else (0,)
    assert proc.returncode in allowed, (
        f"{block.id} exited {proc.returncode}\n{source}\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.stdout.strip() or lang != "console", f"{block.id}: no output"
    if lang == "console":
        # Every node the transcript names is in the real output (the transcript is not invented).
        shown = set(re.findall(r"\bnode_\w+", block.body))
        missing = {n for n in shown if n not in proc.stdout}
        assert not missing, f"{block.id}: transcript names nodes the command does not print: {missing}"


def test_conformance_summary_in_docs_is_the_committed_one() -> None:
    """docs/conformance.md's per-level totals are rows of conformance/RESULTS.md (regenerated by a script)."""
    results = (REPO / "conformance" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    rows = [ln for ln in (DOCS / "conformance.md").read_text(encoding="utf-8").splitlines()]
    rows = [ln for ln in rows if ln.startswith("| DML_FEATURE_LEVEL_")]
    assert len(rows) == 3
    assert all(row in results for row in rows), rows
