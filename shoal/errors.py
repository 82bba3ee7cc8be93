"""shoal's exceptions: one root, shallow subclasses that carry data.

Only ``shoal.api`` turns these into HTTP or gRPC statuses.
"""

from __future__ import annotations


class ShoalError(Exception):
    """Root of every error shoal raises on purpose."""


class ConfigError(ShoalError):
    """A setting has a bad value, or the config file is unreadable."""


class StartupError(ConfigError):
    """The settings do not fit this host: a port is taken, or the memory budget is too big.

    Like every ConfigError it exits 2, which the systemd unit does not restart on.
    """


# -- write-ahead log ---------------------------------------------------------


class WalError(ShoalError):
    """Base of WAL errors."""


class WalFatalError(WalError):
    """The WAL can no longer guarantee durability (for example a failed fsync).

    The writer fails every pending append and refuses new ones; the process
    must exit and replay on restart.
    """


class WalAppendError(WalError):
    """One append failed (short write, ENOSPC) and was not acknowledged.

    The log stays usable: the partial frame reads as a torn tail on replay.
    """


class WalClosedError(WalError):
    """Append after the WAL was closed or shut down."""


class WalCorruptionError(WalError):
    """A WAL segment holds damaged data.

    ``segment`` names the file, ``offset`` the byte where the damage starts and
    ``reason`` says what was wrong.
    """

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(f"{segment}: corrupt at byte {offset}: {reason}")
        self.segment = segment
        self.offset = offset
        self.reason = reason


class RecordTooLargeError(WalError):
    """A record exceeds the configured maximum record size."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"record of {size} bytes exceeds the WAL record limit of {limit} bytes")
        self.size = size
        self.limit = limit


# -- OTLP decoding -------------------------------------------------------------


class DecodeError(ShoalError):
    """An OTLP request is malformed as a whole (not one bad point).

    The message is meant for the user: it says what was wrong and where.
    """


# -- storage -------------------------------------------------------------------


class StorageError(ShoalError):
    """Base of table-storage errors."""


class CommitConflictError(StorageError):
    """Another writer committed first: refresh the table and retry the commit."""

    def __init__(self, table: str, version: int, detail: str = "") -> None:
        msg = f"{table}: concurrent commit at version {version}; refresh and retry"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
        self.table = table
        self.version = version


class SchemaMismatchError(StorageError):
    """Data does not match a table's schema; ``differences`` lists each problem."""

    def __init__(self, table: str, differences: list[str]) -> None:
        super().__init__(f"{table}: schema mismatch: " + "; ".join(differences))
        self.table = table
        self.differences = differences


class CoverageOverlapError(StorageError):
    """An import overlaps time buckets the table already holds.

    ``ranges`` lists the overlapping ``(start, end)`` intervals as ISO 8601 text.
    """

    def __init__(self, table: str, ranges: list[tuple[str, str]]) -> None:
        shown = ", ".join(f"{a} .. {b}" for a, b in ranges[:10])
        more = f" and {len(ranges) - 10} more" if len(ranges) > 10 else ""
        super().__init__(f"{table}: import overlaps existing data in {shown}{more}")
        self.table = table
        self.ranges = ranges


class TableNotFoundError(StorageError):
    """No such table for this tenant."""


# -- maintenance jobs (Spark pipeline) --------------------------------------------


class MaintenanceError(ShoalError):
    """A maintenance job (compact, retention, rollup, backfill, vacuum) could not finish."""


class JobConflictError(MaintenanceError):
    """A job lost the commit race ``attempts`` times in a row and gave up.

    Nothing it wrote was committed; the table is unchanged by it. Run it again later.
    """

    def __init__(self, job: str, table: str, attempts: int) -> None:
        super().__init__(
            f"{job} on {table}: concurrent commits conflicted {attempts} times; "
            "nothing was changed, run the job again later"
        )
        self.job = job
        self.table = table
        self.attempts = attempts


# -- query ---------------------------------------------------------------------


class QueryError(ShoalError):
    """A query failed because of the query itself (bad SQL, forbidden statement)."""


class QueryLimitError(QueryError):
    """A query hit a resource limit; ``limit`` names it (memory, time, rows, size)."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class PromQLError(QueryError):
    """A PromQL expression or Prometheus API request that cannot be answered as asked.

    ``error_type`` is the Prometheus API's ``errorType`` (``bad_data``, ``execution``).
    """

    def __init__(self, message: str, error_type: str = "bad_data") -> None:
        super().__init__(message)
        self.error_type = error_type


class LogQLError(QueryError):
    """A LogQL query or Loki API request that cannot be answered as asked: a syntax error,
    or a construct shoal does not evaluate (named in the message). HTTP 400."""


class TraceQLError(QueryError):
    """A TraceQL query or Tempo API request that cannot be answered as asked (a 400);
    ``not_found`` marks an unknown trace id (a 404)."""

    def __init__(self, message: str, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class PatternError(QueryError):
    """A user's regular expression that cannot be compiled; ``reason`` says why (RE2's
    word: a backreference, look-around, a repetition over 1000, too large)."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"invalid regular expression {pattern!r}: {reason}")
        self.pattern = pattern
        self.reason = reason


# -- auth and ingest -----------------------------------------------------------


class AuthError(ShoalError):
    """Missing, unknown or insufficient credentials."""


class PermissionDeniedError(AuthError):
    """A valid token that lacks the role an operation needs."""


class PayloadTooLargeError(ShoalError):
    """A request body exceeds ``limit`` bytes (before or after decompression)."""

    def __init__(self, limit: int, what: str = "request body") -> None:
        super().__init__(f"{what} exceeds the limit of {limit} bytes")
        self.limit = limit


class UnsupportedMediaTypeError(ShoalError):
    """A request's content type or content encoding is not one shoal accepts."""


class NotReadyError(ShoalError):
    """The server is still starting (replaying the WAL) and accepts no ingest yet."""


class DecoderLostError(NotReadyError):
    """A decoding process exited while it held the request; a retry goes to the process
    started in its place."""


class OverloadedError(ShoalError):
    """The ingest queue is full; the client should retry after ``retry_after_s``."""

    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(f"ingest queue full ({reason}); retry after {retry_after_s:g}s")
        self.reason = reason
        self.retry_after_s = retry_after_s


class ShuttingDownError(ShoalError):
    """The server is stopping and accepts no new work."""


def refusal_reason(exc: BaseException) -> str:
    """Why a request was refused, as the ``reason`` label of shoal's refusal counters:
    the same word whichever protocol the request came by."""
    reasons: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
        (OverloadedError, "queue_full"),
        (DecodeError, "malformed"),
        ((PayloadTooLargeError, RecordTooLargeError), "too_large"),
        (UnsupportedMediaTypeError, "unsupported_media_type"),
        (PermissionDeniedError, "forbidden"),
        (AuthError, "unauthenticated"),
        (NotReadyError, "not_ready"),
        (ShuttingDownError, "shutting_down"),
        (WalError, "wal_unavailable"),
        (ShoalError, "error"),
    )
    for kinds, reason in reasons:
        if isinstance(exc, kinds):
            return reason
    return "internal"
