"""The mock upstream's cloud APIs: Azure OpenAI, the Gemini API and Vertex AI (docs/providers.md).

Routes (added to tools.mock.upstream's app; scripts and /_control/calls key on the
model named in the URL: the Azure deployment, the Gemini or Vertex model):
  Azure   POST /azure/openai/deployments/{deployment}/chat/completions?api-version=V (and
          /embeddings), POST /azure/openai/responses?api-version=V; GET /azure/openai/models.
          Auth: `api-key` or `Authorization: Bearer`; none, or one starting with "bad" -> 401.
          No api-version -> 404, as Azure answers.
  Gemini  POST /gemini/v1beta/models/{model}:generateContent, :streamGenerateContent?alt=sse,
          :batchEmbedContents, :embedContent; GET /gemini/v1beta/models.
          Auth: `x-goog-api-key`; none, or one starting with "bad" -> 403 PERMISSION_DENIED.
  Vertex  POST /vertex/v1/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent
          (:streamGenerateContent?alt=sse), .../publishers/anthropic/models/{model}:rawPredict
          (:streamRawPredict; the body must carry anthropic_version and no model).
          Auth: `Authorization: Bearer` with a token this mock issued -> else 401 UNAUTHENTICATED.
  Token   POST /vertex/token: the OAuth JWT-bearer grant of a service account. The assertion's
          RS256 signature is checked against the public key registered for its issuer
          (POST /_control/vertex {"client_email", "public_key" (PEM), "expires_in"?}); answers
          {"access_token", "expires_in", "token_type"}. GET /_control/vertex: {"exchanges"}.

Scripted error statuses without a body answer in each API's own error shape.

Gemini answers (both mounts) as generateContent does: with `responseMimeType: application/json`
the text is JSON valid against `responseJsonSchema` (or `responseSchema`; tools.mock.schema_values);
with a `thinkingConfig` that thinks, `usageMetadata.thoughtsTokenCount`, and with
`includeThoughts` a thought part (`thought: true`) before the answer (a stream sends it as its
first event); a `thinkingBudget` outside the model's range (`THINKING_RANGES`) is Google's 400
INVALID_ARGUMENT, as are `responseSchema` beside `responseJsonSchema` and a JSON-Schema-only keyword
(`additionalProperties`, `$ref`, ...) inside `responseSchema`, whose OpenAPI subset has no such
field. A step {"cached_tokens": N} reports N as `cachedContentTokenCount`, as implicit caching
does. Gemini 3 models (and any that thinks) sign their function calls (`thoughtSignature`), and a
Gemini 3 model refuses (400) a model turn whose functionCall part comes back without its signature.
"""

from __future__ import annotations

import base64
import itertools
import time
from types import ModuleType
from typing import Any

import orjson
from aiohttp import web

from tools.mock import schema_values

