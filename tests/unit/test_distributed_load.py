"""Splitting a load among workers and merging what they measured (no Ray needed)."""

from __future__ import annotations

import json
import random
import socket
import sys
from pathlib import Path

import pytest

from pipeline.measure.distributed.merge import (
    SentResult,
    WorkerOpenLoop,
    behind,
    combine_rows,
    encode,
    merge_open_loop,
    merge_parallel,
)
from pipeline.measure.distributed.ray_support import missing_ray
from pipeline.measure.distributed.reach import unreachable
from pipeline.measure.distributed.shard import interleave, resolve_workers, split_concurrency
from pipeline.measure.load_result import LoadResult, new_histogram
from pipeline.measure.open_loop import Phase, schedule
from pipeline.preflight.load_workers import load_worker_checks
from pipeline.record import RunRecord
from pipeline.report.html import render_html
from pipeline.report.markdown import render_markdown
from pipeline.servers.specs import load_spec

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("arrivals", ["constant", "poisson"])
@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_interleaving_keeps_every_intended_arrival(arrivals: str, workers: int) -> None:
    plan = schedule([Phase("a", 300.0, 1.0), Phase("b", 50.0, 0.5)], arrivals, seed=3)
    shares = interleave(plan, workers)
    assert len(shares) == workers
    assert sorted(item for share in shares for item in share) == sorted(plan)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    for share in shares:   # each worker's share is still in time order, evenly thinned
        assert [offset for offset, _ in share] == sorted(offset for offset, _ in share)


def test_interleaving_refuses_no_workers() -> None:
    with pytest.raises(ValueError):
        interleave([(0.0, "a")], 0)


@pytest.mark.parametrize(("concurrency", "workers", "shares"),
                         [(8, 2, [4, 4]), (7, 3, [3, 2, 2]), (2, 4, [1, 1]), (1, 1, [1])])
def test_concurrency_is_split_evenly_and_adds_up(concurrency: int, workers: int,
                                                 shares: list[int]) -> None:
    assert split_concurrency(concurrency, workers) == shares


def test_auto_is_one_worker_per_spare_core() -> None:
    assert resolve_workers("auto", cores=8) == 7
    assert resolve_workers("auto", cores=1) == 1
    assert resolve_workers(3, cores=8) == 3


def _result(values: list[int], errors: dict[str, int] | None = None) -> LoadResult:
    result = LoadResult(2.0)
    for value in values:
        result.histogram.record_value(value)
    result.completed = len(values)
    result.errors.update(errors or {})
    result.client_cpu_s = 0.5
    return result


def test_merged_histograms_equal_one_histogram_of_every_request() -> None:
    rng = random.Random(1)
    values = [rng.randint(100, 200_000) for _ in range(5000)]
    whole = _result(values)
    parts = [SentResult.of(_result(values[i::3])).load_result() for i in range(3)]
    merged = merge_parallel(parts)
    assert merged.histogram.get_total_count() == 5000 == merged.completed
    for percentile in (50, 90, 99, 99.9, 100):
        assert merged.histogram.get_value_at_percentile(percentile) == \
            whole.histogram.get_value_at_percentile(percentile)
    assert merged.duration_s == 2.0          # side by side: not 6 s
    assert merged.client_cpu_s == pytest.approx(1.5)


def _report(worker: int, latencies: list[int], lags: list[int], client_bound: bool,
            errors: dict[str, int] | None = None) -> WorkerOpenLoop:
    lag = new_histogram()
    for value in lags:
        lag.record_value(value)
    phase = SentResult.of(_result(latencies, errors))
    return WorkerOpenLoop(worker, 100 + worker, "host", {"steady": phase}, phase, encode(lag),
                          0.1 * worker, client_bound, 0.0, worker)


