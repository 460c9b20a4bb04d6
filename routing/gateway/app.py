"""The gateway's own ASGI handler for /v1/* and /health* (the request path).

It sits ahead of Django's handler (see gateway_project.asgi) and reads only the
in-memory snapshot: authentication, model selection, org policy, chain and
preflight are lookups and pure functions; the generic executor carries the call
across retries and fallbacks; the upstream answer is relayed as bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import uuid
from typing import Any

import orjson
from django.conf import settings

from policies.decision import decide, select_model_name
from providers.dialects import get_dialect
from providers.transport import transport
from routing.config import live
from routing.config.snapshot import KeySpec, OrgSpec, Snapshot
from routing.core import errors
from routing.core.breaker import registry as breakers
from routing.core.errors import FailureKind, GatewayError, UpstreamFailure, failure_from_response
from routing.core.executor import Executor, Link, Outcome
from routing.core.retry_budget import budgets
from routing.core.stream import open_stream
from routing.gateway import shapes
from routing.ops import background
from routing.plan import chain, preflight

log = logging.getLogger("switchboard.requests")

ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/v1/responses": "responses",
}
ENDPOINTS = "POST /v1/chat/completions, /v1/embeddings, /v1/rerank, /v1/responses and GET /v1/models"
_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_HEALTH_BODY = b'{"status":"ok"}'
_REQUEST_ID_JUNK = re.compile(r"[^A-Za-z0-9._:\-]")
_monotonic = time.monotonic
_perf = time.perf_counter


class ClientGone(Exception):
    """The client disconnected before the answer was sent."""


class Context:
    """What one request learned on its way, for headers, usage record, metrics and log."""

    __slots__ = (
        "request_id",
        "started",
        "endpoint",
        "key",
        "requested",
        "resolved",
        "outcome",
        "status",
        "error_code",
        "prompt_tokens",
        "completion_tokens",
        "ttft_s",
        "streamed",
        "disconnected",
        "upstream_s",
    )

    def __init__(self, request_id: str, started: float, endpoint: str) -> None:
        self.request_id = request_id
        self.started = started
        self.endpoint = endpoint
        self.key: KeySpec | None = None
        self.requested = ""
        self.resolved = ""
        self.outcome: Outcome | None = None
        self.status = 0
        self.error_code = ""
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.ttft_s: float | None = None
        self.streamed = False
        self.disconnected = False
        self.upstream_s = 0.0


executor = Executor(breakers, budgets)


def _install_observer() -> None:
    try:
        from routing.ops.metrics import MetricsObserver
    except ImportError:  # pragma: no cover
        return
    executor.observer = MetricsObserver()


_install_observer()


# --------------------------------------------------------------------------- entry


async def gateway_application(scope: dict, receive: Any, send: Any) -> None:
    background.ensure_started()
    path = scope["path"]
    if path == "/health":
        await _send(send, 200, _HEALTH_BODY, [_JSON])
        return
    if path == "/health/providers":
        from providers.health import health_providers_payload

        await _send(send, 200, health_providers_payload(live.current()), [_JSON])
        return

    started = _perf()
    auth = request_id = idempotency_key = b""
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
    ctx = Context(_request_id(request_id), started, ROUTES.get(path, "models" if path == "/v1/models" else "unknown"))
    try:
        if auth_headers > 0:
            raise errors.duplicate_authorization()
        await _handle(ctx, scope, receive, send, path, auth, content_length, idempotency_key)
    except GatewayError as exc:
        ctx.status, ctx.error_code = exc.status, exc.code
        await _send_error(send, ctx, exc)
    except (ClientGone, asyncio.CancelledError):
        if not ctx.disconnected:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        ctx.status, ctx.error_code = 499, "client_closed_request"
    except Exception:
        log.exception("unexpected error serving %s (request %s)", path, ctx.request_id)
        exc = GatewayError(
            500,
            "internal_error",
            f"The gateway failed unexpectedly; quote request id {ctx.request_id} to the operator.",
            type="server_error",
        )
        ctx.status, ctx.error_code = 500, "internal_error"
        await _send_error(send, ctx, exc)
    finally:
        if ctx.endpoint != "unknown" and ctx.status:
            _account(ctx)


async def lifespan_application(scope: dict, receive: Any, send: Any) -> None:
    """Minimal lifespan support for servers that send it (uvicorn, granian)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            background.ensure_started()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await background.shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