VERTEX = web.AppKey("vertex_state", dict)
# tools.mock.upstream, handed over by its make_app (whose helpers these handlers reuse; no import back)
MOCK = web.AppKey("mock_module", ModuleType)
JSON_TYPE = "application/json"
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
GOOGLE_STATUS.update({429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"})
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"  # the `aud` Google's own token endpoint requires
GEMINI_USAGE = {"promptTokenCount": 11, "candidatesTokenCount": 6, "totalTokenCount": 17}
THOUGHT = "Let me think about what is asked."
THOUGHT_TOKENS = 5
THOUGHT_SIGNATURE = "CiQBcsjafE1mockSignatureOfTheThought=="
SIGNING = "gemini-3"  # models that sign their function calls and require the signature back
# JSON Schema keywords the OpenAPI-subset `Schema` of `responseSchema` has no field for (Gemini API reference)
NOT_IN_RESPONSE_SCHEMA = frozenset(
    {"additionalProperties", "$schema", "$defs", "$ref", "definitions", "const", "allOf", "oneOf"}
)
# Gemini's thinking budgets by model-name prefix: (smallest, largest, whether 0 turns thinking off)
THINKING_RANGES = (
    ("gemini-2.5-flash-lite", 512, 24576, True),
    ("gemini-2.5-flash", 1, 24576, True),
    ("gemini-2.5-pro", 128, 32768, False),
)


def _json(status: int, payload: Any) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type=JSON_TYPE)


def google_error(status: int, message: str = "mock upstream failure") -> bytes:
    """Google's error shape (Gemini API and Vertex AI)."""
    return orjson.dumps({"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "UNKNOWN")}})


def azure_error(status: int) -> bytes:
    return orjson.dumps({"error": {"code": str(status), "message": "mock upstream failure"}})


# --- Azure OpenAI ---------------------------------------------------------------------


def _azure_check(request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
    key = request.headers.get("api-key") or request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not key or key.startswith("bad"):
        message = "Access denied due to invalid subscription key or wrong API endpoint."
        return _json(401, {"error": {"code": "401", "message": message}})
    if not request.query.get("api-version"):
        return _json(404, {"error": {"code": "404", "message": "Resource not found"}})
    return None


def _deployment(request: web.Request) -> str:
    return request.match_info["deployment"]


# --- Gemini shapes ------------------------------------------------------------------------


def _split_call(request: web.Request) -> tuple[str, str]:
    model, _, method = request.match_info["call"].rpartition(":")
    return model, method


def _gemini_model(request: web.Request) -> str:
    return _split_call(request)[0]


def _gemini_check(request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
    key = request.headers.get("x-goog-api-key", "")
    if not key or key.startswith("bad"):
        return web.Response(
            status=403,
            body=google_error(403, "Method doesn't allow unregistered callers."),
            content_type=JSON_TYPE,
        )
    return None


def _wants_function(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first declared function, unless the last turn already answers a call or calls are off."""
    tools = body.get("tools")
    decls = tools[0].get("functionDeclarations") if isinstance(tools, list) and tools else None
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    if not decls or mode == "NONE":
        return None
    contents = body.get("contents") or [{}]
    if any("functionResponse" in p for p in (contents[-1].get("parts") or ()) if isinstance(p, dict)):
        return None
    return decls[0]


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return candidate


def _config_problem(name: str, config: dict[str, Any]) -> str | None:
    """Why Gemini would refuse this generationConfig (400 INVALID_ARGUMENT), or None."""
    if "responseSchema" in config and "responseJsonSchema" in config:
        return "responseSchema and responseJsonSchema cannot both be set"
    schema = "responseSchema" in config or "responseJsonSchema" in config
    if schema and config.get("responseMimeType") != "application/json":
        return "a response schema needs responseMimeType application/json"
    unknown = _unknown_field(config.get("responseSchema"))
    if unknown is not None:
        return f"Invalid JSON payload received. Unknown name {unknown!r} at 'generation_config.response_schema'"
    thinking = config.get("thinkingConfig") or {}
    budget = thinking.get("thinkingBudget")
    if budget is None or budget == -1:
        return None
    if "thinkingLevel" in thinking:
        return "thinkingBudget and thinkingLevel cannot both be set"
    for prefix, low, high, off in THINKING_RANGES:
        if name.removeprefix("models/").startswith(prefix):
            if budget == 0 and not off:
                return "Budget 0 is invalid. This model only works in thinking mode."
            if budget != 0 and not low <= budget <= high:
                return f"The thinking budget {budget} is invalid. Please choose a value between {low} and {high}."
    return None


def _unknown_field(schema: Any) -> str | None:
    """The first JSON-Schema-only keyword in a `responseSchema`, which the API refuses as an unknown field."""
    if isinstance(schema, list):
        return next((found for item in schema if (found := _unknown_field(item)) is not None), None)
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if key in NOT_IN_RESPONSE_SCHEMA:
            return key
        nested = value.values() if key == "properties" and isinstance(value, dict) else [value]
        found = next((f for v in nested if (f := _unknown_field(v)) is not None), None)
        if found is not None:
            return found
    return None


def _unsigned_call(name: str, contents: list[Any]) -> str | None:
    """Gemini 3 refuses a model turn's functionCall part sent back without the thoughtSignature it came with."""
    if not name.startswith(SIGNING):
        return None
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) and content.get("role") == "model" else None
        for part in parts or ():
            if isinstance(part, dict) and "functionCall" in part and not part.get("thoughtSignature"):
                return "Function call is missing a thought_signature in functionCall parts."
    return None


def _answer_text(config: dict[str, Any], text: str, body: dict[str, Any]) -> str:
    """The answer's text: JSON valid against the requested schema in JSON mode (constrained decoding),
    seeded by the request so different prompts get different values."""
    if config.get("responseMimeType") != "application/json":
        return text
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    return orjson.dumps(
        schema_values.answer_for(schema, body) if isinstance(schema, dict) else {"answer": text}
    ).decode()


def _usage(config: dict[str, Any], step: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """(usageMetadata, whether the model thought): thoughts and implicit-cache reads as Gemini counts them."""
    thinking = config.get("thinkingConfig")
    thinks = isinstance(thinking, dict) and thinking.get("thinkingBudget") != 0
    usage = dict(GEMINI_USAGE)
    if thinks:
        usage["thoughtsTokenCount"] = THOUGHT_TOKENS
        usage["totalTokenCount"] += THOUGHT_TOKENS
    if (step or {}).get("cached_tokens"):
        usage["cachedContentTokenCount"] = int(step["cached_tokens"])  # type: ignore[index]
    return usage, thinks and bool(thinking.get("includeThoughts"))  # type: ignore[union-attr]


async def _generate(request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None) -> Any:
    mock = request.app[MOCK]
    name, method = _split_call(request)
    if method in ("batchEmbedContents", "embedContent"):
        items = body.get("requests") if method == "batchEmbedContents" else [body]
        return _json(200, {"embeddings": [{"values": mock.VECTOR} for _ in items or ()]})
    if not isinstance(body.get("contents"), list) or not body["contents"]:
        return web.Response(status=400, body=google_error(400, "contents is not specified"), content_type=JSON_TYPE)
    config = body.get("generationConfig") or {}
    problem = _config_problem(name, config) or _unsigned_call(name, body["contents"])
    if problem is not None:
        return web.Response(status=400, body=google_error(400, problem), content_type=JSON_TYPE)
    usage, thoughts = _usage(config, step)
    thought = [{"text": THOUGHT, "thought": True}] if thoughts else []
    fn = _wants_function(body)
    call = [{"functionCall": {"name": fn.get("name", ""), "args": {"query": "mock"}}}] if fn is not None else []
    if call and (thoughts or name.startswith(SIGNING)):
        call[0]["thoughtSignature"] = THOUGHT_SIGNATURE
    text = _answer_text(config, mock.TEXT, body)
    if method == "generateContent":
        answer = {
            "candidates": [_candidate([*thought, {"text": text}, *call], "STOP")],
            "usageMetadata": usage,
            "modelVersion": name,
            "responseId": "mock-gemini-1",
        }
        return _json(200, answer)
    return await _stream(request, mock, name, (config, step, usage, text), thought, call)


async def _stream(
    request: web.Request,
    mock: ModuleType,
    name: str,
    asked: tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any], str],
    thought: list[dict[str, Any]],
    call: list[dict[str, Any]],
) -> Any:
    """streamGenerateContent?alt=sse: the thought first, the text in `frames` pieces, the call and usage last."""
    config, step, usage, answer = asked
    count = int((step or {}).get("frames", 3))
    if config.get("responseMimeType") == "application/json":
        cut = len(answer) // 2
        pieces = [answer[:cut], answer[cut:]]
    else:
        pieces = [f"tok{i} " for i in range(count)]
    frames = []
    for parts in ([thought] if thought else []) + [[{"text": piece}] for piece in pieces]:
        event: dict[str, Any] = {"candidates": [_candidate(parts, None)], "modelVersion": name}
        frames.append(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
    last = {"candidates": [_candidate(call, "STOP")], "usageMetadata": usage, "modelVersion": name}
    if (step or {}).get("no_usage"):
        del last["usageMetadata"]
    frames.append(b"data: " + orjson.dumps(last) + b"\r\n\r\n")
    return await mock._sse(request, frames, b"", step)  # noqa: SLF001 - Gemini streams have no terminator


# --- Vertex AI ----------------------------------------------------------------------------


def _vertex_check(request: web.Request, body: dict[str, Any]) -> web.StreamResponse | None:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if token not in request.app[VERTEX]["tokens"]:
        message = "Request had invalid authentication credentials. Expected OAuth 2 access token."
        return web.Response(status=401, body=google_error(401, message), content_type=JSON_TYPE)
    if "/publishers/anthropic/" in request.path and ("model" in body or body.get("anthropic_version") is None):
        message = "anthropic_version is required and model must not be set in the body"
        return web.Response(status=400, body=google_error(400, message), content_type=JSON_TYPE)
    return None


async def _raw_predict(request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None) -> Any:
    return await request.app[MOCK]._anthropic_messages(request, body, model, step)  # noqa: SLF001


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _verify_assertion(state: dict[str, Any], assertion: str, audience: str) -> str | None:
    """Why the JWT-bearer assertion is refused, or None: RS256 by the issuer's registered key, aud, exp."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        head, payload, signature = assertion.split(".")
        claims = orjson.loads(_b64(payload))
        header = orjson.loads(_b64(head))
    except (ValueError, orjson.JSONDecodeError):
        return "assertion is not a JWT"
    pem = state["keys"].get(claims.get("iss"))
    if pem is None or header.get("alg") != "RS256":
        return "unknown issuer or algorithm"
    key = serialization.load_pem_public_key(pem.encode())
    try:
        key.verify(_b64(signature), f"{head}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    except InvalidSignature:
        return "Invalid JWT Signature."
    if (
        claims.get("aud") not in (audience, GOOGLE_TOKEN_AUDIENCE)
        or not claims.get("scope")
        or claims.get("exp", 0) < time.time()
    ):
        return "Invalid JWT: aud, scope or exp"
    return None


async def _token(request: web.Request) -> web.StreamResponse:
    state = request.app[VERTEX]
    form = await request.post()
    if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
        return _json(400, {"error": "unsupported_grant_type"})
    why = _verify_assertion(state, str(form.get("assertion", "")), str(request.url.with_query(None)))
    if why is not None:
        return _json(400, {"error": "invalid_grant", "error_description": why})
    state["exchanges"] += 1
    token = f"ya29.mock-{next(state['serial'])}-{time.monotonic_ns()}"
    state["tokens"].add(token)
    return _json(200, {"access_token": token, "expires_in": state["expires_in"], "token_type": "Bearer"})


async def _control(request: web.Request) -> web.StreamResponse:
    state = request.app[VERTEX]
    if request.method == "GET":
        return _json(200, {"exchanges": state["exchanges"], "tokens": len(state["tokens"])})
    body = await request.json()
    if body.get("client_email") and body.get("public_key"):
        state["keys"][body["client_email"]] = body["public_key"]
    if body.get("expires_in"):
        state["expires_in"] = int(body["expires_in"])
    return _json(200, {"ok": True})


def new_service_account(
    token_uri: str, client_email: str = "switchboard-demo@demo-project.iam.gserviceaccount.com"
) -> tuple[str, str]:
    """(service-account JSON, public key PEM): a fresh RSA key, never stored, for the demo and tests."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    info = {
        "type": "service_account",
        "project_id": "demo-project",
        "private_key_id": "mock",
        "private_key": private,
        "client_email": client_email,
        "token_uri": token_uri,
    }
    return orjson.dumps(info).decode(), public


def add_routes(app: web.Application, mock: ModuleType) -> None:
    """Add the cloud APIs to the mock's app; `mock` is tools.mock.upstream (its route wrapper, answers)."""
    app[MOCK] = mock
    app[VERTEX] = {"keys": {}, "tokens": set(), "exchanges": 0, "serial": itertools.count(1), "expires_in": 3600}
    model_of = mock._model_of  # noqa: SLF001
    azure = {"path_model": _deployment, "check": _azure_check, "error": azure_error}
    deployment = "/azure/openai/deployments/{deployment}"
    app.router.add_post(deployment + "/chat/completions", mock._route(model_of, "openai", mock._openai_chat, **azure))  # noqa: SLF001
    app.router.add_post(deployment + "/embeddings", mock._route(model_of, "openai", mock._openai_embeddings, **azure))  # noqa: SLF001
    responses = {"check": _azure_check, "error": azure_error}
    app.router.add_post("/azure/openai/responses", mock._route(model_of, "openai", mock._openai_responses, **responses))  # noqa: SLF001
    app.router.add_get("/azure/openai/models", mock._models)  # noqa: SLF001
    gemini = {"path_model": _gemini_model, "check": _gemini_check, "error": google_error}
    app.router.add_post("/gemini/v1beta/models/{call}", mock._route(model_of, "gemini", _generate, **gemini))  # noqa: SLF001
    app.router.add_get("/gemini/v1beta/models", mock._models)  # noqa: SLF001
    vertex = {"path_model": _gemini_model, "check": _vertex_check, "error": google_error}
    root = "/vertex/v1/projects/{project}/locations/{location}/publishers"
    app.router.add_post(root + "/google/models/{call}", mock._route(model_of, "gemini", _generate, **vertex))  # noqa: SLF001
    app.router.add_post(root + "/anthropic/models/{call}", mock._route(model_of, "anthropic", _raw_predict, **vertex))  # noqa: SLF001
    app.router.add_post("/vertex/token", _token)
    app.router.add_route("*", "/_control/vertex", _control)
