"""OTLP ``AnyValue`` as text plus a type tag, losslessly, and back.

Attribute maps and log bodies are stored as strings so that SQL can compare
``attributes['http.method'] = 'GET'`` directly. A value that is not a string
gets a type tag in the companion ``*_types`` map (or ``body_type``):

========  ======================================================  ==========
OTLP      text                                                    type tag
========  ======================================================  ==========
string    the string itself                                       (none)
int       decimal, e.g. ``-42``                                   ``int``
double    shortest round-trip ``repr``; ``NaN``, ``Infinity``,    ``double``
          ``-Infinity``
bool      ``true`` / ``false``                                    ``bool``
bytes     standard base64 with padding                            ``bytes``
array     OTLP/JSON of the ``ArrayValue``                         ``array``
kvlist    OTLP/JSON of the ``KeyValueList``                       ``kvlist``
empty     the empty string                                        ``empty``
========  ======================================================  ==========

:func:`encode` and :func:`decode` are inverses (NaN payload bits aside). The
OTLP/JSON helpers (:func:`to_json`, :func:`from_json`) follow the
specification's JSON mapping: lowerCamelCase keys, 64-bit integers as
strings, bytes as base64, non-finite doubles as ``"NaN"``/``"Infinity"``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from shoal.errors import DecodeError
from shoal.text import double_text

__all__ = [
    "decode",
    "double_text",
    "encode",
    "from_json",
    "keyvalues_from_json",
    "keyvalues_kwargs",
    "parse_double",
    "parse_int",
    "to_json",
    "value_kwargs",
]

TYPE_INT = "int"
TYPE_DOUBLE = "double"
TYPE_BOOL = "bool"
TYPE_BYTES = "bytes"
TYPE_ARRAY = "array"
TYPE_KVLIST = "kvlist"
TYPE_EMPTY = "empty"

_MAX_DEPTH = 64
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def encode(value: AnyValue) -> tuple[str, str | None]:
    """``(text, type)`` of an OTLP value; ``type`` is None for strings."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value, None
    if kind == "int_value":
        return str(value.int_value), TYPE_INT
    if kind == "double_value":
        return double_text(value.double_value), TYPE_DOUBLE
    if kind == "bool_value":
        return ("true" if value.bool_value else "false"), TYPE_BOOL
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii"), TYPE_BYTES
    if kind == "array_value":
        return _dumps(_array_json(value.array_value, 0)), TYPE_ARRAY
    if kind == "kvlist_value":
        return _dumps(_kvlist_json(value.kvlist_value, 0)), TYPE_KVLIST
    return "", TYPE_EMPTY


