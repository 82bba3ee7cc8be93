"""The log index: per data file of a ``logs`` table, its streams' entry counts and bytes
per minute, kept beside the file.

Loki's label browser and log-volume queries ask how many entries (and bytes) each
stream has per time bucket over a day; read from the rows, that is a scan of every
row's resource map. Here each data file gets a summary, ``_logindex/<file>.parquet``:
one row per (stream, minute) with the stream's ``service_name``, ``scope_name`` and
``resource_attributes`` (what makes a stream, pushed or sent over OTLP), the minute,
and the entries, bytes and first and last times in it. A minute ``m`` holds the entries
with ``m * 60 s < time <= (m + 1) * 60 s``, the half-open side of LogQL's windows.

The flush writes a file's summary with the file (:func:`write`, from
``TableFiles.write``); the Spark jobs write one for each file they write
(``shoal.pipeline.writer``). A file without one (imported) is summarised from its data
the first time it is read, and the summary is written then. Unflushed rows are
summarised as a query reads them (:func:`summarize`). It is all derived data: a summary
that cannot be read is rebuilt from the file.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.schema import ATTRS, LOGS_SCHEMA
from shoal.storage import layout
from shoal.storage.place import Place

logger = logging.getLogger(__name__)

INDEX_DIR = "_logindex"
MINUTE_NS = 60_000_000_000
SCHEMA = pa.schema([
    pa.field("service_name", pa.string()),
    pa.field("scope_name", pa.string()),
    pa.field("resource_attributes", ATTRS),
    pa.field("minute", pa.int64(), nullable=False),
    pa.field("entries", pa.int64(), nullable=False),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("first_ns", pa.int64(), nullable=False),
    pa.field("last_ns", pa.int64(), nullable=False),
])  # fmt: skip
COLUMNS = ("time_unix_nano", "observed_time_unix_nano", "service_name", "scope_name",
           "resource_attributes", "body")  # fmt: skip
"""The columns of the rows a summary is made of."""


def index_path(data_path: str) -> str:
    """The relative path of a data file's log index summary."""
    return f"{INDEX_DIR}/{layout.flat_name(data_path)}.parquet"


def _column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    """A column as one array of the ``logs`` schema's type (a file a Spark job wrote may
    hold dictionary-encoded strings)."""
    column = table.column(name)
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    wanted = LOGS_SCHEMA.field(name).type
    return array if array.type == wanted else array.cast(wanted)


def map_key(maps: pa.MapArray) -> pa.Array:
    """Each row's map as one text (its entries in order), to find the distinct maps."""
    offsets = maps.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    entries = pc.binary_join_element_wise(
        maps.keys.slice(first, last - first),
        pc.fill_null(maps.items.slice(first, last - first), ""),
        "\x1f",
    )
    return pc.binary_join(pa.ListArray.from_arrays(pc.subtract(offsets, first), entries), "\x1e")


def summarize(rows: pa.Table | pa.RecordBatch) -> pa.Table:
    """The summary of some ``logs`` rows (any order): one row per stream and minute."""
    if not rows.num_rows:
        return SCHEMA.empty_table()
    time = _column(rows, "time_unix_nano")
    ts = pc.if_else(pc.not_equal(time, 0), time, _column(rows, "observed_time_unix_nano"))
    ts_np = np.asarray(ts.to_numpy(zero_copy_only=False), dtype=np.int64)
    minute = (ts_np + MINUTE_NS - 1) // MINUTE_NS - 1
    resources = _column(rows, "resource_attributes")
    service = _column(rows, "service_name")
    scope = _column(rows, "scope_name")
    key = pc.binary_join_element_wise(
        pc.fill_null(scope, "\x00"), pc.fill_null(service, "\x00"), map_key(resources), "\x1d"
    )
    stream = key.dictionary_encode()
    codes = np.asarray(stream.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    sizes = pc.fill_null(pc.binary_length(_column(rows, "body")), 0)
    grouped = pa.table({
        "stream": codes, "minute": minute, "ts": ts_np,
        "size": np.asarray(sizes.to_numpy(zero_copy_only=False), dtype=np.int64),
    }).group_by(["stream", "minute"]).aggregate([
        ("ts", "count"), ("size", "sum"), ("ts", "min"), ("ts", "max"),
    ])  # fmt: skip
    _, first_row = np.unique(codes, return_index=True)
    streams = pa.array(grouped.column("stream").to_numpy(), pa.int64())
    take = pa.array(first_row, pa.int64()).take(streams)
    return pa.Table.from_arrays(
        [
            service.take(take),
            scope.take(take),
            resources.take(take),
            grouped.column("minute"),
            grouped.column("ts_count"),
            grouped.column("size_sum"),
            grouped.column("ts_min"),
            grouped.column("ts_max"),
        ],
        schema=SCHEMA,
    )


def write(place: Place, rel: str, rows: pa.Table) -> None:
    """Write (and on local disk fsync) the summary of data file ``rel``'s ``rows`` beside it."""
    place.ensure_dir(INDEX_DIR)
    place.write_parquet(index_path(rel), summarize(rows), compression="zstd")
    place.sync_dir(INDEX_DIR)


class Summaries:
    """Data files' summaries, read (or rebuilt) once and kept, bounded in rows."""

    def __init__(self, max_rows: int = 4_000_000) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, pa.Table] = OrderedDict()
        self._rows = 0
        self.max_rows = max_rows

    def of_file(self, place: Place, data_path: str) -> pa.Table:
        """The summary of the data file ``data_path`` (as a scan names it) of the table at
        ``place``."""
        with self._lock:
            found = self._kept.get(data_path)
            if found is not None:
                self._kept.move_to_end(data_path)
                return found
        summary = _read(place, place.rel(data_path))
        with self._lock:
            self._kept[data_path] = summary
            self._rows += summary.num_rows
            while self._rows > self.max_rows and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                self._rows -= dropped.num_rows
        return summary


def _read(place: Place, rel: str) -> pa.Table:
    try:
        summary = pq.read_table(pa.BufferReader(place.read(index_path(rel))))
        if summary.schema.equals(SCHEMA):
            return summary
    except (OSError, pa.ArrowException):
        pass
    rows = place.parquet(rel).read(columns=list(COLUMNS))
    try:
        write(place, rel, rows)
    except OSError as exc:  # derived data: the summary is still good for this read
        logger.warning("could not write the log index of %s: %s", rel, exc)
    return summarize(rows)
