"""The carried folder's pytriton trimming (readelf) and its offline install (pip), on a
small fake wheel built here."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks import gpu_carry


def _elf_chain() -> tuple[bytes, bytes, str, bytes]:
    """Small real ELF files that load each other by name: libm needs libc.so.6; this
    interpreter's binary (stored under that name) needs libpython; the dynamic loader
    (stored as libpython) needs nothing. So libpython is needed only through libc."""
    python = Path(sys.executable).resolve()
    libpython = [n for n in gpu_carry.elf_needed(python) if n.startswith("libpython")]
    libm = Path("/lib/x86_64-linux-gnu/libm.so.6")
    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
    if not libpython or not libm.is_file() or not loader.is_file() or \
            "libc.so.6" not in gpu_carry.elf_needed(libm):
        pytest.skip("needs an x86-64 glibc system and a Python with a shared libpython")
    return libm.read_bytes(), python.read_bytes(), libpython[0], loader.read_bytes()


def _fake_pytriton(folder: Path) -> Path:
    """A wheel laid out like nvidia-pytriton 0.7.0, made of real ELF files."""
    libm, python, libpython_name, loader = _elf_chain()
    server = "pytriton/tritonserver/"
    libs = "nvidia_pytriton.libs/"
    members = {
        "pytriton/__init__.py": b"",
        "pytriton/triton.py": b"# pytriton's own Python API, not needed\n",
        server + "bin/tritonserver": libm,
        server + "backends/python/libtriton_python.so": libm,
        server + "backends/python/triton_python_backend_utils.py": b"",
        server + "python_backend_stubs/3.11/triton_python_backend_stub": libm,
        server + "python_backend_stubs/3.12/triton_python_backend_stub": libm,
        libs + "libc.so.6": python,
        libs + libpython_name: loader,
        libs + "libunused.so.1": loader,
        "nvidia_pytriton-0.7.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: nvidia-pytriton\nVersion: 0.7.0\n",
        "nvidia_pytriton-0.7.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_35_x86_64\n",
        "nvidia_pytriton-0.7.0.dist-info/RECORD": b"",
    }
    wheel = folder / "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            out.writestr(info, data)
    return wheel


def test_trimming_keeps_what_the_elf_files_load_and_one_stub(tmp_path: Path) -> None:
    source = _fake_pytriton(tmp_path)
    result = gpu_carry.trim_pytriton(source, tmp_path / "out" / source.name, ["3.12"],
                                     tmp_path / "scratch")
    kept = set(result.kept)
    assert "nvidia_pytriton.libs/libc.so.6" in kept
    assert any(n.startswith("nvidia_pytriton.libs/libpython") for n in kept)  # through libc
    assert "nvidia_pytriton.libs/libunused.so.1" not in kept
    assert "pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub" \
        in result.dropped
    assert "pytriton/triton.py" in result.dropped
    with zipfile.ZipFile(result.wheel) as wheel:
        provenance = json.loads(wheel.read("nvidia_pytriton-0.7.0.dist-info/TRIMMED.json"))
        record = wheel.read("nvidia_pytriton-0.7.0.dist-info/RECORD").decode()
        stub = wheel.getinfo("pytriton/tritonserver/python_backend_stubs/3.12/"
                             "triton_python_backend_stub")
    assert provenance["source_sha256"] == gpu_carry.sha256_file(source)
    assert stub.compress_type == zipfile.ZIP_LZMA
    assert (stub.external_attr >> 16) & 0o111
    assert len(record.strip().splitlines()) == len(kept) + 2  # + TRIMMED.json and RECORD

    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--disable-pip-version-check", "--target", str(target),
                    str(result.wheel)], check=True)
    installed = target / "pytriton/tritonserver/python_backend_stubs/3.12/" \
        "triton_python_backend_stub"
    assert installed.read_bytes() == Path("/lib/x86_64-linux-gnu/libm.so.6").read_bytes()
    assert not (target / "nvidia_pytriton.libs/libunused.so.1").exists()
