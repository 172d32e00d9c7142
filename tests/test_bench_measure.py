"""bench's child measurement (``realistic._measure``) reads a child that writes much on stderr (onnxruntime's
warnings on a large model) without blocking: it read stdout to its end first, while the child waited on a
full stderr pipe, and both waited for good."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from bench import realistic


def test_a_child_writing_more_than_a_pipe_holds_on_stderr_is_measured(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        'import sys\nsys.stderr.write("w" * 400_000)\nprint(\'{"built": 1}\')\n', encoding="utf-8"
    )
    found: dict[str, object] = {}
    worker = threading.Thread(target=lambda: found.update(realistic._measure([sys.executable, str(child)])))
    worker.daemon = True
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the measurement blocked on the child's stderr"
    assert found["built"] == 1 and found["returncode"] == 0
