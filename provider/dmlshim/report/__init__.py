"""Reports rendered from dmlshim's result objects (text for people, JSON for tools)."""

from __future__ import annotations

from .inspect_json import render_json
from .inspect_report import next_command, render_text, verdict

__all__ = ["next_command", "render_json", "render_text", "verdict"]
