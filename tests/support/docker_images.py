"""Docker for the integration tests, offline: a client, a loopback registry, a CPU Triton base.

CI cannot reach NVIDIA's registry (nor Docker Hub), so serving images are built on
`triton_cpu_base`, an image made here from Debian packages (debootstrap, apt's own mirror)
and from files already in this environment: the `tritonserver` 2.51 build with its python
backend that the nvidia-pytriton wheel bundles, plus numpy and onnxruntime. It is laid out
like NVIDIA's image (/opt/tritonserver/{bin,lib,backends,caches}, `tritonserver` on PATH),
CPU only, without torch.

Everything here needs root and a running daemon (`eval "$(.ci/docker-up)"`); tests should
skip when `docker_client()` returns None or `shutil.which("docker-registry")` is None.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import IO, Any

# Typed by types-docker where installed; the ignore keeps mypy --strict quiet without it.
import docker  # type: ignore[import-untyped, unused-ignore]
import docker.errors  # type: ignore[import-untyped, unused-ignore]

from pipeline.digest import sha256_file

SUITE = "bookworm"
# python3 (not python3-minimal: that one has no json/email/http); libpython3.11 because the
# python backend stub links libpython3.11.so.1.0 (its other needs, libstdc++6, libexpat1 and
# zlib1g, come with minbase/python3).
DEBIAN_PACKAGES = ("python3", "libpython3.11")
PYTHON = "3.11"  # Debian bookworm's python3; the stub, numpy and onnxruntime must match it
RECIPE_LABEL = "serve-pipeline.triton-cpu-base.recipe"
RECIPE_VERSION = "1"  # bump when the layout below changes in a way the inputs do not show
FIXED_MTIME = 315532800  # 1980-01-01: fixed file times in the build context (zip-safe)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUILD_TIMEOUT = 900.0

# ---------------------------------------------------------------- client


def docker_client(timeout: int = 600) -> docker.DockerClient | None:
    """A client for `DOCKER_HOST` (else the default socket), or None when no daemon answers.

    `timeout` is the per-request socket timeout in seconds: builds and runs of the Triton
    base move hundreds of MB, so it is generous.
    """
    address = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if address.startswith("unix://") and not Path(address.removeprefix("unix://")).exists():
        return None  # nothing to talk to (and no half-open socket left behind)
    try:
        client = docker.from_env(timeout=timeout)  # reads DOCKER_HOST; negotiates the API
    except docker.errors.DockerException:
        return None
    try:
        client.ping()
    except Exception:  # requests' ConnectionError, APIError, socket errors: no daemon
        client.close()
        return None
    return client


# ---------------------------------------------------------------- registry


def free_port() -> int:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_http(url: str, alive: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        if not alive():
            return False
        time.sleep(0.1)
    return False


@contextmanager
def registry(folder: Path, timeout: float = 30) -> Iterator[str]:
    """Debian's `docker-registry` (distribution 2.8) on 127.0.0.1:<free port>, storage in folder.

    Yields "127.0.0.1:PORT". No auth, no TLS: dockerd treats 127.0.0.0/8 as an insecure
    registry, so push/pull to it work as they are. The process is stopped by its PID on exit.
    Digests: ask manifests with `Accept: application/vnd.docker.distribution.manifest.v2+json`,
    otherwise registry 2.8 converts to schema1 and answers with another digest.
    """
    binary = shutil.which("docker-registry")
    if binary is None:
        raise FileNotFoundError("docker-registry is not installed (apt-get install "
                                "docker-registry, or run .ci/docker-up)")
    folder = folder.resolve()
    storage = folder / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    # Not the packaged /etc/docker/registry/config.yml: it has htpasswd auth and listens on
    # :5000 on every interface.
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: true\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n"
        "  delete:\n    enabled: true\n"
        "  cache:\n    blobdescriptor: inmemory\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        "  headers:\n    X-Content-Type-Options: [nosniff]\n")
    log_path = folder / "registry.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen([binary, "serve", str(config)], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        if not _wait_http(f"http://{address}/v2/", lambda: process.poll() is None, timeout):
            tail = log_path.read_text(errors="replace").splitlines()[-10:]
            raise RuntimeError(f"docker-registry did not answer on {address} within {timeout}s "
                               f"(exit code {process.poll()}):\n" + "\n".join(tail))
        yield address
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


# ---------------------------------------------------------------- Triton CPU base image


def _site_packages_of(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{module} is not installed in {sys.executable}'s environment")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _dist_info(site: Path, distribution: str) -> Path:
    dist = metadata.distribution(distribution)
    name = dist.metadata["Name"].replace("-", "_")
    found = site / f"{name}-{dist.version}.dist-info"
    if not found.is_dir():
        raise RuntimeError(f"{found} is missing")
    return found


def _apt_mirror() -> str:
    """The first non-security Debian URI apt uses (deb822 .sources or one-line .list)."""
    override = os.environ.get("SERVE_PIPELINE_DEBIAN_MIRROR")
    if override:
        return override
    apt = Path("/etc/apt")
    for sources in sorted(apt.glob("sources.list.d/*.sources")):
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if "security" not in uri:
                        return uri
    for listing in [apt / "sources.list", *sorted(apt.glob("sources.list.d/*.list"))]:
        if not listing.is_file():
            continue
        for line in listing.read_text().splitlines():
            words = line.split()
            if words[:1] == ["deb"]:
                for word in words[1:]:
                    if word.startswith(("http:", "https:", "file:")) and "security" not in word:
                        return word
    return "http://deb.debian.org/debian"


def _unmount_under(root: Path) -> None:
    """Unmount whatever is still mounted below root, deepest first (debootstrap mounts proc/sys)."""
    prefix = f"{root.resolve()}/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def _slim_rootfs(root: Path) -> None:
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin",
                    "var/lib/apt/lists/*_*", "usr/share/doc/*", "usr/share/man/*",
                    "usr/share/info/*", "var/log/*.log", "var/log/apt/*",
                    "var/cache/debconf/*-old", "var/lib/dpkg/*-old", "dev/*"):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    locales = root / "usr/share/locale"
    if locales.is_dir():
        for entry in locales.iterdir():
            if entry.name != "locale.alias":
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    for cache in sorted(root.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)
    (root / "etc/machine-id").write_text("")  # the runtime provides one


def _debian_rootfs(cache: Path) -> Path:
    """A slimmed `debootstrap --variant=minbase` rootfs as a deterministic tar, made once."""
    key = hashlib.sha256(f"{SUITE} {','.join(DEBIAN_PACKAGES)}".encode()).hexdigest()[:12]
    tarball = cache / f"rootfs-{SUITE}-{key}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise FileNotFoundError("debootstrap is not installed (apt-get install debootstrap, "
                                "or run .ci/docker-up)")
    work = Path(tempfile.mkdtemp(prefix="rootfs.", dir=cache))
    root = work / "root"
    log = cache / "debootstrap.log"
    try:
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
                   SUITE, str(root), _apt_mirror()]
        with log.open("wb") as out:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT, check=False)
        if done.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                               + "\n".join(tail))
        _unmount_under(root)
        _slim_rootfs(root)
        partial = work / "rootfs.tar"
        # Deterministic stream: sorted names, numeric owners, clamped mtimes, no atime/ctime.
        subprocess.run(["tar", "-C", str(root), "-c", "--sort=name", "--numeric-owner",
                        "--mtime=@0", "--clamp-mtime",
                        "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
                        "-f", str(partial), "."], check=True, capture_output=True)
        partial.replace(tarball)
    finally:
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def _import_rootfs(client: docker.DockerClient, tarball: Path) -> str:
    """`docker import` of the rootfs as serve-pipeline/debian-python:<suite>-<digest>."""
    reference = f"serve-pipeline/debian-python:{SUITE}-{sha256_file(tarball)[:12]}"
    try:
        client.images.get(reference)
        return reference
    except docker.errors.ImageNotFound:
        pass
    repository, _, tag = reference.partition(":")
    answer = client.api.import_image_from_file(
        str(tarball), repository=repository, tag=tag,
        changes=[f"ENV PATH={SYSTEM_PATH}", "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'])
    for line in str(answer).splitlines():
        if line.strip() and "error" in json.loads(line):
            raise RuntimeError(f"docker import of {tarball} failed: {line}")
    client.images.get(reference)
    return reference


TRITONSERVER_WRAPPER = f"""\
#!/bin/sh
# tritonserver as in NVIDIA's image: the bundled libraries, and the bundled backends unless
# --backend-directory is given. The python backend stub finds its interpreter (Debian's
# python3.11, with numpy and onnxruntime in /usr/local/lib/python3.11/dist-packages)
# through python3 on PATH.
export LD_LIBRARY_PATH="/opt/tritonserver/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
export PATH="${{PATH:-{SYSTEM_PATH}}}"
for arg in "$@"; do
  case "$arg" in
    --backend-directory|--backend-directory=*) exec /opt/tritonserver/bin/tritonserver "$@" ;;
  esac
