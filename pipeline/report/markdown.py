"""Render a run record (never live objects) as GitHub-flavoured markdown, for a GitHub
Actions job summary (`$GITHUB_STEP_SUMMARY`)."""

from __future__ import annotations

import html

from pipeline.record import RunRecord
from pipeline.release.baseline_deltas import DEFAULT_TOLERANCE, comparability_note, compare
from pipeline.release.dossier import ReleaseDossier
from pipeline.report import views as data
from pipeline.report.capacity import capacity as capacity_view
from pipeline.report.load_workers import HEADERS as WORKER_HEADERS
from pipeline.report.load_workers import worker_lines
from pipeline.report.regression_view import side_by_side
from pipeline.report.release_markdown import release_markdown
from pipeline.report.replay_view import replay as replay_view

STATUS_ICON = {"passed": "✅", "failed": "❌", "aborted": "⏹️", "skipped": "⏭️",
               "running": "⏳", "abandoned": "⚠️"}
OUTCOME_MARK = {"passed": "✅ pass", "failed": "❌ **FAIL**",
                "inconclusive": "❔ **INCONCLUSIVE**"}


def cell(value: object) -> str:
    """Text safe inside a table cell: no row break, no column break, no raw HTML."""
    text = " ".join(str(value).split())
    return html.escape(text, quote=False).replace("|", "\\|").replace("`", "\\`")


def code(value: object) -> str:
    """A code span; plain escaped text when the value holds characters a span would show
    raw (escapes are literal inside code spans)."""
    text = " ".join(str(value).split())
    if not text or any(char in text for char in "`<>&"):
        return cell(text)
    return f"`{text.replace('|', chr(92) + '|')}`"


def _row(values: list[str]) -> str:
    return "| " + " | ".join(values) + " |"


def _table(headers: list[str], rows: list[list[str]], align: str) -> list[str]:
    """`align` holds one `l` or `r` per column."""
    rule = ["---:" if code == "r" else "---" for code in align]
    return [_row(headers), _row(rule), *(_row(row) for row in rows), ""]


def _header(record: RunRecord) -> list[str]:
    status = record.status or "unknown"
    title = cell(record.name or "serve-pipeline run")
    if record.environment:
        title += f" · {cell(record.environment)}"
    lines = [f"## {STATUS_ICON.get(status, '❔')} {title}: {cell(status)}", ""]
    facts = [f"run {code(record.run_id or '—')}",
             f"release {code(record.release_id or '—')}"]
    if record.promoted_to:
        facts.append(f"{cell(record.promoted_to)} now points at this release")
    if record.extra.get("abandoned"):
        facts.append(f"abandoned: {cell(str(record.extra['abandoned']))}")
    passed, failed = data.status_counts(data.gate_rows(record))
    facts.append(f"**{passed} of {passed + failed} gates passed**")
    lines += [" · ".join(facts), ""]
    stages = [f"{STATUS_ICON.get(row.status, '❔')} {cell(row.name)}"
              + (f" {row.duration_s:.1f}s" if row.duration_s is not None else "")
              for row in data.stage_rows(record)]
    if stages:
        lines += [" → ".join(stages), ""]
    failure = data.first_failure(record)
    if failure is not None:
        lines += [f"> **Stage {cell(failure.name)} failed:** "
                  f"{cell(failure.message or 'no message')}", ""]
    return lines


def _gates(record: RunRecord) -> list[str]:
    rows = data.gate_rows(record)
    if not rows:
        return ["_No gate was evaluated._", ""]
    lines = ["### Gates", "", *_table(
        ["stage", "gate", "observed", "threshold", "interval, samples", ""],
        [[cell(gate.stage), code(gate.name), cell(gate.observed), cell(gate.threshold),
          cell(gate.evidence or "—"), OUTCOME_MARK[gate.outcome]] for gate in rows], "llrrrl")]
    reasons = [f"- {code(gate.name)} {gate.outcome}: {cell(gate.reason)}"
               for gate in rows if gate.reason and not gate.passed]
    return lines + ([*reasons, ""] if reasons else [])


