"""The wheels of KServe's and Kubernetes' Python SDKs, from PyPI at pinned versions, downloaded
once into a cache (never installed: only their generated model sources are read) and checked
against the sha256 recorded here."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DOWNLOAD_TIMEOUT_S = 300


@dataclass(frozen=True)
class Wheel:
    project: str
    version: str
    filename: str
    sha256: str
    models: str     # the folder of the wheel that holds the generated model classes


KSERVE = Wheel("kserve", "0.21.0", "kserve-0.21.0-py3-none-any.whl",
               "df9bc5888704d9085015e08f1a8fced5ff0698f3becc6212d4e7b8234c71623b",
               "kserve/models/")
# 35.0.0 is the newest release whose models come from the same generator as the kserve SDK's
# (later ones are pydantic models).
KUBERNETES = Wheel("kubernetes", "35.0.0", "kubernetes-35.0.0-py2.py3-none-any.whl",
                   "39e2b33b46e5834ef6c3985ebfe2047ab39135d41de51ce7641a7ca5b372a13d",
                   "kubernetes/client/models/")
WHEELS = (KSERVE, KUBERNETES)


class WheelUnavailable(Exception):
    """A pinned wheel could not be had; the message is one line."""


def cache_folder() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "serve-pipeline" / "schemas"


def _matches(path: Path, wheel: Wheel) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == wheel.sha256


def _download(wheel: Wheel, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    requirement = cache / f"{wheel.project}.requirement.txt"
    requirement.write_text(f"{wheel.project}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--require-hashes", "--only-binary=:all:", "-r", str(requirement),
                        "-d", str(cache)], check=True, capture_output=True, text=True,
                       timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise WheelUnavailable(f"pip download {wheel.project}=={wheel.version}: no answer in "
                               f"{DOWNLOAD_TIMEOUT_S} s") from None
    except subprocess.CalledProcessError as exc:
        lines = [line for line in exc.stderr.splitlines() if line.startswith("ERROR")]
        last = (lines or exc.stderr.splitlines() or [f"exit {exc.returncode}"])[-1]
        raise WheelUnavailable(f"pip download {wheel.project}=={wheel.version}: "
                               f"{last.strip()}") from None


def wheel_path(wheel: Wheel, cache: Path | None = None) -> Path:
    """`wheel` in the cache, downloaded the first time; WheelUnavailable if it cannot be had
    or does not match its recorded sha256."""
    folder = cache or cache_folder()
    path = folder / wheel.filename
    if not _matches(path, wheel):
        path.unlink(missing_ok=True)
        _download(wheel, folder)
        if not _matches(path, wheel):
            raise WheelUnavailable(f"{wheel.filename} in {folder} does not match its pinned "
                                   f"sha256 {wheel.sha256}")
    return path
