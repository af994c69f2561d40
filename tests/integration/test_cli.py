"""The CLI's contract for broken input: exit 2, one line per problem, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=60)


@pytest.mark.parametrize(("old", "new", "key"), [
    ("max_queue_delay: 2ms", "max_queue_delay: 2", "server.batching.max_queue_delay"),
    ("latency: {concurrency: 8", "latency: {concurency: 8", "stages.latency.concurency"),
    ("instances: 2", "instances: [2]", "server.instances"),
    ("max_queue_delay: 2ms", "max_queue_delay: 36ms", "server.batching.max_queue_delay"),
])
def test_validate_refuses_with_file_line_and_key(project: Path, old: str, new: str,
                                                 key: str) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(old, new, 1))
    result = run(["validate"], project)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: serve.yaml:") and key in line


def test_an_unknown_regression_metric_is_a_spec_error(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "  saturation: {max_concurrency: 64",
        "  regression: {gate: true, metrics: [latency.p99_ms, saturation.knee_thruput_rps]}\n"
        "  saturation: {max_concurrency: 64", 1))
    result = run(["validate"], project)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line == (f"error: serve.yaml:{line_of(spec, 'regression:')}:54: "
                    "stages.regression.metrics[1]: unknown metric 'saturation.knee_thruput_rps'; "
                    "did you mean 'saturation.knee_throughput_rps'?")
    spec.write_text(spec.read_text().replace("saturation.knee_thruput_rps",
                                             "saturation.capacity_rps"))
    assert run(["validate"], project).returncode == 0


def line_of(path: Path, needle: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1)
                if needle in line)


def test_validate_and_schema_succeed_on_the_example(project: Path) -> None:
    result = run(["validate", "--env", "production"], project)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    schema = json.loads(run(["schema"], project).stdout)
    assert schema["title"].startswith("serve.yaml")


def test_unknown_run_or_release_is_a_usage_error(project: Path) -> None:
    result = run(["report", "20990101-000000-abcdef"], project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    result = run(["rollback", "staging"], project)
    assert result.returncode == 2 and "no release to roll back" in result.stderr


def test_missing_spec_file(tmp_path: Path) -> None:
    result = run(["validate"], tmp_path)
    assert result.returncode == 2
    assert "serve.yaml:1:1: file not found" in result.stderr
