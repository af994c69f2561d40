"""Crashes of the tool: SIGKILL a release writer at random points, then check the store.

A driver (tests/support/crash_driver.py) publishes releases and moves an
environment pointer in a loop, against a local store and against S3 (moto over
HTTP). It is killed with SIGKILL at seeded random points, 20 times per store kind.
After every kill `store verify` must find nothing wrong: every manifest's blobs
present and intact, every pointer's current release has a manifest, histories are
chains. Temp files a killed writer leaves in the local store are allowed, but must
never be listed. At the end an un-killed driver run must succeed on the same store
(no stale lock: the local store's flock is dropped by the kernel).

Kill points are chosen as: a random number (0-5) of completed steps after the driver
starts writing, then a random delay of up to one step's typical duration, so kills
land inside blob writes, manifest creation, pointer swaps, rollbacks and audit
writes alike (the driver rolls back every second iteration).
The next driver is started (and imports) while the previous store is checked, and
only starts writing when told "go", so timing does not drift with import time.
"""

from __future__ import annotations

import fcntl
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

from pipeline.release.manifest import list_releases
from pipeline.release.pointers import audit_key, read_pointer
from pipeline.release.store import open_store
from pipeline.release.store.base import Store
from pipeline.release.store.local import LocalStore
from pipeline.release.verify import verify_store
from tests.support.moto_s3 import S3Server

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

DRIVER = Path(__file__).resolve().parents[1] / "support" / "crash_driver.py"
NAME = "crashy"
ENVIRONMENT = "staging"
KILLS = 20
SEED = 0x5EED_C4A5
# The big blob per release. Every kill re-hashes the whole store; on S3 that is one GET
# per blob through moto (~6 ms each plus ~180 MB/s, more on a loaded machine), so the S3
# one is a little smaller to keep both kill loops within about a minute.
BIG_MB = {"file": 3.0, "s3": 2.0}
# The longest random delay after the chosen number of steps, per store kind: about one
# step's duration (a publish with its big blob), so kills spread over a whole step.
MAX_DELAY_S = {"file": 0.06, "s3": 0.12}
STARTUP_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 30.0


class Tally(Protocol):
    def add(self, kind: str, n: int) -> None: ...


class DriverDied(AssertionError):
    pass


