"""The exact messages of the identifier rules (docs/security.md#identifiers): the value as written (cut at
60 characters), the offending character with its code point and 1-based position, and the boundaries of
each length limit. Unit-level, so a wrong position or a lost value fails here and not only as a vague
validation error."""

from __future__ import annotations

import pytest

from routing.config.identifiers import MAX_PATH, MAX_REASON, identifier_problem, path_problem, text_problem


def test_a_control_character_is_named_by_code_point_and_one_based_position() -> None:
    # U+0007 has no Unicode name: only its code point is shown.
    assert identifier_problem("ab\x07", "model id") == (
        "model id 'ab\\x07' contains the control character U+0007 at position 3: remove it"
    )
    assert identifier_problem("é\u200b", "model id") == (
        "model id 'é\\u200b' contains the invisible or direction-changing character U+200B ZERO WIDTH SPACE"
        " at position 2: remove it"
    )


@pytest.mark.parametrize(
    ("char", "kind"),
    [
        ("\x85", "control"),  # Cc outside ASCII (NEXT LINE)
        ("\ud800", "invisible or direction-changing"),  # Cs: a lone surrogate
        ("\ue000", "invisible or direction-changing"),  # Co: private use
        ("\u0378", "invisible or direction-changing"),  # Cn: unassigned
    ],
)
def test_every_invisible_category_is_refused_in_non_ascii_text(char: str, kind: str) -> None:
    problem = identifier_problem("modèle" + char, "model id")
    assert problem is not None and f"contains the {kind} character U+{ord(char):04X}" in problem
    assert "at position 7" in problem
    assert text_problem("raison " + char + " é", "reason") is not None


def test_the_value_is_shown_whole_up_to_60_characters_and_cut_beyond() -> None:
    whole = "a" * 54 + "\x07"
    assert len(repr(whole)) == 60
    assert identifier_problem(whole, "id").startswith(f"id {whole!r} contains")
    cut = "a" * 55 + "\x07"
    assert len(repr(cut)) == 61
    assert identifier_problem(cut, "id").startswith(f"id {repr(cut)[:57]}... contains")


def test_nfkc_and_mixed_script_messages_show_the_value_as_written() -> None:
    assert identifier_problem("ﬁle", "model id") == "model id 'ﬁle' is not in Unicode NFKC form: write it as 'file'"
    assert identifier_problem("pаypal", "model id") == (  # a Cyrillic а
        "model id 'pаypal' mixes Latin and Cyrillic letters, which look alike: spell it in one script"
    )


def test_free_text_and_paths_at_exactly_their_limit_are_accepted() -> None:
    assert text_problem("x" * MAX_REASON, "reason") is None
    assert text_problem("x" * (MAX_REASON + 1), "reason") is not None
    assert path_problem("/" + "p" * (MAX_PATH - 1)) is None
    assert (
        path_problem("/" + "p" * MAX_PATH) == f"is {MAX_PATH + 1} characters long: a path has at most 512, shorten it"
    )


def test_a_path_message_shows_the_value_given() -> None:
    assert path_problem(42) == "42 must be a path starting with '/', e.g. /models"
    long_list = ["x"] * 30  # not a string: its repr in full, never cut
    assert path_problem(long_list) == f"{long_list!r} must be a path starting with '/', e.g. /models"
    long_str = "m" * 100  # a string: cut like every identifier
    assert path_problem(long_str) == f"{repr(long_str)[:57]}... must be a path starting with '/', e.g. /models"
    assert path_problem("/a b") == (
        "'/a b' must be a path of printable ASCII characters without spaces "
        "(percent-encode anything else, e.g. %20), e.g. /models"
    )
