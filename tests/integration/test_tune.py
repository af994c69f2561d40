"""`serve-pipeline tune` against a real tritonserver (a small space searched and verified,
the budget running out, an SLO no config can meet) and a real TorchServe (configs
registered in one process); nothing left running after any."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.conftest import cli
from tests.support.processes import TORCHSERVE, processes_under
from tests.support.specs import TORCHSERVE_FAST_STAGES, torchserve_spec

# Two instance counts x two batch sizes x one delay: 4 configs, 2 explored servers; the
# best predicted one verified (and the spec's own config, the baseline).
SMALL_SPACE = """
tune:
  instances: [1, 2]
  max_batch_size: [1, 16]
  max_queue_delay: [1ms]
  preferred_batch_sizes: [[]]
  verify: 1
  explore_window: 500ms
"""


def _tune_record(project: Path) -> dict[str, Any]:
    runs = sorted((project / ".serve-pipeline" / "runs").glob("*/record.json"),
                  key=lambda path: path.stat().st_mtime_ns)
    tuned: list[dict[str, Any]] = [json.loads(p.read_text()) for p in runs]
    tuned = [r for r in tuned if r["command"] == "tune"]
    assert tuned, "no tune record"
    return tuned[-1]


def test_tune_searches_verifies_and_recommends(fast_project: Path,
                                               no_leftovers: Callable[[], None]) -> None:
    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text() + SMALL_SPACE)
    result = cli(["tune", "--budget", "5m"], fast_project, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    record = _tune_record(fast_project)
    section = record["tune"]
    assert record["status"] == "passed" and record["release_id"] is None
    assert section["space_size"] == 4 and section["configs_explored"] == 2
    # One tritonserver for the whole search: configs are reloaded, never restarted.
    assert section["server_starts"] == 1 and section["server_reloads"] >= 2
    measured = section["candidates"]
    assert 1 <= len(measured) <= 4
    assert len(measured) + len(section["pruned"]) == 4
    winner = section["winner"]
    assert winner["meets_slo"] and winner["measured"]["throughput_rps"] > 0
    assert winner["predicted"]["predicted"] is True
    # The spec's own config (batch 32, delay 2ms: outside this space) measured as the
    # baseline, predicted by its instance count's fit; every capacity stated with its
    # interval.
    baseline = section["baseline"]
    assert section["baseline_in_space"] is False
    assert "batch 32 delay 2ms" in baseline["label"]
    assert baseline["measured"] is not None and baseline["predicted"]["predicted"] is True
    for measured_one in [baseline, *measured]:
        figure = measured_one["measured"]["capacity"]
        assert figure is None or figure["bound"] in ("exact", "lower_bound"), figure
    assert section["decision"] and section["best_measured"] is not None
    assert all((Path(c["record"])).is_file() for c in measured)
    # The baseline verified again after the candidates, for the machine's drift, which
    # every interval was widened by before the pick; said in the output.
    drift, again = section["drift"], section["baseline_again"]
    first = baseline["measured"]["capacity"]
    if first is None:
        assert drift["basis"] == "default" and again is None, drift
    else:
        assert again is not None and "batch 32 delay 2ms" in again["label"], drift
        assert Path(again["record"]).is_file()
        assert drift["baseline_rps"][0] == first["rps"]
        assert drift["basis"] in ("exact", "lower_bound", "default"), drift
    assert drift["factor"] >= 1.0
    assert " ".join(drift["text"].split()) in " ".join(result.stdout.split())
    assert section["gpu_memory"].startswith("not measured")
    assert "recommended:" in result.stdout and "max_batch_size" in result.stdout
    report = (fast_project / ".serve-pipeline" / "runs" / record["run_id"] / "report.html")
    assert 'id="tune-chart"' in report.read_text()
    no_leftovers()


def test_budget_exhausted_keeps_the_best_verified(fast_project: Path,
                                                  no_leftovers: Callable[[], None]) -> None:
    spec = fast_project / "serve.yaml"
    spec.write_text(spec.read_text() + SMALL_SPACE)
    result = cli(["tune", "--budget", "1s"], fast_project, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    section = _tune_record(fast_project)["tune"]
    assert section["budget_exhausted"] is True
    assert len(section["candidates"]) == 1
    assert "budget exhausted" in section["why"]
    assert any("budget" in p["reason"] for p in section["pruned"])
    # No time to verify the baseline again: the drift is unknown, the default factor.
    assert section["baseline_again"] is None
    assert section["drift"]["basis"] == "default" and section["drift"]["factor"] == 1.3
    assert "drift is unknown" in section["why"]
    no_leftovers()


def test_impossible_slo_exits_1_and_shows_the_closest(fast_project: Path,
                                                      no_leftovers: Callable[[], None]) -> None:
    spec = fast_project / "serve.yaml"
    text = spec.read_text()
    head, _, rest = text.partition("\nslo:\n")
    _, _, stages = rest.partition("\nstages:\n")
    impossible = "\nslo:\n  p99: 200us\n  error_rate: 0.1%\n  min_throughput: 100/s\n"
    spec.write_text(head.replace("max_queue_delay: 2ms", "max_queue_delay: 100us")
                    + impossible + "\nstages:\n" + stages + SMALL_SPACE.replace(
                        "[1ms]", "[0us]"))
    result = cli(["tune", "--budget", "2m"], fast_project, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no config meets the SLO" in result.stderr
    section = _tune_record(fast_project)["tune"]
    assert section["winner"] is None and section["recommended"] is None
    closest = section["closest"]
    assert closest is not None and closest["measured"] is not None
    assert any("latency.p99" in missed for missed in closest["missed"])
    assert "closest" in section["why"]
    no_leftovers()


def test_tune_torchserve_registers_each_config_in_one_process(project: Path) -> None:
    folder = project / "examples" / "torchserve"
    (folder / "serve.yaml").write_text(torchserve_spec(TORCHSERVE_FAST_STAGES) + """
tune:
  instances: [1, 2]
  max_batch_size: [8]
  max_queue_delay: [1ms]
  verify: 2
  explore_window: 500ms
""")
    result = cli(["tune", "--budget", "4m"], folder, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    section = _tune_record(folder)["tune"]
    # One TorchServe: exploring the second worker count registers it through the model API.
    assert section["server_starts"] == 1 and section["server_reloads"] >= 1
    assert "model API" in section["restarts"]
    assert section["configs_explored"] == 2 and section["exploration_failures"] == {}
    assert [c["how"] for c in section["server_changes"]][:2] == ["started", "reloaded"]
    assert 1 <= len(section["candidates"]) <= 2
    assert all(c["measured"]["throughput_rps"] > 0 for c in section["candidates"])
    assert section["winner"]["meets_slo"]
    assert processes_under(folder, TORCHSERVE) == []
