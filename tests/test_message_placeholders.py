"""No message of the package carries an unformatted placeholder: a ``{NAME}`` in a plain string (not an
f-string, not a template given to ``.format``) where NAME is a variable or constant in scope is an
f-string whose ``f`` was forgotten (``validate --inputs notes.txt`` once printed a literal
``{_SAVE_HINT}``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "provider" / "dmlshim"
PLACEHOLDER = re.compile(
    r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_]\w*|\[[^\]]*\])*(?:![rsa])?(?::[^{}\s][^{}]*)?\}"
)


def _bound(body: ast.AST) -> set[str]:
    """Names bound directly in a module or function body (arguments, assignments, imports, defs)."""
    names: set[str] = set()
    if isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = body.args
        names |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def unformatted(source: str, filename: str) -> list[str]:
    """``file:line: placeholder`` for each suspicious plain string of ``source``."""
    tree = ast.parse(source, filename)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    module_names = {
        t.id
        for stmt in tree.body
        if isinstance(stmt, (ast.Assign, ast.AnnAssign))
        for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(t, ast.Name)
    } | {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        parent = parents.get(node)
        if isinstance(parent, (ast.JoinedStr, ast.Expr)):  # part of an f-string, or a docstring
            continue
        if isinstance(parent, ast.Attribute) and parent.attr in ("format", "format_map"):
            continue
        scope_names = set(module_names)
        up = parent
        while up is not None:
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                scope_names |= _bound(up)
            up = parents.get(up)
        for match in PLACEHOLDER.finditer(node.value):
            name = match.group(1)
            if name in scope_names or name.isupper() or name.startswith("_"):
                found.append(f"{filename}:{node.lineno}: {match.group(0)}")
    return found


def test_the_scan_finds_a_forgotten_f() -> None:
    source = (
        "_HINT = 'x'\n"
        "def f(path):\n"
        "    a = 'no {_HINT} here'\n"
        "    b = 'bad {path}'\n"
        "    c = f'good {path}'\n"
        "    d = 'template {role}'.format(role=1)\n"
        "    e = 'json {name: array}'\n"
    )
    assert unformatted(source, "m.py") == ["m.py:3: {_HINT}", "m.py:4: {path}"]


def test_no_message_has_an_unformatted_placeholder() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        problems += unformatted(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    assert not problems, "plain strings with {placeholders} (a missing f?):\n" + "\n".join(problems)


def test_text_inputs_file_message_is_formatted(tmp_path: Path) -> None:
    import onnx

    from tests.fuzz_settings import assert_cli_error, run_cli
    from tests.test_initializer_overrides import override_model

    onnx.save(override_model(), str(tmp_path / "m.onnx"))
    (tmp_path / "notes.txt").write_text("just some notes\n")
    result = run_cli("validate", tmp_path / "m.onnx", "--inputs", tmp_path / "notes.txt")
    assert_cli_error(result.code, result.err, "text, not an .npz archive", "numpy.savez(path, NAME=array")
    assert "{_SAVE_HINT}" not in result.err
