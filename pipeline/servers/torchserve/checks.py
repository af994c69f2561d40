"""What a run needs installed to start TorchServe: its launcher, torch-model-archiver and
Java 17+."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.servers.base import InstallCheck
from pipeline.servers.torchserve.mar import archiver

JAVA_MINIMUM = 17
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def installation_checks(env: Mapping[str, str]) -> list[InstallCheck]:
    return [_launcher(), _java(env)]


def _launcher() -> InstallCheck:
    launcher = Path(sys.executable).parent / "torchserve"
    if not launcher.exists():
        return InstallCheck("server.binary", False, f"torchserve not found at {launcher}: pip "
                            "install torchserve torch-model-archiver")
    try:
        archiver()
    except PipelineError as error:
        return InstallCheck("server.binary", False, str(error))
    return InstallCheck("server.binary", True, f"torchserve {launcher}")


def _java(env: Mapping[str, str]) -> InstallCheck:
    """TorchServe's launcher finds `java` on PATH (the venv's bin first, as the run does)."""
    name = "server.java"
    path = ":".join([str(Path(sys.executable).parent), env.get("PATH", "")])
    java = shutil.which("java", path=path)
    if java is None:
        return InstallCheck(name, False, f"java not found on PATH: TorchServe needs Java "
                            f"{JAVA_MINIMUM}+ (e.g. apt-get install openjdk-17-jre-"
                            "headless, or actions/setup-java)")
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=10,
                               env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return InstallCheck(name, False, f"{java} -version failed: {error}")
    match = _JAVA_VERSION.search(shown.stderr + shown.stdout)
    if match is None:
        return InstallCheck(name, False, f"{java} -version printed no version: install Java "
                            f"{JAVA_MINIMUM}+")
    major = int(match.group(1))
    major = int(match.group(2) or 0) if major == 1 else major   # "1.8" is Java 8
    if major < JAVA_MINIMUM:
        return InstallCheck(name, False, f"{java} is Java {major}: TorchServe needs Java "
                            f"{JAVA_MINIMUM}+ first on PATH")
    return InstallCheck(name, True, f"{java} (Java {major})")
