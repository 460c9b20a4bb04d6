"""OpenTelemetry tracing of the request path, off unless configured (docs/tracing.md).

With OTEL_EXPORTER_OTLP_ENDPOINT set (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), each
proxied request is a SERVER span — a child of the client's W3C `traceparent` /
`tracestate` when it sent them — and each upstream attempt a CLIENT span under it
(model, provider, upstream model, HTTP status, outcome, retry or fallback and why).
Both carry the OpenTelemetry GenAI semantic conventions' attributes (`gen_ai.operation.name`,
`gen_ai.provider.name`, request and response model, token usage by class, finish reasons),
so LLM observability tools recognise them; the attempt span is named as the conventions
name an inference call (`chat gpt-4o`). The conventions' two client metrics
(`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) are recorded per request.
The attempt's context is sent upstream as `traceparent` (and the client's
`tracestate`), so the provider's spans nest under the attempt. Spans go out in
batches over OTLP/HTTP (protobuf) from the SDK's own thread, never on the loop.

Unset, nothing is imported, created or exported: the request path pays one test of
its process's `tracing` (None) per request and one `is None` per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

from routing.core.endpoints import ENDPOINTS
from routing.runtime.process import installed

log = logging.getLogger("switchboard.tracing")

SERVICE = "switchboard"

# The GenAI conventions' operation per endpoint kind, and provider per dialect (docs/tracing.md#genai).
# Values outside the conventions' well-known lists are the conventions' "custom value" case.
GENAI_OPERATION = {row.kind: row.genai_operation for row in ENDPOINTS}  # each endpoint row's
GENAI_PROVIDER = {
    "openai": "openai",
    "azure_openai": "azure.ai.openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "cohere": "cohere",
    "ollama": "ollama",
    "tei": "tei",
}
# routing.core.prices.token_classes → the conventions' usage attributes (cache writes of both TTLs add up).
_CLASS_ATTRIBUTES = (
    ("cache_read", "gen_ai.usage.cache_read.input_tokens"),
    ("cache_write", "gen_ai.usage.cache_creation.input_tokens"),
    ("cache_write_1h", "gen_ai.usage.cache_creation.input_tokens"),
    ("reasoning", "gen_ai.usage.reasoning.output_tokens"),
)


def endpoint() -> str:
    """The configured OTLP/HTTP endpoint, generic or traces-only ('' = tracing off)."""
    from django.conf import settings

    return str(
        getattr(settings, "SWITCHBOARD_OTLP_TRACES_ENDPOINT", "") or getattr(settings, "SWITCHBOARD_OTLP_ENDPOINT", "")
    )


def configure(exporter: Any = None, processor: Any = None, metric_reader: Any = None) -> bool:
    """Turn tracing on for the current process when an endpoint is configured (or an exporter is given,
    for tests): its `Process.tracing` is then a `Tracing`.

    `exporter` replaces the OTLP exporter; `processor` the batch processor (tests use a
    SimpleSpanProcessor over an InMemorySpanExporter); `metric_reader` the periodic OTLP
    reader of the GenAI metrics (tests use an InMemoryMetricReader). Returns whether tracing is on.
    """
    url = endpoint()
    process = installed()
    if process is None or (exporter is None and processor is None and not url):
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
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(processor)
    meters = GenAIMeters.build(provider.resource, metric_reader, url)
    process.tracing = Tracing(provider, TraceContextTextMapPropagator(), meters)
    log.info("tracing on: spans exported over OTLP/HTTP%s", f" to {url}" if url else "")
    return True


def shutdown(process: Any = None) -> None:
    """Flush and stop the exporter of `process` (default: the current one); its tracing is off afterwards."""
    process = process if process is not None else installed()
    tracer = process.tracing if process is not None else None
    if tracer is not None:
        process.tracing = None
        tracer.shutdown()


def force_flush(timeout_ms: int = 5000) -> bool:
    process = installed()
    tracer = process.tracing if process is not None else None
    return bool(tracer.provider.force_flush(timeout_ms)) if tracer is not None else True


class Tracing:
    """One process's tracing (`Process.tracing`, None when off): the tracer provider and the GenAI meters."""

    __slots__ = ("provider", "tracer", "propagator", "meters")

    def __init__(self, provider: Any, propagator: Any, meters: GenAIMeters | None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("switchboard.gateway")
        self.propagator = propagator
        self.meters = meters

    def start(
        self, scope: Mapping[str, Any], method: str, path: str, request_id: str, endpoint: str = "chat"
    ) -> RequestTrace:
        """The SERVER span of a request, a child of the client's `traceparent` when valid."""
        from opentelemetry import trace

        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name == b"traceparent" or name == b"tracestate":
                carrier[name.decode()] = value.decode("latin-1")
        parent = self.propagator.extract(carrier) if carrier else None
        span = self.tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "url.path": path,
                "switchboard.request_id": request_id,
                "gen_ai.operation.name": GENAI_OPERATION.get(endpoint, endpoint),
            },
        )
        # tracestate is forwarded only alongside a valid parent (W3C: it belongs to that trace).
        tracestate = carrier.get("tracestate", "") if span.parent is not None else ""
        context = trace.set_span_in_context(span)
        return RequestTrace(self, span, context, tracestate, GENAI_OPERATION.get(endpoint, endpoint))

    def shutdown(self) -> None:
        self.provider.shutdown()
        if self.meters is not None:
            self.meters.shutdown()


