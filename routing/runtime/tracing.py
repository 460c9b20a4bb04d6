"""OpenTelemetry tracing of the request path, off unless configured (docs/tracing.md).

With OTEL_EXPORTER_OTLP_ENDPOINT set (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), each
proxied request is a SERVER span — a child of the client's W3C `traceparent` /
`tracestate` when it sent them — and each upstream attempt a CLIENT span under it
(model, provider, upstream model, HTTP status, outcome, retry or fallback and why).
The attempt's context is sent upstream as `traceparent` (and the client's
`tracestate`), so the provider's spans nest under the attempt. Spans go out in
batches over OTLP/HTTP (protobuf) from the SDK's own thread, never on the loop.

Unset, nothing is imported, created or exported: the request path pays one test of
`ON` (a module global) per request and one `is None` per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("switchboard.tracing")

ON = False  # read on the request path: the only cost when tracing is off
_tracer: Any = None
_propagator: Any = None
_provider: Any = None

SERVICE = "switchboard"


def endpoint() -> str:
    """The configured OTLP/HTTP endpoint, generic or traces-only ('' = tracing off)."""
    from django.conf import settings

    return str(
        getattr(settings, "SWITCHBOARD_OTLP_TRACES_ENDPOINT", "") or getattr(settings, "SWITCHBOARD_OTLP_ENDPOINT", "")
    )


def configure(exporter: Any = None, processor: Any = None) -> bool:
    """Turn tracing on when an endpoint is configured (or an exporter is given, for tests).

    `exporter` replaces the OTLP exporter; `processor` the batch processor (tests use a
    SimpleSpanProcessor over an InMemorySpanExporter). Returns whether tracing is on.
    """
    global ON, _tracer, _propagator, _provider
    url = endpoint()
    if exporter is None and processor is None and not url:
        return False
    from django.conf import settings
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if processor is None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            # The generic endpoint gets /v1/traces appended (the OTLP convention); the SDK
            # reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, headers and timeout itself.
            generic = str(getattr(settings, "SWITCHBOARD_OTLP_ENDPOINT", "") or "")
            traces_url = getattr(settings, "SWITCHBOARD_OTLP_TRACES_ENDPOINT", "") or generic.rstrip("/") + "/v1/traces"
            exporter = OTLPSpanExporter(endpoint=traces_url)
        processor = BatchSpanProcessor(exporter)
    service = str(getattr(settings, "SWITCHBOARD_OTEL_SERVICE_NAME", "") or SERVICE)
    _provider = TracerProvider(resource=Resource.create({"service.name": service}))
    _provider.add_span_processor(processor)
    _tracer = _provider.get_tracer("switchboard.gateway")
    _propagator = TraceContextTextMapPropagator()
    ON = True
    log.info("tracing on: spans exported over OTLP/HTTP%s", f" to {url}" if url else "")
    return True


def shutdown() -> None:
    """Flush and stop the exporter (clean shutdown); tracing is off afterwards."""
    global ON, _tracer, _provider
    provider, _provider = _provider, None
    ON, _tracer = False, None
    if provider is not None:
        provider.shutdown()


def force_flush(timeout_ms: int = 5000) -> bool:
    return bool(_provider.force_flush(timeout_ms)) if _provider is not None else True


class RequestTrace:
    """The spans of one request: the SERVER span and the attempt under way."""

    __slots__ = (
        "span",
        "context",
        "tracestate",
        "attempts",
        "last_model",
        "last_failure",
        "current",
        "headers",
        "status",
    )

    def __init__(self, span: Any, context: Any, tracestate: str) -> None:
        self.span = span
        self.context = context  # the request span's context: the parent of every attempt
        self.tracestate = tracestate
        self.attempts = 0
        self.last_model = ""
        self.last_failure = ""
        self.current: Any = None  # the attempt's span
        self.headers: dict[str, str] = {}  # what the attempt adds to the upstream request
        self.status: int | None = None  # the attempt's upstream HTTP status, once known

    def begin(self, link: Any) -> None:
        """Start an attempt's span; `headers` then carry its context upstream."""
        from opentelemetry import trace

        model = link.model
        self.attempts += 1
        attributes: dict[str, Any] = {
            "switchboard.attempt": self.attempts,
            "switchboard.model": model.id,
            "switchboard.provider": model.provider.name,
            "gen_ai.request.model": model.upstream_model,
        }
        if self.last_model:
            if self.last_model == model.id:
                attributes["switchboard.retry"] = True
                attributes["switchboard.retry_reason"] = self.last_failure
            else:
                attributes["switchboard.fallback_from"] = self.last_model
                attributes["switchboard.fallback_reason"] = self.last_failure
        span = _tracer.start_span(
            f"attempt {model.id}", context=self.context, kind=trace.SpanKind.CLIENT, attributes=attributes
        )
        headers: dict[str, str] = {}
        _propagator.inject(headers, context=trace.set_span_in_context(span))
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        self.current, self.headers, self.status = span, headers, None
        self.last_model = model.id

    def end(self, failure: BaseException | None) -> None:
        """End the attempt's span with the upstream's status and, when it failed, why."""
        from opentelemetry.trace import Status, StatusCode

        span = self.current
        if span is None:
            return
        self.current = None
        status = self.status if self.status is not None else getattr(failure, "status", None)
        if isinstance(status, int):
            span.set_attribute("http.response.status_code", status)
        if failure is None:
            self.last_failure = ""
            span.set_attribute("switchboard.outcome", "ok")
        else:
            label = _failure_label(failure)
            reason = getattr(failure, "fallback_reason", None)
            self.last_failure = reason if isinstance(reason, str) else label
            span.set_attribute("switchboard.outcome", label)
            span.set_attribute("error.type", label)
            span.set_status(Status(StatusCode.ERROR, str(failure)[:200]))
        span.end()


