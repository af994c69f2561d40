"""Whether a model file is of the format the spec declares, from its first bytes and, for a
zip archive, its member names; nothing is loaded or run.

- TorchScript (`torch.jit.save`): a zip archive with a `code/` folder and `constants.pkl`.
- eager (`torch.save`): a zip archive without them, or the legacy pickle format (it begins
  with the pickle protocol byte 0x80).
- ONNX: a protobuf `ModelProto`, whose first field is `ir_version` (field 1, a varint: the
  byte 0x08), as every ONNX writer serialises fields in order.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

TORCHSCRIPT_MARKS = ("/code/", "/constants.pkl")
PICKLE_PROTOCOL = b"\x80"
ONNX_FIRST_BYTE = b"\x08"


def _torchscript(archive_names: list[str]) -> bool:
    return any(mark in f"/{name}" for name in archive_names for mark in TORCHSCRIPT_MARKS)


def _first_bytes(head: bytes) -> str:
    if not head:
        return "it is empty"
    if all(32 <= byte < 127 or byte in (9, 10, 13) for byte in head):
        return f"it is text ({head[:24].decode('ascii')!r}…)"
    return f"it begins {head[:8]!r}"


def format_problem(path: Path, declared: str) -> str | None:
    """Why `path` is not a `declared` model file (one line), or None when it looks like one.
    OSError when it cannot be read."""
    with path.open("rb") as handle:
        head = handle.read(64)
    names: list[str] | None = None
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            names = None
    if declared == "torchscript":
        if names is None:
            return (f"not a TorchScript file: torch.jit.save writes a zip archive, and "
                    f"{_first_bytes(head)}")
        if not _torchscript(names):
            return ("a torch.save file (weights or a pickled module), not TorchScript: save "
                    "it with torch.jit.save(torch.jit.script(model)), or declare format: eager "
                    "with an entrypoint")
        return None
    if declared == "eager":
        if names is not None:
            return ("a TorchScript file, not a torch.save one: declare format: torchscript"
                    if _torchscript(names) else None)
        if head[:1] == PICKLE_PROTOCOL:
            return None
        return f"not a torch.save file (a zip archive or a pickle), and {_first_bytes(head)}"
    if declared == "onnx":
        if names is not None:
            return "a PyTorch file (a zip archive), not ONNX: declare its format, or export it"
        if head[:1] != ONNX_FIRST_BYTE:
            return f"not an ONNX model (a protobuf that begins with its ir_version), and " \
                   f"{_first_bytes(head)}"
    return None
