"""The server binary a run will start: tritonserver with its python backend and a shared
libpython, or TorchServe's launcher, torch-model-archiver and Java 17+."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.preflight.checks import Check
from pipeline.servers.torchserve.mar import archiver
from pipeline.servers.triton.server import TritonInstallation
from pipeline.spec.models import LoadedSpec

JAVA_MINIMUM = 17
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def server_checks(loaded: LoadedSpec, env: Mapping[str, str]) -> list[Check]:
    server = loaded.spec.server
    if server.kind == "torchserve":
        return [_torchserve(), _java(env)]
    if server.runtime == "docker":
        return [Check.skipped("server.binary", "tritonserver runs inside the serving image")]
    return [_triton(), _libpython()]


def _triton() -> Check:
    try:
        found = TritonInstallation.find()
    except PipelineError as error:
        return Check.failed("server.binary", str(error))
    return Check.ok("server.binary", f"tritonserver {found.binary}")


def _libpython() -> Check:
    """Triton's python-backend stub links this interpreter's shared libpython."""
    name = "server.libpython"
    library = str(sysconfig.get_config_var("INSTSONAME") or "")
    libdir = Path(str(sysconfig.get_config_var("LIBDIR") or ""))
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not library:
        return Check.failed(name, f"{sys.executable} was built without --enable-shared: "
                                  "tritonserver's python backend needs libpython3.x.so; use a "
                                  "Debian/Ubuntu or pyenv python (with libpython3.x installed)")
    if not (libdir / library).exists():
        return Check.failed(name, f"{libdir / library} is missing: install libpython"
                                  f"{sys.version_info.major}.{sys.version_info.minor} (Debian/"
                                  "Ubuntu) for tritonserver's python backend")
    return Check.ok(name, str(libdir / library))


def _torchserve() -> Check:
    launcher = Path(sys.executable).parent / "torchserve"
    if not launcher.exists():
        return Check.failed("server.binary", f"torchserve not found at {launcher}: pip install "
                                             "torchserve torch-model-archiver")
    try:
        archiver()
    except PipelineError as error:
        return Check.failed("server.binary", str(error))
    return Check.ok("server.binary", f"torchserve {launcher}")


def _java(env: Mapping[str, str]) -> Check:
    """TorchServe's launcher finds `java` on PATH (the venv's bin first, as the run does)."""
    name = "server.java"
    path = ":".join([str(Path(sys.executable).parent), env.get("PATH", "")])
    java = shutil.which("java", path=path)
    if java is None:
        return Check.failed(name, f"java not found on PATH: TorchServe needs Java "
                                  f"{JAVA_MINIMUM}+ (e.g. apt-get install openjdk-17-jre-"
                                  "headless, or actions/setup-java)")
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=10,
                               env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Check.failed(name, f"{java} -version failed: {error}")
    match = _JAVA_VERSION.search(shown.stderr + shown.stdout)
    if match is None:
        return Check.failed(name, f"{java} -version printed no version: install Java "
                                  f"{JAVA_MINIMUM}+")
    major = int(match.group(1))
    major = int(match.group(2) or 0) if major == 1 else major   # "1.8" is Java 8
    if major < JAVA_MINIMUM:
        return Check.failed(name, f"{java} is Java {major}: TorchServe needs Java "
                                  f"{JAVA_MINIMUM}+ first on PATH")
    return Check.ok(name, f"{java} (Java {major})")
