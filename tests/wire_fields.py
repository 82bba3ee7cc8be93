"""Protobuf fields written one by one, for tests that feed decoders bodies real senders
rarely send: unknown fields, fields repeated or out of order, wrong wire types."""

from __future__ import annotations

import dataclasses
import struct

from hypothesis import strategies as st

from loadtest.remote_write import field, varint

__all__ = [
    "Damage",
    "damages",
    "double",
    "field",
    "fixed32",
    "fixed64",
    "unknown_fields",
    "varint",
    "varint_field",
]


def double(number: int, value: float) -> bytes:
    """A ``double`` field."""
    return varint(number << 3 | 1) + struct.pack("<d", value)


def fixed64(number: int, value: int) -> bytes:
    """A ``fixed64`` (``sfixed64`` for a negative value) field."""
    return varint(number << 3 | 1) + struct.pack("<Q", value % 2**64)


def varint_field(number: int, value: int) -> bytes:
    """A varint field (``int64``, ``uint32``, ``bool``, an enum); negative as two's complement."""
    return varint(number << 3) + varint(value % 2**64)


def fixed32(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 5) + value


def unknown_fields(first: int = 5, last: int = 40) -> st.SearchStrategy[list[bytes]]:
    """Up to two fields numbered ``first``..``last``, of any wire type but groups."""
    numbers = st.integers(first, last)
    return st.lists(
        st.one_of(
            st.builds(varint_field, numbers, st.integers(0, 2**64 - 1)),
            st.builds(double, numbers, st.floats()),
            st.builds(field, numbers, st.binary(max_size=8)),
            st.builds(fixed32, numbers, st.binary(min_size=4, max_size=4)),
        ),
        max_size=2,
    )


@dataclasses.dataclass(frozen=True)
class Damage:
    """A body cut short and a few of its bytes changed."""

    cut: int
    flips: tuple[tuple[int, int], ...]

    def to(self, body: bytes) -> bytes:
        damaged = bytearray(body[: self.cut % (len(body) + 1)])
        for at, byte in self.flips:
            if damaged:
                damaged[at % len(damaged)] = byte
        return bytes(damaged)


damages = st.builds(
    Damage,
    st.integers(0, 2**16),
    st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), max_size=3).map(tuple),
)
