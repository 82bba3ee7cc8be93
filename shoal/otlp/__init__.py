"""shoal.otlp: OTLP requests to Arrow tables with frozen schemas.

``decode(signal, body, json=False) -> DecodeResult`` is the whole interface;
``shoal.schema`` holds the schemas and ``shoal.otlp.anyvalue`` the
text encoding of attribute values.
"""

from shoal.otlp.decode import SIGNALS, decode
from shoal.rows.result import DecodeResult

__all__ = ["SIGNALS", "DecodeResult", "decode"]
