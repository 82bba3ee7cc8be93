"""A log query's pipeline over a :class:`~shoal.logql.frame.Frame`, stage by stage, each
stage over whole columns.

Line filters and label filters are Arrow kernels (regular expressions in Arrow's RE2,
checked first by :mod:`shoal.regex`); parsers are :mod:`shoal.logql.parsers`; formats
:mod:`shoal.logql.template`. Errors are Loki's: a parser, a label filter's conversion or
a template sets ``__error__`` (and ``__error_details__``) on the entry, once, and
``| __error__=""`` filters such entries out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import LogQLError
from shoal.logql import model as m
from shoal.logql import parsers, template
from shoal.logql.frame import METADATA, PARSED, STREAM, Frame, Label
from shoal.logql.parse import bytes_value, duration_ns
from shoal.regex import search_column

ERROR = "__error__"
DETAILS = "__error_details__"
_ANSI = r"\x1b\[[0-9;]*[a-zA-Z]"


def line_filter(lines: pa.Array, stage: m.LineFilter) -> pa.Array:
    """Which lines a line filter keeps."""
    found: pa.Array | None = None
    for value in stage.values:
        if stage.op in ("|=", "!="):
            hit = (
                pc.match_substring(lines, value)
                if value
                else pa.array(np.ones(len(lines), dtype=np.bool_))
            )
        else:
            hit = search_column(lines, value)
        found = hit if found is None else pc.or_(found, hit)
    assert found is not None
    return pc.invert(found) if stage.op in ("!=", "!~") else found


def _set_error(frame: Frame, errors: pa.Array, details: pa.Array | None = None) -> None:
    """Set ``__error__`` where ``errors`` has one and the entry has none yet."""
    if errors.null_count == len(errors):
        return
    old = frame.column(ERROR)
    frame.set(ERROR, pc.coalesce(old, errors), PARSED)
    if details is not None:
        frame.set(DETAILS, pc.if_else(old.is_null(), details, frame.column(DETAILS)), PARSED)


def _parsed_name(frame: Frame, name: str) -> str:
    """A parsed label's name: ``_extracted`` appended when a stream label or structured
    metadata has the name already."""
    label = frame.labels.get(name)
    if label is not None and label.category in (STREAM, METADATA):
        return name + "_extracted"
    return name


def _add_parsed(frame: Frame, columns: dict[str, pa.Array]) -> None:
    for name, values in columns.items():
        if not name:
            continue
        frame.set(_parsed_name(frame, name), values, PARSED)


def _from_lists(parsed: parsers.Parsed) -> tuple[dict[str, pa.Array], pa.Array, pa.Array]:
    columns, errors, details = parsed
    return (
        {k: pa.array(v, pa.string()) for k, v in columns.items()},
        pa.array(errors, pa.string()),
        pa.array(details, pa.string()),
    )


def parse(frame: Frame, stage: m.Parser) -> Frame:
    if stage.kind == "regexp":
        _add_parsed(frame, parsers.regexp(frame.line, stage.argument))
        return frame
    if stage.kind == "pattern":
        _add_parsed(frame, parsers.pattern(frame.line, stage.argument))
        return frame
    if stage.kind == "unpack":
        parsed, entries = parsers.unpack(frame.line)
        columns, errors, details = _from_lists(parsed)
        _add_parsed(frame, columns)
        _set_error(frame, errors, details)
        frame.line = pc.coalesce(pa.array(entries, pa.string()), frame.line)
        return frame
    if stage.kind == "json":
        result = (
            parsers.json_extract(frame.line, stage.extractions)
            if stage.extractions
            else parsers.json_all(frame.line)
        )
    else:
        result = parsers.logfmt(
            frame.line, "--strict" in stage.flags, "--keep-empty" in stage.flags
        )
        if stage.extractions:
            wanted = {parsers.sanitize(k): parsers.sanitize(v) for k, v in stage.extractions}
            kept = {new: result[0].get(old, [None] * frame.rows) for new, old in wanted.items()}
            result = (kept, result[1], result[2])
    columns, errors, details = _from_lists(result)
    _add_parsed(frame, columns)
    _set_error(frame, errors, details)
    return frame


def _numbers(values: pa.Array, kind: str) -> tuple[pa.Array, pa.Array]:
    """A label's values as numbers of ``kind`` (number, duration in seconds, bytes); and
    where a present value cannot be read so."""
    encoded = values.dictionary_encode()
    out: list[float | None] = []
    bad: list[bool] = []
    for text in encoded.dictionary.to_pylist():
        try:
            out.append(_number(text, kind))
            bad.append(False)
        except (ValueError, LogQLError):
            out.append(None)
            bad.append(True)
    numbers = pa.array(out, pa.float64()).take(encoded.indices)
    failed = pc.fill_null(pa.array(bad, pa.bool_()).take(encoded.indices), False)
    return numbers, failed


def _number(text: str, kind: str) -> float:
    if kind == "duration":
        return go_duration_seconds(text)
    if kind == "bytes":
        return bytes_value(text.replace(" ", ""))
    value = float(text)
    if text.strip().lower() in ("infinity", "+infinity", "-infinity"):
        raise ValueError(text)
    return value


def go_duration_seconds(text: str) -> float:
    """Go's ``time.ParseDuration`` of ``text``, in seconds (a sign, then number-unit pairs;
    ``0`` alone)."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or body[-1].isdigit() or any(u in body for u in ("d", "w", "y")):
        raise ValueError(text)
    return sign * duration_ns(body) / 1e9


