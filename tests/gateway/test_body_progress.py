"""The body-progress deadline (docs/security.md#server-edge): bytes per window, not any byte. The rule on
its own with an injected clock, and the gateway's body reader over a fake ASGI receive; both servers
end to end in tests/e2e/test_body_progress_e2e.py."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from routing.core.body_progress import BodyProgress
from routing.core.errors import GatewayError
from routing.gateway.wire import read_body
from routing.runtime.accounting import Context


def test_a_byte_now_and_then_does_not_move_the_deadline_but_enough_bytes_do() -> None:
    p = BodyProgress(10.0, 1024, now=100.0)
    assert p.deadline == 110.0
    for t in range(105, 150, 5):  # 1 byte every 5 s: the trickle
        assert p.fed(1, float(t)) is False
    assert p.deadline == 110.0  # closed at 110 s whatever it sends
    p = BodyProgress(10.0, 1024, now=100.0)
    assert p.fed(1000, 109.0) is False and p.fed(24, 109.5) is True  # 1 KiB within the window
    assert p.deadline == 119.5
    p.restart(130.0)  # the application paused reading: a new window
    assert p.deadline == 140.0


def test_the_window_needs_exactly_min_bytes_counted_from_zero_and_each_move_starts_the_count_again() -> None:
    p = BodyProgress(10.0, 1024, now=0.0)
    assert p.fed(1023, 1.0) is False and p.deadline == 10.0  # one byte short of the window's quota
    assert p.fed(1, 2.0) is True and p.deadline == 12.0
    assert p.fed(1023, 3.0) is False and p.deadline == 12.0  # the next window counts from zero again
    assert p.fed(1, 4.0) is True and p.deadline == 14.0


def test_a_restart_forgets_the_bytes_of_the_window_it_abandons() -> None:
    p = BodyProgress(10.0, 1024, now=0.0)
    assert p.fed(500, 1.0) is False
    p.restart(5.0)  # the application paused: the 500 bytes do not count toward the new window
    assert p.fed(1023, 6.0) is False and p.deadline == 15.0
    assert p.fed(1, 7.0) is True and p.deadline == 17.0


def test_a_quota_below_one_byte_means_any_byte_moves_the_deadline() -> None:
    p = BodyProgress(10.0, 0, now=0.0)
    assert p.fed(1, 3.0) is True and p.deadline == 13.0


def trickle(chunks: list[bytes], every_s: float):
    """An ASGI receive whose body messages come every `every_s` (a slow client)."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> dict:
        await asyncio.sleep(every_s)  # the client's pace, not a wait for the code under test
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    return receive


async def test_a_trickled_body_is_answered_408_at_the_end_of_its_first_window(caplog) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(GatewayError) as refused:
        await read_body(trickle([b"x"] * 100, 0.05), 100, Context("r1", 0.0, "chat"), 1 << 20, 0.5, 64)
    took = loop.time() - began
    error = refused.value
    assert error.status == 408 and error.code == "request_body_timeout"
    assert error.headers == {"Connection": "close"}
    assert "64 bytes per 0.5 s" in orjson.loads(error.body())["error"]["message"]
    assert 0.5 <= took < 0.5 + 1.0  # the window, counted from when reading began (a loaded machine's lateness)
    assert "body slower than 64 bytes per 0.5 s" in caplog.text


async def test_a_slow_body_that_keeps_its_rate_is_read_whole_however_long_it_takes() -> None:
    chunks = [bytes([65 + i]) * 64 for i in range(20)]
    # 1 s in all, twice the window, at 64 bytes per 0.05 s, above 64 bytes per 0.5 s
    body = await read_body(trickle(chunks, 0.05), 1280, Context("r2", 0.0, "chat"), 1 << 20, 0.5, 64)
    assert body == b"".join(chunks)


async def test_a_body_in_one_message_needs_no_deadline_and_without_a_window_none_is_applied() -> None:
    async def whole() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    assert await read_body(whole, 2, Context("r3", 0.0, "chat"), 1 << 20, 0.3, 64) == b"{}"
    body = await read_body(trickle([b"a", b"b", b"c"], 0.15), 3, Context("r4", 0.0, "chat"), 1 << 20)
    assert body == b"abc"  # no window: the edge's deadline alone (a bare ASGI server: none)
