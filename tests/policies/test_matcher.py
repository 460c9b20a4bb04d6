"""policies.matcher against Go's filepath.Match (docs/configuration.md#policies: pattern syntax is Go's)."""

from __future__ import annotations

import random

import pytest

from policies.matcher import BadPattern, compile_pattern, match, pattern_error
from tests.policies.go_reference import Bad, go_match

# Go's own table, go/src/path/filepath/match_test.go (pattern, name, match, bad pattern).
GO_TABLE = [
    ("abc", "abc", True, False),
    ("*", "abc", True, False),
    ("*c", "abc", True, False),
    ("a*", "a", True, False),
    ("a*", "abc", True, False),
    ("a*", "ab/c", False, False),
    ("a*/b", "abc/b", True, False),
    ("a*/b", "a/c/b", False, False),
    ("a*b*c*d*e*/f", "axbxcxdxe/f", True, False),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/f", True, False),
    ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", False, False),
    ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", False, False),
    ("a*b?c*x", "abxbbxdbxebxczzx", True, False),
    ("a*b?c*x", "abxbbxdbxebxczzy", False, False),
    ("ab[c]", "abc", True, False),
    ("ab[b-d]", "abc", True, False),
    ("ab[e-g]", "abc", False, False),
    ("ab[^c]", "abc", False, False),
    ("ab[^b-d]", "abc", False, False),
    ("ab[^e-g]", "abc", True, False),
    ("a\\*b", "a*b", True, False),
    ("a\\*b", "ab", False, False),
    ("a?b", "a☺b", True, False),
    ("a[^a]b", "a☺b", True, False),
    ("a???b", "a☺b", False, False),
    ("a[^a][^a][^a]b", "a☺b", False, False),
    ("[a-ζ]*", "α", True, False),
    ("*[a-ζ]", "A", False, False),
    ("a?b", "a/b", False, False),
    ("a*b", "a/b", False, False),
    ("[\\]a]", "]", True, False),
    ("[\\-]", "-", True, False),
    ("[x\\-]", "x", True, False),
    ("[x\\-]", "-", True, False),
    ("[x\\-]", "z", False, False),
    ("[\\-x]", "x", True, False),
    ("[\\-x]", "-", True, False),
    ("[\\-x]", "a", False, False),
    ("[]a]", "]", False, True),
    ("[-]", "-", False, True),
    ("[x-]", "x", False, True),
    ("[x-]", "-", False, True),
    ("[x-]", "z", False, True),
    ("[-x]", "x", False, True),
    ("[-x]", "-", False, True),
    ("[-x]", "a", False, True),
    ("\\", "a", False, True),
    ("[a-b-c]", "a", False, True),
    ("[", "a", False, True),
    ("[^", "a", False, True),
    ("[^bc", "a", False, True),
    ("a[", "a", False, True),
    ("a[", "ab", False, True),
    ("a[", "x", False, True),
    ("a/b[", "x", False, True),
    ("*x", "xxx", True, False),
]

DOCUMENTED_EXAMPLES = [
    ("*", "openai/gpt-4", False),
    ("*/*", "openai/gpt-4", True),
    ("openai/*", "openai/gpt-4", True),
    ("openai/*", "anthropic/claude", False),
    ("chat-*", "chat-a", True),
    ("chat-*", "embed-a", False),
    ("gpt-4?", "gpt-4o", True),
    ("gpt-4?", "gpt-4", False),
    ("[a-c]*", "chat-a", True),
    ("[^c]*", "chat-a", False),
    ("*", "", True),
    ("", "", True),
    ("", "x", False),
]


@pytest.mark.parametrize(
    ("pattern", "name", "expected", "bad"), GO_TABLE, ids=[f"{p!r}~{n!r}" for p, n, _, _ in GO_TABLE]
)
def test_go_match_table(pattern: str, name: str, expected: bool, bad: bool) -> None:
    if bad:
        with pytest.raises(BadPattern):
            match(pattern, name)
        assert pattern_error(pattern) is not None
    else:
        assert match(pattern, name) is expected
        assert pattern_error(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "name", "expected", "bad"), GO_TABLE, ids=[f"ref-{p!r}~{n!r}" for p, n, _, _ in GO_TABLE]
)
def test_go_reference_port_agrees_with_go_table(pattern: str, name: str, expected: bool, bad: bool) -> None:
    """The reference port used for the differential test below reproduces Go's table."""
    if bad:
        with pytest.raises(Bad):
            go_match(pattern, name)
    else:
        assert go_match(pattern, name) is expected


