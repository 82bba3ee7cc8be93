"""A decode cache bounded in bytes as well as in entries.

Decoders cache what repeats from request to request (attribute entries, resources,
scopes) keyed by their serialized bytes. Bounded by entry count alone, a cache holding
large unique values (a 1 MiB attribute in every request) pins hundreds of MiB that a
flush never returns. Here every entry carries its size; an entry larger than a small
fraction of the budget is not kept at all (a large value rarely repeats, and decoding it
again costs little next to its size); when the budget is reached the cache starts over,
which keeps lookups free of bookkeeping on the hot path.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

LARGEST_SHARE = 64
"""An entry over 1/64 of the budget is not cached."""


class DecodeCache(Generic[K, V]):
    """``get``/``put`` with a budget in bytes (sizes as the caller estimates them)."""

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self._entries: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V, size: int) -> None:
        if size * LARGEST_SHARE > self.max_bytes:
            return
        if self.bytes + size > self.max_bytes or len(self._entries) >= self.max_entries:
            self.clear()
        self._entries[key] = value
        self.bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
