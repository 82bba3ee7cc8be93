"""The protocol codec, the SQL lexer and the value encoders, fuzzed with Hypothesis."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.pgwire import codec, params, sqltext, types
from shoal.pgwire import rows as rows_mod


def _typed(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _cstr(text: str) -> bytes:
    return text.encode() + b"\x00"


def _startup(params_: dict[str, str]) -> bytes:
    body = struct.pack("!I", codec.PROTOCOL_3)
    body += b"".join(_cstr(k) + _cstr(v) for k, v in params_.items()) + b"\x00"
    return struct.pack("!I", len(body) + 4) + body


def _bind(portal: str, stmt: str, values: list[bytes | None], formats: list[int]) -> bytes:
    body = _cstr(portal) + _cstr(stmt) + struct.pack("!h", len(formats))
    body += b"".join(struct.pack("!h", f) for f in formats)
    body += struct.pack("!h", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return _typed(b"B", body + struct.pack("!hh", 1, 1))


names = st.text(st.characters(min_codepoint=1, max_codepoint=0x24F), max_size=20)


@st.composite
def frontend_messages(draw: st.DrawFn) -> tuple[bytes, codec.FrontendMessage]:
    which = draw(st.integers(0, 7))
    name, sql = draw(names), draw(names)
    if which == 0:
        return _typed(b"Q", _cstr(sql)), codec.Query(sql)
    if which == 1:
        oids = draw(st.lists(st.integers(0, 2**32 - 1), max_size=5))
        body = _cstr(name) + _cstr(sql) + struct.pack(f"!h{len(oids)}I", len(oids), *oids)
        return _typed(b"P", body), codec.Parse(name, sql, tuple(oids))
    if which == 2:
        values = draw(st.lists(st.none() | st.binary(max_size=20), max_size=5))
        formats = draw(st.lists(st.integers(0, 1), min_size=len(values), max_size=len(values)))
        message = codec.Bind(name, sql, tuple(formats), tuple(values), (1,))
        return _bind(name, sql, values, formats), message
    if which == 3:
        return _typed(b"D", b"S" + _cstr(name)), codec.Describe("S", name)
    if which == 4:
        rows = draw(st.integers(0, 2**31 - 1))
        return _typed(b"E", _cstr(name) + struct.pack("!i", rows)), codec.Execute(name, rows)
    if which == 5:
        return _typed(b"C", b"P" + _cstr(name)), codec.Close("P", name)
    if which == 6:
        return _typed(b"S", b""), codec.Signal.SYNC
    return _typed(b"p", _cstr(sql)), codec.Password(sql)


@given(st.lists(frontend_messages(), max_size=8), st.integers(1, 50))
def test_messages_decode_whatever_the_chunking(
    messages: list[tuple[bytes, codec.FrontendMessage]], chunk: int
) -> None:
    stream = _startup({"user": "u", "database": "shoal"}) + b"".join(m[0] for m in messages)
    decoder = codec.FrontendDecoder()
    got: list[codec.FrontendMessage] = []
    for i in range(0, len(stream), chunk):
        decoder.feed(stream[i : i + chunk])
        while (message := decoder.next()) is not None:
            got.append(message)
    assert got[0] == codec.Startup(codec.PROTOCOL_3, {"user": "u", "database": "shoal"})
    assert got[1:] == [m[1] for m in messages]
    assert decoder.buffered == 0


@given(st.binary(max_size=300), st.booleans())
@settings(max_examples=500)
def test_garbage_raises_only_protocol_errors(data: bytes, started: bool) -> None:
    decoder = codec.FrontendDecoder(max_message_bytes=1000)
    decoder.started = started
    decoder.feed(data)
    try:
        for _ in range(len(data) + 1):
            if decoder.next() is None:
                break
    except codec.ProtocolError as exc:
        assert str(exc)


@given(frontend_messages(), st.data())
def test_truncated_and_corrupted_messages_never_crash(
    message: tuple[bytes, codec.FrontendMessage], data: st.DataObject
) -> None:
    raw = bytearray(message[0])
    cut = data.draw(st.integers(0, len(raw)))
    if data.draw(st.booleans()) and len(raw) > 5:
        at = data.draw(st.integers(5, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    decoder = codec.FrontendDecoder()
    decoder.started = True
    decoder.feed(bytes(raw[:cut]))
    try:
        got = decoder.next()
    except codec.ProtocolError:
        return
    if cut < len(raw):
        assert got is None  # an incomplete message waits for the rest


def test_oversized_message_is_refused_from_its_header() -> None:
    decoder = codec.FrontendDecoder(max_message_bytes=100)
    decoder.started = True
    decoder.feed(b"Q" + struct.pack("!I", 1_000_000))
    with pytest.raises(codec.ProtocolError, match="exceeds the limit"):
        decoder.next()


def test_special_startup_requests() -> None:
    decoder = codec.FrontendDecoder()
    decoder.feed(struct.pack("!II", 8, codec.SSL_REQUEST))
    assert decoder.next() == codec.SSLRequest()
    decoder.feed(struct.pack("!IIii", 16, codec.CANCEL_REQUEST, 1234, -5))
    assert decoder.next() == codec.CancelRequest(1234, -5)
    decoder.feed(struct.pack("!II", 8, 2 << 16))
    with pytest.raises(codec.ProtocolError, match=r"unsupported frontend protocol 2\.0"):
        decoder.next()


# -- SQL text -----------------------------------------------------------------------------


def test_statements_split_outside_quotes_and_comments() -> None:
    sql = "SELECT 'a;b' AS x; -- c;d\n SELECT \"e;f\" FROM t /* ; */;; SELECT $$g;h$$ ;"
    assert sqltext.split_statements(sql) == [
        "SELECT 'a;b' AS x",
        '-- c;d\n SELECT "e;f" FROM t /* ; */',
        "SELECT $$g;h$$",
    ]
    assert sqltext.split_statements(" ; -- only a comment\n") == []
    with pytest.raises(sqltext.SqlTextError):
        sqltext.split_statements("SELECT 'unterminated")


def test_placeholders_skip_quotes_and_read_casts() -> None:
    sql = "SELECT $1::int, '$2', \"$3\", $2 :: timestamp with time zone, $10, a$1 -- $4"
    found = sqltext.placeholders(sql)
    assert [(p.index, p.cast) for p in found] == [
        (1, "int"),
        (2, "timestamp with time zone"),
        (10, None),
    ]
    assert params.parameter_types("SELECT $1::int8, $2, $3::text[]", [0, 0, 0]) == [
        types.INT8,
        types.TEXT,
        types.TEXT,
    ]


@given(st.text(max_size=60))
def test_string_parameters_stay_one_literal(text: str) -> None:
    if "\x00" in text:
        return
    literal = params.literal(text.encode(), types.TEXT, 0)
    sql = sqltext.substitute("SELECT $1 AS v; SELECT 2", [literal])
    # whatever the text, the statement count does not change and the literal reads back
    assert len(sqltext.split_statements(sql)) == 2
    assert literal[0] == "'" and literal[-1] == "'"
    assert literal[1:-1].replace("''", "'") == text


@given(
    st.binary(max_size=40), st.sampled_from(sorted(params.CAST_NAMES.values())), st.integers(0, 1)
)
def test_any_parameter_bytes_decode_or_raise_parameter_error(
    raw: bytes, oid: int, fmt: int
) -> None:
    try:
        literal = params.literal(raw, oid, fmt)
    except params.ParameterError:
        return
    assert sqltext.split_statements(f"SELECT {literal}") == [f"SELECT {literal}"]


def test_parameter_literals() -> None:
    assert params.literal(b"42", types.INT4, 0) == "42"
    assert params.literal(struct.pack("!q", -7), types.INT8, 1) == "-7"
    assert params.literal(b"t", types.BOOL, 0) == "TRUE"
    assert params.literal(struct.pack("!d", 2.5), types.FLOAT8, 1) == "2.5"
    stamp = params.literal(b"2026-01-01 02:00:00+02:00", types.TIMESTAMPTZ, 0)
    assert stamp == "CAST('2026-01-01T00:00:00Z' AS TIMESTAMP)"
    assert params.literal(b"\\x00ff", types.BYTEA, 0) == "X'00ff'"
    assert params.literal(None, types.TEXT, 0) == "NULL"
    with pytest.raises(params.ParameterError):
        params.literal(b"1; DROP TABLE x", types.INT4, 0)
    with pytest.raises(params.ParameterError):
        params.literal(b"99999", types.INT2, 0)


# -- values -------------------------------------------------------------------------------


@given(
    st.integers(0, 12).flatmap(
        lambda places: st.decimals(allow_nan=False, allow_infinity=False, places=places)
    )
)
def test_numeric_binary_round_trips(value: decimal.Decimal) -> None:
    if value.is_zero():
        value = abs(value)
    assert params.decode_numeric(types.numeric_binary(value)) == value


def test_text_and_binary_encodings_of_result_columns() -> None:
    stamp = dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC)
    batch = pa.record_batch(
        {
            "ts": pa.array([stamp, None], pa.timestamp("us", tz="UTC")),
            "m": pa.array([[("k", "v")], []], pa.map_(pa.string(), pa.string())),
            "l": pa.array([[1, None], []], pa.list_(pa.int64())),
            "f": pa.array([float("inf"), 0.25]),
            "s": pa.array(['a "b"', None]),
        }
    )
    text = [types.column_encoder(c.type, 0)(c) for c in batch.columns]
    assert text[0] == [b"2026-01-02 03:04:05.6+00", None]
    assert text[1] == [b'{"k":"v"}', b"{}"]
    assert text[2] == [b"{1,NULL}", b"{}"]
    assert text[3] == [b"Infinity", b"0.25"]
    assert text[4] == [b'a "b"', None]
    binary = [types.column_encoder(c.type, 1)(c) for c in batch.columns]
    us = (stamp - types.PG_EPOCH) // dt.timedelta(microseconds=1)
    assert binary[0][0] == struct.pack("!q", us)
    assert binary[2][0] == struct.pack("!iiIii", 1, 1, types.INT8, 2, 1) + struct.pack(
        "!iq", 8, 1
    ) + struct.pack("!i", -1)
    assert [types.pg_type(c.type).oid for c in batch.columns] == [
        types.TIMESTAMPTZ,
        types.JSON,
        1016,
        types.FLOAT8,
        types.TEXT,
    ]


def _data_rows(buffer: bytes) -> list[list[bytes | None]]:
    rows, pos = [], 0
    while pos < len(buffer):
        assert buffer[pos : pos + 1] == b"D"
        size = struct.unpack_from("!i", buffer, pos + 1)[0]
        (count,) = struct.unpack_from("!h", buffer, pos + 5)
        at, values = pos + 7, []
        for _ in range(count):
            (length,) = struct.unpack_from("!i", buffer, at)
            at += 4
            values.append(None if length == -1 else buffer[at : at + length])
            at += max(length, 0)
        assert at == pos + 1 + size
        rows.append(values)
        pos = at
    return rows


@given(
    st.lists(
        st.tuples(
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | st.floats(allow_nan=False, allow_infinity=False),
            st.none() | st.booleans(),
            st.none() | st.text(max_size=10),
            st.none() | st.integers(0, 2**50),
            st.none() | st.integers(-(2**31), 2**31 - 1),
        ),
        max_size=20,
    ),
    st.integers(0, 1),
)
def test_vectorised_rows_match_the_value_by_value_encoding(rows: list[tuple], fmt: int) -> None:  # type: ignore[type-arg]
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in range(6)]
    batch = pa.record_batch(
        [
            pa.array(columns[0], pa.int64()),
            pa.array(columns[1], pa.float64()),
            pa.array(columns[2], pa.bool_()),
            pa.array(columns[3], pa.string()),
            pa.array(columns[4], pa.timestamp("us", tz="UTC")),
            pa.array(columns[5], pa.int32()),
        ],
        names=["i", "f", "b", "s", "t", "j"],
    )
    fast = _data_rows(rows_mod.encode_rows(batch, [fmt] * 6))
    reference = [
        [types.column_encoder(c.type, fmt)(c)[r] for c in batch.columns]
        for r in range(batch.num_rows)
    ]
    assert len(fast) == len(reference)
    for got, want in zip(fast, reference, strict=True):
        for column, (a, b) in enumerate(zip(got, want, strict=True)):
            if column == 1 and fmt == 0 and a is not None and b is not None:
                assert float(a) == float(b)  # Arrow writes 1e+20 / 5, Python 1e+20 / 5.0
            elif column == 4 and fmt == 0 and a is not None and b is not None:
                parse = dt.datetime.fromisoformat
                assert parse(a.decode() + ":00") == parse(b.decode() + ":00")
            else:
                assert a == b, (column, a, b)


def test_catalog_names_count_only_outside_quotes() -> None:
    from shoal.pgwire.pg_catalog import uses_catalog

    assert uses_catalog("SELECT relname FROM pg_catalog.pg_class")
    assert uses_catalog("SELECT * FROM information_schema.tables")
    assert not uses_catalog("SELECT body FROM logs WHERE body LIKE '%pg_class%' -- pg_type")


def test_zoned_timestamps_go_out_in_utc() -> None:
    noon = pa.array([dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC"))
    berlin = noon.cast(pa.timestamp("us", tz="Europe/Berlin"))
    batch = pa.record_batch([berlin], names=["t"])
    (text,) = _data_rows(rows_mod.encode_rows(batch, [0]))[0]
    assert text == b"2026-01-01 12:00:00.000000+00"
    assert types.column_encoder(berlin.type, 0)(berlin) == [b"2026-01-01 12:00:00+00"]
