"""The GPU check's CPU half, end to end: the real script, a real tritonserver, the
examples/gpu spec promoted to its cpu environment; GPU fields null with reasons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.specs import fast_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_the_cpu_half_runs_and_ends_with_one_json_line(tmp_path: Path) -> None:
    # The example's own measurement settings are for a timed GPU check; the script is the
    # subject here, so its spec (given with --spec) measures briefly.
    example = (REPO / "examples" / "gpu" / "serve.yaml").read_text()
    spec = tmp_path / "serve.yaml"
    # The tests' fast stages, with the samples path as seen from examples/gpu.
    spec.write_text(fast_spec(example).replace("examples/mlp/samples.npz", "../mlp/samples.npz"))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"),
                           "--cpu-only", "--spec", str(spec), "--workdir", str(tmp_path / "check")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) >= {"gpu_name", "gpu_p99_ms", "gpu_knee_rps", "cpu_knee_rps",
                           "gpu_memory_mib", "parity_ok", "tensorrt"}
    assert result["cpu_run"] == "passed"
    assert result["cpu_knee_rps"] > 0
    assert result["gpu_p99_ms"] is None and result["gpu_knee_rps"] is None
    assert result["reasons"]["gpu"] == "--cpu-only"
    assert result["tensorrt"].startswith("skipped: ")
    assert "libpython" in done.stdout  # the stub's library check is printed
