"""The upstream transport: pooling, connect failures, cancellation, stream breakage."""

from __future__ import annotations

import asyncio
import socket

import pytest

from routing.core.failures import FailureKind, UpstreamFailure
from routing.runtime.process import current
from routing.upstream.transport import Transport, UpstreamResponse, client_reason
from tests.upstream.conftest import provider
from tools.mock.upstream import blackhole, start_mock, state_of

CHAT = b'{"model": "m1", "messages": [{"role": "user", "content": "hi"}]}'
STREAM = b'{"model": "m1", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
JSON = {"Content-Type": "application/json"}


async def post(t: Transport, mock, body: bytes = CHAT, prov=None, timeout: float = 2.0) -> UpstreamResponse:
    prov = prov or provider(base_url=mock.base("openai"))
    return await t.send(prov, "POST", mock.base("openai") + "/chat/completions", dict(JSON), body, timeout)


async def test_send_gives_status_case_insensitive_headers_and_body(mock, transport):
    resp = await post(transport, mock)
    assert resp.status == 200
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.headers["CONTENT-TYPE"] == resp.headers["Content-Type"]
    body = await resp.read()
    assert b'"model":"m1"' in body
    await resp.close()


async def test_fully_read_responses_reuse_one_pooled_connection(mock, transport):
    for _ in range(3):
        resp = await post(transport, mock)
        await resp.read()
        await resp.close()
    peers = {r["peer"] for r in mock.state.calls("m1")["requests"]}
    assert len(peers) == 1


async def test_no_user_agent_or_cookies_are_added(mock, transport):
    resp = await post(transport, mock)
    await resp.read()
    headers = {k.lower() for k in mock.state.calls("m1")["requests"][0]["headers"]}
    assert "user-agent" not in headers
    assert "cookie" not in headers


async def test_connect_timeout_against_blackhole_is_connect_timeout(transport):
    hole = blackhole()
    try:
        prov = provider(base_url=f"http://{hole.host}:{hole.port}/v1")
        with pytest.raises(UpstreamFailure) as info:
            await transport.send(
                prov, "POST", f"http://{hole.host}:{hole.port}/v1/chat/completions", dict(JSON), CHAT, 0.2
            )
    finally:
        hole.close()
    assert info.value.kind is FailureKind.CONNECT_TIMEOUT
    assert "p1" in info.value.message


