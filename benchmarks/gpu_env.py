"""The Python environment of the GPU check: a venv over the host's packages plus the
carried wheels, and the python-backend stub's view of it.

Triton's python-backend stub finds its interpreter through `python3` on PATH and
ignores PYTHONPATH (seen here with the 2.51 stub), so what it imports is decided
by the venv the pipeline runs from. The venv holds the carried wheels (numpy 1.26
first of all, see gpu_carry.py) and a .pth that appends the host's site-packages,
where torch and the CUDA libraries already are.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
from pathlib import Path

HOST_PTH = "zz_host_site_packages.pth"


class EnvironmentProblem(Exception):
    """The environment cannot run the check; the message says what is missing."""


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python3"


def venv_site_packages(venv: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def host_site_packages() -> list[str]:
    """This interpreter's site-packages (the host's torch, numpy 2, pynvml...)."""
    paths = [*site.getsitepackages()]
    user = site.getusersitepackages()
    if user and Path(user).is_dir():
        paths.append(user)
    return [p for p in paths if Path(p).is_dir()]


def create(venv: Path, carry: Path) -> Path:
    """A fresh venv with the carried wheels installed, over the host's packages; its
    python."""
    wheels = sorted(carry.glob("*.whl"))
    if not wheels:
        raise EnvironmentProblem(f"no wheels in {carry}: assemble it with "
                                 "benchmarks/gpu_carry.py and carry it along")
    if venv.exists():
        raise EnvironmentProblem(f"{venv} exists: pass a fresh --workdir")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "creating the venv")
    target = venv_site_packages(venv)
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
          "--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--target",
          str(target), *map(str, wheels)], "installing the carried wheels")
    # Added after the venv's own site-packages, so the carried wheels win over the host's;
    # addsitedir (not a bare path) so that the host's own .pth files are processed too.
    lines = [f"import site; site.addsitedir({path!r})" for path in host_site_packages()]
    (target / HOST_PTH).write_text("\n".join(lines) + "\n")
    return venv_python(venv)


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise EnvironmentProblem(f"{what} failed: {' | '.join(tail)}")


def stub_libraries(stub: Path, ld_library_path: str) -> dict[str, str]:
    """ldd of the python-backend stub with the server's library path: name -> where
    (or 'not found')."""
    env = dict(os.environ, LD_LIBRARY_PATH=ld_library_path)
    try:
        done = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, env=env)
    except FileNotFoundError:
        return {"ldd": "not found"}
    found = {}
    for line in done.stdout.splitlines():
        match = re.match(r"\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def libpython_problem(stub: Path, ld_library_path: str) -> tuple[str, str | None]:
    """Where the stub's libpython resolves, and a problem sentence when it does not."""
    libraries = stub_libraries(stub, ld_library_path)
    wanted = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    where = libraries.get(wanted, "not linked")
    if "ldd" in libraries:
        return "unknown (no ldd)", None
    if where == "not found":
        return where, (f"the python-backend stub needs {wanted}, which is not on this "
                       f"machine (this Python, {sys.executable}, was built without a shared "
                       "libpython): install libpython3.X for it or use a Python built "
                       "with --enable-shared")
    return where, None
