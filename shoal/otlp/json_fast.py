"""OTLP/JSON to protobuf wire bytes, fast: typed msgspec decoding, then a wire encoder.

The request is decoded by ``msgspec`` (C) into ``Struct`` types generated
from the OTLP message descriptors: one attribute per JSON key, with both the
lowerCamelCase and the original snake_case spelling accepted, 64-bit integers
as numbers or decimal strings (``strict=False``), doubles as numbers or
``"NaN"``/``"Infinity"``/``"-Infinity"``. Attribute lists are not decoded
into objects at all: they stay raw JSON slices, and each distinct slice is
converted once to its protobuf encoding and cached, since attribute sets
repeat from point to point and from request to request. The Structs are then
written out as protobuf wire bytes by encoders generated from the same
descriptors, one Python function per message type with the scalar fields
encoded inline (see :func:`_encoder`), and the bytes take the protobuf path.

Anything this path does not accept (a wrong type, a bad id, an integer out
of range, a value with two fields) raises :class:`NotFast`; the caller then
runs the slower, path-tracking walk of :mod:`shoal.otlp.json_walk`, which
either decodes the request or raises the user-facing error.
"""

from __future__ import annotations

import functools
import json
import linecache
import string
import struct
import textwrap
from collections.abc import Callable
from typing import Any

import msgspec
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from shoal.errors import DecodeError
from shoal.otlp import anyvalue
from shoal.rows.cache import DecodeCache

__all__ = ["NotFast", "to_protobuf"]

_KEYVALUE = "opentelemetry.proto.common.v1.KeyValue"
_ANYVALUE = "opentelemetry.proto.common.v1.AnyValue"
_HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_SKIPPED = frozenset({"entity_refs"})
_CACHE_LIMIT = 100_000
_HEADS = 0x400  # varints below this get a prebuilt "tag + varint" (see _heads)

Encoder = Callable[[Any], bytes]
_FD = FieldDescriptor


class NotFast(Exception):
    """The fast path does not take this request; use the path-tracking walk."""


# what the encoders raise on a value they cannot write; to_protobuf turns it into NotFast
_REFUSED = (ValueError, struct.error, OverflowError, DecodeError, RecursionError)

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


@functools.cache
def _heads(tag: bytes) -> tuple[bytes, ...]:
    """``tag + varint(n)`` for every ``n`` below ``_HEADS``, shared by the fields of a tag.

    The whole encoding of a small varint field, or what precedes a short
    length-delimited payload: one lookup instead of two concatenations.
    """
    return tuple(tag + _varint(n) for n in range(_HEADS))


# -- code generation ------------------------------------------------------------------------
#
# Each message type gets its own encoder, written as Python source and compiled
# once (see _encoder): it unpacks the Struct into local variables v0, v1, ...,
# skips absent fields with one test each, and encodes the scalar fields inline,
# calling out only for nested messages, attribute lists, AnyValues and packed
# lists. The pieces are appended to a list `out` and joined at the end. A
# generic loop calling one closure per field costs twice as much per record.
#
# The templates below are that source, one per kind of field; $v is the field's
# local variable and the other $names are constants bound for the field. A
# field is written when its value is set and, unless it is a oneof member or
# proto3 optional (keep_default), not zero or empty: proto3 leaves those out.

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


class _Source:
    """One generated function: its source lines and the objects its names refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {
            "NotFast": NotFast,
            "varint": _varint,
            "astuple": msgspec.structs.astuple,
        }

    def bind(self, hint: str, value: Any) -> str:
        """The name the generated code uses for ``value``."""
        name = f"{hint}_{len(self.names)}"
        self.names[name] = value
        return name

    def write(self, template: str, indent: int = 1, **names: str) -> None:
        code = string.Template(textwrap.dedent(template).strip("\n")).substitute(names)
        self.lines.extend("    " * indent + line for line in code.splitlines())

    def function(self, name: str, filename: str) -> Any:
        text = "\n".join(self.lines) + "\n"
        exec(compile(text, filename, "exec"), self.names)
        # tracebacks through the generated code show its lines
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        return self.names[name]


def _test(var: str, keep_default: bool) -> str:
    """The test for writing a field out: set, and for most fields not zero or empty either."""
    return f"{var} is not None" if keep_default else var


Emit = Callable[[_Source, str], None]  # writes the code that encodes one field's variable

# appends d, a length-delimited payload, after its tag and length
_APPEND_DELIMITED = """
    n = len(d)
    out.append($heads[n] if n < $limit else $tag + varint(n))
    out.append(d)
