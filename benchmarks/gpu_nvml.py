"""GPU name and GPU memory per process through NVML (nvidia-ml-py), sampled while a
pipeline run serves traffic."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any


def _nvml() -> Any:
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def gpu_name() -> tuple[str | None, str]:
    """The first GPU's name, or None and why there is none."""
    try:
        nvml = _nvml()
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    except Exception as exc:  # pynvml raises its own NVMLError subclasses
        return None, f"NVML cannot start ({exc})"
    try:
        if nvml.nvmlDeviceGetCount() == 0:
            return None, "NVML sees no GPU"
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        return (name.decode() if isinstance(name, bytes) else str(name)), ""
    finally:
        nvml.nvmlShutdown()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class NvmlSampler:
    """Every `period_s`, the GPU memory of each compute process whose command line
    contains `match`; keeps each process's peak (MiB)."""

    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self._peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, match: str) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(match,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def peaks(self) -> dict[str, float]:
        return dict(self._peaks)

    def _loop(self, match: str) -> None:
        nvml = _nvml()
        try:
            while not self._stop.wait(self.period_s):
                self._sample(nvml, match)
        finally:
            nvml.nvmlShutdown()

    def _sample(self, nvml: Any, match: str) -> None:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                command = _cmdline(process.pid)
                if match not in command or process.usedGpuMemory is None:
                    continue
                program = Path(command.split(" ", 1)[0]).name
                key = f"{program}[{process.pid}]@gpu{index}"
                used = process.usedGpuMemory / 2**20
                self._peaks[key] = max(self._peaks.get(key, 0.0), used)
