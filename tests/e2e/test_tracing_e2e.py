"""Tracing end to end: a real server with OTEL_EXPORTER_OTLP_ENDPOINT exports its spans over
OTLP/HTTP to a tiny collector this test runs on loopback; the spans continue the client's
`traceparent`, and the mock upstream saw the attempt's context."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.e2e.harness import SLACK_S

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"

CONFIG = """
resilience:
  max_retries: 0
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
models:
  - id: trace-a
    provider: mock
    upstream_model: up-trace-a
    capabilities: [chat]
    fallbacks: [trace-b]
  - id: trace-b
    provider: mock
    upstream_model: up-trace-b
    capabilities: [chat]
orgs:
  - name: acme
    agents:
      - name: bot
"""


class Collector:
    """An OTLP/HTTP trace receiver: POST /v1/traces with a protobuf ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    request = ExportTraceServiceRequest.FromString(body)
                    with collector.lock:
                        for resource in request.resource_spans:
                            service = {a.key: a.value.string_value for a in resource.resource.attributes}
                            for scope in resource.scope_spans:
                                collector.spans.extend((service, span) for span in scope.spans)
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def in_trace(self, trace_id: str) -> list:
        with self.lock:
            return [(service, span) for service, span in self.spans if span.trace_id.hex() == trace_id]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def gw(make_gateway, mock_upstream, collector):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    return make_gateway(CONFIG.format(mock=mock_upstream.url), env=env)


def attr(span, name: str):
    for a in span.attributes:
        if a.key == name:
            value = a.value
            return getattr(value, value.WhichOneof("value"))
    return None


def test_spans_reach_the_collector_with_the_client_parent_and_the_upstream_sees_the_attempt(
    gw, mock_upstream, collector
):
    mock_upstream.script("up-trace-a", [{"status": 503}])
    response = httpx.post(
        f"{gw.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {gw.api_key}", "traceparent": TRACEPARENT},
        json={"model": "trace-a", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert response.status_code == 200 and response.headers["x-switchboard-model-used"] == "trace-b"

    start = time.monotonic()
    while len(collector.in_trace(TRACE_ID)) < 3:  # the request and its two attempts
        assert time.monotonic() - start < 5 + SLACK_S, f"spans never arrived: {collector.in_trace(TRACE_ID)}"
        time.sleep(0.05)
    spans = {span.name: (service, span) for service, span in collector.in_trace(TRACE_ID)}
    service, request = spans["POST /v1/chat/completions"]
    _, first = spans["chat up-trace-a"]
    _, fallback = spans["chat up-trace-b"]
    assert service["service.name"] == "switchboard"
    assert request.parent_span_id.hex() == "b7ad6b7169203331"
    assert first.parent_span_id == request.span_id and fallback.parent_span_id == request.span_id
    assert attr(first, "http.response.status_code") == 503
    assert attr(first, "switchboard.outcome") == "upstream_5xx"
    assert attr(fallback, "switchboard.fallback_from") == "trace-a"
    assert attr(fallback, "switchboard.provider") == "mock"
    assert attr(request, "switchboard.model_used") == "trace-b"
    assert attr(request, "gen_ai.operation.name") == "chat" and attr(first, "gen_ai.operation.name") == "chat"
    assert attr(request, "gen_ai.response.model") == "up-trace-b"
    assert attr(request, "gen_ai.usage.input_tokens") > 0 and attr(request, "gen_ai.usage.output_tokens") > 0

    calls = mock_upstream.calls("up-trace-b")["requests"]
    headers = {k.lower(): v for k, v in calls[-1]["headers"].items()}
    assert headers["traceparent"] == f"00-{TRACE_ID}-{fallback.span_id.hex()}-01"
