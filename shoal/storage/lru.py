"""A map bounded in entries that forgets the least recently used one first.

Not thread-safe: its users (coverage per file, query views per file set) already
hold a lock around each lookup. ``put`` hands back what it pushed out, so that a
user whose entries own something (the link directories of a view) can release it
outside its lock.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("an LRU map holds at least one entry")
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[K, V] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> list[V]:
        """Store ``value``; returns the values it replaced or pushed out."""
        out: list[V] = []
        previous = self._entries.pop(key, None)
        if previous is not None and previous is not value:
            out.append(previous)
        self._entries[key] = value
        while len(self._entries) > self.max_entries:
            out.append(self._entries.popitem(last=False)[1])
        return out

    def pop_all(self) -> list[V]:
        """Forget every entry; returns their values."""
        values = list(self._entries.values())
        self._entries.clear()
        return values
