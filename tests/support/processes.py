"""Model-server processes still running for a project folder (the tests' leftover check)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psutil

TRITON = ("tritonserver", "triton_python")
TORCHSERVE = ("org.pytorch.serve", "model_service_worker", "torchserve")


def processes_under(folder: Path, markers: Sequence[str]) -> list[psutil.Process]:
    """Processes whose command line or working directory names `folder` and any of
    `markers` (TRITON, TORCHSERVE)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        try:
            text = " ".join(process.info["cmdline"] or []) + " " + (process.info["cwd"] or "")
        except (psutil.Error, TypeError):
            continue
        if str(folder) in text and any(marker in text for marker in markers):
            found.append(process)
    return found
