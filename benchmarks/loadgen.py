"""Our load generator against NVIDIA's perf_analyzer, on the same real Triton model.

For concurrency 1, 4, 8 and 16, over HTTP and gRPC, it prints: throughput
ours / perf_analyzer (goal >= 0.95), client CPU-seconds per 1000 requests ours
/ perf_analyzer (goal <= 1.0), and the p50 difference (goal within 10%). Then
the stall scenario: a model that stalls 300 ms on every 200th request, fed at
100/s; our open-loop p99 (latency from the intended start) against the p99
queueing predicts, and perf_analyzer's request-rate p99 (default, synchronous
mode, which counts from the actual send: coordinated omission).

    python benchmarks/loadgen.py

What is charged to whom. perf_analyzer runs in concurrency mode to its own
stability criterion: windows of 2 s (`--measurement-interval 2000`) until 3 agree
within 10% (its default; 25% if a noisy shared machine does not get there in 10
windows, and the row says so). Its CPU is read from /proc/<pid>/stat every 0.2 s
and the requests it got answered from the server's statistics, and it is charged
only for its last 3 windows (the ones it reports): not for its process start-up,
connection set-up and unstable warm-up windows. Ours runs 0.5 s of warm-up, then
the same 6 s, charged with its process CPU (all threads) over those 6 s. Every
comparison alternates which of the two goes first.

gRPC client candidates, measured with this accounting by a one-concurrency script
against the same server (2 cores shared with other work, load average 1.4-6.4, so
compare within a column; CPU in microseconds per request, throughput in requests/s):

    candidate                                    c=1: CPU, req/s     c=16: CPU, req/s
    perf_analyzer 2.51                           146-160, 314-335    61, 6460 (load 3.5)
    grpc.aio unary, pre-serialised (previous)    367-383, 315-316    113-134, 3137-3323
    grpc.aio ModelStreamInfer, one stream        362-373, 318-321    163, 3214 (load 6.4)
    grpc.aio unary over 2 channels               394-440, 282-300    127, 2684 (load 6.4)
    lean HTTP/2, one write per call              168-178, 299-325    46, 5462 (load 3.5)
    lean HTTP/2, a loop turn's calls in one      168-224, 242-328    37, 4134-6434
      write (kept)                                                   (h2 4134 at load 6.4,
                                                                      aio unary 3137 there)

The kept client (pipeline/measure/wire/grpc_client.py) writes the frames itself on an
asyncio protocol: grpc.aio's cost is in its completion-queue thread and per-call
objects, which neither a stream nor more channels remove.

At concurrency 1 every call wakes an idle process, and through asyncio that wake-up
runs the event loop, a protocol callback, a future and a task step: 1.0-1.2x
perf_analyzer's CPU per request on both protocols, and dropping the per-call timer,
the cyclic garbage collector or using BufferedProtocol moved it nothing beyond the
noise. So the closed loop at concurrency 1 runs one blocking socket in a thread of its
own (pipeline/measure/wire/blocking.py), with the same request bytes and response parsing.
Candidates at c=1, same accounting, two rounds alternating the order (load 0.2-0.3;
CPU in microseconds per request, throughput in requests/s, ratio to perf_analyzer):

    candidate                              HTTP: CPU, req/s, CPU ratio  gRPC: same
    perf_analyzer 2.51                     167-175, 315-328            200-201, 323-325
    asyncio clients (previous)             202-207, 326-327, 1.18-1.21 196-203, 329-333, 0.98-1.01
    blocking socket in a thread, Python's  113-121, 332-334, 0.67-0.69 138-150, 327-333, 0.69-0.75
      socket timeouts (a poll before
      every send and recv)
    the same with the kernel's timeouts    109-117, 333,     0.65-0.67 136-144, 327-328, 0.68-0.72
      (SO_RCVTIMEO/SO_SNDTIMEO; kept)

At 2 and 4 in flight, one such thread per request against the asyncio clients (same
script, two rounds, load 0.3-0.8):

    c  candidate           HTTP: CPU, ratio to perf_analyzer   gRPC: same
    2  asyncio             125-131, 0.88-1.01                  132-137, 0.68-0.72
    2  threads             86-89,   0.63-0.67                  132-140, 0.70-0.71
    4  asyncio             68-81,   0.57-0.68                  93,      0.60-0.63
    4  threads (HTTP kept) 62-66,   0.52-0.54                  104-107, 0.69-0.70

So HTTP runs threads up to 4 in flight; gRPC only at 1, since past it the asyncio
client multiplexes its calls on one connection and writes them together.

Two full runs with the kept gRPC client, before the blocking caller at c=1 (load average
2.3-7.7), ours / perf_analyzer:

    run  protocol  c=1: throughput, CPU  c=4         c=8         c=16
    1    http      1.02, 1.17            1.09, 0.71  1.07, 0.55  1.42, 0.49
    1    grpc      0.93, 1.08            0.89, 0.85  1.30, 0.51  1.10, 0.49
    2    http      1.00, 1.14            1.06, 0.64  1.32, 0.54  1.66, 0.31
    2    grpc      0.98, 1.10            0.98, 0.60  1.06, 0.60  1.01, 0.56

With the blocking threads (HTTP up to c=4, gRPC at c=1), one full run at load 0.4-4.0:

    run  protocol  c=1: throughput, CPU  c=4         c=8         c=16
    3    http      1.06, 0.70            1.08, 0.53  1.14, 0.54  1.11, 0.57
    3    grpc      1.04, 0.78            0.99, 0.65  1.13, 0.54  1.17, 0.44

perf_analyzer comes from PyPI: the `tritonclient==2.51.0` wheel carries the
binary (newer wheels do not); it is downloaded (hash-checked) into a cache
folder, never installed, and given the two libraries it needs from
nvidia-pytriton's bundle. Every perf_analyzer run has a hard timeout.
The last line is one JSON object with the headline figures, per protocol too
(`grpc_throughput_ratio_min`, `grpc_cpu_per_1k_ratio_max`, and the same for http).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.distributed import distributed_stall  # noqa: E402
from benchmarks.stall_scenario import StallScenario  # noqa: E402
from pipeline.measure.loadgen import Phase, closed_loop, open_loop  # noqa: E402
from pipeline.model.tensors import load_samples, take  # noqa: E402
from pipeline.servers import serving  # noqa: E402
from pipeline.servers.base import ModelServer  # noqa: E402
from pipeline.servers.specs import load_spec  # noqa: E402

WHEEL = "tritonclient-2.51.0-py3-none-manylinux1_x86_64.whl"
WHEEL_SHA256 = "c485bb0123bdf310f90bc8b03d3489b28df2ffed55b30c7eee0b795b48113d52"
MEMBER = "tritonclient-2.51.0.data/data/bin/perf_analyzer"
CONCURRENCIES = (1, 4, 8, 16)
WINDOW_MS = 2000                  # perf_analyzer's measurement interval
STABLE_WINDOWS = 3                # it reports once this many windows agree
OUR_WINDOW_S = STABLE_WINDOWS * WINDOW_MS / 1e3   # ours runs as long as it is charged for
STABILITY_PERCENTAGES = (10, 25)
PA_TIMEOUT_S = 120
SAMPLE_S = 0.2
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class PerfAnalyzer:
    binary: Path
    libs: Path

    def start(self, args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(self.binary), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, "LD_LIBRARY_PATH": str(self.libs)})


def perf_analyzer(cache: Path) -> PerfAnalyzer:
    """perf_analyzer, set up once in `cache`."""
    binary = cache / "bin" / "perf_analyzer"
    libs = cache / "lib"
    if not binary.exists():
        (cache / "bin").mkdir(parents=True, exist_ok=True)
        libs.mkdir(parents=True, exist_ok=True)
        wheels = cache / "wheels"
        requirement = cache / "requirement.txt"
        requirement.write_text(f"tritonclient==2.51.0 --hash=sha256:{WHEEL_SHA256}\n")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--require-hashes", "--only-binary=:all:", "--platform",
                        "manylinux1_x86_64", "--python-version", "3.11", "-r",
                        str(requirement), "-d", str(wheels)], check=True)
        data = (wheels / WHEEL).read_bytes()
        if hashlib.sha256(data).hexdigest() != WHEEL_SHA256:
            raise SystemExit("tritonclient wheel does not match its pinned hash")
        with zipfile.ZipFile(wheels / WHEEL) as wheel:
            binary.write_bytes(wheel.read(MEMBER))
        binary.chmod(0o755)
        found = importlib.util.find_spec("pytriton")
        assert found is not None and found.submodule_search_locations
        bundle = Path(next(iter(found.submodule_search_locations))).parent / \
            "nvidia_pytriton.libs"
        for soname, pattern in (("libb64.so.0d", "libb64-*.so.0d"),
                                ("libcudart.so.12", "libcudart-*.so.12*")):
            target = libs / soname
            target.unlink(missing_ok=True)
            target.symlink_to(sorted(bundle.glob(pattern))[0])
    return PerfAnalyzer(binary, libs)


def process_cpu_s(pid: int) -> float:
    """A live process's CPU-seconds so far, all its threads (utime + stime)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def sampled_run(pa: PerfAnalyzer, args: list[str], server: ModelServer
                ) -> tuple[int, str, list[tuple[float, float, float]]]:
    """Run perf_analyzer to its end (or PA_TIMEOUT_S), sampling (time, its CPU, the
    server's answered requests) every SAMPLE_S: its exit code, output and the samples."""
    process = pa.start(args)
    samples: list[tuple[float, float, float]] = []
    deadline = time.monotonic() + PA_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        try:
            cpu = process_cpu_s(process.pid)
        except (FileNotFoundError, ProcessLookupError):
            break
        samples.append((time.monotonic(), cpu, server.stats().window_metrics()["server_requests"]))
        time.sleep(SAMPLE_S)
    if process.poll() is None:
        process.kill()
    output = process.communicate()[0].decode(errors="replace")
    return process.returncode, output, samples


