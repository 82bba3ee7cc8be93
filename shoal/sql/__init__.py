"""shoal.sql: tenant-scoped, read-only SQL over the unflushed rows and committed Parquet.

``QueryService(reader, config)`` is what the server puts on
``app.state.query_service``; see :mod:`shoal.sql.service`.
"""

# First, before anything loads DataFusion: its allocator reads its settings when it loads.
from shoal.sql import allocator  # noqa: F401  (imported for its effect)
from shoal.sql.service import QueryResult, QueryService

__all__ = ["QueryResult", "QueryService"]
