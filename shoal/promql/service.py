"""PromQL's one entry point: the calls of Prometheus' HTTP API, for one tenant at a time.

:class:`PromQLService` answers each call with the ``data`` of Prometheus' JSON
envelope, reading the tenant's ``metrics`` table through the read view
(:class:`~shoal.storage.reader.TenantReader`) and, for the rarer reads, SQL
(:class:`~shoal.sql.service.QueryService`). Errors are :class:`~shoal.errors.PromQLError`
with Prometheus' ``errorType``, or the SQL layer's :class:`~shoal.errors.QueryError`
for a limit; the HTTP routes only parse parameters and translate errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from shoal.errors import PromQLError
from shoal.promql import ast_json, cardinality, engine, meta, output, raw, tree
from shoal.promql import format as printer
from shoal.promql.matchers import LabelMatcher
from shoal.promql.params import MAX_TIME_MS, MIN_TIME_MS, parse_duration, parse_time
from shoal.promql.source import DerivedSeries, QuerySource
from shoal.sql.service import QueryService
from shoal.storage.reader import TenantReader

__all__ = [
    "MAX_TIME_MS",
    "MIN_TIME_MS",
    "DerivedSeries",
    "LabelMatcher",
    "PromQLService",
    "RawQuery",
    "RawSeries",
    "duration_text",
    "parse_duration",
    "parse_time",
]

RawQuery = raw.RawQuery
duration_text = printer.duration
"""A duration as PromQL writes it (``1h30m``)."""
RawSeries = raw.RawSeries

T = TypeVar("T")


@dataclasses.dataclass(eq=False)
class PromQLService:
    """PromQL over every tenant's ``metrics`` table. Safe to share across tasks."""

    reader: TenantReader
    sql: QueryService
    promote: tuple[str, ...] = ()
    """Resource attribute keys shown as labels of every series."""
    derived: DerivedSeries | None = None
    """Series computed from other tables (the service graph), or None."""

    @property
    def timeout_s(self) -> float:
        """The query time limit (``query_timeout_s``), which a whole call must keep."""
        return self.sql.limits.timeout_s

    def source(self, tenant: str) -> QuerySource:
        """The tenant's samples, for one call (it keeps what it read for the call's life)."""
        return QuerySource(self.reader, self.sql, tenant, self.promote, self.derived)

    async def instant(
        self, tenant: str, text: str, t_ms: int, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``/api/v1/query``: ``text`` evaluated at ``t_ms``."""
        run = engine.evaluate(self.source(tenant), text, t_ms, t_ms, 1, instant=True)
        return output.query_data(await _bounded(run, timeout_s))

    async def range(
        self,
        tenant: str,
        text: str,
        start_ms: int,
        end_ms: int,
        step_ms: int,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``/api/v1/query_range``: ``text`` at every step from ``start_ms`` to ``end_ms``."""
        if end_ms < start_ms:
            raise PromQLError(
                'invalid parameter "end": end timestamp must not be before start time'
            )
        if step_ms <= 0:
            raise PromQLError(
                'invalid parameter "step": zero or negative query resolution step widths are '
                "not accepted. Try a positive integer"
            )
        if (end_ms - start_ms) // step_ms > engine.MAX_STEPS:
            raise PromQLError(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing "
                "the query resolution (?step=XX)"
            )
        run = engine.evaluate(self.source(tenant), text, start_ms, end_ms, step_ms, instant=False)
        return output.query_data(await _bounded(run, timeout_s))

    async def series(
        self, tenant: str, matches: Sequence[str], start_ms: int, end_ms: int
    ) -> list[dict[str, str]]:
        """``/api/v1/series``: the label sets of the series ``matches`` select."""
        if not matches:
            raise PromQLError("no match[] parameter provided")
        selected = meta.selectors(matches, start_ms, end_ms)
        return await meta.series(self.source(tenant), selected, start_ms, end_ms)

    async def label_names(
        self, tenant: str, matches: Sequence[str], start_ms: int, end_ms: int
    ) -> list[str]:
        """``/api/v1/labels``."""
        selected = meta.selectors(matches, start_ms, end_ms)
        return await meta.label_names(self.source(tenant), selected, start_ms, end_ms)

    async def label_values(
        self, tenant: str, name: str, matches: Sequence[str], start_ms: int, end_ms: int
    ) -> list[str]:
        """``/api/v1/label/<name>/values``."""
        if not name or not (name[0].isalpha() or name[0] == "_"):
            raise PromQLError(f'invalid label name: "{name}"')
        selected = meta.selectors(matches, start_ms, end_ms)
        return await meta.label_values(self.source(tenant), name, selected, start_ms, end_ms)

    async def metadata(
        self, tenant: str, metric: str | None, start_ms: int, end_ms: int
    ) -> dict[str, list[dict[str, str]]]:
        """``/api/v1/metadata``."""
        return await meta.metadata(self.source(tenant), metric, start_ms, end_ms)

    async def exemplars(
        self, tenant: str, text: str, start_ms: int, end_ms: int
    ) -> list[dict[str, Any]]:
        """``/api/v1/query_exemplars``: the exemplars of the series ``text`` selects."""
        root = tree.parse(text, start_ms, end_ms)
        selected = engine.selectors(root, start_ms, end_ms)
        return await meta.exemplars(self.source(tenant), selected, start_ms, end_ms)

    async def tsdb_status(
        self, tenant: str, start_ms: int, end_ms: int, limit: int
    ) -> dict[str, Any]:
        """``/api/v1/status/tsdb``: the cardinality of the tenant's series in the range
        (their label sets and the series index's times: no sample is read)."""
        label_sets = await meta.series(self.source(tenant), [], start_ms, end_ms)
        index = await asyncio.get_running_loop().run_in_executor(
            None,
            self.reader.series,
            tenant,
            "metrics",
            start_ms * 1_000_000,
            (end_ms + 1) * 1_000_000 - 1,
        )
        first = last = 0
        if index.num_rows:
            first = int(min(index.column("first_ns").to_pylist())) // 1_000_000
            last = int(max(index.column("last_ns").to_pylist())) // 1_000_000
        return cardinality.tsdb_status(label_sets, first, last, limit)

    @staticmethod
    def format_query(text: str) -> str:
        """``/api/v1/format_query``: ``text`` as Prometheus prints it."""
        return printer.format_query(text)

    @staticmethod
    def parse_query(text: str) -> dict[str, Any]:
        """``/api/v1/parse_query``: the expression's tree, as Prometheus 3 answers it."""
        return ast_json.parse_query(text)

    async def read_raw(
        self, tenant: str, queries: Sequence[raw.RawQuery]
    ) -> list[list[raw.RawSeries]]:
        """Remote read: the raw samples of each query's matchers, as a PromQL range
        selector over the query's range reads them (:mod:`shoal.promql.raw`), at most
        ``promql_max_samples`` in all."""
        return await raw.read(self.source(tenant), queries, self.sql.limits.max_samples)


async def _bounded(run: Awaitable[T], timeout_s: float | None) -> T:
    """``run``, within ``timeout_s`` when the caller set one (Prometheus' ``timeout``)."""
    return await (asyncio.wait_for(run, timeout_s) if timeout_s else run)
