"""The release section of the report from a local store, without a browser: against what
is live where the release goes (before the move) or what it replaced (after), approvals
judged against the overlays' keys, and untrusted text escaped by the serializer."""

from __future__ import annotations

from pathlib import Path

from pipeline.record import RunRecord
from pipeline.release.dossier import release_dossier
from pipeline.release.offline import approver_keys_by_environment
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.report.formats import render
from pipeline.servers.specs import load_spec
from tests.support.htmldom import parse_html
from tests.support.policy import (
    COMMIT,
    NAME,
    configured_release,
    policy_store,
    sign_approval,
)


def test_before_and_after_the_move(project: Path) -> None:
    store = policy_store(project)
    keys = approver_keys_by_environment(load_spec(project / "serve.yaml"))
    live = configured_release(store, b"model-1", 2000, 2, dirty=False)
    for environment in ("staging", "production"):
        move_pointer(store, NAME, environment, live, PointerAction.PROMOTE, "ci")
    candidate = configured_release(store, b"model-2", 4000, 2, dirty=False)
    move_pointer(store, NAME, "staging", candidate, PointerAction.PROMOTE, "ci")
    sign_approval(store, project, candidate, key="mallory")
    sign_approval(store, project, candidate, key="rita", by="rita <b>&</b>")

    before = release_dossier(store, NAME, candidate, "production", keys)
    assert before.live is not None and before.live.release_id == live
    assert [line for line in before.config_diff if line[:1] in "+-"][2:] == [
        "-  max_queue_delay_microseconds: 2000", "+  max_queue_delay_microseconds: 4000"]
    assert {(a.by, a.counts) for a in before.approvals} == {("mallory", False),
                                                           ("rita <b>&</b>", True)}
    assert [(m.environment, m.action) for m in before.moves] == [("staging", "promote")]

    move_pointer(store, NAME, "production", candidate, PointerAction.PROMOTE, "ci")
    after = release_dossier(store, NAME, candidate, None, keys)
    assert after.environment == "production"
    assert after.live is not None and after.live.release_id == live   # what it replaced

    page = render(RunRecord(run_id="r", release_id=candidate, status="passed"), "html",
                  release=after)
    assert "rita <b>&</b>" not in page and "rita &lt;b&gt;&amp;&lt;/b&gt;" in page
    dom = parse_html(page)
    git = dom.by_id("git")
    assert git is not None and git.text() == f"Git commit {COMMIT} (clean work tree)."
    markdown = render(RunRecord(release_id=candidate), "markdown", release=after)
    assert "+  max_queue_delay_microseconds: 4000" in markdown and COMMIT in markdown


def test_a_release_whose_evidence_cannot_be_read_says_so() -> None:
    page = render(RunRecord(release_id="x"), "html", release="no release x in file://s")
    section = parse_html(page).by_id("release")
    assert section is not None
    assert "could not be read: no release x in file://s" in section.text()


def test_an_approval_on_a_verified_identity_names_it(project: Path) -> None:
    from pipeline.release.manifest import manifest_digest
    from pipeline.release.pointers import read_pointer
    from pipeline.release.signing.approvals import write_approval
    from pipeline.release.signing.keys import FileSigner

    store = policy_store(project)
    release = configured_release(store, b"model-1", 2000, 2, dirty=True)
    write_approval(store, NAME, release, manifest_digest(store, NAME, release), "production",
                   read_pointer(store, NAME, "production")[0],
                   FileSigner.from_file(project / "keys" / "rita.pem"), "rita",
                   {"user": "rita@github-actions", "via": "github-actions", "verified": True,
                    "oidc": {"issuer": "https://token.actions.githubusercontent.com",
                             "actor": "rita"},
                    "verified_identities": ["github:rita"]})
    keys = approver_keys_by_environment(load_spec(project / "serve.yaml"))
    [approval] = release_dossier(store, NAME, release, None, keys).approvals
    assert (approval.identity, approval.key, approval.counts) == (
        "github:rita (verified)", "rita", True)
    dossier = release_dossier(store, NAME, release, None, keys)
    assert dossier.environment == "staging" and dossier.live is None
    page = parse_html(render(RunRecord(release_id=release), "html", release=dossier))
    git = page.by_id("git")
    assert git is not None and "(dirty: built with uncommitted changes)" in git.text()


def test_the_run_report_names_the_git_commit() -> None:
    record = RunRecord(run_id="r", git={"commit": COMMIT, "dirty": False})
    assert f"{COMMIT} (clean)" in render(record, "html")


def test_the_terminal_shows_the_diff_and_digests_an_approver_signs(project: Path) -> None:
    import io

    from rich.console import Console

    from pipeline.report.release_terminal import release_terminal

    store = policy_store(project)
    live = configured_release(store, b"model-1", 2000, 2, dirty=False)
    move_pointer(store, NAME, "production", live, PointerAction.PROMOTE, "ci")
    candidate = configured_release(store, b"model-2", 2000, 3, dirty=False)
    keys = approver_keys_by_environment(load_spec(project / "serve.yaml"))
    console = Console(file=io.StringIO(), width=200, highlight=False)
    console.print(release_terminal(release_dossier(store, NAME, candidate, "production", keys)))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"against live {live} in production" in shown
    assert "+instance_group [{ count: 3 kind: KIND_CPU }]" in shown
    assert f"git commit {COMMIT} (clean)" in shown
