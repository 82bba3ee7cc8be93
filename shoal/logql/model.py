"""LogQL's syntax tree: frozen dataclasses the parser builds and the planner reads."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # = != =~ !~
    value: str


@dataclasses.dataclass(frozen=True)
class LineFilter:
    op: str  # |= != |~ !~
    values: tuple[str, ...]  # alternatives joined by ``or``


@dataclasses.dataclass(frozen=True)
class Parser:
    kind: str  # json logfmt regexp pattern unpack
    argument: str = ""  # regexp's or pattern's text
    extractions: tuple[tuple[str, str], ...] = ()  # (label, path or key)
    flags: tuple[str, ...] = ()  # logfmt's --strict, --keep-empty


@dataclasses.dataclass(frozen=True)
class StringFilter:
    name: str
    op: str
    value: str


@dataclasses.dataclass(frozen=True)
class NumberFilter:
    name: str
    op: str  # == != > >= < <=
    value: float
    kind: str  # number, duration (seconds), bytes


@dataclasses.dataclass(frozen=True)
class FilterOp:
    op: str  # and, or
    left: LabelFilter
    right: LabelFilter


LabelFilter = StringFilter | NumberFilter | FilterOp


@dataclasses.dataclass(frozen=True)
class LabelFilterStage:
    filter: LabelFilter


@dataclasses.dataclass(frozen=True)
class LineFormat:
    template: str


@dataclasses.dataclass(frozen=True)
class LabelFormat:
    items: tuple[tuple[str, str, bool], ...]  # (new name, old name or template, is template)


@dataclasses.dataclass(frozen=True)
class KeepDrop:
    keep: bool
    items: tuple[tuple[str, Matcher | None], ...]


@dataclasses.dataclass(frozen=True)
class Decolorize:
    pass


@dataclasses.dataclass(frozen=True)
class Unwrap:
    label: str
    conversion: str = ""  # "", bytes, duration, duration_seconds


Stage = (
    LineFilter
    | Parser
    | LabelFilterStage
    | LineFormat
    | LabelFormat
    | KeepDrop
    | Decolorize
    | Unwrap
)


@dataclasses.dataclass(frozen=True)
class LogQuery:
    matchers: tuple[Matcher, ...]
    stages: tuple[Stage, ...] = ()


@dataclasses.dataclass(frozen=True)
class Grouping:
    without: bool
    labels: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RangeAggregation:
    function: str
    query: LogQuery
    range_ns: int
    offset_ns: int = 0
    parameter: float | None = None  # quantile_over_time's
    grouping: Grouping | None = None


@dataclasses.dataclass(frozen=True)
class VectorAggregation:
    op: str
    expr: Expr
    grouping: Grouping | None = None
    parameter: Expr | None = None  # topk's k


@dataclasses.dataclass(frozen=True)
class Matching:
    on: bool
    labels: tuple[str, ...]
    group: str = ""  # "", left, right
    include: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Binary:
    op: str
    left: Expr
    right: Expr
    bool_modifier: bool = False
    matching: Matching | None = None


@dataclasses.dataclass(frozen=True)
class Literal:
    value: float


@dataclasses.dataclass(frozen=True)
class VectorLiteral:
    value: float


@dataclasses.dataclass(frozen=True)
class LabelReplace:
    expr: Expr
    destination: str
    replacement: str
    source: str
    regex: str


@dataclasses.dataclass(frozen=True)
class Negate:
    expr: Expr


Expr = (
    RangeAggregation | VectorAggregation | Binary | Literal | VectorLiteral | LabelReplace | Negate
)
Query = LogQuery | Expr
