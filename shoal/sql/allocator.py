"""DataFusion's memory allocator, set up before DataFusion is loaded.

DataFusion's Python package brings its own mimalloc (2.x) with transparent
huge pages allowed. mimalloc gives freed memory back to the kernel soon
after it is freed, so every query faults its working memory in again, and
where the kernel backs a fault with a 2 MiB huge page it zeroes all 2 MiB
at once: zeroing pages becomes a large share of a heavy query's CPU time
(docs/benchmarks.md has the profile). With huge pages off for mimalloc,
memory is still returned to the kernel, in 4 KiB pages.

mimalloc reads its options from the environment when its library loads, so
this module must be imported before :mod:`datafusion` (``shoal.sql`` does
so first). An operator's own ``MIMALLOC_ALLOW_THP`` is left as it is.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

MIMALLOC_SETTINGS: dict[str, str] = {"MIMALLOC_ALLOW_THP": "0"}
"""Environment defaults for DataFusion's mimalloc (an existing value wins)."""


def configure() -> bool:
    """Put :data:`MIMALLOC_SETTINGS` into the environment unless already set.

    Returns False (and changes nothing) when DataFusion is already loaded: its
    allocator has read its options, and the settings would no longer apply.
    """
    if "datafusion" in sys.modules:
        logger.debug("datafusion loaded before shoal.sql: allocator settings not applied")
        return False
    for name, value in MIMALLOC_SETTINGS.items():
        os.environ.setdefault(name, value)
    return True


configure()
