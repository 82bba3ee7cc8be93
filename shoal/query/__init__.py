"""shoal.query: tenant-scoped, read-only SQL over the WAL snapshot and committed Parquet.

``QueryService(store, snapshot, config)`` is what the server puts on
``app.state.query_service``; see :mod:`shoal.query.service`.
"""

# First, before anything loads DataFusion: its allocator reads its settings when it loads.
from shoal.query import allocator  # noqa: F401  (imported for its effect)
from shoal.query.service import QueryResult, QueryService

__all__ = ["QueryResult", "QueryService"]
