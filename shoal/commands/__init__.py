"""shoal.commands: one module per CLI command."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal.config import Config
    from shoal.storage.store import TableStore


def open_store(cfg: Config) -> TableStore:
    """The data directory's tables, with the storage settings from ``cfg``."""
    from shoal.storage.store import TableStore  # deltalake only for commands that need it

    return TableStore(
        cfg.data_path,
        coverage_bucket_s=int(cfg.coverage_bucket_s),
        checkpoint_interval=int(cfg.checkpoint_interval),
    )
