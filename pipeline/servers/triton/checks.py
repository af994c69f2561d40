"""What a run needs installed to start tritonserver: the binary with its python backend,
and a shared libpython for the backend's stub."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.servers.base import InstallCheck
from pipeline.servers.triton.server import TritonInstallation


def installation_checks(runtime: str) -> list[InstallCheck]:
    if runtime == "docker":
        return [InstallCheck("server.binary", None, "tritonserver runs inside the serving image")]
    return [_binary(), _libpython()]


def _binary() -> InstallCheck:
    try:
        found = TritonInstallation.find()
    except PipelineError as error:
        return InstallCheck("server.binary", False, str(error))
    return InstallCheck("server.binary", True, f"tritonserver {found.binary}")


def _libpython() -> InstallCheck:
    """Triton's python-backend stub links this interpreter's shared libpython."""
    name = "server.libpython"
    library = str(sysconfig.get_config_var("INSTSONAME") or "")
    libdir = Path(str(sysconfig.get_config_var("LIBDIR") or ""))
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not library:
        return InstallCheck(name, False, f"{sys.executable} was built without --enable-shared: "
                            "tritonserver's python backend needs libpython3.x.so; use a "
                            "Debian/Ubuntu or pyenv python (with libpython3.x installed)")
    if not (libdir / library).exists():
        return InstallCheck(name, False, f"{libdir / library} is missing: install libpython"
                            f"{sys.version_info.major}.{sys.version_info.minor} (Debian/"
                            "Ubuntu) for tritonserver's python backend")
    return InstallCheck(name, True, str(libdir / library))
