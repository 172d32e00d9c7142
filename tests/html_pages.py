"""Helpers of the HTML report tests: the gather/scatter nodes of a model read with onnx alone, a parser of
the page's elements, a four-category model, and a PNG reader (the browser test's screenshot)."""

from __future__ import annotations

import html.parser
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

from tests.oracle import IR_VERSION

SIX_OPS = {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}

# The fills the page promises for each place a node runs (docs/inspect.md, "The HTML report").
COLOURS = {
    "dml": (0x43, 0xA0, 0x47),
    "fallback": (0xFB, 0x8C, 0x00),
    "shape": (0x1E, 0x88, 0xE5),
    "error": (0xE5, 0x39, 0x35),
}


def gather_scatter_names(model_path: str | Path) -> list[str]:
    """Every gather/scatter node, by the name onnxruntime's profiler gives it (``<op>_<index>`` when
    unnamed), with its subgraph path (``owner/attribute/``) inside control flow; read with onnx only."""
    model = onnx.load(str(model_path), load_external_data=False)
    names: list[str] = []

    def walk(graph: onnx.GraphProto, prefix: str) -> None:
        for index, node in enumerate(graph.node):
            name = prefix + (node.name or f"{node.op_type}_{index}")
            if node.op_type in SIX_OPS:
                names.append(name)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub, f"{name}/{attr.name}/")

    walk(model.graph, "")
    return names


class Page(html.parser.HTMLParser):
    """The parts of a report page the tests read."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}  # table row: node name -> class
        self.boxes: dict[str, dict[str, str]] = {}  # svg g.node by id: attributes
        self.titles: dict[str, str] = {}  # svg g id -> its <title>
        self.fills: dict[str, str] = {}  # svg g id -> its rect's style
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.data: dict[str, Any] = {}
        self.verdict = ""
        self._g: str | None = None
        self._in: str | None = None
        self._buffer = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "tr" and "gs" in a.get("class", "").split():
            self.rows[a["data-name"]] = a["class"]
        elif tag == "g" and "node" in a.get("class", "").split():
            self.boxes[a["id"]] = a
            self._g = a["id"]
        elif tag == "rect" and self._g is not None:
            self.fills[self._g] = a.get("style", "")
        elif tag == "title" and self._g is not None:
            self._in, self._buffer = "title", ""
        elif tag == "script" and a.get("id") == "report-data":
            self._in, self._buffer = "data", ""
        elif tag == "div" and a.get("id") == "verdict":
            self._in, self._buffer = "verdict", ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._g = None
        if self._in == "title" and tag == "title" and self._g is not None:
            self.titles[self._g] = self._buffer
            self._in = None
        elif self._in == "data" and tag == "script":
            self.data = json.loads(self._buffer)
            self._in = None
        elif self._in == "verdict" and tag == "div":
            self.verdict = self._buffer
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._buffer += data

    def drawn(self) -> dict[str, str]:
        """Gather/scatter boxes: node name -> box id."""
        out = {}
        for key, attrs in self.boxes.items():
            if "gs" in attrs["class"].split():
                out[self.data["nodes"][key]["name"]] = key
        return out

    def rows_of(self, name: str) -> dict[str, str]:
        """The details of a node (label -> text), as shown when it is selected."""
        strings = self.data["strings"]
        for info in self.data["nodes"].values():
            if info["name"] == name:
                rows = [strings[i] for i in info["rows"]]
                return dict(zip(rows[::2], rows[1::2], strict=True))
        raise KeyError(name)


def three_places_model(path: Path) -> Path:
    """The runnable part of :func:`four_places_model`: a Gather on DirectML, a Gather of a Shape (CPU, with
    onnxruntime's shape computations) and a ScatterElements with reduction "add" (CPU fallback)."""
    return four_places_model(path, runnable=True)


def four_places_model(path: Path, *, runnable: bool = False) -> Path:
    """One gather/scatter node for each place a node can run: a Gather of a float input (DirectML), a
    Gather of a Shape (onnxruntime's DirectML provider runs it on the CPU with the shape computations),
    a ScatterElements with reduction "add" (DirectML has no scatter reduction: CPU fallback) and a Gather
    of a Reshape to a shape of unknown length (rank unknown: not translated). ``x``'s first dimension is
    symbolic: of a static ``x``, onnxruntime's constant folding would remove the Shape and its Gather
    before placing nodes (docs/inspect.md)."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g"], axis=1, name="on_dml"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0, name="shape_gather"),
        helper.make_node(
            "ScatterElements", ["x", "si", "su"], ["sc"], axis=0, reduction="add", name="scatter_add"
        ),
    ]
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3])]
    outputs = [
        helper.make_tensor_value_info("g", T.FLOAT, ["n", 2]),
        helper.make_tensor_value_info("d0", T.INT64, []),
        helper.make_tensor_value_info("sc", T.FLOAT, ["n", 3]),
    ]
    if not runnable:
        nodes += [
            helper.make_node("Reshape", ["x", "new_shape"], ["r"], name="reshape"),
            helper.make_node("Gather", ["r", "zero"], ["u"], axis=0, name="unknown_rank"),
        ]
        inputs.append(helper.make_tensor_value_info("new_shape", T.INT64, ["n"]))
        outputs.append(helper.make_tensor_value_info("u", T.FLOAT, None))
    graph = helper.make_graph(
        nodes,
        "four",
        inputs,
        outputs,
        initializer=[
            helper.make_tensor("i", T.INT64, [2], [2, 0]),
            helper.make_tensor("zero", T.INT64, [], [0]),
            helper.make_tensor("si", T.INT64, [1, 3], [1, 0, 1]),  # rows of any n >= 2
            helper.make_tensor("su", T.FLOAT, [1, 3], [1.0, 2.0, 3.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=IR_VERSION)
    onnx.save(model, path)
    return path


def read_png(path: Path) -> np.ndarray:
    """An 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's screenshots are) as (H, W, channels)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), dtype=np.uint8)
    stride = width * bpp
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 1:  # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(width, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:
            cur = (line + previous) % 256
        else:
            cur = np.zeros(stride, dtype=np.int32)
            up = previous.tolist()
            vals = line.tolist()
            res = cur.tolist()
            for x in range(stride):
                left = res[x - bpp] if x >= bpp else 0
                if kind == 3:
                    res[x] = (vals[x] + (left + up[x]) // 2) & 255
                else:
                    ul = up[x - bpp] if x >= bpp else 0
                    p = left + up[x] - ul
                    pa, pb, pc = abs(p - left), abs(p - up[x]), abs(p - ul)
                    pred = left if pa <= pb and pa <= pc else (up[x] if pb <= pc else ul)
                    res[x] = (vals[x] + pred) & 255
            cur = np.array(res, dtype=np.int32)
        out[y] = cur
        previous = cur
    return out.reshape(height, width, bpp)
