"""Loki's stream labels: the label-set text a push carries, its checks, the names Loki
gives OpenTelemetry attributes, and the ``service_name`` it discovers.

A protobuf push names each stream's labels as text, ``{app="api", env="prod"}`` (Go
string literals, double-quoted or back-quoted); the JSON push as an object. Loki refuses
a stream with no label, a label name that is not ``[a-zA-Z_][a-zA-Z0-9_]*``, or the same
name twice, and so do we (400 for the request, naming the stream).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping

from shoal.errors import DecodeError

SERVICE_NAME = "service_name"
UNKNOWN_SERVICE = "unknown_service"
DISCOVER_SERVICE_NAME = (
    "service",
    "app",
    "application",
    "app_name",
    "name",
    "app_kubernetes_io_name",
    "container",
    "container_name",
    "k8s_container_name",
    "component",
    "workload",
    "job",
    "k8s_job_name",
)
"""The labels whose value Loki 3 copies to ``service_name`` when a stream has none, first
found first (``validation.discover-service-name``'s default)."""

_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_PAIR = re.compile(
    r"""\s*([^\s=!~,{}"`]+)\s*=\s*("(?:[^"\\\n]|\\.)*"|`[^`]*`)\s*(,|\})""", re.DOTALL
)
_GO_ESCAPES = re.compile(
    r"\\(x[0-9a-fA-F]{2}|[0-7]{3}|U[0-9a-fA-F]{8}|[abfnrtv\\'\"]|u[0-9a-fA-F]{4})"
)
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_MAX_LABEL_TEXT = 64 * 1024


def valid_name(name: str) -> bool:
    return _NAME.match(name) is not None


def go_unquote(literal: str) -> str:
    """A Go string literal's value (double-quoted with Go's escapes, or back-quoted raw)."""
    if literal.startswith("`"):
        return literal[1:-1]
    body = literal[1:-1]
    if "\\" not in body:
        return body

    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU":
            return chr(int(code[1:], 16))
        if code[0].isdigit():
            return chr(int(code, 8))
        return _SIMPLE.get(code, code)

    rest = _GO_ESCAPES.sub("", body)
    if "\\" in rest:
        raise ValueError("an unknown escape sequence")
    value = _GO_ESCAPES.sub(one, body)
    try:  # a \u escape pair of UTF-16 surrogates is one character
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise ValueError("an escape of a lone UTF-16 surrogate") from None


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> tuple[tuple[str, str], ...]:
    """The label pairs of a stream's label text, as written (``{a="b", c="d"}``), sorted by
    name; raises DecodeError for text Loki would refuse."""
    if len(text) > _MAX_LABEL_TEXT:
        raise DecodeError(f"stream labels are {len(text)} bytes, over {_MAX_LABEL_TEXT}")
    body = text.strip()
    if not body.startswith("{"):
        raise DecodeError(f"error parsing labels {text!r}: expected a label set in braces")
    pairs: list[tuple[str, str]] = []
    at = 1
    if body[1:].strip() == "}":
        return check((), text)
    while at < len(body):
        match = _PAIR.match(body, at)
        if match is None:
            raise DecodeError(f'error parsing labels {text!r}: expected name="value" at {at}')
        try:
            value = go_unquote(match.group(2))
        except ValueError as exc:
            raise DecodeError(f"error parsing labels {text!r}: {exc}") from None
        pairs.append((match.group(1), value))
        at = match.end()
        if match.group(3) == "}":
            if body[at:].strip():
                raise DecodeError(f"error parsing labels {text!r}: text after the closing brace")
            return check(tuple(pairs), text)
    raise DecodeError(f"error parsing labels {text!r}: no closing brace")


def check(pairs: tuple[tuple[str, str], ...], where: str) -> tuple[tuple[str, str], ...]:
    """``pairs`` sorted by name, or DecodeError as Loki's validation refuses them."""
    if not pairs:
        raise DecodeError(f"error at least one label pair is required per stream ({where})")
    ordered = tuple(sorted(pairs))
    for i, (name, _) in enumerate(ordered):
        if not valid_name(name):
            raise DecodeError(f"invalid label name {name!r} in stream {where}")
        if i and ordered[i - 1][0] == name:
            raise DecodeError(f"duplicate label name {name!r} in stream {where}")
    return ordered


def with_service_name(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``pairs`` with ``service_name`` added as Loki 3 discovers it (from the first of
    :data:`DISCOVER_SERVICE_NAME` that the stream has, else ``unknown_service``)."""
    found = dict(pairs)
    if found.get(SERVICE_NAME):
        return pairs
    value = next((found[n] for n in DISCOVER_SERVICE_NAME if found.get(n)), UNKNOWN_SERVICE)
    return tuple(sorted({**found, SERVICE_NAME: value}.items()))


@functools.lru_cache(maxsize=65536)
def otel_name(key: str) -> str:
    """An OpenTelemetry attribute key as Loki names it in labels and structured metadata
    (otlptranslator's label namer as Loki 3 configures it): every character outside
    ``[a-zA-Z0-9_]`` becomes ``_``, runs of ``_`` collapse into one (but a leading
    ``__``), and a leading digit gets ``key_`` in front."""
    if not key:
        return key
    reserved = key.startswith("__") and key.endswith("__") and len(key) > 4
    inner = key[2:-2] if reserved else key
    out: list[str] = []
    for ch in inner:
        good = ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ("0" <= ch <= "9")
        c = ch if good else "_"
        if c == "_" and out and out[-1] == "_":
            continue
        out.append(c)
    name = "".join(out)
    if reserved:
        name = f"__{name}__"
    if name[:1].isdigit():
        name = "key_" + name
    return name


def quote(value: str) -> str:
    """A label value as Loki prints it in a label set (Go's ``strconv.Quote``)."""
    return json.dumps(value, ensure_ascii=False)


def render(labels: Mapping[str, str]) -> str:
    """A label set as Loki prints it: ``{a="b", c="d"}``, sorted by name."""
    return "{" + ", ".join(f"{k}={quote(labels[k])}" for k in sorted(labels)) + "}"
