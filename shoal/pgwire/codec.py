"""The PostgreSQL v3 wire protocol as pure functions over bytes: no sockets, no asyncio.

:class:`FrontendDecoder` turns the bytes a client sends into message objects
(the first message of a connection has no type byte: a startup packet, an
``SSLRequest``, a ``GSSENCRequest`` or a ``CancelRequest``; every later one is
a type byte and a length). Anything malformed raises :class:`ProtocolError`,
whose message says what was wrong; a message longer than the decoder's limit is
refused from its header alone, before its body is buffered.

The ``encode_*`` functions build the backend messages shoal sends.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Callable, Sequence

from shoal.errors import ShoalError

PROTOCOL_3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP_BYTES = 10_000
"""A startup packet longer than this is refused (the server refuses much less than that)."""


class ProtocolError(ShoalError):
    """A message that breaks the protocol; the connection cannot go on. SQLSTATE 08P01."""

    code = "08P01"


# -- frontend messages ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Startup:
    version: int
    params: dict[str, str]


@dataclasses.dataclass(frozen=True)
class SSLRequest:
    pass


@dataclasses.dataclass(frozen=True)
class GSSEncRequest:
    pass


@dataclasses.dataclass(frozen=True)
class CancelRequest:
    pid: int
    secret: int


@dataclasses.dataclass(frozen=True)
class Password:
    password: str


@dataclasses.dataclass(frozen=True)
class Query:
    sql: str


@dataclasses.dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_types: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Describe:
    kind: str  # "S" statement or "P" portal
    name: str


@dataclasses.dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


@dataclasses.dataclass(frozen=True)
class Close:
    kind: str
    name: str


@dataclasses.dataclass(frozen=True)
class CopyData:
    data: bytes


@dataclasses.dataclass(frozen=True)
class CopyFail:
    message: str


class Signal(enum.Enum):
    """The frontend messages that are their type byte alone (the value)."""

    SYNC = "S"
    FLUSH = "H"
    TERMINATE = "X"
    COPY_DONE = "c"


FrontendMessage = (
    Startup
    | SSLRequest
    | GSSEncRequest
    | CancelRequest
    | Password
    | Query
    | Parse
    | Bind
    | Describe
    | Execute
    | Close
    | CopyData
    | CopyFail
    | Signal
)


class _Reader:
    """Reads fields from one message body; every read checks what is left."""

    def __init__(self, body: bytes, what: str) -> None:
        self._body = body
        self._pos = 0
        self._what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._body):
            raise ProtocolError(f"{self._what} message is truncated")
        chunk = self._body[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack("!h", self._take(2))[0])

    def uint16(self) -> int:
        return int(struct.unpack("!H", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack("!i", self._take(4))[0])

    def uint32(self) -> int:
        return int(struct.unpack("!I", self._take(4))[0])

    def byte(self) -> str:
        return self._take(1).decode("latin-1")

    def cstring(self) -> str:
        end = self._body.find(b"\x00", self._pos)
        if end < 0:
            raise ProtocolError(f"{self._what} message has an unterminated string")
        raw = self._body[self._pos : end]
        self._pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{self._what} message has a string that is not UTF-8") from None

    def rest(self) -> bytes:
        chunk = self._body[self._pos :]
        self._pos = len(self._body)
        return chunk

    def done(self) -> None:
        if self._pos != len(self._body):
            raise ProtocolError(
                f"{self._what} message has {len(self._body) - self._pos} extra bytes"
            )


def _formats(reader: _Reader, what: str) -> tuple[int, ...]:
    count = reader.int16()
    if count < 0:
        raise ProtocolError(f"{what}: negative format count")
    formats = tuple(reader.int16() for _ in range(count))
    if any(f not in (0, 1) for f in formats):
        raise ProtocolError(f"{what}: format codes must be 0 (text) or 1 (binary)")
    return formats


def _decode_startup(body: bytes) -> FrontendMessage:
    reader = _Reader(body, "startup")
    code = reader.uint32()
    if code == SSL_REQUEST:
        reader.done()
        return SSLRequest()
    if code == GSSENC_REQUEST:
        reader.done()
        return GSSEncRequest()
    if code == CANCEL_REQUEST:
        pid = reader.int32()
        secret = reader.int32()
        reader.done()
        return CancelRequest(pid, secret)
    if code >> 16 != 3:
        raise ProtocolError(
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: shoal speaks 3.0"
        )
    params: dict[str, str] = {}
    while True:
        key = reader.cstring()
        if not key:
            break
        params[key] = reader.cstring()
    reader.done()
    return Startup(code, params)


def _parse(reader: _Reader) -> Parse:
    name = reader.cstring()
    sql = reader.cstring()
    count = reader.int16()
    if count < 0:
        raise ProtocolError("Parse: negative parameter count")
    return Parse(name, sql, tuple(reader.uint32() for _ in range(count)))


def _bind(reader: _Reader) -> Bind:
    portal = reader.cstring()
    statement = reader.cstring()
    param_formats = _formats(reader, "Bind")
    count = reader.int16()
    if count < 0:
        raise ProtocolError("Bind: negative parameter count")
    params: list[bytes | None] = []
    for _ in range(count):
        size = reader.int32()
        if size < -1:
            raise ProtocolError("Bind: invalid parameter length")
        params.append(None if size == -1 else reader._take(size))
    if len(param_formats) not in (0, 1, count):
        raise ProtocolError("Bind: parameter format count matches neither 0, 1 nor the values")
    return Bind(portal, statement, param_formats, tuple(params), _formats(reader, "Bind"))


def _target(reader: _Reader, what: str) -> tuple[str, str]:
    """Describe's and Close's body: 'S' (a statement) or 'P' (a portal), and its name."""
    target = reader.byte()
    if target not in ("S", "P"):
        raise ProtocolError(f"{what}: expected 'S' or 'P'")
    return target, reader.cstring()


_TYPED: dict[str, Callable[[_Reader], FrontendMessage]] = {
    "Q": lambda reader: Query(reader.cstring()),
    "p": lambda reader: Password(reader.cstring()),
    "P": _parse,
    "B": _bind,
    "D": lambda reader: Describe(*_target(reader, "Describe")),
    "E": lambda reader: Execute(reader.cstring(), reader.int32()),
    "C": lambda reader: Close(*_target(reader, "Close")),
    "d": lambda reader: CopyData(reader.rest()),
    "f": lambda reader: CopyFail(reader.cstring()),
}
"""The decoder of each frontend message with a body, by its type byte."""


def _decode_typed(kind: str, body: bytes) -> FrontendMessage:
    reader = _Reader(body, repr(kind))
    decode = _TYPED.get(kind)
    if decode is not None:
        message = decode(reader)
    else:
        try:
            message = Signal(kind)
        except ValueError:
            raise ProtocolError(f"unknown frontend message type {kind!r}") from None
    reader.done()
    return message


class FrontendDecoder:
    """Splits a client's byte stream into messages. Feed bytes, then call :meth:`next`."""

    def __init__(self, max_message_bytes: int = 1 << 20) -> None:
        self.max_message_bytes = max_message_bytes
        self.started = False
        """False until the untyped first message (startup, SSL or cancel request) is read;
        the caller sets it back to False after answering an SSLRequest."""
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer.extend(data)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next(self) -> FrontendMessage | None:
        """The next complete message, or None when more bytes are needed."""
        buf = self._buffer
        if not self.started:
            if len(buf) < 4:
                return None
            size = int(struct.unpack_from("!I", buf, 0)[0])
            if size < 8 or size > MAX_STARTUP_BYTES:
                raise ProtocolError(f"invalid startup packet length {size}")
            if len(buf) < size:
                return None
            body = bytes(buf[4:size])
            del buf[:size]
            message = _decode_startup(body)
            if isinstance(message, Startup):
                self.started = True
            return message
        if len(buf) < 5:
            return None
        kind = chr(buf[0])
        size = int(struct.unpack_from("!I", buf, 1)[0])
        if size < 4:
            raise ProtocolError(f"invalid length {size} in a {kind!r} message")
        if size - 4 > self.max_message_bytes:
            raise ProtocolError(
                f"{kind!r} message of {size - 4} bytes exceeds the limit of "
                f"{self.max_message_bytes} bytes"
            )
        if len(buf) < 1 + size:
            return None
        body = bytes(buf[5 : 1 + size])
        del buf[: 1 + size]
        return _decode_typed(kind, body)


