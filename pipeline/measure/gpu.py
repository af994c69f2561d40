"""GPU memory per process through NVML, where a GPU and its driver exist.

Without them (any CPU machine) the answer is None, and reports say "not
measured", never 0.
"""

from __future__ import annotations

from collections.abc import Iterable


def gpu_memory_mb(pids: Iterable[int]) -> float | None:
    """Device memory used by these processes (MiB), summed over all GPUs; None when NVML
    cannot be used here."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    wanted = set(pids)
    try:
        total = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in wanted and process.usedGpuMemory is not None:
                    total += int(process.usedGpuMemory)
        return total / 2**20
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