@dataclass
class Driver:
    """A crash_driver subprocess whose stdout lines arrive on a queue."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, target: Target, tag: str, workdir: Path, *extra: str) -> Driver:
        process = subprocess.Popen(
            [sys.executable, str(DRIVER), "--store", target.url, "--tag", tag,
             "--big-mb", str(BIG_MB[target.kind]), "--workdir", str(workdir), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=target.env)
        driver = cls(process)
        threading.Thread(target=driver._pump, daemon=True).start()
        return driver

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout: float) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"driver said nothing for {timeout}s after "
                                 f"{self.seen[-3:]}") from None
        if line is None:
            self.process.wait(timeout=10)
            stderr = self.process.stderr.read() if self.process.stderr else ""
            raise DriverDied(f"driver exited {self.process.returncode} after "
                             f"{self.seen[-3:]}: {stderr.strip()[-2000:]}")
        self.seen.append(line)
        return line

    def expect(self, word: str, timeout: float) -> str:
        line = self.next_line(timeout)
        assert line.split(" ", 1)[0] == word, f"expected {word!r}, driver said {line!r}"
        return line

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        """SIGKILL (unless it already died, which fails the test) and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        stderr = self.process.stderr.read() if self.process.stderr else ""
        assert self.process.returncode == -signal.SIGKILL, (
            f"driver exited {self.process.returncode} on its own after {self.seen[-3:]}: "
            f"{stderr.strip()[-2000:]}")
        self.close()

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """Let it run to its end: its exit status and stderr (all stdout lines in `seen`)."""
        try:
            self.process.wait(timeout=timeout)
            while (line := self.lines.get(timeout=10)) is not None:
                self.seen.append(line)
            stderr = self.process.stderr.read() if self.process.stderr else ""
        finally:
            self.close()
        return self.process.returncode, stderr.strip()[-2000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@dataclass
class Target:
    kind: str
    url: str
    env: dict[str, str]
    store: Store
    root: Path | None  # the local store's folder


@pytest.fixture(params=["file", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "file":
        root = tmp_path / "store"
        url = f"file://{root}"
        yield Target("file", url, dict(os.environ), open_store(url, tmp_path), root)
        return
    server: S3Server = request.getfixturevalue("s3_env")
    url = f"s3://{server.new_bucket()}/crash"
    yield Target("s3", url, dict(server.env), open_store(url, tmp_path, server.endpoint), None)


def temp_files(target: Target) -> list[Path]:
    """What a killed writer left in the local store: hidden `.<name>.<hex>.tmp` files."""
    if target.root is None:
        return []
    return sorted(p for p in target.root.rglob(".*.tmp") if p.is_file())


def listing_problems(target: Target) -> list[str]:
    """Hidden temp or lock files must never show up as keys, releases or pointers."""
    store = target.store
    problems = []
    for prefix in ("blobs/", "releases/", "environments/", "audit/"):
        for key in store.list(prefix):
            if key.rsplit("/", 1)[-1].startswith("."):
                problems.append(f"listing shows hidden file {key}")
    for release_id in list_releases(store, NAME):
        if release_id.startswith(".") or release_id.endswith(".tmp"):
            problems.append(f"list_releases shows temp file {release_id}")
    return problems


def audit_gaps(store: Store) -> list[str]:
    """Pointer events without their audit entry (docs/releases.md: one audit file per promote and
    rollback)."""
    pointer, _ = read_pointer(store, NAME, ENVIRONMENT)
    keys = set(store.list(f"audit/{NAME}/"))
    return [f"{event.action.value} of {event.release_id} at {event.at}"
            for event in pointer.events if audit_key(NAME, ENVIRONMENT, event) not in keys]


def is_pending_audit(problem: str) -> bool:
    """A crash between the pointer write and its audit entry: reported by store verify and
    rebuilt from the event by the next move, so not an inconsistency."""
    return "has no audit entry" in problem


def assert_lock_free(target: Target) -> None:
    """The pointer's flock is free again once its holder is dead."""
    if not isinstance(target.store, LocalStore) or target.root is None:
        return
    lock_path = target.root / "environments" / NAME / f".{ENVIRONMENT}.json.lock"
    if not lock_path.exists():
        return
    with lock_path.open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def test_sigkill_at_random_points_leaves_a_consistent_store(
        target: Target, tally: Tally, tmp_path: Path) -> None:
    rng = random.Random(f"{SEED}-{target.kind}")
    workdir = tmp_path / "driver"
    started = time.monotonic()
    problems: list[str] = []
    landed: Counter[str] = Counter()
    leftovers = 0
    gaps: list[str] = []
    verify_s = 0.0

    def spawn(index: int) -> Driver:
        return Driver.start(target, f"k{index}", workdir, "--wait-go")

    upcoming: Driver | None = spawn(0)
    try:
        for index in range(KILLS):
            assert upcoming is not None
            driver, upcoming = upcoming, None
            try:
                driver.expect("loaded", STARTUP_TIMEOUT_S)
                steps = rng.randint(0, 5)
                delay = rng.uniform(0.0, MAX_DELAY_S[target.kind])
                driver.go()
                driver.expect("ready", STEP_TIMEOUT_S)
                for _ in range(steps):
                    driver.next_line(STEP_TIMEOUT_S)
                time.sleep(delay)
                driver.kill()
            finally:
                driver.close()
            tally.add("kills", 1)
            last = driver.seen[-1].split(" ", 1)[0]
            landed[f"after {last}"] += 1
            if index + 1 < KILLS:
                upcoming = spawn(index + 1)  # imports while we check the store

            checked_at = time.monotonic()
            check = verify_store(target.store)
            assert_lock_free(target)
            found = [p for p in check.problems if not is_pending_audit(p)] + \
                listing_problems(target)
            verify_s += time.monotonic() - checked_at
            tally.add("inconsistencies", len(found))
            problems += [f"kill {index} ({steps} steps + {delay * 1000:.0f} ms, last line "
                         f"{driver.seen[-1]!r}): {problem}" for problem in found]
            leftovers = len(temp_files(target))
            gaps = audit_gaps(target.store)
    finally:
        if upcoming is not None:
            upcoming.close()
    killed_s = time.monotonic() - started

    # An un-killed run on the same store: no stale lock, nothing in the way.
    final = Driver.start(target, "final", workdir, "--iterations", "3")
    status, stderr = final.finish()
    assert (status, final.seen[-1:]) == (0, ["done 3"]), stderr
    moved = [line.split(" ", 1)[1] for line in final.seen
             if line.split(" ", 1)[0] in ("promote", "rollback")]
    pointer, _ = read_pointer(target.store, NAME, ENVIRONMENT)
    assert pointer.current == moved[-1]
    check = verify_store(target.store)
    problems += [f"after the final run: {problem}" for problem in check.problems]

    print(f"\n[{target.kind}] {KILLS} kills in {killed_s:.1f}s (verify {verify_s:.1f}s); "
          f"kill points: {dict(sorted(landed.items()))}; store now: {check.manifests} "
          f"manifests, {check.blobs} blobs, {len(pointer.events)} pointer events; "
          f"temp files left by killed writers: {leftovers}; pointer events without "
          f"an audit entry: {len(gaps)}")
    assert problems == []


# Exact crash points, once each: what a kill in each window may and may not leave.
@pytest.mark.parametrize("point", ["blob", "manifest", "pointer", "lock"])
def test_crash_at_each_write_boundary(target: Target, point: str, tally: Tally,
                                      tmp_path: Path) -> None:
    if point == "lock" and target.kind != "file":
        pytest.skip("only the local store takes a lock")
    store = target.store
    driver = Driver.start(target, f"crash-{point}", tmp_path / "driver",
                          "--crash-after", point)
    status, stderr = driver.finish()
    assert (status, driver.seen[-1:]) == (-signal.SIGKILL, ["crashing"]), stderr
    tally.add("kills", 1)

    check = verify_store(store)
    found = [p for p in check.problems if not is_pending_audit(p)] + listing_problems(target)
    tally.add("inconsistencies", len(found))
    assert found == []
    assert_lock_free(target)
    releases = list_releases(store, NAME)
    pointer, _ = read_pointer(store, NAME, ENVIRONMENT)
    if point == "blob":
        assert releases == []  # blobs without a manifest: no visible release
    else:
        assert len(releases) == 1
    assert pointer.current == (releases[0] if point == "pointer" else None)

    # The store stays usable: an un-killed run goes through (no stale lock).
    final = Driver.start(target, "after", tmp_path / "driver", "--iterations", "1")
    status, stderr = final.finish()
    assert (status, final.seen[-1:]) == (0, ["done 1"]), stderr
    assert verify_store(store).problems == []


def test_crash_between_pointer_and_audit_is_reported_then_repaired(
        target: Target, tally: Tally, tmp_path: Path) -> None:
    """docs/releases.md: `audit/<name>/<timestamp>-<event>.json`, append-only, one file per
    promote/rollback/approve. move_pointer replaces the pointer, then creates the audit
    entry: after a crash in between, store verify says so, and the next move rebuilds the
    entry from the event before it moves the pointer again."""
    driver = Driver.start(target, "audit", tmp_path / "driver", "--crash-after",
                          "pointer")
    status, stderr = driver.finish()
    assert (status, driver.seen[-1:]) == (-signal.SIGKILL, ["crashing"]), stderr
    tally.add("kills", 1)
    assert len(audit_gaps(target.store)) == 1
    assert [p for p in verify_store(target.store).problems if is_pending_audit(p)]
    again = Driver.start(target, "after", tmp_path / "again", "--iterations", "1")
    status, stderr = again.finish()
    assert status == 0, stderr
    gaps = audit_gaps(target.store)
    tally.add("inconsistencies", len(gaps))
    assert gaps == [] and verify_store(target.store).problems == []

