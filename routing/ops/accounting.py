"""After the answer: one usage record, the request metrics, and (via the usage writer) the log line.

Called once per proxied request from routing.gateway.app (which fills the `Context`); only enqueues and bumps
counters, so it costs the request path a few microseconds.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from routing.config.snapshot import KeySpec
from routing.core.executor import Outcome
from routing.ops import metrics, usage

_perf = time.perf_counter


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
        "ratelimit",
        "requirements",
        "tokens_estimated",
        "cache",
        "trace",
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
        self.ratelimit: Any = None  # a routing.plan.limits.Ticket when the caller has limits
        self.requirements: Any = None  # the preflight Requirements (its prompt estimate), once known
        self.tokens_estimated = False  # the tokens are the gateway's estimate: the upstream sent no usage
        self.cache = ""  # a cached model's hit|miss|bypass|coalesced (docs/cache.md); "" otherwise
        self.trace: Any = None  # a routing.ops.tracing.RequestTrace when tracing is on (docs/tracing.md)


def finish(ctx: Context) -> None:
    """Record one finished request: metrics now, the usage record queued for the writer."""
    elapsed = _perf() - ctx.started
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    model = link.model if link is not None else None
    fallback_reason = outcome.fallback_reason if outcome is not None and outcome.error is None else None
    upstream_s = outcome.upstream_s if outcome is not None else 0.0
    # A stream's gateway time ends when it commits; the rest is the upstream talking.
    busy = ctx.ttft_s if ctx.ttft_s is not None else elapsed
    model_used = model.id if model is not None else ""
    metrics.observe_request(
        ctx.endpoint, ctx.resolved or ctx.requested, model_used, ctx.status, busy - upstream_s, fallback_reason
    )
    cached = ctx.cache == "hit" or (ctx.cache == "coalesced" and ctx.status == 200)
    if ctx.cache:
        metrics.cache_result(ctx.resolved, ctx.cache)
    key = ctx.key
    usage.record(
        record_id=uuid.uuid4().hex,
        request_id=ctx.request_id,
        org=key.agent.org.name if key is not None else "",
        agent=key.agent.name if key is not None else "",
        key_prefix=key.prefix if key is not None else "",
        endpoint=ctx.endpoint,
        requested_model=ctx.requested,
        resolved_model=ctx.resolved,
        model_used=model_used,
        provider=model.provider.name if model is not None else "",
        fallback_reason=fallback_reason or "",
        attempts=outcome.attempts if outcome is not None else 0,
        status=ctx.status,
        error_code=ctx.error_code,
        prompt_tokens=ctx.prompt_tokens,
        completion_tokens=ctx.completion_tokens,
        cost=0
        if cached
        else usage.cost(model, ctx.prompt_tokens, ctx.completion_tokens)
        if model is not None
        else None,
        latency_ms=elapsed * 1000.0,
        ttft_ms=ctx.ttft_s * 1000.0 if ctx.ttft_s is not None else None,
        streamed=ctx.streamed,
        tokens_estimated=ctx.tokens_estimated,
        cached=cached,
    )