_COMPARE = {
    "==": pc.equal, "!=": pc.not_equal, ">": pc.greater, ">=": pc.greater_equal,
    "<": pc.less, "<=": pc.less_equal,
}  # fmt: skip


def _label_filter(frame: Frame, node: m.LabelFilter) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Which entries ``node`` keeps, and the error (and details) it sets on each."""
    n = frame.rows
    none = pa.nulls(n, pa.string())
    if isinstance(node, m.StringFilter):
        values = frame.value_or_empty(node.name)
        if node.op in ("=", "!="):
            hit = pc.equal(values, node.value)
        else:
            hit = search_column(values, node.value, anchored=True)
        return (pc.invert(hit) if node.op in ("!=", "!~") else hit), none, none
    if isinstance(node, m.NumberFilter):
        column = frame.column(node.name)
        numbers, failed = _numbers(column, node.kind)
        compared = pc.fill_null(_COMPARE[node.op](numbers, node.value), False)
        present = column.is_valid()
        keep = pc.and_(present, pc.or_(compared, failed))
        errors = pc.if_else(failed, "LabelFilterErr", None)
        details = pc.if_else(failed, pc.binary_join_element_wise(
            pa.array(["strconv.ParseFloat: parsing "] * n), pc.fill_null(column, ""),
            pa.array([": invalid syntax"] * n), ""), None)  # fmt: skip
        return keep, errors, details
    left, left_err, left_details = _label_filter(frame, node.left)
    right, right_err, right_details = _label_filter(frame, node.right)
    if node.op == "or":
        # the right side runs only where the left did not keep the entry
        right_err = pc.if_else(left, None, right_err)
        right_details = pc.if_else(left, None, right_details)
        keep = pc.or_(left, right)
    else:
        keep = pc.and_(left, right)
    return keep, pc.coalesce(left_err, right_err), pc.coalesce(left_details, right_details)


def label_filter_mask(frame: Frame, stage: m.LabelFilterStage) -> pa.Array:
    """Which entries a label filter keeps (setting the errors it makes on the frame)."""
    keep, errors, details = _label_filter(frame, stage.filter)
    _set_error(frame, errors, details)
    return pc.fill_null(keep, False)


def label_filter(frame: Frame, stage: m.LabelFilterStage) -> Frame:
    return frame.filter(label_filter_mask(frame, stage))


def _resolver(frame: Frame) -> template.Resolve:
    def resolve(name: str) -> pa.Array:
        return frame.line if name == "__line__" else frame.value_or_empty(name)

    return resolve


def line_format(frame: Frame, stage: m.LineFormat) -> Frame:
    frame.line = template.render(stage.template, _resolver(frame), frame.rows)
    return frame


def label_format(frame: Frame, stage: m.LabelFormat) -> Frame:
    resolve = _resolver(frame)
    made: dict[str, pa.Array] = {}
    renamed: set[str] = set()
    for new, source, is_template in stage.items:
        if is_template:
            made[new] = template.render(source, resolve, frame.rows)
        else:
            made[new] = frame.column(source)
            if source != new:
                renamed.add(source)
    for name in renamed - set(made):
        frame.labels.pop(name, None)
    for name, values in made.items():
        frame.set(name, values, PARSED)
    return frame


def keep_drop(frame: Frame, stage: m.KeepDrop) -> Frame:
    plain = {name for name, matcher in stage.items if matcher is None}
    matched = [(name, matcher) for name, matcher in stage.items if matcher is not None]
    for name in list(frame.labels):
        rules = [mt for nm, mt in matched if nm == name]
        if stage.keep:
            if name in plain:
                continue
            if rules:
                hit = _matches_all(frame, rules)
                frame.labels[name] = Label(
                    frame.labels[name].category, pc.if_else(hit, frame.column(name), None)
                )
                continue
            frame.labels.pop(name)
        else:
            if name in plain:
                frame.labels.pop(name)
            elif rules:
                hit = _matches_all(frame, rules)
                frame.labels[name] = Label(
                    frame.labels[name].category, pc.if_else(hit, None, frame.column(name))
                )
    return frame


def _matches_all(frame: Frame, rules: Sequence[m.Matcher]) -> pa.Array:
    hit: pa.Array | None = None
    for rule in rules:
        one, _, _ = _label_filter(frame, m.StringFilter(rule.name, rule.op, rule.value))
        hit = one if hit is None else pc.and_(hit, one)
    assert hit is not None
    return hit


def run(frame: Frame, stages: Sequence[m.Stage]) -> Frame:
    """``frame`` through ``stages`` (an ``unwrap`` stage is the caller's)."""
    for stage in stages:
        if not frame.rows:
            return frame
        if isinstance(stage, m.LineFilter):
            frame = frame.filter(line_filter(frame.line, stage))
        elif isinstance(stage, m.Parser):
            frame = parse(frame, stage)
        elif isinstance(stage, m.LabelFilterStage):
            frame = label_filter(frame, stage)
        elif isinstance(stage, m.LineFormat):
            frame = line_format(frame, stage)
        elif isinstance(stage, m.LabelFormat):
            frame = label_format(frame, stage)
        elif isinstance(stage, m.KeepDrop):
            frame = keep_drop(frame, stage)
        elif isinstance(stage, m.Decolorize):
            frame.line = pc.replace_substring_regex(frame.line, _ANSI, "")
        else:
            raise LogQLError(f"{type(stage).__name__.lower()} is not allowed in a log query")
    return frame


def unwrap(frame: Frame, stage: m.Unwrap) -> tuple[Frame, np.ndarray]:
    """The unwrapped label's values as numbers (the label then leaves the entry's labels);
    values that cannot be read set ``SampleExtractionErr``."""
    column = frame.column(stage.label)
    kind = {"": "number", "bytes": "bytes"}.get(stage.conversion, "duration")
    numbers, failed = _numbers(column, kind)
    missing = column.is_null()
    failed = pc.or_(failed, missing)
    _set_error(frame, pc.if_else(failed, "SampleExtractionErr", None))
    frame.labels.pop(stage.label, None)
    values = np.asarray(pc.fill_null(numbers, math.nan).to_numpy(zero_copy_only=False), np.float64)
    return frame, values
