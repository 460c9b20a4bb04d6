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

Gemini answers a `generationConfig` asking for `application/json` with JSON of its
`responseJsonSchema` (or `responseSchema`, whose fields are checked as Gemini does: 400 for one
its OpenAPI subset has no place for, such as `additionalProperties` or `$ref`), and a forced call (mode ANY, the function
`allowedFunctionNames` names) without text, its args a value of the function's schema
(tools.mock.schema_values, seeded by the request).
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


def _calling(body: dict[str, Any]) -> dict[str, Any]:
    return (body.get("toolConfig") or {}).get("functionCallingConfig") or {}


def _wants_function(body: dict[str, Any]) -> dict[str, Any] | None:
    """The function mode ANY allows first, else the first declared, unless the last turn already
    answers a call or calls are off."""
    tools = body.get("tools")
    decls = tools[0].get("functionDeclarations") if isinstance(tools, list) and tools else None
    mode = _calling(body).get("mode")
    if not decls or mode == "NONE":
        return None
    contents = body.get("contents") or [{}]
    if any("functionResponse" in p for p in (contents[-1].get("parts") or ()) if isinstance(p, dict)):
        return None
    allowed = _calling(body).get("allowedFunctionNames") or ()
    named = [d for d in decls if isinstance(d, dict) and d.get("name") in allowed]
    return named[0] if named else decls[0]


def _call_args(fn: dict[str, Any], body: dict[str, Any]) -> Any:
    """Mode ANY forces a call: its args are a value of the function's schema (a structured answer)."""
    if _calling(body).get("mode") != "ANY":
        return {"query": "mock"}
    return schema_values.answer_for(fn.get("parametersJsonSchema") or fn.get("parameters"), body)


# The fields of Gemini's `Schema` (the OpenAPI subset `responseSchema` takes); any other name is refused with
# a 400, as Gemini refuses `additionalProperties`, `$ref` or `const` there (`responseJsonSchema` takes them).
SCHEMA_FIELDS = frozenset(
    "type format title description nullable enum maxItems minItems properties required minProperties "
    "maxProperties minLength maxLength pattern example anyOf propertyOrdering default items minimum maximum".split()
)


def _unknown_schema_field(schema: Any, at: str) -> str | None:
    """Gemini's complaint about the first field of `schema` its `Schema` has no place for, or None."""
    if not isinstance(schema, dict):
        return None
    for name, value in schema.items():
        if name not in SCHEMA_FIELDS:
            return f"Invalid JSON payload received. Unknown name \"{name}\" at '{at}': Cannot find field."
        nested: list[tuple[Any, str]] = []
        if name == "properties" and isinstance(value, dict):
            nested = [(sub, f"{at}.properties[{i}].value") for i, sub in enumerate(value.values())]
        elif name == "anyOf" and isinstance(value, list):
            nested = [(sub, f"{at}.any_of[{i}]") for i, sub in enumerate(value)]
        elif name == "items":
            nested = [(value, f"{at}.items")]
        for sub, where in nested:
            if (found := _unknown_schema_field(sub, where)) is not None:
                return found
    return None


def _answer_text(body: dict[str, Any], default: str) -> str:
    """JSON of the requested schema when `generationConfig` asks for JSON, else `default`."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") != JSON_TYPE:
        return default
    schema = config.get("responseJsonSchema") or config.get("responseSchema") or {"type": "object"}
    return orjson.dumps(schema_values.answer_for(schema, body)).decode()


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return candidate


async def _generate(request: web.Request, body: dict[str, Any], model: bytes, step: dict[str, Any] | None) -> Any:
    mock = request.app[MOCK]
    name, method = _split_call(request)
    if method in ("batchEmbedContents", "embedContent"):
        items = body.get("requests") if method == "batchEmbedContents" else [body]
        return _json(200, {"embeddings": [{"values": mock.VECTOR} for _ in items or ()]})
    if not isinstance(body.get("contents"), list) or not body["contents"]:
        return web.Response(status=400, body=google_error(400, "contents is not specified"), content_type=JSON_TYPE)
    config = body.get("generationConfig") or {}
    complaint = _unknown_schema_field(config.get("responseSchema"), "generation_config.response_schema")
    if complaint is not None:
        return web.Response(status=400, body=google_error(400, complaint), content_type=JSON_TYPE)
    fn = _wants_function(body)
    call = [{"functionCall": {"name": fn.get("name", ""), "args": _call_args(fn, body)}}] if fn is not None else []
    forced = fn is not None and _calling(body).get("mode") == "ANY"  # a forced call comes without text
    text = _answer_text(body, mock.TEXT)
    if method == "generateContent":
        answer = {
            "candidates": [_candidate([*([] if forced else [{"text": text}]), *call], "STOP")],
            "usageMetadata": GEMINI_USAGE,
            "modelVersion": name,
            "responseId": "mock-gemini-1",
        }
        return _json(200, answer)
    count = int((step or {}).get("frames", 3))
    pieces = (
        [f"tok{i} " for i in range(count)] if text == mock.TEXT else [text[: len(text) // 2], text[len(text) // 2 :]]
    )
    frames = []
    for piece in [] if forced else pieces:
        event: dict[str, Any] = {"candidates": [_candidate([{"text": piece}], None)], "modelVersion": name}
        frames.append(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
    last = {"candidates": [_candidate(call, "STOP")], "usageMetadata": GEMINI_USAGE, "modelVersion": name}
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
