"""Label matchers: Prometheus' regular expressions, matching label sets, choosing metrics.

A matcher's regular expression is Go's RE2 dialect; :func:`go_regex` reads it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from shoal.errors import PromQLError
from shoal.promql.mapping import MetricInfo
from shoal.promql.model import NAME, Labels

_FLAGS = re.compile(r"\(\?([imsU]+(?:-[imsU]+)?|-[imsU]+)\)")  # RE2's flags


def go_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` as Go's RE2 reads it, compiled by Python's ``re``.

    RE2 lets a flag group such as ``(?i)`` appear anywhere; it holds until the end
    of the group around it. Python accepts that only at the start, so each one
    becomes a scoped group, ``(?i:...)``, closed where the enclosing group or
    alternative ends and reopened after each ``|``.
    """
    return re.compile(_scoped_flags(pattern))


def _scoped_flags(pattern: str) -> str:
    if "(?" not in pattern:
        return pattern
    out: list[str] = []
    open_flags: list[list[str]] = [[]]  # per group: the flag groups opened inside it
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":  # a character class, copied whole
            j = i + 1
            if pattern[j : j + 1] == "^":
                j += 1
            if pattern[j : j + 1] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i : j + 1])
            i = j + 1
            continue
        flags = _FLAGS.match(pattern, i)
        if flags is not None:
            out.append(f"(?{flags.group(1)}:")
            open_flags[-1].append(flags.group(1))
            i = flags.end()
            continue
        if c == "(":
            open_flags.append([])
        elif c == ")" and len(open_flags) > 1:
            out.append(")" * len(open_flags.pop()))
        elif c == "|" and open_flags[-1]:
            out.append(")" * len(open_flags[-1]) + "|")
            out.extend(f"(?{f}:" for f in open_flags[-1])
            i += 1
            continue
        out.append(c)
        i += 1
    out.append(")" * len(open_flags[0]))
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class LabelMatcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str

    def regex(self) -> re.Pattern[str]:
        try:
            return go_regex(self.value)
        except re.error as exc:
            raise PromQLError(f"invalid regular expression {self.value!r}: {exc}") from None

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = self.regex().fullmatch(value) is not None
        return hit if self.op == "=~" else not hit


def matches_all(labels: Labels, matchers: Iterable[LabelMatcher]) -> bool:
    return all(m.matches(labels.get(m.name, "")) for m in matchers)


def select_metrics(catalog: Iterable[MetricInfo], matchers: Sequence[LabelMatcher]) -> list[str]:
    """The OTLP metric names whose Prometheus names the ``__name__`` matchers accept."""
    name_matchers = [m for m in matchers if m.name == NAME]
    out = []
    for info in catalog:
        if any(all(m.matches(n) for m in name_matchers) for n in info.names):
            out.append(info.otlp_name)
    return out