async def test_refused_connection_is_connect_error(transport):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    prov = provider(base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(UpstreamFailure) as info:
        await transport.send(prov, "POST", f"http://127.0.0.1:{port}/v1/chat/completions", dict(JSON), CHAT, 2.0)
    assert info.value.kind is FailureKind.CONNECT_ERROR
    assert info.value.is_retryable


async def test_a_refused_connection_names_the_provider_never_its_address(transport, caplog):
    """The message reaches API clients (docs/security.md#urls); the address goes to the log only."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    prov = provider("hidden-prov", base_url=f"http://127.0.0.1:{port}/v1")
    with caplog.at_level("WARNING", logger="switchboard.upstream"):
        with pytest.raises(UpstreamFailure) as info:
            await transport.send(prov, "POST", f"http://127.0.0.1:{port}/v1/chat/completions", dict(JSON), CHAT, 2.0)
    message = info.value.message
    assert "'hidden-prov'" in message and "connection refused" in message
    assert "127.0.0.1" not in message and str(port) not in message and "http" not in message
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in caplog.text  # operators still see where


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (socket.gaierror(-2, "Name or service not known: internal-llm.corp"), "its host name could not be resolved"),
        (OSError(113, "Connect call failed ('10.1.2.3', 8000)"), "no route to host"),
        (ConnectionResetError(104, "reset by 10.1.2.3"), "connection reset by peer"),
        (OSError("Multiple exceptions: [Errno 111] Connect call failed ('10.1.2.3', 80)"), "the connection failed"),
    ],
)
def test_connection_failures_are_described_without_addresses(exc, reason):
    assert client_reason(exc).startswith(reason) and "10.1.2.3" not in client_reason(exc)


async def test_server_closing_before_answering_is_connect_error(transport):
    async def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(slam, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        prov = provider(base_url=f"http://127.0.0.1:{port}/v1")
        with pytest.raises(UpstreamFailure) as info:
            await transport.send(prov, "POST", f"http://127.0.0.1:{port}/v1/chat/completions", dict(JSON), CHAT, 2.0)
    finally:
        server.close()
        await server.wait_closed()
    assert info.value.kind is FailureKind.CONNECT_ERROR


async def test_provider_with_connect_timeout_gets_its_own_pool(transport):
    shared_a = transport.session_for(provider("a"))
    shared_b = transport.session_for(provider("b"))
    own_c = transport.session_for(provider("c", connect_timeout_ms=300))
    own_d = transport.session_for(provider("d", connect_timeout_ms=300))
    assert shared_a is shared_b
    assert own_c is not shared_a and own_d is not own_c
    assert own_c.connector is not shared_a.connector
    assert own_c.timeout.connect == pytest.approx(0.3)
    assert transport.session_for(provider("c", connect_timeout_ms=300)) is own_c


async def test_own_pool_is_used_for_the_request_and_times_out_on_connect(transport):
    with blackhole() as (host, port):
        prov = provider("slow", base_url=f"http://{host}:{port}/v1", connect_timeout_ms=200)
        with pytest.raises(UpstreamFailure) as info:
            await transport.send(prov, "POST", f"http://{host}:{port}/v1/chat/completions", dict(JSON), CHAT, 0.2)
    assert info.value.kind is FailureKind.CONNECT_TIMEOUT
    assert set(transport.pools()) == {"shared", "slow:200"} and transport.pools()["shared"] is None


async def test_retain_closes_pools_of_removed_providers(transport):
    kept = provider("kept", connect_timeout_ms=100)
    gone = provider("gone", connect_timeout_ms=100)
    kept_session = transport.session_for(kept)
    gone_session = transport.session_for(gone)
    await transport.retain({"kept": kept})
    assert gone_session.closed and not kept_session.closed


async def test_cancel_while_waiting_for_headers_closes_upstream_connection(mock, transport):
    mock.state.model("m1").steps.append({"hang": True})
    task = asyncio.create_task(post(transport, mock))
    await mock.state.wait_for(lambda: mock.state.model("m1").in_flight == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await mock.state.wait_disconnected("m1")
    assert mock.state.calls("m1")["disconnected"] == 1


async def test_cancel_mid_stream_closes_upstream_connection(mock, transport):
    mock.state.model("m1").steps.append({"frames": 5, "frame_delay_ms": 60_000})
    resp = await post(transport, mock, STREAM)
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in resp.iter_chunks():
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await mock.state.wait_disconnected("m1")


async def test_stopping_early_closes_rather_than_pooling_a_half_read_connection(mock, transport):
    mock.state.model("m1").steps.append({"frames": 5, "frame_delay_ms": 60_000})
    resp = await post(transport, mock, STREAM)
    chunks = resp.iter_chunks()
    assert (await chunks.__anext__()).startswith(b"data: ")
    await resp.close()
    await mock.state.wait_disconnected("m1")
    resp2 = await post(transport, mock)  # a fresh connection, not the half-read one
    await resp2.read()
    peers = [r["peer"] for r in mock.state.calls("m1")["requests"]]
    assert peers[0] != peers[1]


async def test_stream_broken_mid_body_raises_stream_error(mock, transport):
    mock.state.model("m1").steps.append({"frames": 5, "break_after": 2})
    resp = await post(transport, mock, STREAM)
    got = []
    with pytest.raises(UpstreamFailure) as info:
        async for chunk in resp.iter_chunks():
            got.append(chunk)
    assert info.value.kind is FailureKind.STREAM_ERROR
    assert b"tok0" in b"".join(got)
    assert b"[DONE]" not in b"".join(got)


async def test_full_stream_arrives_and_ends_with_done(mock, transport):
    mock.state.model("m1").steps.append({"role_chunk": False})
    resp = await post(transport, mock, STREAM)
    raw = b"".join([c async for c in resp.iter_chunks()])
    assert raw.endswith(b"data: [DONE]\n\n")
    assert raw.count(b"chat.completion.chunk") == 4


def test_one_transport_serves_successive_event_loops():
    """The process's transport outlives loops (tests, reloads): stale sessions are replaced."""
    t = Transport()

    async def once() -> int:
        runner, port = await start_mock()
        try:
            prov = provider(base_url=f"http://127.0.0.1:{port}/v1")
            resp = await t.send(prov, "POST", f"http://127.0.0.1:{port}/v1/chat/completions", dict(JSON), CHAT, 2.0)
            await resp.read()
            return state_of(runner).calls("m1")["count"]
        finally:
            await runner.cleanup()

    assert asyncio.run(once()) == 1
    assert asyncio.run(once()) == 1
    asyncio.run(t.aclose())


async def test_the_shared_transport_of_the_request_path_pools_connections(mock):
    """The process's transport (what the gateway sends through) keeps one connection per upstream."""
    singleton = current().transport
    try:
        for _ in range(3):
            resp = await post(singleton, mock)
            assert resp.status == 200
            await resp.read()
            await resp.close()
    finally:
        await singleton.aclose()
    peers = {r["peer"] for r in mock.state.calls("m1")["requests"]}
    assert len(peers) == 1


async def _until_done(chunks):
    """A translator's way: read until the protocol's last event, then stop (the transfer may go on)."""
    async for chunk in chunks:
        yield chunk
        if b"[DONE]" in chunk:
            return


async def test_a_stream_read_to_its_protocol_end_keeps_its_pooled_connection(mock, transport):
    mock.state.model("m1").then = {"frames": 3, "frame_delay_ms": 5}
    for _ in range(3):
        resp = await post(transport, mock, STREAM)
        body = b"".join([chunk async for chunk in _until_done(resp.iter_chunks())])
        assert body.rstrip().endswith(b"data: [DONE]")
        await asyncio.sleep(0)  # the abandoned chunk iterator's finaliser runs: it must not close
        await resp.close(drain_s=1.0)
    peers = {r["peer"] for r in mock.state.calls("m1")["requests"]}
    assert len(peers) == 1, "each stream after the first paid a new connection"