"""


def _append_delimited(src: _Source, tag: bytes, indent: int) -> None:
    heads = src.bind("heads", _heads(tag))
    src.write(_APPEND_DELIMITED, indent, heads=heads, limit=str(_HEADS), tag=src.bind("tag", tag))


def _int(raw: Any) -> int:
    """An integer given as a JSON number or a decimal string, as the walk reads it.

    ``int()`` strips the same whitespace as the walk's ``int(raw.strip(), 10)``
    and raises ValueError on anything else, which :func:`to_protobuf` turns
    into NotFast.
    """
    if type(raw) is int:
        return raw
    if type(raw) is str:
        return int(raw)
    raise NotFast


def _to_int(field: FieldDescriptor) -> Callable[[Any], int]:
    """Reads an integer or enum field's value when it is not an int."""
    if field.type != _FD.TYPE_ENUM:
        return _int
    assert field.enum_type is not None
    names = {v.name: v.number for v in field.enum_type.values}

    def enum(raw: Any) -> int:
        return names[raw] if raw in names else _int(raw)

    return enum


def _varint_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    lo, hi = _RANGES[field.type]
    tag = _tag(field.number, 0)
    if field.type in _ZIGZAG:
        encoded = "$tag + varint(($v << 1) ^ ($v >> 63))"
    else:  # a small value is a lookup; a negative one takes ten bytes, as in upb
        encoded = "$heads[$v] if 0 <= $v < $limit else $tag + varint($v & 0xFFFFFFFFFFFFFFFF)"

    def emit(src: _Source, v: str) -> None:
        template = f"""
            if $v is not None:
                if type($v) is not int:
                    $v = $to_int($v)
                if not {lo} <= $v <= {hi}:
                    raise NotFast
                if $test:
                    out.append({encoded})
            """
        src.write(
            template,
            v=v,
            test=_test(v, keep_default),
            to_int=src.bind("to_int", _to_int(field)),
            heads=src.bind("heads", _heads(tag)),
            limit=str(_HEADS),
            tag=src.bind("tag", tag),
        )

    # strings are read by _int rather than by msgspec, whose lenient mode takes "1e3"
    return int | str, emit


def _float_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    code, wire_type = _FIXED[field.type]
    tag = _tag(field.number, wire_type)
    pack = struct.Struct(f"<{len(tag)}s{code}").pack  # the tag and the value in one call

    def emit(src: _Source, v: str) -> None:
        template = """
            if $v is not None:
                p = $pack($tag, $v)
                if $test:
                    out.append(p)
            """
        # zero is left out by its bits: -0.0 is kept, as upb does
        test = "p is not None" if keep_default else f"p != {src.bind('zero', pack(tag, 0.0))}"
        src.write(template, v=v, test=test, pack=src.bind("pack", pack), tag=src.bind("tag", tag))

    return float, emit


def _fixed_int_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    code, wire_type = _FIXED[field.type]
    tag = _tag(field.number, wire_type)
    pack = struct.Struct(f"<{len(tag)}s{code}").pack  # struct.error when out of range

    def emit(src: _Source, v: str) -> None:
        template = """
            if $v is not None:
                if type($v) is str:
                    $v = int($v)  # as _int reads it
                if $test:
                    out.append($pack($tag, $v))
            """
        test = _test(v, keep_default)
        src.write(template, v=v, test=test, pack=src.bind("pack", pack), tag=src.bind("tag", tag))

    return int | str, emit