@pytest.mark.parametrize(("pattern", "name", "expected"), DOCUMENTED_EXAMPLES)
def test_contract_examples(pattern: str, name: str, expected: bool) -> None:
    assert match(pattern, name) is expected


@pytest.mark.parametrize("pattern", ["a[", "[^", "ab\\", "[z-", "[]", "x[-a]"])
def test_malformed_pattern_is_refused_at_compile_time(pattern: str) -> None:
    """A policy with a malformed pattern is refused when saved, with a message naming it."""
    with pytest.raises(BadPattern):
        compile_pattern(pattern)
    message = pattern_error(pattern)
    assert message and pattern in message


def test_bad_pattern_after_a_failed_prefix_is_still_an_error_like_modern_go() -> None:
    # Go >= 1.16 validates the rest of the pattern before answering false, so
    # Match("a[", "b") is ErrBadPattern, not a silent false; so is ours.
    with pytest.raises(Bad):
        go_match("a[", "b")
    with pytest.raises(BadPattern):
        match("a[", "b")


def test_star_never_crosses_a_slash_but_a_class_may_match_one() -> None:
    assert not match("openai*", "openai/gpt-4")
    assert match("openai[/]gpt-4", "openai/gpt-4")
    assert match("openai[^x]gpt-4", "openai/gpt-4")
    assert not match("openai?gpt-4", "openai/gpt-4")


def test_regex_metacharacters_in_ids_are_literal() -> None:
    assert match("a.b+c(d)", "a.b+c(d)")
    assert not match("a.b", "axb")
    assert match("meta-llama/Llama-3.1-8B*", "meta-llama/Llama-3.1-8B-Instruct")


def test_newline_in_name_is_an_ordinary_character() -> None:
    assert match("a*b", "a\nb")
    assert match("a?b", "a\nb")


# Go takes the leftmost position where the chunk after a star matches and never
# backtracks into it; a plain regex backtracks. The two differ when a character
# class (or `[^x]`) can match '/' after a star. See the POLICY helper's report for
# the fix to policies/matcher.translate (atomic lazy groups `(?>[^/]*?chunk)`).
GO_NO_BACKTRACK = [
    ("*a[/a]*x", "aa/x", False),
    ("*[^a]*", "bab/", False),
    ("*[a/]*", "aba/a", False),
    ("[a/]*[^a]*", "/ab/", False),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), GO_NO_BACKTRACK)
def test_star_takes_leftmost_match_like_go(pattern: str, name: str, expected: bool) -> None:
    assert go_match(pattern, name) is expected
    assert match(pattern, name) is expected


def test_differential_against_go_reference() -> None:
    rng = random.Random(20240611)
    tokens = ["a", "b", "/", "*", "?", "[a/]", "[^a]", "[/]", "\\*", "[a-b]", "-"]
    mismatches = []
    for _ in range(20_000):
        pattern = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 6)))
        name = "".join(rng.choice("ab/-*") for _ in range(rng.randint(0, 7)))
        if go_match(pattern, name) != match(pattern, name):
            mismatches.append((pattern, name))
    assert mismatches == []


def test_differential_against_go_reference_without_slash_classes() -> None:
    """Where no class can match '/', the regex and Go agree on every case."""
    rng = random.Random(7)
    tokens = ["a", "b", "/", "*", "?", "[ab]", "[^/]", "[a-b]", "\\*", "-"]
    for _ in range(20_000):
        pattern = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 6)))
        name = "".join(rng.choice("ab/-*") for _ in range(rng.randint(0, 7)))
        assert go_match(pattern, name) == match(pattern, name), (pattern, name)
