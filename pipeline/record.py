"""The run record: `.serve-pipeline/runs/<run_id>/record.json`, written after every stage.

`RunRecord` is the record as one typed value: what the runner writes, what reports, the
regression gate and the CLI read. `to_json` writes the same keys, in the same order, as
the tool always has; `from_json` reads any record a version of the tool wrote (an aborted
run's, an older one with keys missing, a release's stored verification holding only
`run_id` and `stages`) and keeps the shape it was given, so a record read and written
again comes out as it went in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline import metric_names as m
from pipeline.errors import PipelineError, UsageError
from pipeline.outcomes.latency import LatencyOutcome
from pipeline.outcomes.saturation import SaturationOutcome
from pipeline.stage_result import Gate, StageResult, Status, finite

STATE_DIR = ".serve-pipeline"
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
RECORD_SCHEMA = 1


def runs_dir(workspace: Path) -> Path:
    return workspace / STATE_DIR / "runs"


@dataclass
class ServerInfo:
    """Which server ran, its log (relative to the run folder) and how it exited."""

    kind: str | None = None
    log: str | None = None
    exit: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": self.kind}
        body.update((key, value) for key, value in (("log", self.log), ("exit", self.exit))
                    if value is not None)
        return body

    @classmethod
    def from_json(cls, body: Any) -> ServerInfo:
        if not isinstance(body, Mapping):
            return cls()
        return cls(*(_text(body.get(key)) for key in ("kind", "log", "exit")))


@dataclass
class RunRecord:
    """One run: what was run, where, with which result per stage.

    Field order is the order of the keys in record.json. `extra` keeps keys this version
    does not know; `shape` the keys (in order) of the JSON it was read from, None for a
    record built by a run (then every key is written). `extra`, `shape` and
    `stages_sorted` are how it was stored, not part of the record."""

    schema: int = RECORD_SCHEMA
    run_id: str | None = None
    status: str | None = None       # a RunStatus from a run; as stored when read
    command: str | None = None
    name: str | None = None
    environment: str | None = None
    spec_file: str | None = None
    spec_files: list[str] = field(default_factory=list)
    spec_digest: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_s: float | None = None
    tool_version: str | None = None
    host: dict[str, Any] = field(default_factory=dict)
    server: ServerInfo = field(default_factory=ServerInfo)
    stages: list[StageResult] = field(default_factory=list)
    release_id: str | None = None
    promoted_to: str | None = None
    interrupted: bool = False
    teardown_s: float | None = None
    selected_stages: list[str] | None = None
    git: dict[str, Any] | None = None
    model: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    shape: tuple[str, ...] | None = None
    stages_sorted: bool = False     # stages read from a release's canonical (sorted) JSON

    # -- reading -------------------------------------------------------------------------

    def stage(self, name: str) -> StageResult | None:
        return next((stage for stage in self.stages if stage.name == name), None)

    def metrics(self, stage_name: str) -> dict[str, float]:
        """The stage's finite numeric metrics; empty when the stage is not in the record."""
        stage = self.stage(stage_name)
        return stage.finite_metrics() if stage is not None else {}

    def latency(self) -> LatencyOutcome:
        """The latency stage's metrics, typed (every field None without the stage)."""
        return LatencyOutcome.from_json(self.metrics(m.LATENCY_STAGE))

    def saturation(self) -> SaturationOutcome:
        """The saturation stage's metrics, typed (every field None without the stage)."""
        return SaturationOutcome.from_json(self.metrics(m.SATURATION_STAGE))

    def details(self, stage_name: str) -> dict[str, Any]:
        stage = self.stage(stage_name)
        return stage.details if stage is not None else {}

    def gates(self) -> list[tuple[str, Gate]]:
        """Every gate with the name of the stage that decided it, in record order."""
        return [(stage.name, gate) for stage in self.stages for gate in stage.gates]

    def gate(self, name: str) -> Gate | None:
        return next((gate for _, gate in self.gates() if gate.name == name), None)

    def first_failed_stage(self) -> StageResult | None:
        return next((stage for stage in self.stages if stage.status is Status.FAILED), None)

    # -- JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for item in fields(self):
            if item.name in _STORAGE:
                continue
            value = getattr(self, item.name)
            if item.name == "server":
                value = self.server.to_json()
            elif item.name == "stages":
                value = [_sorted(stage.to_json()) if self.stages_sorted else stage.to_json()
                         for stage in self.stages]
            body[item.name] = value
        body.update(self.extra)
        if self.shape is None:
            return body
        return {key: body[key] for key in self.shape if key in body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RunRecord:
        known = {item.name for item in fields(cls)} - _STORAGE
        stages = body.get("stages")
        schema = finite(body.get("schema"))
        files = body.get("spec_files")
        selected = body.get("selected_stages")
        return cls(
            schema=RECORD_SCHEMA if schema is None else int(schema),
            run_id=_text(body.get("run_id")), status=_text(body.get("status")),
            command=_text(body.get("command")), name=_text(body.get("name")),
            environment=_text(body.get("environment")), spec_file=_text(body.get("spec_file")),
            spec_files=[str(item) for item in files] if isinstance(files, list) else [],
            spec_digest=_text(body.get("spec_digest")), started_at=_text(body.get("started_at")),
            finished_at=_text(body.get("finished_at")), duration_s=finite(body.get("duration_s")),
            tool_version=_text(body.get("tool_version")), host=_mapping(body.get("host")) or {},
            server=ServerInfo.from_json(body.get("server")),
            stages=[StageResult.from_json(stage) for stage in stages
                    if isinstance(stage, Mapping)] if isinstance(stages, list) else [],
            release_id=_text(body.get("release_id")), promoted_to=_text(body.get("promoted_to")),
            interrupted=body.get("interrupted") is True, teardown_s=finite(body.get("teardown_s")),
            selected_stages=[str(item) for item in selected]
            if isinstance(selected, list) else None,
            git=_mapping(body.get("git")), model=_mapping(body.get("model")),
            extra={str(key): value for key, value in body.items() if key not in known},
            shape=tuple(str(key) for key in body),
        )

    def with_keys(self, *keys: str) -> None:
        """Make sure a record read from a shorter shape writes `keys` too (set later)."""
        if self.shape is not None:
            self.shape = (*self.shape, *(key for key in keys if key not in self.shape))


_STORAGE = frozenset({"extra", "shape", "stages_sorted"})


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(item) for item in value]
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _mapping(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


class RecordUnwritable(PipelineError):
    """The run folder cannot take the record (a full disk, a read-only folder)."""


def write_record(path: Path, record: RunRecord) -> None:
    """Atomically: the record as it was, or as it is now, never half of it."""
    temp = path.with_suffix(".json.tmp")
    try:
        temp.write_text(json.dumps(record.to_json(), indent=2, default=str))
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        raise RecordUnwritable(f"cannot write the run record {path}: "
                               f"{exc.strerror or exc}") from None


def load_run_record(workspace: Path, run_id: str) -> RunRecord:
    if not RUN_ID.match(run_id):
        raise UsageError(f"not a run id: {run_id!r}")
    path = runs_dir(workspace) / run_id / "record.json"
    if not path.is_file():
        raise UsageError(f"no run {run_id} under {runs_dir(workspace)}")
    body = json.loads(path.read_text())
    if not isinstance(body, dict):
        raise UsageError(f"{path}: not a run record (a JSON object)")
    return RunRecord.from_json(body)
