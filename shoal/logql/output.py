"""Loki's answers: the ``data`` of ``/query`` and ``/query_range`` (``streams``,
``matrix``, ``vector``, ``scalar``) with Loki's ``stats``, and the categorised form of
entries Grafana asks for with ``X-Loki-Response-Encoding-Flags: categorize-labels``."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

from shoal.logql.frame import METADATA, PARSED, STREAM, Frame, group
from shoal.logql.series import Scalar, Series, Steps, Value, sort_key

CATEGORIZE = "categorize-labels"


def timestamp(ns: int) -> msgspec.Raw:
    """A sample's time as Loki writes it: seconds, to the millisecond, a JSON number."""
    ms = ns // 1_000_000
    seconds, rest = divmod(ms, 1000)
    text = f"{seconds}.{rest:03d}".rstrip("0").rstrip(".") if rest else str(seconds)
    return msgspec.Raw(text.encode())


def number(value: float) -> str:
    """A sample's value as Loki writes it (Go's ``FormatFloat(v, 'f', -1, 64)``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(np.format_float_positional(value, trim="-"))


def streams(frame: Frame, forward: bool, categorize: bool) -> list[dict[str, Any]]:
    """Entries grouped into streams: by all their labels, or with ``categorize`` by their
    stream labels, each entry then carrying its structured metadata and parsed labels."""
    names = [n for n, lb in frame.labels.items() if not categorize or lb.category == STREAM]
    ids, label_sets = group(frame, names)
    order = np.lexsort((frame.ts if forward else -frame.ts, ids))
    lines = frame.line.to_pylist()
    extra: dict[int, list[tuple[str, list[str | None]]]] = {}
    if categorize:
        for category in (METADATA, PARSED):
            extra[category] = [
                (name, frame.column(name).to_pylist())
                for name, lb in sorted(frame.labels.items())
                if lb.category == category
            ]
    out: dict[int, dict[str, Any]] = {}
    for i in order.tolist():
        stream = out.get(int(ids[i]))
        if stream is None:
            stream = out[int(ids[i])] = {"stream": label_sets[int(ids[i])], "values": []}
        entry: list[Any] = [str(int(frame.ts[i])), lines[i]]
        if categorize:
            found: dict[str, dict[str, str]] = {}
            for category, key in ((METADATA, "structuredMetadata"), (PARSED, "parsed")):
                labels = {name: values[i] for name, values in extra[category] if values[i]}
                if labels:
                    found[key] = labels
            entry.append(found)
        stream["values"].append(entry)
    return sorted(out.values(), key=lambda s: sort_key(s["stream"]))


def matrix(series: list[Series], steps: Steps) -> list[dict[str, Any]]:
    times = steps.times
    out = []
    for s in sorted(series, key=lambda x: sort_key(x.labels)):
        values = [
            [timestamp(int(t)), number(float(v))]
            for t, v, p in zip(times.tolist(), s.values.tolist(), s.present.tolist(), strict=True)
            if p
        ]
        if values:
            out.append({"metric": s.labels, "values": values})
    return out


def vector(series: list[Series], t_ns: int, keep_order: bool = False) -> list[dict[str, Any]]:
    present = [s for s in series if s.present[0]]
    if not keep_order:
        present.sort(key=lambda x: sort_key(x.labels))
    return [
        {"metric": s.labels, "value": [timestamp(t_ns), number(float(s.values[0]))]}
        for s in present
    ]


def sort_vector(series: list[Series], descending: bool) -> list[Series]:
    return sorted(series, key=lambda s: float(s.values[0]), reverse=descending)


def metric_data(value: Value, steps: Steps, instant: bool, order: str = "") -> dict[str, Any]:
    if isinstance(value, Scalar):
        v = float(value.values[0] if instant else value.values[-1])
        return {"resultType": "scalar", "result": [timestamp(steps.end), number(v)]}
    if instant:
        if order:
            value = sort_vector(value, order == "sort_desc")
        return {"resultType": "vector", "result": vector(value, steps.end, bool(order))}
    return {"resultType": "matrix", "result": matrix(value, steps)}


def stats(lines: int, size: int, returned: int, seconds: float) -> dict[str, Any]:
    """Loki's ``stats`` object: what was read and how long it took (shoal has no chunks,
    ingesters or caches: those sections are there, with zeros, as Grafana expects them)."""

    def rate(n: int) -> int:
        return int(n / seconds) if seconds > 0 else 0

    store = {
        "totalChunksRef": 0, "totalChunksDownloaded": 0, "chunksDownloadTime": 0,
        "queryReferencedStructuredMetadata": False,
        "chunk": {"headChunkBytes": 0, "headChunkLines": 0, "decompressedBytes": size,
                  "decompressedLines": lines, "compressedBytes": 0, "totalDuplicates": 0,
                  "postFilterLines": returned, "headChunkStructuredMetadataBytes": 0,
                  "decompressedStructuredMetadataBytes": 0},
        "chunkRefsFetchTime": 0, "congestionControlLatency": 0,
        "pipelineWrapperFilteredLines": 0,
    }  # fmt: skip
    cache = {
        "entriesFound": 0, "entriesRequested": 0, "entriesStored": 0, "bytesReceived": 0,
        "bytesSent": 0, "requests": 0, "downloadTime": 0, "queryLengthServed": 0,
    }  # fmt: skip
    return {
        "summary": {
            "bytesProcessedPerSecond": rate(size), "linesProcessedPerSecond": rate(lines),
            "totalBytesProcessed": size, "totalLinesProcessed": lines,
            "execTime": seconds, "queueTime": 0, "subqueries": 0,
            "totalEntriesReturned": returned, "splits": 0, "shards": 0,
            "totalPostFilterLines": returned, "totalStructuredMetadataBytesProcessed": 0,
        },
        "querier": {"store": store},
        "ingester": {"totalReached": 0, "totalChunksMatched": 0, "totalBatches": 0,
                     "totalLinesSent": 0, "store": store},
        "cache": {name: dict(cache) for name in (
            "chunk", "index", "result", "statsResult", "volumeResult", "seriesResult",
            "labelResult", "instantMetricResult")},
        "index": {"totalChunks": 0, "postFilterChunks": 0, "shardsDuration": 0,
                  "usedBloomFilters": False},
    }  # fmt: skip
