"""Proxying a request over its chain: once, idempotent, or streamed (docs/resilience.md).

Each mode hands the executor an `attempt(link, deadline)` that makes one upstream
call through the link's dialect; the executor carries retries, breakers and
fallbacks. The answer is relayed as bytes. What the modes share about the request
travels as one `Call`; one upstream try answers with an `Upstream`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from routing.config.snapshot import Snapshot
from routing.core import errors
from routing.core.admission_queue import PriorityTicket
from routing.core.executor import Link, Settlement
from routing.core.failures import FailureKind, UpstreamFailure
from routing.core.limiter import LimitTicket
from routing.core.stream import UsageTap, open_stream
from routing.gateway.model_name import Renamer, renamed, renamer
from routing.gateway.wire import JSON, SSE_HEADERS, Headers, Send, answer_headers, send_response
from routing.plan.cache_key import Plan
from routing.runtime.accounting import Context, journal_stream
from routing.runtime.cluster.idempotency import REPLAY_HEADER
from routing.runtime.observe.tracing import RequestTrace
from routing.runtime.process import Process
from routing.upstream.dialects import Dialect, ParsedResponse, PreparedRequest, get_dialect
from routing.upstream.dialects.error_classes import refine

_monotonic = time.monotonic
_perf = time.perf_counter


class Tap(Protocol):
    """What a stream's committed bytes go through on their way out (routing.core.stream.UsageTap)."""

    prompt_tokens: int | None
    completion_tokens: int | None

    @property
    def final(self) -> bool: ...  # the provider's final usage arrived

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...

    def estimated_completion_tokens(self) -> int: ...  # the tokens relayed, for a stream cut before its usage


class ProtocolHook(Protocol):
    """An endpoint that speaks another API than chat over the same chain (routing.gateway.messages.MessagesHook).

    Per link it may build the upstream request itself (`prepare`, None: the dialect builds
    it from the chat body), and it turns the upstream's answer (`parse`), stream (`chunks`)
    and committed bytes (`tap`) into its own shape.
    """

    def prepare(self, link: Link, stream: bool, body: dict) -> PreparedRequest | None: ...

    def parse(self, dialect: Dialect, link: Link, data: bytes, prepared: PreparedRequest) -> ParsedResponse: ...

    def chunks(self, dialect: Dialect, link: Link, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]: ...

    def tap(self, link: Link, strip: bool) -> Tap: ...


class Call:
    """One client call on its way through the gateway: what admission decided and every proxy mode,
    the response cache and the upstream try read (docs/architecture.md#the-call).

    "Call" is the client's one request, as against an attempt (one upstream try, the executor's
    word). Built once per request by routing.gateway.app, before the key is checked, and filled
    in as admission decides; it replaces the 7 to 12 loose parameters the modes used to pass.
    """

    __slots__ = (
        "ctx",
        "send",
        "process",
        "idempotency_key",
        "cache_control",
        "snap",
        "kind",
        "body",
        "raw",
        "shape",
        "stream",
        "links",
        "deadline",
        "ticket",
        "priority",
        "plan",
    )

    def __init__(
        self, ctx: Context, send: Send, process: Process, idempotency_key: bytes = b"", cache_control: bytes = b""
    ) -> None:
        self.ctx = ctx  # what the request learned, for headers, usage record, metrics and log
        self.send = send  # the ASGI send of the client's connection
        self.process = process  # the long-lived parts: executor, transport, idempotency store, usage sink
        self.idempotency_key = idempotency_key  # the Idempotency-Key header, b"" when none
        self.cache_control = cache_control  # the Cache-Control header, b"" when none
        self.snap: Snapshot = None  # type: ignore[assignment]  # the configuration the request is served by
        self.kind = ctx.endpoint  # the endpoint kind the chain serves ("chat" for Anthropic Messages)
        self.body: dict[str, Any] = None  # type: ignore[assignment]  # the body as the chain serves it
        self.raw = b""  # the body as received
        self.shape: ProtocolHook | None = None  # another API than chat over the same chain (see ProtocolHook)
        self.stream = False
        self.links: list[Link] = []  # the chain after preflight
        self.deadline = 0.0  # the total deadline, on the monotonic clock
        self.ticket: LimitTicket | None = None  # the rate-limit admission, settled once the answer is known
        self.priority: PriorityTicket | None = None  # class, org weight and max wait in the deployments' queues
        self.plan: Plan | None = None  # the response cache's plan; None: the model is not cached