done
exec /opt/tritonserver/bin/tritonserver --backend-directory=/opt/tritonserver/backends "$@"
"""

ENTRYPOINT = """\
#!/bin/sh
# ENTRYPOINT: `docker run IMAGE --model-repository=/models ...` starts tritonserver with those
# flags; `docker run IMAGE tritonserver ...` (NVIDIA's usage) and any other command run as given.
case "${1:-}" in
  -*) exec tritonserver "$@" ;;
  "") exec /bin/bash ;;
esac
exec "$@"
"""

DOCKERFILE = """\
FROM {debian}
COPY tritonserver-lib /opt/tritonserver/lib
COPY dist-packages /usr/local/lib/python{python}/dist-packages
COPY opt/tritonserver /opt/tritonserver
COPY bin /usr/local/bin
ENV PATH={path} LANG=C.UTF-8
ENTRYPOINT ["/usr/local/bin/triton-entrypoint"]
"""

# Nothing a server or `import numpy, onnxruntime` needs: tests, bytecode, onnxruntime's
# offline tooling (transformers/quantization/tools) and the libpython 3.13 that only the
# 3.13 stub uses.
_SKIPPED_DIRS = {"__pycache__", "tests"}
_SKIPPED_TOP = {("onnxruntime", "transformers"), ("onnxruntime", "quantization"),
                ("onnxruntime", "tools")}


def _context_files() -> dict[str, Path]:
    """Build-context path -> source file for everything copied into the image."""
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(f"the image's Debian python is {PYTHON}; numpy/onnxruntime are "
                           f"copied from this interpreter, which is {sys.version.split()[0]}")
    site = _site_packages_of("pytriton")
    server = site / "pytriton" / "tritonserver"
    files: dict[str, Path] = {
        "opt/tritonserver/bin/tritonserver": server / "bin" / "tritonserver",
        "opt/tritonserver/backends/python/triton_python_backend_stub":
            server / "python_backend_stubs" / PYTHON / "triton_python_backend_stub",
    }
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        files[f"opt/tritonserver/backends/python/{name}"] = server / "backends" / "python" / name
    for path in sorted((server / "caches").rglob("*")):
        if path.is_file():
            files[f"opt/tritonserver/{path.relative_to(server)}"] = path
    for path in sorted((site / "nvidia_pytriton.libs").iterdir()):
        if not path.name.startswith("libpython"):
            files[f"tritonserver-lib/{path.name}"] = path

    numpy_site = _site_packages_of("numpy")
    ort_site = _site_packages_of("onnxruntime")
    trees = [numpy_site / "numpy", numpy_site / "numpy.libs", _dist_info(numpy_site, "numpy"),
             ort_site / "onnxruntime", _dist_info(ort_site, "onnxruntime")]
    for tree in trees:
        if not tree.is_dir():
            raise RuntimeError(f"{tree} is missing")
        for path in sorted(tree.rglob("*")):
            relative = path.relative_to(tree.parent)
            if (not path.is_file() or _SKIPPED_DIRS.intersection(relative.parts)
                    or tuple(relative.parts[:2]) in _SKIPPED_TOP):
                continue
            files[f"dist-packages/{relative}"] = path
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"incomplete Triton/numpy/onnxruntime install: {missing}")
    return files


def _recipe(files: dict[str, Path]) -> str:
    """Digest of what the image is made of: Debian suite and packages, the versions and sizes
    of the copied files, the scripts. Not the rootfs bytes: a tagged image is reused even when
    the rootfs cache is gone."""
    versions = {name: metadata.version(name)
                for name in ("nvidia-pytriton", "numpy", "onnxruntime")}
    inventory = sorted((name, path.stat().st_size) for name, path in files.items())
    body = json.dumps([RECIPE_VERSION, SUITE, DEBIAN_PACKAGES, versions, inventory,
                       TRITONSERVER_WRAPPER, ENTRYPOINT, DOCKERFILE])
    return hashlib.sha256(body.encode()).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None,
         source: Path | None = None, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    if source is not None:
        info.size = source.stat().st_size
        info.mode = 0o755 if os.access(source, os.X_OK) else 0o644
        with source.open("rb") as stream:
            tar.addfile(info, stream)
    else:
        payload = data or b""
        info.size, info.mode = len(payload), mode
        tar.addfile(info, io.BytesIO(payload))


def _write_context(target: IO[bytes], debian: str, files: dict[str, Path]) -> None:
    dockerfile = DOCKERFILE.format(debian=debian, python=PYTHON, path=SYSTEM_PATH)
    with tarfile.open(fileobj=target, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "Dockerfile", dockerfile.encode())
        _add(tar, "bin/tritonserver", TRITONSERVER_WRAPPER.encode(), mode=0o755)
        _add(tar, "bin/triton-entrypoint", ENTRYPOINT.encode(), mode=0o755)
        for name in sorted(files):
            _add(tar, name, source=files[name])


# Run in the built image: every ELF resolves its libraries, numpy/onnxruntime import and run.
_SELF_CHECK = """\
set -e
export LD_LIBRARY_PATH=/opt/tritonserver/lib
for f in /opt/tritonserver/bin/tritonserver /opt/tritonserver/backends/python/*.so \\
         /opt/tritonserver/backends/python/triton_python_backend_stub \\
         /opt/tritonserver/caches/*/*.so; do
  if ldd "$f" | grep 'not found'; then echo "MISSING LIBRARIES for $f"; exit 1; fi