# --------------------------------------------------------------------------- request


async def _handle(
    ctx: Context,
    scope: dict,
    receive: Any,
    send: Any,
    path: str,
    auth: bytes,
    content_length: int,
    idempotency_key: bytes,
) -> None:
    method = scope["method"]
    if ctx.endpoint == "unknown":
        raise errors.endpoint_not_found(path, ENDPOINTS)
    snap = live.current()
    key = _authenticate(snap, auth)
    ctx.key = key
    if ctx.endpoint == "models":
        if method != "GET":
            raise GatewayError(405, "method_not_allowed", "Use GET for /v1/models.")
        ctx.status = 200
        await _send(
            send, 200, _models_payload(snap, key.agent.org), [_JSON, (b"x-request-id", ctx.request_id.encode())]
        )
        return
    if method != "POST":
        raise GatewayError(405, "method_not_allowed", f"Use POST for {path}.")

    raw = await _read_body(receive, content_length, ctx)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(
            400, "invalid_request", f"The request body is not valid JSON ({exc}). Send a JSON object."
        ) from None
    if not isinstance(body, dict):
        raise GatewayError(400, "invalid_request", "The request body must be a JSON object.")
    kind = ctx.endpoint
    shapes.check(kind, body, raw)

    agent = key.agent
    org = agent.org
    name = select_model_name(body.get("model"), agent)
    ctx.requested = name
    model = snap.resolve(name)
    if model is None:
        raise GatewayError(
            404,
            "model_not_found",
            f"The model '{name}' does not exist. GET /v1/models lists the models you may use.",
            param="model",
        )
    ctx.resolved = model.id
    if not decide(snap, org, model.id).allowed:
        raise GatewayError(
            403,
            "model_denied",
            f"Your organisation's policy does not allow model '{model.id}'. Ask your administrator, or pick another model from GET /v1/models.",
            param="model",
        )

    stream = body.get("stream", False) is True
    if stream and kind == "responses":
        raise GatewayError(
            400,
            "unsupported_capability",
            'Streaming is not supported on /v1/responses; send "stream": false.',
            param="stream",
        )
    if kind in ("embeddings", "rerank"):
        stream = False
    if stream and idempotency_key:
        raise GatewayError(
            400,
            "idempotency_stream_conflict",
            'Idempotency-Key cannot be used with a streaming request; drop the header or send "stream": false.',
        )

    req = preflight.requirements(kind, body)
    links = preflight.apply(chain.build_chain(snap, org, model, name), req)
    if all(link.skip_reason is not None for link in links):
        raise preflight.no_link_error(links, req)

    deadline = _monotonic() + links[0].model.timeouts.total_ms / 1000.0
    watcher = _watch_disconnect(receive, ctx)
    try:
        if stream:
            ctx.streamed = True
            await _proxy_stream(ctx, snap, kind, body, links, deadline, send)
        elif idempotency_key and kind == "chat":
            await _proxy_idempotent(
                ctx, snap, org, kind, body, raw, links, deadline, send, idempotency_key.decode("latin-1")
            )
        else:
            status, headers, payload = await _proxy_once(ctx, snap, kind, body, links, deadline)
            await _send(send, status, payload, headers)
    finally:
        watcher.cancel()


async def _proxy_once(
    ctx: Context, snap: Snapshot, kind: str, body: dict, links: list[Link], deadline: float
) -> tuple[int, list, bytes]:
    """Run the chain for a non-streaming call; return (status, headers, body) or raise GatewayError."""

    async def attempt(link: Link, deadline: float) -> Any:
        dialect, prepared, _, data, _ = await _call_upstream(link, kind, body, False, deadline)
        return dialect.parse_response(kind, data, link.model, prepared.context)

    outcome = await executor.run(links, attempt, snap.resilience, deadline)
    ctx.outcome = outcome
    if outcome.error is not None:
        raise outcome.error
    parsed = outcome.result
    ctx.status = 200
    ctx.prompt_tokens, ctx.completion_tokens = parsed.usage
    return 200, _answer_headers(ctx, [_JSON]), parsed.body


