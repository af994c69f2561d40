"""Ray is an optional extra: whether it is here, and the one-line error when it is not."""

from __future__ import annotations

import importlib.util
import sys

from pipeline.errors import UsageError

INSTALL = "pip install 'serve-pipeline[ray]'"


def ray_installed() -> bool:
    if "ray" in sys.modules:           # imported already, or blocked (None)
        return sys.modules["ray"] is not None
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def missing_ray(key: str, workers: int) -> str:
    return (f"{key} is {workers}: load from several workers needs Ray, which is not "
            f"installed ({INSTALL})")


def require_ray(key: str, workers: int) -> None:
    if not ray_installed():
        raise UsageError(missing_ray(key, workers))
