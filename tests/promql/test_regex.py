"""Regular expressions as Go's RE2 reads them (flag groups anywhere), on Python's ``re``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.promql.matchers import go_regex


@pytest.mark.parametrize(
    ("pattern", "text", "hit"),
    [
        ("((?i)PRO).*", "production", True),
        ("((?i)PRO).*", "xproduction", False),
        (".*((?i)DUC).*", "production", True),
        ("(?i)abc", "ABC", True),
        # the flag holds to the end of its group, every alternative after it included
        ("(a(?i)b|c)d", "aBd", True),
        ("(a(?i)b|c)d", "Cd", True),
        ("(a(?i)b|c)d", "Abd", False),
        ("(a(?i)b|c)D", "cd", False),
        # inside a character class or escaped, "(?i)" is not a flag group
        ("[(?i)]+", "(?i)", True),
        (r"\(?i\)x", "i)x", True),
        ("(?:x(?i)y)z", "xYz", True),
        ("(?:x(?i)y)z", "xYZ", False),
    ],
)
def test_flag_groups(pattern: str, text: str, hit: bool) -> None:
    assert (go_regex(pattern).fullmatch(text) is not None) is hit


@given(st.from_regex(r"[a-z.*+?|()^$]{0,12}", fullmatch=True), st.text("abcXYZ", max_size=6))
def test_patterns_without_flag_groups_are_unchanged(pattern: str, text: str) -> None:
    try:
        plain = re.compile(pattern)
    except re.error:
        with pytest.raises(re.error):
            go_regex(pattern)
        return
    assert (go_regex(pattern).fullmatch(text) is None) == (plain.fullmatch(text) is None)
