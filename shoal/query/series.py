"""The series of a tenant's table in a time range, from storage's series index.

Follows the read protocol of :mod:`shoal.storage.snapshot`, as a query does: the
snapshot's batch references are copied first, then the table's Delta snapshot
is read, and only the batches above its committed LSN are handed to the index
(a batch already flushed is in a file the index covers). A table not created
yet (nothing flushed so far) is summarised from its batches alone.
"""

from __future__ import annotations

import pyarrow as pa

from shoal.errors import QueryError, TableNotFoundError
from shoal.query.tables import TableCatalog
from shoal.schema import SIGNAL_TABLES
from shoal.storage import series as index
from shoal.storage.snapshot import SnapshotSource


def series_in_range(
    catalog: TableCatalog,
    snapshot: SnapshotSource | None,
    tenant: str,
    table: str,
    start_ns: int,
    end_ns: int,
) -> pa.Table:
    """One row per series of ``table`` seen in ``[start_ns, end_ns]``: the table's
    index columns, ``first_ns`` and ``last_ns``."""
    spec = SIGNAL_TABLES.get(table)
    if spec is None or not spec.index_columns:
        raise QueryError(f"table {table!r} keeps no series index")
    pending = list(snapshot.batches(tenant).get(table, ())) if snapshot is not None else []
    handle = None
    if table in catalog.tables(tenant):
        try:
            handle = catalog.open(tenant, table, create=False)
        except TableNotFoundError:
            handle = None
    if handle is not None:
        snap = handle.snapshot()
        kept = [b for b in pending if b.lsn > snap.committed_lsn and b.batch.num_rows]
        return handle.series(snap, kept, start_ns, end_ns)
    schema = index.index_schema(spec)
    rows = [b.batch for b in pending if b.batch.num_rows]
    if not rows:
        return schema.empty_table()
    found = index.summarize(pa.Table.from_batches(rows), spec, schema)
    return index.within(found, start_ns, end_ns)
