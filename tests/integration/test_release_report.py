"""The report a release manager signs, in a real browser: a release promoted to staging,
approved with a signed approval and promoted to production through the CLI, then its HTML
report opened in headless Chromium. It shows the served config and its diff against the
release it replaced, the digests beside that release's, the git commit, the approver and
the release's moves. The releases are published without a run (as tests/support/policy.py
does): what is judged here is the report of the moves, not a measurement."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from tests.support.htmldom import Node, parse_html
from tests.support.policy import COMMIT, NAME, config_pbtxt, configured_release, policy_store

pytestmark = pytest.mark.integration
CHROMIUM = Path("/usr/bin/chromium")
def cli(project: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "ACTIONS_"))}
    done = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=project, text=True,
                          capture_output=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def dom_in_chromium(page: Path, profile: Path) -> Node:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install the Debian package `chromium`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                           "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return parse_html(done.stdout)


def part(dom: Node, element_id: str) -> str:
    found = dom.by_id(element_id)
    assert found is not None, element_id
    return found.text()


def test_the_production_report_shows_what_the_release_manager_signs(
        project: Path, tmp_path: Path) -> None:
    store = policy_store(project)
    live = configured_release(store, b"model-1", 2000, 2, dirty=False)
    for environment in ("staging", "production"):
        move_pointer(store, NAME, environment, live, PointerAction.PROMOTE, "ci")
    candidate = configured_release(store, b"model-2", 4000, 3, dirty=True)

    cli(project, "promote", "staging", "--release", candidate)
    cli(project, "approve", candidate, "--env", "production", "--key",
        str(project / "keys" / "rita.pem"), "--by", "rita", "--note", "CAB-7", "--yes")
    cli(project, "promote", "production", "--release", candidate)
    page = tmp_path / "report.html"
    page.write_text(cli(project, "report", candidate, "--format", "html"), encoding="utf-8")
    dom = dom_in_chromium(page, tmp_path / "profile")

    assert "max_queue_delay_microseconds: 4000" in part(dom, "config")
    diff = part(dom, "config-diff")
    assert "- max_queue_delay_microseconds: 2000" in diff
    assert "+ max_queue_delay_microseconds: 4000" in diff
    assert "+instance_group [{ count: 3 kind: KIND_CPU }]" in diff
    digests = part(dom, "digests")
    assert f"live {live}" in digests
    for model in (b"model-1", b"model-2"):
        assert sha256_bytes(model) in digests
    assert "changed" in digests
    assert f"Git commit {COMMIT} (dirty" in part(dom, "git")
    approvals = part(dom, "approvals")
    assert "production rita" in approvals and "(claimed, not verified)" in approvals
    assert "yes" in approvals and "CAB-7" in approvals
    moves = part(dom, "promotions")
    assert "staging promote" in moves and "production promote" in moves and "rita" in moves
    releases = cli(project, "releases")
    assert f"sha256:{sha256_bytes(b'model-2')[:12]}" in releases
    assert f"sha256:{sha256_bytes(config_pbtxt(4000, 3))[:12]}" in releases

