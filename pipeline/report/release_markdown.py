"""The release section in Markdown (job summaries): digests against live, git, approvals,
moves, and the config diff in a fenced block."""

from __future__ import annotations

from pipeline.release.dossier import ReleaseDossier


def _cell(text: str | None) -> str:
    return (text or "—").replace("|", "\\|").replace("\n", " ")


def release_markdown(dossier: ReleaseDossier | str) -> list[str]:
    if isinstance(dossier, str):
        return ["## What you approve", "", f"The release's evidence could not be read: "
                f"{_cell(dossier)}", ""]
    live = dossier.live
    lines = ["## What you approve", "",
             f"Release `{dossier.release_id}` against "
             + (f"live `{live.release_id}` in {dossier.environment}" if live
                else f"nothing live in {dossier.environment}") + ".", "",
             "| | this release | live |", "|---|---|---|"]
    release = dossier.release
    for label, mine, theirs in (
            ("model sha256", release.model_sha256, live.model_sha256 if live else None),
            ("config sha256", release.config_sha256, live.config_sha256 if live else None),
            ("image", release.image, live.image if live else None)):
        lines.append(f"| {label} | `{_cell(mine)}` | `{_cell(theirs)}` |")
    git = dossier.git or {}
    lines += ["", f"Git commit: `{_cell(git.get('commit'))}`"
              + (" (dirty)" if git.get("dirty") else " (clean)" if git else ""), ""]
    for approval in dossier.approvals:
        counts = "counts" if approval.counts else f"does not count: {approval.reason}"
        lines.append(f"- approved for {approval.environment} by {_cell(approval.by)} at "
                     f"{approval.at} on {_cell(approval.identity)} ({counts})")
    for move in dossier.moves:
        lines.append(f"- {move.at} {move.environment}: "
                     f"{'rolled back away from it' if move.withdrawn else move.action} "
                     f"by {_cell(move.by)}")
    if dossier.config_diff:
        lines += ["", "```diff", *dossier.config_diff, "```"]
    return [*lines, ""]
