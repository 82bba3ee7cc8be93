"""The cyclic garbage collector paused while many objects without cycles are made.

Every 700 container objects made (dicts, lists, tuples) set off a collection of the
young ones, and every tenth of those a collection of the older ones too: making the
20,000 label-set dicts of one metric at a million series spent about a third of its time
in them (111 ms against 72 with the collector off, in process). Label sets hold only
strings, so they can never form a cycle: nothing is lost by not looking for one while
they are made. Reference counting frees everything as usual meanwhile; only cycles made
by other threads in that window wait for the next collection.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the body, and back as it was once no thread holds a pause."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