# -- backend messages -------------------------------------------------------------------


def _message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _cstr(text: str) -> bytes:
    return text.replace("\x00", "").encode("utf-8") + b"\x00"


def authentication_ok() -> bytes:
    return _message(b"R", struct.pack("!I", 0))


def authentication_cleartext() -> bytes:
    return _message(b"R", struct.pack("!I", 3))


def parameter_status(name: str, value: str) -> bytes:
    return _message(b"S", _cstr(name) + _cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return _message(b"K", struct.pack("!ii", pid, secret))


def ready_for_query(status: str = "I") -> bytes:
    return _message(b"Z", status.encode("ascii"))


@dataclasses.dataclass(frozen=True)
class Field:
    """One column of a RowDescription."""

    name: str
    type_oid: int
    type_size: int
    type_modifier: int = -1
    format: int = 0
    table_oid: int = 0
    column: int = 0


def row_description(fields: Sequence[Field]) -> bytes:
    parts = [struct.pack("!h", len(fields))]
    for f in fields:
        parts.append(_cstr(f.name))
        parts.append(
            struct.pack(
                "!ihihih", f.table_oid, f.column, f.type_oid, f.type_size, f.type_modifier, f.format
            )
        )
    return _message(b"T", b"".join(parts))


def data_row(values: Sequence[bytes | None]) -> bytes:
    parts = [struct.pack("!h", len(values))]
    for value in values:
        if value is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(struct.pack("!i", len(value)))
            parts.append(value)
    return _message(b"D", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return _message(b"C", _cstr(tag))


def empty_query_response() -> bytes:
    return _message(b"I")


def parse_complete() -> bytes:
    return _message(b"1")


def bind_complete() -> bytes:
    return _message(b"2")


def close_complete() -> bytes:
    return _message(b"3")


def no_data() -> bytes:
    return _message(b"n")


def portal_suspended() -> bytes:
    return _message(b"s")


def parameter_description(oids: Sequence[int]) -> bytes:
    return _message(b"t", struct.pack(f"!h{len(oids)}I", len(oids), *oids))


def _fields(severity: str, code: str, message: str, detail: str | None, hint: str | None) -> bytes:
    parts = [b"S" + _cstr(severity), b"V" + _cstr(severity), b"C" + _cstr(code)]
    parts.append(b"M" + _cstr(message))
    if detail:
        parts.append(b"D" + _cstr(detail))
    if hint:
        parts.append(b"H" + _cstr(hint))
    return b"".join(parts) + b"\x00"


def error_response(
    code: str, message: str, detail: str | None = None, hint: str | None = None, fatal: bool = False
) -> bytes:
    return _message(b"E", _fields("FATAL" if fatal else "ERROR", code, message, detail, hint))


def notice_response(message: str, code: str = "01000", severity: str = "WARNING") -> bytes:
    return _message(b"N", _fields(severity, code, message, None, None))


def copy_out_response(columns: int) -> bytes:
    """Text-format COPY TO STDOUT of ``columns`` columns."""
    return _message(b"H", struct.pack("!bh", 0, columns) + struct.pack("!h", 0) * columns)


def copy_data(data: bytes) -> bytes:
    return _message(b"d", data)


def copy_done() -> bytes:
    return _message(b"c")
