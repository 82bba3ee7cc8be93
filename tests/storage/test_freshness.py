"""When reads ask a bucket again (shoal/storage/freshness.py), without a bucket."""

from __future__ import annotations

import threading

import pytest

from shoal.storage.freshness import BACKGROUND_LOOK_S, Watch


def test_within_poll_s_nothing_is_asked_then_the_look_runs_behind() -> None:
    watch = Watch("t", 5.0, background=True)
    watch.seen()
    asked: list[str] = []
    assert watch.fresh(lambda: asked.append("asked") or True, lambda: None)
    assert asked == []  # trusted
    watch.checked -= 6.0
    loaded = threading.Event()
    assert watch.fresh(lambda: asked.append("asked") or True, loaded.set)  # answers at once
    assert loaded.wait(10) and asked == ["asked"]  # the look ran behind and loaded
    assert watch.trusted()


def test_a_read_after_a_quiet_minute_asks_first() -> None:
    watch = Watch("t", 5.0, background=True)
    watch.checked -= BACKGROUND_LOOK_S + 1
    assert not watch.fresh(lambda: True, lambda: None)  # asked now: changed
    watch.checked -= BACKGROUND_LOOK_S + 1
    assert watch.fresh(lambda: False, lambda: None)  # asked now: unchanged
    assert watch.trusted()


def test_without_background_every_read_past_poll_s_asks_first() -> None:
    watch = Watch("t", 5.0)
    watch.checked -= 6.0
    assert not watch.fresh(lambda: True, lambda: None)


def test_a_store_that_does_not_answer_leaves_the_last_answer_for_a_pause() -> None:
    def down() -> bool:
        raise OSError("unreachable")

    bucket = Watch("t", 1.0)
    assert bucket.fresh(down, lambda: None)  # the last answer stands
    assert bucket.trusted()  # and the store is not asked again for the pause
    disk = Watch("t", 0.0, tolerant=False)
    with pytest.raises(OSError):
        disk.fresh(down, lambda: None)
