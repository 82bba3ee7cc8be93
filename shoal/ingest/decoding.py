"""What an ingest request's body becomes, described so that it can be decoded anywhere.

A front door (OTLP over HTTP or gRPC, remote write) describes its body with a
:class:`DecodeJob`: the signal and the wire format. :func:`decode` turns the body into
the rows of the signal's table. Jobs and their :class:`Decoded` outcomes are plain
picklable data, so a :class:`DecodeRunner` may run them on a thread of the server
(:class:`ThreadDecoder`) or in decoding processes (:mod:`shoal.ingest.processes`),
which is how ingest uses the second core for work that needs the interpreter.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Protocol

import pyarrow as pa

from shoal import otlp
from shoal.lokipush import decode as lokipush
from shoal.otlp import scanned
from shoal.promwrite import decode as promwrite
from shoal.promwrite import snappy

logger = logging.getLogger(__name__)

OTLP = "otlp"
OTLP_JSON = "otlp-json"
REMOTE_WRITE = "remote-write"
LOKI_PUSH = "loki-push"
"""Loki's push API, protobuf in snappy's block format."""
LOKI_PUSH_JSON = "loki-push-json"
"""Loki's push API, JSON (any gzip undone)."""


def limit_series_caches(max_bytes: int) -> None:
    """Bound each series cache of this process (remote write's, OTLP metrics') to
    ``max_bytes``: the ``series_cache_bytes`` setting, in the server and in every decoding
    process."""
    promwrite.KNOWN.limit(max_bytes)
    scanned.KNOWN.limit(max_bytes)


SERIES_CACHES = ("remote_write", "otlp")


def series_cache_stats() -> dict[str, tuple[int, int]]:
    """Per codec of :data:`SERIES_CACHES`, what its series cache in this process holds
    (bytes) and the series it worked out without keeping them (it was full)."""
    caches = {"remote_write": promwrite.KNOWN, "otlp": scanned.KNOWN}
    return {name: (cache.nbytes, cache.unkept) for name, cache in caches.items()}


@dataclasses.dataclass(frozen=True)
class DecodeJob:
    """How to read a body: ``signal`` (metrics, logs, spans) and ``wire`` (OTLP protobuf,
    OTLP JSON, remote write, Loki push); for remote write the proto ``message``; for
    remote write and Loki's protobuf push the most bytes the body may decompress to."""

    signal: str
    wire: str = OTLP
    message: str = ""
    max_bytes: int = 0


@dataclasses.dataclass
class Decoded:
    """A decoded body: its rows, what was refused, and the remote-write counts.

    ``payload`` is the rows' WAL payload when the decoder built it (a decoding process
    sends that, and ``table`` is read from it without a copy). ``all_null``: per
    column, whether every row is null, when the decoder knew it (``DecodeResult``)."""

    table: pa.Table
    rejected: int
    errors: list[str]
    samples: int = 0
    exemplars: int = 0
    payload: bytes | None = None
    all_null: tuple[bool, ...] | None = None
    histograms: int = 0


def decode(job: DecodeJob, body: bytes) -> Decoded:
    """Raises DecodeError for a body that can never be stored, PayloadTooLargeError for
    one that decompresses past ``job.max_bytes``."""
    if job.wire == REMOTE_WRITE:
        written = promwrite.decode(snappy.decompress(body, job.max_bytes), job.message)
        result = written.result
        return Decoded(
            result.table,
            result.rejected,
            result.errors,
            written.samples,
            written.exemplars,
            all_null=result.all_null,
            histograms=written.histograms,
        )
    if job.wire in (LOKI_PUSH, LOKI_PUSH_JSON):
        raw = snappy.decompress(body, job.max_bytes) if job.wire == LOKI_PUSH else body
        result = lokipush.decode(raw, json=job.wire == LOKI_PUSH_JSON)
        return Decoded(result.table, result.rejected, result.errors, all_null=result.all_null)
    if job.wire not in (OTLP, OTLP_JSON):
        raise ValueError(f"unknown wire format {job.wire!r}")
    result = otlp.decode(job.signal, body, json=job.wire == OTLP_JSON)
    return Decoded(result.table, result.rejected, result.errors, all_null=result.all_null)


Source = tuple[DecodeJob, bytes]
"""A request as it came: how to read it, and its body."""

Done = Callable[[Decoded | BaseException], None]
"""Called once per job, on a thread of the runner, with the outcome or the error."""


class DecodeRunner(Protocol):
    def submit(self, job: DecodeJob, tenant: str, body: bytes, done: Done) -> None:
        """Decode ``body`` for ``tenant`` and call ``done``; never raises."""

    def close(self) -> None:
        """Stop; jobs not yet done are failed."""


class ThreadDecoder:
    """Jobs on an executor of this process (the ingest thread)."""

    def __init__(self, executor: Executor | None = None) -> None:
        self._executor = executor

    def submit(self, job: DecodeJob, tenant: str, body: bytes, done: Done) -> None:
        if self._executor is None:
            run(job, body, done)
        else:
            self._executor.submit(run, job, body, done)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


def run(job: DecodeJob, body: bytes, done: Done) -> None:
    """Decode and hand the outcome (or the error) to ``done``; never raises."""
    hand_over(lambda: decode(job, body), done)


def hand_over(outcome_of: Callable[[], Decoded], done: Done) -> None:
    """Hand ``outcome_of()``, or what it raised, to ``done``; never raises."""
    try:
        outcome: Decoded | BaseException = outcome_of()
    except BaseException as exc:
        outcome = exc
    try:
        done(outcome)
    except BaseException:
        logger.exception("ingest failed after decoding")
