"""The mock upstream's AWS Bedrock runtime: Converse and ConverseStream, signature checked.

Routes (added by tools.mock.upstream.make_app; base_url `http://HOST:PORT/bedrock?region=R`):
  POST /bedrock/model/{modelId}/converse          JSON answer
  POST /bedrock/model/{modelId}/converse-stream   `application/vnd.amazon.eventstream` frames
  GET  /bedrock/async-invoke                      ListAsyncInvokes, an empty list (the health probe)

Every call must carry a valid AWS Signature Version 4 made with one of `CREDENTIALS`.
The mock recomputes it with botocore's own signer from what it received (method, raw
path and query, the signed headers, the received body), checks the body's SHA-256 against
`X-Amz-Content-SHA256`, the session token of a temporary key and the clock skew, and
answers like AWS when anything differs: 403 with `x-amzn-ErrorType:
InvalidSignatureException` (or UnrecognizedClientException / MissingAuthenticationTokenException).

The model is the path's modelId; faults are scripted per model as for every dialect
(tools.mock.upstream), plus Bedrock's own: a step {"exception": "ThrottlingException"}
answers that error with its AWS status and `{"message": ...}` body; {"stream_exception":
"throttlingException", "exception_after": k} sends that exception message in the stream after
k content deltas. Stream steps also take frames, frame_delay_ms, first_frame_delay_ms,
break_after, no_done (no messageStop / metadata), no_usage (no metadata) and empty_stream.
Usage is reported as inputTokens=USAGE[0], outputTokens=USAGE[1]; a step {"cache_read": N,
"cache_write": M} adds cacheReadInputTokens / cacheWriteInputTokens, as a prompt-cache hit and write do.

Answers follow what Claude does behind Converse: a forced `toolChoice` (`tool` or `any`) gets the
tool call alone, its input valid against the tool's schema (tools.mock.schema_values); with
`additionalModelRequestFields.thinking` the answer starts with a `reasoningContent` block (streamed
as `reasoningContent` text deltas and a signature delta). A request Bedrock would refuse is its
400 ValidationException: a thinking budget under 1 024 or not below `maxTokens`, `maxTokens` above
the model's limit (`OUTPUT_LIMITS`), thinking beside a forced tool or a changed temperature or
topP, a `toolChoice` naming no offered tool.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import struct
import time
import zlib
from calendar import timegm
from typing import Any

import orjson
from aiohttp import web

from tools.mock import schema_values

TEXT = "Hello from the mock Bedrock runtime."
THOUGHT = ("Let me think ", "about what is asked.")
# Claude models on Bedrock with extended thinking: id fragment -> output-token limit (first match wins)
OUTPUT_LIMITS = (
    ("claude-opus-4-1", 32000),
    ("claude-opus-4-5", 64000),
    ("claude-opus-4", 32000),
    ("claude-sonnet-4", 64000),
    ("claude-haiku-4", 64000),
    ("claude-3-7-sonnet", 64000),
)
USAGE = (21, 9)
MAX_SKEW_S = 300  # AWS refuses signatures more than 5 minutes off its clock
EVENTSTREAM = "application/vnd.amazon.eventstream"
# access key id -> (secret access key, session token or None): a long-term key and a temporary one.
CREDENTIALS: dict[str, tuple[str, str | None]] = {
    "AKIAMOCKSWITCHBOARD": ("mock/Secret+Key0123456789abcdefghijklmn", None),
    "ASIAMOCKSWITCHBOARD": ("mock/Temporary+Secret0123456789abcdefghij", "mock-session-token/FwoGZXIvYXdzEJr//+"),
}
# Bedrock's exceptions and the HTTP status AWS sends each with (Converse API reference).
STATUS = {
    "AccessDeniedException": 403,
    "InternalServerException": 500,
    "ModelErrorException": 424,
    "ModelNotReadyException": 429,
    "ModelTimeoutException": 408,
    "ResourceNotFoundException": 404,
    "ServiceQuotaExceededException": 400,
    "ServiceUnavailableException": 503,
    "ThrottlingException": 429,
    "ValidationException": 400,
}
DEMO_KEY_ID = "ASIAMOCKSWITCHBOARD"  # the demo's credentials: a temporary key, so the session token is exercised
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
    r"SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$"
)
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
)


def demo_credentials() -> str:
    """The provider secret (ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN) the demo gives its bedrock provider."""
    secret, token = CREDENTIALS[DEMO_KEY_ID]
    return f"{DEMO_KEY_ID}:{secret}:{token}"


# --- eventstream encoding (the mock's own; tests decode it with botocore) ---------------


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One `application/vnd.amazon.eventstream` message: prelude, CRCs, string headers, payload."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += struct.pack("!B", len(raw_name)) + raw_name + b"\x07" + struct.pack("!H", len(raw_value)) + raw_value
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(name: str, data: dict[str, Any]) -> bytes:
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, orjson.dumps(data))


def exception(name: str, message: str) -> bytes:
    headers = {":exception-type": name, ":content-type": "application/json", ":message-type": "exception"}
    return encode_message(headers, orjson.dumps({"message": message}))


# --- SigV4 verification -------------------------------------------------------------------


def _refusal(error_type: str, message: str) -> tuple[str, str]:
    return error_type, message


def verify(request: web.Request, body: bytes, now: float | None = None) -> tuple[str, str] | None:
    """(error type, message) when the request's SigV4 signature is not valid, None when it is."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    headers = request.headers
    match = _AUTH.match(headers.get("Authorization", ""))
    if match is None:
        return _refusal("MissingAuthenticationTokenException", "Missing Authentication Token")
    key_id, day, region, service, signed, signature = match.groups()
    known = CREDENTIALS.get(key_id)
    if known is None:
        return _refusal("UnrecognizedClientException", "The security token included in the request is invalid.")
    secret, token = known
    names = signed.split(";")
    if token is not None and (headers.get("X-Amz-Security-Token") != token or "x-amz-security-token" not in names):
        return _refusal("UnrecognizedClientException", "The security token included in the request is invalid.")
    if service != "bedrock":
        return _refusal("InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'.")
    stamp = headers.get("X-Amz-Date", "")
    try:
        signed_at = timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return _refusal("IncompleteSignatureException", "X-Amz-Date is missing or not in the basic ISO 8601 form.")
    if stamp[:8] != day or abs((time.time() if now is None else now) - signed_at) > MAX_SKEW_S:
        return _refusal("InvalidSignatureException", f"Signature expired: {stamp} is out of the accepted window.")
    claimed = headers.get("X-Amz-Content-SHA256")
    if claimed is not None and claimed != hashlib.sha256(body).hexdigest():
        return _refusal("InvalidSignatureException", "The provided 'x-amz-content-sha256' header does not match.")
    if "host" not in names or "x-amz-date" not in names:
        return _refusal("InvalidSignatureException", "The host and x-amz-date headers must be signed.")
    received = {name: ",".join(headers.getall(name, [])) for name in names}
    url = f"{request.scheme}://{headers.get('Host', '')}{request.raw_path}"
    aws = AWSRequest(method=request.method, url=url, data=body, headers=received)
    aws.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key_id, secret, token), service, region)
    expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
    if not hmac.compare_digest(expected, signature):
        return _refusal("InvalidSignatureException", BAD_SIGNATURE)
    return None


