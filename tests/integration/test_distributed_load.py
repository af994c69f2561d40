"""Load from two Ray workers against a real Triton: the merge against one process, a
worker killed mid-run, and a worker that falls behind its schedule.

Ray runs for real on loopback: a head started once for the module (the CLI test starts
its own, as a run does) and one worker process per load worker.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from pipeline.measure.distributed.merge import behind
from pipeline.measure.distributed.run import LoadCluster
from pipeline.measure.loadgen import Phase, open_loop
from pipeline.request_types import HttpRequest
from pipeline.servers.base import ModelServer
from pipeline.servers.triton.server import TritonServer
from pipeline.spec.models import LoadedSpec
from tests.support.cli import cli, latest_record, start_cli

from .test_measurement import one_item, served_example

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.integration
STEADY = [Phase("steady", 150.0, 2.0)]          # 300 requests


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModelServer, LoadedSpec]]:
    yield from served_example("serve.yaml.example", tmp_path_factory.mktemp("triton"))


@contextmanager
def ray_own_files_unclosed() -> Iterator[None]:
    """Ray leaves its log files and child Popen objects to the garbage collector, which
    warns (ResourceWarning, an error under this suite's filters): collected here, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        yield
        gc.collect()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoadCluster]:
    # As a Ray that LoadCluster starts for a run: workers at nice 0, not Ray's 15 (with a
    # neighbour busy on a core they fell seconds behind their schedule; run.py).
    os.environ.setdefault("RAY_worker_niceness", "0")
    with ray_own_files_unclosed():
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _node_ip_address="127.0.0.1")
    try:
        cluster = LoadCluster(2)        # joins the Ray above, and leaves it running
        # (4 CPUs: these 2 workers, and 2 for a CLI run that joins it with --ray-address)
        assert not cluster.owns_ray
        yield cluster
        cluster.close()
    finally:
        with ray_own_files_unclosed():
            ray.shutdown()


def target_of(triton: tuple[ModelServer, LoadedSpec]) -> HttpRequest:
    server, loaded = triton
    return server.infer_request(one_item(server, loaded))


def test_two_workers_merge_to_what_one_process_measures(
        triton: tuple[ModelServer, LoadedSpec], cluster: LoadCluster) -> None:
    target = target_of(triton)
    asyncio.run(open_loop(target, [Phase("warm", 100.0, 0.5)], 5.0))
    single = asyncio.run(open_loop(target, STEADY, 5.0)).phases["steady"]
    merged = cluster.open_window(2, "latency", target, STEADY, 5.0, "two workers")
    sharded = merged.phases["steady"]
    assert sharded.histogram.get_total_count() == 300 == single.histogram.get_total_count()
    assert sharded.completed == 300 and sharded.error_count == 0
    assert [row["requests"] for row in merged.workers] == [150, 150]
    assert len({row["pid"] for row in merged.workers} | {os.getpid()}) == 3
    figures = {p: (single.percentile_ms(p), sharded.percentile_ms(p)) for p in (50, 90)}
    # Stated tolerance: the same schedule from one process or two sees the same server;
    # on a busy 2-core machine within 50% + 2 ms of each other.
    for one, two in figures.values():
        assert abs(one - two) <= 0.5 * one + 2.0, (figures, merged.workers)
    assert merged.from_send.histogram.get_total_count() == 300


def test_a_worker_that_falls_behind_is_named(triton: tuple[ModelServer, LoadedSpec],
                                             cluster: LoadCluster) -> None:
    # A fault no real component produces on demand: worker 1's event loop is blocked 50 ms
    # every 10 ms (a test-only job option), so it sends late whatever the server does.
    merged = cluster.open_window(2, "saturation", target_of(triton), [Phase("s", 100.0, 1.0)],
                                 5.0, "starved worker", starve_s={1: 0.05})
    rows = {row["worker"]: row for row in merged.workers}
    assert merged.client_bound
    assert rows[1]["client_bound"] and rows[1]["lag_p99_ms"] > 20.0, rows
    # Worker 0 is not starved; on a busy 2-core machine it may still miss by a few ms, so
    # only the difference is asserted.
    assert rows[1]["lag_p99_ms"] > 3 * rows[0]["lag_p99_ms"], rows
    assert behind(cluster.rows_for("saturation"))[-1].startswith("worker 1 ")
    assert merged.phases["s"].histogram.get_total_count() == 100


