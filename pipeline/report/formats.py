"""One entry point for every report format, each rendered from a run record."""

from __future__ import annotations

import io
import json
from typing import Any, Literal

from rich.console import Console

from pipeline.release.manifest import read_manifest
from pipeline.release.regression import live_release
from pipeline.release.store.base import Store
from pipeline.report.html import render_html
from pipeline.report.markdown import render_markdown
from pipeline.report.terminal import render_terminal

Format = Literal["terminal", "json", "html", "svg", "markdown"]


def baseline_for(store: Store, name: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """The release this run was compared with (the one live in its environment then)."""
    publish: dict[str, Any] = next(
        (s for s in record.get("stages", []) if s.get("name") == "publish"), {})
    comparison = publish.get("details", {}).get("comparison", {})
    baseline_id = comparison.get("baseline_release_id")
    if not baseline_id:
        return None
    try:
        manifest = read_manifest(store, name, baseline_id)
    except Exception:  # a report still renders without its comparison
        return None
    blob = next((b for b in manifest.get("blobs", []) if b.get("role") == "verification"), None)
    if blob is None:
        return None
    body: dict[str, Any] = json.loads(store.read_blob(blob["digest"]))
    body.setdefault("release_id", baseline_id)
    body.setdefault("server", {"kind": manifest.get("server", {}).get("kind")})
    return body


def render(record: dict[str, Any], fmt: Format, baseline: dict[str, Any] | None = None,
           width: int = 140) -> str:
    if fmt == "json":
        return json.dumps(record, indent=2) + "\n"
    if fmt == "html":
        return render_html(record, baseline)
    if fmt == "markdown":
        return render_markdown(record, baseline)
    console = Console(record=True, width=width, file=io.StringIO(), highlight=False)
    console.print(render_terminal(record))
    if fmt == "svg":
        return console.export_svg(title=f"serve-pipeline run {record.get('run_id')}")
    return console.export_text()


__all__ = ["Format", "baseline_for", "live_release", "render"]