done
python3 -c 'import numpy, onnxruntime; assert (numpy.arange(3) * 2).sum() == 6; \\
print("numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__, \\
onnxruntime.get_available_providers())'
tritonserver --help 2>&1 | grep -q -- --model-repository || { tritonserver --help; exit 1; }
echo SELF-CHECK-OK
"""


def _self_check(client: docker.DockerClient, reference: str) -> str:
    container = client.containers.run(reference, entrypoint=["/bin/sh", "-c", _SELF_CHECK],
                                      detach=True, network_mode="none")
    try:
        result = container.wait(timeout=120)
        output = str(container.logs().decode(errors="replace"))
    finally:
        container.remove(force=True)
    if result.get("StatusCode") != 0 or "SELF-CHECK-OK" not in output:
        raise RuntimeError(f"the built image {reference} fails its self-check:\n{output}")
    return output


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def triton_cpu_base(client: docker.DockerClient, tag: str, cache: Path) -> str:
    """The offline CPU Triton base image `tag`, built once; returns `tag`.

    Reused when `tag` exists with the same recipe label (versions of nvidia-pytriton, numpy,
    onnxruntime, the file list, the scripts, the Debian suite/packages); rebuilt otherwise. The
    debootstrap rootfs is cached as `cache/rootfs-bookworm-*.tar` (about 1 min to make, a
    few seconds to import). The image:

    - Debian bookworm minbase + python3 (3.11.2) + libpython3.11, from apt's mirror;
    - /opt/tritonserver/{bin/tritonserver, lib/, backends/python/ (with the 3.11 stub),
      caches/}: the tritonserver 2.51 of the nvidia-pytriton wheel, in NVIDIA's layout;
    - numpy and onnxruntime (copied from this venv, CPython 3.11 wheels) in
      /usr/local/lib/python3.11/dist-packages, where Debian's python3 and so the stub look;
    - /usr/local/bin/tritonserver, a wrapper (LD_LIBRARY_PATH, default --backend-directory)
      and ENTRYPOINT /usr/local/bin/triton-entrypoint: `run IMAGE --model-repository=/m`
      and `run IMAGE tritonserver --model-repository=/m` both work. No GPU, no torch.
    """
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".triton-cpu-base.lock"):
        files = _context_files()
        recipe = _recipe(files)
        try:
            existing = client.images.get(tag)
            if (existing.labels or {}).get(RECIPE_LABEL) == recipe:
                return tag
        except docker.errors.ImageNotFound:
            pass
        debian = _import_rootfs(client, _debian_rootfs(cache))
        with tempfile.TemporaryFile(dir=cache) as context:
            _write_context(context, debian, files)
            context.seek(0)
            _, logs = client.images.build(
                fileobj=context, custom_context=True, tag=tag, labels={RECIPE_LABEL: recipe},
                rm=True, forcerm=True, pull=False, timeout=int(BUILD_TIMEOUT))
            for _ in logs:  # errors raise docker.errors.BuildError
                pass
        try:
            _self_check(client, tag)
        except Exception:
            client.images.remove(tag, force=True)
            raise
        return tag


def image_size(client: docker.DockerClient, reference: str) -> int:
    """Bytes of an image as `docker images` shows them (all its layers, shared ones included)."""
    attrs: dict[str, Any] = client.images.get(reference).attrs
    return int(attrs["Size"])
