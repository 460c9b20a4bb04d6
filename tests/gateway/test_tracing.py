"""Tracing on the request path, with an in-memory span exporter: the request span continues the
client's trace, each upstream attempt is a child with model, provider, status and why it was left,
and the attempt's context reaches the upstream as `traceparent`. Off, nothing is created or sent."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from routing.runtime.observe import tracing
from routing.runtime.process import current

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.configure(processor=SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


async def upstream_requests(upstream: str, model: str) -> list[dict]:
    async with httpx.AsyncClient(base_url=upstream) as client:
        return (await client.get("/_control/calls", params={"model": model})).json()["requests"]


async def script(upstream: str, model: str, steps: list[dict]) -> None:
    async with httpx.AsyncClient(base_url=upstream) as client:
        (await client.post("/_control/script", json={"model": model, "steps": steps})).raise_for_status()


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


async def test_request_span_continues_the_client_trace_and_the_attempt_is_sent_upstream(gateway, upstream, spans):
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]},
        headers={"traceparent": TRACEPARENT, "tracestate": "vendor=abc"},
    )
    assert response.status_code == 200
    named = by_name(spans)
    (request,) = named["POST /v1/chat/completions"]
    (attempt,) = named["chat ip-chat-b"]
    assert request.kind is SpanKind.SERVER and attempt.kind is SpanKind.CLIENT
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert format(request.parent.span_id, "016x") == CLIENT_SPAN
    assert attempt.parent.span_id == request.context.span_id
    assert attempt.attributes["switchboard.model"] == "chat-b"
    assert attempt.attributes["switchboard.provider"] == "mock"
    assert attempt.attributes["gen_ai.request.model"] == "ip-chat-b"
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.attributes["switchboard.outcome"] == "ok"
    assert request.attributes["switchboard.org"] == "acme"
    assert request.attributes["switchboard.model_used"] == "chat-b"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["switchboard.request_id"] == response.headers["x-request-id"]

    (seen,) = await upstream_requests(upstream, "ip-chat-b")
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["traceparent"] == f"00-{TRACE_ID}-{format(attempt.context.span_id, '016x')}-01"
    assert headers["tracestate"] == "vendor=abc"


async def test_retries_and_fallbacks_are_sibling_attempt_spans_saying_why(gateway, upstream, spans):
    await script(upstream, "ip-chat-a", [{"status": 503}, {"status": 503}])
    response = await gateway.post(
        "/v1/chat/completions", json={"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200 and response.headers["x-switchboard-model-used"] == "chat-b"
    named = by_name(spans)
    (request,) = named["POST /v1/chat/completions"]
    first, retry = sorted(named["chat ip-chat-a"], key=lambda s: s.attributes["switchboard.attempt"])
    (fallback,) = named["chat ip-chat-b"]
    assert {first.parent.span_id, retry.parent.span_id, fallback.parent.span_id} == {request.context.span_id}
    assert request.parent is None  # no traceparent from the client: a new trace
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["switchboard.outcome"] == "upstream_5xx"
    assert first.status.status_code is StatusCode.ERROR
    assert retry.attributes["switchboard.retry"] is True
    assert retry.attributes["switchboard.retry_reason"] == "upstream_5xx"
    assert fallback.attributes["switchboard.fallback_from"] == "chat-a"
    assert fallback.attributes["switchboard.fallback_reason"] == response.headers["x-switchboard-fallback"]
    assert fallback.attributes["switchboard.outcome"] == "ok"
    assert request.attributes["switchboard.attempts"] == 3
    assert request.attributes["switchboard.fallback_reason"] == response.headers["x-switchboard-fallback"]


async def test_a_stream_attempt_span_ends_when_the_stream_commits(gateway, upstream, spans):
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "chat-b", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        headers={"traceparent": TRACEPARENT},
    )
    assert response.status_code == 200 and "[DONE]" in response.text
    named = by_name(spans)
    (request,) = named["POST /v1/chat/completions"]
    (attempt,) = named["chat ip-chat-b"]
    assert attempt.parent.span_id == request.context.span_id
    assert attempt.end_time <= request.end_time


async def test_an_invalid_traceparent_starts_a_new_trace_and_drops_tracestate(gateway, upstream, spans):
    await gateway.post(
        "/v1/chat/completions",
        json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]},
        headers={"traceparent": "00-not-a-trace-01", "tracestate": "vendor=abc"},
    )
    (request,) = by_name(spans)["POST /v1/chat/completions"]
    assert request.parent is None
    (seen,) = await upstream_requests(upstream, "ip-chat-b")
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert "tracestate" not in headers and headers["traceparent"].split("-")[1] == format(
        request.context.trace_id, "032x"
    )


async def test_off_by_default_nothing_is_created_or_sent_upstream(gateway, upstream, settings):
    assert current().tracing is None and not tracing.endpoint()
    assert tracing.configure() is False  # no endpoint: stays off
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]},
        headers={"traceparent": TRACEPARENT},
    )
    assert response.status_code == 200
    (seen,) = await upstream_requests(upstream, "ip-chat-b")
    assert "traceparent" not in {k.lower() for k in seen["headers"]}


GENAI_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "ip-chat-b",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
    "usage": {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "total_tokens": 49,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 5},
    },
}


async def test_spans_carry_the_genai_conventions_attributes_with_usage_by_class(gateway, upstream, spans):
    import orjson

    await script(upstream, "ip-chat-b", [{"body": orjson.dumps(GENAI_ANSWER).decode()}])
    response = await gateway.post(
        "/v1/chat/completions", json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200
    named = by_name(spans)
    (request,) = named["POST /v1/chat/completions"]
    (attempt,) = named["chat ip-chat-b"]  # the conventions' span name: "{operation} {model}"
    for span in (request, attempt):
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == "openai"  # the mock speaks the openai dialect
        assert span.attributes["gen_ai.usage.input_tokens"] == 40
        assert span.attributes["gen_ai.usage.output_tokens"] == 9
        assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == 32
        assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 5
        assert span.attributes["gen_ai.response.model"] == "ip-chat-b"
        assert tuple(span.attributes["gen_ai.response.finish_reasons"]) == ("length",)
    assert request.attributes["gen_ai.request.model"] == "chat-b"  # what the client asked for
    assert attempt.attributes["gen_ai.request.model"] == "ip-chat-b"  # what the upstream was asked for
    assert "gen_ai.usage.cache_creation.input_tokens" not in request.attributes


async def test_a_streamed_requests_usage_is_on_its_request_span(gateway, upstream, spans):
    response = await gateway.post(
        "/v1/chat/completions",
        json={"model": "chat-b", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200 and "[DONE]" in response.text
    (request,) = by_name(spans)["POST /v1/chat/completions"]
    assert request.attributes["gen_ai.usage.input_tokens"] == 12  # the mock's usage frame
    assert request.attributes["gen_ai.usage.output_tokens"] == 7
    assert request.attributes["gen_ai.provider.name"] == "openai"


async def test_genai_client_metrics_are_recorded_per_request(gateway, upstream):
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    assert tracing.configure(processor=SimpleSpanProcessor(InMemorySpanExporter()), metric_reader=reader)
    try:
        for _ in range(2):
            response = await gateway.post(
                "/v1/chat/completions", json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}
            )
            assert response.status_code == 200
        data = reader.get_metrics_data()
    finally:
        tracing.shutdown()
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert metrics["gen_ai.client.operation.duration"].unit == "s"
    (duration,) = metrics["gen_ai.client.operation.duration"].data.data_points
    assert duration.count == 2 and duration.sum > 0
    assert duration.attributes["gen_ai.operation.name"] == "chat"
    assert duration.attributes["gen_ai.provider.name"] == "openai"
    assert duration.attributes["gen_ai.request.model"] == "chat-b"
    tokens = {p.attributes["gen_ai.token.type"]: p for p in metrics["gen_ai.client.token.usage"].data.data_points}
    assert metrics["gen_ai.client.token.usage"].unit == "{token}"
    assert (tokens["input"].count, tokens["input"].sum) == (2, 24)
    assert (tokens["output"].count, tokens["output"].sum) == (2, 14)
