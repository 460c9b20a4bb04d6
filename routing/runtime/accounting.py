"""After the answer: one usage record, the request metrics, and (via the usage writer) the log line.

Called once per proxied request from routing.gateway.app (which fills the `Context`); only enqueues and bumps
counters, so it costs the request path a few microseconds.
"""

from __future__ import annotations

import time
from typing import Any

from routing.config.snapshot import KeySpec
from routing.core.executor import Outcome
from routing.core.ids import new_id
from routing.core.prices import CLASSES, prices_now
from routing.runtime.observe import metrics
from routing.runtime.observe.counters import ModelCounters
from routing.runtime.usage.pricing import priced_version
from routing.runtime.usage.queue import UsageSink
from routing.runtime.usage.streams import INTERRUPTED

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
        "request_body",
        "response_body",
        "journaled",
        "token_classes",
        "dropped",
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
        self.ratelimit: Any = None  # a routing.core.limiter.LimitTicket when the caller has limits
        self.requirements: Any = None  # the preflight Requirements (its prompt estimate), once known
        self.tokens_estimated = False  # the tokens are the gateway's estimate: the upstream sent no usage
        self.cache = ""  # a cached model's hit|miss|bypass|coalesced (docs/cache.md); "" otherwise
        self.trace: Any = None  # a routing.runtime.observe.tracing.RequestTrace when tracing is on (docs/tracing.md)
        self.request_body: str | None = None  # only for orgs with log_bodies (routing.runtime.observe.bodies)
        self.response_body: str | None = None
        self.journaled: Any = None  # a committed stream's routing.runtime.usage.streams.OpenStream
        self.token_classes: dict[str, int] | None = None  # routing.core.prices.token_classes of the usage
        self.dropped = ""  # hints the serving link's translation went without (x-switchboard-dropped)


def finish(ctx: Context, sink: UsageSink, counters: ModelCounters | None = None) -> None:
    """Record one finished request: its usage record queued for the process's `sink`, then its metrics and
    the process's dashboard `counters`."""
    elapsed = _perf() - ctx.started
    record(ctx, sink, elapsed)
    observe(ctx, elapsed, counters)


def record(ctx: Context, sink: UsageSink, elapsed: float) -> None:
    """Queue (so journal) the request's usage record: what must survive a crash, before the answer's
    last byte (docs/usage-records.md#journal). Metrics and the log line follow in `observe`."""
    journaled = ctx.journaled
    row = _row(ctx, elapsed, None if journaled is None else journaled.record_id)
    sink.record(**row)
    if journaled is not None:  # the settle replaces the commit's entry
        sink.streams.close(journaled)
    cost = row["cost"]
    if (cost is None or (not cost and (ctx.prompt_tokens or ctx.completion_tokens))) and row["model_used"]:
        if ctx.status == 200 and not row["cached"]:
            metrics.unpriced(row["model_used"])  # docs/metrics.md#spend


def observe(ctx: Context, elapsed: float | None = None, counters: ModelCounters | None = None) -> None:
    """The request's metrics, dashboard counters and log line: after the answer, off the client's clock.

    `counters` are the serving process's (`call.process.counters`), handed in: never the installed process's."""
    if elapsed is None:
        elapsed = _perf() - ctx.started
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    model = link.model if link is not None else None
    fallback_reason = outcome.fallback_reason if outcome is not None and outcome.error is None else None
    upstream_s = outcome.upstream_s if outcome is not None else 0.0
    # A stream's gateway time ends when it commits; the rest is the upstream talking.
    busy = ctx.ttft_s if ctx.ttft_s is not None else elapsed
    metrics.observe_request(
        ctx.endpoint,
        ctx.resolved or ctx.requested,
        model.id if model is not None else "",
        ctx.status,
        busy - upstream_s,
        fallback_reason,
        elapsed,
    )
    if counters is not None and model is not None:  # per link that served, fallbacks included
        counters.note(model.id, ctx.status, fallback_reason, elapsed)
    if ctx.cache:
        metrics.cache_result(ctx.resolved, ctx.cache)
    if model is not None and ctx.prompt_tokens and not ctx.tokens_estimated:  # the cached-input ratio
        classes = ctx.token_classes
        metrics.input_tokens(
            model.id, model.provider.name, ctx.prompt_tokens, classes.get("cache_read", 0) if classes else 0
        )


def journal_stream(ctx: Context, sink: UsageSink) -> None:
    """A stream committed: journal its record now, as a crash would leave it (docs/usage-records.md#streams).

    Never raises; without a journal the stream is recorded when it ends, as any request."""
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    if not sink.journal_enabled or link is None:
        return
    try:
        req = ctx.requirements
        ctx.prompt_tokens = req.estimated_tokens if req is not None else None
        ctx.completion_tokens, ctx.tokens_estimated, ctx.error_code = 0, True, INTERRUPTED
        row = _row(ctx, _perf() - ctx.started)
        model = link.model
        _, input_price, output_price, _ = prices_now(model, time.time())
        ctx.journaled = sink.streams.open(row, (input_price, output_price))
    except Exception:  # noqa: BLE001 - the stream goes on; its record is written when it ends
        ctx.journaled = None
    finally:
        ctx.prompt_tokens = ctx.completion_tokens = None
        ctx.tokens_estimated, ctx.error_code = False, ""


def _row(ctx: Context, elapsed: float, record_id: str | None = None) -> dict[str, Any]:
    """The usage record of `ctx` as it stands."""
    outcome = ctx.outcome
    link = outcome.link if outcome is not None else None
    model = link.model if link is not None else None
    fallback_reason = outcome.fallback_reason if outcome is not None and outcome.error is None else None
    cached = ctx.cache == "hit" or (ctx.cache == "coalesced" and ctx.status == 200)
    key = ctx.key
    version, cost = (
        priced_version(model, ctx.prompt_tokens, ctx.completion_tokens, ctx.token_classes)
        if model is not None
        else ("", None)
    )
    return dict(
        record_id=record_id or new_id(),
        request_id=ctx.request_id,
        org=key.agent.org.name if key is not None else "",
        agent=key.agent.name if key is not None else "",
        key_prefix=key.prefix if key is not None else "",
        endpoint=ctx.endpoint,
        requested_model=ctx.requested,
        resolved_model=ctx.resolved,
        model_used=model.id if model is not None else "",
        provider=model.provider.name if model is not None else "",
        fallback_reason=fallback_reason or "",
        attempts=outcome.attempts if outcome is not None else 0,
        status=ctx.status,
        error_code=ctx.error_code,
        prompt_tokens=ctx.prompt_tokens,
        completion_tokens=ctx.completion_tokens,
        cost=0 if cached else cost,
        price_version=version,
        latency_ms=elapsed * 1000.0,
        ttft_ms=ctx.ttft_s * 1000.0 if ctx.ttft_s is not None else None,
        streamed=ctx.streamed,
        tokens_estimated=ctx.tokens_estimated,
        cached=cached,
        trail=outcome.trail if outcome is not None else (),
        **(_NO_BODIES if ctx.request_body is None else _bodies(ctx)),
        **(_NO_BODIES if ctx.token_classes is None else _classes(ctx.token_classes)),
    )


def _classes(classes: dict[str, int]) -> dict[str, int]:
    """The record's token-class columns (`<class>_tokens`, docs/usage-records.md#token-classes)."""
    return {f"{name}_tokens": n for name, n in classes.items() if name in CLASSES}


_NO_BODIES: dict[str, str] = {}


def _bodies(ctx: Context) -> dict[str, str]:
    return {"request_body": ctx.request_body or "", "response_body": ctx.response_body or ""}
