"""The HTML report in a real browser: headless Chromium renders it offline, takes a
screenshot, and its DOM holds the gates table, both charts and every gate name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pipeline.record import RunRecord
from pipeline.report.html import render_html
from tests.support.htmldom import parse_html

pytestmark = pytest.mark.integration
CHROMIUM = Path("/usr/bin/chromium")
DATA = Path(__file__).resolve().parents[1] / "unit" / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load(kind: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / f"record_{kind}.json").read_text())
    return body


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install the Debian package `chromium`"
        if os.environ.get("CI"):  # .ci/run installs it: in CI a missing browser is a failure
            pytest.fail(message)
        pytest.skip(message)
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--window-size=1280,1600", *extra, page.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    path.write_text(render_html(RunRecord.from_json(load("triton")),
                                baseline=RunRecord.from_json(load("torchserve"))),
                    encoding="utf-8")
    return path


def test_chromium_renders_the_report_and_finds_every_part(page: Path, tmp_path: Path) -> None:
    dom = parse_html(chromium(page, tmp_path / "profile", "--dump-dom").stdout)
    for element_id in ("gates", "knee-chart", "batch-chart", "deltas"):
        assert dom.by_id(element_id) is not None, element_id
    gates = dom.by_id("gates")
    assert gates is not None
    shown = gates.text()
    for stage in load("triton")["stages"]:
        for gate in stage["gates"]:
            assert gate["name"] in shown
    knee = dom.by_id("knee-chart")
    assert knee is not None and len(knee.find_all("circle", cls="probe")) == 10


def test_chromium_takes_a_screenshot(page: Path, tmp_path: Path) -> None:
    screenshot = tmp_path / "report.png"
    chromium(page, tmp_path / "profile", f"--screenshot={screenshot}")
    body = screenshot.read_bytes()
    assert body.startswith(PNG_MAGIC)
    width, height = int.from_bytes(body[16:20], "big"), int.from_bytes(body[20:24], "big")
    assert (width, height) == (1280, 1600)
