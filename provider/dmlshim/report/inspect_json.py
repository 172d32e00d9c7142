"""The JSON rendering of a model translation (``dmlshim inspect --json``), written as it is encoded."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..model.ort_errors import UnknownOperator
from ..translate.model_translation import ModelTranslation
from ..translate.plan import NodeTranslation, elem_type_name
from ..translate.translator import NOTE_MEANINGS
from .inspect_report import GraphValue, RunShapesLike

__all__ = ["render_json", "write_json"]


def render_json(
    mt: ModelTranslation,
    model_path: str | None = None,
    *,
    graph_inputs: Sequence[GraphValue] = (),
    graph_outputs: Sequence[GraphValue] = (),
) -> str:
    """The ``--json`` document as a string (see :func:`write_json`)."""
    out = io.StringIO()
    write_json(mt, out, model_path, graph_inputs=graph_inputs, graph_outputs=graph_outputs)
    return out.getvalue()


def write_json(
    mt: ModelTranslation,
    stream: TextIO,
    model_path: str | None = None,
    *,
    graph_inputs: Sequence[GraphValue] = (),
    graph_outputs: Sequence[GraphValue] = (),
    run: RunShapesLike | None = None,
    unknown_ops: Sequence[UnknownOperator] = (),
) -> None:
    """Write the ``--json`` document: schema_version 1 (extra keys: model, inputs, outputs, each node's
    plan; with ``run``, ``run`` and each node's ``shapes``, ``"run"`` or ``"static"``), one node record per
    line, written as it is made (a model of 100,000 nodes never holds its whole document in memory)."""
    encode = json.JSONEncoder(allow_nan=False).encode  # the C encoder: indent would select Python's
    head: dict[str, Any] = {"schema_version": 1}
    if model_path is not None:
        head["model"] = model_path
    if graph_inputs or graph_outputs:
        head["inputs"] = [_value_json(v) for v in graph_inputs]
        head["outputs"] = [_value_json(v) for v in graph_outputs]
    head["feature_level"] = mt.feature_level.dml_name
    # what a note means on every node, said once; each node's note keeps what it names (its value)
    meanings = {code: NOTE_MEANINGS[code] for code in mt.summary["notes"] if code in NOTE_MEANINGS}
    if meanings:
        head["notes"] = meanings
    if run is not None:
        head["run"] = run.to_json()
    if unknown_ops:  # nodes inspect cannot place: custom ops onnxruntime does not know
        head["unknown_operators"] = [
            {"node": u.node, "op_type": u.op_type, "domain": u.domain} for u in unknown_ops
        ]
    stream.write("{\n")
    for key, value in head.items():
        stream.write(f"  {encode(key)}: {encode(value)},\n")
    stream.write('  "nodes": [')
    records = _NodeRecords(encode)
    for i, node in enumerate(mt.nodes):
        if run is not None:
            record = dict(records.record(node), shapes="run" if node.name in run.nodes else "static")
            cases = mt.run_cases.get(node.name)
            if cases is not None:
                record["run_shapes"] = [c.to_json() for c in cases]
            elif node.name in run.not_run:
                record["shapes_note"] = run.not_run[node.name]
            line = encode(record)
        else:
            line = records.encoded(node)
        stream.write(("\n    " if i == 0 else ",\n    ") + line)
    stream.write("\n  ],\n" if mt.nodes else "],\n")
    stream.write(f'  "summary": {encode(mt.summary)}\n}}\n')


class _NodeRecords:
    """Node JSON records; nodes renamed from one translation (the same descriptor object and reasons)
    reuse its record with their own names, instead of rendering the descriptor again; and its encoded
    text, with only the names encoded for each node (:meth:`encoded`)."""

    def __init__(self, encode: Callable[[Any], str] | None = None) -> None:
        self._seen: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._encode = encode or json.JSONEncoder(allow_nan=False).encode
        self._texts: dict[tuple[Any, ...], tuple[list[str], list[int]] | None] = {}  # record text, cut

    @staticmethod
    def _key(n: NodeTranslation) -> tuple[Any, ...]:
        return (id(n.operator), id(n.reasons), n.status, n.ort_placement, len(n.inputs))

    def record(self, n: NodeTranslation) -> dict[str, Any]:
        if n.operator is None:
            return n.to_json()
        key = self._key(n)
        template = self._seen.get(key)
        if template is None:
            out = self._seen[key] = n.to_json()
            return out
        return self._renamed(template, n, [n.name, *(b.onnx_name for b in n.inputs)],
                             n.output.onnx_name if n.output is not None else "")  # fmt: skip

    def encoded(self, n: NodeTranslation) -> str:
        """``encode(self.record(n))``: for a node renamed from a translation already written, that
        record's text with this node's names put in (the same characters, in a few string joins)."""
        if n.operator is None or self._key(n) not in self._seen:
            return self._encode(self.record(n))
        key = self._key(n)
        text_key = (*key, n.output is None)
        if text_key not in self._texts:
            self._texts[text_key] = self._split(self._seen[key], n)
        split = self._texts[text_key]
        if split is None:
            return self._encode(self.record(n))
        parts, order = split
        names = [n.name, *(b.onnx_name for b in n.inputs)]
        names.append(n.output.onnx_name if n.output is not None else "")
        out = [parts[0]]
        for k, part in zip(order, parts[1:], strict=True):
            out.append(self._encode(names[k]))
            out.append(part)
        return "".join(out)

    def _split(self, template: dict[str, Any], n: NodeTranslation) -> tuple[list[str], list[int]] | None:
        """The template's text cut where the names go (parts, and which name fills each cut), or None when
        a name's place cannot be told apart (then each record is encoded whole)."""
        count = len(n.inputs) + 2
        markers = [f"\x00dmlshim-name-{k}\x00" for k in range(count)]
        text = self._encode(self._renamed(template, n, markers[:-1], markers[-1]))
        places = []
        for k, marker in enumerate(markers):
            spelled = self._encode(marker)
            found = text.count(spelled)
            if found > 1:
                return None
            if found == 1:
                places.append((text.index(spelled), len(spelled), k))
        parts, order, start = [], [], 0
        for at, length, k in sorted(places):
            parts.append(text[start:at])
            order.append(k)
            start = at + length
        parts.append(text[start:])
        return parts, order

    @staticmethod
    def _renamed(
        template: dict[str, Any], n: NodeTranslation, names: list[str], output: str
    ) -> dict[str, Any]:
        """The template record with the node's name (``names[0]``) and its bindings' tensor names."""
        out = dict(template, name=names[0])
        plan = template.get("plan")
        if plan is not None and n.output is not None:
            out["plan"] = dict(
                plan,
                inputs=[dict(j, onnx_name=name) for j, name in zip(plan["inputs"], names[1:], strict=True)],
                output=dict(plan["output"], onnx_name=output),
            )
        return out


def _value_json(v: GraphValue) -> dict[str, Any]:
    return {
        "name": v.name,
        "type": elem_type_name(v.elem_type) if v.elem_type else None,
        "shape": None if v.shape is None else [d if d != "" else None for d in v.shape],
    }
