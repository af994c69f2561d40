"""The regression check on real Triton: the candidate and the live release served side by
side, measured in interleaved rounds and judged against the margin.

The model sleeps a fixed time per execution (one item per execution, one instance), so
its latency and throughput follow that time; the slowed candidate sleeps 0.4 ms longer,
which with the server's own work per execution (1-2 ms here) makes it about 25-40%
slower end to end, beyond the 10% margin by more than the noise of its median.

On a busy 2-core machine a window's percentiles move by 10-30% from one window to the
next (the machine's own stalls): the A/A runs are judged on the median, throughput and
errors against a 20% margin, which they must clear; at 10%, or on the tail, they can
stay inconclusive through the cap (which refuses, as it should). The benchmarks page's
benchmark measures how often."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_example_project
from tests.support.cli import cli, latest_record
from tests.support.delayed_model import REGRESSION, SAME, delayed_project, use_entrypoint
from tests.support.specs import (
    TORCHSERVE_FAST_STAGES,
    fast_spec,
    torchserve_spec,
    without_saturation,
)

pytestmark = pytest.mark.integration


def promote(project: Path, env: dict[str, str] | None = None) -> tuple[int, str, dict[str,
                                                                                    Any]]:
    result = cli(["promote", "staging"], project, timeout=240, env=env)
    record = latest_record(project)
    stage = next(s for s in record["stages"] if s["name"] == "regression")
    return result.returncode, result.stdout + result.stderr, stage


def gates_of(stage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {gate["name"]: gate for gate in stage["gates"]}


def pointer(project: Path) -> Any:
    return json.loads(cli(["history", "staging", "--format", "json"], project).stdout)


@pytest.fixture(scope="module")
def live_delayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The delayed model promoted once, nothing live before it: the live release the next
    two tests measure against (each in a copy of this project, store included)."""
    project = copy_example_project(tmp_path_factory.mktemp("live-delayed"))
    spec = project / "serve.yaml"
    spec.write_text(without_saturation(fast_spec(spec.read_text())))
    delayed_project(project, margin=SAME)
    code, output, first = promote(project)
    assert code == 0, output[-3000:]
    assert first["status"] == "passed" and "nothing is live" in first["message"]
    return project


def copy_of(live: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = folder / "project"
    shutil.copytree(live, project, symlinks=True)
    monkeypatch.chdir(project)
    return project


def test_the_same_release_against_itself_is_no_regression(
        live_delayed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_of(live_delayed, tmp_path, monkeypatch)
    code, output, same = promote(project)
    assert code == 0, output[-3000:]
    assert same["details"]["same"] == {"model": True, "config": True, "served": True}
    assert same["details"]["started_ahead"] is True     # while parity and warm-up ran
    assert "same model, config and served files" in same["message"]
    assert same["details"]["verdict"]["outcome"] == "no_regression"
    assert same["details"]["interleaved"] is True
    p50 = gates_of(same)["regression.p50_ms"]
    # Around 1, not "contains 1": a 95% interval misses the true ratio 1 time in 20 by
    # design (CI saw [1.011, …] once). Cleared of the margin above, as the verdict says;
    # below, as wide as the busy machine makes it (CI saw [0.816, …] once).
    low, high = p50["interval"]
    assert p50["outcome"] == "passed" and 0.7 < low < 1.05 and 0.95 < high < 1.2
    assert "regression.p99_ms" not in gates_of(same)
    publish = next(s for s in latest_record(project)["stages"] if s["name"] == "publish")
    assert publish["details"]["comparison"]["basis"] == "against a recorded run of another day"
    assert publish["details"]["comparison"]["decides"] is False


def test_a_slower_candidate_is_refused(live_delayed: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_of(live_delayed, tmp_path, monkeypatch)
    live = pointer(project)
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(f"margin: {SAME}", "margin: 10%"))
    use_entrypoint(project / "serve.yaml", "build_slow")
    code, output, slow = promote(project)
    assert code == 1, output[-3000:]
    # The same weights behind another entrypoint: not the same release, and never called
    # the machine's noise between two starts of the same bytes.
    assert slow["status"] == "failed" and slow["details"]["same"]["model"] is True
    assert slow["details"]["same"]["served"] is False
    assert "the machine's noise" not in slow["message"]
    gates = gates_of(slow)
    # The rounds stop at the first look where one metric is a regression (from 16 rounds:
    # the error is spent evenly): the others may be left undecided there, never passed.
    refused = [gate for gate in gates.values() if gate["outcome"] == "failed"]
    assert refused, gates
    for gate in refused:
        assert gate["name"] in output
        if gate["comparison"] in ("<=", ">="):          # a ratio: its interval is beyond
            low, high = gate["interval"]
            assert (low > gate["threshold"] if gate["comparison"] == "<="
                    else high < gate["threshold"]), gate
    p50, throughput = gates["regression.p50_ms"], gates["regression.throughput_rps"]
    assert p50["outcome"] != "passed" and p50["observed"] > 1.10, p50
    assert throughput["outcome"] != "passed" and throughput["observed"] < 0.9, throughput
    assert pointer(project) == live                    # nothing promoted


def test_a_live_release_that_cannot_start_fails_closed(fast_project: Path) -> None:
    spec = fast_project / "serve.yaml"
    spec.write_text(without_saturation(spec.read_text()))
    project = delayed_project(fast_project, "build_licensed")
    (project / "licence").write_text("granted")
    code, output, _ = promote(project)
    assert code == 0, output[-3000:]
    live = pointer(project)

    # The live release now cannot start here (its licence is gone); the candidate can.
    (project / "licence").unlink()
    use_entrypoint(project / "serve.yaml", "build")
    code, output, stage = promote(project)
    assert code == 1, output[-3000:]
    gate = gates_of(stage)["regression.live_release"]
    assert gate["outcome"] == "failed"
    assert "cannot be started" in gate["reason"] and live["current"] in gate["reason"]
    assert stage["details"]["started_ahead"] is True    # its failure kept for the stage
    assert "regression.live_release" in output
    assert pointer(project) == live


def test_torchserve_same_release_against_itself_is_no_regression(project: Path) -> None:
    folder = project / "examples" / "torchserve"
    stages = without_saturation(TORCHSERVE_FAST_STAGES)
    stages = stages.replace("  failure: {}\n", "  failure: {}\n" +
                            REGRESSION.replace("MARGIN", SAME))
    # The example's own SLO is beside the point here (and a busy machine can miss it).
    spec = torchserve_spec(stages).replace("p99: 100ms", "p99: 2s").replace("p95: 60ms",
                                                                           "p95: 2s")
    (folder / "serve.yaml").write_text(spec)
    code, output, _ = promote(folder)
    assert code == 0, output[-3000:]
    code, output, same = promote(folder)
    assert code == 0, output[-3000:]
    # Two builds of the same .mar differ in its build time, not in what it serves.
    assert same["details"]["same"] == {"model": True, "config": True, "served": True}
    assert same["details"]["verdict"]["outcome"] == "no_regression"
    assert gates_of(same)["regression.live_release"]["outcome"] == "passed"
    assert same["details"]["started_ahead"] is True
