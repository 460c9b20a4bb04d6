"""uvicorn's response cycle sends a response's head with its body's first write
(gateway_project.http_limits._OneWrite, docs/performance.md#servers)."""

from __future__ import annotations

import asyncio

from gateway_project.http_limits import _OneWrite

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_head_and_body_leave_in_one_write():
    t = FakeTransport()
    w = _OneWrite(t, asyncio.get_running_loop())
    w.write(HEAD)
    assert t.writes == []
    w.write(b"{}")
    assert t.writes == [HEAD + b"{}"]
    await asyncio.sleep(0)
    assert t.writes == [HEAD + b"{}"], "nothing is written twice"


async def test_a_head_without_a_body_yet_goes_out_at_the_next_loop_pass():
    t = FakeTransport()
    w = _OneWrite(t, asyncio.get_running_loop())
    w.write(HEAD)  # a stream whose first frame is not there yet
    await asyncio.sleep(0)
    assert t.writes == [HEAD]
    w.write(b"data: 1\n\n")
    assert t.writes == [HEAD, b"data: 1\n\n"]


async def test_the_interim_100_continue_is_never_held():
    t = FakeTransport()
    w = _OneWrite(t, asyncio.get_running_loop())
    w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert t.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_close_sends_a_held_head_first_and_other_calls_reach_the_transport():
    t = FakeTransport()
    w = _OneWrite(t, asyncio.get_running_loop())
    w.write(HEAD)
    w.close()
    assert t.writes == [HEAD] and t.closed
    assert w.is_closing() and w.get_extra_info("peername") == "info:peername"
