"""The series index of a table: one row per series, with the first and last time it was seen.

The metric browser (label names, label values, series) and PromQL's metric
catalog ask which series exist in a time range, and with which labels. Read
from the data, that is a scan of every row's attribute maps; here it is a
lookup in a table of one row per series, kept in memory per table:

* each flushed data file gets a summary beside it, ``_series/<file>.parquet``
  (written with the file, like its coverage); a file without one (written by
  a Spark job or imported) is summarised from its data once, when the index
  first meets it;
* the unflushed batches of the WAL snapshot are summarised as a query hands
  them in, each batch once (by its LSN);
* the merged index is checkpointed to ``_series/index.parquet`` with the list
  of files it covers, so a restart reads the checkpoint and the summaries of
  newer files only.

Merging is idempotent (earliest row's labels, earliest first time, latest last
time), so a row seen twice, in a batch and then in the file it was flushed to,
changes nothing. Entries of series whose rows all left the table (retention)
are dropped when files leave it. Everything here is derived data: a missing or
unreadable summary or checkpoint is rebuilt from the data files.

In memory the index holds its strings dictionary-encoded, about half the bytes
(:mod:`shoal.storage.series_rows`, where the rows' columns and merging live), and
:meth:`SeriesIndex.read` hands them out so. Summaries and checkpoints on disk keep the
plain types. In the server each flush's files are merged right after their commit
(:meth:`SeriesIndex.keep_current`), and checkpoints are written in a thread of their
own, so queries find the index current and do not wait for its writing.

Its memory is bounded with every other table's index by a
:class:`~shoal.storage.series_budget.SeriesBudget` (``series_index_bytes``): over it, the
series seen longest ago are dropped, and a read that reaches back to them merges the
summaries of the files in its range instead.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shoal.schema import TableSpec
from shoal.storage import layout
from shoal.storage.place import Place
from shoal.storage.series_budget import SeriesBudget, evict
from shoal.storage.series_rows import (
    LAST,
    held_schema,
    hold,
    index_schema,
    ints,
    overlay,
    overlay_all,
    summarize,
    summarize_onto,
    within,
)
from shoal.storage.types import ScanFile, TableSnapshot
from shoal.storage.unflushed import LsnBatch

logger = logging.getLogger(__name__)

CHECKPOINT = f"{layout.SERIES_DIR}/index.parquet"
_COVERED = b"shoal.covered"
_FLOOR = b"shoal.floor"
_REMEMBERED = 256
"""Summaries of just-written files kept for the next read (one flush round's worth)."""
_REMEMBERED_BYTES = 16 << 20
"""...and at most these bytes of them (large unique attribute values must not stay
pinned after their flush)."""
_LIGHT_ROW_BYTES = 4096
"""Summary bytes per series above which a merge after a flush leaves a file to queries
(remote write's series take about 200)."""
_GROUP_ROWS = 100_000
"""Summary rows merged into the index at once, at the least (see ``_add_files``)."""
CHECKPOINT_EVERY = 8
"""Files merged since the last checkpoint before another is written."""
_SLICE = 65_536
"""Rows written at a time (one row group) when a checkpoint is written."""


def _save(
    place: Place, rel: str, table: pa.Table, metadata: dict[bytes, bytes] | None = None
) -> None:
    """Write a Parquet file whole or not at all (derived data: no fsync).

    Summaries and checkpoints are always read whole, so they carry no statistics, and
    only their strings are dictionary-encoded: a flush's summary of 16,000 series is
    written in 12 ms instead of 15, and 11% smaller (docs/benchmarks.md). Strings the
    index holds dictionary-encoded are written so, as they are, and read back so: a
    checkpoint of a million series is written in a third of the time of decoding them
    first and read back five times faster, at about the same size (docs/rationale.md)."""
    schema = table.schema.remove_metadata()
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        schema.with_metadata(metadata) if metadata else schema,
        compression="zstd",
        write_statistics=False,
        use_dictionary=list(layout.string_leaf_paths(schema)),
    ) as writer:
        for start in range(0, max(table.num_rows, 1), _SLICE):
            part = table.slice(start, _SLICE).replace_schema_metadata(None)
            writer.write_table(part, row_group_size=1 << 30)
    place.replace(rel, sink.getvalue().to_pybytes())


def write_summary(place: Place, spec: TableSpec, rel: str, rows: pa.Table) -> pa.Table:
    """Write the summary of a data file's rows beside it (before the file is committed)."""
    summary = summarize(rows, spec, index_schema(spec))
    _save(place, layout.series_path(rel), summary)
    return summary


