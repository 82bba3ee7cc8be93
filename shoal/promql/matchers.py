"""Label matchers: matching label sets, and choosing the metrics a selector reads.

A matcher's regular expression is RE2's, as Prometheus' is, compiled by
:mod:`shoal.regex` (linear time, whatever the pattern).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from shoal.errors import PatternError, PromQLError
from shoal.promql.columns import Equal
from shoal.promql.mapping import MetricInfo
from shoal.promql.model import NAME, Labels
from shoal.regex import Regex, compile_pattern


@dataclasses.dataclass(frozen=True)
class LabelMatcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str

    def regex(self) -> Regex:
        try:
            return compile_pattern(self.value)
        except PatternError as exc:
            raise PromQLError(str(exc)) from None

    @property
    def test(self) -> Callable[[str], bool]:
        """:meth:`matches`, as an equality that columns tell without a call per string
        where it is one (:class:`shoal.promql.columns.Equal`)."""
        if self.op in ("=", "!="):
            return Equal(self.value, negated=self.op == "!=")
        return self.matches

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = self.regex().matches(value)
        return hit if self.op == "=~" else not hit


def matches_all(labels: Labels, matchers: Iterable[LabelMatcher]) -> bool:
    return all(m.matches(labels.get(m.name, "")) for m in matchers)


def select_metrics(infos: Iterable[MetricInfo], matchers: Sequence[LabelMatcher]) -> list[str]:
    """The OTLP metric names whose Prometheus names the ``__name__`` matchers accept."""
    name_matchers = [m for m in matchers if m.name == NAME]
    out = []
    for info in infos:
        if any(all(m.matches(n) for m in name_matchers) for n in info.names):
            out.append(info.otlp_name)
    return out
