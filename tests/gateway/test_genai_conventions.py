"""The spans' GenAI attributes checked against the OpenTelemetry GenAI semantic conventions themselves
(docs/tracing.md#genai): every `gen_ai.*` attribute a span carries is one the conventions define (the
names from the `opentelemetry-semantic-conventions` package, not from this project), none deprecated,
each of the conventions' type; the span names and kinds are the conventions' too. Read from an in-memory
exporter, over a chat answer with usage by class, a stream, an embeddings call and a failed attempt."""

from __future__ import annotations

import orjson
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as conventions
from opentelemetry.trace import SpanKind

from tests.gateway.test_tracing import GENAI_ANSWER, script, spans  # noqa: F401 - spans: the exporter fixture

DEFINED = {
    value
    for name, value in vars(conventions).items()
    if name.startswith("GEN_AI_") and isinstance(value, str) and value.startswith("gen_ai.")
}
DEPRECATED = {
    conventions.GEN_AI_SYSTEM,  # replaced by gen_ai.provider.name
    conventions.GEN_AI_USAGE_PROMPT_TOKENS,  # replaced by gen_ai.usage.input_tokens
    conventions.GEN_AI_USAGE_COMPLETION_TOKENS,  # replaced by gen_ai.usage.output_tokens
}
STRINGS = {
    conventions.GEN_AI_OPERATION_NAME,
    conventions.GEN_AI_PROVIDER_NAME,
    conventions.GEN_AI_REQUEST_MODEL,
    conventions.GEN_AI_RESPONSE_MODEL,
    conventions.GEN_AI_RESPONSE_ID,
}
STRING_ARRAYS = {conventions.GEN_AI_RESPONSE_FINISH_REASONS}
INTS = {name for name in DEFINED if name.startswith("gen_ai.usage.")} | {conventions.GEN_AI_REQUEST_MAX_TOKENS}
OPERATIONS = {v.value for v in conventions.GenAiOperationNameValues}
PROVIDERS = {v.value for v in conventions.GenAiProviderNameValues}
REQUIRED = (conventions.GEN_AI_OPERATION_NAME, conventions.GEN_AI_PROVIDER_NAME)  # what LLM tools key on


def _check(span) -> None:
    genai = {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")}
    for name in REQUIRED:
        assert name in genai, (span.name, name)
    for name, value in genai.items():
        assert name in DEFINED, f"{span.name}: {name} is not a GenAI convention attribute"
        assert name not in DEPRECATED, f"{span.name}: {name} is deprecated"
        if name in STRINGS:
            assert isinstance(value, str) and value, (span.name, name, value)
        elif name in STRING_ARRAYS:
            assert isinstance(value, tuple) and all(isinstance(v, str) for v in value), (span.name, name, value)
        elif name in INTS:
            assert type(value) is int and value >= 0, (span.name, name, value)
        else:
            raise AssertionError(f"{span.name}: {name} has no type in this test's table")
    assert genai[conventions.GEN_AI_OPERATION_NAME] in OPERATIONS
    assert genai[conventions.GEN_AI_PROVIDER_NAME] in PROVIDERS  # the mock speaks the openai dialect


async def test_every_genai_attribute_is_a_convention_name_of_its_type(gateway, upstream, spans) -> None:  # noqa: F811
    await script(upstream, "ip-chat-b", [{"body": orjson.dumps(GENAI_ANSWER).decode()}, {"status": 500}])
    chat = {"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]}
    assert (await gateway.post("/v1/chat/completions", json=chat)).status_code == 200
    streamed = await gateway.post("/v1/chat/completions", json={**chat, "stream": True})
    assert streamed.status_code == 200
    assert (await gateway.post("/v1/embeddings", json={"model": "embed-a", "input": "hi"})).status_code == 200
    await gateway.post("/v1/chat/completions", json=chat)  # the scripted 500 (and whatever retries follow)
    finished = spans.get_finished_spans()
    attempts = [s for s in finished if s.kind is SpanKind.CLIENT]
    requests = [s for s in finished if s.kind is SpanKind.SERVER]
    assert len(requests) == 4 and len(attempts) >= 4
    for span in finished:
        _check(span)
    for span in attempts:  # the conventions' client span name: "{gen_ai.operation.name} {gen_ai.request.model}"
        a = span.attributes
        assert span.name == f"{a[conventions.GEN_AI_OPERATION_NAME]} {a[conventions.GEN_AI_REQUEST_MODEL]}"
    usage = [s for s in finished if conventions.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS in s.attributes]
    assert usage and {s.attributes[conventions.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] for s in usage} == {32}
    embeddings = [s for s in attempts if s.attributes[conventions.GEN_AI_OPERATION_NAME] == "embeddings"]
    assert embeddings and embeddings[0].name == "embeddings ip-embed"
