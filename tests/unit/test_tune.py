"""tune without a server: the search space, the model's fit and predictions, pruning, the
record's wording, and `--write` keeping the user's comments and layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import SpecError
from pipeline.servers.specs import load_spec
from pipeline.tune.model import Observation, fit, predict
from pipeline.tune.prune import shortlist
from pipeline.tune.space import Config, build_space
from pipeline.tune.write import write_recommendation
from tests.support.htmldom import parse_html

RECOMMENDED = {"server": {"device": "cpu", "instances": 1, "batching": {
    "max_batch_size": 64, "max_queue_delay": "5ms", "preferred_batch_sizes": []}}}


def test_write_changes_only_the_server_values_and_keeps_comments(project: Path) -> None:
    spec = project / "serve.yaml"
    before = spec.read_text().splitlines()
    comments = write_recommendation(spec, RECOMMENDED)
    after = spec.read_text().splitlines()
    changed = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    assert changed == [
        ("  instances: 2                          # Triton instance_group count",
         "  instances: 1                          # Triton instance_group count"),
        ("    max_batch_size: 32", "    max_batch_size: 64"),
        ("    max_queue_delay: 2ms                # WITH unit: Triton gets 2000 microseconds",
         "    max_queue_delay: 5ms                # WITH unit: Triton gets 2000 microseconds"),
        ("    preferred_batch_sizes: [8, 16]", "    preferred_batch_sizes: []"),
    ]
    loaded = load_spec(spec)
    assert loaded.spec.server.instances == 1
    assert loaded.spec.server.batching.max_queue_delay.ms == 5
    # The comments on changed lines were kept, and each is named for the user to check.
    assert comments == [
        "server.instances: 2 -> 1; its comment was kept, check it still holds: "
        "# Triton instance_group count",
        "server.batching.max_queue_delay: 2ms -> 5ms; its comment was kept, check it still "
        "holds: # WITH unit: Triton gets 2000 microseconds"]


def test_write_refuses_a_result_that_is_not_a_valid_spec(project: Path) -> None:
    spec = project / "serve.yaml"
    text = spec.read_text()
    bad = {"server": {**RECOMMENDED["server"], "batching": {
        "max_batch_size": 64, "max_queue_delay": "40ms", "preferred_batch_sizes": []}}}
    with pytest.raises(SpecError, match="max_queue_delay"):
        write_recommendation(spec, bad)  # 40ms is over the example's 35ms queue budget
    assert spec.read_text() == text
    assert [p.name for p in project.iterdir() if p.name.endswith(".tmp")] == []


def test_space_defaults_narrowed_by_the_tune_block(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text() + "\ntune:\n  instances: [1, 2]\n  max_batch_size: [1, 16]"
                    "\n  max_queue_delay: [0us, 2ms, 40ms]\n")
    space = build_space(load_spec(spec).spec, gpu_present=False)
    # batch 1 batches nothing: one delay; 40ms is over the queue budget (35ms).
    # preferred_batch_sizes: the spec's [8, 16] and none, for batches over 1.
    assert sorted({(c.instances, c.max_batch_size, c.max_queue_delay_us) for c in space}) == [
        (1, 1, 0), (1, 16, 0), (1, 16, 2000), (2, 1, 0), (2, 16, 0), (2, 16, 2000)]
    assert len(space) == 10
    assert {c.preferred for c in space if c.max_batch_size == 16} == {(), (8, 16)}
    default = build_space(load_spec(project / "serve.yaml").spec, gpu_present=False,
                          cpu_count=2)
    assert {c.device for c in default} == {"cpu"}
    assert {c.instances for c in default} == {1, 2}


def _window(instances: int, concurrency: int, rps: float, batches: dict[int, int],
            per_batch_us: float, per_item_us: float) -> Observation:
    compute = sum(n * (per_batch_us + per_item_us * b) for b, n in batches.items())
    return Observation("cpu", instances, 32, concurrency, rps, 1.0, 2.0, 0.0, batches,
                       compute, False, rss_mb=300.0)


def test_the_model_recovers_compute_per_batch_and_ranks_bigger_batches_higher(
        project: Path) -> None:
    slo = load_spec(project / "serve.yaml").spec.slo
    # 1/throughput = 100µs per request + 900µs per batch / average batch size
    windows = [_window(1, 1, 1e6 / 1000, {1: 1000}, 500, 20),
               _window(1, 8, 1e6 / (100 + 900 / 8), {8: 300}, 500, 20),
               _window(1, 64, 1e6 / (100 + 900 / 32), {32: 200}, 500, 20)]
    model = fit(windows)
    assert model.fixed_us == pytest.approx(500, rel=1e-6)
    assert model.per_item_us == pytest.approx(20, rel=1e-6)
    assert model.request_cost_us == pytest.approx(100, rel=1e-6)
    big, small = (predict(model, Config("cpu", 1, size, 2000), slo) for size in (32, 1))
    assert big.feasible and small.feasible
    assert big.throughput_rps > 3 * small.throughput_rps
    assert big.max_rps == pytest.approx(1e6 / (100 + 900 / 32))
    assert big.to_json()["predicted"] is True
    # Without a delay batches form only by queueing: far less throughput within the SLO.
    eager = predict(model, Config("cpu", 1, 32, 0), slo)
    assert eager.throughput_rps < 0.6 * big.throughput_rps


def test_a_delay_over_the_slo_is_predicted_to_miss_and_pruned(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("p99: 50ms", "p99: 12ms").replace(
        "p95: 30ms", "p95: 12ms").replace("execution: 10ms", "execution: 0ms"))
    slo = load_spec(spec).spec.slo
    model = fit([_window(1, 1, 1000, {1: 1000}, 500, 20),
                 _window(1, 64, 20000, {32: 200}, 500, 20)])
    slow = predict(model, Config("cpu", 1, 32, 15000), slo)
    fast = predict(model, Config("cpu", 1, 32, 0), slo)
    chosen = shortlist([slow, fast], max_memory_mb=None, max_gpu_memory_mb=None)
    assert [p.config for p in chosen.ranked] == [fast.config]
    assert not slow.feasible and "misses the SLO" in chosen.pruned[slow.config]
    over = shortlist([fast], max_memory_mb=100.0, max_gpu_memory_mb=None)
    assert over.ranked == [] and "tune.max_memory" in over.pruned[fast.config]


def test_the_html_report_charts_measured_points_and_labels_predictions() -> None:
    from pipeline.report.tune import render_tune_html

    def candidate(label: str, rate: float, p99: float, meets: bool,
                  high: float | None) -> dict[str, object]:
        capacity = {"rps": rate, "low_rps": rate, "high_rps": high,
                    "bound": "exact" if high else "lower_bound",
                    "capped_by": f"a failing rate at {high}" if high else "the budget"}
        return {"config": {}, "label": label, "meets_slo": meets,
                "missed": [] if meets else ["latency.p99 failed"],
                "predicted": {"throughput_rps": rate * 2, "predicted": True},
                "measured": {"throughput_rps": rate, "p99_ms": p99, "rss_mb": 300.0,
                             "gpu_mb": None, "capacity": capacity}}

    winner = candidate("cpu x2 batch 32 delay 0", 2000.0, 8.0, True, 2300.0)
    section = {"candidates": [winner, candidate("cpu x1 batch 1 delay 0", 500.0, 70.0, False,
                                                None)],
               "winner": winner, "why": "cpu x2 batch 32 delay 0 <won>", "space_size": 34,
               "configs_explored": 2, "configs_measured": 2, "wall_s": 80.0, "budget_s": 600.0,
               "budget_exhausted": False, "restarts": "one tritonserver",
               "gpu_memory": "not measured (no GPU or NVML here)", "slo": {"p99_ms": 50.0},
               "pruned": [{"label": "cpu x1 batch 64 delay 5ms", "reason": "cannot win"}],
               "recommended": {"server": {"device": "cpu", "instances": 2, "batching": {
                   "max_batch_size": 32, "max_queue_delay": "0us",
                   "preferred_batch_sizes": []}}}}
    html = render_tune_html({"name": "m", "run_id": "r", "status": "passed", "tune": section})
    chart = parse_html(html).by_id("tune-chart")
    assert chart is not None and html.count("<circle") == 2 and "SLO p99 50 ms" in html
    # Each config's interval as a bar; the lower bound's as an arrow, with no top.
    assert len(chart.find_all("line", "interval")) == 2
    assert len(chart.find_all("path", "lower-bound")) == 1
    assert "interval 2,000/s to 2,300/s" in html and "interval 500/s to a lower bound" in html
    # Axes at round ticks: 0, 500, 1,000, ... and 0, 20, 40, ... ms.
    labels = [text.text() for text in chart.find_all("text")]
    assert {"0", "500", "1,000", "2,500"} <= set(labels) and {"20", "40", "80"} <= set(labels)
    assert "<style>" in html and "badge" in html        # the run report's stylesheet
    assert "&lt;won&gt;" in html and "4,000/s (predicted, measured/predicted 0.50)" in html
    assert "not measured" in html and "max_batch_size: 32" in html

    # With the machine's drift, the chart draws the intervals the pick was decided on.
    drifted = render_tune_html({"name": "m", "run_id": "r", "status": "passed",
                                "tune": {**section, "drift": {"factor": 1.5, "text": "x1.5"}}})
    assert "interval 1,333/s to 3,450/s" in drifted and "widened by the machine's drift" \
        in drifted
    assert "interval 333/s to a lower bound" in drifted


def test_the_docs_state_the_examples_space_as_tune_builds_it(project: Path) -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    found = re.search(r"The example's space is (\d+) configs per instance count: (\d+) on 2 "
                      r"cores, (\d+) on 4 or more", text.replace("\n", " ").replace("   ", " "))
    assert found, "docs/tune.md no longer states the example's space"
    spec = load_spec(project / "serve.yaml").spec
    assert [int(n) for n in found.groups()] == [
        len(build_space(spec, gpu_present=False, cpu_count=cores)) for cores in (1, 2, 4)]


def test_the_model_prunes_only_beyond_its_error_measured_on_the_baseline(
        project: Path) -> None:
    from pipeline.tune.prune import MODEL_MARGIN, measured_margin

    assert measured_margin([]) == MODEL_MARGIN
    assert measured_margin([(1000.0, 1100.0)]) == MODEL_MARGIN      # within the default
    assert measured_margin([(77_978.0, 1_972.0)]) > 38                # 40x off
    slo = load_spec(project / "serve.yaml").spec.slo
    model = fit([_window(1, 1, 1e6 / 1000, {1: 1000}, 500, 20),
                 _window(1, 8, 1e6 / (100 + 900 / 8), {8: 300}, 500, 20),
                 _window(1, 64, 1e6 / (100 + 900 / 32), {32: 200}, 500, 20)])
    best = predict(model, Config("cpu", 1, 32, 2000), slo)
    weak = predict(model, Config("cpu", 1, 1, 0), slo)
    assert best.throughput_rps * 0.7 > weak.throughput_rps * 1.3, "the case needs a gap"
    assert weak.config in shortlist([best, weak], None, None).pruned
    wide = shortlist([best, weak], None, None, margin=measured_margin([(40.0, 1.0)]))
    assert [p.config for p in wide.ranked] == [best.config, weak.config]
