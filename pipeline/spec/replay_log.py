"""A request log to replay (`stages.replay.log`), read and held to the declared inputs.

JSON lines, one request a line in the order they arrived: `{"t": 12.5, "inputs": {...}}`.
`t` is when the request arrived, in seconds (any origin: only differences count) or as an
ISO 8601 time with a zone ("2026-12-03T09:55:01.250Z"); the times never decrease. `inputs`
is the request's one item, as a line of a `.jsonl` data file (pipeline.spec.request_data).
Either every line has `inputs` or none does; a log of times alone takes its payloads from
a data file. Every way the log can disagree with the spec is a `RequestDataError` naming
`file:line`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.spec.models import TensorSpec
from pipeline.spec.request_data import (
    MAX_DATA_BYTES,
    Items,
    RequestDataError,
    json_item,
    size_of,
)

LINE_KEYS = ("t", "inputs")


@dataclass(frozen=True)
class ReplayLog:
    """Each request's arrival offset from the first (s, never decreasing) and, where the
    log holds payloads, each request's inputs (with a batch dimension of 1) and size."""

    offsets: list[float]
    requests: list[Items] | None
    sizes: list[str | None]

    @property
    def duration_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0


def read_replay_log(path: Path, shown: str, inputs: Sequence[TensorSpec]) -> ReplayLog:
    """The log at `path` (named `shown` in messages); RequestDataError."""
    try:
        size = path.stat().st_size
        if size > MAX_DATA_BYTES:
            raise RequestDataError(f"{shown}: {size} bytes, over the "
                                   f"{MAX_DATA_BYTES // 2**20} MiB a replay log may hold")
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RequestDataError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RequestDataError(f"{shown}: cannot read as UTF-8 text: {exc}") from None
    times: list[float] = []
    requests: list[Items] = []
    sizes: list[str | None] = []
    with_inputs: bool | None = None
    previous_at = ""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        at = f"{shown}:{number}"
        record = _record(line, at)
        arrived = _seconds(record["t"], at)
        if times and arrived < times[-1]:
            raise RequestDataError(f"{at}: t is {times[-1] - arrived:.6f}s before the t of "
                                   f"{previous_at}: a log lists requests in the order they "
                                   "arrived (t never decreases)")
        has = "inputs" in record
        if with_inputs is None:
            with_inputs = has
        elif has != with_inputs:
            raise RequestDataError(f"{at}: " + ("has inputs where the lines before have none"
                                                if has else "has no inputs where the lines "
                                                "before have them") + " (all or none)")
        if has:
            item = json_item(record["inputs"], inputs, at)
            requests.append({name: np.expand_dims(value, 0) for name, value in item.items()})
            sizes.append(size_of(inputs, item))
        times.append(arrived)
        previous_at = at
    if not times:
        raise RequestDataError(f"{shown}: holds no requests")
    first = times[0]
    return ReplayLog([arrived - first for arrived in times], requests if with_inputs else None,
                     sizes if with_inputs else [None] * len(times))


def _record(line: str, at: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise RequestDataError(f"{at}: not a JSON line: {exc}") from None
    if not isinstance(record, dict):
        raise RequestDataError(f"{at}: expected an object with t (and inputs)")
    unknown = sorted(set(record) - set(LINE_KEYS))
    if unknown:
        raise RequestDataError(f"{at}: '{unknown[0]}' is not a key of a replay line "
                               f"(expected: {', '.join(LINE_KEYS)})")
    if "t" not in record:
        raise RequestDataError(f"{at}: no 't' (when the request arrived)")
    return record


def _seconds(value: Any, at: str) -> float:
    """Seconds since the Unix epoch (or any origin) of a number or an ISO time with zone."""
    if isinstance(value, bool):
        raise RequestDataError(f"{at}: t is {json.dumps(value)}, not a time")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise RequestDataError(f"{at}: t is {value}, not a time")
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise RequestDataError(f"{at}: t {json.dumps(value)} is not an ISO 8601 "
                                   "time") from None
        if moment.tzinfo is None:
            raise RequestDataError(f"{at}: t {json.dumps(value)} has no zone (add Z or "
                                   "+00:00)")
        return moment.timestamp()
    raise RequestDataError(f"{at}: t is {json.dumps(value)}: seconds or an ISO 8601 time")
