"""The gateway's own ASGI handler for /v1/* and /health* (the request path).

It sits ahead of Django's handler (see gateway_project.asgi) and reads only the
in-memory snapshot: authentication, model selection, org policy, chain and
preflight are lookups and pure functions; the executor carries the call across
retries and fallbacks (routing.gateway.proxy); the upstream answer is relayed as
bytes. The process's parts (executor, listeners, background tasks) come from the
composition root, routing.ops.wiring.
"""

from __future__ import annotations

import asyncio
import logging
import time

from django.conf import settings

from policies.decision import decide, select_model_name
from providers.health import health_providers_payload
from routing.config import live
from routing.core import errors
from routing.core.errors import GatewayError
from routing.gateway import caching, limiting, messages, openapi, request, shapes
from routing.gateway.pacing import Pacer
from routing.gateway.proxy import proxy_idempotent, proxy_once, proxy_stream
from routing.gateway.wire import (
    JSON,
    ClientGone,
    Receive,
    Scope,
    Send,
    read_body,
    send_error,
    send_response,
    watch_disconnect,
    worker_header,
)
from routing.ops import accounting, bodies, overload, tracing, wiring
from routing.ops.accounting import Context
from routing.ops.dashboard.processes import tally
from routing.plan import cache_key, chain, preflight

log = logging.getLogger("switchboard.requests")

_HEALTH_BODY = b'{"status":"ok"}'
_monotonic = time.monotonic
_perf = time.perf_counter
_pacer: Pacer | None = None


def _make_pacer() -> Pacer:
    global _pacer
    _pacer = Pacer(settings.SWITCHBOARD_REQUESTS_PER_TICK, lambda: tally.in_flight)
    return _pacer


async def gateway_application(scope: Scope, receive: Receive, send: Send) -> None:
    process = wiring.start()
    path = scope["path"]
    if path == "/health":
        await send_response(send, 200, _HEALTH_BODY, [JSON, worker_header()])
        return
    if path == "/health/providers":
        await send_response(send, 200, health_providers_payload(live.current()), [JSON, worker_header()])
        return
    if path == openapi.PATH:  # the API's own description, no key needed (docs/api.md#openapi)
        await send_response(send, 200, openapi.body(), [JSON, (b"access-control-allow-origin", b"*")])
        return
    started = _perf()
    pacer = _pacer or _make_pacer()
    if pacer.per_tick > 0 and not pacer.admit_now():  # a burst: the loop polls between (pacing.py)
        await pacer.wait()
    auth = request_id = idempotency_key = x_api_key = cache_control = b""
    content_length = auth_headers = -1
    for name, value in scope["headers"]:
        if name == b"authorization":
            auth = value
            auth_headers += 1
        elif name == b"x-request-id":
            request_id = value
        elif name == b"content-length":
            content_length = int(value) if value.isdigit() else -1
        elif name == b"idempotency-key":
            idempotency_key = value
        elif name == b"x-api-key":
            x_api_key = value
        elif name == b"cache-control":
            cache_control = value
    ctx = Context(request.request_id(request_id), started, request.endpoint_of(path))
    if tracing.ON:  # off: this test is all tracing costs (docs/tracing.md)
        ctx.trace = tracing.start(scope, scope["method"], path, ctx.request_id)
    anthropic = ctx.endpoint in messages.ENDPOINTS
    if anthropic:
        auth = messages.credential(auth, x_api_key)
    tally.in_flight += 1  # the dashboard's process list (docs/scale-out.md#processes)
    send = answered = _RecordFirst(send, ctx)
    try:
        if auth_headers > 0:
            raise errors.duplicate_authorization()
        await _handle(process, ctx, scope, receive, send, path, auth, content_length, idempotency_key, cache_control)
    except GatewayError as exc:
        ctx.status, ctx.error_code = exc.status, exc.code
        await send_error(send, ctx, exc, messages.error_answer(ctx, exc) if anthropic else None)
    except (ClientGone, asyncio.CancelledError):
        if not ctx.disconnected:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        ctx.status, ctx.error_code = 499, "client_closed_request"
    except Exception:
        log.exception("unexpected error serving %s (request %s)", path, ctx.request_id)
        exc = errors.internal_error(ctx.request_id)
        ctx.status, ctx.error_code = 500, "internal_error"
        await send_error(send, ctx, exc, messages.error_answer(ctx, exc) if anthropic else None)
    finally:
        tally.in_flight -= 1
        tally.served += 1
        if not answered.accounted and ctx.endpoint != "unknown" and ctx.status:
            _account(ctx)  # a committed stream's end, or no answer went out (the client left first)
        if ctx.trace is not None:
            tracing.finish(ctx.trace, ctx)