async def _proxy_idempotent(
    ctx: Context,
    snap: Snapshot,
    org: OrgSpec,
    kind: str,
    body: dict,
    raw: bytes,
    links: list[Link],
    deadline: float,
    send: Any,
    key: str,
) -> None:
    from policies.idempotency import REPLAY_HEADER, store

    claim = await store.begin(org.name, key, hashlib.sha256(raw).hexdigest())
    if claim.conflict:
        raise GatewayError(
            409,
            "idempotency_key_reused",
            "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
        )
    if claim.replay is not None:
        status, headers, payload = claim.replay
        ctx.status = status
        await _send(
            send,
            status,
            payload,
            [*headers, (REPLAY_HEADER.lower().encode(), b"true"), (b"x-request-id", ctx.request_id.encode())],
        )
        return
    try:
        status, headers, payload = await _proxy_once(ctx, snap, kind, body, links, deadline)
    except BaseException:
        store.release(claim)
        raise
    store.complete(claim, status, [h for h in headers if h[0] != b"x-request-id"], payload)
    await _send(send, status, payload, headers)


async def _proxy_stream(
    ctx: Context, snap: Snapshot, kind: str, body: dict, links: list[Link], deadline: float, send: Any
) -> None:
    """Run the chain until a stream commits, then relay it byte-identical."""

    async def attempt(link: Link, deadline: float) -> Any:
        model = link.model
        timeouts = model.timeouts
        dialect, _, response, _, phase_end = await _call_upstream(link, kind, body, True, deadline)
        try:
            committed = await open_stream(
                dialect.translate_stream(response.iter_chunks(), model),
                max(0.0, phase_end - _monotonic()),
                timeouts.stream_idle_ms / 1000.0,
                deadline,
            )
        except BaseException:
            await response.close()
            raise
        return committed, response

    outcome = await executor.run(links, attempt, snap.resilience, deadline)
    ctx.outcome = outcome
    if outcome.error is not None:
        raise outcome.error
    committed, response = outcome.result
    ctx.status = 200
    ctx.ttft_s = _perf() - ctx.started
    try:
        await send({"type": "http.response.start", "status": 200, "headers": _answer_headers(ctx, list(_SSE_HEADERS))})
        async for chunk in committed.relay():
            if b'"usage"' in chunk:
                _sniff_usage(chunk, ctx)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await committed.aclose()
        await response.close()


# --------------------------------------------------------------------------- helpers


async def _call_upstream(
    link: Link, kind: str, body: dict, stream: bool, deadline: float
) -> tuple[Any, Any, Any, bytes | None, float]:
    """One upstream try under the first-token timeout (capped by the total deadline).

    Non-streaming: the whole answer must arrive within the phase, and is returned read.
    Streaming: the phase covers the status line here; the first frame is awaited by the
    caller until `phase_end`. A non-2xx answer is read and raised as its classified failure.
    Returns (dialect, prepared request, response, body or None, phase_end).
    """
    model = link.model
    dialect = get_dialect(model.provider.dialect)
    prepared = dialect.build_request(kind, body, model, link.base_url, link.api_key, stream)
    timeouts = model.timeouts
    phase = timeouts.first_token_ms / 1000.0
    started = _monotonic()
    remaining = deadline - started
    data = None
    try:
        async with asyncio.timeout(min(phase, remaining)):
            response = await transport.send(
                model.provider,
                prepared.method,
                prepared.url,
                prepared.headers,
                prepared.body,
                timeouts.connect_ms / 1000.0,
            )
            ok = 200 <= response.status < 300
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
        raise failure_from_response(response.status, response.headers, data or b"")
    return dialect, prepared, response, data, started + phase


def _sniff_usage(chunk: bytes, ctx: Context) -> None:
    """Take token counts from a relayed usage frame without touching the bytes sent.

    Upstreams send one when the client asked (`stream_options.include_usage`); the
    anthropic dialect always does. Only chunks that mention "usage" are parsed.
    """
    for line in chunk.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        try:
            usage = orjson.loads(line[6:]).get("usage")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            ctx.prompt_tokens = usage["prompt_tokens"]
            ctx.completion_tokens = usage.get("completion_tokens")


