"""SSE framing read and written in one place (routing.core.sse): line ends of every kind, a `\\r\\n` split
across chunks, `data:` and `event:` with or without their space, multi-line data, and an event's name
from its `event:` line or its data's `type`. Every relay and translation frames through these, so a slip
here garbles every stream; the translation tests see it only through whole conversations."""

from __future__ import annotations

import pytest

from routing.core.sse import complete_end, event_name, normalise, parse_frame, pop_events, pop_frames


def test_a_frame_reads_its_name_and_data_with_or_without_the_space_after_the_colon() -> None:
    assert parse_frame(b"event:delta\ndata:{}") == (b"delta", b"{}")
    assert parse_frame(b"event: delta \ndata: XYZ") == (b"delta", b"XYZ")
    assert parse_frame(b"data: a\ndata:b\n: a comment\nid: 7") == (None, b"a\nb")  # joined by one \n
    assert parse_frame(b": only a comment") == (None, None)


def _normalised(*chunks: bytes) -> bytes:
    buffer = bytearray()
    for chunk in chunks:
        normalise(buffer, chunk)
    return bytes(buffer)


@pytest.mark.parametrize(
    "chunks",
    [
        (b"data: a\r\n\r\ndata: b\r\n\r\n",),
        (b"data: a\r\r", b"data: b\r\r"),
        (b"data: a\r", b"\n\r\ndata: b\r\n\r", b"\n"),  # a \r\n split across chunks is one line end
        (b"data: a\r", b"\rdata: b\r", b"\r"),  # a lone \r at a chunk's end is a line end of its own
        (b"data: a\n\ndata: b\n\n",),
    ],
)
def test_every_line_end_becomes_one_newline_wherever_the_chunks_split(chunks) -> None:
    assert _normalised(*chunks, b"data: c") == b"data: a\n\ndata: b\n\ndata: c"


def test_a_trailing_carriage_return_is_held_until_the_next_chunk_says_what_it_is() -> None:
    assert _normalised(b"data: a\r") == b"data: a\r"


def test_frames_without_data_or_name_are_skipped_and_an_incomplete_one_waits() -> None:
    buffer = bytearray(b": ping\n\nevent: open\n\ndata: 1\n\ndata: 2")
    assert list(pop_frames(buffer)) == [(b"event: open\n\n", b"open", None), (b"data: 1\n\n", None, b"1")]
    assert buffer == b"data: 2"
    buffer = bytearray(b"event: open\n\nevent: x\ndata: 1\n\n")
    assert list(pop_events(buffer)) == [(b"x", b"1")]


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        (b"named", b'{"type": "other"}', b"named"),  # the event: line wins
        (b"named", None, b"named"),
        (b"", b'{"type": "other"}', b""),
        (None, None, b""),
        (None, b'{"type": "message_start"}', b"message_start"),
        (None, b'{"kind": "message_start"}', b""),
        (None, b'{"type": 3}', b""),
        (None, b'["type"]', b""),
        (None, b"not json", b""),
    ],
)
def test_an_event_is_named_by_its_event_line_else_by_its_data_type(name, data, expected) -> None:
    assert event_name(name, data) == expected


@pytest.mark.parametrize(
    ("data", "end"),
    [
        (b"", 0),
        (b"\n\ndata: a", 2),  # an empty frame first: it ends at 2, not "none"
        (b"data: a\n", 0),
        (b"data: a\n\ndata: b", 9),
        (b"data: a\n\ndata: b\n\n", 18),
        (b"data: a\r\n\r\ndata: b", 11),
        (b"data: a\r\rdata: b\r\r", 18),
        (b"data: a\r\n", 0),
    ],
)
def test_the_last_complete_frame_ends_after_its_blank_line_whatever_the_line_ends(data, end) -> None:
    assert complete_end(data) == end
