"""Where shoal's CPU per sample goes, stage by stage, while it ingests.

``bench_peers --stages`` samples the server's stacks with ``py-spy record`` (the [bench]
extra; 100 times a second, without pausing the process) from the clock's start to its
stop, and shares the server's CPU time among the stages of the path a sample takes: by
the fraction of the busy stacks (a thread waiting on a lock, a condition or a socket is
not busy) whose frames name the stage. A stack belongs to the first stage of
:data:`STAGES` that one of its frames matches, so a Parquet write inside a flush counts
as Parquet encoding, not as the flush; a busy stack no stage names counts for its thread
(``other: <thread>``). The figures are estimates from samples: a stage under about 1%
of the stacks is noise.
"""

from __future__ import annotations

import collections
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

STAGES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        # the flush (files written in the background)
        ("flush: series summaries", r"\bwrite_summary \(|\(shoal/storage/series_rows\.py"),
        ("flush: coverage", r"\(shoal/storage/coverage\.py"),
        ("flush: lookup filters and log indexes", r"\(shoal/storage/(lookup|logindex)\.py"),
        ("flush: statistics", r"\bcompute_stats \("),
        ("flush: sort order", r"\bsort_order \("),
        ("flush: rows taken in sorted order", r"\breorder\b"),
        ("flush: Parquet encoding and fsync", r"\b(write_to|write_parquet|write_table) \("),
        ("flush: series index merged", r"\(shoal/storage/series\.py"),
        ("flush: Delta commit", r"\(shoal/storage/(commit|log)\.py|\(deltalake/"),
        ("flush: the rest", r"\(shoal/storage/(flusher|files|table|layout|blank)\.py"),
        # a request's way in
        ("snappy decompression", r"\bdecompress \(shoal/promwrite/snappy\.py"),
        ("WAL payload (Arrow IPC)", r"\(shoal/ingest/records\.py"),
        ("unflushed rows", r"\(shoal/storage/unflushed\.py"),
        ("WAL write and fdatasync", r"\(shoal/wal/(fileops|segment|durable)\.py"),
        ("WAL: hand-off, group commit and acks", r"\(shoal/wal/|\(shoal/ingest/ack\.py"),
        ("decoding into rows", r"\(shoal/(promwrite|otlp|rows|lokipush)/"),
        ("admission and hand-off", r"\(shoal/ingest/"),
        (
            "HTTP and the event loop",  # every stack of the event loop's thread
            r"\(uvicorn/|\(shoal/api/|\(shoal/auth\.py|\(httptools|\(asyncio/runners\.py",
        ),
    )
)

_IDLE = re.compile(
    r"^(\w+\.)?(wait|_wait_for_tstate_lock|select|poll|sleep) \(|^_worker \(concurrent/"
)
"""Innermost frames of a thread that waits rather than works (py-spy leaves out threads
the kernel has put to sleep, but one caught on its way into a wait still shows)."""


def classify(frames: list[str]) -> str:
    """The stage of one stack: ``frames`` outermost first, the first a thread label."""
    for name, pattern in STAGES:
        if any(pattern.search(frame) for frame in frames[1:]):
            return name
    thread = re.sub(r"^thread \(\w+\): ", "", frames[0])
    return f"other: {re.sub(r'_[0-9]+$', '', thread)}"


def shares(raw: Iterable[str]) -> dict[str, float]:
    """Per stage, its fraction of the busy stacks of py-spy's raw output (lines of
    ``frame;frame;... count``)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw:
        stack, _, number = line.rstrip("\n").rpartition(" ")
        if not stack or not number.isdigit():
            continue
        frames = stack.split(";")
        if len(frames) < 2 or _IDLE.search(frames[-1]):
            continue
        counts[classify(frames)] += int(number)
    total = sum(counts.values())
    return {name: n / total for name, n in counts.items()} if total else {}


class Recorder:
    """``py-spy record`` of process ``pid`` from :meth:`start` to :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._out = Path(tempfile.mkstemp(prefix="shoal-stages-", suffix=".txt")[1])
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Recorder:
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self._proc = subprocess.Popen(
            [spy, "record", "--rate", "100", "--format", "raw", "--threads", "--nonblocking",
             "--output", str(self._out), "--pid", str(self.pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return self

    def stop(self) -> dict[str, float]:
        """Stop recording; the stages' shares (empty when py-spy recorded nothing)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        try:
            with open(self._out) as raw:
                return shares(raw)
        except OSError:
            return {}
        finally:
            self._out.unlink(missing_ok=True)


def table(runs: list[dict[str, float]]) -> str:
    """Markdown: per stage, the median over ``runs`` of its CPU µs per sample, largest
    first, and the total."""
    stages = {s for run in runs for s in run}
    medians = {s: statistics.median(run.get(s, 0.0) for run in runs) for s in stages}
    lines = ["| stage | CPU µs per sample | share |", "|---|---|---|"]
    total = sum(medians.values())
    for stage, value in sorted(medians.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {stage} | {value:.2f} | {value / total:.0%} |")
    lines.append(f"| total | {total:.2f} | |")
    return "\n".join(lines)
