"""A full disk (ENOSPC) while writing: one error that names the file, and nothing
half-written or temporary left behind. The fault is injected at the system call (no test
machine can be made to fill a disk on cue); a real tmpfs filled mid-run showed both."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from pipeline.errors import StoreError
from pipeline.record import RecordUnwritable, RunRecord, write_record
from pipeline.release.store.local import LocalStore


def no_space(*_: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_record_that_cannot_be_written_is_one_error_and_leaves_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "record.json"
    write_record(path, RunRecord(run_id="r1"))
    before = path.read_bytes()
    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(RecordUnwritable, match=f"cannot write the run record {path}: No space"):
        write_record(path, RunRecord(run_id="r1", command="promote"))
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]


def test_a_store_write_that_fails_leaves_no_temp_file(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path, "file://store")
    store.create("environments/demo/staging.json", b"{}")
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StoreError, match="No space left on device"):
        store.write_if("environments/demo/staging.json", b'{"current": "x"}',
                       store.read_versioned("environments/demo/staging.json")[1])  # type: ignore[index]
    with pytest.raises(StoreError, match="No space left on device"):
        store.create("audit/demo/one.json", b"{}")
    left = [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert left == []


def test_a_read_only_file_system_is_named_as_such(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Not as a permissions problem (root could not write there either). statvfs is faked:
    a read-only mount needs privileges a test cannot assume; a real `mount -o remount,ro`
    showed the same flag."""
    from pipeline.release.store.local import unwritable_reason

    assert "not writable by this user (EACCES)" in unwritable_reason(tmp_path)

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda _: ReadOnly())
    assert unwritable_reason(tmp_path) == "is on a read-only file system (EROFS)"
