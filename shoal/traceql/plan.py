"""A parsed TraceQL query: the plan's nodes, and what the plan reads.

Field expressions (inside ``{ }``) are :data:`Field` trees over :class:`Attribute`,
:class:`Intrinsic` and :class:`Literal` leaves; spanset expressions are
:class:`SpansetFilter`, :class:`SpansetOp` and :class:`Pipeline` nodes whose stages are
spanset expressions, :class:`ScalarFilter`, :class:`By`, :class:`Select` and
:class:`Coalesce`. :func:`needs` lists the attributes and intrinsics a plan reads, so the
source reads those columns and no others.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

SCOPES = ("span", "resource", "event", "link", "instrumentation")
_NEEDS_QUOTES = re.compile(r'[\s{}()=!<>~&|,"\\]')
"""Characters an attribute name can hold only quoted."""


def _quoted(text: str) -> str:
    """``text`` as a TraceQL string: in double quotes, ``\\`` and ``"`` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclasses.dataclass(frozen=True)
class Attribute:
    """``span.x``, ``resource.x``, ``event.x``, ``link.x``, ``instrumentation.x``, or
    ``.x`` (``scope`` None: the span's attribute, else the resource's)."""

    scope: str | None
    name: str

    def text(self) -> str:
        name = self.name
        if not name or _NEEDS_QUOTES.search(name):
            name = _quoted(name)
        return f"{self.scope or ''}.{name}"


@dataclasses.dataclass(frozen=True)
class Intrinsic:
    """An intrinsic field by its canonical name (``span:name``, ``trace:rootService``...)."""

    name: str

    def text(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Literal:
    """A typed literal: ``kind`` is string, int, float, duration (nanoseconds), bool,
    status, span_kind or nil."""

    kind: str
    value: object

    def text(self) -> str:
        if self.kind == "string":
            return _quoted(str(self.value))
        if self.kind == "bool":
            return "true" if self.value else "false"
        return "nil" if self.kind == "nil" else str(self.value)


@dataclasses.dataclass(frozen=True)
class Compare:
    op: str
    left: Field
    right: Field


@dataclasses.dataclass(frozen=True)
class Logic:
    op: str  # "&&" or "||"
    left: Field
    right: Field


@dataclasses.dataclass(frozen=True)
class Not:
    operand: Field


Field = Attribute | Intrinsic | Literal | Compare | Logic | Not


@dataclasses.dataclass(frozen=True)
class SpansetFilter:
    condition: Field | None  # None: ``{ }``, every span


@dataclasses.dataclass(frozen=True)
class SpansetOp:
    """``&&``, ``||`` or a structural operator between two spanset expressions."""

    op: str
    left: Spanset
    right: Spanset


@dataclasses.dataclass(frozen=True)
class Aggregate:
    fn: str  # count, avg, min, max, sum
    field: Field | None

    def text(self) -> str:
        return f"{self.fn}({field_text(self.field) if self.field is not None else ''})"


@dataclasses.dataclass(frozen=True)
class ScalarFilter:
    op: str
    aggregate: Aggregate
    literal: Literal


@dataclasses.dataclass(frozen=True)
class By:
    field: Field


@dataclasses.dataclass(frozen=True)
class Select:
    fields: tuple[Field, ...]


@dataclasses.dataclass(frozen=True)
class Coalesce:
    pass


@dataclasses.dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]


Spanset = SpansetFilter | SpansetOp | Pipeline
Stage = Spanset | ScalarFilter | By | Select | Coalesce


def field_text(field: Field) -> str:
    """A field expression as TraceQL writes it (for ``by(...)`` attribute names)."""
    if isinstance(field, Attribute | Intrinsic | Literal):
        return field.text()
    if isinstance(field, Not):
        return f"!({field_text(field.operand)})"
    return f"{field_text(field.left)} {field.op} {field_text(field.right)}"


def fields_in(node: object) -> Iterator[Field]:
    """Every field leaf (attribute or intrinsic) under ``node``."""
    if isinstance(node, Attribute | Intrinsic):
        yield node
    elif isinstance(node, Compare | Logic | SpansetOp):
        yield from fields_in(node.left)
        yield from fields_in(node.right)
    elif isinstance(node, Not):
        yield from fields_in(node.operand)
    elif isinstance(node, SpansetFilter) and node.condition is not None:
        yield from fields_in(node.condition)
    elif isinstance(node, Pipeline):
        for stage in node.stages:
            yield from fields_in(stage)
    elif isinstance(node, ScalarFilter) and node.aggregate.field is not None:
        yield from fields_in(node.aggregate.field)
    elif isinstance(node, By):
        yield from fields_in(node.field)
    elif isinstance(node, Select):
        for field in node.fields:
            yield from fields_in(field)


def needs(node: object) -> tuple[set[Attribute], set[str]]:
    """The attributes and the intrinsics ``node`` reads."""
    attributes: set[Attribute] = set()
    intrinsics: set[str] = set()
    for leaf in fields_in(node):
        if isinstance(leaf, Attribute):
            attributes.add(leaf)
        elif isinstance(leaf, Intrinsic):
            intrinsics.add(leaf.name)
    return attributes, intrinsics
