"""The server keeps freed memory while it works and hands it back once quiet."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from shoal.server import pages
from shoal.server.pages import GROWTH_BYTES, POLL_S, QUIET_S, QUIET_SHARE, PageReturner, Probes


class Process:
    """A clock, a CPU-time counter and a resident size moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0
        self.rss = 300 << 20
        self.returned: list[float] = []

    def returner(self, trim: Callable[[], object] | None = None) -> PageReturner:
        return PageReturner(
            Probes(
                trim=trim or (lambda: self.returned.append(self.now)),
                cpu=lambda: self.cpu,
                clock=lambda: self.now,
                rss=lambda: self.rss,
            )
        )

    def poll(self, returner: PageReturner, share: float) -> bool:
        """One poll during which the process used ``share`` of a core."""
        self.now += POLL_S
        self.cpu += share * POLL_S
        return returner.check()


QUIET_POLLS = round(QUIET_S / POLL_S)


def test_nothing_goes_back_while_the_process_has_done_nothing() -> None:
    p = Process()
    returner = p.returner()
    assert not any(p.poll(returner, 0.0) for _ in range(3 * QUIET_POLLS))
    assert p.returned == [] and returner.returns == 0


def test_pages_go_back_once_when_the_process_stays_quiet_after_work() -> None:
    """A burst of queries then silence: one hand-back, QUIET_S after the last work;
    queries again before that (a dashboard refreshed every few seconds) reuse them."""
    p = Process()
    returner = p.returner()
    for _ in range(3):
        p.poll(returner, 1.5)
        assert not any(p.poll(returner, 0.0) for _ in range(QUIET_POLLS - 2))
    worked_at = p.now
    p.poll(returner, 1.5)
    worked_at = p.now
    assert not any(p.poll(returner, 0.0) for _ in range(QUIET_POLLS - 1))
    assert p.poll(returner, 0.0)
    assert p.returned == [worked_at + QUIET_S]
    assert not any(p.poll(returner, 0.0) for _ in range(3 * QUIET_POLLS))  # once a spell
    assert not p.poll(returner, QUIET_SHARE * 0.9)  # background ticking is quiet
    assert returner.returns == 1


def test_pages_go_back_when_resident_memory_grew_though_the_process_stays_busy() -> None:
    p = Process()

    def trim() -> None:  # gives back 64 MiB; where it leaves the process is the new base
        p.returned.append(p.now)
        p.rss -= 64 << 20

    returner = p.returner(trim)
    for _ in range(3 * QUIET_POLLS):  # busy, flat: what is freed is reused, kept
        assert not p.poll(returner, 1.0)
    p.rss += GROWTH_BYTES - 1
    assert not p.poll(returner, 1.0)
    p.rss += 1
    assert p.poll(returner, 1.0)
    p.rss += GROWTH_BYTES - 1  # measured from after the hand-back
    assert not p.poll(returner, 1.0)
    p.rss += 1
    assert p.poll(returner, 1.0)
    assert len(p.returned) == 2
    assert not any(p.poll(returner, 0.0) for _ in range(QUIET_POLLS - 1))
    assert p.poll(returner, 0.0)  # it worked since: handed back once quiet


def test_the_hand_back_itself_does_not_count_as_work() -> None:
    """The CPU a hand-back spends is not taken for the next poll's work."""
    p = Process()

    def trim() -> None:
        p.returned.append(p.now)
        p.cpu += POLL_S  # a long trim: a whole poll's worth of CPU

    returner = p.returner(trim)
    p.poll(returner, 1.0)
    for _ in range(QUIET_POLLS):
        p.poll(returner, 0.0)
    assert len(p.returned) == 1
    assert not any(p.poll(returner, 0.0) for _ in range(3 * QUIET_POLLS))
    assert len(p.returned) == 1


def test_a_failing_hand_back_is_logged_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    p = Process()
    calls: list[float] = []

    def trim() -> None:
        calls.append(p.now)
        raise OSError("no")

    returner = p.returner(trim)
    for _ in range(2):
        p.poll(returner, 1.0)
        for _ in range(QUIET_POLLS):
            p.poll(returner, 0.0)
    assert "handing freed memory back failed" in caplog.text
    assert len(calls) == 2


def test_the_thread_hands_back_after_real_work_and_stops() -> None:
    """The real thread, clock, CPU time and resident size: work, then quiet."""
    returned: list[float] = []
    returner = PageReturner(Probes(trim=lambda: returned.append(1.0)), poll_s=0.05, quiet_s=0.2)
    returner.start()
    try:
        x = 0
        for i in range(3_000_000):  # about a poll's worth of interpreter work
            x += i
        deadline = 200
        while not returned and deadline:
            deadline -= 1
            pages.time.sleep(0.05)
        assert returned, "no hand-back after the work stopped"
    finally:
        returner.stop()
    assert not returner._thread.is_alive()


glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")


@glibc
def test_configure_sets_both_thresholds_unless_the_operator_did() -> None:
    """In a fresh process whose glibc maps every block of 1 MiB and more (fixed, as the
    server did from 4 MiB): a 16 MiB block freed and allocated again is faulted in
    afresh each time, its pages zeroed on first touch; configured, it comes back from
    the heap without a fault."""
    probe = textwrap.dedent(
        """
        import ctypes, resource, sys
        from shoal.server import pages
        libc = ctypes.CDLL(None)
        assert libc.mallopt(-3, 1 << 20)  # fixed: blocks from 1 MiB mapped
        if sys.argv[1] == "on":
            assert pages.configure()
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        size = 16 << 20
        def touch():
            p = libc.malloc(size)
            ctypes.memset(p, 1, size)
            libc.free(p)
        touch()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            touch()
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    faults = {}
    for mode in ("on", "mapped"):
        out = subprocess.run(
            [sys.executable, "-c", probe, mode], env=env, capture_output=True, text=True, check=True
        )
        faults[mode] = int(out.stdout)
    pages_per_block = (16 << 20) // 4096
    assert faults["mapped"] >= 4 * pages_per_block
    assert faults["on"] < pages_per_block // 4


@glibc
def test_an_operators_own_threshold_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, option: int, value: int) -> int:
            calls.append((option, value))
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda _name: Libc())
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert pages.configure()
    assert calls == [(-1, pages.TRIM_THRESHOLD)]


def test_shoal_serve_chooses_arrows_allocator_before_anything_loads_pyarrow() -> None:
    """``shoal serve`` runs with the C library's malloc under pyarrow, whatever the command
    line loads on its way (its logging set-up loads pyarrow): pyarrow reads the choice
    once, when it loads. Without it, pyarrow's mimalloc kept what the server freed."""
    probe = textwrap.dedent(
        """
        import sys
        from shoal import cli
        from shoal.commands import serve

        def run(args):
            import pyarrow as pa
            print(pa.default_memory_pool().backend_name)
            return 0

        serve.run = run
        sys.exit(cli.main(["serve"]))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["system"]


def test_a_hand_back_asked_for_settles_the_work_before_it() -> None:
    """The flusher asks when a round leaves nothing unflushed: handed back at once, and
    the quiet that follows does not hand back again."""
    p = Process()
    returner = p.returner()
    p.poll(returner, 1.0)
    returner.hand_back()
    assert p.returned == [p.now]
    assert not any(p.poll(returner, 0.0) for _ in range(3 * QUIET_POLLS))
    assert returner.returns == 1