def _measurements(record: RunRecord) -> list[str]:
    lines = []
    waits = data.waits(record)
    if waits is not None:
        client = " / ".join(data.ms(value) for value in waits.client_ms.values())
        text = f"**Latency** (client {'/'.join(waits.client_ms)}): {client}"
        if waits.queue_ms is not None:
            text += f"; server queue {data.ms(waits.queue_ms)} avg"
            if waits.queue_budget_ms is not None:
                text += f" (mean budget {data.ms(waits.queue_budget_ms)})"
        if waits.compute_total_ms is not None:
            text += f"; server compute {data.ms(waits.compute_total_ms)} avg"
        if waits.concurrency is not None and waits.throughput_rps is not None:
            text += (f"; concurrency {waits.concurrency:g} at "
                     f"{data.format_value(waits.throughput_rps, '/s')}")
        lines += [text, ""]
        by_size = data.sizes(record)
        if by_size:
            lines += ["**Latency by size** (client p50 / p99): " + "; ".join(
                f"size {row.size}: {data.ms(row.p50_ms)} / {data.ms(row.p99_ms)} "
                f"({data.format_value(row.requests)} requests)" for row in by_size), ""]
    memory = data.memory(record)
    if memory is not None:
        parts = [f"{label} {data.format_value(value, 'MiB')}" for label, value in
                 (("RSS", memory.rss_mb), ("PSS", memory.pss_mb)) if value is not None]
        gpu = "not measured" if memory.gpu_mb is None else data.format_value(memory.gpu_mb,
                                                                            "MiB")
        lines += [f"**Memory** after warm traffic: {', '.join(parts)}; GPU {gpu}", ""]
    batches = data.batches(record)
    if batches is not None:
        formed = ", ".join(f"{size}×{count:,}" for size, count in batches.executions.items())
        lines += [f"**Batches** (size×executions): {formed or 'none'}. {batches.summary()}", ""]
    return lines


def _knee(record: RunRecord) -> list[str]:
    knee = data.knee(record)
    lines = []
    if knee is not None:
        lines += [f"**Saturation:** {cell(knee.summary())}", ""]
        if knee.probes:
            lines += _table(["concurrency", "throughput", "p99", "errors", "SLO"], [
                [f"{probe.concurrency:g}", data.format_value(probe.throughput_rps, "/s"),
                 data.ms(probe.p99_ms), f"{probe.error_rate:.2%}",
                 "✅" if probe.passed else "❌"] for probe in knee.probes], "rrrrl")
    capacity = capacity_view(record)
    if capacity is not None:
        flag = " ⚠️ lower bound" if capacity.lower_bound else ""
        lines += [f"**Capacity (open loop):**{flag} {cell(capacity.summary())}", ""]
        if capacity.steps:
            lines += _table(["rate", "p99", "samples", "verdict"], [
                [data.format_value(step.rate_rps, "/s"), data.ms(step.p99_ms),
                 f"{step.samples:,.0f}", cell(f"{step.verdict}: {step.reason}")]
                for step in capacity.steps], "rrrl")
    burst = data.burst(record)
    if burst is not None:
        validity = " ⚠️ invalid: the client fell behind its schedule" if burst.valid is False \
            else ""
        lines += [f"**Burst:** {burst.summary()}{validity}", ""]
    workers = worker_lines(record)
    if workers:
        lines += ["**Load workers** (each sent and timed its share; figures above merged):",
                  "", *_table(WORKER_HEADERS, [line.cells() for line in workers], "lllrrrl")]
    return lines


