"""When a read asks a bucket again whether another writer changed something.

A table's latest version (and a tenant's list of tables) is trusted for ``poll_s``
after the store last answered; the server's own commits advance it at once. After
that, a read in the long-running server does not wait for the store: it answers from
what it has and starts one look in the background (one at a time), whose result the
next read sees. A look older than :data:`BACKGROUND_LOOK_S` is made on the read's path,
so a read after a long quiet spell is never further behind than that. Without
background looks (a command line run) every read past ``poll_s`` asks at once.

While the store does not answer, the last answer stands and the store is asked again
after :data:`UNREACHABLE_PAUSE_S`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

UNREACHABLE_PAUSE_S = 10.0
"""How long reads keep the last answer without asking a store that did not answer."""
BACKGROUND_LOOK_S = 60.0
"""Up to this long after the last answer, a read looks in the background."""


class Watch:
    """The clock of one thing a read may find changed in a bucket (module docstring)."""

    def __init__(
        self, label: str, poll_s: float, *, background: bool = False, tolerant: bool = True
    ) -> None:
        self.label = label
        self.poll_s = poll_s
        self.background = background and poll_s > 0
        self.tolerant = tolerant
        """Whether a store that does not answer leaves the last answer standing (a
        bucket), rather than the error raised (local disk)."""
        self.checked = 0.0
        """``time.monotonic()`` of the last answer (later while the store is paused)."""
        self._guard = threading.Lock()
        self._looking = False

    def seen(self) -> None:
        """The store just answered (or this process just changed the thing itself)."""
        self.checked = time.monotonic()

    def unreachable(self) -> None:
        """The store did not answer: keep the last answer for the pause."""
        self.checked = time.monotonic() + max(0.0, UNREACHABLE_PAUSE_S - self.poll_s)

    def trusted(self) -> bool:
        """Whether the last answer is recent enough to use without asking."""
        return self.poll_s > 0 and time.monotonic() - self.checked < self.poll_s

    def fresh(self, changed: Callable[[], bool], load: Callable[[], None]) -> bool:
        """Whether what a read has may be used as the latest: trusted, or looked at in
        the background (``load`` run there when ``changed`` says so), or asked now."""
        if self.trusted():
            return True
        if self.background and time.monotonic() - self.checked < BACKGROUND_LOOK_S:
            with self._guard:
                if self._looking:
                    return True
                self._looking = True
            threading.Thread(
                target=self._behind, args=(changed, load), name=f"look {self.label}", daemon=True
            ).start()
            return True
        return not self.ask(changed)

    def ask(self, changed: Callable[[], bool]) -> bool:
        """``changed()`` now; when the store does not answer (and ``tolerant``), False
        and the pause."""
        try:
            answer = changed()
        except Exception as exc:
            if not self.tolerant:
                raise
            logger.warning("%s: cannot look for changes: %s", self.label, exc)
            self.unreachable()
            return False
        self.seen()
        return answer

    def _behind(self, changed: Callable[[], bool], load: Callable[[], None]) -> None:
        try:
            if self.ask(changed):
                load()
        except Exception:
            logger.exception("%s: a look for changes failed", self.label)
        finally:
            with self._guard:
                self._looking = False
