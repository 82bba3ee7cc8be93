"""The OTLP -> Prometheus view: metric names, label names, job/instance, target_info.

The rules follow the OpenTelemetry specification's Prometheus compatibility
section and the defaults of Prometheus' own OTLP receiver (names with unit and
type suffixes, characters outside Prometheus' set replaced by underscores);
docs/rationale.md lists them. Nothing here touches the stored rows: the
mapping is applied when a query reads them.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.arrays import unique
from shoal.promql import columns
from shoal.promql.model import LabelKey, Labels, Series
from shoal.promql.model import key as label_key
from shoal.storage.series_rows import plain

UNITS: dict[str, str] = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}
PER_UNITS: dict[str, str] = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}

SERVICE_NAME = "service.name"
SERVICE_NAMESPACE = "service.namespace"
SERVICE_INSTANCE_ID = "service.instance.id"
IDENTIFYING = frozenset({SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_INSTANCE_ID})
TARGET_INFO = "target_info"

_TOKEN = re.compile(r"[A-Za-z0-9]+")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_]")
_BRACES = re.compile(r"\{[^}]*\}")


def _unit_token(text: str, table: Mapping[str, str]) -> str:
    text = _BRACES.sub("", text).strip()
    if not text:
        return ""
    mapped = table.get(text, text)
    return "_".join(_TOKEN.findall(mapped))


@functools.lru_cache(maxsize=65536)
def metric_name(name: str, unit: str | None, metric_type: str, monotonic: bool | None) -> str:
    """The Prometheus name of an OTLP metric (before ``_bucket``/``_sum``/``_count``)."""
    tokens = _TOKEN.findall(name)
    unit = unit or ""
    main, _, per = unit.partition("/")
    main_token = _unit_token(main, UNITS)
    if main_token and main_token not in tokens:
        tokens.append(main_token)
    per_token = _unit_token(per, PER_UNITS) if per else ""
    if per_token and per_token not in tokens:
        tokens += ["per", per_token]
    if metric_type == "sum" and monotonic:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and metric_type == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    out = "_".join(tokens)
    if not out:
        return "_"
    if out[0].isdigit():
        out = "_" + out
    return out


@functools.lru_cache(maxsize=65536)
def label_name(key: str) -> str:
    """An attribute key as a Prometheus label name."""
    if not key:
        return key
    out = _LABEL_BAD.sub("_", key)
    if out[0].isdigit():
        out = "key_" + out
    elif out.startswith("_") and not out.startswith("__"):
        out = "key" + out
    return out


def text_map(pairs: Iterable[tuple[Any, Any]] | None) -> dict[str, str]:
    """An attribute map's ``(key, value)`` pairs as text; a null value is no value (``""``),
    as an empty one is."""
    return {str(k): "" if v is None else str(v) for k, v in pairs or ()}


def job_instance(resource: Mapping[str, str]) -> dict[str, str]:
    """``job`` and ``instance`` from the identifying resource attributes."""
    out: dict[str, str] = {}
    name = resource.get(SERVICE_NAME)
    if name:
        namespace = resource.get(SERVICE_NAMESPACE)
        out["job"] = f"{namespace}/{name}" if namespace else name
    instance = resource.get(SERVICE_INSTANCE_ID)
    if instance:
        out["instance"] = instance
    return out


def series_labels(
    name: str,
    attributes: Mapping[str, str],
    resource: Mapping[str, str],
    promote: tuple[str, ...] = (),
) -> dict[str, str]:
    """The label set of one series: promoted resource attributes, point attributes (which
    win over them), then job/instance, then ``__name__``.

    Attribute keys that sanitise to the same label name are joined with ``;`` in key
    order, as Prometheus' OTLP receiver does.
    """
    labels: dict[str, str] = {}
    for key in sorted(promote):
        value = resource.get(key, "")
        if value != "" and key not in IDENTIFYING:
            labels[label_name(key)] = value
    point: dict[str, str] = {}
    for key in sorted(attributes):
        value = attributes[key]
        if value == "":
            continue
        label = label_name(key)
        point[label] = f"{point[label]};{value}" if label in point else value
    labels.update(point)
    labels.update(job_instance(resource))
    labels["__name__"] = name
    return labels


def target_labels(resource: Mapping[str, str]) -> dict[str, str] | None:
    """The ``target_info`` labels of a resource; None when it has nothing but identity."""
    extra = {k: v for k, v in resource.items() if k not in IDENTIFYING and v != ""}
    if not extra:
        return None
    labels: dict[str, str] = {}
    for name in sorted(extra):
        label = label_name(name)
        labels[label] = f"{labels[label]};{extra[name]}" if label in labels else extra[name]
    labels.update(job_instance(resource))
    labels["__name__"] = TARGET_INFO
    return labels


def format_float(value: float) -> str:
    """A float as Prometheus writes it in JSON and in ``le``/``quantile`` labels."""
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "+Inf"
    if value == float("-inf"):
        return "-Inf"
    text = repr(float(value))
    if "e" in text or "E" in text:
        return str(np.format_float_positional(value, trim="-"))
    return text[:-2] if text.endswith(".0") else text


def exposed_names(base: str, metric_type: str) -> list[str]:
    """Every Prometheus name an OTLP metric of this type appears under."""
    if metric_type == "histogram":
        return [f"{base}_bucket", f"{base}_sum", f"{base}_count"]
    if metric_type == "summary":
        return [base, f"{base}_sum", f"{base}_count"]
    return [base]  # exponential histograms too: native histograms keep the bare name


def prom_type(metric_type: str, monotonic: bool | None, temporality: int | None) -> str:
    """The Prometheus metadata type of an OTLP metric."""
    if metric_type == "sum":
        return "counter" if monotonic else "gauge"
    if metric_type == "histogram":
        return "histogram"
    if metric_type == "summary":
        return "summary"
    if metric_type == "exponential_histogram":
        return "histogram"
    return "gauge"


def promoted(setting: str) -> tuple[str, ...]:
    """The resource attribute keys of ``promql_promote_resource_attributes``."""
    return tuple(sorted({k.strip() for k in setting.split(",") if k.strip()}))


@dataclasses.dataclass(frozen=True)
class MetricInfo:
    """One OTLP metric as the infos query sees it, with its Prometheus base name."""

    otlp_name: str
    metric_type: str
    unit: str
    monotonic: bool | None
    temporality: int | None
    description: str
    verbatim: bool = False
    """Written by Prometheus remote write: the name is already Prometheus'."""

    @property
    def base(self) -> str:
        if self.verbatim:
            return self.otlp_name
        return metric_name(self.otlp_name, self.unit, self.metric_type, self.monotonic)

    @property
    def names(self) -> list[str]:
        return exposed_names(self.base, self.metric_type)