async def lifespan_application(scope: Scope, receive: Receive, send: Send) -> None:
    """Minimal lifespan support for servers that send it (uvicorn, granian)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            wiring.start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await wiring.shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _handle(
    process: wiring.Process,
    ctx: Context,
    scope: Scope,
    receive: Receive,
    send: Send,
    path: str,
    auth: bytes,
    content_length: int,
    idempotency_key: bytes,
    cache_control: bytes = b"",
) -> None:
    method = scope["method"]
    if ctx.endpoint == "unknown":
        raise errors.not_found_endpoint(path)
    if content_length > settings.SWITCHBOARD_MAX_BODY_BYTES:  # before the key: nothing of it is read
        raise errors.request_too_large(settings.SWITCHBOARD_MAX_BODY_BYTES)
    snap = live.current()
    key = request.authenticate(snap, auth)
    ctx.key = key
    if ctx.endpoint == "models":
        if method != "GET":
            raise errors.method_not_allowed(method, path, "GET")
        ctx.status = 200
        await send_response(
            send,
            200,
            request.models_payload(snap, key.agent.org, key),
            [JSON, (b"x-request-id", ctx.request_id.encode())],
        )
        return
    if method != "POST":
        raise errors.method_not_allowed(method, path, "POST")

    raw = await read_body(receive, content_length, ctx, settings.SWITCHBOARD_MAX_BODY_BYTES)
    body = request.parse_body(raw)
    kind = ctx.endpoint
    shape = None
    if kind in messages.ENDPOINTS:  # Anthropic Messages: checked, then served as chat
        body, shape, kind = messages.chat_body(kind, body, raw), messages.Shape(body, scope), "chat"
    shapes.check(kind, body, raw)

    agent = key.agent
    org = agent.org
    if overload.ON:  # priority class and max wait for the deployments' queues (docs/overload.md)
        overload.admit(scope["headers"], key, body)
    if org.log_bodies or settings.SWITCHBOARD_LOG_BODIES:  # opted in: docs/operations.md#bodies
        ctx.request_body = bodies.capture(raw)
    name = select_model_name(body.get("model"), agent)
    ctx.requested = name
    model = snap.resolve(name)
    if model is None:
        raise errors.model_not_found(name)
    ctx.resolved = model.id
    if not decide(snap, org, model.id).allowed:
        raise errors.model_denied(model.id)
    if key.models is not None and not key.allows(name, model.id):  # the key narrows its org (docs/limits.md#keys)
        raise errors.key_model_denied(name)
    if ctx.endpoint == "count_tokens":
        await messages.send_count(send, ctx, body)
        return

    stream = body.get("stream", False) is True
    if stream and kind == "responses":
        raise errors.streaming_not_supported(path)
    if kind in ("embeddings", "rerank"):
        stream = False
    if stream and idempotency_key:
        raise errors.idempotency_stream_conflict()

    req = preflight.requirements(kind, body)
    ctx.requirements = req
    built = chain.build_chain(snap, org, model, name)
    if key.models is not None:
        built = chain.narrow_to_key(built, key.allows)
    links = preflight.apply(built, req)
    if all(link.skip_reason is not None for link in links):
        raise preflight.no_link_error(links, req)
    try:
        ticket = limiting.admit(process.limiter, ctx, key, model, req)
    except limiting.LeaseNeeded:  # shared limits: only this process's share was short
        ticket = await limiting.admit_after_lease(process.limiter, ctx, key, model, req)
    plan = cache_key.plan(
        ctx.endpoint, org.name, model.id, model.upstream_model, model.cache_ttl_s, body, stream,
        bool(idempotency_key), cache_control,
    )  # fmt: skip
    if plan is not None and not plan.key:
        ctx.cache = cache_key.BYPASS  # a stream, an Idempotency-Key call, another endpoint (docs/cache.md)

    executor = process.executor
    hold = None
    watcher = watch_disconnect(receive, ctx)
    try:
        if agent.budget is not None or org.budget is not None or key.budget is not None:  # docs/limits.md#budgets
            hold = await limiting.reserve(process.budgets, key, links, req)
        deadline = _monotonic() + links[0].model.timeouts.total_ms / 1000.0
        if stream:
            ctx.streamed = True
            await proxy_stream(executor, ctx, snap, kind, body, links, deadline, send, shape)
        elif idempotency_key and kind == "chat":
            await proxy_idempotent(
                executor,
                ctx,
                snap,
                org,
                kind,
                body,
                raw,
                links,
                deadline,
                send,
                idempotency_key.decode("latin-1"),
                shape,
            )
        elif plan is not None and plan.key:
            status, headers, payload = await caching.serve(
                process.cache, process.coalescer, ctx, plan, links, deadline,
                lambda: proxy_once(executor, ctx, snap, kind, body, links, deadline, shape),
            )  # fmt: skip
            await send_response(send, status, payload, headers)
        else:
            status, headers, payload = await proxy_once(executor, ctx, snap, kind, body, links, deadline, shape)
            if ctx.request_body is not None:
                ctx.response_body = bodies.capture(payload)
            await send_response(send, status, payload, headers)
    finally:
        watcher.cancel()
        if ticket is not None:
            limiting.settle(ticket, ctx)
        if hold is not None:
            limiting.settle_budget(hold, ctx)


class _RecordFirst:
    """The server's `send`, which queues the request's usage record (journaled at once) just before
    the answer's last byte: a process killed right after answering still has the record
    (docs/usage-records.md). After the byte, the scheduler may run the kill first. A committed
    stream was journaled at its commit and is settled when its relay ends, as before."""

    __slots__ = ("accounted", "ctx", "send")

    def __init__(self, send: Send, ctx: Context) -> None:
        self.send = send
        self.ctx = ctx
        self.accounted = False

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body") and not self.accounted:
            ctx = self.ctx
            if ctx.endpoint != "unknown" and ctx.status and not (ctx.streamed and ctx.status == 200):
                self.accounted = True
                _account(ctx)
        await self.send(message)


def _account(ctx: Context) -> None:
    """Usage record, metrics and the request log line: at the answer's last byte (_RecordFirst), never raising."""
    try:
        accounting.finish(ctx)
    except Exception:  # noqa: BLE001
        log.exception("accounting failed for request %s", ctx.request_id)


__all__ = ["gateway_application", "lifespan_application"]
