"""Assemble the folder of wheels that travels to a GPU machine with no internet.

    python benchmarks/gpu_carry.py            # download, trim nvidia-pytriton, write .gpu-carry/
    python benchmarks/gpu_carry.py --check    # print size and list; exit 1 if over the limit

The GPU machine has Python 3.12 with torch, grpcio, rich, typer, psutil, pyyaml,
protobuf, nvidia-ml-py and numpy 2, and nothing else this project needs. What
travels there is limited (64 MiB for the working tree and everything carried),
so the folder holds only the missing cp312/manylinux wheels, plus:

- numpy 1.26.4: tritonserver 2.51's python-backend stub (pybind11 2.10) returns
  empty tensors with numpy 2 (seen here with the 3.11 stub and numpy 2.4), and
  the project pins numpy<2 anyway; ml-dtypes 0.5.4 comes along because
  tritonclient imports it and a newer build may need numpy 2.
- nvidia-pytriton 0.7.0, trimmed: only tritonserver, the python backend, the
  stubs asked for and the bundled libraries those ELF files need (their DT_NEEDED
  closure, read with readelf), recompressed with LZMA. MANIFEST.json records the
  original wheel's sha256 and every file left out.

boto3, DVC and the Docker SDK stay behind: the pipeline imports them only for an
S3 store, a DVC model source and `runtime: docker`, none of which the check uses.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO / ".gpu-carry"
DEFAULT_CACHE = REPO / ".gpu-carry-cache"
LIMIT_BYTES = 60 * 2**20
MANIFEST = "MANIFEST.json"
PYTRITON = "nvidia-pytriton==0.7.0"

# What the pipeline imports that the GPU machine lacks, at the versions tested here.
WHEELS: tuple[str, ...] = (
    "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0",
    "hdrhistogram==0.10.8",
    "tritonclient==2.73.0", "python-rapidjson==1.25", "geventhttpclient==2.6.1",
    "gevent==26.9.0", "greenlet==3.3.2", "zope.event==6.2", "zope.interface==8.7",
    "brotli==1.2.1", "ml-dtypes==0.5.4", "numpy==1.26.4",
)
PLATFORMS: tuple[str, ...] = (
    "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
    "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64",
)
TARGET_PYTHON = "3.12"

# Inside the nvidia-pytriton wheel: what Triton needs besides the bundled libraries.
_SERVER = "pytriton/tritonserver/"
_KEPT_PREFIXES = ("pytriton/__init__.py", _SERVER + "bin/", _SERVER + "backends/",
                  _SERVER + "caches/")
_LIBS = "nvidia_pytriton.libs/"


class CarryError(Exception):
    """The folder cannot be assembled or does not hold what it should."""


@dataclass(frozen=True)
class TrimResult:
    wheel: Path
    kept: list[str]
    dropped: list[str]
    source_sha256: str


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(requirements: Sequence[str], destination: Path,
             find_links: Path | None = None) -> None:
    """pip download cp312 manylinux wheels, no dependencies (each one is named)."""
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", TARGET_PYTHON, "--implementation", "cp", "--abi",
            f"cp{TARGET_PYTHON.replace('.', '')}", "--abi", "abi3", "--abi", "none",
            "-d", str(destination)]
    for platform in (*PLATFORMS, "any"):
        argv += ["--platform", platform]
    if find_links is not None:
        argv += ["--no-index", "--find-links", str(find_links)]
    done = subprocess.run([*argv, *requirements], capture_output=True, text=True)
    if done.returncode != 0:
        raise CarryError(f"pip download failed: {done.stderr.strip().splitlines()[-1:]}")


# ---------------------------------------------------------------- trimming nvidia-pytriton


def elf_needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF file (readelf, from binutils)."""
    try:
        done = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True,
                              check=True)
    except FileNotFoundError:
        raise CarryError("readelf not found: install binutils") from None
    except subprocess.CalledProcessError as exc:
        raise CarryError(f"readelf cannot read {path}: {exc.stderr.strip()}") from None
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", done.stdout)


def needed_closure(roots: Iterable[Path], libs_dir: Path) -> set[str]:
    """Names of the bundled libraries the roots load, directly or through each other."""
    found: set[str] = set()
    pending = list(roots)
    while pending:
        for name in elf_needed(pending.pop()):
            candidate = libs_dir / name
            if name not in found and candidate.is_file():
                found.add(name)
                pending.append(candidate)
    return found