def decode(text: str, type_tag: str | None) -> AnyValue:
    """The OTLP value that :func:`encode` rendered as ``(text, type_tag)``."""
    if type_tag is None:
        return AnyValue(string_value=text)
    if type_tag == TYPE_INT:
        return AnyValue(int_value=int(text))
    if type_tag == TYPE_DOUBLE:
        return AnyValue(double_value=float(text))
    if type_tag == TYPE_BOOL:
        if text not in ("true", "false"):
            raise ValueError(f"bool value must be true or false, got {text!r}")
        return AnyValue(bool_value=text == "true")
    if type_tag == TYPE_BYTES:
        return AnyValue(bytes_value=base64.b64decode(text, validate=True))
    if type_tag == TYPE_ARRAY:
        return AnyValue(array_value=ArrayValue(values=_values_from_json(json.loads(text), "")))
    if type_tag == TYPE_KVLIST:
        items = _values_field(json.loads(text), "kvlist")
        return AnyValue(kvlist_value=KeyValueList(values=keyvalues_from_json(items)))
    if type_tag == TYPE_EMPTY:
        return AnyValue()
    raise ValueError(f"unknown attribute type tag {type_tag!r}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# -- OTLP/JSON ----------------------------------------------------------------


def to_json(value: AnyValue) -> dict[str, Any]:
    """OTLP/JSON object of an ``AnyValue`` (``{}`` when empty)."""
    return _value_json(value, 0)


def _value_json(value: AnyValue, depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise DecodeError(f"attribute value nested deeper than {_MAX_DEPTH} levels")
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": value.string_value}
    if kind == "int_value":
        return {"intValue": str(value.int_value)}
    if kind == "double_value":
        d = value.double_value
        return {"doubleValue": d if math.isfinite(d) else double_text(d)}
    if kind == "bool_value":
        return {"boolValue": value.bool_value}
    if kind == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")}
    if kind == "array_value":
        return {"arrayValue": _array_json(value.array_value, depth + 1)}
    if kind == "kvlist_value":
        return {"kvlistValue": _kvlist_json(value.kvlist_value, depth + 1)}
    return {}


def _array_json(array: ArrayValue, depth: int) -> dict[str, Any]:
    return {"values": [_value_json(v, depth + 1) for v in array.values]}


def _kvlist_json(kvlist: KeyValueList, depth: int) -> dict[str, Any]:
    return {
        "values": [
            {"key": kv.key, "value": _value_json(kv.value, depth + 1)} for kv in kvlist.values
        ]
    }


def parse_int(raw: object, where: str, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    """An OTLP/JSON integer: a JSON number or a decimal string, within ``[lo, hi]``."""
    if isinstance(raw, bool):
        raise DecodeError(f"{where}: expected an integer, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            raise DecodeError(f"{where}: expected an integer, got {_show(raw)}") from None
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    else:
        raise DecodeError(f"{where}: expected an integer, got {_show(raw)}")
    if not lo <= value <= hi:
        raise DecodeError(f"{where}: integer {value} out of range [{lo}, {hi}]")
    return value


def parse_double(raw: object, where: str) -> float:
    """An OTLP/JSON double: a number, or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    if isinstance(raw, bool):
        raise DecodeError(f"{where}: expected a number, got {raw!r}")
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            pass
    raise DecodeError(f"{where}: expected a number, got {_show(raw)}")


def parse_string(raw: object, where: str) -> str:
    """An OTLP/JSON string."""
    if not isinstance(raw, str):
        raise DecodeError(f"{where}: expected a string, got {_show(raw)}")
    return raw


def parse_bool(raw: object, where: str) -> bool:
    """An OTLP/JSON boolean: ``true`` or ``false``."""
    if not isinstance(raw, bool):
        raise DecodeError(f"{where}: expected true or false, got {_show(raw)}")
    return raw


def _show(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def from_json(obj: object, where: str = "value") -> AnyValue:
    """Parse an OTLP/JSON ``AnyValue`` object; raises DecodeError naming ``where``."""
    return AnyValue(**value_kwargs(obj, where))


def value_kwargs(obj: object, where: str = "value", depth: int = 0) -> dict[str, Any]:
    """Constructor keywords of the ``AnyValue`` an OTLP/JSON object stands for."""
    if depth > _MAX_DEPTH:
        raise DecodeError(f"{where}: attribute value nested deeper than {_MAX_DEPTH} levels")
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise DecodeError(f"{where}: expected an object, got {_show(obj)}")
    if not obj:
        return {}
    if len(obj) != 1:
        raise DecodeError(f"{where}: a value must have exactly one field, got {sorted(obj)}")
    ((key, raw),) = obj.items()
    if key in ("stringValue", "string_value"):
        return {"string_value": parse_string(raw, f"{where}.{key}")}
    if key in ("intValue", "int_value"):
        return {"int_value": parse_int(raw, f"{where}.{key}")}
    if key in ("doubleValue", "double_value"):
        return {"double_value": parse_double(raw, f"{where}.{key}")}
    if key in ("boolValue", "bool_value"):
        return {"bool_value": parse_bool(raw, f"{where}.{key}")}
    if key in ("bytesValue", "bytes_value"):
        return {"bytes_value": parse_base64(raw, f"{where}.{key}")}
    if key in ("arrayValue", "array_value"):
        items = _values_field(raw, f"{where}.{key}")
        values = [
            value_kwargs(v, f"{where}.{key}.values[{i}]", depth + 1) for i, v in enumerate(items)
        ]
        return {"array_value": {"values": values}}
    if key in ("kvlistValue", "kvlist_value"):
        items = _values_field(raw, f"{where}.{key}")
        return {"kvlist_value": {"values": keyvalues_kwargs(items, f"{where}.{key}", depth + 1)}}
    raise DecodeError(f"{where}: unknown value field {key!r}")


def parse_base64(raw: object, where: str) -> bytes:
    if not isinstance(raw, str):
        raise DecodeError(f"{where}: expected base64 text, got {_show(raw)}")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        try:
            return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except (binascii.Error, ValueError):
            raise DecodeError(f"{where}: invalid base64 {_show(raw)}") from None


def _values_field(raw: object, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise DecodeError(f"{where}: expected an object, got {_show(raw)}")
    items = raw.get("values", [])
    if items is None:
        return []
    if not isinstance(items, list):
        raise DecodeError(f"{where}.values: expected a list, got {_show(items)}")
    return items


def _values_from_json(items: object, where: str) -> list[AnyValue]:
    if isinstance(items, dict):
        items = items.get("values", [])
    if not isinstance(items, list):
        raise DecodeError(f"{where}: expected a list, got {_show(items)}")
    return [from_json(v, f"{where}.values[{i}]") for i, v in enumerate(items)]


def keyvalues_from_json(items: object, where: str = "attributes") -> list[KeyValue]:
    """Parse an OTLP/JSON list of ``{"key": ..., "value": {...}}`` objects."""
    return [KeyValue(**kw) for kw in keyvalues_kwargs(items, where)]


def keyvalues_kwargs(items: object, where: str | None = "attributes", depth: int = 0) -> list[Any]:
    """Constructor keywords of the ``KeyValue`` list an OTLP/JSON list stands for."""
    if items is None:
        return []
    if type(items) is not list:
        raise DecodeError(f"{where}: expected a list, got {_show(items)}")
    out: list[Any] = []
    append = out.append
    for i, item in enumerate(items):
        # the common case, a string value, without the general walk
        if type(item) is dict and len(item) == 2:
            key = item.get("key")
            value = item.get("value")
            if type(key) is str and type(value) is dict and len(value) == 1:
                text = value.get("stringValue")
                if type(text) is str:
                    append({"key": key, "value": {"string_value": text}})
                    continue
        append(_keyvalue_kwargs(item, f"{where}[{i}]", depth))
    return out


def _keyvalue_kwargs(item: object, where: str, depth: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise DecodeError(f"{where}: expected an object, got {_show(item)}")
    key = parse_string(item.get("key", ""), f"{where}.key")
    return {"key": key, "value": value_kwargs(item.get("value"), f"{where}.value", depth)}
