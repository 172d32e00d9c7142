"""A generator of small random graphs for the differential test of inspect's model of onnxruntime's level-1
optimizations (``tests/test_inspect_folding54.py``), and the oracle: onnxruntime CPU's own graph at
``ORT_ENABLE_BASIC``, subgraphs included.

The graphs hold ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chains, Cast and Identity nodes,
constants, duplicate subexpressions, gathers and scatters on initializers and on the input, and If nodes
(a constant condition or an input's) and Loops whose bodies gather from outer-scope initializers or from
the input's shape. Every node has a unique name, so a node is gone from onnxruntime's graph when its name
is. A value no node reads is a graph output.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

__all__ = ["ort_gone", "random_case"]

_GS = ("Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND")


class _Builder:
    def __init__(self, rng: np.random.Generator, prefix: str, constants: bool = False) -> None:
        self.rng, self.prefix = rng, prefix
        self.constants = constants  # some constants as Constant nodes (another draw of the generator)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.ints: list[tuple[str, int | None]] = []  # int64 1-D values and their lengths
        self.floats: list[str] = []  # float values shaped as x
        self.read: set[str] = set()
        self.count = 0

    def name(self, op: str) -> str:
        self.count += 1
        return f"{self.prefix}{op.lower()}{self.count}"

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        name = self.name(op)
        self.nodes.append(helper.make_node(op, inputs, [name + "_o"], name=name, **attrs))
        self.read.update(inputs)
        return name + "_o"

    def init(self, value: np.ndarray, shared: str | None = None) -> str:
        name = shared or self.name("c")
        if shared is None and self.constants and self.rng.random() < 0.4:
            tensor = numpy_helper.from_array(value)
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor, name=name + "_k"))
            return name
        if shared is None or all(t.name != shared for t in self.inits):
            self.inits.append(numpy_helper.from_array(value, name))
        return name


def _step(b: _Builder, outer: list[str], depth: int) -> None:
    """One random construct added to ``b`` (``outer``: the float values of enclosing graphs)."""
    rng = b.rng
    kinds = ["shape", "gather_dim", "concat", "reshape", "cast", "identity", "dup", "gather_init",
             "gather_input", "scatter_init", "scatternd_input", "add_int", "gatherel_init"]  # fmt: skip
    if depth == 0:
        kinds += ["if", "if", "loop"]
    kind = kinds[int(rng.integers(len(kinds)))]
    floats = b.floats + outer
    if kind == "shape" or not b.ints:
        b.ints.append((b.node("Shape", [floats[int(rng.integers(len(floats)))]]), 3))
    elif kind == "gather_dim":
        known = [(v, n) for v, n in b.ints if n]
        if not known:
            return
        src, n = known[int(rng.integers(len(known)))]
        pos = int(rng.integers(n))
        idx = b.init(np.array([pos], np.int64), f"idx{pos}" if rng.random() < 0.5 else None)
        b.ints.append((b.node("Gather", [src, idx], axis=0), 1))
    elif kind == "concat":
        picks = [b.ints[int(rng.integers(len(b.ints)))] for _ in range(int(rng.integers(1, 3)))]
        if rng.random() < 0.5:
            picks.append((b.init(np.array([int(rng.integers(1, 4))], np.int64)), 1))
        size = None if any(p[1] is None for p in picks) else sum(p[1] for p in picks)
        b.ints.append((b.node("Concat", [p[0] for p in picks], axis=0), size))
    elif kind == "reshape":
        src = floats[int(rng.integers(len(floats)))]
        shape = b.node("Shape", [src])
        dims = []
        for pos in range(3):
            if rng.random() < 0.6:
                g = b.node("Gather", [shape, b.init(np.array(pos, np.int64), f"s{pos}")], axis=0)
                dims.append(b.node("Unsqueeze", [g, b.init(np.array([0], np.int64), "ax0")]))
            else:
                dims.append(b.init(np.array([-1 if pos == 2 else 0], np.int64)))
        if sum(1 for d in dims if d.endswith("_o")) == 0:
            dims[0] = b.init(np.array([0], np.int64))
        b.floats.append(b.node("Reshape", [src, b.node("Concat", dims, axis=0)]))
    elif kind == "cast":
        src, n = b.ints[int(rng.integers(len(b.ints)))]
        b.ints.append((b.node("Cast", [b.node("Cast", [src], to=T.INT32)], to=T.INT64), n))
    elif kind == "identity":
        if rng.random() < 0.5:
            src, n = b.ints[int(rng.integers(len(b.ints)))]
            b.ints.append((b.node("Identity", [src]), n))
        else:
            b.floats.append(b.node("Identity", [floats[int(rng.integers(len(floats)))]]))
    elif kind == "dup" and b.nodes:
        node = b.nodes[int(rng.integers(len(b.nodes)))]
        if node.op_type in ("If", "Loop"):
            return
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = b.name(node.op_type)
        copy.output[0] = copy.name + "_o"
        b.nodes.append(copy)
        found = [n for v, n in b.ints if v == node.output[0]]
        if found:
            b.ints.append((copy.output[0], found[0]))
        elif node.output[0] in b.floats:
            b.floats.append(copy.output[0])
    elif kind in ("gather_init", "gatherel_init", "scatter_init"):
        data = b.init(np.arange(12, dtype=np.float32).reshape(4, 3), "data" if rng.random() < 0.5 else None)
        if kind == "gather_init":
            out = b.node("Gather", [data, b.init(np.array([3, 0], np.int64))], axis=0)
        elif kind == "gatherel_init":
            out = b.node("GatherElements", [data, b.init(np.array([[2, 1, 0]] * 4, np.int64))], axis=1)
        else:
            idx = b.init(np.array([[1, 0, 2]] * 4, np.int64))
            out = b.node("ScatterElements", [data, idx, b.init(np.ones((4, 3), np.float32))], axis=1)
        b.ints.append((b.node("Shape", [out]), 2))
    elif kind == "gather_input":
        src = floats[int(rng.integers(len(floats)))]
        b.floats.append(b.node("Gather", [src, b.init(np.array([[0]], np.int64))], axis=1))
    elif kind == "scatternd_input":
        src = floats[int(rng.integers(len(floats)))]
        idx = b.init(np.array([[0, 1]], np.int64))
        b.floats.append(b.node("ScatterND", [src, idx, b.init(np.ones((1, 4), np.float32))]))
    elif kind == "add_int":
        src, n = b.ints[int(rng.integers(len(b.ints)))]
        b.ints.append((b.node("Add", [src, b.init(np.array([1], np.int64), "one")]), n))
    elif kind == "if":
        _if(b, floats)
    elif kind == "loop":
        _loop(b, floats)


def _branch(b: _Builder, tag: str, floats: list[str]) -> onnx.GraphProto:
    sub = _Builder(b.rng, f"{b.name('If')}_{tag}_", b.constants)
    sub.inits = []
    for _ in range(int(b.rng.integers(1, 4))):
        _step(sub, floats, 1)
    # one int64 vector out: the last int value made, or a Shape of the input
    out = sub.ints[-1][0] if sub.ints else sub.node("Shape", [floats[0]])
    out = sub.node("Cast", [out], to=T.INT64)  # never an outer value as the branch's output
    b.read.update(n for n in sub.read if n not in {x.output[0] for x in sub.nodes})
    return helper.make_graph(
        sub.nodes, tag, [], [helper.make_tensor_value_info(out, T.INT64, None)], sub.inits
    )


def _if(b: _Builder, floats: list[str]) -> None:
    rng = b.rng  # the condition: a constant (drawn first) or the input ``flag``
    cond = b.init(np.array(bool(rng.random() < 0.5))) if rng.random() < 0.6 else "flag"
    then, other = _branch(b, "then", floats), _branch(b, "else", floats)
    b.ints.append((b.node("If", [cond], then_branch=then, else_branch=other), None))


def _loop(b: _Builder, floats: list[str]) -> None:
    sub = _Builder(b.rng, f"{b.name('Loop')}_body_", b.constants)
    for _ in range(int(b.rng.integers(1, 4))):
        _step(sub, floats, 1)
    last = sub.ints[-1][0] if sub.ints else sub.node("Shape", [floats[0]])
    scan = sub.node("Cast", [last], to=T.INT64)
    keep = sub.node("Identity", ["cond_in"])
    body = helper.make_graph(
        sub.nodes,
        "body",
        [
            helper.make_tensor_value_info("iter", T.INT64, []),
            helper.make_tensor_value_info("cond_in", T.BOOL, []),
        ],
        [helper.make_tensor_value_info(keep, T.BOOL, []), helper.make_tensor_value_info(scan, T.INT64, None)],
        sub.inits,
    )
    b.read.update(n for n in sub.read if n not in {x.output[0] for x in sub.nodes} and n != "cond_in")
    trips = b.init(np.array(2, np.int64))
    b.node("Loop", [trips, ""], body=body)


def random_case(seed: int, constants: bool = False) -> tuple[onnx.ModelProto, dict[str, int]]:
    """A random model and the free-dimension sizes of its case (``{}``: the model as given; else ``n``
    fixed, as ``inspect --input-shape n=SIZE`` and ``add_free_dimension_override_by_name`` do);
    ``constants``: some constants are Constant nodes."""
    rng = np.random.default_rng(seed)
    b = _Builder(rng, "", constants)
    b.floats.append("x")
    for _ in range(int(rng.integers(4, 11))):
        _step(b, [], 0)
    produced = [o for n in b.nodes if n.op_type != "Constant" for o in n.output]
    outputs = [o for o in produced if o not in b.read]
    x_dims: list[int | str] = ["n", 3, 4] if rng.random() < 0.7 else [2, 3, 4]
    graph = helper.make_graph(
        b.nodes,
        f"fuzz{seed}",
        [
            helper.make_tensor_value_info("x", T.FLOAT, x_dims),
            helper.make_tensor_value_info("flag", T.BOOL, []),
        ],
        [],
        b.inits,
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    typed = {
        v.name: v.type.tensor_type.elem_type
        for v in onnx.shape_inference.infer_shapes(model).graph.value_info
    }
    model.graph.output.extend(helper.make_tensor_value_info(o, typed.get(o, T.INT64), None) for o in outputs)
    sizes = {"n": 2} if x_dims[0] == "n" and rng.random() < 0.4 else {}
    return model, sizes


def _all_names(graph: onnx.GraphProto, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for node in graph.node:
        out.append((prefix + node.name, node.op_type))
        for a in node.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                out += _all_names(g, f"{prefix}{node.name}/{a.name}/")
    return out


def ort_gone(model: onnx.ModelProto, sizes: dict[str, int]) -> tuple[set[str], Counter[str]]:
    """The gather/scatter nodes (by path name) onnxruntime's ``ORT_ENABLE_BASIC`` graph no longer holds
    under their names, with the free dimensions ``sizes`` overridden, and the ops of the gather/scatter
    nodes it holds under new names (the branch of an If of constant condition, inlined)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(tmp) / "o.onnx")
        options.log_severity_level = 3
        for k, v in sizes.items():
            options.add_free_dimension_override_by_name(k, v)
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        saved = onnx.load(str(Path(tmp) / "o.onnx"))
    before = {n for n, op in _all_names(model.graph) if op in _GS}
    after = _all_names(saved.graph)
    names = {n for n, _ in after}
    renamed = Counter(op for n, op in after if op in _GS and n not in before)
    return before - names, renamed


