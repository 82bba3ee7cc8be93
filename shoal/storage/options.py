"""The settings a store opens each of its tables with."""

from __future__ import annotations

import dataclasses

from shoal.storage.reporting import NOOP, StorageMetrics


@dataclasses.dataclass(frozen=True)
class TableOptions:
    """How a table keeps and reads its Delta log; the same for every table of a store."""

    checkpoint_interval: int
    """A checkpoint is written every this many versions."""
    metrics: StorageMetrics = NOOP
    poll_s: float = 0.0
    """How long a read trusts the latest version it saw of a table in a bucket before
    it asks whether another writer committed (the server's own commits are seen at
    once); on local disk a read always looks (one ``stat``)."""
    background: bool = False
    """Whether reads past ``poll_s`` look for changes in the background (the server)
    rather than at once (see :mod:`shoal.storage.freshness`)."""
