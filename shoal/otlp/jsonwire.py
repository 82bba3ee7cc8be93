"""OTLP/JSON to protobuf wire bytes, fast: typed msgspec decoding, then a wire encoder.

The request is decoded by ``msgspec`` (C) into ``Struct`` types generated
from the OTLP message descriptors: one attribute per JSON key, with both the
lowerCamelCase and the original snake_case spelling accepted, 64-bit integers
as numbers or decimal strings (``strict=False``), doubles as numbers or
``"NaN"``/``"Infinity"``/``"-Infinity"``. Attribute lists are not decoded
into objects at all: they stay raw JSON slices, and each distinct slice is
converted once to its protobuf encoding and cached, since attribute sets
repeat from point to point and from request to request. The Structs are then
written out as protobuf wire bytes by a small encoder driven by the same
descriptors, and the bytes take the protobuf path.

Anything this path does not accept (a wrong type, a bad id, an integer out
of range, a value with two fields) raises :class:`NotFast`; the caller then
runs the slower, path-tracking walk of :mod:`shoal.otlp.otlpjson`, which
either decodes the request or raises the user-facing error.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Callable
from typing import Any

import msgspec
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from shoal.errors import DecodeError
from shoal.otlp import anyvalue

__all__ = ["NotFast", "to_protobuf"]

_KEYVALUE = "opentelemetry.proto.common.v1.KeyValue"
_ANYVALUE = "opentelemetry.proto.common.v1.AnyValue"
_HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_SKIPPED = frozenset({"entity_refs"})
_CACHE_LIMIT = 100_000

Encoder = Callable[[Any], bytes]
_FD = FieldDescriptor


class NotFast(Exception):
    """The fast path does not take this request; use the path-tracking walk."""


# varints below 2**14 (lengths, small ints, tags): one or two bytes, looked up
_SMALL = [bytes((i,)) for i in range(0x80)]
_SMALL += [bytes((i & 0x7F | 0x80, i >> 7)) for i in range(0x80, 0x4000)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x4000:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


# -- scalar encoders: value (already not None) -> tag + payload ----------------------

_RANGES = {
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_ENUM: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
}
_ZIGZAG = frozenset({_FD.TYPE_SINT32, _FD.TYPE_SINT64})
_FIXED = {
    _FD.TYPE_FIXED64: ("Q", 1),
    _FD.TYPE_SFIXED64: ("q", 1),
    _FD.TYPE_DOUBLE: ("d", 1),
    _FD.TYPE_FIXED32: ("I", 5),
    _FD.TYPE_SFIXED32: ("i", 5),
    _FD.TYPE_FLOAT: ("f", 5),
}


def _int(raw: Any) -> int:
    """An integer given as a JSON number or a decimal string, as the walk reads it."""
    if type(raw) is int:
        return raw
    if type(raw) is str:
        if raw.isascii() and raw.isdigit():
            return int(raw)
        try:
            return anyvalue.parse_int(raw, "", -(2**64), 2**64)
        except DecodeError:
            raise NotFast from None
    raise NotFast


def _scalar(field: FieldDescriptor) -> tuple[Any, Encoder]:
    """The msgspec type and the encoder of one non-repeated scalar field."""
    ftype = field.type
    keep_default = field.containing_oneof is not None  # oneof members and proto3 optional
    if ftype in _RANGES:
        lo, hi = _RANGES[ftype]
        tag = _tag(field.number, 0)
        names: dict[str, int] = {}
        zigzag = ftype in _ZIGZAG
        if ftype == _FD.TYPE_ENUM:
            assert field.enum_type is not None
            names = {v.name: v.number for v in field.enum_type.values}

        def varint(raw: Any) -> bytes:
            value = names[raw] if type(raw) is str and raw in names else _int(raw)
            if not lo <= value <= hi:
                raise NotFast
            if not value and not keep_default:
                return b""
            if zigzag:
                return tag + _varint((value << 1) ^ (value >> 63))
            return tag + _varint(value & 0xFFFFFFFFFFFFFFFF)

        # strings are read here rather than by msgspec, whose lenient mode takes "1e3"
        return int | str, varint
    if ftype in _FIXED:
        code, wire_type = _FIXED[ftype]
        packer = struct.Struct("<" + code).pack
        tag = _tag(field.number, wire_type)
        is_float = code in "df"

        zero = packer(0)

        def fixed(value: Any) -> bytes:
            if type(value) is str:
                value = int(value) if value.isascii() and value.isdigit() else _int(value)
            try:
                packed = packer(value)
            except struct.error:
                raise NotFast from None
            if packed == zero and not keep_default:  # by bits: -0.0 is kept, as upb does
                return b""
            return tag + packed

        return (float if is_float else int | str), fixed
    if ftype == _FD.TYPE_BOOL:
        tag = _tag(field.number, 0)

        def boolean(value: Any) -> bytes:
            if type(value) is not bool:
                raise NotFast
            return tag + b"\x01" if value else (tag + b"\x00" if keep_default else b"")

        # true and false only: ints and strings reach the encoder, which refuses them
        return bool | int | str, boolean
    tag = _tag(field.number, 2)
    if ftype == _FD.TYPE_STRING:

        def string(value: str) -> bytes:
            if not value and not keep_default:
                return b""
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError:
                raise NotFast from None
            size = len(data)  # _delimited, inlined: this runs for every string field
            return tag + (_SMALL[size] if size < 0x4000 else _varint(size)) + data

        return str, string
    if ftype == _FD.TYPE_BYTES:
        convert: Callable[[str], bytes]
        if field.name in _HEX_FIELDS:
            convert = bytes.fromhex
        else:
            convert = functools.partial(anyvalue.parse_base64, where=field.name)

        def binary(value: str) -> bytes:
            try:
                data = convert(value)
            except (ValueError, DecodeError):
                raise NotFast from None
            if not data and not keep_default:
                return b""
            return _delimited(tag, data)

        return str, binary
    raise NotFast  # pragma: no cover - OTLP has no other scalar types


def _packed(field: FieldDescriptor) -> tuple[type, Encoder]:
    """A repeated numeric field (proto3 packs them)."""
    tag = _tag(field.number, 2)
    if field.type in _FIXED:
        code = _FIXED[field.type][0]

        def fixed(values: list[Any]) -> bytes:
            if not values:
                return b""
            if code not in "df":
                values = [v if type(v) is int else _int(v) for v in values]
            try:
                return _delimited(tag, struct.pack(f"<{len(values)}{code}", *values))
            except struct.error:
                raise NotFast from None

        return list[float] if code in "df" else list[int | str], fixed
    _, one = _scalar(field)  # varints: encode each without its tag
    tag_len = len(_tag(field.number, 0))

    def varints(values: list[Any]) -> bytes:
        if not values:
            return b""
        return _delimited(tag, b"".join(one(v)[tag_len:] or b"\x00" for v in values))

    return list[int | str], varints


# -- attribute lists and values ----------------------------------------------------------


def _keyvalue_list(number: int) -> tuple[type, Encoder]:
    """A repeated ``KeyValue`` field, kept as a raw JSON slice and cached by it."""
    tag = _tag(number, 2)
    cache: dict[bytes, bytes] = {}  # per field: raw JSON slice -> its tagged protobuf

    def encode(raw: msgspec.Raw) -> bytes:
        if not raw:
            return b""
        key = bytes(raw)
        hit = cache.get(key)
        if hit is None:
            try:
                kvs = anyvalue.keyvalues_from_json(json.loads(key))
                hit = b"".join(_delimited(tag, kv.SerializeToString()) for kv in kvs)
            except (DecodeError, ValueError, TypeError, RecursionError):
                raise NotFast from None
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            cache[key] = hit
        return hit

    return msgspec.Raw, encode


_VALUE_KEYS = ("bool", "int", "double", "bytes", "array", "kvlist")
# an AnyValue object as msgspec decodes it: the string fields typed, the others kept raw;
# any other key makes the whole request take the walk, which names it
_Value = msgspec.defstruct(
    "AnyValueJson",
    # UNSET, not None, when absent: a JSON null there is an error the walk reports
    [
        ("stringValue", str | msgspec.UnsetType, msgspec.UNSET),
        ("string_value", str | msgspec.UnsetType, msgspec.UNSET),
    ]
    + [(f"{k}Value", msgspec.Raw, msgspec.Raw()) for k in _VALUE_KEYS]
    + [(f"{k}_value", msgspec.Raw, msgspec.Raw()) for k in _VALUE_KEYS],
    kw_only=True,
    gc=False,
    forbid_unknown_fields=True,
    module=__name__,
)
_VALUE_NAMES = tuple(_Value.__struct_fields__)
_NO_OTHER = (msgspec.Raw(),) * (len(_VALUE_NAMES) - 2)


def _any_value(number: int) -> tuple[Any, Encoder]:
    tag = _tag(number, 2)

    def encode(value: Any) -> bytes:
        values = msgspec.structs.astuple(value)
        text, other = values[0], values[1]
        if values[2:] == _NO_OTHER:
            if text is msgspec.UNSET:
                if other is msgspec.UNSET:
                    return tag + b"\x00"  # {}: a value that is present but empty
                text = other
            elif other is not msgspec.UNSET:
                raise NotFast  # both spellings: the walk reports it
            # a string, the common case
            try:
                data: bytes = text.encode("utf-8")
            except UnicodeEncodeError:
                raise NotFast from None
            size = len(data)
            if size < 0x3F00:  # both lengths fit the table: the common short string
                inner = b"\x0a" + _SMALL[size] + data
                return tag + _SMALL[len(inner)] + inner
            return _delimited(tag, _delimited(b"\x0a", data))
        obj: dict[str, Any] = {}
        for name, item in zip(_VALUE_NAMES, values, strict=True):
            if isinstance(item, msgspec.Raw):
                if item:
                    obj[name] = json.loads(bytes(item))
            elif item is not msgspec.UNSET:
                obj[name] = item
        try:
            message = AnyValue(**anyvalue.value_kwargs(obj, "value"))
            return _delimited(tag, message.SerializeToString())
        except (DecodeError, ValueError, TypeError, RecursionError):
            raise NotFast from None

    return _Value, encode


# -- messages -----------------------------------------------------------------------------


@functools.cache
def _message(descriptor: Descriptor) -> tuple[type[msgspec.Struct], Encoder]:
    """The Struct type of a message and the encoder of its body (no tag, no length)."""
    # the Struct holds the camelCase fields first, then the snake_case spellings
    primary: list[tuple[str, Any, Any]] = []
    alternates: list[tuple[str, Any, Any]] = []
    encoders: list[Encoder] = []
    alt_of: list[int] = []  # per alternate, the index of its camelCase field
    for field in descriptor.fields:
        if field.name.endswith("_strindex") or field.name in _SKIPPED:
            continue
        typ, enc = _field(field)
        # msgspec takes Raw only on its own (not in a union): absent is an empty Raw
        spec = (typ, msgspec.Raw()) if typ is msgspec.Raw else (typ | None, None)
        if field.name != field.json_name:
            alternates.append((field.name, *spec))
            alt_of.append(len(primary))
        primary.append((field.json_name, *spec))
        encoders.append(enc)
    cls = msgspec.defstruct(
        descriptor.name + "Json", primary + alternates, kw_only=True, gc=False, module=__name__
    )
    n = len(primary)
    absent = tuple(default for _, _, default in alternates)
    encs = tuple(encoders)
    astuple = msgspec.structs.astuple

    def encode(obj: Any) -> bytes:
        values = astuple(obj)
        if values[n:] != absent:  # some snake_case key: it fills the field camelCase left out
            merged = list(values[:n])
            for i, value in zip(alt_of, values[n:], strict=True):
                if merged[i] is None or (type(merged[i]) is msgspec.Raw and not merged[i]):
                    merged[i] = value
            values = tuple(merged)
        # zip stops at the camelCase fields; an empty Raw (absent list or value) encodes as b""
        pairs = zip(values, encs, strict=False)
        return b"".join([enc(v) for v, enc in pairs if v is not None])

    return cls, encode


def _field(field: FieldDescriptor) -> tuple[Any, Encoder]:
    repeated = bool(field.is_repeated)
    if field.type != _FD.TYPE_MESSAGE:
        return _packed(field) if repeated else _scalar(field)
    assert field.message_type is not None
    name = field.message_type.full_name
    if name == _KEYVALUE and repeated:
        return _keyvalue_list(field.number)
    if name == _ANYVALUE and not repeated:
        return _any_value(field.number)
    if name in (_KEYVALUE, _ANYVALUE):  # pragma: no cover - not in the OTLP request messages
        raise TypeError(f"unsupported field {field.full_name}")
    cls, body = _message(field.message_type)
    tag = _tag(field.number, 2)
    if not repeated:
        return cls, lambda obj: _delimited(tag, body(obj))

    def many(items: list[Any]) -> bytes:
        out = []
        for obj in items:
            data = body(obj)
            size = len(data)  # _delimited, inlined: this runs for every point, record, span
            out.append(tag + (_SMALL[size] if size < 0x4000 else _varint(size)) + data)
        return b"".join(out)

    return list[cls], many  # type: ignore[valid-type]


@functools.cache
def _decoder(descriptor: Descriptor) -> tuple[msgspec.json.Decoder[Any], Encoder]:
    cls, encode = _message(descriptor)
    return msgspec.json.Decoder(cls, strict=False), encode


def to_protobuf(descriptor: Descriptor | Any, body: bytes) -> bytes:
    """The protobuf encoding of the OTLP/JSON request ``body``; raises :class:`NotFast`."""
    decoder, encode = _decoder(descriptor)
    try:
        return encode(decoder.decode(body))
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        raise NotFast from None
