"""The lookup filters: no value added is ever missed, the bytes round-trip, damage is caught."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.storage.lookup import Bloom, value_words

hex_ids = st.binary(min_size=16, max_size=16).map(bytes.hex)
any_text = st.text(max_size=40)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(hex_ids, any_text), max_size=300))
def test_every_value_added_may_be_held(values: list[str]) -> None:
    bloom = Bloom.of(pa.array(values, pa.string()))
    again = Bloom.from_bytes(bloom.to_bytes())
    for value in values:
        assert again.may_hold(*value_words(value))


def test_few_values_not_added_are_admitted() -> None:
    added = [f"{i:032x}" for i in range(5000)]
    bloom = Bloom.of(pa.array(added))
    others = [f"{i:032x}" for i in range(10**9, 10**9 + 20000)]
    admitted = sum(bloom.may_hold(*value_words(v)) for v in others)
    assert admitted < 0.03 * len(others)


def test_upper_and_lower_case_hex_are_one_value() -> None:
    bloom = Bloom.of(pa.array(["0af7651916cd43dd8448eb211c80319c"]))
    assert bloom.may_hold(*value_words("0AF7651916CD43DD8448EB211C80319C"))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 200))
def test_damaged_bytes_are_refused(garbage: bytes, cut: int) -> None:
    good = Bloom.of(pa.array(["a", "b", "c"])).to_bytes()
    with pytest.raises(ValueError):
        Bloom.from_bytes(good[: min(cut, len(good) - 1)])
    flipped = bytearray(good)
    flipped[20 + cut % (len(good) - 24)] ^= 0x01
    with pytest.raises(ValueError):
        Bloom.from_bytes(bytes(flipped))
    try:
        Bloom.from_bytes(garbage)
    except ValueError:
        pass
