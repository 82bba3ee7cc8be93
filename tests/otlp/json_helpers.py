"""Helpers of the OTLP/JSON tests: the JSON rendering of a request, and Arrow equality."""

from __future__ import annotations

from loadtest.payloads import to_otlp_json

__all__ = ["identical", "to_otlp_json"]


def identical(a: object, b: object) -> bool:
    """Two Arrow tables with the same schema and the same values (NaN equal to NaN)."""
    import pyarrow as pa

    assert isinstance(a, pa.Table) and isinstance(b, pa.Table)
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())
