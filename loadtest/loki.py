"""Loki push bodies, encoded by hand (independently of shoal's decoder), as Promtail and
Alloy send them.

Protobuf (Loki's ``pkg/push/push.proto``): ``PushRequest{streams=1}``,
``StreamAdapter{labels=1 (the label set as text), entries=2}``,
``EntryAdapter{timestamp=1 (google.protobuf.Timestamp{seconds=1, nanos=2}), line=2,
structuredMetadata=3}``, ``LabelPairAdapter{name=1, value=2}``; snappy's block format
around it. JSON: ``{"streams": [{"stream": {...}, "values": [["<ns>", "<line>",
{<metadata>}]]}]}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import cramjam

from loadtest.remote_write import field, varint

Entry = tuple[int, str] | tuple[int, str, Mapping[str, str]]
"""``(time in ns, line)`` or ``(time in ns, line, structured metadata)``."""
Stream = tuple[Mapping[str, str], Sequence[Entry]]


def label_text(labels: Mapping[str, str]) -> str:
    """A label set as Promtail writes it: ``{a="b", c="d"}`` (Go-quoted values)."""
    return (
        "{"
        + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(labels.items()))
        + "}"
    )


def _entry(entry: Entry) -> bytes:
    ns, line = entry[0], entry[1]
    stamp = b""
    if ns // 1_000_000_000:
        stamp += b"\x08" + varint(ns // 1_000_000_000)
    if ns % 1_000_000_000:
        stamp += b"\x10" + varint(ns % 1_000_000_000)
    out = field(1, stamp) + field(2, line.encode())
    for name, value in (entry[2] if len(entry) == 3 else {}).items():  # type: ignore[misc]
        out += field(3, field(1, name.encode()) + field(2, value.encode()))
    return out


def encode(streams: Iterable[Stream]) -> bytes:
    """The uncompressed ``PushRequest`` of ``streams``."""
    out = bytearray()
    for labels, entries in streams:
        body = field(1, label_text(labels).encode())
        body += b"".join(field(2, _entry(e)) for e in entries)
        out += field(1, body)
    return bytes(out)


def compress(raw: bytes) -> bytes:
    """Snappy's block format, as a push body is sent."""
    return bytes(cramjam.snappy.compress_raw(raw))


def encode_json(streams: Iterable[Stream]) -> bytes:
    """The JSON push body of ``streams``."""
    out = []
    for labels, entries in streams:
        values = [
            [str(e[0]), e[1], dict(e[2])] if len(e) == 3 else [str(e[0]), e[1]]  # type: ignore[misc]
            for e in entries
        ]
        out.append({"stream": dict(labels), "values": values})
    return json.dumps({"streams": out}).encode()
