"""``detected_level``: the level Loki 3 gives each entry, for Grafana's level colours.

Loki adds it to an entry's structured metadata at push time (``discover_log_levels``,
on by default), from the first of: a stream label or structured-metadata entry named as
a level (:data:`LEVEL_FIELDS`), normalised; the OTLP severity number; the line (a JSON
line's or a logfmt line's level field, else the first level word in it, else
``unknown``). Here it is computed column by column with Arrow's RE2 kernels, for
whole request or query batches at once.

Two simplifications, both on lines that name a level in more than one way: a JSON
line's level field is found at any depth (Loki stops at two), and a logfmt line's
first level field wins (Loki prefers ``level`` to ``severity`` wherever they are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DETECTED_LEVEL = "detected_level"
LEVEL_FIELDS = (
    "level", "LEVEL", "Level", "log.level", "severity", "SEVERITY", "Severity",
    "SeverityText", "lvl", "LVL", "Lvl", "severity_text", "Severity_Text", "SEVERITY_TEXT",
)  # fmt: skip
"""Names that hold a level, in Loki's order of preference (``validation.log-level-fields``)."""

_CANONICAL = {
    "trace": "trace", "trc": "trace", "debug": "debug", "dbg": "debug",
    "info": "info", "inf": "info", "information": "info",
    "warn": "warn", "wrn": "warn", "warning": "warn", "error": "error", "err": "error",
    "critical": "critical", "fatal": "fatal",
}  # fmt: skip

_FIELDS_RE = "|".join(f.replace(".", r"\.") for f in LEVEL_FIELDS)
_JSON_LEVEL = rf'"(?:{_FIELDS_RE})"\s*:\s*"(?P<v>[^"\\]*)"'
_LOGFMT_LEVEL = (
    r"(?:^|[ \t])(?i:level|severity|lvl|log\.level|severitytext|severity_text)="
    r'(?:"(?P<q>[^"\\]*)"|(?P<v>[^ \t"]*))'
)
_WORD = (
    r"(?:^|[ \t\n\[({\"'=|])"
    r"(?P<w>trace|debug|fatal|critical|error|err|warning|warn|info)"
    r"(?:$|[ \t\n\[\](){}:,!\"'=|])"
)


def normalize(values: pa.Array, keep_unknown: bool = True) -> pa.Array:
    """Level texts as Loki names them (``WARNING`` -> ``warn``); others as they are
    (``keep_unknown``) or null."""
    encoded = values.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    mapped = [_CANONICAL.get(v.lower(), v if keep_unknown else None) for v in distinct]
    return pa.array(mapped, pa.string()).take(encoded.indices)


def from_severity_number(numbers: pa.Array) -> pa.Array:
    """OTLP severity numbers as levels (0 gives null: the line decides)."""
    n = np.asarray(numbers.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    names = np.array(["unknown", "trace", "debug", "info", "warn", "error", "fatal", "unknown"])
    bucket = np.where(n <= 0, 0, np.minimum((n - 1) // 4 + 1, 7))
    return pa.array(names[bucket], pa.string(), mask=n == 0)


def _group(found: pa.Array, *names: str) -> pa.Array:
    """The first of the named groups that took part in each match (null: no match)."""
    valid = found.is_valid()
    parts = [pc.if_else(valid, found.field(name), None) for name in names]
    parts = [pc.if_else(pc.equal(p, ""), None, p) for p in parts] if len(parts) > 1 else parts
    return pc.coalesce(*parts) if len(parts) > 1 else parts[0]


Compute = Callable[[pa.Array], pa.Array]


def _fill(found: pa.Array | None, n: int, rows: pa.Array, compute: Compute) -> pa.Array:
    """``found`` with its nulls (all of its ``n`` values when it is None) filled by
    ``compute`` of the matching ``rows``, which is run on those rows only."""
    if found is None:
        return compute(rows)
    missing = found.is_null()
    if not found.null_count:
        return found
    if found.null_count == n:
        return compute(rows)
    return pc.replace_with_mask(found, missing, compute(rows.filter(missing)))


def _fields(lines: pa.Array) -> pa.Array:
    """The level a JSON line's or a logfmt line's level field names (null: none)."""
    stripped = pc.utf8_trim_whitespace(lines)
    is_json = pc.and_(pc.starts_with(stripped, "{"), pc.ends_with(stripped, "}"))
    is_logfmt = pc.and_(pc.invert(is_json), pc.match_substring(lines, "="))
    out = pa.nulls(len(lines), pa.string())
    for mask, pattern, groups in ((is_json, _JSON_LEVEL, ("v",)),
                                  (is_logfmt, _LOGFMT_LEVEL, ("q", "v"))):  # fmt: skip
        if not pc.any(mask).as_py():
            continue
        field = _group(pc.extract_regex(lines.filter(mask), pattern), *groups)
        out = pc.replace_with_mask(out, mask, normalize(field, keep_unknown=False))
    return out


def _words(lines: pa.Array) -> pa.Array:
    word = _group(pc.extract_regex(pc.utf8_lower(lines), _WORD), "w")
    return pc.fill_null(normalize(word, keep_unknown=False), "unknown")


def from_lines(lines: pa.Array) -> pa.Array:
    """The level of each line as Loki reads it off the line alone (never null): a level
    field of a JSON or logfmt line, else the first level word, else ``unknown``."""
    lines = pc.fill_null(lines, "")
    return _fill(_fields(lines), len(lines), lines, _words)


def detect(
    lines: pa.Array, named: Sequence[pa.Array], severity: pa.Array | None = None
) -> pa.Array:
    """``detected_level`` per entry: the first non-null of ``named`` (level texts found in
    labels or metadata, in order of preference), normalised; else the OTLP ``severity``
    number's; else the line's (read only for the entries the others leave open)."""
    candidates = [normalize(values) for values in named if values.null_count < len(values)]
    if severity is not None:
        candidates.append(from_severity_number(severity))
    found = None
    if candidates:
        found = pc.coalesce(*candidates) if len(candidates) > 1 else candidates[0]
    return _fill(found, len(lines), lines, from_lines)


def keys_of(maps: pa.MapArray) -> set[str]:
    """Every key that any row of ``maps`` has."""
    offsets = maps.offsets.to_numpy(zero_copy_only=False)
    if not len(maps) or offsets[-1] == offsets[0]:
        return set()
    keys = maps.keys.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return set(pc.unique(keys).to_pylist())


def named_in(maps: pa.MapArray, present: set[str]) -> list[pa.Array]:
    """Per level field among the keys ``present`` in ``maps``, the value each row's map
    holds under it (null where none), in the order of :data:`LEVEL_FIELDS`."""
    return [pc.map_lookup(maps, name, "first") for name in LEVEL_FIELDS if name in present]
