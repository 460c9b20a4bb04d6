"""A stream's first frame leaves before what arrived with it (docs/performance.md#first-frame).

An upstream faster than the gateway (a burst, a cached answer) hands over much of its stream in
the first read. The client's first body message is the held frames and the committing content
frame; the rest of that read follows as the next message. The bytes on the wire are unchanged.
"""

from __future__ import annotations

import pytest

from routing.core.stream import UsageTap
from routing.gateway.model_name import renamer
from routing.gateway.proxy import _relay
from tests.core.test_stream import DONE, FRAME1, FRAME2, Source, opened

ROLE = b'data: {"id":"c1","model":"up","choices":[{"delta":{"role":"assistant"}}]}\n\n'
USAGE = b'data: {"id":"c1","model":"up","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'


async def bodies(chunks: list[bytes], strip: bool, rename: bool) -> tuple[list[bytes], UsageTap]:
    committed = await opened(Source(*chunks))
    sent: list[bytes] = []

    async def send(message: dict) -> None:
        sent.append(message["body"])

    tap = UsageTap(strip=strip)
    try:
        await _relay(send, committed, tap, None, renamer("asked", "up") if rename else None, committed.commit_end)
    finally:
        await committed.aclose()
    return sent, tap


@pytest.mark.parametrize("strip", [False, True], ids=["client-asked-usage", "usage-kept-back"])
@pytest.mark.parametrize("rename", [False, True], ids=["same-name", "renamed"])
async def test_a_burst_s_first_message_is_the_held_frames_and_the_first_content_frame(strip, rename) -> None:
    burst = ROLE + FRAME1 + FRAME2 + USAGE + DONE
    sent, tap = await bodies([burst], strip, rename)
    head = ROLE.replace(b'"up"', b'"asked"') if rename else ROLE
    assert sent[0] == head + FRAME1
    expected = burst.replace(USAGE, b"") if strip else burst
    if rename:
        expected = expected.replace(b'"model":"up"', b'"model":"asked"')
    assert b"".join(sent) == expected  # the same bytes, in one more message
    assert tap.prompt_tokens == 3 and tap.completion_tokens == 2


async def test_a_first_read_that_ends_at_the_content_frame_is_one_message() -> None:
    sent, _ = await bodies([ROLE + FRAME1, FRAME2 + DONE], strip=False, rename=False)
    assert sent == [ROLE + FRAME1, FRAME2 + DONE, b""]


async def test_crlf_frames_keep_the_first_read_whole() -> None:
    crlf = (ROLE + FRAME1 + FRAME2 + DONE).replace(b"\n", b"\r\n")
    sent, _ = await bodies([crlf], strip=False, rename=False)
    assert sent == [crlf, b""]
