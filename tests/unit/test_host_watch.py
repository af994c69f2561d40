"""When `serve` swaps: the pointer as read against what is served and what was refused."""

from __future__ import annotations

from pipeline.host.watch import Keep, PointerRead, PointerWatch, Swap

OLD, NEW, OTHER = "20261201T100000Z-aaaaaaaa", "20261201T110000Z-bbbbbbbb", \
    "20261201T120000Z-cccccccc"


def test_a_pointer_on_the_served_release_keeps_it_quietly() -> None:
    watch = PointerWatch("staging", OLD)
    assert watch.step(PointerRead(OLD)) == Keep()
    assert watch.step(PointerRead(OLD), asked=True) == Keep()


def test_a_moved_pointer_swaps_to_its_release() -> None:
    watch = PointerWatch("staging", OLD)
    assert watch.step(PointerRead(NEW)) == Swap(NEW)
    watch.swapped(NEW)
    assert watch.serving == NEW
    assert watch.step(PointerRead(NEW)) == Keep()
    # A rollback is a move like any other.
    assert watch.step(PointerRead(OLD)) == Swap(OLD)


def test_a_refused_release_is_not_started_again_until_asked() -> None:
    watch = PointerWatch("staging", OLD)
    line = watch.refuse(NEW, "parity failed: 3 values differ")
    assert line == (f"release {NEW} not served: parity failed: 3 values differ; "
                    f"still serving {OLD}")
    assert watch.step(PointerRead(NEW)) == Keep()
    assert watch.step(PointerRead(NEW)) == Keep()
    assert watch.step(PointerRead(NEW), asked=True) == Swap(NEW)
    # Another move is tried at once; the refused one stays remembered.
    assert watch.step(PointerRead(OTHER)) == Swap(OTHER)
    assert watch.refused == {NEW: "parity failed: 3 values differ"}


def test_a_swap_forgets_the_refusal_of_what_it_now_serves() -> None:
    watch = PointerWatch("staging", OLD)
    watch.refuse(NEW, "not ready: tritonserver died")
    watch.swapped(NEW)
    assert watch.refused == {}


def test_an_unreadable_pointer_is_said_once_and_keeps_serving() -> None:
    watch = PointerWatch("staging", OLD)
    failing = PointerRead(None, "s3://models/ml: connection refused")
    said = watch.step(failing)
    assert said == Keep(f"cannot read the pointer of environment staging: "
                        f"s3://models/ml: connection refused; still serving {OLD}")
    assert watch.step(failing) == Keep()
    # Readable again, then failing again: said again.
    assert watch.step(PointerRead(OLD)) == Keep()
    assert watch.step(failing) == said


def test_an_environment_without_a_live_release_keeps_the_served_one() -> None:
    watch = PointerWatch("staging", OLD)
    assert watch.step(PointerRead(None)) == Keep(
        f"environment staging has no live release now; still serving {OLD}")
    assert watch.step(PointerRead(None)) == Keep()
    assert watch.step(PointerRead(NEW)) == Swap(NEW)