def _read(place: Place, rel: str) -> pa.Table:
    """A summary or checkpoint, read whole (FileNotFoundError when there is none)."""
    return pq.read_table(pa.BufferReader(place.read(rel)))


def _thread(
    target: Callable[..., None], args: tuple[Any, ...], name: str
) -> threading.Thread | None:
    """``target(*args)`` started in a thread of its own, or None when the interpreter is
    shutting down. Not a daemon: the process waits for it at exit, since a daemon thread
    still inside Arrow when the interpreter is torn down aborts the process (a SIGTERM's
    final flush starts a merge)."""
    thread = threading.Thread(target=target, args=args, name=name)
    try:
        thread.start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        return None
    _WRITERS.add(thread)
    return thread


_WRITERS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
"""The threads :func:`_thread` started that may still be running."""


def wait_for_writers(timeout_s: float) -> None:
    """Wait, ``timeout_s`` at most in all, for the threads merging or checkpointing a
    series index (a process about to leave: they write derived files)."""
    deadline = time.monotonic() + timeout_s
    for thread in list(_WRITERS):
        thread.join(max(0.0, deadline - time.monotonic()))


class SeriesIndex:
    """The series index of one table (see the module docstring). Thread-safe."""

    def __init__(
        self, place: Place, spec: TableSpec, label: str, budget: SeriesBudget | None = None
    ) -> None:
        self.place = place
        self.budget = budget if budget is not None else SeriesBudget(0)
        self._floor: int | None = None
        """Series last seen at or before this time may have been dropped by the bound."""
        self.spec = spec
        self.label = label
        self.schema = index_schema(spec)
        """The plain columns (of summaries, checkpoints and batches' summaries)."""
        self.key = spec.series_columns[0]
        self._lock = threading.Lock()
        self._table: pa.Table | None = None
        self._covered: set[str] = set()
        self._files: Sequence[ScanFile] = ()
        """The files of the last read, already added (the usual case: no flush since)."""
        self._lsn = 0
        self._unsaved = 0
        self._saving: threading.Thread | None = None
        self._current_lock = threading.Lock()
        self._current_wanted = self._current_running = False
        self._current: threading.Thread | None = None
        self._heavy: set[str] = set()
        """Files whose series carry large values, left by those merges to queries."""
        self._fetched: dict[str, pa.Table] = {}
        """Summaries read for the merge after a flush, before it takes the lock."""
        self._written_lock = threading.Lock()
        self._written: collections.OrderedDict[str, pa.Table] = collections.OrderedDict()
        self._written_bytes = 0
        """Summaries this process wrote, by data file, until a read adds them: the
        flusher's files join the index without reading the store back."""

    def remember(self, rel: str, summary: pa.Table) -> None:
        """Keep the summary just written for data file ``rel`` (the newest few)."""
        with self._written_lock:
            self._written[rel] = summary
            self._written_bytes += summary.nbytes
            while self._written and (
                len(self._written) > _REMEMBERED or self._written_bytes > _REMEMBERED_BYTES
            ):
                self._written_bytes -= self._written.popitem(last=False)[1].nbytes

    # -- files ------------------------------------------------------------------

    def _summary_of(self, file: ScanFile) -> pa.Table:
        rel = self.place.rel(file.path)
        with self._written_lock:
            fetched = self._fetched.pop(rel, None)
            written = self._written.pop(rel, None)
            if written is not None:
                self._written_bytes -= written.nbytes
        if fetched is not None:
            return fetched
        if written is not None:
            return written
        path = layout.series_path(rel)
        try:
            return _read(self.place, path).cast(self.schema)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException, ValueError) as exc:
            logger.warning(
                "%s: series summary of %s unusable (%s); recomputing", self.label, rel, exc
            )
        columns = [*self.schema.names[:-2], self.spec.index_time_column]
        summary = summarize(self.place.read_table(rel, columns), self.spec, self.schema)
        try:
            _save(self.place, path, summary)
        except OSError as exc:  # derived data: the index still answers
            logger.warning("%s: could not write the series summary of %s: %s", self.label, rel, exc)
        return summary

    # -- the merged index -----------------------------------------------------------

    def _load(self) -> pa.Table:
        self._files = ()
        try:
            table = _read(self.place, CHECKPOINT)
            metadata = table.schema.metadata or {}
            self._covered = {str(p) for p in json.loads(metadata.get(_COVERED, b"[]"))}
            self._floor = int(metadata[_FLOOR]) if _FLOOR in metadata else None
            # written as held (or, by earlier versions, plain): held without decoding
            return hold(table.replace_schema_metadata(None).cast(held_schema(self.schema)))
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException, ValueError) as exc:
            logger.warning("%s: series index checkpoint unusable (%s); rebuilding", self.label, exc)
        self._covered = set()
        self._floor = None
        return hold(self.schema.empty_table())

    def _add_files(self, table: pa.Table, files: Sequence[ScanFile], light: bool) -> pa.Table:
        if files == self._files:
            return table
        current = {self.place.rel(f.path): f for f in files}
        if self._covered - current.keys():
            # files left the table (compaction, retention): forget series older than any row left
            floor = min((f.min_time_us for f in files), default=None)
            self._covered &= current.keys()
            self._heavy &= current.keys()
            if floor is not None and table.num_rows:
                keep = ints(table, LAST) >= floor * 1000
                table = table.filter(pa.array(keep)) if not keep.all() else table
        # new files' summaries are merged a group at a time, each group at least as many
        # rows as the index: a series new in many files (a first read after a load) would
        # otherwise cost a copy of the whole index per file
        group: list[pa.Table] = []
        rows = 0
        skipped = False
        for rel, file in sorted(current.items()):
            if rel in self._covered:
                continue
            if light and rel in self._heavy:  # told by _fetch, just before
                skipped = True  # left to the query that needs it (see keep_current)
                continue
            summary = self._summary_of(file)
            group.append(summary)
            rows += summary.num_rows
            self._covered.add(rel)
            self._unsaved += 1
            if rows >= max(table.num_rows, _GROUP_ROWS):
                table, group, rows = overlay_all(table, group, self.key), [], 0
        self._files = () if skipped else tuple(files)
        return overlay_all(table, group, self.key) if group else table

    def _is_heavy(self, rel: str) -> bool:
        """Whether the summary of data file ``rel`` holds over ``_LIGHT_ROW_BYTES`` a series,
        told by its footer (uncompressed sizes) without reading its columns."""
        with self._written_lock:
            written = self._written.get(rel)
        if written is not None:
            return bool(written.nbytes > _LIGHT_ROW_BYTES * max(1, written.num_rows))
        try:
            meta = pq.read_metadata(pa.BufferReader(self.place.read(layout.series_path(rel))))
        except (OSError, pa.ArrowException, ValueError):
            return False  # none or damaged: summarised again when merged
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        return bool(size > _LIGHT_ROW_BYTES * max(1, meta.num_rows))

    def _add_batches(self, table: pa.Table, batches: Sequence[LsnBatch]) -> pa.Table:
        fresh = [b.batch for b in batches if b.lsn > self._lsn and b.batch.num_rows]
        if fresh:
            rows = pa.Table.from_batches(fresh)
            table = summarize_onto(table, rows, self.spec, self.schema)
        if batches:
            self._lsn = max(self._lsn, max(b.lsn for b in batches))
        return table

    def read(
        self,
        snapshot: TableSnapshot,
        batches: Sequence[LsnBatch],
        start_ns: int | None = None,
        end_ns: int | None = None,
        light: bool = False,
    ) -> pa.Table:
        """Every series of ``snapshot``'s files and of ``batches`` seen in
        ``[start_ns, end_ns]`` (both ends included), one row each, its strings
        dictionary-encoded (:func:`hold`). ``light``: leave out the files found to carry
        large values (``_LIGHT_ROW_BYTES``, :meth:`_fetch`), for a later read to merge."""
        with self._lock:
            table = self._table if self._table is not None else self._load()
            table = self._add_files(table, snapshot.files, light)
            table = self._add_batches(table, batches)
            table = self._bound(hold(table))
            self._table = table
            floor = self._floor
            if self._unsaved >= CHECKPOINT_EVERY:
                self._checkpoint(table)
        found = within(table, start_ns, end_ns)
        if floor is not None and (start_ns is None or start_ns <= floor):
            end = floor if end_ns is None else min(end_ns, floor)
            found = self._dropped(found, snapshot, batches, start_ns, end)
        return found

    def _bound(self, table: pa.Table) -> pa.Table:
        """``table`` within the room the budget leaves this index (the lock is held)."""
        room = self.budget.room(self.label)
        kept, floor = (table, None) if room is None else evict(table, room)
        if floor is not None:
            # the values only the dropped series used leave the dictionaries
            kept = hold(kept.cast(self.schema))
            self._floor = floor if self._floor is None else max(self._floor, floor)
            logger.info(
                "%s: series index over its share of series_index_bytes; dropped %d series "
                "last seen at or before %d ns",
                self.label, table.num_rows - kept.num_rows, floor,
            )  # fmt: skip
        self.budget.hold(self.label, kept.get_total_buffer_size(), table.num_rows - kept.num_rows)
        return kept

    def _dropped(
        self,
        found: pa.Table,
        snapshot: TableSnapshot,
        batches: Sequence[LsnBatch],
        start_ns: int | None,
        end_ns: int,
    ) -> pa.Table:
        """``found`` with the series the bound may have dropped that were seen in
        ``[start_ns, end_ns]``: the summaries of the files and batches holding rows in it,
        read for this call and not kept."""
        low = start_ns if start_ns is not None else -(1 << 63)
        for file in snapshot.files:
            if file.max_time_us * 1000 + 999 < low or file.min_time_us * 1000 > end_ns:
                continue
            found = overlay(found, within(self._summary_of(file), start_ns, end_ns), self.key)
        rows = [b.batch for b in batches if b.batch.num_rows]
        if rows:
            summary = summarize(pa.Table.from_batches(rows), self.spec, self.schema)
            found = overlay(found, within(summary, start_ns, end_ns), self.key)
        return hold(found)

    def _checkpoint(self, table: pa.Table) -> None:
        """Write ``table`` as the checkpoint, in a thread of its own: decoding and
        compressing a million series takes over a second, which no query should wait
        for (the lock is held; ``table`` is immutable)."""
        if self._saving is not None and self._saving.is_alive():
            return  # the next read past CHECKPOINT_EVERY files writes a newer one
        metadata = {_COVERED: json.dumps(sorted(self._covered)).encode()}
        if self._floor is not None:
            metadata[_FLOOR] = str(self._floor).encode()
        saving = _thread(
            self._save_checkpoint, (table, metadata), f"series-checkpoint {self.label}"
        )
        if saving is not None:
            self._unsaved = 0
            self._saving = saving

    def _save_checkpoint(self, table: pa.Table, metadata: dict[bytes, bytes]) -> None:
        try:
            _save(self.place, CHECKPOINT, table, metadata)
        except OSError as exc:
            logger.warning("%s: could not checkpoint the series index: %s", self.label, exc)

    def keep_current(self, snapshot: Callable[[], TableSnapshot]) -> None:
        """Merge the files of ``snapshot()`` (called after a flush commits) in a thread of
        its own, so that the next query finds them merged: the first metric-browser call
        after a load of a million new series took 3.8 s merging them. One merge at a time;
        a flush during one is taken by its next round. Files whose series carry large
        values (unique kilobytes of attributes) are left to the query that asks: merged
        in the background, nobody asking, their copies would swell the process."""
        with self._current_lock:
            self._current_wanted = True
            if self._current_running:
                return
            self._current_running = True
        current = _thread(self._keep_current, (snapshot,), f"series {self.label}")
        if current is None:
            with self._current_lock:
                self._current_running = False
        else:
            self._current = current

    def _keep_current(self, snapshot: Callable[[], TableSnapshot]) -> None:
        while True:
            with self._current_lock:
                if not self._current_wanted:
                    self._current_running = False
                    return
                self._current_wanted = False
            try:
                current = snapshot()
                self._fetch(current.files)
                self.read(current, (), light=True)
            except Exception as exc:  # derived data: the next query merges them instead
                logger.debug("%s: series index not brought up to date: %s", self.label, exc)
            finally:
                with self._written_lock:
                    self._fetched.clear()

    def _fetch(self, files: Sequence[ScanFile]) -> None:
        """Read the summaries of ``files`` not merged yet, not holding the index's lock, so
        that a query waits only for the merge itself (at a million series a flush's
        summaries take longer to read than to merge)."""
        with self._lock:
            wanted = [f for f in files if self.place.rel(f.path) not in self._covered]
        for file in wanted:
            rel = self.place.rel(file.path)
            if rel in self._heavy or self._is_heavy(rel):
                self._heavy.add(rel)
                continue
            summary = self._summary_of(file)
            with self._written_lock:
                self._fetched[rel] = summary

    def settle(self) -> None:
        """Wait until the merge after a flush and the checkpoint being written, if any,
        are done."""
        if self._current is not None:
            self._current.join()
        if self._saving is not None:  # read after the merge: it may have started one
            self._saving.join()
