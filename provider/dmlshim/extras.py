"""The pip command that adds one of dmlshim's optional extras (``html``, ``fast``, ``customop``), as it is
spelled for the way this dmlshim was installed.

``pip install 'dmlshim[html]'`` is right for a copy installed from a package index; from a checkout
(``pip install -e .``, ``pip install .``, or the source on ``PYTHONPATH``) it would fetch a different
dmlshim, so there the command names the checkout folder. pip records a local install in the
distribution's ``direct_url.json`` (PEP 610): ``{"url": "file:///path", "dir_info": {"editable": true}}``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

_PACKAGE_DIR = Path(__file__).resolve().parent


def install_command(extra: str) -> str:
    """The shell command that installs ``extra`` for this dmlshim, e.g. ``pip install -e '.[html]'``."""
    source = _local_source()
    if source is None:
        return f"pip install 'dmlshim[{extra}]'"
    folder, editable = source
    return f"pip install{' -e' if editable else ''} '{_shown(folder)}[{extra}]'"


@functools.cache
def _local_source() -> tuple[Path, bool] | None:
    """(checkout folder, editable) when dmlshim comes from a local folder; None when from an index."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("dmlshim")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None and _same_copy(dist):
        recorded = _direct_url(dist.read_text("direct_url.json"))
        if recorded is not None or not _in_checkout():
            return recorded
    # Not installed (PYTHONPATH), or the installed copy is not the one running: the checkout it runs from.
    root = _checkout_root()
    return (root, True) if root is not None else None


def _same_copy(dist: object) -> bool:
    """Whether the installed distribution is the dmlshim running now (not a second copy on sys.path)."""
    files = getattr(dist, "files", None) or []
    for f in files:
        if f.name == "__init__.py" and f.parent.name == "dmlshim":
            return Path(str(dist.locate_file(f))).resolve().parent == _PACKAGE_DIR  # type: ignore[attr-defined]
    return True  # an editable install lists no package files; its direct_url.json says where it is


def _direct_url(text: str | None) -> tuple[Path, bool] | None:
    """The local folder of a PEP 610 ``direct_url.json`` (None: not one, or not a folder)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "dir_info" not in doc:
        return None
    url = urlparse(str(doc.get("url", "")))
    if url.scheme != "file":
        return None
    path = unquote(url.path)
    if os.name == "nt" and path.startswith("/") and path[2:3] == ":":  # file:///C:/... on Windows
        path = path[1:]
    editable = bool(isinstance(doc["dir_info"], dict) and doc["dir_info"].get("editable"))
    return Path(path), editable


def _checkout_root() -> Path | None:
    """The source tree this package sits in (the folder with dmlshim's pyproject.toml), if any."""
    for folder in _PACKAGE_DIR.parents[:3]:
        project = folder / "pyproject.toml"
        try:
            if project.is_file() and 'name = "dmlshim"' in project.read_text(encoding="utf-8"):
                return folder
        except OSError:
            return None
    return None


def _in_checkout() -> bool:
    return _checkout_root() is not None and not any(p == "site-packages" for p in _PACKAGE_DIR.parts)


def _shown(folder: Path) -> str:
    """``.`` when the checkout is the current folder (the command as typed there), else its path."""
    try:
        return "." if folder.resolve() == Path.cwd().resolve() else str(folder)
    except OSError:
        return str(folder)
