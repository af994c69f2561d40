"""Views of a run record shared by the HTML and markdown reports.

Everything here reads the record dict defensively: a record may come from an aborted run,
from an older tool version or from a release's stored verification (`run_id` and `stages`
only), so a missing or oddly typed key yields an empty view, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMPARISON_SYMBOL = {"<=": "≤", ">=": "≥", "<": "<", ">": ">", "==": "=", "!=": "≠"}
COMPUTE_METRICS = ("server_compute_input_us", "server_compute_infer_us",
                   "server_compute_output_us")


def number(value: Any) -> float | None:
    """A finite JSON number as float; None for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def format_value(value: Any, unit: str = "") -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value).lower()
    if isinstance(value, int | float):
        magnitude = abs(float(value))
        if isinstance(value, int) or (float(value).is_integer() and magnitude < 1e6):
            text = f"{value:,.0f}"
        else:
            text = f"{value:,.0f}" if magnitude >= 1000 else f"{value:.3g}"
        return f"{text} {unit}" if unit in ("ms", "s", "MiB") else f"{text}{unit}"
    return str(value)


def ms(value_ms: float | None) -> str:
    return "—" if value_ms is None else format_value(value_ms, "ms")


def stages(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [as_dict(item) for item in _list(record.get("stages")) if isinstance(item, Mapping)]


def stage(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    for item in stages(record):
        if item.get("name") == name:
            return item
    return {}


def metrics(record: Mapping[str, Any], stage_name: str) -> dict[str, float]:
    raw = as_dict(stage(record, stage_name).get("metrics"))
    return {str(key): value for key, raw_value in raw.items()
            if (value := number(raw_value)) is not None}


def details(record: Mapping[str, Any], stage_name: str) -> dict[str, Any]:
    return as_dict(stage(record, stage_name).get("details"))


@dataclass(frozen=True)
class StageRow:
    name: str
    status: str
    duration_s: float | None
    message: str


def stage_rows(record: Mapping[str, Any]) -> list[StageRow]:
    return [StageRow(str(item.get("name", "?")), str(item.get("status", "?")),
                     number(item.get("duration_s")), str(item.get("message") or ""))
            for item in stages(record)]


OUTCOME_LABEL = {"passed": "pass", "failed": "FAIL", "inconclusive": "INCONCLUSIVE"}


@dataclass(frozen=True)
class GateRow:
    stage: str
    name: str
    observed: str
    threshold: str
    passed: bool
    numeric: bool
    outcome: str = ""     # passed | failed | inconclusive (older records: from `passed`)
    interval: str = ""    # "[low, high] unit" for a gate decided on a confidence bound
    samples: str = ""     # how many samples the verdict rests on
    reason: str = ""

    @property
    def label(self) -> str:
        return OUTCOME_LABEL.get(self.outcome, self.outcome.upper())

    @property
    def evidence(self) -> str:
        """Interval and sample count in one cell: "[15.7, 17.8] ms, n=12,696"."""
        return ", ".join(part for part in (self.interval, self.samples and f"n={self.samples}")
                         if part)


def _interval_text(interval: Any, unit: str) -> str:
    # A record read back holds a list; one rendered in-process still holds the tuple.
    bounds = list(interval) if isinstance(interval, list | tuple) else []
    if len(bounds) != 2:
        return ""
    low, high = (format_value(number(bound), "") for bound in bounds)
    return f"[{low}, {high}] {unit}".rstrip()


def _outcome(gate: Mapping[str, Any]) -> str:
    outcome = gate.get("outcome")
    if outcome in OUTCOME_LABEL:
        return str(outcome)
    return "passed" if gate.get("passed") is True else "failed"


def gate_rows(record: Mapping[str, Any]) -> list[GateRow]:
    rows = []
    for item in stages(record):
        for gate in _list(item.get("gates")):
            gate = as_dict(gate)
            unit = str(gate.get("unit") or "")
            comparison = str(gate.get("comparison") or "")
            threshold = format_value(gate.get("threshold"), unit)
            relation = COMPARISON_SYMBOL.get(comparison, comparison)
            samples = number(gate.get("samples"))
            outcome = _outcome(gate)
            rows.append(GateRow(str(item.get("name", "?")), str(gate.get("name", "?")),
                                format_value(gate.get("observed"), unit),
                                f"{relation} {threshold}".strip(), outcome == "passed",
                                number(gate.get("observed")) is not None, outcome,
                                _interval_text(gate.get("interval"), unit),
                                "" if samples is None else f"{samples:,.0f}",
                                str(gate.get("reason") or "")))
    return rows


def gate_threshold(record: Mapping[str, Any], gate_name: str) -> float | None:
    for item in stages(record):
        for gate in _list(item.get("gates")):
            if as_dict(gate).get("name") == gate_name:
                return number(as_dict(gate).get("threshold"))
    return None


@dataclass(frozen=True)
class Waits:
    """Where requests spent their time in the latency window. Client numbers are
    percentiles of end-to-end latency; server numbers are per-request averages."""

    client_ms: dict[str, float]
    mean_ms: float | None
    queue_ms: float | None
    queue_budget_ms: float | None
    compute_ms: dict[str, float]
    concurrency: float | None
    throughput_rps: float | None

    @property
    def compute_total_ms(self) -> float | None:
        return sum(self.compute_ms.values()) if self.compute_ms else None

    @property
    def outside_server_ms(self) -> float | None:
        """Mean latency not spent in the server's queue or compute: HTTP, network, client."""
        if self.mean_ms is None or self.queue_ms is None or self.compute_total_ms is None:
            return None
        return max(0.0, self.mean_ms - self.queue_ms - self.compute_total_ms)


def waits(record: Mapping[str, Any]) -> Waits | None:
    values = metrics(record, "latency")
    client = {key.removesuffix("_ms"): values[key]
              for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms") if key in values}
    if not client:
        return None
    compute = {key.removeprefix("server_compute_").removesuffix("_us"): values[key] / 1e3
               for key in COMPUTE_METRICS if key in values}
    if not compute and "server_inference_us" in values and "server_queue_us" in values:
        # TorchServe reports queue + inference; compute is what is left of inference.
        remainder = values["server_inference_us"] - values["server_queue_us"]
        compute = {"infer": max(0.0, remainder) / 1e3}

    def per_ms(key: str) -> float | None:
        return values[key] / 1e3 if key in values else None

    # The queue time is a mean: it is held against a budget stated as a mean only
    # (slo.queue_mean), never against the p99-derived queue budget.
    return Waits(client, values.get("mean_ms"), per_ms("server_queue_us"),
                 per_ms("queue_mean_budget_us"), compute, values.get("concurrency"),
                 values.get("throughput_rps"))


@dataclass(frozen=True)
class Memory:
    rss_mb: float | None
    pss_mb: float | None
    processes: float | None
    cold_rss_mb: float | None
    gpu_mb: float | None


def memory(record: Mapping[str, Any]) -> Memory | None:
    values = metrics(record, "latency")
    if "server_rss_mb" not in values and "server_pss_mb" not in values:
        return None
    gpu = next((value for key, value in values.items() if "gpu" in key and key.endswith("_mb")),
               None)
    return Memory(values.get("server_rss_mb"), values.get("server_pss_mb"),
                  values.get("server_processes"),
                  metrics(record, "readiness").get("cold_rss_mb"), gpu)


@dataclass(frozen=True)
class Batches:
    executions: dict[int, int]
    preferred: list[int]
    average: float | None

    @property
    def never_formed(self) -> list[int]:
        return [size for size in self.preferred if self.executions.get(size, 0) == 0]

    @property
    def total(self) -> int:
        return sum(self.executions.values())

    def summary(self) -> str:
        if not self.executions:
            return "The record holds no batch statistics."
        top_size, top_count = max(self.executions.items(), key=lambda item: item[1])
        requests = sum(size * count for size, count in self.executions.items())
        share = top_size * top_count / requests if requests else 0.0
        parts = [f"{top_count:,} of {self.total:,} executions ran at batch size {top_size} "
                 f"({share:.0%} of requests)."]
        if self.average is not None:
            parts.append(f"Average batch {self.average:.1f}.")
        if not self.preferred:
            parts.append("No preferred batch sizes are configured.")
        elif self.never_formed:
            missing = ", ".join(str(size) for size in self.never_formed)
            plural = "s" if len(self.never_formed) > 1 else ""
            parts.append(f"Preferred size{plural} {missing} never formed "
                         f"(largest batch formed: {max(self.executions)}).")
        else:
            parts.append("Every preferred size formed.")
        return " ".join(parts)


def batches(record: Mapping[str, Any]) -> Batches | None:
    info = details(record, "latency")
    raw = as_dict(info.get("batch_executions"))
    executions: dict[int, int] = {}
    for key, value in raw.items():
        count = number(value)
        if str(key).isdigit() and count is not None:
            executions[int(key)] = int(count)
    preferred = sorted({int(size) for size in _list(info.get("preferred_batch_sizes"))
                        if number(size) is not None})
    if not executions and not preferred:
        return None
    return Batches(dict(sorted(executions.items())), preferred,
                   metrics(record, "latency").get("server_avg_batch_size"))


@dataclass(frozen=True)
class Probe:
    concurrency: float
    throughput_rps: float
    p99_ms: float
    error_rate: float
    passed: bool


def probes(record: Mapping[str, Any]) -> list[Probe]:
    found = []
    for raw in _list(details(record, "saturation").get("probes")):
        probe = as_dict(raw)
        concurrency, p99 = number(probe.get("concurrency")), number(probe.get("p99_ms"))
        if concurrency is None or p99 is None or concurrency <= 0:
            continue
        found.append(Probe(concurrency, number(probe.get("throughput_rps")) or 0.0, p99,
                           number(probe.get("error_rate")) or 0.0, probe.get("passed") is True))
    return sorted(found, key=lambda item: item.concurrency)


@dataclass(frozen=True)
class Knee:
    concurrency: float | None
    throughput_rps: float | None
    p99_ms: float | None
    slo_p99_ms: float | None
    stop_reason: str
    probes: list[Probe]
    lower_bound: bool = False

    def summary(self) -> str:
        if self.concurrency is None:
            head = "No load met the SLO." if self.probes else "No saturation probes recorded."
        elif self.lower_bound:
            return (f"No knee up to concurrency {self.concurrency:g} (cap reached): capacity ≥ "
                    f"{format_value(self.throughput_rps, '/s')} with p99 {ms(self.p99_ms)}, "
                    "a lower bound.")
        else:
            head = (f"Knee at concurrency {self.concurrency:g}: "
                    f"{format_value(self.throughput_rps, '/s')} with p99 {ms(self.p99_ms)}")
            if self.slo_p99_ms is not None:
                head += f" (SLO {ms(self.slo_p99_ms)})"
            head += "."
        return f"{head} {self.stop_reason}." if self.stop_reason else head


def knee(record: Mapping[str, Any]) -> Knee | None:
    values = metrics(record, "saturation")
    found = probes(record)
    if not found and "knee_concurrency" not in values:
        return None
    reason = str(details(record, "saturation").get("stop_reason") or "")
    if reason:
        reason = reason[0].upper() + reason[1:]
    return Knee(values.get("knee_concurrency"), values.get("knee_throughput_rps"),
                values.get("knee_p99_ms"), gate_threshold(record, "latency.p99"), reason, found,
                details(record, "saturation").get("knee_bound") == "lower"
                or reason.startswith("Reached max_concurrency"))


@dataclass(frozen=True)
class Burst:
    rate_rps: float | None
    base_rate_rps: float | None
    p99_ms: float
    base_p99_ms: float | None
    drain_s: float | None
    errors: float | None
    schedule_lag_p99_ms: float | None
    valid: bool | None

    def summary(self) -> str:
        text = f"Burst p99 {ms(self.p99_ms)}"
        if self.rate_rps is not None:
            text = f"Open-loop burst at {format_value(self.rate_rps, '/s')}: p99 {ms(self.p99_ms)}"
        if self.base_p99_ms is not None:
            text += f" vs {ms(self.base_p99_ms)} at the base rate"
            if self.base_rate_rps is not None:
                text += f" of {format_value(self.base_rate_rps, '/s')}"
            if self.base_p99_ms > 0:
                text += f" ({(self.p99_ms - self.base_p99_ms) / self.base_p99_ms:+.0%})"
        if self.drain_s is not None:
            text += f"; backlog drained in {self.drain_s:.2f} s"
        if self.errors is not None:
            text += f"; {self.errors:g} errors"
        return text + "."


def burst(record: Mapping[str, Any]) -> Burst | None:
    values = metrics(record, "saturation")
    if "burst_p99_ms" not in values:
        return None
    valid = details(record, "saturation").get("burst_valid")
    return Burst(values.get("burst_rate_rps"), values.get("burst_base_rate_rps"),
                 values["burst_p99_ms"], values.get("burst_base_p99_ms"),
                 values.get("burst_drain_s"), values.get("burst_errors"),
                 values.get("burst_schedule_lag_p99_ms"),
                 valid if isinstance(valid, bool) else None)


def status_counts(rows: list[GateRow]) -> tuple[int, int]:
    failed = sum(1 for row in rows if not row.passed)
    return len(rows) - failed, failed


def inconclusive_count(rows: list[GateRow]) -> int:
    return sum(1 for row in rows if row.outcome == "inconclusive")


def first_failure(record: Mapping[str, Any]) -> StageRow | None:
    return next((row for row in stage_rows(record) if row.status == "failed"), None)


def provenance(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every identifying field the record holds, flattened to (key path, text)."""
    rows: list[tuple[str, str]] = []
    server = as_dict(record.get("server"))
    top = [("run id", record.get("run_id")), ("release id", record.get("release_id")),
           ("name", record.get("name")), ("command", record.get("command")),
           ("environment", record.get("environment")),
           ("promoted to", record.get("promoted_to")),
           ("spec digest", record.get("spec_digest")), ("server kind", server.get("kind")),
           ("server exit", server.get("exit")), ("started", record.get("started_at")),
           ("finished", record.get("finished_at")),
           ("tool version", record.get("tool_version"))]
    rows.extend((key, str(value)) for key, value in top if value not in (None, ""))
    spec_files = _list(record.get("spec_files"))
    if spec_files:
        rows.append(("spec files", ", ".join(str(item) for item in spec_files)))
    for key, value in record.items():
        if str(key).startswith("model"):
            rows.extend(_flatten(str(key), value))
    for name, artifact in as_dict(stage(record, "build").get("artifacts")).items():
        digest = as_dict(artifact).get("sha256")
        if digest:
            rows.append((f"build artifact {name}", f"sha256:{digest}"))
    publish = details(record, "publish")
    for key, value in publish.items():
        if key != "event" and not (key == "release_id" and value == record.get("release_id")):
            rows.extend(_flatten(f"publish {key}", value))
    event = as_dict(publish.get("event"))
    for key in ("previous_release_id", "by", "at", "approved_by"):
        if event.get(key):
            rows.append((f"publish {key.replace('_', ' ')}", str(event[key])))
    return rows


def _flatten(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [row for key, item in value.items() for row in _flatten(f"{prefix}.{key}", item)]
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [(prefix, ", ".join(str(item) for item in value))]
    return [(prefix, str(value))]