class Upstream:
    """One upstream try's answer (`call_upstream`): read for a plain call, open for a stream."""

    __slots__ = ("dialect", "prepared", "response", "data", "phase_end")

    def __init__(
        self, dialect: Dialect, prepared: PreparedRequest, response: Any, data: bytes | None, phase_end: float
    ) -> None:
        self.dialect = dialect
        self.prepared = prepared  # the request as sent (its context parses the answer)
        self.response = response  # the transport's response (closed unless a stream's)
        self.data = data  # the whole answer read; None for a stream
        self.phase_end = phase_end  # when the first-token phase ends (a stream's first frame is due)


async def proxy_once(call: Call) -> tuple[int, Headers, bytes]:
    """Run the chain for a non-streaming call; return (status, headers, body) or raise GatewayError.

    With a `shape`, the request and answer are its (see ProtocolHook).
    """
    ctx, kind, shape = call.ctx, call.kind, call.shape
    trace = ctx.trace

    async def attempt(link: Link, deadline: float) -> Any:
        up = await call_upstream(call, link, call.body, False, deadline)
        if shape is not None:
            return shape.parse(up.dialect, link, up.data, up.prepared)
        return up.dialect.parse_response(kind, up.data, link.model, up.prepared.context)

    outcome = await call.process.executor.run(
        call.links,
        attempt if trace is None else traced(trace, attempt),
        call.snap.resilience,
        call.deadline,
        tokens=_capacity_tokens(ctx, call.links),
        priority=call.priority,
    )
    ctx.outcome = outcome
    if outcome.error is not None:
        raise outcome.error
    parsed = outcome.result
    ctx.status = 200
    ctx.prompt_tokens, ctx.completion_tokens = parsed.usage
    ctx.token_classes = parsed.classes
    return 200, answer_headers(ctx, [JSON]), parsed.body


def as_requested(ctx: Context, payload: bytes) -> bytes:
    """The answer with its `model` named as the client asked (docs/api.md#model-in-answers).

    Applied where an answer leaves, not in `proxy_once`: the response cache stores the upstream's
    bytes, which an alias and its target share, and each hit is named for its own requester."""
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    return payload if link is None else renamed(payload, ctx.requested, link.model.upstream_model)


async def proxy_idempotent(call: Call, key: str) -> None:
    """Replay the stored answer of an Idempotency-Key, or make the call once and store it."""
    ctx, send = call.ctx, call.send
    store = call.process.idempotency
    claim = await store.begin(ctx.key.agent.org.name, key, hashlib.sha256(call.raw).hexdigest())
    if claim.conflict:
        raise errors.idempotency_key_reused()
    if claim.replay is not None:
        status, headers, payload = claim.replay
        ctx.status = status
        await send_response(
            send,
            status,
            payload,
            [
                *headers,
                (REPLAY_HEADER.lower().encode(), b"true"),
                (b"x-request-id", ctx.request_id.encode()),
                *(ctx.ratelimit.headers() if ctx.ratelimit is not None else ()),  # now, not when stored
            ],
        )
        return
    try:
        status, headers, payload = await proxy_once(call)
    except BaseException:
        store.release(claim)
        raise
    payload = as_requested(ctx, payload)  # a replay answers the same body, so the same model name
    kept = [h for h in headers if h[0] != b"x-request-id" and not h[0].startswith(b"x-ratelimit-")]
    store.complete(claim, status, kept, payload)
    await send_response(send, status, payload, headers)


