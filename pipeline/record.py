"""The run record: `.serve-pipeline/runs/<run_id>/record.json`, written after every stage."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pipeline.errors import UsageError

STATE_DIR = ".serve-pipeline"
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


def runs_dir(workspace: Path) -> Path:
    return workspace / STATE_DIR / "runs"


def write_record(path: Path, record: dict[str, Any]) -> None:
    temp = path.with_suffix(".json.tmp")
    temp.write_text(json.dumps(record, indent=2, default=str))
    os.replace(temp, path)


def load_run_record(workspace: Path, run_id: str) -> dict[str, Any]:
    if not RUN_ID.match(run_id):
        raise UsageError(f"not a run id: {run_id!r}")
    path = runs_dir(workspace) / run_id / "record.json"
    if not path.is_file():
        raise UsageError(f"no run {run_id} under {runs_dir(workspace)}")
    body: dict[str, Any] = json.loads(path.read_text())
    return body