def test_one_late_worker_makes_the_window_client_bound_and_is_named() -> None:
    merged, rows = merge_open_loop([
        _report(1, [1000] * 100, [50_000] * 100, True, {"timeout": 2}),
        _report(0, [2000] * 100, [20] * 100, False)])
    assert merged.client_bound
    assert merged.phases["steady"].completed == 200
    assert merged.phases["steady"].errors["timeout"] == 2
    assert merged.lag_p99_us >= 49_000           # the merged lag carries the late worker's
    assert merged.drain_s == pytest.approx(0.1) and merged.unsettled == 1
    assert [row["worker"] for row in rows] == [0, 1] and merged.workers == rows
    assert rows[0]["lag_p99_ms"] == pytest.approx(0.02, abs=1e-3)
    assert behind(rows) == ["worker 1 (lag p99 50.0ms)"]


def test_rows_over_windows_add_requests_and_keep_the_worst_lag() -> None:
    first = {"worker": 0, "host": "h", "pid": 1, "requests": 10, "lag_p99_ms": 0.2,
             "cpu_s": 1.0, "client_bound": False}
    second = {**first, "requests": 5, "lag_p99_ms": 3.0, "cpu_s": 0.5, "client_bound": True}
    [row] = combine_rows([[first], [second]])
    assert row["requests"] == 15 and row["cpu_s"] == 1.5 and row["windows"] == 2
    assert row["lag_p99_ms"] == 3.0 and row["client_bound"]


def test_the_missing_extra_names_the_key_and_the_install() -> None:
    message = missing_ray("stages.latency.workers", 4)
    assert "stages.latency.workers" in message
    assert "pip install 'serve-pipeline[ray]'" in message and "\n" not in message



def test_reports_show_each_load_worker_and_the_late_one() -> None:
    body = json.loads((DATA / "record_triton.json").read_text())
    saturation = next(stage for stage in body["stages"] if stage["name"] == "saturation")
    saturation["details"]["load_workers"] = [
        {"worker": 0, "host": "a", "pid": 1, "requests": 900, "lag_p99_ms": 0.4,
         "cpu_s": 1.5, "client_bound": False, "windows": 3},
        {"worker": 1, "host": "b", "pid": 2, "requests": 900, "lag_p99_ms": 12.5,
         "cpu_s": 1.6, "client_bound": True, "windows": 3}]
    record = RunRecord.from_json(body)
    markdown = render_markdown(record)
    assert "**Load workers**" in markdown
    assert "| saturation | 1 | b | 900 | 12.50 ms | 1.60 s | BEHIND |" in markdown
    page = render_html(record)
    assert "Load workers" in page and "BEHIND" in page and "12.50 ms" in page
    assert "Load workers" not in render_markdown(RunRecord.from_json(
        json.loads((DATA / "record_triton.json").read_text())))


def _sharded_spec(project: Path) -> Path:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 8, warmup: 3s, duration: 10s, workers: 2}"))
    return spec


def test_preflight_refuses_a_ray_address_where_nothing_answers(project: Path) -> None:
    loaded = load_spec(_sharded_spec(project))
    with socket.socket() as probe:          # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{probe.getsockname()[1]}"
    [check] = load_worker_checks(loaded, {"RAY_ADDRESS": closed})
    assert check.status == "failed" and check.exit_kind == 2
    assert check.detail.startswith(f"RAY_ADDRESS: nothing answers at {closed}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        [check] = load_worker_checks(loaded, {"RAY_ADDRESS": address})
    assert check.status == "ok" and address in check.detail and "latency.workers: 2" in \
        check.detail
    assert unreachable("no-port") == "'no-port' is not host:port"


def test_preflight_names_the_key_when_ray_is_missing(project: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_spec(_sharded_spec(project))
    monkeypatch.setitem(sys.modules, "ray", None)   # as Python marks a blocked import
    [check] = load_worker_checks(loaded, {})
    assert check.status == "failed" and check.exit_kind == 2
    assert check.detail == missing_ray("stages.latency.workers", 2)
    one = project / "one.yaml"
    one.write_text((project / "serve.yaml").read_text().replace(", workers: 2", ""))
    assert load_worker_checks(load_spec(one), {}) == []       # one worker: nothing to check
