"""A model with a variable-length input (shape [-1, 8]) promoted on real servers, with the
requests of a data file: Triton renders dims -1, TorchServe's handler takes each length;
parity and the input probes cover the smallest, middle and largest size, and the latency
record holds p50/p99 per size next to the overall figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, latest_record
from tests.support.processes import TORCHSERVE, TRITON, processes_under
from tests.support.specs import SHORT_RUN_ERROR_RATE, with_stages

pytestmark = pytest.mark.integration

# Short: these tests are about shapes, not measurement (a 2 s window at concurrency 2 may
# leave a percentile undecided; one within its threshold is accepted).
STAGES = """
stages:
  readiness: {timeout: 240s}
  parity: {atol: 1e-4, rtol: 1e-4}
  failure: {probes: [wrong_shape, wrong_dtype, batch_over_max, unknown_model]}
  latency: {data: requests.jsonl, concurrency: 2, warmup: 500ms, duration: 2s,
            stability: {windows: 1, max_windows: 2}, verdict: {accept_inconclusive: true}}
  saturation: {enabled: false}
"""
SIZES = ["4", "16", "96"]


def variable_project(project: Path, kind: str) -> Path:
    folder = project / "examples" / "variable_length"
    text = (folder / "serve.yaml").read_text().replace(*SHORT_RUN_ERROR_RATE)
    if kind == "torchserve":
        text = text.replace("kind: triton", "kind: torchserve").replace(
            "  backend: python\n", "")
    (folder / "serve.yaml").write_text(with_stages(text, STAGES))
    return folder


def stage(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in record["stages"] if s["name"] == name)
    return found


def check_the_sizes(record: dict[str, Any]) -> None:
    assert record["status"] == "passed", record["stages"]
    parity = stage(record, "parity")
    # At each of three sizes, the first 8 of the 16 samples alone, then all 16 in two full
    # batches of 8 (max_batch_size), each request sent twice.
    assert parity["metrics"]["parity_requests"] == 2 * 3 * (8 + 2)
    assert parity["metrics"]["parity_mismatched"] == 0
    probes = {p["probe"]: p for p in parity["details"]["probes"]}
    for name in ("wrong_shape", "wrong_dtype", "batch_over_max"):
        by_size = probes[name]["by_size"]
        assert [entry["size"] for entry in by_size] == [4, 16, 96]
        assert all(400 <= entry["status"] < 500 for entry in by_size), by_size
    assert "by_size" not in probes["unknown_model"]
    sizes = stage(record, "latency")["details"]["sizes"]
    assert list(sizes) == SIZES
    assert all(row["requests"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
               for row in sizes.values()), sizes
    # The file sends its three lengths in turn: equally often, give or take the last turn.
    counts = [row["requests"] for row in sizes.values()]
    assert max(counts) - min(counts) <= 2, counts


def test_a_variable_length_model_promotes_on_triton(project: Path) -> None:
    folder = variable_project(project, "triton")
    result = cli(["promote", "staging"], folder)
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(folder)
    check_the_sizes(record)
    wrote = cli(["materialize", "staging", "--to", "served"], folder)
    assert wrote.returncode == 0, wrote.stderr
    config = (folder / "served" / "sequence-sum" / "config.pbtxt").read_text()
    assert "dims: -1\n  dims: 8" in config
    report = cli(["report", record["run_id"], "--format", "markdown"], folder)
    assert "**Latency by size** (client p50 / p99): size 4:" in report.stdout
    assert processes_under(folder, TRITON) == []


def test_a_variable_length_model_promotes_on_torchserve(project: Path) -> None:
    folder = variable_project(project, "torchserve")
    result = cli(["promote", "staging"], folder)
    assert result.returncode == 0, result.stdout + result.stderr
    check_the_sizes(latest_record(folder))
    assert processes_under(folder, TORCHSERVE) == []
