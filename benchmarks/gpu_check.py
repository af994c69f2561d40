"""The GPU runner path, checked end to end on one Linux machine with an NVIDIA GPU.

    python3 benchmarks/gpu_check.py --carry .gpu-carry     # on the GPU machine, offline
    python3 benchmarks/gpu_check.py --cpu-only             # the CPU half, anywhere

1. installs the carried wheels (benchmarks/gpu_carry.py) into a fresh venv over
   this Python's own packages, checks that the python-backend stub finds its
   libpython, and re-runs itself from that venv;
2. promotes examples/gpu/serve.yaml to the `gpu` environment of a local store
   (instances KIND_GPU, the TorchScript model on CUDA in the python backend),
   sampling GPU memory per process through NVML while it runs;
3. promotes the same spec to the `cpu` environment for comparison;
4. builds a TensorRT engine from the example's ONNX and checks its parity when
   TensorRT is here, else says why it was skipped.

It prints each run's summary and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import gpu_env  # noqa: E402
from benchmarks.gpu_nvml import NvmlSampler, gpu_name  # noqa: E402

SPEC = Path("examples/gpu/serve.yaml")
RUN_TIMEOUT_S = 300
_STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[gpu_check {time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


def make_project(workdir: Path, spec: Path | None = None) -> Path:
    """A scratch copy of the examples (own git repository, own store); the spec's path.
    `spec`, when given, replaces the example's serve.yaml in the copy, so that its paths
    and environments resolve as the example's do."""
    project = workdir / "project"
    shutil.copytree(REPO / "examples", project / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    if spec is not None:
        shutil.copyfile(spec, project / SPEC)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    return project / SPEC


def run_pipeline(spec: Path, environment: str, sampler: NvmlSampler | None) -> dict[str, Any]:
    """`promote <environment>` in a child process (its output goes straight through);
    the run's record."""
    runs = spec.parent / ".serve-pipeline" / "runs"
    before = set(runs.glob("*/record.json")) if runs.is_dir() else set()
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", COLUMNS="140")
    argv = [sys.executable, "-m", "pipeline", "promote", environment, "-f", str(spec)]
    say(f"promote {environment}: {' '.join(argv[1:])}")
    if sampler is not None:
        sampler.start(str(spec.parent))
    try:
        done = subprocess.run(argv, cwd=spec.parent, env=env, timeout=RUN_TIMEOUT_S)
        code: int | str = done.returncode
    except subprocess.TimeoutExpired:
        code = f"timed out after {RUN_TIMEOUT_S}s"
    finally:
        if sampler is not None:
            sampler.stop()
    after = sorted(set(runs.glob("*/record.json")) - before) if runs.is_dir() else []
    if not after:
        return {"status": "no record", "exit": code}
    record: dict[str, Any] = json.loads(after[-1].read_text())
    record["exit"] = code
    say(f"promote {environment}: exit {code}, run {record['status']} ({after[-1].parent})")
    return record


def metric(record: dict[str, Any], stage: str, name: str) -> float | None:
    for entry in record.get("stages", []):
        if entry["name"] == stage and name in entry.get("metrics", {}):
            return float(entry["metrics"][name])
    return None


def stage_status(record: dict[str, Any], stage: str) -> str:
    for entry in record.get("stages", []):
        if entry["name"] == stage:
            return f"{entry['status']}: {entry.get('message', '')}"
    return "not run"


def tensorrt_check(workdir: Path) -> tuple[str, bool | None]:
    import numpy as np

    from benchmarks import gpu_tensorrt
    from pipeline.model.runtime import LoadedModel

    if gpu_tensorrt.available() is None:
        return gpu_tensorrt.NOT_HERE, None
    mlp = REPO / "examples" / "mlp"
    reference = LoadedModel("torchscript", mlp / "model.pt", ["scores"])
    samples = dict(np.load(mlp / "samples.npz"))
    result = gpu_tensorrt.check(mlp / "model.onnx", reference, samples, 32,
                                workdir / "model.plan", atol=1e-3, rtol=1e-3)
    return result.outcome, result.parity_ok


def gpu_tensorrt_note() -> str:
    from benchmarks import gpu_tensorrt

    return "TensorRT is here" if gpu_tensorrt.available() else gpu_tensorrt.NOT_HERE[9:]


def summary(gpu: dict[str, Any] | None, cpu: dict[str, Any], reasons: dict[str, str],
            sampler: NvmlSampler | None, tensorrt: tuple[str, bool | None],
            name: str | None) -> dict[str, Any]:
    gpu = gpu or {}
    served_parity = stage_status(gpu, "parity").startswith("passed") if gpu else None
    engine_parity = tensorrt[1]
    parity_ok = None if served_parity is None else \
        served_parity and engine_parity is not False
    memory = metric(gpu, "latency", "server_gpu_mb")
    if gpu and memory is None:
        reasons["gpu_memory_mib"] = "the latency stage measured none: " + \
            str(_detail(gpu, "latency", "gpu_memory"))
    return {
        "gpu_name": name,
        "gpu_p99_ms": metric(gpu, "latency", "p99_ms"),
        "gpu_knee_rps": metric(gpu, "saturation", "knee_throughput_rps"),
        "cpu_knee_rps": metric(cpu, "saturation", "knee_throughput_rps"),
        "gpu_memory_mib": memory,
        "parity_ok": parity_ok,
        "tensorrt": tensorrt[0],
        "cpu_p99_ms": metric(cpu, "latency", "p99_ms"),
        "gpu_run": gpu.get("status"), "cpu_run": cpu.get("status"),
        "gpu_memory_per_process_mib": sampler.peaks() if sampler else None,
        "reasons": reasons,
    }


def _detail(record: dict[str, Any], stage: str, key: str) -> Any:
    for entry in record.get("stages", []):
        if entry["name"] == stage:
            return entry.get("details", {}).get(key)
    return None


def check_stub(reasons: dict[str, str]) -> bool:
    """Whether the python-backend stub can load its libpython here (printed either way)."""
    from pipeline.errors import ServerError
    from pipeline.servers.triton.server import TritonInstallation

    try:
        installation = TritonInstallation.find()
    except ServerError as exc:
        reasons["stub"] = str(exc)
        say(str(exc))
        return False
    library_path = installation.environment(os.environ)["LD_LIBRARY_PATH"]
    where, problem = gpu_env.libpython_problem(installation.stub, library_path)
    say(f"python-backend stub {installation.stub.parent.name}: libpython -> {where}")
    if problem:
        reasons["stub"] = problem
        say(problem)
    return problem is None


def in_environment(args: argparse.Namespace) -> int:
    """Everything after the install, run by the interpreter that has the packages."""
    import numpy

    reasons: dict[str, str] = {}
    say(f"python {sys.version.split()[0]} at {sys.executable}, numpy {numpy.__version__}")
    stub_ok = check_stub(reasons)
    spec = make_project(args.workdir, args.spec)
    name, why = gpu_name()
    gpu = None
    sampler = None
    if name is None:
        reasons["nvml"] = why
    if args.cpu_only:
        reasons["gpu"] = "--cpu-only"
    elif name is None:
        reasons["gpu"] = f"no GPU: {why}"
    elif not stub_ok:
        reasons["gpu"] = "the python-backend stub cannot start (see reasons.stub)"
    else:
        say(f"GPU: {name}")
        sampler = NvmlSampler()
        gpu = run_pipeline(spec, "gpu", sampler)
        say(f"GPU memory per process during the run (peak, MiB): {sampler.peaks()}")
    cpu = run_pipeline(spec, "cpu", None) if stub_ok else {"status": "not run"}
    tensorrt = tensorrt_check(args.workdir) if name else (
        f"skipped: no GPU to build an engine on; {gpu_tensorrt_note()}", None)
    result = summary(gpu, cpu, reasons, sampler, tensorrt, name)
    print(json.dumps(result, separators=(",", ":")), flush=True)
    runs = [cpu] if args.cpu_only else [gpu or {}, cpu]
    return 0 if all(r.get("status") == "passed" for r in runs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, default=None,
                        help="folder of wheels from benchmarks/gpu_carry.py (omit to use this "
                             "Python as it is)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/serve-pipeline-gpu-check"))
    parser.add_argument("--cpu-only", action="store_true",
                        help="run only the CPU half (any machine)")
    parser.add_argument("--spec", type=Path, default=None,
                        help="a serve.yaml to promote in place of examples/gpu/serve.yaml "
                             "(it takes that file's place in the scratch copy: other "
                             "measurement settings, or a quick check of the script)")
    parser.add_argument("--in-env", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workdir = args.workdir.resolve()
    if args.spec is not None:
        args.spec = args.spec.resolve()
        if not args.spec.is_file():
            parser.error(f"--spec {args.spec}: no such file")
    if args.in_env or args.carry is None:
        if not args.in_env:
            args.workdir.mkdir(parents=True, exist_ok=False)
        return in_environment(args)
    args.workdir.mkdir(parents=True, exist_ok=False)
    say(f"installing {args.carry} into a venv under {args.workdir}")
    try:
        python = gpu_env.create(args.workdir / "venv", args.carry.resolve())
    except gpu_env.EnvironmentProblem as exc:
        say(str(exc))
        print(json.dumps({"gpu_name": None, "error": str(exc)}), flush=True)
        return 1
    forwarded = ["--workdir", str(args.workdir), "--in-env"] + \
        (["--cpu-only"] if args.cpu_only else []) + \
        (["--spec", str(args.spec)] if args.spec else [])
    return subprocess.run([str(python), str(Path(__file__).resolve()), *forwarded],
                          env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode


if __name__ == "__main__":
    sys.exit(main())
