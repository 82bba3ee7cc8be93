"""The bounded LRU map behind the coverage and query-view caches."""

from __future__ import annotations

import pytest

from shoal.storage.lru import Lru


def test_the_least_recently_used_entry_goes_first() -> None:
    lru: Lru[str, int] = Lru(2)
    assert lru.put("a", 1) == []
    assert lru.put("b", 2) == []
    assert lru.get("a") == 1  # "b" is now the oldest
    assert lru.put("c", 3) == [2]
    assert lru.get("b") is None
    assert (lru.get("a"), lru.get("c"), len(lru)) == (1, 3, 2)


def test_a_replaced_value_is_handed_back_once() -> None:
    lru: Lru[str, list[str]] = Lru(4)
    first, second = ["dir-1"], ["dir-2"]
    lru.put("k", first)
    assert lru.put("k", second) == [first]
    assert lru.put("k", second) == []  # the same value again owns nothing new
    assert lru.pop_all() == [second]
    assert len(lru) == 0


def test_an_empty_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        Lru(0)