def error_response(error_type: str, message: str, status: int | None = None) -> web.Response:
    """An error as Bedrock sends it: the type in `x-amzn-ErrorType`, the text in `{"message"}`."""
    return web.Response(
        status=status or STATUS.get(error_type, 403),
        body=orjson.dumps({"message": message}),
        content_type="application/json",
        headers={"x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    )


# --- answers ------------------------------------------------------------------------------


def _tools(body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    config = body.get("toolConfig")
    tools = config.get("tools") if isinstance(config, dict) else None
    specs = [t["toolSpec"] for t in tools or () if isinstance(t, dict) and isinstance(t.get("toolSpec"), dict)]
    choice = config.get("toolChoice") if isinstance(config, dict) else None
    return specs, choice if isinstance(choice, dict) else {}


def _wanted_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The tool `toolChoice` names, else the first one offered, unless the last turn already carries a result."""
    specs, choice = _tools(body)
    if not specs:
        return None
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    if isinstance(content, list) and any(isinstance(b, dict) and "toolResult" in b for b in content):
        return None
    named = (choice.get("tool") or {}).get("name")
    return next((spec for spec in specs if spec.get("name") == named), specs[0])


def _forced(body: dict[str, Any]) -> bool:
    """A forced toolChoice (`any`, `tool`): Claude prefills the turn, so no text comes before the call."""
    return bool({"any", "tool"} & _tools(body)[1].keys())


def _tool_input(body: dict[str, Any], tool: dict[str, Any]) -> dict[str, Any]:
    """A forced call's input follows the tool's schema; an offered one's is the usual {"query": "mock"}."""
    if not _forced(body):
        return {"query": "mock"}
    value = schema_values.answer_for((tool.get("inputSchema") or {}).get("json"), body)
    return value if isinstance(value, dict) else {"query": "mock"}


def _thinking(body: dict[str, Any]) -> dict[str, Any] | None:
    fields = body.get("additionalModelRequestFields")
    thinking = fields.get("thinking") if isinstance(fields, dict) else None
    return thinking if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None


def request_problem(model: str, body: dict[str, Any]) -> str | None:
    """Why Bedrock would refuse this Converse request with a ValidationException, or None."""
    specs, choice = _tools(body)
    named = (choice.get("tool") or {}).get("name")
    if named is not None and named not in {spec.get("name") for spec in specs}:
        return f"The tool {named} specified in toolChoice is not defined in toolConfig.tools."
    inference = body.get("inferenceConfig") or {}
    max_tokens = inference.get("maxTokens") or 4096
    limit = next((n for fragment, n in OUTPUT_LIMITS if fragment in model), None)
    if limit is not None and max_tokens > limit:
        return f"max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of output tokens for {model}"
    thinking = _thinking(body)
    if thinking is None:
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= max_tokens:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if _forced(body):
        return "Thinking may not be enabled when tool_choice forces tool use."
    if inference.get("temperature") not in (None, 1, 1.0):
        return "`temperature` may only be set to 1 when thinking is enabled."
    if inference.get("topP") is not None and inference["topP"] < 0.95:
        return "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled."
    return None


def _usage(step: dict[str, Any] | None = None) -> dict[str, int]:
    usage = {"inputTokens": USAGE[0], "outputTokens": USAGE[1], "totalTokens": USAGE[0] + USAGE[1]}
    for field, key in (("cacheReadInputTokens", "cache_read"), ("cacheWriteInputTokens", "cache_write")):
        if (step or {}).get(key):
            usage[field] = int(step[key])  # type: ignore[index]
            usage["totalTokens"] += usage[field]
    return usage


async def converse(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    if step and step.get("exception"):
        return error_response(step["exception"], step.get("message") or f"mock {step['exception']}")
    problem = request_problem(request.match_info["model_id"], body)
    if problem is not None:
        return error_response("ValidationException", problem)
    tool = _wanted_tool(body)
    content: list[dict[str, Any]] = []
    if _thinking(body) is not None:
        content.append({"reasoningContent": {"reasoningText": {"text": "".join(THOUGHT), "signature": "mock-sig"}}})
    if tool is None or not _forced(body):
        content.append({"text": TEXT})
    if tool is not None:
        use = {"toolUseId": "tooluse_mock1", "name": tool.get("name", ""), "input": _tool_input(body, tool)}
        content.append({"toolUse": use})
    out = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "tool_use" if tool is not None else "end_turn",
        "usage": _usage(step),
        "metrics": {"latencyMs": 1},
    }
    return web.Response(body=orjson.dumps(out), content_type="application/json")


def _stream_frames(body: dict[str, Any], step: dict[str, Any]) -> tuple[list[bytes], list[bytes]]:
    """(content frames, closing frames) of a ConverseStream answer."""
    frames = [event("messageStart", {"role": "assistant"})]
    index = 0
    if _thinking(body) is not None:
        for delta in ({"text": THOUGHT[0]}, {"text": THOUGHT[1]}, {"signature": "mock-sig"}):
            frames.append(event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}))
        frames.append(event("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    tool = _wanted_tool(body)
    if tool is None or not _forced(body):
        for i in range(int(step.get("frames", 3))):
            frames.append(event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": f"tok{i} "}}))
        frames.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if tool is not None:
        start = {"toolUse": {"toolUseId": "tooluse_mock1", "name": tool.get("name", "")}}
        frames.append(event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        text = orjson.dumps(_tool_input(body, tool)).decode() if _forced(body) else '{"query": "mock"}'
        for part in (text[: len(text) // 2], text[len(text) // 2 :]) if _forced(body) else ('{"query": ', '"mock"}'):
            delta = {"contentBlockIndex": index, "delta": {"toolUse": {"input": part}}}
            frames.append(event("contentBlockDelta", delta))
        frames.append(event("contentBlockStop", {"contentBlockIndex": index}))
    closing = [event("messageStop", {"stopReason": "tool_use" if tool is not None else "end_turn"})]
    if not step.get("no_usage"):
        closing.append(event("metadata", {"usage": _usage(step), "metrics": {"latencyMs": 1}}))
    return frames, ([] if step.get("no_done") else closing)


async def converse_stream(
    request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None
) -> web.StreamResponse:
    step = step or {}
    if step.get("exception"):
        return error_response(step["exception"], step.get("message") or f"mock {step['exception']}")
    problem = request_problem(request.match_info["model_id"], body)
    if problem is not None:
        return error_response("ValidationException", problem)
    frames, closing = _stream_frames(body, step)
    if step.get("stream_exception"):
        at = 1 + int(step.get("exception_after", 0))  # after messageStart and k deltas
        name = step["stream_exception"]
        frames, closing = [*frames[:at], exception(name, step.get("message") or f"mock {name}")], []
    resp = web.StreamResponse(status=200, headers={"Content-Type": EVENTSTREAM, **(step.get("headers") or {})})
    await resp.prepare(request)
    if step.get("empty_stream"):
        await resp.write_eof()
        return resp
    break_after = step.get("break_after")
    for i, frame in enumerate([*frames, *closing]):
        if break_after is not None and i >= break_after:
            if request.transport is not None:
                request.transport.abort()  # the client sees a broken stream, not an end
            return resp
        delay = step.get("first_frame_delay_ms") if i == 0 else step.get("frame_delay_ms")
        if delay:
            await asyncio.sleep(delay / 1000)
        await resp.write(frame)
    await resp.write_eof()
    return resp


# --- routes -------------------------------------------------------------------------------


def _handler(answer: Any, route: Any, state_key: Any) -> Any:
    """The signature check, then the shared recording and scripting (`route`) around `answer`.

    `route` and `state_key` come from tools.mock.upstream, which may run as __main__
    (a second import of it would hold another state).
    """

    async def handle(request: web.Request) -> web.StreamResponse:
        model = request.match_info["model_id"]
        raw = await request.read()
        refused = verify(request, raw)
        if refused is not None:
            state = request.app[state_key].model(model)
            state.count += 1
            state.requests.append((request.path, request.headers, raw, None))
            return error_response(*refused, status=403)
        return await route(lambda _body: model, "bedrock", answer)(request)

    return handle


async def _list_async_invokes(request: web.Request) -> web.StreamResponse:
    """The health probe's target (ListAsyncInvokes), signature checked like every call."""
    refused = verify(request, await request.read())
    if refused is not None:
        return error_response(*refused, status=403)
    return web.Response(body=b'{"asyncInvokeSummaries": []}', content_type="application/json")


def add_routes(app: web.Application, route: Any, state_key: Any) -> None:
    """Bedrock's runtime paths under /bedrock (called by tools.mock.upstream.make_app with its
    `_route` wrapper and state key)."""
    app.router.add_post("/bedrock/model/{model_id}/converse", _handler(converse, route, state_key))
    app.router.add_post("/bedrock/model/{model_id}/converse-stream", _handler(converse_stream, route, state_key))
    app.router.add_get("/bedrock/async-invoke", _list_async_invokes)