def descendants(pid: int) -> set[int]:
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def kill_a_load_worker(pid: int, seen: set[int]) -> int | None:
    """SIGKILL a load worker under `pid` once it measures; every descendant seen meanwhile
    goes into `seen` (to check for orphans afterwards)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children(recursive=True):
            seen.add(child.pid)
            try:
                title = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "LoadWorker.closed_loop" in title:
                time.sleep(0.5)
                seen |= descendants(pid)
                os.kill(child.pid, signal.SIGKILL)
                return child.pid
        time.sleep(0.1)
    return None


def test_a_worker_killed_mid_run_fails_the_stage_and_leaves_nothing(
        triton: tuple[ModelServer, LoadedSpec], project: Path) -> None:
    server, _ = triton
    assert isinstance(server, TritonServer)
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 4, warmup: 3s, duration: 2s, workers: 2}"))
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    run = start_cli(["measure", "--url", server.base_url, "--stages", "latency"], project, env)
    seen: set[int] = set()
    try:
        killed = kill_a_load_worker(run.pid, seen)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert killed is not None, err
    assert len(seen) >= 3, seen     # the run's own Ray: its head processes and workers
    assert run.returncode == 1, out + err
    said = " ".join(out.split())        # the terminal table may wrap a long message
    assert "load worker" in said and "Traceback" not in out + err, out + err
    record: dict[str, Any] = latest_record(project)
    latency = next(s for s in record["stages"] if s["name"] == "latency")
    assert latency["status"] == "failed", latency
    assert "load worker" in latency["message"] and "not merged" in latency["message"], latency
    assert record["release_id"] is None
    deadline = time.monotonic() + 15
    while (alive := [pid for pid in seen if psutil.pid_exists(pid)
                     and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], [psutil.Process(pid).cmdline() for pid in alive]
    assert server.alive()


def test_more_workers_without_ray_is_refused_in_one_line(project: Path) -> None:
    # Ray is installed here; the child process blocks its import as if it were not.
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 8, warmup: 3s, duration: 10s, workers: 2}"))
    blocked = ("import sys; sys.modules['ray'] = None; sys.argv = ['serve-pipeline', 'run']; "
               "from pipeline.cli.app import main; main()")
    result = subprocess.run([sys.executable, "-c", blocked], cwd=project, text=True,
                            capture_output=True, timeout=120)
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, said
    assert "stages.latency.workers" in said and "pip install 'serve-pipeline[ray]'" in said
    assert "Traceback" not in said and len(said.splitlines()) <= 2, said
    assert not list((project / ".serve-pipeline" / "runs").glob("*/record.json"))


def test_a_run_joins_a_running_cluster_and_leaves_it_running(
        triton: tuple[ModelServer, LoadedSpec], cluster: LoadCluster, project: Path) -> None:
    server, _ = triton
    assert isinstance(server, TritonServer)
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace(
        "latency: {concurrency: 8, warmup: 3s, duration: 10s}",
        "latency: {concurrency: 4, warmup: 300ms, duration: 1s, workers: 2, "
        "verdict: {accept_inconclusive: true}}"))
    address = ray.get_runtime_context().gcs_address
    result = cli(["measure", "--url", server.base_url, "--stages", "latency",
                  "--ray-address", address], project, timeout=120)
    record = latest_record(project)
    latency = next(s for s in record["stages"] if s["name"] == "latency")
    assert latency["status"] == "passed", result.stdout + result.stderr
    rows = latency["details"]["load_workers"]
    assert [row["worker"] for row in rows] == [0, 1], rows
    assert all(row["requests"] > 0 and row["lag_p99_ms"] is None for row in rows), rows
    # The rows count every window of the stage, the warm-up's too; the metrics only the
    # measured windows.
    assert sum(row["requests"] for row in rows) > latency["metrics"]["requests"] > 0, rows
    assert ray.is_initialized() and all(node["Alive"] for node in ray.nodes())
