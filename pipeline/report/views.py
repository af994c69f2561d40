"""Views of a run record shared by the reports: what each section shows, computed once.

A record may come from an aborted run, from an older tool version or from a release's
stored verification (`run_id` and `stages` only): a part it lacks yields no view (None),
never an exception. Free-form stage details (probes, batch counts) are read defensively.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline import metric_names as m
from pipeline.record import RunRecord
from pipeline.stage_result import Gate, finite

number = finite     # the name the report modules use


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


COMPARISON_SYMBOL = {"<=": "≤", ">=": "≥", "<": "<", ">": ">", "==": "=", "!=": "≠"}


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


@dataclass(frozen=True)
class StageRow:
    name: str
    status: str
    duration_s: float | None
    message: str


def stage_rows(record: RunRecord) -> list[StageRow]:
    return [StageRow(stage.name, stage.status.value, stage.duration_s, stage.message)
            for stage in record.stages]


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


def _interval_text(gate: Gate) -> str:
    if gate.interval is None:
        return ""
    low, high = (format_value(bound, "") for bound in gate.interval)
    return f"[{low}, {high}] {gate.unit}".rstrip()


def gate_row(stage: str, gate: Gate) -> GateRow:
    threshold = format_value(gate.threshold, gate.unit)
    relation = COMPARISON_SYMBOL.get(gate.comparison, gate.comparison)
    return GateRow(stage, gate.name, format_value(gate.observed, gate.unit),
                   f"{relation} {threshold}".strip(), gate.passed,
                   number(gate.observed) is not None, gate.outcome, _interval_text(gate),
                   "" if gate.samples is None else f"{gate.samples:,.0f}", gate.reason)


def gate_rows(record: RunRecord) -> list[GateRow]:
    return [gate_row(stage, gate) for stage, gate in record.gates()]


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


def waits(record: RunRecord) -> Waits | None:
    values = record.metrics(m.LATENCY_STAGE)
    client = {key.removesuffix("_ms"): values[key]
              for key in (m.P50_MS, m.P95_MS, m.P99_MS, m.MAX_MS) if key in values}
    if not client:
        return None
    compute = {key.removeprefix("server_compute_").removesuffix("_us"): values[key] / 1e3
               for key in m.COMPUTE_METRICS if key in values}
    if not compute and m.SERVER_INFERENCE_US in values and m.SERVER_QUEUE_US in values:
        # TorchServe reports queue + inference; compute is what is left of inference.
        remainder = values[m.SERVER_INFERENCE_US] - values[m.SERVER_QUEUE_US]
        compute = {"infer": max(0.0, remainder) / 1e3}

    def per_ms(key: str) -> float | None:
        return values[key] / 1e3 if key in values else None

    # The queue time is a mean: it is held against a budget stated as a mean only
    # (slo.queue_mean), never against the p99-derived queue budget.
    return Waits(client, values.get(m.MEAN_MS), per_ms(m.SERVER_QUEUE_US),
                 per_ms(m.QUEUE_MEAN_BUDGET_US), compute, values.get(m.CONCURRENCY),
                 values.get(m.THROUGHPUT_RPS))


@dataclass(frozen=True)
class SizeRow:
    """The latency stage's requests of one size bucket (model.sizes, a data file)."""

    size: str
    p50_ms: float | None
    p99_ms: float | None
    requests: float | None


def sizes(record: RunRecord) -> list[SizeRow]:
    """p50/p99 per size bucket, smallest first; none for requests of one shape."""
    raw = record.details(m.LATENCY_STAGE).get("sizes")
    if not isinstance(raw, dict):
        return []
    return [SizeRow(str(size), number(row.get(m.P50_MS)), number(row.get(m.P99_MS)),
                    number(row.get(m.REQUESTS)))
            for size, row in raw.items() if isinstance(row, dict)]


@dataclass(frozen=True)
class Memory:
    rss_mb: float | None
    pss_mb: float | None
    processes: float | None
    cold_rss_mb: float | None
    gpu_mb: float | None


def memory(record: RunRecord) -> Memory | None:
    values = record.metrics(m.LATENCY_STAGE)
    if m.SERVER_RSS_MB not in values and m.SERVER_PSS_MB not in values:
        return None
    gpu = next((value for key, value in values.items() if "gpu" in key and key.endswith("_mb")),
               None)
    return Memory(values.get(m.SERVER_RSS_MB), values.get(m.SERVER_PSS_MB),
                  values.get(m.SERVER_PROCESSES),
                  record.metrics(m.READINESS_STAGE).get(m.COLD_RSS_MB), gpu)


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


