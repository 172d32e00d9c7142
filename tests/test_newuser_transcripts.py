"""The transcripts the docs show are what the commands print today.

tests/test_readme.py runs every ``$`` line of a ```console block and checks its exit code; this checks the
output shown under it: every line shown (``...`` stands for lines left out) is a line the command prints.
The output of a stale transcript (a column or line added since) is what a new user compares against first.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_readme import DOCS, README, REPO, Block, blocks

ELIDED = "..."


def _transcripts() -> list[tuple[Block, str, list[str]]]:
    """(block, command, lines shown under it) for each ``$`` line of a README or docs/ console block
    with output."""
    found: list[tuple[Block, str, list[str]]] = []
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        for block in blocks(path):
            if block.lang != "console":
                continue
            command: str | None = None
            shown: list[str] = []
            for line in [*block.body.splitlines(), "$ "]:
                if line.startswith("$ "):
                    if command and shown:
                        found.append((block, command, shown))
                    command, shown = line[2:].strip(), []
                elif line.strip() not in ("", ELIDED):
                    shown.append(line.rstrip())
    return found


def test_there_are_transcripts_to_check() -> None:
    assert len(_transcripts()) >= 2  # commands.md: inspect and validate


@pytest.mark.parametrize(("block", "command", "shown"), _transcripts(), ids=lambda v: getattr(v, "id", ""))
def test_transcript_matches_the_output(block: Block, command: str, shown: list[str], tmp_path: Path) -> None:
    argv = shlex.split(command)
    assert argv[0] == "dmlshim", command
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "dmlshim", *argv[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    printed = {line.rstrip() for line in done.stdout.splitlines()}
    missing = [line for line in shown if line not in printed]
    assert not missing, f"{block.id}: `{command}` no longer prints:\n" + "\n".join(missing)
