"""The report's release section: what a release manager signs. The served config and its
diff against the live release's, the digests side by side, the git commit, the approvals
with the identity each was given on, and the release's moves across environments."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pipeline.release.dossier import ReleaseDossier, ReleaseSide
from pipeline.report.elements import add_element, add_section, add_table


def release_section(parent: ET.Element, dossier: ReleaseDossier | str) -> None:
    """`dossier` is the gathered value, or why it could not be gathered (shown as such)."""
    section = add_section(parent, "What you approve", cls="wide")
    section.set("id", "release")
    if isinstance(dossier, str):
        add_element(section, "p", f"The release's evidence could not be read: {dossier}",
                    cls="failure")
        return
    live = dossier.live
    where = dossier.environment or "no environment"
    add_element(section, "p", f"Release {dossier.release_id} against "
                + (f"live release {live.release_id} in {where}" if live else
                   f"nothing live in {where} (a first promotion there)") + ".", cls="muted")
    _digests(section, dossier.release, live)
    _git(section, dossier)
    _config(section, dossier)
    _approvals(section, dossier)
    _moves(section, dossier)


def _short(value: str | None) -> str:
    return value if value else "—"


def _digests(section: ET.Element, release: ReleaseSide, live: ReleaseSide | None) -> None:
    body = add_table(section, [("", ""), ("this release", "mono"),
                               (f"live {live.release_id}" if live else "live", "mono"),
                               ("", "")], table_id="digests")
    rows = [("model sha256", release.model_sha256, live.model_sha256 if live else None),
            (f"config sha256 ({release.config_file or 'config'})", release.config_sha256,
             live.config_sha256 if live else None),
            ("image", release.image, live.image if live else None)]
    for label, mine, theirs in rows:
        row = add_element(body, "tr")
        add_element(row, "td", label, cls="label")
        add_element(row, "td", _short(mine), cls="mono")
        add_element(row, "td", _short(theirs) if live else "nothing live", cls="mono")
        verdict = "" if live is None or mine is theirs is None else \
            "same" if mine == theirs else "changed"
        add_element(row, "td", verdict, cls=verdict or None)


def _git(section: ET.Element, dossier: ReleaseDossier) -> None:
    git = dossier.git
    if not git or not git.get("commit"):
        text = ("Git commit: not recorded (the spec's folder had no git commit when it was "
                "built, or an older version built it).")
    else:
        state = ("dirty: built with uncommitted changes" if git.get("dirty")
                 else "clean work tree")
        text = f"Git commit {git['commit']} ({state})."
    add_element(section, "p", text, id="git")


def _config(section: ET.Element, dossier: ReleaseDossier) -> None:
    release = dossier.release
    add_element(section, "h3", f"Served config: {release.config_file or 'config'}")
    if release.config_text is None:
        add_element(section, "p", f"Not shown: {release.problem}", cls="failure")
    else:
        add_element(section, "pre", release.config_text, cls="config", id="config")
    if dossier.live is None:
        return
    add_element(section, "h3", f"Diff against live release {dossier.live.release_id}")
    if dossier.live.config_text is None:
        add_element(section, "p", f"Live config not readable: {dossier.live.problem}",
                    cls="failure")
        return
    diff = add_element(section, "pre", cls="diff", id="config-diff")
    if not dossier.config_diff:
        diff.text = "(identical)"
    for line in dossier.config_diff:
        kind = "add" if line.startswith("+") else "del" if line.startswith("-") else \
            "hunk" if line.startswith("@@") else "ctx"
        add_element(diff, "span", line + "\n", cls=kind)


def _approvals(section: ET.Element, dossier: ReleaseDossier) -> None:
    add_element(section, "h3", "Approvals")
    if not dossier.approvals:
        add_element(section, "p", "No approval of this release is stored.", cls="muted",
                    id="approvals")
        return
    body = add_table(section, [(h, "") for h in ("environment", "approved by", "at",
                                                 "identity", "key", "counts", "note")],
                     table_id="approvals")
    for approval in dossier.approvals:
        row = add_element(body, "tr", cls="pass" if approval.counts else "fail")
        for text in (approval.environment, approval.by, approval.at, approval.identity,
                     _short(approval.key),
                     "yes" if approval.counts else f"no: {approval.reason}", approval.note):
            add_element(row, "td", text)


def _moves(section: ET.Element, dossier: ReleaseDossier) -> None:
    add_element(section, "h3", "Promotion history of this release")
    if not dossier.moves:
        add_element(section, "p", "Never promoted.", cls="muted", id="promotions")
        return
    body = add_table(section, [(h, "") for h in ("at", "environment", "move", "by",
                                                 "previous", "approved by", "note")],
                     table_id="promotions")
    for move in dossier.moves:
        row = add_element(body, "tr", cls="fail" if move.withdrawn else "")
        action = "rolled back away from it" if move.withdrawn else move.action
        for text in (move.at, move.environment, action, move.by,
                     _short(move.previous_release_id), ", ".join(move.approved_by) or "—",
                     move.note):
            add_element(row, "td", text)