async def proxy_stream(call: Call) -> None:
    """Run the chain until a stream commits, then relay it byte-identical.

    Clients that did not ask for `stream_options.include_usage` still get their tokens
    recorded: the gateway asks upstreams that support it and keeps that one frame back.
    With a `shape`, the request, the stream and its tap are the shape's (see ProtocolHook).
    """
    ctx, send, body, shape = call.ctx, call.send, call.body, call.shape
    options = body.get("stream_options")
    # A Responses stream always ends with its usage (response.completed): nothing to ask for.
    client_asked = call.kind == "responses" or (isinstance(options, dict) and options.get("include_usage") is True)
    with_usage = body if client_asked else {**body, "stream_options": {**(options or {}), "include_usage": True}}

    trace = ctx.trace

    async def attempt(link: Link, deadline: float) -> Any:
        model = link.model
        timeouts = model.timeouts
        send_body = with_usage if get_dialect(model.provider.dialect).stream_usage_option else body
        up = await call_upstream(call, link, send_body, True, deadline)
        response = up.response
        if shape is None:
            chunks = up.dialect.translate_stream(response.iter_chunks(), model)
        else:
            chunks = shape.chunks(up.dialect, link, response.iter_chunks())
        try:
            committed = await open_stream(
                chunks,
                max(0.0, up.phase_end - _monotonic()),
                timeouts.stream_idle_ms / 1000.0,
                deadline,
            )
        except BaseException:
            await response.close()
            raise
        return committed, response

    run = attempt if trace is None else traced(trace, attempt)
    links = call.links
    if call.priority is not None:
        call.priority.discard = _discard  # a stream that loses a hedge race is closed
    outcome = await call.process.executor.run(
        links,
        run,
        call.snap.resilience,
        call.deadline,
        settle_later=True,
        tokens=_capacity_tokens(ctx, links),
        priority=call.priority,
    )
    ctx.outcome = outcome
    if outcome.error is not None:
        raise outcome.error
    committed, response = outcome.result
    ctx.status = 200
    ctx.ttft_s = _perf() - ctx.started
    tap: Tap = UsageTap(strip=not client_asked) if shape is None else shape.tap(outcome.link, not client_asked)
    # journaled from its first frame: a crash leaves it recorded (docs/usage-records.md#streams)
    journal_stream(ctx, call.process.usage)
    answered = False  # the client has the last byte (not gone, no error raised on the way)
    try:
        await send({"type": "http.response.start", "status": 200, "headers": answer_headers(ctx, list(SSE_HEADERS))})
        rename = renamer(ctx.requested, outcome.link.model.upstream_model)
        # A shape holds its own preamble and commits on its first chunk: only a chat stream is split.
        await _relay(send, committed, tap, ctx.journaled, rename, committed.commit_end if shape is None else 0)
        answered = True
    finally:
        ctx.prompt_tokens, ctx.completion_tokens = tap.prompt_tokens, tap.completion_tokens
        ctx.token_classes = getattr(tap, "classes", None)
        if not tap.final:  # cut (client, upstream) or no usage sent: charged for what was relayed
            _estimate_usage(tap, ctx)
        ending = committed.ending
        _settle(outcome.settlement, ending, ctx)
        await committed.aclose()
        # A translated stream ends at its protocol's last event, often before the transfer's end. Never waited
        # for here (a client that leaves on that event would see a 499): a clean, whole answer hands the
        # response to the process's drains, which keep the connection pooled; anything else closes it now.
        if not (answered and ending == "ok" and not response.at_end and call.process.drains.hand_off(response)):
            await response.close()


async def _relay(send: Send, committed: Any, tap: Tap, journaled: Any, rename: Renamer | None, split: int = 0) -> None:
    """The committed stream's bytes to the client through its tap, the model renamed to the one asked for.

    `split`: where the committing frame ends in the first chunk (0: send it whole). When the first
    read brought more than that frame (an upstream faster than the gateway), the frames up to it go
    out first: the first byte does not wait for the rest to be tapped and renamed."""
    async for chunk in committed.relay():
        if split:
            head, chunk, split = chunk[:split], chunk[split:], 0
            await _relay_part(send, head, tap, journaled, rename)
        if journaled is not None:
            journaled.relayed(chunk)  # counted before it is sent
        out = tap.feed(chunk)
        if rename is not None:
            out = rename.feed(out)
        if out:
            await send({"type": "http.response.body", "body": out, "more_body": True})
    last = tap.flush()
    if rename is not None:
        last = rename.feed(last) + rename.flush()
    await send({"type": "http.response.body", "body": last, "more_body": False})


async def _relay_part(send: Send, part: bytes, tap: Tap, journaled: Any, rename: Renamer | None) -> None:
    """One part of a chunk through the tap and the renamer, as `_relay`'s loop does (not its last)."""
    if journaled is not None:
        journaled.relayed(part)
    out = tap.feed(part)
    if rename is not None:
        out = rename.feed(out)
    if out:
        await send({"type": "http.response.body", "body": out, "more_body": True})


async def _discard(result: Any) -> None:
    """Close a committed stream that lost a hedge race (docs/overload.md#hedging)."""
    committed, response = result
    try:
        await committed.aclose()
    finally:
        await response.close()


def _capacity_tokens(ctx: Context, links: list[Link]) -> int:
    """The prompt estimate when a deployment of the chain has a `tpm` capacity, else 0 (not computed).

    docs/deployments.md#capacity: a deployment's tpm counts prompt estimates at pick time.
    """
    for link in links:
        for target in link.deployments:
            if target.tpm is not None:
                req = ctx.requirements
                return req.estimated_tokens if req is not None else 0
    return 0


