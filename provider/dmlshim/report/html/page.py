"""The report page: one HTML file with its picture (inline SVG), styles, data and script inside it.

Nothing is fetched when it opens (a Content-Security-Policy forbids any request), so it works from
``file://`` offline. The script is this project's own: it zooms the picture and shows a node's details
when it is clicked.
"""

from __future__ import annotations

import collections
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...text import printable
from .graph_view import GraphView
from .layout import BOX_HEIGHT, BOX_WIDTH, Placed
from .marks import CATEGORIES, NodeMark

__all__ = ["PageText", "render_page"]

_LABEL_CHARS = 23


@dataclass(frozen=True)
class PageText:
    """The words around the picture.

    Attributes:
        title: the page title (``dmlshim inspect MODEL``).
        verdict: the verdict lines shown on top.
        passed: whether the verdict is the good one (colours the verdict box).
        report: the command's text report, shown folded under the picture.
    """

    title: str
    verdict: tuple[str, ...]
    passed: bool
    report: str


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _tail(text: str, limit: int = _LABEL_CHARS) -> str:
    """A long node path keeps its end, the node's own name."""
    return text if len(text) <= limit else "\u2026" + text[-(limit - 1) :]


def _esc(text: str) -> str:
    """Text for the page: HTML-escaped, control characters in a name (a line break, an escape sequence)
    shown escaped as in the text reports (:func:`dmlshim.text.printable`)."""
    return html.escape(printable(text), quote=True)


def _attr(text: str) -> str:
    """A name as an attribute value that reads back as the name itself (a ``#select=`` link finds it):
    control characters as character references, so none stands in the file."""
    return "".join(
        c if c.isprintable() or c == " " else f"&#x{ord(c):x};" for c in html.escape(text, quote=True)
    )


def _esc_lines(text: str) -> str:
    """:func:`_esc` for text of several lines, its line breaks kept."""
    return "\n".join(_esc(line) for line in text.split("\n"))


_STYLE = """
body{font:13px system-ui,sans-serif;margin:0;color:#222}
header{padding:8px 14px;border-bottom:1px solid #ccc}
h1{font-size:16px;margin:0 0 6px}
#verdict{white-space:pre-wrap;font:12px ui-monospace,monospace;padding:6px 8px;border-radius:4px}
#verdict.pass{background:#e8f5e9;border:1px solid #43a047}
#verdict.fail{background:#fff3e0;border:1px solid #fb8c00}
#legend span{display:inline-block;margin:6px 14px 0 0}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;
border:1px solid #555}
#bound{color:#555;margin-top:4px}
main{display:flex;height:calc(100vh - 150px);min-height:400px}
#graph{flex:1;overflow:auto;border-right:1px solid #ccc;background:#fafafa}
#side{width:460px;overflow:auto;padding:8px}
#tools{padding:4px 8px;position:sticky;top:0;background:#fafafa}
#details dl{display:grid;grid-template-columns:minmax(90px,38%) 1fr;gap:2px 8px;font-size:12px}
#details dt{font-weight:600;word-break:break-word}#details dd{margin:0;word-break:break-word}
table{border-collapse:collapse;font-size:12px;width:100%}
td,th{border-bottom:1px solid #eee;padding:2px 4px;text-align:left;vertical-align:top}
tr.gs{cursor:pointer}tr.gs:hover,tr.gs.selected{background:#fff9c4}
td.swatch{width:10px}
g.node{cursor:pointer}
g.node rect{stroke:#555;stroke-width:1}
g.node.plain rect{fill:#ffffff}
g.node.group rect{fill:#eceff1;stroke-dasharray:4 3}
g.node.alert rect{stroke:#b71c1c;stroke-width:4}
g.node.selected rect{stroke:#000;stroke-width:3}
g.node text{font:11px system-ui,sans-serif;pointer-events:none}
g.node text.op{font-weight:600}
g.gs text{fill:#fff}
path.edge{fill:none;stroke:#90a4ae;stroke-width:1.2;marker-end:url(#arrow)}
pre{font:11px ui-monospace,monospace;white-space:pre;overflow:auto;padding:8px;background:#f5f5f5}
"""

_SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var svg = document.getElementById('graph-svg');
  var pane = document.getElementById('graph');
  var width = +svg.getAttribute('width'), height = +svg.getAttribute('height');
  var scale = 1;
  function zoom(s) {
    scale = Math.min(4, Math.max(0.05, s));
    svg.setAttribute('width', width * scale);
    svg.setAttribute('height', height * scale);
  }
  document.getElementById('zoom-in').onclick = function () { zoom(scale * 1.25); };
  document.getElementById('zoom-out').onclick = function () { zoom(scale / 1.25); };
  document.getElementById('zoom-fit').onclick = function () {
    zoom(Math.min(pane.clientWidth / width, pane.clientHeight / height));
  };
  function show(key) {
    var info = data.nodes[key];
    var box = document.getElementById('details');
    box.textContent = '';
    if (!info) { return; }
    var h = document.createElement('h2');
    h.style.fontSize = '14px';
    h.textContent = info.name;
    box.appendChild(h);
    var dl = document.createElement('dl');
    for (var i = 0; i + 1 < info.rows.length; i += 2) {
      var dt = document.createElement('dt'); dt.textContent = data.strings[info.rows[i]];
      var dd = document.createElement('dd'); dd.textContent = data.strings[info.rows[i + 1]];
      dl.appendChild(dt); dl.appendChild(dd);
    }
    box.appendChild(dl);
  }
  function select(key, scroll) {
    document.querySelectorAll('.selected').forEach(function (e) { e.classList.remove('selected'); });
    var g = document.getElementById(key);
    if (g) {
      g.classList.add('selected');
      if (scroll) { g.scrollIntoView({block: 'center', inline: 'center'}); }
    }
    var row = document.querySelector('tr[data-key="' + key + '"]');
    if (row) { row.classList.add('selected'); }
    show(key);
  }
  svg.addEventListener('click', function (e) {
    var g = e.target.closest('g.node');
    if (g) { select(g.id, false); }
  });
  document.querySelectorAll('tr.gs').forEach(function (row) {
    row.addEventListener('click', function () { select(row.dataset.key, true); });
  });
  if (width > pane.clientWidth) { zoom(Math.max(0.5, pane.clientWidth / width)); }
  var first = svg.querySelector('g.gs');
  if (first) { first.scrollIntoView({block: 'center', inline: 'center'}); }
  var wanted = decodeURIComponent(location.hash.replace(/^#select=/, ''));
  if (wanted && location.hash.indexOf('#select=') === 0) {
    var row = document.querySelector('tr.gs[data-name="' + CSS.escape(wanted) + '"]');
    if (row) { select(row.dataset.key, true); }
  }
})();
"""


def _box(
    key: str,
    classes: str,
    lines: Sequence[str],
    tip: str,
    centre: tuple[float, float],
    fill: str,
    *,
    tail: bool = True,
) -> str:
    x, y = centre
    left, top = x - BOX_WIDTH / 2, y - BOX_HEIGHT / 2
    style = f' style="fill:{fill}"' if fill else ""
    texts = []
    for i, line in enumerate(lines[:2]):
        cls = ' class="op"' if i == 0 else ""
        shown = _tail(line) if i == 1 and tail else _short(line)
        texts.append(f'<text x="{left + 6:.1f}" y="{top + 16 + i * 15:.1f}"{cls}>{_esc(shown)}</text>')
    return (
        f'<g id="{key}" class="node {classes}"><title>{_esc(tip)}</title>'
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="4"{style}/>'
        + "".join(texts)
        + "</g>"
    )


def _svg(view: GraphView, placed: Placed, marks: Mapping[str, NodeMark]) -> str:
    parts = [
        f'<svg id="graph-svg" xmlns="http://www.w3.org/2000/svg" width="{placed.width:.0f}" '
        f'height="{placed.height:.0f}" viewBox="0 0 {placed.width:.0f} {placed.height:.0f}">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0L8,4L0,8z" fill="#90a4ae"/></marker></defs>',
    ]
    for route in placed.routes:
        d = "M" + "L".join(f"{x:.1f},{y:.1f}" for x, y in route)
        parts.append(f'<path class="edge" d="{d}"/>')
    for node, centre in zip(view.nodes, placed.centres, strict=True):
        mark = marks.get(node.name) if not node.members else None
        if mark is not None:
            classes = f"gs cat-{mark.category}" + (" alert" if mark.alert else "")
            lines = [f"{mark.op_type}: {mark.summary}" if mark.summary else mark.op_type, node.name]
            tip = f"{node.name}: {CATEGORIES[mark.category][0]}"
            parts.append(_box(node.key, classes, lines, tip, centre, CATEGORIES[mark.category][1]))
        elif node.members:
            ops = ", ".join(f"{op} {n}" for op, n in node.member_ops[:4])
            parts.append(
                _box(node.key, "group", [node.name, ops], f"{node.name}: {ops}", centre, "", tail=False)
            )
        else:
            parts.append(_box(node.key, "plain", [node.op_type, node.name], node.name, centre, ""))
    parts.append("</svg>")
    return "\n".join(parts)


class _Strings:
    """Every text of the details once: a node's rows are pairs of indices into one list (nodes renamed
    from one translation share their descriptor and reasons, so a model of many Gathers stays small)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.index)
        return found

    def rows(self, rows: Sequence[tuple[str, str]]) -> list[int]:
        return [self(part) for row in rows for part in row]


