"""Model archives (.mar) for TorchServe: built by torch-model-archiver, made reproducible.

torch-model-archiver stamps `createdOn` into the manifest and gives zip entries
their build time and file-system order, so two builds of the same inputs
differ. The archive is rewritten with sorted entries, fixed times and modes,
and a fixed `createdOn`: same inputs, same bytes, same digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.servers.environment import server_environment

FIXED_TIME = (1980, 1, 1, 0, 0, 0)
MANIFEST = "MAR-INF/MANIFEST.json"


def archiver() -> Path:
    path = Path(sys.executable).parent / "torch-model-archiver"
    if not path.exists():
        raise PipelineError("torch-model-archiver not found next to this Python: "
                            "pip install torch-model-archiver")
    return path


def build_mar(name: str, version: str, serialized: Path, handler: Path, extra_files: list[Path],
              export_dir: Path, scratch: Path, env: Mapping[str, str]) -> Path:
    """Run torch-model-archiver and return the normalised `<export_dir>/<name>.mar`."""
    export_dir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    argv = [str(archiver()), "--model-name", name, "--version", version,
            "--serialized-file", str(serialized), "--handler", str(handler),
            "--export-path", str(export_dir), "--force"]
    if extra_files:
        argv += ["--extra-files", ",".join(str(p) for p in extra_files)]
    # It stages files in $TMPDIR/<name>: a private TMPDIR keeps concurrent builds apart.
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                               env=server_environment(env, TMPDIR=str(scratch)))
    produced = export_dir / f"{name}.mar"
    if completed.returncode != 0 or not produced.is_file():
        detail = (completed.stderr or completed.stdout).strip().splitlines()
        raise PipelineError("torch-model-archiver failed: " + (detail[-1] if detail else
                                                               f"exit {completed.returncode}"))
    normalize(produced)
    return produced


def normalize(path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()
                   if not info.is_dir()}
    manifest = json.loads(entries[MANIFEST])
    manifest["createdOn"] = "01/01/1980 00:00:00"
    entries[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True).encode()
    temp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(temp, "w") as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            archive.writestr(info, entries[name], compresslevel=6)
    os.replace(temp, path)


def read_member(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read(member)
