"""A client's hang-up aborts the upstream call at once (docs/resilience.md#r7), in-process.

The promise is 100 ms. Here the loop's clock is frozen from the moment the client
leaves: the upstream call must be cancelled in the loop passes that follow, with no
time passing, so any wait or timer between the disconnect and the abort fails the
test however fast or loaded the machine is. (tests/e2e/test_resilience.py measures the
same path over real sockets on daphne and uvicorn.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import orjson
import pytest

from routing.config import live
from routing.config.snapshot import build_snapshot
from routing.runtime.process import current
from tests.gateway.conftest import API_KEY, document, key_rows
from tests.inprocess import gateway_application

PASSES = 10  # loop passes the abort may take: the watcher's wake-up, the request task's unwinding


class HangingUpstream:
    """`transport.send` that never answers and records when it is cancelled (the gateway hangs up on it)."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.aborted = False

    async def send(self, *args: object, **kwargs: object) -> None:
        self.called.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.aborted = True
            raise


@pytest.fixture
def hanging(monkeypatch) -> Iterator[HangingUpstream]:
    upstream = HangingUpstream()
    monkeypatch.setattr(current().transport, "send", upstream.send)
    previous = live.current()
    live.swap(build_snapshot(document("http://127.0.0.1:9"), key_rows(), {}, version=1))
    yield upstream
    live.swap(previous)


def scope() -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"gateway"),
            (b"authorization", f"Bearer {API_KEY}".encode()),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
async def test_a_hang_up_aborts_the_upstream_call_with_no_time_passing(hanging, stream) -> None:
    body = orjson.dumps({"model": "chat-a", "messages": [{"role": "user", "content": "hi"}], "stream": stream})
    inbox: list[dict] = [{"type": "http.request", "body": body, "more_body": False}]
    gone = asyncio.Event()
    sent: list[dict] = []

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    request = asyncio.ensure_future(gateway_application(scope(), receive, send))
    await asyncio.wait_for(hanging.called.wait(), 10)
    loop = asyncio.get_running_loop()
    frozen = loop.time()
    loop.time = lambda: frozen  # type: ignore[method-assign]  # from here on, no loop time passes
    try:
        gone.set()  # the client goes away
        for _ in range(PASSES):
            await asyncio.sleep(0)
            if hanging.aborted:
                break
        assert hanging.aborted, f"the upstream call was still open {PASSES} loop passes after the client left"
    finally:
        del loop.time
    await asyncio.wait_for(asyncio.gather(request, return_exceptions=True), 10)
    assert not any(m["type"] == "http.response.start" and m["status"] >= 500 for m in sent)