def _bool_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    tag = _tag(field.number, 0)

    def emit(src: _Source, v: str) -> None:
        template = """
            if $v is not None:
                if type($v) is not bool:
                    raise NotFast
                if $test:
                    out.append($true if $v else $false)
            """
        true, false = src.bind("true", tag + b"\x01"), src.bind("false", tag + b"\x00")
        src.write(template, v=v, test=_test(v, keep_default), true=true, false=false)

    # true and false only: ints and strings reach the encoder, which refuses them
    return bool | int | str, emit


def _string_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    tag = _tag(field.number, 2)

    def emit(src: _Source, v: str) -> None:
        src.write("if $test:\n    d = $v.encode()", v=v, test=_test(v, keep_default))
        _append_delimited(src, tag, 2)

    return str, emit


def _bytes_field(field: FieldDescriptor, keep_default: bool) -> tuple[Any, Emit]:
    tag = _tag(field.number, 2)
    convert: Callable[[str], bytes]
    if field.name in _HEX_FIELDS:
        convert = bytes.fromhex
    else:
        convert = functools.partial(anyvalue.parse_base64, where=field.name)

    def emit(src: _Source, v: str) -> None:
        template = """
            if $test:
                d = $convert($v)
                if $data_test:
            """
        src.write(
            template,
            v=v,
            test=_test(v, keep_default),
            convert=src.bind("convert", convert),
            data_test=_test("d", keep_default),
        )
        _append_delimited(src, tag, 3)

    return str, emit


def _scalar(field: FieldDescriptor) -> tuple[Any, Emit]:
    """The msgspec type and the code of one non-repeated scalar field."""
    keep_default = field.containing_oneof is not None  # oneof members and proto3 optional
    if field.type in _RANGES:
        return _varint_field(field, keep_default)
    if field.type in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
        return _float_field(field, keep_default)
    if field.type in _FIXED:
        return _fixed_int_field(field, keep_default)
    if field.type == _FD.TYPE_BOOL:
        return _bool_field(field, keep_default)
    if field.type == _FD.TYPE_STRING:
        return _string_field(field, keep_default)
    if field.type == _FD.TYPE_BYTES:
        return _bytes_field(field, keep_default)
    raise NotFast  # pragma: no cover - OTLP has no other scalar types


def _call(encoder: Encoder) -> Emit:
    """The code of a field that one call encodes, tag included (absent or empty: skipped)."""

    def emit(src: _Source, v: str) -> None:
        src.write("if $v:\n    out.append($encode($v))", v=v, encode=src.bind("encode", encoder))

    return emit


def _packed(field: FieldDescriptor) -> tuple[Any, Emit]:
    """A repeated numeric field (proto3 packs them)."""
    tag = _tag(field.number, 2)
    if field.type in _FIXED:
        code = _FIXED[field.type][0]

        def fixed(values: list[Any]) -> bytes:
            if code not in "df":
                values = [v if type(v) is int else _int(v) for v in values]
            return _delimited(tag, struct.pack(f"<{len(values)}{code}", *values))

        return list[float] if code in "df" else list[int | str], _call(fixed)
    to_int = _to_int(field)
    lo, hi = _RANGES[field.type]
    zigzag = field.type in _ZIGZAG

    def varints(values: list[Any]) -> bytes:
        out = []
        for raw in values:
            value = raw if type(raw) is int else to_int(raw)
            if not lo <= value <= hi:
                raise NotFast
            if zigzag:
                value = (value << 1) ^ (value >> 63)
            out.append(_varint(value & 0xFFFFFFFFFFFFFFFF))
        return _delimited(tag, b"".join(out))

    return list[int | str], _call(varints)


# -- attribute lists and values ----------------------------------------------------------


