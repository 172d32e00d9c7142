"""The HTML report opened in a real browser: headless Chromium (Debian's ``chromium`` package) loads each
page from file:// with no network, runs its script, and its DOM lists and draws every gather/scatter node;
a screenshot shows the four colours. Skipped where Chromium is not installed
(``apt-get install chromium``); tests/test_html_report.py checks the same pages without a browser."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.extras import install_command
from tests.html_pages import COLOURS, Page, four_places_model, gather_scatter_names, read_png

pytest.importorskip("igraph", reason=f"the html extra (igraph) is not installed: {install_command('html')}")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium) to open the HTML report in"
)

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted(ROOT.glob("*.onnx"))
REAL = sorted((ROOT / "real").glob("*.onnx"))


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        command = [
            str(CHROMIUM),
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(2, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def _url(page: Path, select: str) -> str:
    return page.resolve().as_uri() + "#select=" + urllib.parse.quote(select, safe="")


def _open(page: Path, select: str) -> Page:
    """The DOM after the page's script ran, with ``select`` selected as a click on its row would."""
    done = _chromium("--dump-dom", _url(page, select))
    assert done.returncode == 0, done.stderr[-2000:]
    return Page(done.stdout)


def _details_text(dom: str) -> str:
    start = dom.index('id="details"')
    return dom[start : dom.index("</div>", start)]


@pytest.mark.parametrize(
    "model",
    [*MODELS, *(pytest.param(m, marks=pytest.mark.slow) for m in REAL)],
    ids=lambda p: p.stem,
)
def test_chromium_shows_every_gather_scatter_node(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    assert main(["inspect", str(model), "--html", str(out)]) in (0, 1)
    capsys.readouterr()
    expected = gather_scatter_names(model)
    chosen = expected[-1]
    done = _chromium("--dump-dom", _url(out, chosen))
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Page(done.stdout)
    assert sorted(dom.rows) == sorted(expected)
    assert sorted(dom.drawn()) == sorted(expected)
    # The script ran in the browser: the selected node is marked and its details are shown.
    assert dom.rows[chosen].endswith(" selected")
    assert "selected" in dom.boxes[dom.drawn()[chosen]]["class"].split()
    details = _details_text(done.stdout)
    assert "where it runs" in details and "target feature level" in details


def test_chromium_screenshot_shows_the_four_colours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = four_places_model(tmp_path / "four.onnx")
    out = tmp_path / "four.html"
    assert main(["inspect", str(model), "--html", str(out)]) == 1
    capsys.readouterr()
    png = tmp_path / "shot.png"
    done = _chromium("--window-size=1200,800", f"--screenshot={png}", _url(out, "on_dml"))
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    pixels = read_png(png)[..., :3]
    assert pixels.shape[:2] == (800, 1200)
    for category, rgb in COLOURS.items():
        count = int(np.all(pixels == np.array(rgb, dtype=np.uint8), axis=-1).sum())
        # A box is 168x40 pixels; the legend swatch and the table's swatch add a few more.
        assert count > 2000, f"{category} colour {rgb} covers {count} pixels"
    dom = _open(out, "on_dml")
    assert dom.rows["on_dml"] == "gs cat-dml selected"
