"""Raw samples of label matchers over a time range: what Prometheus' remote read asks for.

The selection is PromQL's own (:func:`shoal.promql.engine.load` on a range selector that
spans the query's range), so remote read returns exactly the series and samples that a
PromQL selector with the same matchers reads: the same metrics table view, the same
``target_info``, the same limits. What this adds is the shape remote read needs:

* series sorted by their label sets, labels sorted by name;
* one sample per millisecond (the last of those that share one: two OTLP points in the
  same millisecond, or two OTLP series mapped onto one label set);
* a stale marker as Prometheus' stale NaN (bits ``0x7ff0000000000002``);
* native histograms (OTLP exponential histograms, carried as component series) left
  out: Prometheus' remote-read client of 2.x reads float samples only.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shoal.errors import PromQLError
from shoal.promql import engine
from shoal.promql.matchers import LabelMatcher
from shoal.promql.model import HIST, Series
from shoal.promql.source import QuerySource
from shoal.promql.tree import Selector

STALE_NAN = np.array([0x7FF0000000000002], dtype=np.uint64).view(np.float64)[0]


@dataclasses.dataclass(frozen=True)
class RawSeries:
    labels: tuple[tuple[str, str], ...]
    """Sorted by name."""
    t: npt.NDArray[np.int64]
    v: npt.NDArray[np.float64]


def raw_series(series: Series) -> RawSeries:
    """``series`` as remote read returns it (see the module's description)."""
    t = np.asarray(series.t, dtype=np.int64)
    v = np.array(series.v, dtype=np.float64)
    if series.stale is not None:
        v[series.stale] = STALE_NAN
    if len(t) > 1:
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        keep = np.ones(len(t), dtype=bool)
        keep[:-1] = t[1:] != t[:-1]  # the last of equal times
        t, v = t[keep], v[keep]
    return RawSeries(tuple(sorted(series.labels.items())), t, v)


def select(matchers: Sequence[LabelMatcher], start_ms: int, end_ms: int) -> Selector:
    """The range selector that reads the samples of ``matchers`` in ``[start_ms, end_ms]``
    (checks each regular expression)."""
    for m in matchers:
        if m.op in ("=~", "!~"):
            m.regex()
    return Selector(list(matchers), 0, None, range_ms=end_ms - start_ms)


def read_now(
    source: QuerySource,
    selector: Selector,
    end_ms: int,
    targets: dict[int, list[Series]],
) -> list[RawSeries]:
    """The series of ``selector`` (from :func:`select`), read in the calling thread;
    ``targets`` from :func:`engine.load_targets` for the same selector."""
    if not selector.matchers:  # as Prometheus' index: no matcher selects nothing
        return []
    found = engine.load(source, selector, end_ms, end_ms, targets).get(id(selector), [])
    out = [raw_series(s) for s in found if HIST not in s.labels and len(s.t)]
    out.sort(key=lambda s: s.labels)
    return out


def check_total(results: Sequence[Sequence[RawSeries]], cap: int) -> None:
    """Refuse a request whose queries together return more than ``cap`` samples."""
    total = sum(len(s.t) for series in results for s in series)
    if total > cap:
        raise PromQLError(
            f"the remote read returns more than {cap} samples (promql_max_samples); "
            "narrow the matchers or the time range",
            error_type="execution",
        )


@dataclasses.dataclass(frozen=True)
class RawQuery:
    """One query of a remote read: label matchers over ``[start_ms, end_ms]``."""

    matchers: tuple[LabelMatcher, ...]
    start_ms: int
    end_ms: int


async def read(source: QuerySource, queries: Sequence[RawQuery], cap: int) -> list[list[RawSeries]]:
    """Each query's series, in order; more than ``cap`` samples in all is refused."""
    loop = asyncio.get_running_loop()
    results: list[list[RawSeries]] = []
    for query in queries:
        selector = select(query.matchers, query.start_ms, query.end_ms)
        targets = await engine.load_targets(source, selector, query.end_ms, query.end_ms)
        found = await loop.run_in_executor(None, read_now, source, selector, query.end_ms, targets)
        results.append(found)
        check_total(results, cap)
    return results
