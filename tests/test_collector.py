"""The collector's pacing for bulk work (workbench.collector): raised while any bulk work runs, the
user's thresholds back when the last ends, a collector turned off left off."""

from __future__ import annotations

import gc
import threading

import pytest

from workbench.collector import BULK_THRESHOLDS, bulk_thresholds, fewer_collections


@pytest.fixture
def thresholds():
    """The test's own starting thresholds, and the process's put back after it."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ((700, 10, 10), BULK_THRESHOLDS),
        ((500_000, 10, 1_000), (500_000, BULK_THRESHOLDS[1], 1_000)),  # a user's higher ones are kept
        ((0, 10, 10), (0, 10, 10)),  # turned off: stays off
    ],
)
def test_bulk_thresholds_only_raise(current, expected):
    assert bulk_thresholds(current) == expected


def test_the_thresholds_are_raised_for_the_body_and_put_back_after_it(thresholds):
    with fewer_collections():
        assert gc.get_threshold() == BULK_THRESHOLDS
        with fewer_collections():
            assert gc.get_threshold() == BULK_THRESHOLDS
        assert gc.get_threshold() == BULK_THRESHOLDS  # the outer use still runs
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(ValueError), fewer_collections():
        raise ValueError("the work failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_uses_on_threads_put_back_the_thresholds_found_before_the_first(thresholds):
    first_in, second_in, first_may_leave = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def first() -> None:
        with fewer_collections():
            first_in.set()
            first_may_leave.wait(5)
        seen.append(gc.get_threshold())  # the second still runs: still raised

    def second() -> None:
        first_in.wait(5)
        with fewer_collections():
            second_in.set()
            first_may_leave.set()
            worker.join(5)

    worker = threading.Thread(target=first)
    worker.start()
    other = threading.Thread(target=second)
    other.start()
    other.join(5)
    assert second_in.is_set() and seen == [BULK_THRESHOLDS]
    assert gc.get_threshold() == (700, 10, 10)
