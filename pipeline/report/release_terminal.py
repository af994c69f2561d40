"""The release section for the terminal (`report`, and `approve` before it signs):
digests against the live release, git, approvals, moves and the config diff."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline.release.dossier import ReleaseDossier


def release_terminal(dossier: ReleaseDossier | str) -> RenderableType:
    if isinstance(dossier, str):
        return Text(f"release evidence could not be read: {dossier}", style="red")
    live = dossier.live
    table = Table(title=f"release {dossier.release_id} against "
                  + (f"live {live.release_id} in {dossier.environment}" if live
                     else f"nothing live in {dossier.environment}"), title_justify="left")
    for column in ("", "this release", "live"):
        table.add_column(column)
    release = dossier.release
    for label, mine, theirs in (
            ("model sha256", release.model_sha256, live.model_sha256 if live else None),
            ("artifact sha256", release.artifact_sha256,
             live.artifact_sha256 if live else None),
            ("config sha256", release.config_sha256, live.config_sha256 if live else None),
            ("image", release.image, live.image if live else None)):
        table.add_row(label, mine or "-", theirs or "-")
    git = dossier.git or {}
    parts: list[RenderableType] = [table, Text(
        f"attestation: {release.attestation}",
        style="" if release.attested else "bold red"), Text(
        f"git commit {git.get('commit') or 'not recorded'}"
        + (" (dirty)" if git.get("dirty") else " (clean)" if git.get("commit") else ""))]
    for approval in dossier.approvals:
        counts = "counts" if approval.counts else f"does not count: {approval.reason}"
        parts.append(Text(f"approved for {approval.environment} by {approval.by} at "
                          f"{approval.at} on {approval.identity} ({counts})"))
    for move in dossier.moves:
        action = "rolled back away from it" if move.withdrawn else move.action
        parts.append(Text(f"{move.at} {move.environment}: {action} by {move.by}"))
    if dossier.config_diff:
        diff = Text()
        for line in dossier.config_diff:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
            diff.append(line + "\n", style=style)
        parts.append(diff)
    return Group(*parts)