def batches(record: RunRecord) -> Batches | None:
    info = record.details(m.LATENCY_STAGE)
    raw = info.get("batch_executions")
    raw = raw if isinstance(raw, dict) else {}
    executions: dict[int, int] = {}
    for key, value in raw.items():
        count = number(value)
        if str(key).isdigit() and count is not None:
            executions[int(key)] = int(count)
    preferred = sorted({int(size) for size in _items(info.get("preferred_batch_sizes"))
                        if number(size) is not None})
    if not executions and not preferred:
        return None
    return Batches(dict(sorted(executions.items())), preferred,
                   record.metrics(m.LATENCY_STAGE).get(m.SERVER_AVG_BATCH_SIZE))


@dataclass(frozen=True)
class Probe:
    concurrency: float
    throughput_rps: float
    p99_ms: float
    error_rate: float
    passed: bool


def probes(record: RunRecord) -> list[Probe]:
    found = []
    for probe in _items(record.details(m.SATURATION_STAGE).get("probes")):
        if not isinstance(probe, dict):
            continue
        concurrency, p99 = number(probe.get(m.CONCURRENCY)), number(probe.get(m.P99_MS))
        if concurrency is None or p99 is None or concurrency <= 0:
            continue
        found.append(Probe(concurrency, number(probe.get(m.THROUGHPUT_RPS)) or 0.0, p99,
                           number(probe.get(m.ERROR_RATE)) or 0.0, probe.get("passed") is True))
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


def knee(record: RunRecord) -> Knee | None:
    values, info = record.metrics(m.SATURATION_STAGE), record.details(m.SATURATION_STAGE)
    found = probes(record)
    if not found and m.KNEE_CONCURRENCY not in values:
        return None
    reason = str(info.get("stop_reason") or "")
    if reason:
        reason = reason[0].upper() + reason[1:]
    slo = record.gate("latency.p99")
    return Knee(values.get(m.KNEE_CONCURRENCY), values.get(m.KNEE_THROUGHPUT_RPS),
                values.get(m.KNEE_P99_MS), None if slo is None else number(slo.threshold),
                reason, found, info.get("knee_bound") == "lower"
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


def burst(record: RunRecord) -> Burst | None:
    values = record.metrics(m.SATURATION_STAGE)
    if m.BURST_P99_MS not in values:
        return None
    valid = record.details(m.SATURATION_STAGE).get("burst_valid")
    return Burst(values.get(m.BURST_RATE_RPS), values.get(m.BURST_BASE_RATE_RPS),
                 values[m.BURST_P99_MS], values.get(m.BURST_BASE_P99_MS),
                 values.get(m.BURST_DRAIN_S), values.get(m.BURST_ERRORS),
                 values.get(m.BURST_SCHEDULE_LAG_P99_MS),
                 valid if isinstance(valid, bool) else None)


def status_counts(rows: list[GateRow]) -> tuple[int, int]:
    failed = sum(1 for row in rows if not row.passed)
    return len(rows) - failed, failed


def inconclusive_count(rows: list[GateRow]) -> int:
    return sum(1 for row in rows if row.outcome == "inconclusive")


def first_failure(record: RunRecord) -> StageRow | None:
    return next((row for row in stage_rows(record) if row.status == "failed"), None)


def provenance(record: RunRecord) -> list[tuple[str, str]]:
    """Every identifying field the record holds, flattened to (key path, text)."""
    rows: list[tuple[str, str]] = []
    top = [("run id", record.run_id), ("release id", record.release_id),
           ("name", record.name), ("command", record.command),
           ("environment", record.environment), ("promoted to", record.promoted_to),
           ("spec digest", record.spec_digest), ("server kind", record.server.kind),
           ("server exit", record.server.exit), ("started", record.started_at),
           ("finished", record.finished_at), ("tool version", record.tool_version)]
    rows.extend((key, str(value)) for key, value in top if value not in (None, ""))
    if record.spec_files:
        rows.append(("spec files", ", ".join(record.spec_files)))
    if record.git and record.git.get("commit"):
        rows.append(("git commit", f"{record.git['commit']}"
                     + (" (dirty: uncommitted changes)" if record.git.get("dirty") else
                        " (clean)")))
    models = {"model": record.model, **{key: value for key, value in record.extra.items()
                                        if key.startswith("model")}}
    for key, value in models.items():
        rows.extend(_flatten(key, value))
    build = record.stage("build")
    for name, artifact in (build.artifacts if build is not None else {}).items():
        if artifact.sha256:
            rows.append((f"build artifact {name}", f"sha256:{artifact.sha256}"))
    publish = record.details("publish")
    for key, value in publish.items():
        if key != "event" and not (key == "release_id" and value == record.release_id):
            rows.extend(_flatten(f"publish {key}", value))
    event = publish.get("event")
    for key in ("previous_release_id", "by", "at", "approved_by"):
        if isinstance(event, dict) and event.get(key):
            rows.append((f"publish {key.replace('_', ' ')}", str(event[key])))
    return rows


def _flatten(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [row for key, item in value.items() for row in _flatten(f"{prefix}.{key}", item)]
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [(prefix, ", ".join(str(item) for item in value))]
    return [(prefix, str(value))]