def _keyvalue_list(number: int) -> tuple[type, Emit]:
    """A repeated ``KeyValue`` field, kept as a raw JSON slice and cached by it."""
    tag = _tag(number, 2)
    # per field: raw JSON slice -> its tagged protobuf
    cache: DecodeCache[bytes, bytes] = DecodeCache(max_bytes=16 << 20, max_entries=_CACHE_LIMIT)

    def miss(key: bytes) -> bytes:
        try:
            kvs = anyvalue.keyvalues_from_json(json.loads(key))
            hit = b"".join(_delimited(tag, kv.SerializeToString()) for kv in kvs)
        except (DecodeError, ValueError, TypeError, RecursionError):
            raise NotFast from None
        cache.put(key, hit, 100 + len(key) + len(hit))
        return hit

    def emit(src: _Source, v: str) -> None:
        template = """
            if $v:
                key = b"" + $v  # a copy of the slice, twice as fast as bytes()
                hit = $cache.get(key)
                out.append($miss(key) if hit is None else hit)
            """
        src.write(template, v=v, cache=src.bind("cache", cache), miss=src.bind("miss", miss))

    return msgspec.Raw, emit


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
# msgspec fills in these very objects for absent keys, so comparing with them is cheap
_VALUE_ABSENT = _Value.__struct_defaults__
_ONLY_CAMEL_STRING = _VALUE_ABSENT[1:]  # nothing but stringValue, or nothing at all
_NO_OTHER = _VALUE_ABSENT[2:]  # nothing but a string, in either spelling


@functools.cache
def _string_value_heads(tag: bytes) -> tuple[bytes, ...]:
    """What precedes the UTF-8 of a string ``AnyValue`` of each length below ``_HEADS``."""
    heads = []
    for size in range(_HEADS):
        inner = b"\x0a" + _varint(size)  # string_value = 1
        heads.append(tag + _varint(len(inner) + size) + inner)
    return tuple(heads)


def _any_value(number: int) -> tuple[Any, Emit]:
    tag = _tag(number, 2)
    heads = _string_value_heads(tag)
    empty = tag + b"\x00"  # {}: a value that is present but empty
    astuple = msgspec.structs.astuple

    def encode(value: Any) -> bytes:
        values = astuple(value)
        if values[1:] == _ONLY_CAMEL_STRING:  # a string, the common case
            text = values[0]
            if text is msgspec.UNSET:
                return empty
        elif values[0] is msgspec.UNSET and values[2:] == _NO_OTHER:
            text = values[1]
        else:
            return _other_value(tag, values)
        data: bytes = text.encode()
        size = len(data)
        if size < _HEADS:
            return heads[size] + data
        return _delimited(tag, _delimited(b"\x0a", data))

    def emit(src: _Source, v: str) -> None:
        # encode's common case inline: a short string, in camelCase (UNSET is false)
        template = """
            if $v is not None:
                w = astuple($v)
                if w[1:] == $only_camel_string and w[0]:
                    d = w[0].encode()
                    n = len(d)
                    if n < $limit:
                        out.append($heads[n])
                        out.append(d)
                    else:
                        out.append($encode($v))
                else:
                    out.append($encode($v))
            """
        src.write(
            template,
            v=v,
            only_camel_string=src.bind("only_camel_string", _ONLY_CAMEL_STRING),
            limit=str(_HEADS),
            heads=src.bind("heads", heads),
            encode=src.bind("encode", encode),
        )

    return _Value, emit


def _other_value(tag: bytes, values: tuple[Any, ...]) -> bytes:
    """A value that is not (only) a string, or a string in both spellings, the slow way."""
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


# -- messages -----------------------------------------------------------------------------


@functools.cache
def _message(descriptor: Descriptor) -> tuple[type[msgspec.Struct], Encoder]:
    """The Struct type of a message and the encoder of its body (no tag, no length)."""
    # the Struct holds the camelCase fields first, then the snake_case spellings
    primary: list[tuple[str, Any, Any]] = []
    alternates: list[tuple[str, Any, Any]] = []
    fields: list[tuple[FieldDescriptor, Emit]] = []
    spelled: list[tuple[int, Any, bool]] = []  # per alternate: see _encoder
    for field in descriptor.fields:
        if field.name.endswith("_strindex") or field.name in _SKIPPED:
            continue
        typ, emit = _field(field)
        # msgspec takes Raw only on its own (not in a union): absent is an empty Raw
        spec = (typ, msgspec.Raw()) if typ is msgspec.Raw else (typ | None, None)
        if field.name != field.json_name:
            alternates.append((field.name, *spec))
            spelled.append((len(primary), spec[1], typ is msgspec.Raw))
        primary.append((field.json_name, *spec))
        fields.append((field, emit))
    cls = msgspec.defstruct(
        descriptor.name + "Json", primary + alternates, kw_only=True, gc=False, module=__name__
    )
    return cls, _encoder(descriptor, fields, spelled)


