"""OTLP/JSON rendering of protobuf requests for tests (hex ids, integer enums)."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

_HEX_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hexify(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: (base64.b64decode(v).hex() if k in _HEX_KEYS else _hexify(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_hexify(v) for v in obj]
    return obj


def to_otlp_json(message: Message) -> bytes:
    """The message as OTLP/JSON: lowerCamelCase keys, hex ids, int64 as strings, int enums."""
    as_dict = json_format.MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hexify(as_dict)).encode()


def identical(a: object, b: object) -> bool:
    """Two Arrow tables with the same schema and the same values (NaN equal to NaN)."""
    import pyarrow as pa

    assert isinstance(a, pa.Table) and isinstance(b, pa.Table)
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())
