"""fsync helpers: delta-rs's local object store does not fsync what it writes, so shoal does."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush a file's data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (new names, renames) to disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(path: Path, stop_at: Path) -> None:
    """Create ``path`` (and parents) and fsync every directory created, up to ``stop_at``."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current == stop_at or current.parent == current:
            break
        current = current.parent
    if not missing:
        return
    path.mkdir(parents=True, exist_ok=True)
    for created in missing:
        fsync_dir(created.parent)
    fsync_dir(path)