def _encoder(
    descriptor: Descriptor,
    fields: list[tuple[FieldDescriptor, Emit]],
    alternates: list[tuple[int, Any, bool]],
) -> Encoder:
    """Generates the encoder of a message body, for example (``Status``)::

        def encode_Status(obj):
            v0, v1, = astuple(obj)
            out = []
            # message = 2
            if v0:
                d = v0.encode()
                n = len(d)
                out.append(heads_3[n] if n < 1024 else tag_4 + varint(n))
                out.append(d)
            # code = 3
            if v1 is not None:
                if type(v1) is not int:
                    v1 = to_int_5(v1)
                if not -2147483648 <= v1 <= 2147483647:
                    raise NotFast
                if v1:
                    out.append(heads_6[v1] if 0 <= v1 < 1024 else tag_7 + varint(...))
            return b"".join(out)

    ``fields`` are the camelCase fields of the Struct with the code of each,
    ``alternates`` the snake_case spellings that follow them in the Struct:
    the index of the field each spells, its default and whether it is a Raw.
    """
    name = "encode_" + descriptor.name
    src = _Source()
    variables = [f"v{i}" for i in range(len(fields))]
    spellings = [f"a{j}" for j in range(len(alternates))]
    src.write(f"def {name}(obj):", indent=0)
    src.write(f"{', '.join(variables + spellings)}, = astuple(obj)")
    if alternates:
        # some snake_case key (not its default: None, or that very empty Raw) fills the
        # field camelCase left out
        given = []
        for var, (_, default, _) in zip(spellings, alternates, strict=True):
            absent = "None" if default is None else src.bind("absent", default)
            given.append(f"{var} is not {absent}")
        src.write("if (\n    " + "\n    or ".join(given) + "\n):")
        for j, (i, _, raw) in enumerate(alternates):
            unset = f"not v{i}" if raw else f"v{i} is None"  # an absent Raw is empty
            src.write(f"if {unset}:\n    v{i} = a{j}", indent=2)
    src.write("out = []")
    for var, (field, emit) in zip(variables, fields, strict=True):
        src.write(f"# {field.name} = {field.number}")
        emit(src, var)
    src.write('return b"".join(out)')
    encode: Encoder = src.function(name, f"<json_fast {descriptor.full_name}>")
    return encode


def _field(field: FieldDescriptor) -> tuple[Any, Emit]:
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

    def emit(src: _Source, v: str) -> None:
        encode = src.bind("encode", body)
        if repeated:
            src.write(f"if {v}:\n    for item in {v}:\n        d = {encode}(item)")
            _append_delimited(src, tag, 3)
        else:
            src.write(f"if {v} is not None:\n    d = {encode}({v})")
            _append_delimited(src, tag, 2)

    return (list[cls] if repeated else cls), emit  # type: ignore[valid-type]


@functools.cache
def _decoder(descriptor: Descriptor) -> tuple[msgspec.json.Decoder[Any], Encoder]:
    cls, encode = _message(descriptor)
    return msgspec.json.Decoder(cls, strict=False), encode


def to_protobuf(descriptor: Descriptor | Any, body: bytes) -> bytes:
    """The protobuf encoding of the OTLP/JSON request ``body``; raises :class:`NotFast`."""
    decoder, encode = _decoder(descriptor)
    try:  # msgspec's errors are ValueErrors too
        return encode(decoder.decode(body))
    except _REFUSED:
        raise NotFast from None
