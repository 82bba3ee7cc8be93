"""``shoal serve``: run the server until SIGTERM."""

from __future__ import annotations

import argparse
import logging

from shoal.cli import load_config


def run(args: argparse.Namespace) -> int:
    """Load and validate the settings (a bad value exits 2 via the CLI), then serve."""
    config = load_config(args)
    level = "DEBUG" if getattr(args, "verbose", False) else config.log_level.upper()
    logging.getLogger().setLevel(level)
    config.data_path.mkdir(parents=True, exist_ok=True)
    from shoal.server.runtime import serve

    return serve(config)
