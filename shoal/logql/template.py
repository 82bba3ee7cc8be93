"""The templates of ``line_format`` and ``label_format``: the subset of Go's text/template
that log pipelines mostly use, evaluated column by column.

Supported: literal text; ``{{.label}}`` (``{{ .label }}``); ``{{__line__}}``; pipes and
calls of ``ToUpper``/``upper``, ``ToLower``/``lower``, ``TrimSpace``/``trim``; string
literals. Anything else (``if``, ``range``, ``printf``, other functions) is a 400 that
names it: never a template half understood.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import LogQLError
from shoal.lokipush.labels import go_unquote

Resolve = Callable[[str], pa.Array]
"""A label's values by name (``""`` where absent); ``__line__`` is the line."""

_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.DOTALL)
_FUNCTIONS: dict[str, Callable[[pa.Array], pa.Array]] = {
    "ToUpper": pc.utf8_upper,
    "upper": pc.utf8_upper,
    "ToLower": pc.utf8_lower,
    "lower": pc.utf8_lower,
    "TrimSpace": pc.utf8_trim_whitespace,
    "trim": pc.utf8_trim_whitespace,
}
_TOKEN = re.compile(
    r'\s*(\.[a-zA-Z_][a-zA-Z0-9_]*|__line__|"(?:[^"\\]|\\.)*"|`[^`]*`|[a-zA-Z_]\w*|\|)'
)


def _tokens(action: str) -> list[str]:
    out: list[str] = []
    at = 0
    text = action.strip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise LogQLError(f"template action {{{{{action}}}}} is not supported")
        out.append(match.group(1))
        at = match.end()
        while at < len(text) and text[at].isspace():
            at += 1
    return out


def _operand(token: str, resolve: Resolve, n: int) -> pa.Array:
    if token.startswith("."):
        return resolve(token[1:])
    if token == "__line__":
        return resolve("__line__")
    if token[0] in '"`':
        return pa.array([go_unquote(token)] * n, pa.string())
    raise LogQLError(f"template function {token!r} is not supported")


def _call(name: str, args: list[pa.Array]) -> pa.Array:
    function = _FUNCTIONS.get(name)
    if function is None:
        raise LogQLError(f"template function {name!r} is not supported")
    if len(args) != 1:
        raise LogQLError(f"template function {name!r} takes one argument")
    return function(args[0])


def _action(action: str, resolve: Resolve, n: int) -> pa.Array:
    commands: list[list[str]] = [[]]
    for token in _tokens(action):
        if token == "|":
            commands.append([])
        else:
            commands[-1].append(token)
    value: pa.Array | None = None
    for i, command in enumerate(commands):
        if not command:
            raise LogQLError(f"template action {{{{{action}}}}} has an empty command")
        head, args = command[0], command[1:]
        if head in _FUNCTIONS:
            operands = [_operand(a, resolve, n) for a in args]
            if i:
                assert value is not None
                operands.append(value)
            value = _call(head, operands)
        else:
            if args or i:
                raise LogQLError(f"template action {{{{{action}}}}} is not supported")
            value = _operand(head, resolve, n)
    assert value is not None
    return value


def render(template: str, resolve: Resolve, n: int) -> pa.Array:
    """The template's text for each of ``n`` entries."""
    pieces: list[pa.Array | str] = []
    at = 0
    for match in _ACTION.finditer(template):
        if match.start() > at:
            pieces.append(template[at : match.start()])
        pieces.append(_action(match.group(1), resolve, n))
        at = match.end()
    if at < len(template):
        pieces.append(template[at:])
    if "{{" in "".join(p for p in pieces if isinstance(p, str)):
        raise LogQLError(f"template {template!r}: an action is not closed")
    arrays = [
        pa.array([p] * n, pa.string()) if isinstance(p, str) else pc.fill_null(p, "")
        for p in pieces
    ]
    if not arrays:
        return pa.array([""] * n, pa.string())
    if len(arrays) == 1:
        return arrays[0]
    return pc.binary_join_element_wise(*arrays, "")