def _estimate_usage(tap: Tap, ctx: Context) -> None:
    """No final usage from the upstream (none sent, or the stream was cut by the client or a break):
    the provider's prompt count when it came first (Anthropic's message_start), else the prompt
    estimate, and the tokens relayed, marked as estimated (docs/usage-records.md#partial)."""
    req = ctx.requirements
    if ctx.prompt_tokens is None:
        ctx.prompt_tokens = req.estimated_tokens if req is not None else None
    ctx.completion_tokens = max(ctx.completion_tokens or 0, tap.estimated_completion_tokens())
    ctx.tokens_estimated = True


def _settle(settlement: Settlement | None, ending: str | None, ctx: Context) -> None:
    """A stream's breaker charge, at its end (docs/resilience.md#r6): a clean end is the
    success; a break, a silence or a missing terminator is one failure of the link, and
    the usage record keeps the code the client saw in its last frame. A client that went
    away, or the request's own deadline, says nothing about the provider."""
    if settlement is None:
        return
    if ending == "ok":
        settlement.success()
    elif ending is None or ending == "total_timeout":
        settlement.release()
        if ending is not None:
            ctx.error_code = ending
    else:
        settlement.failure()
        ctx.error_code = ending


def traced(trace: RequestTrace, attempt: Callable[[Link, float], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`attempt` inside an attempt span (tracing on only; a stream's attempt ends when it commits)."""

    async def run(link: Link, deadline: float) -> Any:
        trace.begin(link)
        try:
            result = await attempt(link, deadline)
        except BaseException as exc:
            trace.end(exc)
            raise
        trace.end(None, result)
        return result

    return run


def _hook_dropped(call: Call, dropped: tuple[str, ...]) -> None:
    """A hook's link adds the hints its translation dropped (x-switchboard-dropped) to what the hook named
    for it: its prepare sets ctx.dropped per link, and a chat request it builds through the dialect carries
    the dialect's. (A chat call's are its link's alone, set in `call_upstream`: a fallback link starts clean.)"""
    if dropped:
        named = [part for part in call.ctx.dropped.split(", ") if part]
        call.ctx.dropped = ", ".join([*named, *(name for name in dropped if name not in named)])


async def call_upstream(call: Call, link: Link, body: dict, stream: bool, deadline: float) -> Upstream:
    """One upstream try of `call` over `link` under the first-token timeout (capped by the total deadline).

    Non-streaming: the whole answer must arrive within the phase, and is returned read.
    Streaming: the phase covers the status line here; the first frame is awaited by the
    caller until `phase_end`. A non-2xx answer is read and raised as its classified failure.
    `body` is the call's, or a stream's with the usage option added.
    """
    model = link.model
    dialect = get_dialect(model.provider.dialect)
    shape = call.shape
    trace = call.ctx.trace
    prepared = shape.prepare(link, stream, body) if shape is not None else None
    if prepared is None:
        prepared = dialect.build_request(call.kind, body, model, link.base_url, link.api_key, stream)
    if shape is None:  # the hints this link's translation dropped, for x-switchboard-dropped
        call.ctx.dropped = ", ".join(prepared.dropped)
    else:
        _hook_dropped(call, prepared.dropped)
    timeouts = model.timeouts
    headers = prepared.headers if trace is None else {**prepared.headers, **trace.headers}
    phase = timeouts.first_token_ms / 1000.0
    started = _monotonic()
    remaining = deadline - started
    data = None
    try:
        async with asyncio.timeout(min(phase, remaining)):
            if dialect.authorizes:
                prepared = await dialect.authorize(
                    prepared, model.provider, link.api_key, call.process.transport.tokens
                )
                headers = prepared.headers if trace is None else {**prepared.headers, **trace.headers}
            response = await call.process.transport.send(
                model.provider,
                prepared.method,
                prepared.url,
                headers,
                prepared.body,
                timeouts.connect_ms / 1000.0,
            )
            ok = 200 <= response.status < 300
            if trace is not None:
                trace.status = response.status
            if not (stream and ok):
                try:
                    data = await response.read()
                finally:
                    await response.close()
    except TimeoutError:
        if phase < remaining:
            what = "first token" if stream else "complete answer"
            raise UpstreamFailure(
                FailureKind.FIRST_TOKEN_TIMEOUT, f"no {what} from {model.id} within {timeouts.first_token_ms} ms"
            ) from None
        raise
    if not ok:
        body = data or b""
        raise refine(dialect.name, dialect.failure(response.status, response.headers, body), response.status, body)
    return Upstream(dialect, prepared, response, data, started + phase)