def run_pa(pa: PerfAnalyzer, args: list[str], folder: Path, server: ModelServer,
           charged_s: float | None = None) -> dict[str, float] | None:
    """One perf_analyzer run: its CSV row, and its CPU per 1000 requests over its last
    `charged_s` seconds (its stable measurement windows; None: the whole run)."""
    output = folder / f"pa-{time.monotonic_ns()}.csv"
    code, text, samples = sampled_run(pa, [*args, "-f", str(output), "--verbose-csv"], server)
    if code != 0 or not output.exists() or len(samples) < 2:
        tail = text.strip().splitlines()[-1:]
        print(f"  perf_analyzer exit {code}: {' '.join(tail)}")
        return None
    last = samples[-1]
    first = next(s for s in samples if charged_s is None or s[0] >= last[0] - charged_s)
    requests = last[2] - first[2]
    with output.open() as handle:
        row = next(csv.DictReader(handle))
    return {"throughput": float(row["Inferences/Second"]),
            "p50_ms": float(row["p50 latency"]) / 1e3, "p99_ms": float(row["p99 latency"]) / 1e3,
            "cpu_per_1k": (last[1] - first[1]) / requests * 1e3 if requests else float("nan"),
            "charged_s": last[0] - first[0]}


def run_pa_stable(pa: PerfAnalyzer, args: list[str], folder: Path, server: ModelServer
                  ) -> dict[str, float] | None:
    """perf_analyzer in concurrency mode to its own stability criterion: 3 windows of
    WINDOW_MS within 10% (its default); if the shared machine is too noisy for that in
    10 windows, within 25%. Charged for the 3 windows it reports."""
    for percentage in STABILITY_PERCENTAGES:
        result = run_pa(pa, [*args, "--measurement-interval", str(WINDOW_MS),
                             "--stability-percentage", str(percentage), "--max-trials", "10"],
                        folder, server, charged_s=STABLE_WINDOWS * WINDOW_MS / 1e3)
        if result is not None:
            return {**result, "stability_percentage": percentage}
    return None