def _node_data(
    view: GraphView, marks: Mapping[str, NodeMark], strings: _Strings
) -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = {}
    drawn = {n.name: n.key for n in view.nodes if not n.members}
    for i, mark in enumerate(marks.values()):
        key = drawn.get(mark.name, f"m{i}")
        rows = [("where it runs", CATEGORIES[mark.category][0]), *mark.details]
        if mark.name not in drawn:
            rows.append(("picture", "not drawn: the model is large; it is inside one of the grey groups"))
        data[key] = {"name": mark.name, "rows": strings.rows(rows)}
    for node in view.nodes:
        if node.members:
            rows = [(op, str(n)) for op, n in node.member_ops]
            data[node.key] = {"name": f"{node.name} (not drawn one by one)", "rows": strings.rows(rows)}
        elif node.name not in marks:
            data[node.key] = {"name": node.name, "rows": strings.rows([("op", node.op_type)])}
    return data


def _table(view: GraphView, marks: Mapping[str, NodeMark]) -> str:
    drawn = {n.name: n.key for n in view.nodes if not n.members}
    rows = ['<table id="gs-nodes"><tr><th></th><th>node</th><th>op</th><th>operator / reason</th></tr>']
    for i, mark in enumerate(marks.values()):
        key = drawn.get(mark.name, f"m{i}")
        rows.append(
            f'<tr class="gs cat-{mark.category}" data-key="{key}" data-name="{_attr(mark.name)}">'
            f'<td class="swatch"></td><td>{_esc(mark.name)}</td><td>{_esc(mark.op_type)}</td>'
            f"<td>{_esc(mark.summary)}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


def _legend(marks: Mapping[str, NodeMark]) -> str:
    counts = collections.Counter(m.category for m in marks.values())
    spans = [
        f'<span><i style="background:{colour}"></i>{_esc(label)}: {counts.get(cat, 0)}</span>'
        for cat, (label, colour) in CATEGORIES.items()
    ]
    spans.append('<span><i style="background:#fff"></i>other nodes</span>')
    return '<div id="legend">' + "".join(spans) + "</div>"


def _bound_note(view: GraphView) -> str:
    constants = f" ({view.constants} Constant nodes not drawn)" if view.constants else ""
    if not view.bounded:
        return f"{view.total_nodes} nodes, all drawn" + (
            f" but {view.constants} Constant nodes." if view.constants else "."
        )
    text = (
        f"{view.total_nodes} nodes{constants}: drawn are the gather/scatter nodes and the nodes up to "
        f"{view.radius} edge(s) from them ({view.drawn_nodes}); the others are drawn as grey groups."
    )
    if view.undrawn:
        text += (
            f" {len(view.undrawn)} gather/scatter nodes past the first ones are in groups (listed on the "
            "right)."
        )
    return text


def _category_style() -> str:
    rules = [f"tr.cat-{cat} td.swatch{{background:{colour}}}" for cat, (_, colour) in CATEGORIES.items()]
    return "".join(rules)


def render_page(text: PageText, view: GraphView, placed: Placed, marks: Mapping[str, NodeMark]) -> str:
    """The whole page as one string."""
    strings = _Strings()
    nodes = _node_data(view, marks, strings)
    data = json.dumps(
        {"strings": list(strings.index), "nodes": nodes}, ensure_ascii=True, separators=(",", ":")
    )
    # No markup character inside the script element: it can never close early or read as a tag.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    verdict_class = "pass" if text.passed else "fail"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
            f"<title>{_esc(text.title)}</title><style>{_STYLE}{_category_style()}</style></head><body>",
            f"<header><h1>{_esc(text.title)}</h1>",
            f'<div id="verdict" class="{verdict_class}">{_esc_lines(chr(10).join(text.verdict))}</div>',
            _legend(marks),
            f'<div id="bound">{_esc(_bound_note(view))} Click a node for its details.</div></header>',
            '<main><div id="graph"><div id="tools"><button id="zoom-out">\u2212</button> '
            '<button id="zoom-in">+</button> <button id="zoom-fit">fit</button></div>',
            _svg(view, placed, marks),
            '</div><div id="side"><div id="details"><p>Click a node or a row for its descriptor, feature '
            "level and reasons.</p></div>",
            f'<h2 style="font-size:14px">Gather/scatter nodes ({len(marks)})</h2>',
            _table(view, marks),
            "</div></main>",
            f"<details><summary>Text report</summary><pre>{_esc_lines(text.report)}</pre></details>",
            f'<script type="application/json" id="report-data">{data}</script>',
            f"<script>{_SCRIPT}</script>",
            "</body></html>",
        ]
    )
