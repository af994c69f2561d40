"""GitHub Actions: error annotations on the spec's file and line, and the job summary."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.errors import PipelineError, SpecError


def job_summary(markdown: str) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def annotate(exc: PipelineError) -> None:
    """Workflow commands GitHub shows on the file and line of a spec error."""
    def escape(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    if isinstance(exc, SpecError):
        for issue in exc.issues:
            where = f"file={escape(issue.file)},line={issue.line},col={issue.column}"
            key = f"{issue.path}: " if issue.path else ""
            sys.stdout.write(f"::error {where}::{escape(key + issue.message)}\n")
    else:
        sys.stdout.write(f"::error::{escape(str(exc))}\n")