def run_ours(target: Any, concurrency: int) -> dict[str, float]:
    asyncio.run(closed_loop(target, concurrency, 0.5, 10.0))
    result = asyncio.run(closed_loop(target, concurrency, OUR_WINDOW_S, 10.0))
    requests = result.completed + result.error_count
    return {"throughput": result.throughput, "p50_ms": result.percentile_ms(50),
            "cpu_per_1k": result.client_cpu_s / requests * 1e3 if requests else float("nan")}


def compare_generators(pa: PerfAnalyzer, folder: Path) -> list[dict[str, Any]]:
    rows = []
    loaded = load_spec(REPO / "serve.yaml.example")
    batch = take(load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace), 1)
    with serving(loaded, folder / "triton") as server:
        comparisons = [(protocol, concurrency) for protocol in ("http", "grpc")
                       for concurrency in CONCURRENCIES]
        for index, (protocol, concurrency) in enumerate(comparisons):
            target = server.grpc_request(batch) if protocol == "grpc" else \
                server.infer_request(batch)
            port = server.ports["grpc" if protocol == "grpc" else "http"]
            args = ["-m", server.model_name, "-u", f"127.0.0.1:{port}", "-i", protocol,
                    "--concurrency-range", str(concurrency)]
            # Alternate who goes first, so a drifting machine favours neither.
            if index % 2:
                ours, theirs = run_ours(target, concurrency), \
                    run_pa_stable(pa, args, folder, server)
            else:
                theirs, ours = run_pa_stable(pa, args, folder, server), \
                    run_ours(target, concurrency)
            row: dict[str, Any] = {"protocol": protocol, "concurrency": concurrency,
                                   "ours_first": bool(index % 2), "ours": ours,
                                   "perf_analyzer": theirs,
                                   "load_average": round(os.getloadavg()[0], 2)}
            if theirs:
                row["throughput_ratio"] = ours["throughput"] / theirs["throughput"]
                row["cpu_per_1k_ratio"] = ours["cpu_per_1k"] / theirs["cpu_per_1k"]
                row["p50_diff"] = (ours["p50_ms"] - theirs["p50_ms"]) / theirs["p50_ms"]
            rows.append(row)
            print_row(row)
    return rows


