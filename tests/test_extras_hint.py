"""The pip command an install hint names fits how this dmlshim was installed (findings of a new user's
walk: ``pip install 'dmlshim[html]'`` from a checkout fetches another dmlshim from the index)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmlshim import extras

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    extras._local_source.cache_clear()


def test_direct_url_of_an_editable_install() -> None:
    doc = json.dumps({"url": "file:///home/u/dmlshim", "dir_info": {"editable": True}})
    assert extras._direct_url(doc) == (Path("/home/u/dmlshim"), True)


def test_direct_url_of_a_plain_local_install() -> None:
    doc = json.dumps({"url": "file:///home/u/my%20dmlshim", "dir_info": {}})
    assert extras._direct_url(doc) == (Path("/home/u/my dmlshim"), False)


@pytest.mark.parametrize(
    "doc",
    [
        None,
        "",
        "not json",
        json.dumps({"url": "https://files.example/dmlshim-1.0.tar.gz", "archive_info": {}}),
        json.dumps({"url": "https://github.com/x/dmlshim", "vcs_info": {"vcs": "git"}}),
    ],
)
def test_direct_url_of_an_index_or_remote_install(doc: str | None) -> None:
    assert extras._direct_url(doc) is None


def test_an_index_install_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "_local_source", lambda: None)
    assert extras.install_command("html") == "pip install 'dmlshim[html]'"


def test_a_plain_install_from_a_folder_names_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(extras, "_local_source", lambda: (tmp_path, False))
    monkeypatch.chdir(tmp_path)
    assert extras.install_command("fast") == "pip install '.[fast]'"
    monkeypatch.chdir("/")
    assert extras.install_command("fast") == f"pip install '{tmp_path}[fast]'"


def test_this_checkout_gives_the_local_form_from_its_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # the test suite runs from a checkout: installed with -e, on PYTHONPATH, or installed from it (CI)
    monkeypatch.chdir(REPO)
    # the checkout's own source (pip install -e, or PYTHONPATH) is edited in place; a copy installed from
    # the checkout (CI's `pip install '.[test]'`) is reinstalled from it
    from_source = Path(extras.__file__).resolve().is_relative_to(REPO / "provider")
    editable = "-e " if from_source else ""
    assert extras.install_command("customop") == f"pip install {editable}'.[customop]'"


def test_pythonpath_only_gives_the_checkout(tmp_path: Path) -> None:
    # the source on PYTHONPATH with no dmlshim installed: the hint still names the checkout
    code = (
        "import importlib.metadata as m\n"
        "def nf(name):\n    raise m.PackageNotFoundError(name)\n"
        "m.distribution = nf\n"
        "from dmlshim.extras import install_command\nprint(install_command('html'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.strip() == f"pip install -e '{REPO}[html]'", done.stderr
