"""`compare` on real Triton and TorchServe processes: the figures come from the measured
windows of each server, the windows were interleaved, the verdict follows a handicap
(and flips with it), and bad input is refused before anything starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.htmldom import parse_html
from tests.support.specs import fast_spec

from .test_report_chromium import chromium

pytestmark = pytest.mark.integration

SHORT = ["--rounds", "3", "--window", "0.5", "--max-concurrency", "4", "--format", "json"]
# Load points 1 and 2 only, for tests whose subject is not the curve.
TWO_POINTS = ["--rounds", "3", "--window", "0.5", "--max-concurrency", "2", "--format", "json"]

# A model whose every execution waits 40 ms, as one waiting on an accelerator does. On a
# 2-core machine shared with other jobs, CPU-bound work cannot show what a second
# instance buys (the cores are the limit, and they are contended); a wait can: one
# instance serves at most 25 batches a second, two serve twice that.
WAITING_MODEL = """import time

import torch


class Waiting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.04)
        return torch.softmax(self.linear(x), dim=-1)


def build() -> torch.nn.Module:
    return Waiting()
"""

WAITING_SPEC = """version: 1
name: waiting-model
model:
  source: waiting.pt
  format: eager
  entrypoint: waiting.py:build
  inputs:
    - {name: features, dtype: float32, shape: [16]}
  outputs:
    - {name: scores, dtype: float32, shape: [4]}
server:
  kind: triton
  instances: 1
  batching: {max_batch_size: 1, max_queue_delay: 0ms}   # one item per execution
slo:
  p99: 2s
  error_rate: 0.1%
stages:
  readiness: {timeout: 180s}
  parity: {data: examples/mlp/samples.npz}
  failure: {probes: [wrong_dtype]}
  latency: {concurrency: 4, warmup: 500ms, duration: 2s}
  saturation: {max_concurrency: 4, probe_duration: 1s}
publish:
  store: file://.serve-pipeline/store
"""


# A model that is wrong only inside TorchServe's workers (which import TorchServe's `ts`
# package): a real kind of bug, an environment difference, and parity must catch it.
OFF_UNDER_TORCHSERVE = """import sys

import torch


