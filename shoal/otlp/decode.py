"""The entry point: an OTLP export request body to a :class:`DecodeResult`."""

from __future__ import annotations

import logging

from shoal.otlp import json_walk, logs, metrics, scanned, spans, wire
from shoal.rows.result import DecodeResult

logger = logging.getLogger(__name__)

SIGNALS = ("metrics", "logs", "spans")

_DECODERS = {"metrics": metrics.decode, "logs": logs.decode, "spans": spans.decode}


def decode(signal: str, body: bytes, *, json: bool = False) -> DecodeResult:
    """Decode an (already decompressed) OTLP export request of ``signal``.

    ``json`` selects OTLP/JSON instead of protobuf. The result's table has
    exactly the signal's frozen schema (``shoal.schema``). Invalid
    points are dropped and counted in ``rejected`` with reasons in
    ``errors``; a request that is malformed as a whole raises
    :class:`~shoal.errors.DecodeError`.
    """
    if signal not in _DECODERS:
        raise ValueError(f"unknown signal {signal!r}; expected one of {', '.join(SIGNALS)}")
    if json:
        body = json_walk.to_protobuf(signal, body)
    elif signal == "metrics":
        known = scanned.decode(body)
        if known is not None:
            return known
    request = wire.to_struct(signal, body)
    result = _DECODERS[signal](request)
    if result.rejected:
        logger.debug("%s request: %d rejected: %s", signal, result.rejected, result.errors)
    return result