def _authenticate(snap: Snapshot, auth: bytes) -> KeySpec:
    if not auth[:7].lower() == b"bearer ":
        raise GatewayError(
            401, "invalid_api_key", "Missing API key. Send 'Authorization: Bearer <key>'.", type="authentication_error"
        )
    digest = hashlib.sha256(auth[7:].strip()).hexdigest()
    key = snap.keys.get(digest)
    if key is None:
        raise GatewayError(
            401,
            "invalid_api_key",
            "The API key is unknown or revoked. Check the key, or ask your administrator for a new one.",
            type="authentication_error",
        )
    if key.expires_at is not None and key.expires_at <= time.time():
        raise GatewayError(
            401,
            "invalid_api_key",
            "The API key has expired. Ask your administrator for a new one.",
            type="authentication_error",
        )
    return key


def _request_id(raw: bytes) -> str:
    if raw:
        cleaned = _REQUEST_ID_JUNK.sub("", raw.decode("latin-1"))[:128]
        if cleaned:
            return cleaned
    return uuid.uuid4().hex


async def _read_body(receive: Any, content_length: int, ctx: Context) -> bytes:
    limit = settings.SWITCHBOARD_MAX_BODY_BYTES
    if content_length > limit:
        raise _too_large(limit)
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ctx.disconnected = True
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, "request_too_large", f"The request body is larger than {limit} bytes; send a smaller request."
    )


def _watch_disconnect(receive: Any, ctx: Context) -> asyncio.Task:
    """Cancel the request task as soon as the client goes away (R7)."""
    task = asyncio.current_task()

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                ctx.disconnected = True
                if task is not None:
                    task.cancel()
                return

    return asyncio.get_running_loop().create_task(watch())


def _models_payload(snap: Snapshot, org: OrgSpec) -> bytes:
    cache_key = ("models-list", org.name)
    payload = snap.cache.get(cache_key)
    if payload is None:
        data = []
        for model in snap.models.values():
            if decide(snap, org, model.id).allowed:
                data.append({"id": model.id, "object": "model", "created": 0, "owned_by": model.provider.name})
        for alias, target in snap.aliases.items():
            model = snap.models.get(target)
            if model is not None and decide(snap, org, model.id).allowed:
                data.append(
                    {
                        "id": alias,
                        "object": "model",
                        "created": 0,
                        "owned_by": model.provider.name,
                        "alias_of": model.id,
                    }
                )
        payload = orjson.dumps({"object": "list", "data": data})
        snap.cache[cache_key] = payload
    return payload


def _answer_headers(ctx: Context, headers: list) -> list:
    headers.append((b"x-request-id", ctx.request_id.encode()))
    outcome = ctx.outcome
    if outcome is not None:
        link = outcome.link
        if link is not None:
            headers.append((b"x-switchboard-model-used", link.model.id.encode()))
            headers.append((b"x-switchboard-provider-used", link.model.provider.name.encode()))
        headers.append((b"x-switchboard-attempts", str(outcome.attempts).encode()))
        if outcome.fallback_reason and outcome.error is None:
            headers.append((b"x-switchboard-fallback", outcome.fallback_reason.encode()))
    return headers


async def _send(send: Any, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Any, ctx: Context, exc: GatewayError) -> None:
    headers = _answer_headers(ctx, [_JSON])
    for name, value in (exc.headers or {}).items():
        headers.append((name.lower().encode(), str(value).encode()))
    try:
        await _send(send, exc.status, exc.body(), headers)
    except Exception:  # noqa: BLE001 - the client is gone; nothing to tell it
        pass


def _account(ctx: Context) -> None:
    """Usage record, metrics and the request log line: after the answer, never raising."""
    try:
        from routing.ops import accounting

        accounting.finish(ctx)
    except Exception:  # noqa: BLE001
        log.exception("accounting failed for request %s", ctx.request_id)


__all__ = ["Context", "gateway_application", "lifespan_application"]
