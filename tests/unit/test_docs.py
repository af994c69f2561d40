"""The documentation site builds with MkDocs with warnings as errors (a broken link between
pages, a page left out of `nav`, an anchor that is not there), and every link from the README
into `docs/` points at a page that exists. Built in this process: no server, no network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

REPO = Path(__file__).resolve().parents[2]
README_LINK = re.compile(r"\]\((docs/[^)#\s]*)(?:#[^)\s]*)?\)")


def build_site(project: Path, site: Path) -> None:
    config = load_config(str(project / "mkdocs.yml"), site_dir=str(site), strict=True)
    build(config)


def test_the_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    build_site(REPO, tmp_path / "site")
    assert (tmp_path / "site" / "gpu" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "setup.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    with pytest.raises(Abort):
        build_site(tmp_path, tmp_path / "site")


def test_the_readme_links_into_docs_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = README_LINK.findall(readme)
    assert len(targets) >= 10, "the README links to the documentation"
    missing = [target for target in targets if not (REPO / target).is_file()]
    assert missing == []


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 400, f"README.md has {lines} lines: move the detail into docs/"