class OffUnderTorchServe(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.softmax(self.linear(x), dim=-1)
        return scores + 0.5 if "ts" in sys.modules else scores


def build() -> torch.nn.Module:
    return OffUnderTorchServe()
"""


def write_eager_model(project: Path, name: str, source: str) -> None:
    from tests.support.bad_models import write_bad_model  # a 16 -> 4 layer's weights

    _, weights = write_bad_model(project, "wrong_dtype")
    shutil.copyfile(weights, project / f"{name}.pt")
    (project / f"{name}.py").write_text(source)


def compare(project: Path, *args: str, spec: str = "serve.yaml",
            env: dict[str, str] | None = None) -> dict[str, Any]:
    result = cli(["compare", "-f", spec, *args], project, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    body: dict[str, Any] = json.loads(result.stdout)
    return body


def check_figures_from_windows(record: dict[str, Any]) -> None:
    """Every per-server figure recomputed from that server's own windows."""
    rounds = record["plan"]["rounds"]
    for kind in record["servers_compared"]:
        server = record["servers"][kind]
        own = [w for w in record["windows"] if w["kind"] == kind]
        assert len(own) == rounds * len(record["plan"]["load_points"]) == server["windows"]
        knee = max((p for p in server["curve"] if p["met_slo"]),
                   key=lambda p: (p["throughput_rps"], -p["p99_ms"]))
        assert server["knee_concurrency"] == knee["concurrency"]
        at_knee = [next(w["throughput_rps"] for w in own
                        if w["round"] == r and w["concurrency"] == knee["concurrency"])
                   for r in range(rounds)]
        assert server["throughput_at_slo_rounds"] == at_knee
        # The headline is a point that was run, within the rounds that make it up.
        assert server["throughput_at_slo"] == knee["throughput_rps"]
        assert min(at_knee) * 0.95 <= server["throughput_at_slo"] <= max(at_knee) * 1.05
        assert server["throughput_at_slo"] <= max(p["throughput_rps"] for p in server["curve"])
        for point in server["curve"]:
            at = [w for w in own if w["concurrency"] == point["concurrency"]]
            # Merged windows: completed requests over their summed time (equal windows).
            mean = statistics.fmean(w["throughput_rps"] for w in at)
            assert point["throughput_rps"] == pytest.approx(mean, rel=0.05)
            # Between the windows' own p99s, up to rounding: a percentile's rank is rounded
            # per window and once for the merge, so with ~100 requests a window the merged
            # p99 can be the next sample past the highest window's.
            assert min(w["p99_ms"] for w in at) * 0.95 - 0.01 <= point["p99_ms"] <= \
                max(w["p99_ms"] for w in at) * 1.05 + 0.01
        assert server["p99_ms"] == knee["p99_ms"]
        # The server's own counters over exactly its windows: every item it executed.
        executed = sum(int(size) * count for size, count in server["batch_sizes"].items())
        sent = sum(w["requests"] for w in own)
        assert sent <= executed <= sent * 1.05 + 32, (kind, sent, executed)
    first, second = (record["servers"][k] for k in record["servers_compared"])
    assert first["throughput_at_slo_rounds"] != second["throughput_at_slo_rounds"]
    assert first["batch_sizes"] != second["batch_sizes"]


def check_interleaved(record: dict[str, Any]) -> None:
    windows = record["windows"]
    assert record["plan"]["interleaved"] is True
    assert [w["index"] for w in windows] == list(range(len(windows)))
    starts = [w["started_s"] for w in windows]
    assert starts == sorted(starts)        # one after another, never two at once
    kinds = [w["kind"] for w in windows]
    pairs = [tuple(kinds[i:i + 2]) for i in range(0, len(kinds), 2)]
    assert all(a != b for a, b in pairs)
    # Who goes first alternates by round: drift favours neither.
    per_round = len(record["plan"]["load_points"]) * 2
    firsts = [kinds[r * per_round] for r in range(record["plan"]["rounds"])]
    assert firsts[0] != firsts[1] and firsts[0] == firsts[2]
    for w in windows:
        assert (w["concurrency"], w["round"]) == \
            (windows[w["index"] ^ 1]["concurrency"], windows[w["index"] ^ 1]["round"])


def test_two_inputs_of_different_dtypes_compared_with_report(project: Path,
                                                             tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    example = project / "examples" / "two_inputs" / "serve.yaml"
    example.write_text(example.read_text().replace(
        "probe_duration: 2s}", "probe_duration: 2s, capacity: {budget: 4s, step: 250ms}}"))
    record = compare(project, *SHORT, spec="examples/two_inputs/serve.yaml",
                     env={**os.environ, "GITHUB_STEP_SUMMARY": str(summary)})
    markdown = summary.read_text()
    assert markdown.startswith(f"## triton vs torchserve · scored-by-category · compare "
                               f"{record['compare_id']}")
    assert record["verdict"]["line"] in markdown
    assert set(record["servers"]) == {"triton", "torchserve"}
    for kind in ("triton", "torchserve"):
        server = record["servers"][kind]
        assert server["status"] == "measured", server
        for key in ("throughput_at_slo", "p99_ms", "cold_start_s", "rss_mib",
                    "batch_sizes", "failure_path"):
            assert server[key] is not None, (kind, key)
        assert server["failure_path"]["wrong_dtype"]["status"] == 400
        assert server["failure_path"]["wrong_dtype"]["stays_up"] is True
        raised = server["failure_path"]["model_exception"]
        assert raised["status"] == 500 and raised["stays_up"] is True, raised
        assert "raised on purpose" in raised["error"]
        # Each server's open-loop capacity, as promote states it, or why there is none.
        figure = server["capacity"]
        if figure is None:
            # A short budget on a busy machine may confirm no rate: then it says why.
            assert server["capacity_note"] and "bound" in server["capacity_search"], server
        else:
            assert figure["bound"] in ("exact", "lower_bound") and figure["capped_by"]
            assert figure["low_rps"] < figure["rps"] <= (figure["failed_rps"] or figure["rps"])
            assert figure["failed_rps"] is None or figure["high_rps"] > figure["failed_rps"]
    assert {"winner", "margin"} <= set(record)
    shown = {t["key"]: t["per_kind"] for t in record["translation"]}
    assert shown["server.batching.max_queue_delay"]["triton"] == \
        "max_queue_delay_microseconds: 1000"
    assert shown["server.batching.max_queue_delay"]["torchserve"] == \
        "maxBatchDelay: 1 (milliseconds)"
    check_figures_from_windows(record)
    check_interleaved(record)
    example = project / "examples" / "two_inputs"
    run_dir = example / ".serve-pipeline" / "runs" / record["compare_id"]
    assert json.loads((run_dir / "comparison.json").read_text()) == record
    for kind in ("triton", "torchserve"):   # each server's parity record and log
        assert (run_dir / kind / "record.json").is_file()
    dom = parse_html(chromium(run_dir / "report.html", tmp_path / "profile",
                              "--dump-dom").stdout)
    for element_id in ("verdict", "side-by-side", "latency-chart", "throughput-chart",
                       "failure-path", "translation", "windows"):
        assert dom.by_id(element_id) is not None, element_id
    windows = dom.by_id("windows")
    assert windows is not None and len(windows.find_all("tr")) == len(record["windows"]) + 1


def test_the_verdict_follows_a_handicap_and_flips_with_it(project: Path) -> None:
    write_eager_model(project, "waiting", WAITING_MODEL)
    (project / "serve.yaml").write_text(WAITING_SPEC)
    # Concurrency 1 and 2: two instances serve twice what one does from 2 on, so that is
    # where the handicap shows; at 40 ms an execution, 500 ms windows hold 12-25 requests.
    short = [*TWO_POINTS, "--no-exception-probe", "--no-capacity"]
    triton_ahead = compare(project, *short, "--instances", "triton=2,torchserve=1")
    torchserve_ahead = compare(project, *short, "--instances", "triton=1,torchserve=2")
    for record, winner in ((triton_ahead, "triton"), (torchserve_ahead, "torchserve")):
        assert record["winner"] == winner, record["verdict"]
        assert record["verdict"]["basis"] == "beyond_spread"
        assert record["margin"] > 0.3, record["verdict"]
        check_figures_from_windows(record)
        check_interleaved(record)
    assert triton_ahead["servers"]["triton"]["config"] != \
        torchserve_ahead["servers"]["triton"]["config"]


def test_a_server_failing_parity_is_reported_and_the_other_measured(project: Path) -> None:
    write_eager_model(project, "off", OFF_UNDER_TORCHSERVE)
    spec = WAITING_SPEC.replace("waiting", "off").replace("p99: 2s", "p99: 100ms")
    (project / "serve.yaml").write_text(spec)
    record = compare(project, "--rounds", "2", "--window", "0.5", "--max-concurrency", "2",
                     "--format", "json", "--no-exception-probe", "--no-capacity")
    failed, measured = record["servers"]["torchserve"], record["servers"]["triton"]
    assert failed["status"] == "failed" and failed["failed_at"] == "parity", failed
    assert "parity.mismatched_elements" in failed["message"]
    assert "throughput_at_slo" not in failed
    assert {w["kind"] for w in record["windows"]} == {"triton"}
    assert measured["status"] == "measured" and measured["throughput_at_slo"] > 0
    assert record["winner"] == "triton" and record["margin"] is None
    assert record["verdict"]["basis"] == "only_one_qualified"
    assert "torchserve" in record["verdict"]["line"]


def test_a_spec_only_triton_can_serve_is_refused_naming_the_key(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("backend: python", "backend: onnxruntime")
                    .replace("runtime: process", "runtime: docker\n  image: {base: x:1}")
                    .replace("examples/mlp/model.pt", "examples/mlp/model.onnx")
                    .replace("format: torchscript", "format: onnx"))
    result = cli(["compare"], project, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "server.backend: 'onnxruntime' is a Triton-only backend" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / ".serve-pipeline" / "runs").exists()


def test_tuned_compares_each_kind_at_the_config_tune_recommends(project: Path) -> None:
    # One config in the space (batch 4, not the spec's 32): tune verifies it for each kind.
    spec = project / "serve.yaml"
    spec.write_text(fast_spec(spec.read_text()) + "\ntune:\n  instances: [1]\n"
                    "  max_batch_size: [4]\n  max_queue_delay: [1ms]\n"
                    "  preferred_batch_sizes: [[]]\n  verify: 1\n  explore_window: 500ms\n")
    # The tuning is the subject: two load points are enough of a compare after it.
    record = compare(project, *TWO_POINTS, "--tuned", "--no-exception-probe", "--no-capacity")
    for kind in ("triton", "torchserve"):
        server = record["servers"][kind]
        assert server["tuned"]["space_size"] == 1, server["tuned"]
        assert "batch 32" in server["tuned"]["baseline"]     # the spec's own, measured too
        drift = server["tuned"]["drift"]
        assert drift is not None and drift["factor"] >= 1.0 and drift["text"], drift
        if server["tuned"]["config"] is not None:
            # The one config of the space, or the baseline when it did better.
            found = re.search(r"batch (4|32) ", server["tuned"]["config"])
            assert found, server["tuned"]["config"]
            size = found.group(1)
            wanted = rf"max_batch_size: {size}\b" if kind == "triton" else \
                rf'"batchSize":\s*{size}\b'
            assert re.search(wanted, server["config"]), server["config"]
        else:
            assert "compared as written" in server["tuned"]["note"]
    runs = project / ".serve-pipeline" / "runs" / record["compare_id"]
    assert (runs / "triton" / "tune").is_dir() and (runs / "torchserve" / "tune").is_dir()


def test_java_missing_is_named_before_anything_starts(project: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(bare)
    result = cli(["compare"], project, timeout=60, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: preflight: torchserve: server.java: java not found on PATH: TorchServe " \
           "needs Java 17+" in result.stderr
    assert not (project / ".serve-pipeline" / "runs").exists()
