"""A release-store writer to kill: publish releases and move a pointer, in a loop.

Run as ``python -m tests.support.crash_driver --store URL`` or by path. Every
iteration publishes a release (two small blobs, one of them the same every time so
the "already present" path runs too, and one of a few MB written from a file so the
write takes measurable time), promotes it, and every second iteration rolls the
pointer back. One line goes to stdout (flushed) after every completed step:

    ready                      store opened, about to write (after "go" with --wait-go)
    publish <release_id>       the manifest exists
    promote <release_id>       the pointer and its audit entry are written
    rollback <release_id>      the pointer is back on <release_id>, audit entry written
    done <iterations>          the loop finished (only with --iterations)

``--crash-after blob|manifest|pointer`` makes the driver SIGKILL itself at an exact
point of its first iteration instead: right after the big blob is stored (before the
manifest), right after the manifest is created (before the pointer moves), or right
after the pointer is replaced (before its audit entry is written); ``lock`` (local
store only) kills it while it holds the pointer's flock, before the swap.

With ``--wait-go`` the driver prints ``loaded`` once its imports are done and the
store is opened, and waits for a line on stdin before it writes anything, so a test
can start the next driver while it still checks the store the previous one left.

For s3:// stores the endpoint comes from ``AWS_ENDPOINT_URL_S3`` (moto in the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run by path, the repository root is not on sys.path: put it there so `pipeline` and
# `tests` import the same way as under `python -m`.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from pipeline.release.manifest import BlobSource, publish_release, utc_now  # noqa: E402
from pipeline.release.manifest_record import Manifest  # noqa: E402
from pipeline.release.pointer_event import PointerAction  # noqa: E402
from pipeline.release.pointers import move_pointer  # noqa: E402
from pipeline.release.policy import rollback  # noqa: E402
from pipeline.release.store import open_store  # noqa: E402
from pipeline.release.store.base import Store  # noqa: E402

NAME = "crashy"
ENVIRONMENT = "staging"
BY = "crash-driver"
STATIC_CONFIG = b'name: "crashy"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'


CRASH_POINTS = ("blob", "manifest", "pointer", "lock")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def blob_sources(workdir: Path, tag: str, big_bytes: int) -> list[BlobSource]:
    """Two small blobs (one constant, one per iteration) and a big one from a file."""
    spec = f"run {tag}\n".encode() + os.urandom(512)
    big = workdir / f"model-{tag}.bin"
    # Random bytes: every iteration writes a new blob, so every publish really uploads.
    big.write_bytes(os.urandom(big_bytes))
    return [
        BlobSource("config", None, STATIC_CONFIG, hashlib.sha256(STATIC_CONFIG).hexdigest()),
        BlobSource("spec", None, spec, hashlib.sha256(spec).hexdigest()),
        BlobSource("model", big, None, hashlib.sha256(big.read_bytes()).hexdigest()),
    ]


def die() -> None:
    say("crashing")
    os.kill(os.getpid(), signal.SIGKILL)


def arm_crash(store: Store, point: str) -> None:
    """Make `store` kill this process right after the first write of kind `point`."""
    if point == "lock":
        flock = fcntl.flock

        def flock_then_die(descriptor: int, operation: int) -> None:
            flock(descriptor, operation)
            if operation & fcntl.LOCK_EX:
                die()

        # LocalStore.write_if calls fcntl.flock through the module: die holding the lock.
        setattr(fcntl, "flock", flock_then_die)  # noqa: B010
        return
    method = {"blob": "put_blob", "manifest": "create", "pointer": "write_if"}[point]
    original: Callable[..., Any] = getattr(store, method)

    def wrapper(*args: Any) -> Any:
        result = original(*args)
        if method != "create" or str(args[0]).startswith("releases/"):
            die()
        return result

    setattr(store, method, wrapper)


def iterate(store: Store, workdir: Path, tag: str, big_bytes: int, roll_back: bool) -> None:
    sources = blob_sources(workdir, tag, big_bytes)
    outcome = publish_release(store, NAME, sources,
                              Manifest.from_json({"run_id": f"crash-{tag}", "created_by": BY,
                               "gates": {"parity": "passed"}}),
                              utc_now())
    say(f"publish {outcome.release_id}")
    for source in sources:
        if source.path is not None:
            source.path.unlink()
    move_pointer(store, NAME, ENVIRONMENT, outcome.release_id, PointerAction.PROMOTE, BY,
                 run_id=f"crash-{tag}")
    say(f"promote {outcome.release_id}")
    if roll_back:
        event = rollback(store, NAME, ENVIRONMENT, None, BY).event
        say(f"rollback {event.release_id}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", required=True, help="file:///DIR or s3://bucket/prefix")
    parser.add_argument("--tag", default="0", help="distinguishes runs in run ids")
    parser.add_argument("--iterations", type=int, default=0, help="0: until killed")
    parser.add_argument("--big-mb", type=float, default=3.0, help="size of the big blob")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="scratch folder for the big blob's file (default: a temp dir)")
    parser.add_argument("--crash-after", choices=CRASH_POINTS, default=None,
                        help="SIGKILL itself right after this write of the first iteration")
    parser.add_argument("--wait-go", action="store_true",
                        help='print "loaded", then wait for a line on stdin')
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="crash-driver-")))
        workdir.mkdir(parents=True, exist_ok=True)
        store = open_store(args.store, workdir)
        if args.crash_after:
            arm_crash(store, args.crash_after)
        if args.wait_go:
            say("loaded")
            if not sys.stdin.readline():
                return 1  # the test went away before saying go
        say("ready")
        big_bytes = int(args.big_mb * 2**20)
        iteration = 0
        while args.iterations == 0 or iteration < args.iterations:
            iteration += 1
            iterate(store, workdir, f"{args.tag}-{iteration}", big_bytes,
                    roll_back=iteration % 2 == 0)
    if args.iterations:
        say(f"done {args.iterations}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
