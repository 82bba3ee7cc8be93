"""Request bodies read whole, under a size limit, before anything is done with them."""

from __future__ import annotations

from starlette.requests import Request

from shoal.errors import PayloadTooLargeError


async def read_body(request: Request, limit: int) -> bytes:
    """The body of ``request``; PayloadTooLargeError as soon as it (or its declared
    length) is over ``limit`` bytes, without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(limit)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise PayloadTooLargeError(limit)
        chunks.append(chunk)
    return b"".join(chunks)
