"""What ``dmlshim inspect --html`` costs: the page's size and the time it adds to inspect.

Usage::

    python bench/html_scale.py [--nodes 1000 10000 100000] [--every 250] [--real]

For each size the script writes a chain of that many nodes whose every ``--every``-th node is a Gather
(the rest Neg/Relu), plus a chain made only of Gathers (every node drawn up to the bound), then runs, each
in a fresh process, ``python -m dmlshim inspect MODEL`` and the same with ``--html``; it prints both wall
times, the difference (the report's cost), the page's size and peak RSS. ``--real`` adds the models of
onnx_models/real/ (the time of the page alone, in this process: layout, rendering and writing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.inspect_scale import measure

REPO = Path(__file__).resolve().parent.parent


def chain(count: int, every: int) -> onnx.ModelProto:
    """``count`` nodes in a chain over a [4, 4] float tensor; every ``every``-th is a Gather."""
    nodes, value = [], "x"
    for k in range(count):
        op = "Gather" if k % every == every - 1 else ("Relu" if k % 2 else "Neg")
        inputs = [value, "i"] if op == "Gather" else [value]
        nodes.append(helper.make_node(op, inputs, [f"v{k}"], **({"axis": 0} if op == "Gather" else {})))
        value = f"v{k}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [4, 4])],
        initializer=[helper.make_tensor("i", TensorProto.INT64, [4], [3, 2, 1, 0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def _row(label: str, model: Path, folder: Path) -> None:
    page = folder / (model.stem + ".html")
    base, _ = measure([sys.executable, "-m", "dmlshim", "inspect", str(model)])
    with_html, rss = measure(
        [sys.executable, "-m", "dmlshim", "inspect", str(model), "--html", str(page), "--overwrite"]
    )
    size = page.stat().st_size
    print(
        f"| {label} | {base:.2f} s | {with_html:.2f} s | {with_html - base:+.2f} s | {size / 1024:.0f} KB "
        f"| {rss:.0f} MB |"
    )


def real_models(folder: Path) -> None:
    from dmlshim.dml.enums import FeatureLevel
    from dmlshim.execute.weights.model_source import load_model
    from dmlshim.report.html.reports import write_inspect_report
    from dmlshim.translate.model_translation import translate_model

    print("\n| model | nodes | page | time of the page |\n| --- | --- | --- | --- |")
    for path in sorted((REPO / "onnx_models" / "real").glob("*.onnx")):
        model = load_model(str(path), weightless=True).proto
        translation = translate_model(model, FeatureLevel.FL_5_0, {}, other_domains=True)
        page = folder / (path.stem + ".html")
        start = time.perf_counter()
        write_inspect_report(page, model, translation, str(path), "", overwrite=True)
        elapsed = time.perf_counter() - start
        count = translation.summary["total_nodes"]
        print(f"| {path.stem} | {count} | {page.stat().st_size / 1024:.0f} KB | {elapsed:.2f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--real", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("| model | inspect | inspect --html | report's cost | page | peak RSS |")
        print("| --- | --- | --- | --- | --- | --- |")
        for count in args.nodes:
            for every, label in (
                (args.every, f"{count:,} nodes, a Gather every {args.every}"),
                (1, f"{count:,} Gathers"),
            ):
                path = folder / f"chain_{count}_{every}.onnx"
                onnx.save(chain(count, every), path)
                _row(label, path, folder)
        if args.real:
            real_models(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
