"""shoal.commands: one module per CLI command, and what they share.

``shoal.cli`` parses the arguments and imports the command's module when it
runs; the commands never import ``shoal.cli``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shoal import config as config_mod

if TYPE_CHECKING:
    from shoal.storage.store import TableStore


def load_config(args: argparse.Namespace) -> config_mod.Config:
    """Resolve settings for a command: defaults < --config < SHOAL_* < flags."""
    flag_names = [s.name for s in config_mod.SETTINGS]
    overrides = {name: getattr(args, name, None) for name in flag_names}
    return config_mod.load(getattr(args, "config", None), overrides=overrides)


def open_store(cfg: config_mod.Config) -> TableStore:
    """The tables (under the data directory, or where ``storage_url`` says), with the
    storage settings from ``cfg``."""
    from shoal.storage.store import TableStore  # deltalake only for commands that need it

    return TableStore.for_config(cfg)