def _replay(record: RunRecord) -> list[str]:
    view = replay_view(record)
    if view is None:
        return []
    lines = ["### Replay of the request log", "", cell(view.summary()), "",
             cell(view.schedule_note()), ""]
    if view.gates:
        lines += ["Gates: " + "; ".join(
            f"{code(gate.name)} {OUTCOME_MARK[gate.outcome]} {cell(gate.observed)} "
            f"({cell(gate.threshold)})" for gate in view.gates), ""]
    rows = [[f"{span.start_s:g}–{span.end_s:g} s", data.format_value(span.offered_rps, "/s"),
             data.ms(span.worst_p99_ms), data.format_value(span.errors)]
            for span in view.series()]
    return lines + _table(["time", "offered", "p99 (worst bucket)", "errors"], rows, "rrrr")


WINDOW_KEYS = ("round", "server", "p50_ms", "p95_ms", "p99_ms", "throughput_rps", "errors",
               "requests")


def _side_by_side(record: RunRecord) -> list[str]:
    view = side_by_side(record)
    if view is None:
        return []
    icon = {"no regression": "✅", "regression": "❌"}.get(view.outcome, "⚠️")
    lines = ["### Against the live release, side by side", "",
             f"{icon} **{view.outcome}** against live release {code(view.release_id)}: both "
             f"served on this machine and measured in {view.rounds} interleaved rounds; a "
             f"metric may be {view.margin:.0%} worse (candidate / live).", ""]
    if view.same_bytes:
        lines += ["Same model, config and served files as the live release.", ""]
    rows = [[cell(r.metric), r.live, r.candidate, r.ratio, r.interval, r.limit, r.outcome]
            for r in view.rows]
    lines += _table(["metric", "live", "candidate", "ratio", "interval", "limit",
                     "verdict"], rows, "lrrrrrl")
    windows = [[cell(w.get(key, "")) for key in WINDOW_KEYS] for w in view.windows]
    return [*lines, "<details><summary>Every window, as measured</summary>", "",
            *_table(list(WINDOW_KEYS), windows, "rlrrrrrr"), "</details>", ""]


def _comparison(record: RunRecord, baseline: RunRecord | None,
                tolerance: float) -> list[str]:
    if baseline is None:
        return []
    lines = ["### Compared with the live release: against a recorded run of another day", "",
             f"Live release {code(baseline.release_id or '—')} (run "
             f"{code(baseline.run_id or '—')}); a regression is a change for the "
             f"worse beyond {tolerance:.0%}.", ""]
    note = comparability_note(record, baseline)
    if note:
        lines += [f"> ⚠️ {cell(note)}", ""]
    deltas = compare(record, baseline, tolerance)
    regressed = [delta for delta in deltas if delta.regressed]
    if regressed:
        plural = "s" if len(regressed) > 1 else ""
        names = ", ".join(f"{code(f'{d.stage}.{d.metric}')} {d.change_text}" for d in regressed)
        lines += [f"❌ **{len(regressed)} regression{plural}:** {names}", ""]
    else:
        lines += [f"✅ No regression beyond {tolerance:.0%} in {len(deltas)} metrics.", ""]
    rows = [[cell(delta.stage), code(delta.metric), data.format_value(delta.baseline),
             data.format_value(delta.current), delta.change_text,
             "❌ regression" if delta.regressed else "✅ better" if delta.improved else ""]
            for delta in deltas]
    # Collapsed: a job summary should lead with the verdict, not 40 rows of numbers.
    return [*lines, "<details><summary>All compared metrics</summary>", "",
            *_table(["stage", "metric", "live", "this run", "change", ""], rows, "llrrrl"),
            "</details>", ""]


def render_markdown(record: RunRecord, baseline: RunRecord | None = None, *,
                    tolerance: float = DEFAULT_TOLERANCE,
                    release: ReleaseDossier | str | None = None) -> str:
    lines = [*_header(record), *_gates(record), *_measurements(record), *_knee(record),
             *_replay(record), *_side_by_side(record), *_comparison(record, baseline, tolerance),
             *(release_markdown(release) if release is not None else [])]
    return "\n".join(lines).rstrip() + "\n"