def target_keys(table: pa.Table) -> list[tuple[str, str, str]]:
    return list(
        zip(
            table.column("s").to_pylist(),
            table.column("ns").to_pylist(),
            table.column("iid").to_pylist(),
            strict=True,
        )
    )


def target_label_sets(resources: pa.Table) -> list[Labels]:
    """The ``target_info`` label set of each resource that has attributes beyond its identity."""
    out: dict[LabelKey, Labels] = {}
    maps = resources.column("resource_attributes")
    # only the resources with such attributes are converted (most have none)
    keys, values, rows = columns.entries(maps)
    extra = pc.and_(
        pc.invert(pc.is_in(plain(keys), value_set=pa.array(sorted(IDENTIFYING)))),
        pc.not_equal(pc.fill_null(values, ""), ""),
    )
    chosen = unique(rows[np.asarray(extra, dtype=bool)])
    if not len(chosen):
        return []
    for raw in plain(maps.take(pa.array(chosen))).to_pylist():
        labels = target_labels(text_map(raw))
        if labels is not None:
            out.setdefault(label_key(labels), labels)
    return list(out.values())


def target_series(found: tuple[pa.Table, pa.Table]) -> list[Series]:
    """``target_info`` series: value 1 whenever the resource sent a point."""
    resources, times = found
    labels_of: dict[tuple[str, str, str], Labels] = {}
    for k, raw in zip(
        target_keys(resources), resources.column("resource_attributes").to_pylist(), strict=True
    ):
        labels = target_labels(text_map(raw))
        if labels is not None:
            labels_of[k] = labels
    if not labels_of or times.num_rows == 0:
        return []
    t_ms = np.asarray(times.column("time_unix_nano").to_numpy(), dtype=np.int64) // 1_000_000
    keys = target_keys(times)
    by_target: dict[LabelKey, tuple[Labels, list[int]]] = {}
    for k, t in zip(keys, t_ms, strict=True):
        labels = labels_of.get(k)
        if labels is not None:
            by_target.setdefault(label_key(labels), (labels, []))[1].append(int(t))
    out = []
    for labels, ts in by_target.values():
        t_arr = unique(np.asarray(ts, dtype=np.int64))
        out.append(Series(labels, t_arr, np.ones(len(t_arr))))
    return out