class RequestTrace:
    """The spans of one request: the SERVER span and the attempt under way."""

    __slots__ = (
        "tracing",
        "span",
        "context",
        "tracestate",
        "attempts",
        "last_model",
        "last_failure",
        "current",
        "headers",
        "status",
        "operation",
        "upstream_model",
    )

    def __init__(self, tracing: Tracing, span: Any, context: Any, tracestate: str, operation: str = "chat") -> None:
        self.tracing = tracing  # the process's: its tracer starts the attempts' spans
        self.span = span
        self.context = context  # the request span's context: the parent of every attempt
        self.tracestate = tracestate
        self.attempts = 0
        self.last_model = ""
        self.last_failure = ""
        self.current: Any = None  # the attempt's span
        self.headers: dict[str, str] = {}  # what the attempt adds to the upstream request
        self.status: int | None = None  # the attempt's upstream HTTP status, once known
        self.operation = operation  # gen_ai.operation.name of the request's endpoint
        self.upstream_model = ""  # the attempt's upstream model name

    def begin(self, link: Any) -> None:
        """Start an attempt's span; `headers` then carry its context upstream."""
        from opentelemetry import trace

        model = link.model
        self.attempts += 1
        attributes: dict[str, Any] = {
            "switchboard.attempt": self.attempts,
            "switchboard.model": model.id,
            "switchboard.provider": model.provider.name,
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": genai_provider(model.provider.dialect),
            "gen_ai.request.model": model.upstream_model,
        }
        if self.last_model:
            if self.last_model == model.id:
                attributes["switchboard.retry"] = True
                attributes["switchboard.retry_reason"] = self.last_failure
            else:
                attributes["switchboard.fallback_from"] = self.last_model
                attributes["switchboard.fallback_reason"] = self.last_failure
        # The conventions' name of an inference call: "{operation} {model}".
        span = self.tracing.tracer.start_span(
            f"{self.operation} {model.upstream_model}",
            context=self.context,
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        headers: dict[str, str] = {}
        self.tracing.propagator.inject(headers, context=trace.set_span_in_context(span))
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        self.current, self.headers, self.status = span, headers, None
        self.last_model, self.upstream_model = model.id, model.upstream_model

    def end(self, failure: BaseException | None, result: Any = None) -> None:
        """End the attempt's span with the upstream's status and, when it failed, why.

        A whole (non-streamed) answer's usage and finish reasons go on the span too; a
        stream's attempt ends at its first frame, so its usage is on the request span."""
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
            usage = getattr(result, "usage", None)
            if isinstance(usage, tuple) and len(usage) == 2:
                span.set_attributes(usage_attributes(usage[0], usage[1], getattr(result, "classes", None)))
                span.set_attribute("gen_ai.response.model", self.upstream_model)
            reasons = finish_reasons(result)
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
        else:
            label = _failure_label(failure)
            reason = getattr(failure, "fallback_reason", None)
            self.last_failure = reason if isinstance(reason, str) else label
            span.set_attribute("switchboard.outcome", label)
            span.set_attribute("error.type", label)
            span.set_status(Status(StatusCode.ERROR, str(failure)[:200]))
        span.end()


def genai_provider(dialect: str) -> str:
    """gen_ai.provider.name of a dialect (its own name where the conventions list none)."""
    return GENAI_PROVIDER.get(dialect, dialect)


def usage_attributes(prompt: int | None, completion: int | None, classes: Mapping[str, int] | None) -> dict[str, int]:
    """The conventions' `gen_ai.usage.*` attributes of a usage (classes from routing.core.prices)."""
    out: dict[str, int] = {}
    if prompt is not None:
        out["gen_ai.usage.input_tokens"] = prompt
    if completion is not None:
        out["gen_ai.usage.output_tokens"] = completion
    for name, attribute in _CLASS_ATTRIBUTES if classes else ():
        if name in classes:
            out[attribute] = out.get(attribute, 0) + classes[name]
    return out


def finish_reasons(result: Any) -> list[str]:
    """The finish reasons of a whole answer's client body: OpenAI choices, Anthropic's stop_reason,
    a Responses status. Tracing on only: one more parse of an answer already in memory."""
    body = getattr(result, "body", None)
    if not isinstance(body, bytes | bytearray) or body[:1] != b"{":
        return []
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    choices = obj.get("choices")
    if isinstance(choices, list):
        return [str(c["finish_reason"]) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
    reason = obj.get("stop_reason")
    if isinstance(reason, str):
        return [reason]
    status = obj.get("status") if obj.get("object") == "response" else None
    return [status] if isinstance(status, str) else []


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


def start(scope: Mapping[str, Any], method: str, path: str, request_id: str, endpoint: str = "chat") -> RequestTrace:
    """The SERVER span of a request, from the current process's tracing (the request path uses its own)."""
    return installed().tracing.start(scope, method, path, request_id, endpoint)


def finish(trace_: RequestTrace, ctx: Any) -> None:
    """End the request span with what the request learned (org, models, status, fallback, usage),
    and record the GenAI client metrics of the request."""
    from opentelemetry.trace import Status, StatusCode

    span = trace_.span
    key = ctx.key
    outcome = ctx.outcome
    attributes: dict[str, Any] = {"http.response.status_code": ctx.status, "switchboard.attempts": trace_.attempts}
    genai: dict[str, Any] = {"gen_ai.operation.name": trace_.operation}
    if key is not None:
        attributes["switchboard.org"] = key.agent.org.name
        attributes["switchboard.agent"] = key.agent.name
    if ctx.requested:
        attributes["switchboard.model_requested"] = ctx.requested
        genai["gen_ai.request.model"] = ctx.requested
    if outcome is not None and outcome.link is not None:
        model = outcome.link.model
        genai["gen_ai.provider.name"] = genai_provider(model.provider.dialect)
        if outcome.error is None:
            attributes["switchboard.model_used"] = model.id
            attributes["switchboard.provider"] = model.provider.name
            genai["gen_ai.response.model"] = model.upstream_model
            if outcome.fallback_reason:
                attributes["switchboard.fallback_reason"] = outcome.fallback_reason
            reasons = finish_reasons(outcome.result)
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
    if ctx.error_code:
        attributes["error.type"] = ctx.error_code
    usage = usage_attributes(ctx.prompt_tokens, ctx.completion_tokens, ctx.token_classes)
    span.set_attributes(attributes)
    span.set_attributes(genai)
    span.set_attributes(usage)
    if ctx.status >= 500 or ctx.status == 0:
        span.set_status(Status(StatusCode.ERROR, ctx.error_code or "error"))
    span.end()
    meters = trace_.tracing.meters
    if meters is not None:
        if ctx.error_code:
            genai["error.type"] = ctx.error_code
        meters.record(genai, usage, time.perf_counter() - ctx.started)


class GenAIMeters:
    """The GenAI conventions' client metrics, exported over OTLP/HTTP beside the spans."""

    __slots__ = ("provider", "tokens", "duration")

    # The conventions' advisory bucket boundaries for both histograms.
    TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
    DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter("switchboard.gateway")
        self.provider = provider
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=self.TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=self.DURATION_BUCKETS,
        )

    @classmethod
    def build(cls, resource: Any, reader: Any, url: str) -> GenAIMeters | None:
        """A meter provider over `reader`, or over a periodic OTLP reader when an endpoint is set."""
        from opentelemetry.sdk.metrics import MeterProvider

        if reader is None:
            if not url:
                return None
            from django.conf import settings
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            generic = str(getattr(settings, "SWITCHBOARD_OTLP_ENDPOINT", "") or "")
            # Only the generic endpoint says where metrics go (a traces-only URL does not).
            exporter = OTLPMetricExporter(endpoint=generic.rstrip("/") + "/v1/metrics") if generic else None
            if exporter is None:
                return None
            reader = PeriodicExportingMetricReader(exporter)
        return cls(MeterProvider(resource=resource, metric_readers=[reader]))

    def record(self, attributes: dict[str, Any], usage: Mapping[str, int], seconds: float) -> None:
        """One request: its duration, and its input and output token counts when known."""
        self.duration.record(seconds, attributes)
        for token_type, name in (("input", "gen_ai.usage.input_tokens"), ("output", "gen_ai.usage.output_tokens")):
            if name in usage:
                self.tokens.record(usage[name], {**attributes, "gen_ai.token.type": token_type})

    def shutdown(self) -> None:
        self.provider.shutdown()
