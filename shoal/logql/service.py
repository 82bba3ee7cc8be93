"""LogQL's one entry point: the calls of Loki's HTTP API, for one tenant at a time.

:class:`LogQLService` answers each call with the ``data`` of Loki's JSON envelope,
reading the tenant's ``logs`` table through SQL (:class:`~shoal.sql.service.QueryService`:
the tenant's session, the sandbox, the limits). Errors are
:class:`~shoal.errors.LogQLError` (400), or the SQL layer's limit errors; the HTTP
routes only parse parameters and translate errors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.errors import LogQLError
from shoal.logql import engine, fields, output, streams
from shoal.logql import format as printer
from shoal.logql import model as m
from shoal.logql.frame import Frame
from shoal.logql.parse import parse
from shoal.logql.series import Steps
from shoal.logql.source import LogSource
from shoal.sql.service import QueryService

INSTANT_LOG_RANGE_NS = 3_600_000_000_000
"""How far back an instant log query (``/query`` with a log selector) reads."""


def _selector(text: str) -> m.LogQuery:
    query = parse(text)
    if not isinstance(query, m.LogQuery):
        raise LogQLError(f"{text!r} is not a stream selector")
    return query


class LogQLService:
    """LogQL over every tenant's ``logs`` table. Safe to share across tasks."""

    def __init__(self, sql: QueryService) -> None:
        self.sql = sql

    @property
    def timeout_s(self) -> float:
        return self.sql.limits.timeout_s

    def source(self, tenant: str) -> LogSource:
        return LogSource(self.sql, tenant)

    async def query_range(
        self, tenant: str, text: str, start_ns: int, end_ns: int, step_ns: int, limit: int,
        forward: bool, categorize: bool,
    ) -> dict[str, Any]:  # fmt: skip
        """``/loki/api/v1/query_range``."""
        if step_ns <= 0:
            raise LogQLError(
                "zero or negative query resolution step widths are not accepted. Try a "
                "positive integer"
            )
        return await self._run(tenant, text, start_ns, end_ns, step_ns, limit, forward,
                               categorize, instant=False)  # fmt: skip

    async def query(
        self, tenant: str, text: str, t_ns: int, limit: int, forward: bool, categorize: bool
    ) -> dict[str, Any]:
        """``/loki/api/v1/query``: a metric query at ``t_ns``; a log query's entries in the
        hour before it."""
        return await self._run(tenant, text, t_ns, t_ns, 0, limit, forward, categorize,
                               instant=True)  # fmt: skip

    async def _run(
        self, tenant: str, text: str, start_ns: int, end_ns: int, step_ns: int, limit: int,
        forward: bool, categorize: bool, instant: bool,
    ) -> dict[str, Any]:  # fmt: skip
        started = time.perf_counter()
        query = parse(text)
        source = self.source(tenant)
        if isinstance(query, m.LogQuery):
            if instant:
                start_ns = end_ns - INSTANT_LOG_RANGE_NS
                end_ns += 1
            frame = await engine.entries(source, query, start_ns, end_ns, limit, forward)
            data: dict[str, Any] = {"resultType": "streams"}
            if categorize:
                data["encodingFlags"] = [output.CATEGORIZE]
            data["result"] = output.streams(frame, forward, categorize)
            returned = frame.rows
        else:
            steps = Steps(start_ns, end_ns, step_ns)
            value = await engine.evaluate(source, query, steps)
            order = ""
            if isinstance(query, m.VectorAggregation) and query.op in ("sort", "sort_desc"):
                order = query.op
            data = output.metric_data(value, steps, instant, order)
            returned = len(data["result"]) if isinstance(data["result"], list) else 1
        seconds = time.perf_counter() - started
        data["stats"] = output.stats(source.lines_read, source.bytes_read, returned, seconds)
        return data

    async def labels(
        self, tenant: str, start_ns: int, end_ns: int, query: str | None = None
    ) -> list[str]:
        """``/loki/api/v1/labels``: the stream label names in the range."""
        selectors = [_selector(query)] if query else []
        found = await streams.streams(self.source(tenant), start_ns, end_ns, selectors)
        return sorted({name for s in found for name in s.labels})

    async def label_values(
        self, tenant: str, name: str, start_ns: int, end_ns: int, query: str | None = None
    ) -> list[str]:
        """``/loki/api/v1/label/<name>/values``."""
        selectors = [_selector(query)] if query else []
        found = await streams.streams(self.source(tenant), start_ns, end_ns, selectors)
        return sorted({s.labels[name] for s in found if s.labels.get(name)})

    async def series(
        self, tenant: str, matches: Sequence[str], start_ns: int, end_ns: int
    ) -> list[dict[str, str]]:
        """``/loki/api/v1/series``: the label sets of the streams ``match[]`` selects."""
        if not matches:
            raise LogQLError("at least one match[] argument is required")
        selectors = [_selector(text) for text in matches]
        found = await streams.streams(self.source(tenant), start_ns, end_ns, selectors, False)
        return sorted((s.labels for s in found), key=lambda x: sorted(x.items()))

    async def index_stats(
        self, tenant: str, query: str, start_ns: int, end_ns: int
    ) -> dict[str, int]:
        """``/loki/api/v1/index/stats``: streams, chunks (shoal has none: each stream's
        entries count as one), entries and bytes the query's selector reaches."""
        selector = _selector(query)
        found = await streams.streams(self.source(tenant), start_ns, end_ns, [selector], False)
        return {
            "streams": len(found),
            "chunks": len(found),
            "entries": sum(s.entries for s in found),
            "bytes": sum(s.bytes for s in found),
        }

    async def volume(
        self, tenant: str, query: str, start_ns: int, end_ns: int, limit: int,
        target_labels: Sequence[str], aggregate_by_labels: bool, step_ns: int = 0,
    ) -> dict[str, Any]:  # fmt: skip
        """``/loki/api/v1/index/volume`` (a vector) and ``/index/volume_range`` (a matrix,
        with ``step_ns``): bytes per group of streams."""
        selector = _selector(query)
        steps = Steps(start_ns, end_ns, step_ns) if step_ns else None
        found = await fields.volume(
            self.source(tenant), selector, start_ns, end_ns, target_labels,
            aggregate_by_labels, steps,
        )  # fmt: skip
        ranked = sorted(found.items(), key=lambda kv: -float(np.sum(kv[1])))[:limit]
        if steps is None:
            result = [
                {"metric": dict(key), "value": [output.timestamp(end_ns), str(int(v[0]))]}
                for key, v in ranked
            ]
            return {"resultType": "vector", "result": result}
        times = steps.times.tolist()
        result = [
            {"metric": dict(key), "values": [
                [output.timestamp(t), str(int(x))] for t, x in zip(times, v.tolist(), strict=True)
                if x]}
            for key, v in ranked
        ]  # fmt: skip
        return {"resultType": "matrix", "result": result}

    async def detected_labels(
        self, tenant: str, query: str | None, start_ns: int, end_ns: int
    ) -> list[dict[str, Any]]:
        """``/loki/api/v1/detected_labels``: stream labels and their cardinality."""
        selectors = [_selector(query)] if query else []
        found = await streams.streams(self.source(tenant), start_ns, end_ns, selectors, False)
        values: dict[str, set[str]] = {}
        for s in found:
            for name, value in s.labels.items():
                values.setdefault(name, set()).add(value)
        return [{"label": name, "cardinality": len(v)} for name, v in sorted(values.items())]

    async def detected_fields(
        self, tenant: str, query: str, start_ns: int, end_ns: int, line_limit: int, limit: int
    ) -> list[dict[str, Any]]:
        """``/loki/api/v1/detected_fields``: the fields of the query's latest entries."""
        selector = parse(query)
        if not isinstance(selector, m.LogQuery):
            raise LogQLError("detected_fields needs a log query")
        frame = await engine.entries(self.source(tenant), selector, start_ns, end_ns + 1,
                                     line_limit, False)  # fmt: skip
        return fields.detected(frame)[:limit]

    async def history(
        self, tenant: str, query: m.LogQuery, start_ns: int, end_ns: int, limit: int
    ) -> Frame:
        """A tail's first entries: the newest ``limit`` in ``[start_ns, end_ns)``."""
        return await engine.entries(self.source(tenant), query, start_ns, end_ns, limit, False)

    @staticmethod
    def format_query(text: str) -> str:
        """``/loki/api/v1/format_query``."""
        return printer.format_query(text)


async def bounded(run: Any, timeout_s: float) -> Any:
    return await asyncio.wait_for(run, timeout_s)
