"""The gateway's own ASGI handler for /v1/* and /health* (the request path).

It sits ahead of Django's handler (see gateway_project.asgi) and reads only the
in-memory snapshot: authentication, model selection, org policy, chain and
preflight are lookups and pure functions; the executor carries the call across
retries and fallbacks (routing.gateway.proxy); the upstream answer is relayed as
bytes. The process's parts (executor, transport, stores, background tasks) come from the
composition root, gateway_project.process, whose `make_gateway(process)` calls `serve`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from django.conf import settings

from policies.decision import decide, select_model_name
from routing.config import live
from routing.config.snapshot import ModelSpec
from routing.core import affinity, errors
from routing.core.endpoints import BY_PATH, MULTIPART, Endpoint, route
from routing.core.errors import GatewayError
from routing.gateway import body_schemas, caching, limiting, messages, multipart, openapi, request, responses
from routing.gateway.pacing import Pacer
from routing.gateway.proxy import Call, as_requested, proxy_idempotent, proxy_once, proxy_stream
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
from routing.plan import cache_key, chain, preflight
from routing.runtime import accounting
from routing.runtime.accounting import Context
from routing.runtime.observe import bodies, tracing
from routing.runtime.observe.health import health_providers_payload
from routing.runtime.process import Process

log = logging.getLogger("switchboard.requests")

_HEALTH_BODY = b'{"status":"ok"}'
_monotonic = time.monotonic
_perf = time.perf_counter


async def serve(process: Process, pacer: Pacer, scope: Scope, receive: Receive, send: Send) -> None:
    """One HTTP request to /v1/* or /health*, served with the process's parts."""
    path = scope["path"]
    if path == "/health":
        await send_response(send, 200, _HEALTH_BODY, [JSON, worker_header()])
        return
    if path == "/health/providers":
        await send_response(
            send, 200, health_providers_payload(live.current(), process.breakers), [JSON, worker_header()]
        )
        return
    if path == openapi.PATH:  # the API's own description, no key needed (docs/api.md#openapi)
        await send_response(send, 200, openapi.body(), [JSON, (b"access-control-allow-origin", b"*")])
        return
    started = _perf()
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
    # Its row of the endpoint table (routing.core.endpoints): one dict lookup; /v1/models/{id} a prefix test more.
    endpoint = BY_PATH.get(path) or route(path)
    ctx = Context(request.request_id(request_id), started, "unknown" if endpoint is None else endpoint.kind)
    if process.tracing is not None:  # off: this test is all tracing costs (docs/tracing.md)
        ctx.trace = process.tracing.start(scope, scope["method"], path, ctx.request_id, ctx.endpoint)
    anthropic = endpoint is not None and endpoint.protocol == messages.PROTOCOL  # errors in Anthropic's shape
    if anthropic:
        auth = messages.credential(auth, x_api_key)
    tally = process.tally
    send = answered = _RecordFirst(send, ctx, process)
    call = Call(ctx, send, process, idempotency_key, cache_control)  # the one request object
    tally.in_flight += 1  # the dashboard's process list (docs/scale-out.md#processes)
    try:
        if auth_headers > 0:
            raise errors.duplicate_authorization()
        if await _admit(call, endpoint, scope, receive, auth, content_length):
            await _serve(call, receive)
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
        if answered.elapsed is not None:  # its record went out before the answer's last byte
            _observe(ctx, answered.elapsed, process)
        elif ctx.endpoint != "unknown" and ctx.status:
            _account(ctx, process)  # a committed stream's end, or no answer went out (the client left first)
        if ctx.trace is not None:
            tracing.finish(ctx.trace, ctx)


async def _admit(
    call: Call, endpoint: Endpoint | None, scope: Scope, receive: Receive, auth: bytes, content_length: int
) -> bool:
    """Everything decided before an upstream is called: the key, the body, the model and its policy,
    the chain, the rate limits, the cache plan. False when the request was answered here (the model
    list, a token count: the row's handler); a refusal raises its GatewayError."""
    ctx = call.ctx
    method, path = scope["method"], scope["path"]
    if endpoint is None:
        raise errors.not_found_endpoint(path)
    limit = settings.SWITCHBOARD_MAX_BODY_BYTES  # read once: a lazy setting is a Python call per read
    if content_length > limit:  # before the key: nothing of it is read
        raise errors.request_too_large(limit)
    call.snap = live.current()
    ctx.key = request.authenticate(call.snap, auth)
    if method != endpoint.method:
        raise errors.method_not_allowed(method, path, endpoint.method)
    if endpoint.reader is None:  # no body: answered from the snapshot (the model list, one model)
        await _HANDLERS[endpoint.handler](call, endpoint, path)  # type: ignore[index]
        return False
    await _read(call, endpoint, scope, receive, content_length, limit)
    model = _model(call, scope)
    if endpoint.handler is not None:  # answered here once the model is known (a token count)
        await _HANDLERS[endpoint.handler](call, endpoint, path)
        return False
    stream = call.stream = endpoint.streams and call.body.get("stream", False) is True
    if stream and call.idempotency_key:
        raise errors.idempotency_stream_conflict()
    await _route(call, model)
    if call.snap.affine:  # some model has affinity (docs/deployments.md#affinity): this request's conversation
        pinned = any(link.model.affinity_s for link in call.links)
        original = call.shape.original if call.shape is not None else None
        key = affinity.key_of(scope["headers"], call.body, original) if pinned else None
        # per org: its BYO deployments are its own, and one tenant's keys never move another's pins
        affinity.conversation.set(None if key is None else f"{call.ctx.key.agent.org.name}/{key}")
    return True


async def _read(
    call: Call, endpoint: Endpoint, scope: Scope, receive: Receive, content_length: int, limit: int
) -> None:
    """The body, read within its size `limit` (and the process's body window) by its row's reader (JSON or a
    multipart form) and checked against the schema of the kind it serves; an Anthropic Messages body becomes
    the chat body its MessagesHook serves."""
    ctx = call.ctx
    window_s, min_bytes = call.process.body_window
    raw = call.raw = await read_body(receive, content_length, ctx, limit, window_s, min_bytes)
    if endpoint.reader == MULTIPART:
        await _read_form(call, endpoint, scope, raw)
        return
    body = request.parse_body(raw)
    try:
        if endpoint.protocol == messages.PROTOCOL:  # Anthropic Messages: checked, then served as chat
            shape = messages.MessagesHook(body, raw, scope, ctx)
            body, call.shape = messages.chat_body(endpoint.kind, body, raw, shape.gaps), shape
        call.kind = endpoint.serves  # type: ignore[assignment]  # a row with a body is served as a kind
        body_schemas.check(call.kind, body, raw)
        if endpoint.protocol == responses.PROTOCOL:  # relayed or translated per link (routing.gateway.responses)
            call.shape = responses.ResponsesHook(body, ctx)
    except GatewayError:
        ctx.requested = request.named_model(body)  # the log and usage record say which model was asked for
        raise
    call.body = body


async def _read_form(call: Call, endpoint: Endpoint, scope: Scope, raw: bytes) -> None:
    """A multipart/form-data body (routing.gateway.multipart): its fields and files as the body, checked
    against the schema of the kind it serves (a form is flat: no depth check)."""
    content_type = next((value for name, value in scope["headers"] if name == b"content-type"), b"")
    body = multipart.read_form(raw, content_type)
    call.kind = endpoint.serves  # type: ignore[assignment]
    try:
        body_schemas.check_fields(call.kind, body)
    except GatewayError:
        call.ctx.requested = request.named_model(body)
        raise
    call.body = body


async def _answer_models(call: Call, endpoint: Endpoint, path: str) -> None:
    """GET /v1/models: the models and aliases the key may use."""
    key = call.ctx.key
    await _answer(call, request.models_payload(call.snap, key.agent.org, key))


async def _answer_model(call: Call, endpoint: Endpoint, path: str) -> None:
    """GET /v1/models/{model}: one of them (the id may hold a "/"), or 404 model_not_found."""
    key = call.ctx.key
    name = path[len(endpoint.prefix or "") :]
    await _answer(call, request.model_payload(call.snap, key.agent.org, key, name))


async def _answer(call: Call, payload: bytes) -> None:
    call.ctx.status = 200
    await send_response(call.send, 200, payload, [JSON, (b"x-request-id", call.ctx.request_id.encode())])


async def _count_tokens(call: Call, endpoint: Endpoint, path: str) -> None:
    """POST /v1/messages/count_tokens: the preflight estimate, no upstream call."""
    await messages.send_count(call.send, call.ctx, call.body)


# The gateway's own answers, by the name an endpoint row's `handler` gives (routing.core.endpoints).
_HANDLERS: dict[str, Callable[[Call, Endpoint, str], Awaitable[None]]] = {
    "models": _answer_models,
    "model": _answer_model,
    "count_tokens": _count_tokens,
}


def _model(call: Call, scope: Scope) -> ModelSpec:
    """The model the request names (or its agent's default), if it exists and the org and key allow it."""
    ctx, body = call.ctx, call.body
    key = ctx.key
    agent = key.agent
    org = agent.org
    if call.process.overload.on:  # priority class and max wait for the deployments' queues (docs/overload.md)
        call.priority = call.process.overload.admit(scope["headers"], key, body)
    if org.log_bodies or settings.SWITCHBOARD_LOG_BODIES:  # opted in: docs/operations.md#bodies
        ctx.request_body = bodies.capture(call.raw)
    name = select_model_name(body.get("model"), agent)
    ctx.requested = name
    model = call.snap.resolve(name)
    if model is None:
        raise errors.model_not_found(name)
    ctx.resolved = model.id
    if not decide(call.snap, org, model.id).allowed:
        raise errors.model_denied(model.id)
    if key.models is not None and not key.allows(name, model.id):  # the key narrows its org (docs/limits.md#keys)
        raise errors.key_model_denied(name)
    return model


async def _route(call: Call, model: ModelSpec) -> None:
    """The chain after preflight, the rate limits' ticket and the cache plan."""
    ctx = call.ctx
    key = ctx.key
    org = key.agent.org
    req = ctx.requirements = preflight.requirements(call.kind, call.body)
    built = chain.build_chain(call.snap, org, model, ctx.requested)
    if key.models is not None:
        built = chain.narrow_to_key(built, key.allows)
    links = call.links = preflight.apply(built, req)
    for link in links:  # a link preflight kept (a loop: no generator frame per request)
        if link.skip_reason is None:
            break
    else:
        raise preflight.no_link_error(links, req)
    try:
        call.ticket = limiting.admit(call.process.limiter, ctx, key, model, req, call.process.syncer)
    except limiting.LeaseNeeded:  # shared limits: only this process's share was short
        call.ticket = await limiting.admit_after_lease(call.process.limiter, ctx, key, model, req, call.process.syncer)
    if model.cache_ttl_s is None:  # no cache (docs/cache.md): `cache_key.plan`'s first test, without its call
        return
    plan = call.plan = cache_key.plan(
        ctx.endpoint, org.name, model, call.body, call.stream, bool(call.idempotency_key), call.cache_control
    )
    if plan is not None and not plan.key:
        ctx.cache = cache_key.BYPASS  # a stream, an Idempotency-Key call, another endpoint (docs/cache.md)


async def _serve(call: Call, receive: Receive) -> None:
    """Serve an admitted call: its budget hold, then the chain as a stream, an idempotent call, through the
    response cache, or once; the rate-limit ticket and the budget hold are settled whatever happens."""
    ctx, process = call.ctx, call.process
    key = ctx.key
    agent = key.agent
    org = agent.org
    hold = None
    watcher = watch_disconnect(receive, ctx)
    try:
        if agent.budget is not None or org.budget is not None or key.budget is not None:  # docs/limits.md#budgets
            hold = await limiting.reserve(
                process.budgets, key, call.links, ctx.requirements, process.syncer, process.spend
            )
        call.deadline = _monotonic() + call.links[0].model.timeouts.total_ms / 1000.0
        plan = call.plan
        if call.stream:
            ctx.streamed = True
            await proxy_stream(call)
        elif call.idempotency_key and call.kind == "chat":
            await proxy_idempotent(call, call.idempotency_key.decode("latin-1"))
        elif plan is not None and plan.key:
            status, headers, payload = await caching.serve(
                process.cache, process.coalescer, call, lambda: proxy_once(call)
            )
            await send_response(call.send, status, as_requested(ctx, payload), headers)
        else:
            status, headers, payload = await proxy_once(call)
            payload = as_requested(ctx, payload)
            if ctx.request_body is not None:
                ctx.response_body = bodies.capture(payload)
            await send_response(call.send, status, payload, headers)
    finally:
        watcher.cancel()
        if call.ticket is not None:
            limiting.settle(call.ticket, ctx)
        if hold is not None:
            limiting.settle_budget(hold, ctx)


class _RecordFirst:
    """The server's `send`, which queues the request's usage record (journaled at once) just before
    the answer's last byte: a process killed right after answering still has the record
    (docs/usage-records.md). After the byte, the scheduler may run the kill first. Only the record
    goes first; metrics and the log line follow the answer (`elapsed` set says the record went).
    A committed stream was journaled at its commit and is settled when its relay ends, as before."""

    __slots__ = ("ctx", "elapsed", "process", "send")

    def __init__(self, send: Send, ctx: Context, process: Process) -> None:
        self.send = send
        self.ctx = ctx
        self.process = process
        self.elapsed: float | None = None

    def __call__(self, message: dict) -> Awaitable[None]:
        # Not a coroutine: it hands back the server's own awaitable, so wrapping costs one plain call
        # per message and no extra coroutine frame (docs/performance.md#calls).
        if message["type"] == "http.response.body" and not message.get("more_body") and self.elapsed is None:
            ctx = self.ctx
            if ctx.endpoint != "unknown" and ctx.status and not (ctx.streamed and ctx.status == 200):
                self.elapsed = elapsed = time.perf_counter() - ctx.started
                try:
                    accounting.record(ctx, self.process.usage, elapsed)
                except Exception:  # noqa: BLE001
                    log.exception("usage record failed for request %s", ctx.request_id)
        return self.send(message)


def _account(ctx: Context, process: Process) -> None:
    """Usage record, metrics and the request log line, never raising: a request whose record did not
    go out before its last byte (_RecordFirst): a stream's end, or a client that left first."""
    try:
        accounting.finish(ctx, process.usage, process.counters)
    except Exception:  # noqa: BLE001
        log.exception("accounting failed for request %s", ctx.request_id)


def _observe(ctx: Context, elapsed: float, process: Process) -> None:
    """Metrics, the process's counters and the log line of a request whose record went before its answer's
    last byte."""
    try:
        accounting.observe(ctx, elapsed, process.counters)
    except Exception:  # noqa: BLE001
        log.exception("accounting failed for request %s", ctx.request_id)


__all__ = ["serve"]