def _kept_members(names: Sequence[str], stubs: Sequence[str], libs: set[str]) -> list[str]:
    prefixes = (*_KEPT_PREFIXES,
                *(f"{_SERVER}python_backend_stubs/{version}/" for version in stubs))
    kept = []
    for name in names:
        if name.endswith("/"):
            continue
        in_dist_info = name.split("/", 1)[0].endswith(".dist-info")
        if (name.startswith(prefixes) or (name.startswith(_LIBS) and name[len(_LIBS):] in libs)
                or (in_dist_info and not name.endswith("/RECORD"))):
            kept.append(name)
    return kept


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim_pytriton(source: Path, destination: Path, stubs: Sequence[str],
                  scratch: Path) -> TrimResult:
    """A wheel of the same name holding only what tritonserver and the python backend
    load; the stubs of the given Python versions only."""
    with zipfile.ZipFile(source) as wheel:
        names = wheel.namelist()
        roots = [n for n in names if n.startswith((_SERVER + "bin/", _SERVER + "backends/",
                                                   _SERVER + "caches/"))
                 and not n.endswith((".py", "/"))]
        roots += [f"{_SERVER}python_backend_stubs/{v}/triton_python_backend_stub" for v in stubs]
        missing = [r for r in roots if r not in names]
        if missing:
            raise CarryError(f"{source.name} has no {', '.join(missing)}")
        wheel.extractall(scratch, members=[*roots, *(n for n in names if n.startswith(_LIBS))])
        libs = needed_closure([scratch / r for r in roots], scratch / _LIBS)
        kept = _kept_members(names, stubs, libs)
        dist_info = next(n.split("/", 1)[0] for n in names if ".dist-info/" in n)
        provenance = {"source": source.name, "source_sha256": sha256_file(source),
                      "stubs": list(stubs), "kept_libs": sorted(libs),
                      "dropped": sorted(set(names) - set(kept) - {f"{dist_info}/RECORD"})}
        destination.parent.mkdir(parents=True, exist_ok=True)
        record = []
        with zipfile.ZipFile(destination, "w", zipfile.ZIP_LZMA) as out:
            for name in kept:
                info = wheel.getinfo(name)
                data = wheel.read(name)
                target = zipfile.ZipInfo(name, info.date_time)
                target.external_attr = info.external_attr
                target.compress_type = zipfile.ZIP_LZMA
                out.writestr(target, data)
                record.append(_record_line(name, data))
            trimmed = json.dumps(provenance, indent=1).encode()
            out.writestr(f"{dist_info}/TRIMMED.json", trimmed, zipfile.ZIP_LZMA)
            record.append(_record_line(f"{dist_info}/TRIMMED.json", trimmed))
            record.append(f"{dist_info}/RECORD,,")
            out.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n", zipfile.ZIP_DEFLATED)
    return TrimResult(destination, kept, list(provenance["dropped"]),
                      str(provenance["source_sha256"]))


# ---------------------------------------------------------------- the folder


def assemble(destination: Path, cache: Path, stubs: Sequence[str] = (TARGET_PYTHON,),
             find_links: Path | None = None) -> dict[str, object]:
    """Download into `cache`, then write `destination`: the wheels, the trimmed
    nvidia-pytriton and MANIFEST.json (name, size, sha256 of each; the trimming's
    provenance)."""
    cache.mkdir(parents=True, exist_ok=True)
    download([*WHEELS, PYTRITON], cache, find_links)
    destination.mkdir(parents=True, exist_ok=True)
    for stale in destination.iterdir():
        stale.unlink()
    files: list[dict[str, object]] = []
    pytriton_source = None
    for wheel in sorted(cache.glob("*.whl")):
        if wheel.name.startswith("nvidia_pytriton-"):
            pytriton_source = wheel
            continue
        if not _wanted(wheel.name):
            continue
        (destination / wheel.name).write_bytes(wheel.read_bytes())
        files.append({"file": wheel.name, "bytes": wheel.stat().st_size,
                      "sha256": sha256_file(wheel)})
    if pytriton_source is None:
        raise CarryError(f"no nvidia_pytriton wheel in {cache}")
    scratch = cache / "pytriton-extract"
    trimmed = trim_pytriton(pytriton_source, destination / pytriton_source.name, stubs, scratch)
    files.append({"file": trimmed.wheel.name, "bytes": trimmed.wheel.stat().st_size,
                  "sha256": sha256_file(trimmed.wheel),
                  "trimmed_from_sha256": trimmed.source_sha256,
                  "trimmed_from_bytes": pytriton_source.stat().st_size,
                  "dropped_files": trimmed.dropped})
    manifest = {"python": TARGET_PYTHON, "stubs": list(stubs), "limit_bytes": LIMIT_BYTES,
                "files": files}
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _wanted(file_name: str) -> bool:
    """One of WHEELS (pip normalises names: dashes and dots become underscores)."""
    project = file_name.split("-", 1)[0].lower()
    return any(re.sub(r"[-_.]+", "_", req.split("==")[0]).lower() == project for req in WHEELS)


def check(destination: Path, limit: int = LIMIT_BYTES) -> list[str]:
    """Problems with the folder (empty when it is complete, intact and under the limit)."""
    manifest_path = destination / MANIFEST
    if not manifest_path.is_file():
        return [f"{manifest_path} is missing: run benchmarks/gpu_carry.py first"]
    manifest = json.loads(manifest_path.read_text())
    problems = []
    listed = {str(entry["file"]): entry for entry in manifest["files"]}
    for name, entry in listed.items():
        path = destination / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{name} does not match its sha256 in {MANIFEST}")
    extra = sorted(p.name for p in destination.iterdir()
                   if p.name not in listed and p.name != MANIFEST)
    problems += [f"{name} is not in {MANIFEST}" for name in extra]
    total = folder_bytes(destination)
    if total > limit:
        problems.append(f"{total / 2**20:.1f} MiB is over the {limit / 2**20:.0f} MiB limit")
    return problems


def folder_bytes(destination: Path) -> int:
    return sum(p.stat().st_size for p in destination.rglob("*") if p.is_file())


def listing(destination: Path) -> str:
    lines = [f"{p.stat().st_size / 2**20:8.2f} MiB  {p.name}"
             for p in sorted(destination.iterdir(), key=lambda p: -p.stat().st_size)]
    lines.append(f"{folder_bytes(destination) / 2**20:8.2f} MiB  total in {destination}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the downloaded wheels are kept (not carried)")
    parser.add_argument("--stubs", default=TARGET_PYTHON,
                        help="python-backend stub versions to keep, comma-separated")
    parser.add_argument("--find-links", type=Path, default=None,
                        help="take the wheels from this folder instead of the index")
    parser.add_argument("--check", action="store_true", help="only check and list the folder")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            assemble(args.dest, args.cache, args.stubs.split(","), args.find_links)
        problems = check(args.dest)
    except CarryError as exc:
        print(f"gpu_carry: {exc}", file=sys.stderr)
        return 2
    if args.dest.is_dir():
        print(listing(args.dest))
    for problem in problems:
        print(f"gpu_carry: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