def print_row(row: dict[str, Any]) -> None:
    ours, theirs = row["ours"], row["perf_analyzer"]
    if theirs is None:
        print(f"{row['protocol']:<5} c={row['concurrency']:<3} perf_analyzer failed; ours "
              f"{ours['throughput']:.0f}/s")
        return
    print(f"{row['protocol']:<5} c={row['concurrency']:<3} throughput {ours['throughput']:7.0f}"
          f" vs {theirs['throughput']:7.0f}/s (x{row['throughput_ratio']:.2f})  CPU/1k "
          f"{ours['cpu_per_1k']:.3f} vs {theirs['cpu_per_1k']:.3f}s "
          f"(x{row['cpu_per_1k_ratio']:.2f})  p50 {ours['p50_ms']:.2f} vs "
          f"{theirs['p50_ms']:.2f}ms ({row['p50_diff']:+.0%})  PA stable within "
          f"{theirs['stability_percentage']:.0f}%, {'ours' if row['ours_first'] else 'PA'} "
          f"first, load {row['load_average']}")


def stall(pa: PerfAnalyzer, folder: Path) -> dict[str, float]:
    scenario = StallScenario()
    with scenario.serving(folder) as server:
        target = server.infer_request({"x": np.ones((1, 1), dtype=np.float32)})
        asyncio.run(closed_loop(target, 1, 0.5, 5.0))
        quiet = asyncio.run(closed_loop(target, 1, 1.0, 5.0))
        expected = scenario.expected_p99_ms(quiet.percentile_ms(50) / 1e3)
        result = asyncio.run(open_loop(target, [Phase("steady", scenario.rate,
                                                      scenario.seconds)], 10.0))
        ours = result.phases["steady"].percentile_ms(99)
        naive = result.from_send.percentile_ms(99)
        count = str(int(scenario.rate * scenario.seconds))
        args = ["-m", "stall", "-u", f"127.0.0.1:{server.ports['http']}", "-i", "http",
                "--request-rate-range", str(int(scenario.rate)), "--request-distribution",
                "constant", "--request-count", count, "--shape", "x:1"]
        sync = run_pa(pa, args, folder, server)
        asynchronous = run_pa(pa, [*args, "--async"], folder, server)
    figures = {"stall_p99_ms_ours": ours, "stall_p99_ms_expected": expected,
               "stall_p99_ms_perf_analyzer": sync["p99_ms"] if sync else float("nan"),
               "stall_p99_ms_perf_analyzer_async": (asynchronous["p99_ms"] if asynchronous
                                                    else float("nan")),
               "stall_p99_ms_ours_from_send": naive}
    print(f"stall every {scenario.every} for {scenario.stall_s * 1e3:.0f} ms at "
          f"{scenario.rate:.0f}/s: p99 ours {ours:.0f} ms (open loop, from intended start), "
          f"queueing predicts {expected:.0f} ms; perf_analyzer request-rate "
          f"{figures['stall_p99_ms_perf_analyzer']:.0f} ms (default, from actual send), "
          f"{figures['stall_p99_ms_perf_analyzer_async']:.0f} ms with --async")
    return figures


def main() -> None:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "serve-pipeline" / "perf_analyzer"
    pa = perf_analyzer(cache)
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-loadgen-"))
    try:
        rows = compare_generators(pa, folder)
        figures = stall(pa, folder)
        distributed_folder = folder / "distributed"
        distributed_folder.mkdir()
        distributed = distributed_stall(distributed_folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(headline(rows, figures, distributed)))


def headline(rows: list[dict[str, Any]], figures: dict[str, float],
             distributed: dict[str, Any]) -> dict[str, Any]:
    """The last line's figures, benchmarks/distributed.py's distributed_* included."""
    measured = [row for row in rows if "throughput_ratio" in row]
    out: dict[str, Any] = {
        "throughput_ratio_min": round(min(r["throughput_ratio"] for r in measured), 3),
        "cpu_per_1k_ratio_max": round(max(r["cpu_per_1k_ratio"] for r in measured), 3),
        "p50_diff_max": round(max(abs(r["p50_diff"]) for r in measured), 3),
    }
    for protocol in ("grpc", "http"):
        mine = [r for r in measured if r["protocol"] == protocol]
        out[f"{protocol}_throughput_ratio_min"] = round(
            min(r["throughput_ratio"] for r in mine), 3) if mine else None
        out[f"{protocol}_cpu_per_1k_ratio_max"] = round(
            max(r["cpu_per_1k_ratio"] for r in mine), 3) if mine else None
    out.update({key: round(value, 2) for key, value in figures.items()})
    out.update(distributed)
    out.update({"runs_compared": len(measured), "runs_total": len(rows),
                "load_average": round(os.getloadavg()[0], 2)})
    return out


if __name__ == "__main__":
    main()
