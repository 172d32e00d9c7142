"""Record what ``dmlshim inspect --json`` and ``dmlshim.translate.infer_shapes`` say about every model in
``onnx_models/``, and compare two records (issue 35: a change to shape inference must leave every
translation and verdict of the corpus as it was).

Usage::

    python bench/inspect_corpus.py record BEFORE.json      # on the code before the change
    python bench/inspect_corpus.py record BEFORE.json --provider ../main/provider   # (or another checkout)
    python bench/inspect_corpus.py record AFTER.json       # on the code after it
    python bench/inspect_corpus.py compare BEFORE.json AFTER.json   # exit 1 on any difference
    python bench/inspect_corpus.py record X.json --extra big1.onnx big2.onnx   # more models than the corpus

Each model is inspected in-process through ``dmlshim.cli.main.main``: ``inspect --json -q`` (exit code,
the JSON document and the first error line) and ``inspect`` (exit code, the whole text report and what
it writes to stderr, durations normalised to ``<time>``); its inferred types are recorded too: every value
of every graph (subgraphs included) with its element type and shape, from ``infer_shapes`` on the model
as ``inspect`` loads it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "provider"))


def _models(extra: list[Path] | None = None) -> list[Path]:
    return [*sorted((REPO / "onnx_models").rglob("*.onnx")), *(extra or [])]


def _run(argv: list[str]) -> tuple[int, str, str]:
    from dmlshim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


_SECONDS = re.compile(r"\b\d+(\.\d+)? ?(s|ms|us)\b")


def _inspect(path: Path) -> dict[str, Any]:
    code, out, err = _run(["inspect", "--json", "-q", str(path)])
    try:
        doc: Any = json.loads(out)
    except ValueError:
        doc = out
    lines = [line for line in err.splitlines() if line.strip()]
    text_code, text, text_err = _run(["inspect", str(path)])
    return {
        "code": code,
        "doc": doc,
        "error": lines[0] if lines else "",
        # the text report, whole (stdout and stderr), durations written as <time>
        "text": [text_code, _SECONDS.sub("<time>", text), _SECONDS.sub("<time>", text_err)],
    }


def _types(path: Path) -> dict[str, Any]:
    """value name -> [elem type, shape] for every typed value of every graph, after ``infer_shapes``."""
    import onnx

    from dmlshim.cli.inspect_cmd import _read as read_proto
    from dmlshim.errors import DmlShimError
    from dmlshim.translate import infer_shapes
    from dmlshim.translate.shapes_info import tensor_info

    try:
        inferred = infer_shapes(read_proto(str(path)))
    except DmlShimError as exc:
        return {"error": str(exc)}
    found: dict[str, Any] = {}

    def walk(graph: onnx.GraphProto, prefix: str) -> None:
        for value in (*graph.input, *graph.value_info, *graph.output):
            info = tensor_info(value)
            if info is None:
                kind = value.type.WhichOneof("value")
                found[prefix + value.name] = [kind, None]
            else:
                shape = None if info.shape is None else list(info.shape)
                found[prefix + value.name] = [info.elem_type, shape]
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g, f"{prefix}{node.name}/{attr.name}/")
                for i, sub in enumerate(attr.graphs):
                    walk(sub, f"{prefix}{node.name}/{attr.name}{i}/")

    walk(inferred.graph, "")
    return found


def record(target: Path, extra: list[Path] | None = None) -> None:
    rows: dict[str, Any] = {}
    for path in _models(extra):
        key = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        rows[key] = {"inspect": _inspect(path), "types": _types(path)}
        print(f"{key}: exit {rows[key]['inspect']['code']}", file=sys.stderr)
    target.write_text(json.dumps(rows, indent=1, sort_keys=True))


def _diff(a: Any, b: Any, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{where}/{key}: only in {'after' if key not in a else 'before'}")
            else:
                _diff(a[key], b[key], f"{where}/{key}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: {json.dumps(a)[:200]} -> {json.dumps(b)[:200]}")


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    problems: list[str] = []
    _diff(old, new, "", problems)
    for line in problems:
        print(line)
    print(f"{len(new)} models compared, {len(problems)} differences")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("target", type=Path)
    rec.add_argument("--provider", help="import dmlshim from this folder (another checkout's provider/)")
    rec.add_argument("--extra", nargs="*", type=Path, default=[], help="more models (e.g. the large chains)")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        if args.provider:
            sys.path.insert(0, args.provider)
        record(args.target, [p.resolve() for p in args.extra])
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
