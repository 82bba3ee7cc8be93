"""The memory bound of the series indexes: one budget in bytes for every table's index.

A series index (:mod:`shoal.storage.series`) holds a row per series a table has seen, so
it grows with cardinality, not with samples. Every index of a store shares one
:class:`SeriesBudget` (the ``series_index_bytes`` setting): after a read has merged what is
new, an index over the room the others leave it drops the rows of its series seen longest
ago (:func:`evict`) and remembers the latest last time it dropped, its *floor*. The index
stays exact for every range that starts after its floor; a read reaching back to the floor
or before it merges the series summaries of the files (and the unflushed rows) that hold
rows in the range, read for that call and not kept. So the bound costs those reads time,
never a wrong answer.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa

KEEP = 0.8
"""An index over its room is cut to this share of it, so that the reads after an eviction
(each merging a little more) do not evict again at once."""

LAST = "last_ns"


class SeriesBudget:
    """Bytes the series indexes of a store may hold together (0: no bound). Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._evicted = 0

    def room(self, owner: str) -> int | None:
        """What ``owner``'s index may hold beside the others' (None: no bound)."""
        if not self.max_bytes:
            return None
        with self._lock:
            others = sum(n for name, n in self._held.items() if name != owner)
        return max(0, self.max_bytes - others)

    def hold(self, owner: str, nbytes: int, evicted: int = 0) -> None:
        """``owner``'s index now holds ``nbytes``, having dropped ``evicted`` series."""
        with self._lock:
            self._held[owner] = nbytes
            self._evicted += evicted

    def stats(self) -> tuple[int, int]:
        """``(bytes, evicted)``: what every index holds now, and the series the bound has
        dropped since start."""
        with self._lock:
            return sum(self._held.values()), self._evicted


def evict(table: pa.Table, room: int) -> tuple[pa.Table, int | None]:
    """``table`` (an index: one row per series, in key order) if it fits in ``room``
    bytes; else the rows of its most recently seen series that fit in :data:`KEEP` of it,
    in key order, and the latest last time among the rows dropped (its floor)."""
    size = table.get_total_buffer_size()
    if size <= room or table.num_rows == 0:
        return table, None
    last: np.ndarray[Any, np.dtype[np.int64]] = np.asarray(
        table.column(LAST).to_numpy(), dtype=np.int64
    )
    keep = min(table.num_rows - 1, int(room * KEEP * table.num_rows / size))
    mask = np.zeros(len(last), dtype=np.bool_)
    if keep > 0:
        mask[np.argpartition(-last, keep - 1)[:keep]] = True
    floor = int(last[~mask].max())
    return table.filter(pa.array(mask)).combine_chunks(), floor
