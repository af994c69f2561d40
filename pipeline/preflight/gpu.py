"""`device: gpu` needs a GPU that NVML sees (the driver and nvidia-ml-py)."""

from __future__ import annotations

from pipeline.preflight.checks import Check
from pipeline.spec.models import LoadedSpec


def gpu_checks(loaded: LoadedSpec) -> list[Check]:
    if loaded.spec.server.device != "gpu":
        return [Check.skipped("gpu", "server.device is cpu")]
    try:
        import pynvml
    except ImportError:
        return [Check.failed("gpu", "server.device: gpu but nvidia-ml-py is not installed: "
                                    "pip install nvidia-ml-py")]
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return [Check.failed("gpu", f"server.device: gpu but NVML cannot start ({error}): "
                                    "install the NVIDIA driver, or run on a GPU runner")]
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = [str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index)))
                 for index in range(count)]
    except pynvml.NVMLError as error:
        return [Check.failed("gpu", f"NVML cannot list GPUs: {error}")]
    finally:
        pynvml.nvmlShutdown()
    if not names:
        return [Check.failed("gpu", "server.device: gpu but NVML sees no GPU")]
    return [Check.ok("gpu", f"{len(names)} GPU(s): {', '.join(names)}")]
