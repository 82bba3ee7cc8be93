"""Users' regular expressions (shoal/regex.py): RE2's syntax as Prometheus reads it,
whole-value matches, Go's replacement templates, clear refusals, and linear time."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal import regex
from shoal.errors import PatternError
from shoal.regex import compile_pattern, expand


@pytest.mark.parametrize(
    ("pattern", "text", "hit"),
    [
        ("((?i)PRO).*", "production", True),
        ("((?i)PRO).*", "xproduction", False),
        (".*((?i)DUC).*", "production", True),
        ("(?i)abc", "ABC", True),
        # a flag holds to the end of its group, every alternative after it included
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
def test_flag_groups_anywhere(pattern: str, text: str, hit: bool) -> None:
    assert compile_pattern(pattern).matches(text) is hit


@pytest.mark.parametrize(
    ("pattern", "text", "hit"),
    [
        # the whole value, as Prometheus anchors it: ^(?:pattern)$
        ("GET|POST", "GET", True),
        ("GET|POST", "GETX", False),
        ("a", "ba", False),
        ("", "", True),
        ("", "x", False),
        # Perl, Unicode and POSIX classes; Go's \d is ASCII only
        (r"\d+", "0123", True),
        (r"\d", "٣", False),
        (r"\w+\s\S", "ab_9 x", True),
        (r"\pL+", "héllo", True),
        (r"\p{Greek}+", "αβγ", True),
        (r"\PL", "1", True),
        ("[[:alpha:]]+[[:digit:]]", "abc7", True),
        (r"\Qa.b\E", "a.b", True),
        (r"\Qa.b\E", "axb", False),
        ("(?P<n>x)y", "xy", True),
        ("(?i)é", "É", True),
        # "." stops at a newline unless (?s); "$" is the end of the text, never before a
        # trailing newline (Python's "$" would accept "a\n")
        ("a.b", "a\nb", False),
        ("(?s)a.b", "a\nb", True),
        ("a$", "a\n", False),
        ("(?m)a$", "a", True),
        # leftmost-first, non-greedy and repetition as in Go
        ("a{2,3}", "aaaa", False),
        ("a+?b", "aaab", True),
        (".{1000}", "x" * 1000, True),
    ],
)
def test_prometheus_syntax_and_anchoring(pattern: str, text: str, hit: bool) -> None:
    assert compile_pattern(pattern).matches(text) is hit
    assert compile_pattern(pattern).matches(text) is hit  # the remembered answer


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", r"invalid escape sequence: \1"),
        ("x(?=y)", "invalid perl operator"),
        ("x(?<!y)", "invalid"),
        ("a{1001}", "invalid repetition size"),
        ("(a{999}){999}", "invalid repetition size"),
        ("(", "missing )"),
        ("[a", "missing ]"),
        ("*", "no argument for repetition operator"),
        (r"\pL{1000}", "too large"),
        ("x" * (regex.MAX_PATTERN_BYTES + 1), "over the limit"),
        ("\ud800", "not valid Unicode"),
    ],
)
def test_refusals_say_why(pattern: str, says: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert says in caught.value.reason
    assert caught.value.pattern == pattern
    assert str(caught.value).startswith("invalid regular expression")


@pytest.mark.parametrize(
    ("pattern", "template", "text", "out"),
    [
        ("(.*)", "x-$1", "abc", "x-abc"),
        ("(.)(.*)", "$2$1", "abc", "bca"),
        ("(.)(.*)", "${1}x", "abc", "ax"),
        # $1x names a group "1x", which does not exist: empty
        ("(.)(.*)", "$1x", "abc", ""),
        ("(.*)", "$$1", "abc", "$1"),
        ("(.*)", "$", "abc", "$"),
        ("(.*)", "a$-b", "abc", "a$-b"),
        ("(.*)", "${1", "abc", "${1"),
        ("(.*)", "$2", "abc", ""),
        ("(.*)", "$01", "abc", ""),
        ("(?P<word>[a-z]+)-(\\d+)", "${word}:$2", "ab-12", "ab:12"),
        ("(?P<word>[a-z]+)-(\\d+)", "$word_$2", "ab-12", "12"),
        ("(a)|(b)", "[$1][$2]", "b", "[][b]"),
        ("(é+)(.)", "$2$1", "ééx", "xéé"),
    ],
)
def test_replacement_templates_expand_as_go_does(
    pattern: str, template: str, text: str, out: str
) -> None:
    assert compile_pattern(pattern).replace(text, template) == out


@pytest.mark.parametrize(("text", "hit"), [("ab", True), ("xa", False), ("a", True), ("xxb", True)])
def test_the_text_prometheus_compiles(text: str, hit: bool) -> None:
    # an unbalanced pattern that the wrapper closes: "^(?:a)|(b)$" begins with a or ends
    # with b; label_replace takes it, a matcher must be a regular expression on its own
    assert compile_pattern("a)|(b", standalone=False).matches(text) is hit
    with pytest.raises(PatternError, match="unexpected"):
        compile_pattern("a)|(b")


def test_a_value_that_does_not_match_is_not_replaced() -> None:
    assert compile_pattern("a(.)").replace("xb", "$1") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_pattern_compiles_or_is_refused_with_a_reason(pattern: str) -> None:
    try:
        compiled = compile_pattern(pattern)
    except PatternError as exc:
        assert exc.reason
        return
    compiled.matches(pattern)
    compiled.replace(pattern, "$1${x}$$")


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[ab.*+?|()]{0,12}", fullmatch=True), st.text("abAB\n", max_size=8))
def test_simple_patterns_match_as_a_backtracking_engine_would(pattern: str, text: str) -> None:
    # over this alphabet RE2 and Python's re agree on what a whole-value match is
    try:
        plain = re.compile(f"(?:{pattern})\\Z")
    except re.error:
        return
    try:
        ours = compile_pattern(pattern)
    except PatternError:
        return  # RE2 is stricter than re about some empty repetitions ("(|a)*" is fine)
    assert ours.matches(text) is (plain.match(text) is not None)


@settings(max_examples=200, deadline=None)
@given(st.text("$ab{}_1é", max_size=12), st.lists(st.text("xy", max_size=3), max_size=3))
def test_templates_never_fail(template: str, groups: list[str]) -> None:
    out = expand("$$" + template, ["whole", *groups], {"ab": 1})
    assert out.startswith("$")  # "$$" is a dollar sign, whatever follows


CATASTROPHIC = [("(a|a)*b", "a"), ("(a+)+$", "a"), ("(x+x+)+y", "x")]


@pytest.mark.parametrize(("pattern", "letter"), CATASTROPHIC)
def test_catastrophic_patterns_finish_over_long_values(pattern: str, letter: str) -> None:
    compiled = compile_pattern(pattern)
    value = letter * 5000 + "!"
    assert compiled.matches(value) is False
    assert compiled.replace(value, "$1") is None


def test_pythons_re_would_not_finish_on_the_same_input() -> None:
    # what the matchers ran on before: a backtracking engine, stuck on 40 characters
    code = textwrap.dedent(
        """
        import re
        re.compile("^(?:(a|a)*b)$").search("a" * 40)
        """
    )
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, "-c", code], timeout=3, check=False)
