"""Regular expressions that users write in queries, run by RE2 in linear time.

Every pattern a user supplies (a PromQL ``=~``/``!~`` matcher, ``label_replace``'s
regex; later LogQL's and TraceQL's) is compiled here and nowhere else, so that no
pattern can backtrack: RE2 matches in time linear in the text whatever the pattern,
while Python's ``re`` can take exponential time (``(a|a)*b`` over forty characters
did not finish in two minutes). RE2's syntax is the one Prometheus, Loki and Tempo
use through Go's ``regexp``: Perl classes (``\\d``, ``\\w``), Unicode classes
(``\\pL``, ``\\p{Greek}``), POSIX classes inside brackets, flag groups such as
``(?i)`` anywhere, ``\\Q...\\E``, named groups; no backreferences and no
look-around, which RE2 refuses when the pattern is compiled.

A pattern is matched against the whole value, as Prometheus does: it is compiled as
``^(?:pattern)$`` and searched, exactly the text Prometheus hands Go's ``regexp``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import re2

from shoal.errors import PatternError

MAX_PATTERN_BYTES = 256 * 1024
"""The longest pattern accepted (UTF-8 bytes): room for a Grafana multi-value
variable of nine thousand 28-character names, which RE2 compiles in about 0.1 s."""

MAX_PROGRAM_BYTES = 8 << 20
"""RE2's memory budget for one compiled pattern (RE2's own default). A pattern whose
program needs more (``\\pL{1000}``) is refused as too large."""

MEMO_VALUES = 2048
"""Values whose match result one compiled pattern remembers. Label values repeat from
series to series; remembering them spares the cost of a call into RE2 from Python
(3-6 microseconds here, against well under one for ``re``)."""


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # the error goes to the user, not to stderr
    return options


class Regex:
    """A user's pattern, compiled as Prometheus compiles it (whole-value match).

    ``standalone``: the pattern must also be a regular expression on its own, as
    Prometheus requires of a label matcher (``a)|(b`` is refused there, though its
    wrapped form compiles; ``label_replace`` takes it)."""

    def __init__(self, pattern: str, standalone: bool = True) -> None:
        self.pattern = pattern
        try:
            size = len(pattern.encode("utf-8"))
        except UnicodeEncodeError:
            raise PatternError(pattern, "it is not valid Unicode text") from None
        if size > MAX_PATTERN_BYTES:
            raise PatternError(
                pattern, f"it is {size} bytes long, over the limit of {MAX_PATTERN_BYTES}"
            )
        try:
            self._re = re2.compile(f"^(?:{pattern})$", _options())
            if standalone:
                re2.compile(pattern, _options())
        except re2.error as exc:
            raise PatternError(pattern, _reason(exc)) from None
        self._memo: dict[str, bool] = {}

    def group_names(self) -> list[str]:
        """The pattern's named capture groups, in order."""
        index: dict[str, int] = dict(self._re.groupindex)
        return sorted(index, key=index.__getitem__)

    def matches(self, text: str) -> bool:
        """Whether ``text`` matches the pattern as a whole."""
        hit = self._memo.get(text)
        if hit is None:
            # bytes: the wrapper then skips mapping byte offsets back to characters
            hit = self._re.search(text.encode("utf-8", "surrogatepass")) is not None
            if len(self._memo) < MEMO_VALUES:
                self._memo[text] = hit  # a race only stores the same answer twice
        return hit

    def replace(self, text: str, template: str) -> str | None:
        """``template`` with ``$1``, ``${name}`` and ``$$`` filled in from the match of
        ``text`` (Go's ``Regexp.ExpandString``); None when ``text`` does not match."""
        found = self._re.search(text)
        if found is None:
            return None
        groups = [found.group(i) for i in range(self._re.groups + 1)]
        return expand(template, groups, self._re.groupindex)


def compile_pattern(pattern: str, standalone: bool = True) -> Regex:
    """``pattern`` compiled (and kept: the same patterns come back query after query);
    ``standalone`` as for :class:`Regex`.

    Raises :class:`~shoal.errors.PatternError` for a pattern RE2 refuses (a
    backreference, look-around, a repetition over 1000, an unbalanced group) or one
    over the size limits."""
    return _compiled(pattern, standalone)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str, standalone: bool) -> Regex:
    return Regex(pattern, standalone)


def _reason(exc: re2.error) -> str:
    text = exc.args[0] if exc.args else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if "pattern too large" in text:
        return f"{text}: its compiled form needs over {MAX_PROGRAM_BYTES >> 20} MiB"
    return str(text)


def expand(template: str, groups: list[str | None], names: Mapping[str, int]) -> str:
    """``template`` with references to ``groups`` replaced, as Go's ``regexp`` expands a
    replacement: ``$$`` is a dollar sign; ``$name`` takes the longest run of letters,
    digits and underscores; ``${name}`` ends at the brace; a number names a group by
    position and a word by name (a group that does not exist or did not take part
    gives the empty string); a ``$`` that starts neither stays as it is."""
    out: list[str] = []
    rest = template
    while True:
        cut = rest.find("$")
        if cut < 0:
            break
        out.append(rest[:cut])
        rest = rest[cut + 1 :]
        if rest.startswith("$"):
            out.append("$")
            rest = rest[1:]
            continue
        ref = _reference(rest)
        if ref is None:
            out.append("$")
            continue
        name, rest = ref
        index = _group_number(name)
        if index is None:
            index = names.get(name)
        if index is not None and index < len(groups):
            out.append(groups[index] or "")
    out.append(rest)
    return "".join(out)


def _reference(text: str) -> tuple[str, str] | None:
    """The group name at the start of ``text`` (just after a ``$``) and what follows."""
    brace = text.startswith("{")
    body = text[1:] if brace else text
    n = 0
    while n < len(body) and (body[n].isalpha() or body[n].isdecimal() or body[n] == "_"):
        n += 1
    if n == 0:
        return None
    if brace:
        if body[n : n + 1] != "}":
            return None
        return body[:n], body[n + 1 :]
    return body[:n], body[n:]


def _group_number(name: str) -> int | None:
    """A name made of ASCII digits without a leading zero is a group's position."""
    if not name.isascii() or not name.isdigit() or (name[0] == "0" and len(name) > 1):
        return None
    return int(name) if len(name) <= 9 else None


def search_column(values: pa.Array, pattern: str, anchored: bool = False) -> pa.Array:
    """Per value of a string column, whether ``pattern`` is found in it (``anchored``: matches
    it whole, as a label matcher), column by column in Arrow's RE2 kernel.

    The pattern is compiled by RE2 here first (:func:`compile_pattern`), so that what RE2
    refuses, or what is over the size limits, is a PatternError before any row is read."""
    compile_pattern(pattern, standalone=True)
    text = f"^(?:{pattern})$" if anchored else pattern
    return pc.match_substring_regex(pc.fill_null(values, ""), text)


def extract_column(values: pa.Array, pattern: str) -> pa.StructArray:
    """The named groups of ``pattern``'s first match in each value (a struct column, null
    where it does not match), in Arrow's RE2 kernel; ``pattern`` is checked by RE2 first."""
    compiled = compile_pattern(pattern, standalone=True)
    if not compiled.group_names():
        raise PatternError(pattern, "it names no capture group: (?P<name>...)")
    found: pa.StructArray = pc.extract_regex(pc.fill_null(values, ""), pattern)
    return found
