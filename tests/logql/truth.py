"""The ground truth of the LogQL tests: a data set of log records of varied shapes, and the
answers to LogQL queries computed from the records in plain Python, independently of
shoal's engine (no shoal.logql import; Loki's semantics as its documentation states them).

A query is described twice: as LogQL text (what the server gets) and as a :class:`Spec`
(what the evaluator here reads), both generated from the same parameters by the tests.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

SERVICES = ("api", "web", "worker", "billing", "search")
ENVS = ("prod", "staging")
LEVELS = ("debug", "info", "warn", "error")
PATHS = ("/cart", "/checkout", "/login", "/search", "/items/42")
USERS = ("ann", "bob", "cyd", "dee")
RARE = "zebra-7f3a"
"""A token in a few lines only."""


@dataclasses.dataclass(frozen=True)
class Record:
    ts: int
    stream: dict[str, str]
    line: str
    metadata: dict[str, str]
    level: str

    @property
    def labels(self) -> dict[str, str]:
        """Stream labels, service_name as the server adds it, and structured metadata with
        the detected level (every line here names its level plainly)."""
        return {**self.stream, **self.metadata, "detected_level": self.level}


def dataset(count: int, start_ns: int, span_ns: int, seed: int = 7) -> list[Record]:
    """``count`` records spread over ``[start_ns, start_ns + span_ns)``, in time order:
    JSON, logfmt and plain-text lines, five services, two environments, four levels,
    some with structured metadata."""
    rng = random.Random(seed)
    times = sorted(rng.randrange(start_ns, start_ns + span_ns) for _ in range(count))
    out = []
    for i, ts in enumerate(times):
        service = SERVICES[rng.randrange(len(SERVICES))]
        env = ENVS[i % 7 == 0]
        level = LEVELS[min(int(rng.expovariate(1.2)), 3)]
        shape = rng.randrange(3)
        status = rng.choice((200, 200, 200, 201, 404, 500, 503))
        latency = round(rng.uniform(0.5, 900.0), 1)
        path = PATHS[rng.randrange(len(PATHS))]
        user = USERS[rng.randrange(len(USERS))]
        rare = f" {RARE}" if rng.random() < 0.0005 else ""
        if shape == 0:
            body = {
                "level": level,
                "msg": f"handled {path}{rare}",
                "status": status,
                "latency_ms": latency,
                "user": {"name": user, "admin": user == "ann"},
            }
            line = json.dumps(body, separators=(",", ":"))
        elif shape == 1:
            line = (
                f'level={level} msg="handled {path}{rare}" status={status} '
                f"duration={int(latency)}ms user={user}"
            )
        else:
            line = f"{level.upper()} {path} {status} took {latency}ms{rare}"
        metadata = {}
        if i % 3 == 0:
            metadata["trace_id"] = f"{rng.getrandbits(128):032x}"
        if i % 5 == 0:
            metadata["region"] = "eu" if i % 2 else "us"
        stream = {"service_name": service, "env": env, "format": ("json", "logfmt", "text")[shape]}
        out.append(Record(ts, stream, line, metadata, level))
    return out


# -- the specification of a query, and its evaluation -----------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """A log query: the stream selector, line filters, a parser and label filters, each as
    ``(name, op, value)``; label filters on numbers carry a converter."""

    selector: tuple[tuple[str, str, str], ...]
    line_filters: tuple[tuple[str, str], ...] = ()
    parser: str = ""
    label_filters: tuple[tuple[str, str, Any], ...] = ()
    drop: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    line_format: str = ""
    error_filter: bool = False


def _matches(value: str, op: str, want: str) -> bool:
    if op == "=":
        return value == want
    if op == "!=":
        return value != want
    hit = re.fullmatch(want, value) is not None
    return hit if op == "=~" else not hit


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in obj.items():
        name = f"{prefix}_{key}" if prefix else key
        if isinstance(value, dict):
            out.update(_flatten(value, name))
        elif isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, int | float):
            out[name] = json.dumps(value)
        elif isinstance(value, str):
            out[name] = value
    return out


def _logfmt(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, quoted, plain in re.findall(r'(\w+)=(?:"([^"]*)"|(\S*))', line):
        value = quoted or plain
        if value:
            out[key] = value
    return out


def _parse(record: Record, parser: str) -> tuple[dict[str, str], str]:
    """The parsed labels and the error (JSONParserErr for a line that is not JSON)."""
    if parser == "json":
        try:
            obj = json.loads(record.line)
        except ValueError:
            return {}, "JSONParserErr"
        return _flatten(obj), ""
    if parser == "logfmt":
        return _logfmt(record.line), ""
    return {}, ""


def _duration_s(text: str) -> float:
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    match = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", text)
    if match is None:
        raise ValueError(text)
    return float(match.group(1)) * units[match.group(2)]


def labelled(record: Record, spec: Spec) -> dict[str, str] | None:
    """The entry's labels after ``spec``'s pipeline, or None when the pipeline drops it."""
    for name, op, want in spec.selector:
        if not _matches(record.stream.get(name, ""), op, want):
            return None
    for op, text in spec.line_filters:
        if op == "|=" and text not in record.line:
            return None
        if op == "!=" and text in record.line:
            return None
        if op == "|~" and re.search(text, record.line) is None:
            return None
    labels = dict(record.labels)
    if spec.parser:
        parsed, error = _parse(record, spec.parser)
        for key, value in parsed.items():
            labels[key + "_extracted" if key in record.labels else key] = value
        if error:
            labels["__error__"] = error
    for name, op, want in spec.label_filters:
        value = labels.get(name, "")
        if isinstance(want, tuple):  # (number, converter)
            if not value:
                return None
            number = want[1](value)
            if not {
                "<": number < want[0],
                ">": number > want[0],
                ">=": number >= want[0],
                "<=": number <= want[0],
                "==": number == want[0],
            }[op]:
                return None
        elif not _matches(value, op, want):
            return None
    if spec.error_filter and labels.get("__error__"):
        return None
    for name in spec.drop:
        labels.pop(name, None)
    if spec.keep:
        labels = {k: v for k, v in labels.items() if k in spec.keep}
    labels.pop("__error_details__", None)
    return {k: v for k, v in labels.items() if v}


def line_of(record: Record, labels: dict[str, str], spec: Spec) -> str:
    if not spec.line_format:
        return record.line
    return re.sub(r"\{\{\s*\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), spec.line_format)


def log_answer(
    records: list[Record], spec: Spec, start: int, end: int, limit: int, forward: bool
) -> list[tuple[dict[str, str], list[tuple[int, str]]]]:
    """Streams (label set, entries in the query's direction) of the ``limit`` entries
    nearest the starting end, ordered by their label sets' text."""
    chosen = []
    for record in records:
        if not start <= record.ts < end:
            continue
        labels = labelled(record, spec)
        if labels is None:
            continue
        chosen.append((record.ts, labels, line_of(record, labels, spec)))
    chosen.sort(key=lambda c: c[0], reverse=not forward)
    streams: dict[tuple[tuple[str, str], ...], list[tuple[int, str]]] = {}
    for ts, labels, line in chosen[:limit]:
        streams.setdefault(tuple(sorted(labels.items())), []).append((ts, line))
    return [
        (dict(key), entries)
        for key, entries in sorted(streams.items(), key=lambda kv: text_of(dict(kv[0])))
    ]


def text_of(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


# -- metric queries ------------------------------------------------------------------------

Reducer = Callable[[list[float], float], float]


def _quantile(q: float) -> Reducer:
    def run(values: list[float], _range_s: float) -> float:
        ordered = sorted(values)
        rank = q * (len(ordered) - 1)
        low = math.floor(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] * (1 - (rank - low)) + ordered[high] * (rank - low)

    return run


def _var(values: list[float], _r: float) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


REDUCERS: dict[str, Reducer] = {
    "count_over_time": lambda v, r: float(len(v)),
    "rate": lambda v, r: len(v) / r,
    "sum_over_time": lambda v, r: sum(v),
    "avg_over_time": lambda v, r: sum(v) / len(v),
    "min_over_time": lambda v, r: min(v),
    "max_over_time": lambda v, r: max(v),
    "first_over_time": lambda v, r: v[0],
    "last_over_time": lambda v, r: v[-1],
    "stdvar_over_time": _var,
    "stddev_over_time": lambda v, r: math.sqrt(_var(v, r)),
}


_SELECTED: dict[tuple[int, Spec], list[tuple[Record, dict[str, str]]]] = {}


def _selected(records: list[Record], spec: Spec) -> list[tuple[Record, dict[str, str]]]:
    """The records ``spec`` keeps and their labels (computed once per spec)."""
    key = (id(records), spec)
    found = _SELECTED.get(key)
    if found is None:
        found = _SELECTED[key] = [
            (r, labels) for r in records if (labels := labelled(r, spec)) is not None
        ]
    return found


def samples(
    records: list[Record], spec: Spec, unwrap: str = "", convert: Callable[[str], float] = float
) -> Iterator[tuple[int, dict[str, str], float, int]]:
    """Each selected entry's time, labels, unwrapped value (else 1) and line length."""
    for record, labels in _selected(records, spec):
        labels = dict(labels)
        value = 1.0
        if unwrap:
            text = labels.pop(unwrap, "")
            if not text:
                continue
            value = convert(text)
        yield record.ts, labels, value, len(record.line.encode())


def range_answer(
    records: list[Record],
    spec: Spec,
    function: str,
    range_ns: int,
    steps: list[int],
    by: tuple[str, ...] | None = None,
    unwrap: str = "",
    convert: Callable[[str], float] = float,
    outer: str = "",
    outer_by: tuple[str, ...] | None = None,
) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    """Series -> [(step time, value)] of ``function`` (optionally inside ``outer`` by
    ``outer_by``), each window ``(t - range, t]``."""
    found = sorted(samples(records, spec, unwrap, convert), key=lambda s: s[0])
    times = [ts for ts, _, _, _ in found]
    keys = [
        tuple(
            sorted((labels if by is None else {k: v for k, v in labels.items() if k in by}).items())
        )
        for _, labels, _, _ in found
    ]
    seconds = range_ns / 1e9
    inner: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
    for t in steps:
        window: dict[tuple[tuple[str, str], ...], list[tuple[float, int]]] = {}
        for i in range(bisect.bisect_right(times, t - range_ns), bisect.bisect_right(times, t)):
            window.setdefault(keys[i], []).append((found[i][2], found[i][3]))
        for key, items in window.items():
            if function in ("bytes_over_time", "bytes_rate"):
                total = float(sum(size for _, size in items))
                result = total if function == "bytes_over_time" else total / seconds
            else:
                values = [v for v, _ in items]
                if function.startswith("quantile_over_time"):
                    result = _quantile(float(function.split(":")[1]))(values, seconds)
                elif function == "rate" and unwrap:
                    result = sum(values) / seconds
                else:
                    result = REDUCERS[function](values, seconds)
            inner.setdefault(key, {})[t] = result
    if not outer:
        return {k: sorted(v.items()) for k, v in inner.items()}
    grouped: dict[tuple[tuple[str, str], ...], dict[int, list[float]]] = {}
    for key, points in inner.items():
        labels = dict(key)
        group = tuple(
            sorted((k, v) for k, v in labels.items() if outer_by is None or k in outer_by)
        )
        if outer_by is None:
            group = ()
        for t, v in points.items():
            grouped.setdefault(group, {}).setdefault(t, []).append(v)
    ops: dict[str, Callable[[list[float]], float]] = {
        "sum": sum,
        "count": lambda v: float(len(v)),
        "max": max,
        "min": min,
        "avg": lambda v: sum(v) / len(v),
    }
    return {k: sorted((t, ops[outer](v)) for t, v in pts.items()) for k, pts in grouped.items()}
