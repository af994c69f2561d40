"""Good releases on real servers under a busy neighbour: how many are refused?

Promotes each bundled example (the Triton one, serve.yaml.example, and the TorchServe one,
examples/torchserve/serve.yaml) `runs` times to staging, in a scratch copy of the project
(so the repository's own store is untouched), while a neighbour process keeps one core
busy for the whole run. Every figure of these examples is far inside its threshold, so
every refusal is a false one.

Returns aa_runs, aa_refused, each refusal's reason (the failed stage's message, or why
the command failed), and the median promote time, in all and per example.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = {"triton": None, "torchserve": "examples/torchserve/serve.yaml"}
PROMOTE_TIMEOUT_S = 600.0
# The neighbour: one process that spins on a core for as long as it lives.
BUSY_LOOP = "while True:\n    pass\n"


def scratch_project() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-calibration-"))
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", folder / "environments")
    shutil.copyfile(REPO / "serve.yaml.example", folder / "serve.yaml")
    # A repository of its own: a spec's inputs must stay inside the spec's repository, and
    # the TorchServe example reads the model of examples/mlp/.
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    return folder


@contextmanager
def busy_neighbour() -> Iterator[int]:
    """A process keeping one core busy while the block runs; stopped by its pid after."""
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
    try:
        yield neighbour.pid
    finally:
        os.killpg(neighbour.pid, signal.SIGTERM)
        try:
            neighbour.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(neighbour.pid, signal.SIGKILL)
            neighbour.wait()


def latest_record(project: Path) -> dict[str, Any] | None:
    records = sorted(project.rglob(".serve-pipeline/runs/*/record.json"),
                     key=lambda path: path.stat().st_mtime_ns)
    if not records:
        return None
    body: dict[str, Any] = json.loads(records[-1].read_text())
    return body


def refusal_reason(record: dict[str, Any] | None, done: subprocess.CompletedProcess[str],
                   ) -> str:
    """The failed stage and its message, or the command's last words without a record."""
    if record is not None:
        failed = [stage for stage in record.get("stages", [])
                  if stage.get("status") == "failed"]
        if failed:
            return f"{failed[0]['name']}: {failed[0].get('message', '')}"
    tail = (done.stderr or done.stdout).strip().splitlines()
    return f"exit {done.returncode}: {tail[-1] if tail else 'no output'}"


def capacity_and_stages(record: dict[str, Any] | None) -> dict[str, Any]:
    """The capacity gate as recorded (figure, interval, outcome) and each stage's seconds."""
    if record is None:
        return {}
    gates = [gate for stage in record.get("stages", []) for gate in stage.get("gates", [])]
    capacity: dict[str, Any] = next(
        (gate for gate in gates if gate.get("name") == "saturation.capacity_rps"), {})
    return {"capacity_rps": capacity.get("observed"), "interval": capacity.get("interval"),
            "outcome": capacity.get("outcome"),
            "stage_s": {stage["name"]: round(float(stage.get("duration_s", 0.0)), 1)
                        for stage in record.get("stages", [])}}


def promote_once(project: Path, spec: str | None) -> tuple[float, str | None]:
    """(seconds, None when promoted, else why not)."""
    command = [sys.executable, "-m", "pipeline", "promote", "staging"]
    command += ["-f", spec] if spec else []
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=project, capture_output=True, text=True,
                              timeout=PROMOTE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return time.monotonic() - started, f"timed out after {PROMOTE_TIMEOUT_S:.0f}s"
    seconds = time.monotonic() - started
    if done.returncode == 0:
        return seconds, None
    return seconds, refusal_reason(latest_record(project), done)


def real_runs(runs: int) -> dict[str, Any]:
    """Promote each example `runs` times under a busy neighbour (see the module doc)."""
    project = scratch_project()
    seconds: dict[str, list[float]] = {name: [] for name in EXAMPLES}
    refusals: list[dict[str, Any]] = []
    # The machine's 1-minute load average after each promotion: the neighbour alone keeps
    # it near 1 on top of the pipeline's own; more says something else was running too.
    loads: list[float] = []
    figures: dict[str, list[dict[str, Any]]] = {name: [] for name in EXAMPLES}
    try:
        with busy_neighbour():
            for run in range(runs):
                for name, spec in EXAMPLES.items():
                    took, why = promote_once(project, spec)
                    seconds[name].append(took)
                    loads.append(os.getloadavg()[0])
                    figures[name].append(capacity_and_stages(latest_record(project)))
                    if why is not None:
                        refusals.append({"example": name, "run": run + 1, "reason": why})
                    print(f"{name} run {run + 1}: {'refused: ' + why if why else 'promoted'}"
                          f" ({took:.1f}s, load {loads[-1]:.1f}) {figures[name][-1]}",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    every = [took for taken in seconds.values() for took in taken]
    return {"aa_runs": len(every), "aa_refused": len(refusals), "refusals": refusals,
            "median_promote_s": statistics.median(every),
            "median_promote_s_by_example": {name: statistics.median(taken)
                                            for name, taken in seconds.items()},
            "neighbour": "one process spinning on a core for the whole run",
            "load_average_1m_median": statistics.median(loads),
            "load_average_1m_max": max(loads),
            # What each promotion measured: its capacity figure and where the time went.
            "runs_by_example": figures}
