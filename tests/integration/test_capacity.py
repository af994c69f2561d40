"""The knee and the open-loop capacity on a real Triton.

The example in TorchScript and in ONNX form (which usually reach the closed-loop cap of 4
within the SLO: the knee is then a lower bound). A hold at slo.min_throughput comes first
(it decides the gate); the capacity is the highest rate that passed a hold (10 s here,
judged on its blocks); whether it also holds on a fresh server is a measurement on a
noisy machine, so `benchmarks/capacity.py` reports that (a ratio per model, SlowNet's
CPU-bound model among them), not a test. Then a slow good model (5 ms per execution, one
at a time: a wait, so a busy machine does not move its limit) with the default search,
which misses the SLO before the cap (an exact knee and an exact capacity), and the gate
failing on its threshold.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pipeline.record import RunRecord
from pipeline.report.formats import render
from pipeline.spec.stage_settings import CapacitySpec
from tests.support.cli import cli, latest_record
from tests.support.specs import fast_spec

pytestmark = pytest.mark.integration

# The budget as the search sizes it; a hold passes after 10 s (the default span is longer).
SATURATION = ("  saturation: {max_concurrency: 4, probe_duration: 1s,\n"
              "               capacity: {step: 500ms, hold: 5s, span: 10s}}\n")

# One execution takes 5 ms whatever else happens, one request per execution on one
# instance: at most 200/s.
FIVE_MS_MODEL = '''"""A slow good model: 5 ms per execution."""

import time

import torch
from torch import nn


class FiveMs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                    nn.Linear(64, 4))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        time.sleep(0.005)
        return torch.softmax(self.layers(features), dim=-1)


def build() -> nn.Module:
    return FiveMs()
'''


def write_spec(project: Path) -> Path:
    spec = project / "serve.yaml"
    text = fast_spec(spec.read_text())
    head, _, rest = text.partition("  saturation: {max_concurrency: 4")
    text = head + SATURATION + rest.partition("settle: 250ms}}\n")[2]
    spec.write_text(text)
    return spec




def check_knee_and_capacity(stage: dict[str, Any], slo_ms: float, threshold: float,
                            span_s: float) -> None:
    """The knee is the best probe, the capacity the highest rate held (for `span_s` when
    above half the knee's throughput), the gate decided by a hold at its threshold."""
    metrics, details = stage["metrics"], stage["details"]
    passing = [p["throughput_rps"] for p in details["probes"] if p["passed"]]
    assert metrics["knee_throughput_rps"] == max(passing)
    capped = details["stop_reason"].startswith("reached max_concurrency")
    assert details["knee_bound"] == ("lower" if capped else "exact")
    assert capped == (metrics["knee_lower_bound"] == 1.0)

    low = details["capacity_interval_rps"][0]
    assert low == metrics["capacity_rps"]
    steps = details["capacity_steps"]
    # Below the knee's throughput (there an open loop only builds a queue); the capacity
    # is the highest rate that passed a hold.
    assert steps[0]["rate_rps"] < metrics["knee_throughput_rps"]
    assert any(s["hold"] and s["passed"] and s["rate_rps"] == low for s in steps), steps
    assert metrics["capacity_p99_ms"] <= slo_ms
    held = next(s for s in steps if s["hold"] and s["passed"] and s["rate_rps"] == low)
    # A hold waits for its span only above half the knee's throughput (under it a server
    # slowed to half its speed still keeps up).
    if held["rate_rps"] > 0.5 * metrics["knee_throughput_rps"]:
        assert held["duration_s"] >= span_s, held
    # Threshold first: the first hold was at or above slo.min_throughput; the gate passed
    # on it, or (when the client fell behind there) on the higher rate held later.
    assert steps[0]["hold"] and steps[0]["rate_rps"] >= threshold
    assert details["capacity_threshold_outcome"] in ("held", "undecided")
    gate = next(g for g in stage["gates"] if g["name"] == "saturation.capacity_rps")
    assert gate["outcome"] == "passed" and low >= threshold
    assert details["capacity_p99_interval_ms"][1] <= slo_ms


# On the TorchScript example only: the search does not see the model's format (an ONNX
# run took 60 s and tested the same code); ONNX serving is test_pipeline_triton.py's.
def test_the_knee_is_the_best_probe_and_capacity_a_held_rate(project: Path) -> None:
    write_spec(project)
    result = cli(["run", "--stages", "saturation"], project)
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(project)
    stage = next(s for s in record["stages"] if s["name"] == "saturation")
    metrics, details = stage["metrics"], stage["details"]
    check_knee_and_capacity(stage, slo_ms=50.0, threshold=100.0, span_s=10.0)
    # The example usually passes at the cap (4), unless its throughput plateaus first.
    capped = details["stop_reason"].startswith("reached max_concurrency")
    assert ("cap reached" in render(RunRecord.from_json(record), "terminal")) == capped
    low, high = details["capacity_interval_rps"]
    if details["capacity_bound"] == "exact":
        assert high is not None and low < high
    else:
        # On a busy 2-core machine the client may fall behind before the example's server
        # does; then the search says so and reports a lower bound, never an exact capacity.
        assert details["capacity_bound"] == "lower" and high is None
        assert "client fell behind" in details["capacity_stop_reason"] or \
            "budget" in details["capacity_stop_reason"]
        assert "lower bound" in render(RunRecord.from_json(record), "markdown")
    print(f"\nknee {metrics['knee_throughput_rps']:.0f}/s, capacity "
          f"{metrics['capacity_rps']:.0f}/s ({details['capacity_bound']}), interval "
          f"{low:.0f}-{high}, saturation {stage['duration_s']:.1f}s")


def five_ms_project(project: Path, min_throughput: str,
                    knee: str = "max_concurrency: 16, probe_duration: 2s") -> None:
    """The example served by FiveMs, without batching, with the default capacity search."""
    (project / "five_ms.py").write_text(FIVE_MS_MODEL)
    text = fast_spec((project / "serve.yaml").read_text())
    text = text.replace("source: examples/mlp/model.pt", "source: examples/mlp/weights.pt")
    text = text.replace("format: torchscript", "format: eager\n  entrypoint: five_ms.py:build")
    head, _, rest = text.partition("  batching:\n")
    text = head + "  batching: {max_batch_size: 1, max_queue_delay: 0ms}\n" + \
        "  ports:" + rest.partition("  ports:")[2]
    text = text.replace("min_throughput: 100/s", f"min_throughput: {min_throughput}")
    head, _, rest = text.partition("  saturation: {max_concurrency: 4")
    text = head + "  saturation: {" + knee + "}\n" + \
        rest.partition("settle: 250ms}}\n")[2]
    (project / "serve.yaml").write_text(text)


def saturation_of(project: Path) -> dict[str, Any]:
    record = latest_record(project)
    stage: dict[str, Any] = next(s for s in record["stages"] if s["name"] == "saturation")
    return stage


def test_a_slow_good_model_gets_an_exact_capacity_near_its_limit(project: Path) -> None:
    # The default search on a model of tens to hundreds of requests per second: the budget
    # fits the rate (the threshold hold, then steps sized by the samples a bound needs).
    five_ms_project(project, "50/s")
    quiet = os.getloadavg()[0] < 0.5 * (os.cpu_count() or 1)
    result = cli(["run", "--stages", "saturation"], project, timeout=400)
    quiet = quiet and os.getloadavg()[0] < 0.5 * (os.cpu_count() or 1)
    stage = saturation_of(project)
    metrics, details = stage["metrics"], stage["details"]
    steps = [(round(s["rate_rps"]), s["hold"], s["verdict"])
             for s in details.get("capacity_steps", [])]
    summary = f"{stage['message']}; steps {steps}"
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert details["capacity_threshold_outcome"] == "held", summary
    assert details["capacity_bound"] == "exact", summary
    assert 50 <= metrics["capacity_rps"] <= 200, summary
    # An exact knee: at concurrency 16 one 5 ms execution at a time answers in ~80 ms, past
    # the 50 ms SLO, so the ramp stops before its cap.
    assert not details["stop_reason"].startswith("reached max_concurrency"), summary
    assert any(reason in details["stop_reason"]
               for reason in ("SLO missed", "throughput stopped growing")), summary
    check_knee_and_capacity(stage, slo_ms=50.0, threshold=50.0,
                            span_s=CapacitySpec().span.seconds)
    # Within 70-100% of the physical limit on a quiet machine (load average under half
    # the cores before and after). Other work that takes the cores in episodes lowers the
    # rate that holds the p99 for its span far more than the knee (a closed loop waits out a
    # stall; arrivals do not, and a stall of a few hundred ms times requests out at any
    # rate): that capacity is measured and printed, not held to this bound.
    if quiet and metrics["knee_throughput_rps"] >= 0.8 * 200:
        assert metrics["capacity_rps"] >= 0.7 * 200, summary
    print(f"\nfive_ms (quiet: {quiet}): knee {metrics['knee_throughput_rps']:.0f}/s, capacity "
          f"{metrics['capacity_rps']:.0f}/s ({metrics['capacity_rps'] / 200:.0%} of 200/s), "
          f"search {metrics['capacity_search_s']:.0f}s")


def test_the_capacity_gate_fails_on_its_threshold(project: Path) -> None:
    # 400/s is twice what one 5 ms execution at a time can do: the hold there fails. The
    # knee is not the subject here: a short ramp (a lower bound at concurrency 4).
    # The gate is decided by that first hold: a budget that fits little more is enough (the
    # capacity figure under the threshold is test_a_slow_good_model's subject).
    five_ms_project(project, "400/s", knee="max_concurrency: 4, probe_duration: 1s, "
                    "capacity: {budget: 32s}")
    result = cli(["run", "--stages", "saturation"], project, timeout=400)
    assert result.returncode == 1, result.stdout + result.stderr
    stage = saturation_of(project)
    gate = next(g for g in stage["gates"] if g["name"] == "saturation.capacity_rps")
    assert gate["outcome"] == "failed", gate
    print(f"\n{gate}; saturation {stage['duration_s']:.1f}s")
