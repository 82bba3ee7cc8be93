"""Named crash points on the commit path.

Production code calls :func:`point` at each step where a crash matters;
nothing happens unless a hook was installed. The crash tests install a hook
in a child process that SIGKILLs itself at the chosen point.

Points, in the order a flush reaches them: ``parquet-written`` (data files
fsynced, nothing else yet), ``coverage-partial`` (half of a coverage file
written), ``coverage-written`` (coverage fsynced, not committed),
``committed`` (Delta commit fsynced, caller not yet told).
"""

from __future__ import annotations

from collections.abc import Callable

_hook: Callable[[str], None] | None = None


def install(hook: Callable[[str], None] | None) -> None:
    """Install (or with ``None`` remove) the crash-point hook of this process."""
    global _hook
    _hook = hook


def point(name: str) -> None:
    """Mark that the commit path reached ``name``."""
    if _hook is not None:
        _hook(name)
