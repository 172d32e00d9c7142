"""The README's generated parts stay in step with the code they come from."""

from __future__ import annotations

from pathlib import Path

from dmlshim.translate import render_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_support_table_in_readme_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- support-table:start -->", "<!-- support-table:end -->"
    embedded = text[text.index(start) + len(start) : text.index(end)].strip()
    assert embedded == render_markdown().strip(), "regenerate the README support table from SUPPORT_TABLE"


def test_readme_starts_with_install_and_test_commands() -> None:
    blocks = README.read_text(encoding="utf-8").split("```")
    first, second = blocks[1], blocks[3]
    assert "pip install '.[test]'" in first and "onnx_models/" in first
    assert "python -m pytest" in second
