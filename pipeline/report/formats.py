"""One entry point for every report format, each rendered from a run record."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pipeline.record import RunRecord
    from pipeline.release.dossier import ReleaseDossier
    from pipeline.release.store.base import Store


Format = Literal["terminal", "json", "html", "svg", "markdown"]


def baseline_for(store: Store, name: str, record: RunRecord) -> RunRecord | None:
    """The release this run was compared with (the one live in its environment then)."""
    from pipeline.release.manifest import read_manifest, read_verification
    comparison = record.details("publish").get("comparison")
    baseline_id = comparison.get("baseline_release_id") if isinstance(comparison, dict) \
        else None
    if not baseline_id:
        return None
    try:
        return read_verification(store, read_manifest(store, name, baseline_id), baseline_id)
    except Exception:  # a report still renders without its comparison
        return None


def render(record: RunRecord, fmt: Format, baseline: RunRecord | None = None,
           width: int = 140, release: ReleaseDossier | str | None = None) -> str:
    """`release`: the release's evidence (pipeline.release.dossier), or why it could not be
    read; shown by the HTML and Markdown reports."""
    from rich.console import Console

    from pipeline.report.html import render_html
    from pipeline.report.markdown import render_markdown
    from pipeline.report.terminal import render_terminal
    if fmt == "json":
        return json.dumps(record.to_json(), indent=2) + "\n"
    if record.command == "tune" and isinstance(record.extra.get("tune"), dict):
        return _render_tune(record, fmt, width)
    if fmt == "html":
        return render_html(record, baseline, release=release)
    if fmt == "markdown":
        return render_markdown(record, baseline, release=release)
    console = Console(record=True, width=width, file=io.StringIO(), highlight=False,
                      markup=False)
    console.print(render_terminal(record))
    if fmt == "svg":
        return console.export_svg(title=f"serve-pipeline run {record.run_id}")
    return console.export_text()


def _render_tune(record: RunRecord, fmt: Format, width: int) -> str:
    """A tune run: its candidates table and chart (it ran no stages of its own)."""
    from rich.console import Console

    from pipeline.report.tune import render_tune_html, render_tune_table
    body = record.to_json()
    if fmt == "html":
        return render_tune_html(body)
    console = Console(record=True, width=width, file=io.StringIO(), highlight=False,
                      markup=False)
    console.print(render_tune_table(body))
    if fmt == "svg":
        return console.export_svg(title=f"serve-pipeline tune {record.run_id}")
    text = console.export_text()
    return f"```\n{text}```\n" if fmt == "markdown" else text


__all__ = ["Format", "baseline_for", "render"]