def gather_scatter_names(model: onnx.ModelProto) -> set[str]:
    return {n for n, op in _all_names(model.graph) if op in _GS}


def _inlined(model: onnx.ModelProto) -> dict[str, str]:
    """The gather/scatter nodes (path name -> op) of the branch a top-level If of constant-initializer
    condition takes: onnxruntime inlines that branch, renaming its nodes."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == T.BOOL}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].t.data_type == T.BOOL:
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    out: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type != "If" or node.input[0] not in values:
            continue
        branch = "then_branch" if bool(values[node.input[0]].reshape(-1)[0]) else "else_branch"
        for a in node.attribute:
            if a.name == branch:
                out.update((n, op) for n, op in _all_names(a.g, f"{node.name}/{branch}/") if op in _GS)
    return out


def inspect_gone(model: onnx.ModelProto, sizes: dict[str, int]) -> set[str]:
    """The gather/scatter nodes ``inspect --input-shape`` (``sizes``) reports removed (reason
    ``EP_OPTIMIZED_AWAY``) or merged into a twin (top level), by path name."""
    from dmlshim.cli.options import apply_input_shapes
    from dmlshim.graph import display_names
    from dmlshim.model.prepare import prepare_model
    from dmlshim.translate.graph_infos import _GraphInfos
    from dmlshim.translate.model_translation import translate_model
    from dmlshim.translate.ort_folding import OPTIMIZED_AWAY_CODE, merged_twins
    from dmlshim.translate.shapes_info import infer_shapes

    m = onnx.ModelProto()
    m.CopyFrom(model)
    shapes = apply_input_shapes(m, sizes)
    t = translate_model(m, other_domains=True, optimized=True, input_shapes=shapes, overridden=bool(sizes))
    removed = {n.name for n in t.nodes if any(r.code == OPTIMIZED_AWAY_CODE for r in n.reasons)}
    ready = prepare_model(m)
    infos = _GraphInfos(infer_shapes(ready, shapes).graph, {})
    names = display_names(ready.graph.node)
    removed |= {names[i] for i in merged_twins(ready.graph, ready.ir_version, 17, infos.get)}
    removed |= _body_twins(ready.graph, "")
    return removed & gather_scatter_names(m)


def _body_twins(graph: onnx.GraphProto, prefix: str) -> set[str]:
    """The nodes of bodies inside ``graph`` common-subexpression elimination merges into a twin, as
    inspect models it (by path name)."""
    from dmlshim.translate.ort_folding import merged_twins

    out: set[str] = set()
    for node in graph.node:
        for a in node.attribute:
            if a.type != onnx.AttributeProto.GRAPH:
                continue
            body = f"{prefix}{node.name}/{a.name}/"
            twins = merged_twins(a.g, 8, 17, lambda _: None, top_level=False)
            out |= {body + a.g.node[i].name for i in twins}
            out |= _body_twins(a.g, body)
    return out


def mismatches(model: onnx.ModelProto, sizes: dict[str, int]) -> tuple[set[str], set[str], Counter[str]]:
    """(nodes inspect says gone that onnxruntime keeps, nodes onnxruntime removes that inspect places, the
    ops by which inlined branch nodes inspect keeps differ from those onnxruntime holds under new names)."""
    theirs, renamed = ort_gone(model, sizes)
    ours = inspect_gone(model, sizes)
    inlined = _inlined(model)
    kept = Counter(op for n, op in inlined.items() if n not in ours)
    diff = (kept - renamed) + (renamed - kept)
    return (ours - theirs) - set(inlined), (theirs - ours) - set(inlined), diff
