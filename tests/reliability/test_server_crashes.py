"""A server that dies while being measured: caught within 2 s, the stage fails with the
server's own words, and teardown leaves no process and no bound port."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.servers.ports import port_is_bound
from tests.reliability.conftest import Tally
from tests.support.cli import cli, start_cli
from tests.support.specs import fast_spec

pytestmark = [pytest.mark.integration, pytest.mark.reliability]
REPO = Path(__file__).resolve().parents[2]
DETECTION_LIMIT_S = 2.0

# A 1 s latency stage (before a killed saturation stage) may count too few requests for a
# p99 bound: this test is about the kill, so an inconclusive latency verdict is accepted.
LONG_STAGES = """
stages:
  readiness: {timeout: 180s}
  parity: {data: PARITY}
  failure: {probes: [wrong_shape]}
  latency: {concurrency: 4, warmup: 500ms, duration: LATENCY,
            verdict: {accept_inconclusive: true}}
  saturation: {max_concurrency: 4, probe_duration: 20s}
"""


def spec_for(project: Path, kind: str, stage: str) -> Path:
    if kind == "triton":
        text = fast_spec((project / "serve.yaml").read_text())
        folder, parity = project, "examples/mlp/samples.npz"
    else:
        folder, parity = project / "examples" / "torchserve", "../mlp/samples.npz"
        text = (REPO / "examples" / "torchserve" / "serve.yaml").read_text()
    head, _, tail = text.partition("\nstages:\n")
    _, _, publish = tail.partition("\npublish:\n")
    spec = folder / "serve.yaml"
    stages = LONG_STAGES.replace("PARITY", parity).replace(
        "LATENCY", "20s" if stage == "latency" else "1s")
    spec.write_text(head + "\n" + stages + "\npublish:\n" + publish)
    return folder


def record_of(folder: Path) -> dict[str, object] | None:
    runs = sorted((folder / ".serve-pipeline" / "runs").glob("*/record.json"))
    if not runs:
        return None
    try:
        body: dict[str, object] = json.loads(runs[-1].read_text())
    except ValueError:
        return None
    return body


def stages_of(record: dict[str, object] | None) -> list[dict[str, object]]:
    return list(record["stages"]) if record else []  # type: ignore[call-overload]


def wait_until_running(folder: Path, stage: str, timeout: float = 180.0) -> dict[str, object]:
    order = ["build", "start", "readiness", "parity", "latency", "saturation"]
    needed = order[: order.index(stage)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = record_of(folder)
        done = [s["name"] for s in stages_of(record)]
        if done[: len(needed)] == needed and record is not None:
            failed = [s["message"] for s in stages_of(record)[: len(needed)]
                      if s["status"] != "passed"]
            assert not failed, f"{stage} never started: {failed}"
            return record
        time.sleep(0.1)
    raise AssertionError(f"{stage} never started")


def victim(record: dict[str, object], what: str) -> int:
    start = next(s for s in stages_of(record) if s["name"] == "start")
    pid = int(start["details"]["pid"])  # type: ignore[index]
    if what == "server":
        return pid
    workers = [p.pid for p in psutil.Process(pid).children(recursive=True)
               if "model_service_worker" in " ".join(p.cmdline())]
    assert workers, "no TorchServe worker found"
    return workers[0]


# Each kind in the latency stage, and one in saturation: what watches the server is the
# same in every stage (the load's watchdog), what a death says is the kind's own.
@pytest.mark.parametrize(("kind", "stage", "what"), [
    ("triton", "latency", "server"), ("triton", "saturation", "server"),
    ("torchserve", "latency", "server"), ("torchserve", "latency", "worker"),
])
def test_a_server_killed_mid_measurement(project: Path, tally: Tally, kind: str, stage: str,
                                         what: str) -> None:
    folder = spec_for(project, kind, stage)
    process = start_cli(["run"], folder)
    try:
        record = wait_until_running(folder, stage)
        ports = next(s for s in stages_of(record) if s["name"] == "start")["details"]["ports"]  # type: ignore[index]
        time.sleep(1.0)                       # well inside the measurement window
        target = victim(record, what)
        os.kill(target, signal.SIGKILL)
        killed_at = time.monotonic()
        tally.add("crashes")
        detected_at = None
        while time.monotonic() - killed_at < 30:
            current = {s["name"]: s for s in stages_of(record_of(folder))}
            if stage in current:
                detected_at = time.monotonic()
                break
            time.sleep(0.05)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert detected_at is not None
    assert detected_at - killed_at <= DETECTION_LIMIT_S, detected_at - killed_at
    assert process.returncode == 1 and "Traceback" not in stderr
    final = {s["name"]: s for s in stages_of(record_of(folder))}
    assert final[stage]["status"] == "failed"
    message = str(final[stage]["message"])
    assert ("killed by SIGKILL" in message) or ("worker" in message and "died" in message), \
        message
    assert "log" in message                   # the server's own last words are quoted
    assert all(final[name]["status"] == "aborted" for name in final
               if list(final).index(name) > list(final).index(stage))
    assert not any(port_is_bound(int(port)) for port in ports.values())
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if str(folder) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_the_tool_killed_takes_its_server_with_it(project: Path, tally: Tally,
                                                  kind: str) -> None:
    """SIGKILL of the tool (a CI job's timeout, the OOM killer) runs no teardown: the server
    gets SIGTERM from the kernel instead (setpriv --pdeathsig) and stops gracefully, so no
    server, python stub or /dev/shm region of it is left behind. TorchServe's launcher
    passes nothing on to the Java it started; its group leader does."""
    folder = spec_for(project, kind, "latency")
    process = start_cli(["run"], folder)
    try:
        record = wait_until_running(folder, "latency")
        server = int(next(s for s in stages_of(record)
                          if s["name"] == "start")["details"]["pid"])  # type: ignore[index]
        family = [server, *(p.pid for p in psutil.Process(server).children(recursive=True))]
        time.sleep(1.0)
        process.kill()
        process.communicate(timeout=30)
        tally.add("kills")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in family):
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    alive = [p for p in family if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    # Its regions are named after the tool's pid (TritonServer.shm_prefix).
    regions = list(Path("/dev/shm").glob(f"triton_python_backend_shm_region_sp{process.pid}x*"))
    for pid in alive:                                 # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    for region in regions:
        region.unlink(missing_ok=True)
    assert alive == [], "the server outlived the tool"
    assert regions == [], regions
    # Its record stays `running` on disk; read back, it says the run was abandoned.
    shown = cli(["report", str(record["run_id"]), "--format", "json"], folder)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "abandoned", shown.stdout[:400]


def test_a_server_frozen_mid_latency_fails_the_stall_gate(project: Path, tally: Tally) -> None:
    """SIGSTOP for 4 s: the closed loop's few requests in flight barely move a percentile
    or the error rate; the span in which nothing was answered fails latency.longest_stall
    (at least 2 s for this SLO), and leads the stage's message."""
    folder = spec_for(project, "triton", "latency")
    process = start_cli(["run"], folder)
    try:
        record = wait_until_running(folder, "latency")
        server = victim(record, "server")
        time.sleep(1.5)                       # past the warm-up, inside the windows
        os.kill(server, signal.SIGSTOP)
        try:
            time.sleep(4.0)
        finally:          # a server left stopped would outlive everything, even a SIGTERM
            os.kill(server, signal.SIGCONT)
        tally.add("faults")
        _, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr
    latency = next(s for s in stages_of(record_of(folder)) if s["name"] == "latency")
    listed: list[dict[str, Any]] = latency["gates"]  # type: ignore[assignment]
    gates = {g["name"]: g for g in listed}
    assert gates["latency.longest_stall"]["outcome"] == "failed", gates
    assert float(gates["latency.longest_stall"]["observed"]) >= 3.0
    assert str(latency["message"]).startswith("latency.longest_stall"), latency["message"]