def _failure_label(failure: BaseException) -> str:
    label = getattr(failure, "label", None)
    if isinstance(label, str):
        return label
    if isinstance(failure, asyncio.CancelledError):
        return "cancelled"
    if isinstance(failure, TimeoutError):
        return "total_timeout"
    code = getattr(failure, "code", None)
    return code if isinstance(code, str) else type(failure).__name__


def start(scope: Mapping[str, Any], method: str, path: str, request_id: str) -> RequestTrace:
    """The SERVER span of a request, a child of the client's `traceparent` when valid."""
    from opentelemetry import trace

    carrier: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name == b"traceparent" or name == b"tracestate":
            carrier[name.decode()] = value.decode("latin-1")
    parent = _propagator.extract(carrier) if carrier else None
    span = _tracer.start_span(
        f"{method} {path}",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": method, "url.path": path, "switchboard.request_id": request_id},
    )
    # tracestate is forwarded only alongside a valid parent (W3C: it belongs to that trace).
    tracestate = carrier.get("tracestate", "") if span.parent is not None else ""
    return RequestTrace(span, trace.set_span_in_context(span), tracestate)


def finish(trace_: RequestTrace, ctx: Any) -> None:
    """End the request span with what the request learned (org, models, status, fallback)."""
    from opentelemetry.trace import Status, StatusCode

    span = trace_.span
    key = ctx.key
    outcome = ctx.outcome
    attributes: dict[str, Any] = {"http.response.status_code": ctx.status, "switchboard.attempts": trace_.attempts}
    if key is not None:
        attributes["switchboard.org"] = key.agent.org.name
        attributes["switchboard.agent"] = key.agent.name
    if ctx.requested:
        attributes["switchboard.model_requested"] = ctx.requested
    if outcome is not None and outcome.error is None and outcome.link is not None:
        attributes["switchboard.model_used"] = outcome.link.model.id
        attributes["switchboard.provider"] = outcome.link.model.provider.name
        if outcome.fallback_reason:
            attributes["switchboard.fallback_reason"] = outcome.fallback_reason
    if ctx.error_code:
        attributes["error.type"] = ctx.error_code
    span.set_attributes(attributes)
    if ctx.status >= 500 or ctx.status == 0:
        span.set_status(Status(StatusCode.ERROR, ctx.error_code or "error"))
    span.end()
