"""A comparison record as GitHub-flavoured markdown (for $GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.report.sidebyside.views import (
    failure_rows,
    kinds,
    summary_rows,
    translation_rows,
    verdict_line,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_sidebyside_markdown(record: Mapping[str, Any]) -> str:
    names = kinds(record)
    winner = record.get("winner")
    lines = [f"## {' vs '.join(names)} · {record.get('name')} · compare "
             f"{record.get('compare_id')}", "",
             f"**{'Winner: ' + winner if winner else 'No winner'}**: {verdict_line(record)}",
             ""]
    lines += _table(["", *names], [[label, *cells] for label, cells in summary_rows(record)])
    lines += ["", "### Failure path", ""]
    lines += _table(["probe", *names], [[p, *cells] for p, cells in failure_rows(record)])
    lines += ["", "### The server block, translated", ""]
    lines += _table(["spec key", "written", *names],
                    [[key, written, *cells] for key, written, cells in
                     translation_rows(record)])
    plan = record.get("plan", {})
    lines += ["", f"{plan.get('rounds')} interleaved rounds over load points "
              f"{plan.get('load_points')}, {plan.get('window_s')} s windows, one server "
              f"loaded at a time. {record.get('client', {}).get('differs')}.", ""]
    return "\n".join(lines)
