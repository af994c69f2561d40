"""Publishing, promotion and rollback against an S3-compatible server (moto, over HTTP).

Prints, measured in one run:
- publish throughput of a 256 MB artifact relative to a plain boto3
  `upload_file` of the same file (goal >= 0.9);
- bytes uploaded when the unchanged model is published again (goal: 0);
- promote and rollback times for a 1 MB and a 256 MB release (goal: the same
  within noise, because promotion must not copy artifacts); medians of 5.

    python benchmarks/store.py

The last line is one JSON object with the headline figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import boto3  # noqa: E402

from pipeline.ports import free_ports  # noqa: E402
from pipeline.release import (  # noqa: E402  # noqa: E402
    BlobSource,
    move_pointer,
    publish_release,
    read_manifest,
    rollback,
    utc_now,
    verify_release,
)
from pipeline.s3_store import S3Store  # noqa: E402

MB = 2**20
REPEATS = 5


@contextmanager
def moto_server() -> Iterator[str]:
    port = free_ports(1)[0]
    binary = Path(sys.executable).parent / "moto_server"
    server = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("moto_server did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def blob_file(folder: Path, name: str, size: int) -> tuple[Path, str]:
    path = folder / name
    path.write_bytes(os.urandom(size))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def release_of(store: S3Store, path: Path, digest: str, run_id: str) -> str:
    source = BlobSource("model_repository", path, None, digest)
    return publish_release(store, "bench", [source], {"run_id": run_id}, utc_now()).release_id


def promote(store: S3Store, environment: str, release_id: str) -> None:
    """What `promote` does for an existing release: check its blobs, then swap the pointer."""
    problems = verify_release(store, read_manifest(store, "bench", release_id))
    assert not problems, problems
    move_pointer(store, "bench", environment, release_id, "promote", "bench")


def main() -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    folder = Path(tempfile.mkdtemp(prefix="serve-pipeline-store-bench-"))
    try:
        with moto_server() as endpoint:
            os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
            client = boto3.client("s3")
            client.create_bucket(Bucket="bench")
            big, big_digest = blob_file(folder, "big.bin", 256 * MB)
            small, small_digest = blob_file(folder, "small.bin", 1 * MB)
            small2, small2_digest = blob_file(folder, "small2.bin", 1 * MB)

            # Alternate the two, twice, into fresh prefixes; keep each one's best time so
            # a noisy neighbour on a shared machine does not decide the ratio.
            plain_times, our_times = [], []
            for attempt in range(2):
                plain_times.append(timed(partial(client.upload_file, str(big), "bench",
                                                 f"plain-{attempt}/big.bin")))
                store = S3Store(f"s3://bench/releases-{attempt}")
                our_times.append(timed(partial(release_of, store, big, big_digest, "first")))
            plain, ours = min(plain_times), min(our_times)
            ratio = plain / ours
            print(f"publish 256 MB: ours {ours:.2f}s ({256 / ours:.0f} MB/s), plain boto3 "
                  f"upload_file {plain:.2f}s ({256 / plain:.0f} MB/s): ratio {ratio:.2f} "
                  "(goal >= 0.9; best of 2 each, alternated)")

            source = BlobSource("model_repository", big, None, big_digest)
            again = publish_release(store, "bench", [source], {"run_id": "again"}, utc_now())
            print(f"publish the unchanged model again: {again.uploaded_bytes} blob bytes "
                  f"uploaded (goal 0), {again.skipped_blobs} blob(s) skipped")

            big_release = again.release_id
            small_release = release_of(store, small, small_digest, "small")
            other_small = release_of(store, small2, small2_digest, "small2")
            times: dict[str, list[float]] = {k: [] for k in
                                             ("promote_1mb", "promote_256mb", "rollback_1mb",
                                              "rollback_256mb")}
            for round_ in range(REPEATS):
                times["promote_1mb"].append(
                    timed(partial(promote, store, f"p1-{round_}", small_release)))
                times["promote_256mb"].append(
                    timed(partial(promote, store, f"p256-{round_}", big_release)))
                promote(store, f"r1-{round_}", small_release)
                promote(store, f"r1-{round_}", other_small)
                times["rollback_1mb"].append(
                    timed(partial(rollback, store, "bench", f"r1-{round_}", None, "bench")))
                promote(store, f"r256-{round_}", big_release)
                promote(store, f"r256-{round_}", small_release)
                times["rollback_256mb"].append(
                    timed(partial(rollback, store, "bench", f"r256-{round_}", None, "bench")))
            medians = {k: statistics.median(v) for k, v in times.items()}
            for name, value in medians.items():
                spread = f"{min(times[name]) * 1e3:.1f}..{max(times[name]) * 1e3:.1f} ms"
                print(f"{name:<15} median {value * 1e3:7.1f} ms  ({spread})")
            print(f"256 MB / 1 MB: promote {medians['promote_256mb'] / medians['promote_1mb']:.2f}"
                  f"x, rollback {medians['rollback_256mb'] / medians['rollback_1mb']:.2f}x "
                  "(goal: ~1x, no copy)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({
        "publish_vs_boto3": round(ratio, 3),
        "republish_blob_bytes": again.uploaded_bytes,
        "promote_s_1mb": round(medians["promote_1mb"], 4),
        "promote_s_256mb": round(medians["promote_256mb"], 4),
        "rollback_s_1mb": round(medians["rollback_1mb"], 4),
        "rollback_s_256mb": round(medians["rollback_256mb"], 4),
    }))


if __name__ == "__main__":
    main()
