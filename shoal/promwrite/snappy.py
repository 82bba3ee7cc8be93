"""Snappy's block format, as remote write compresses its bodies (cramjam does the work)."""

from __future__ import annotations

import cramjam

from shoal.errors import DecodeError, PayloadTooLargeError


def uncompressed_length(block: bytes) -> int:
    """The length a snappy block declares in its leading varint."""
    value = shift = 0
    for i, byte in enumerate(block[:10]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
        if i == 4:
            break
    raise DecodeError("body is not snappy-compressed: no valid length at its start")


def decompress(block: bytes, limit: int) -> bytes:
    """The uncompressed body, refused before any work when it would exceed ``limit``."""
    if uncompressed_length(block) > limit:
        raise PayloadTooLargeError(limit, "decompressed request body")
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise DecodeError(f"body is not valid snappy (block format): {exc}") from None


def compress(raw: bytes) -> bytes:
    """``raw`` in snappy's block format (remote read's ``SAMPLES`` answer)."""
    return bytes(cramjam.snappy.compress_raw(raw))
