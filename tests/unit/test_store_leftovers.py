"""`store verify` lists what interrupted writers left in a local store; --repair removes
what is over an hour old and keeps what a writer may still own."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pipeline.release.store.local import LocalStore
from pipeline.release.verify import verify_store


def leave(store: LocalStore, key: str, age_s: float) -> Path:
    path = store.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"half a manifest")
    moment = time.time() - age_s
    os.utime(path, (moment, moment))
    return path


def test_temp_files_are_listed_not_counted_as_problems(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", "file://store")
    leave(store, "releases/m/.r1.json.0a1b2c3d4e5f.tmp", 7200)
    check = verify_store(store)
    assert check.problems == [] and check.to_json()["ok"] is True
    assert len(check.leftovers) == 1
    assert check.leftovers[0].startswith("releases/m/.r1.json.0a1b2c3d4e5f.tmp: temp file")
    assert "2.0 h ago" in check.leftovers[0] and "--repair" in check.leftovers[0]
    assert store.list("") == []           # never listed as a key


def test_repair_removes_old_leftovers_and_keeps_young_ones(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", "file://store")
    old = leave(store, "environments/m/.staging.json.aaaaaaaaaaaa.tmp", 7200)
    young = leave(store, "blobs/sha256/.0123.bbbbbbbbbbbb.tmp", 60)
    check = verify_store(store, repair=True)
    assert not old.exists() and young.exists()
    assert check.repaired == ["environments/m/.staging.json.aaaaaaaaaaaa.tmp: removed "
                              "(temp file .staging.json.aaaaaaaaaaaa.tmp, left by an "
                              "interrupted writer 2.0 h ago)"]
    assert len(check.leftovers) == 1 and "a writer may still own it" in check.leftovers[0]


def test_lock_files_are_not_leftovers(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store", "file://store")
    leave(store, "environments/m/.staging.json.lock", 7200)
    assert store.leftovers() == []
