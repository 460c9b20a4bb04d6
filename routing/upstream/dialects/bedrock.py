"""AWS Bedrock's Converse and ConverseStream APIs behind the OpenAI chat shape (docs/providers.md#bedrock).

base_url is the regional runtime endpoint, `https://bedrock-runtime.{region}.amazonaws.com`,
whose host names the region; any other host (a VPC endpoint, a proxy, the mock upstream)
names it with `?region=...`. The model's `upstream_model` is the Bedrock model id or
inference profile, sent in the path: `POST /model/{modelId}/converse` (or
`/converse-stream`).

Every request is signed with AWS Signature Version 4 by botocore's `SigV4Auth` (service
`bedrock`, the body's SHA-256 in `X-Amz-Content-SHA256`, the session token when there is
one). The provider's secret (api_key_env or a stored key) is the credential triple
`ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]`.

Errors: Bedrock names them in `x-amzn-ErrorType` with a `{"message": ...}` body. They are
classified by status as for every dialect (routing.core.failures.failure_from_response),
with two corrections: ModelNotReadyException (sent as 429) and ModelErrorException (424)
are the provider's fault (retried, charged to the breaker, failed over), and the body is
turned into an error object that names the exception, which `upstream_client_error` relays.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit, urlunsplit

import orjson
from yarl import URL

from routing.config.snapshot import ModelSpec, ProviderSpec
from routing.config.validation import bedrock_region
from routing.core.failures import FailureKind, UpstreamFailure, failure_from_response
from routing.core.prices import token_classes
from routing.upstream.dialects.base import Dialect, ParsedResponse, PreparedRequest, encode, load_json, unsupported
from routing.upstream.translate.chat_to_bedrock import chat_completion_of, converse_request, gaps, translate_events

SERVICE = "bedrock"  # the SigV4 signing name of bedrock-runtime
HEALTH_PATH = "/async-invoke?maxResults=1"
# Exceptions whose HTTP status would misclassify them: the model, not the request, failed.
_PROVIDER_FAULTS = {"ModelNotReadyException": 503, "ModelErrorException": 502, "ModelStreamErrorException": 502}
# ConverseStream's in-stream exception types (camelCase) -> the HTTP status of the same error.
_STREAM_STATUS = {
    "throttlingException": 429,
    "validationException": 400,
    "accessDeniedException": 403,
    "resourceNotFoundException": 404,
    "serviceQuotaExceededException": 400,
    "modelTimeoutException": 408,
    "internalServerException": 500,
    "serviceUnavailableException": 503,
}


class Endpoint(NamedTuple):
    root: str  # scheme://host/path, no query
    region: str | None
    host: str  # the Host header botocore signs (no default port), computed once per URL


class AwsCredentials(NamedTuple):
    access_key_id: str
    secret_access_key: str
    session_token: str | None


@lru_cache(maxsize=256)
def endpoint_of(base_url: str) -> Endpoint:
    """The endpoint root and region of a base_url (parsed once per URL; validation checked the region)."""
    from botocore.auth import _host_from_url

    parts = urlsplit(base_url)
    root = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return Endpoint(root, bedrock_region(base_url), _host_from_url(root))


@lru_cache(maxsize=64)
def credentials_of(secret: str | None) -> AwsCredentials | None:
    """`ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]` split (None when absent or malformed)."""
    if not secret:
        return None
    parts = secret.strip().split(":")
    if len(parts) not in (2, 3) or not all(parts):
        return None
    return AwsCredentials(parts[0], parts[1], parts[2] if len(parts) == 3 else None)


def _cannot_sign(model: ModelSpec, missing: str) -> UpstreamFailure:
    """The request cannot be signed: the operator's configuration is incomplete, the upstream is not at fault
    (a client error for the breaker, never retried)."""
    return UpstreamFailure(
        FailureKind.UPSTREAM_4XX,
        f"provider {model.provider.name!r} (bedrock) has no usable {missing}: its key must be "
        "ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN] and its base_url must name a region; "
        "ask the gateway operator to fix its configuration (docs/providers.md#bedrock)",
        status=403,
    )


def sign(method: str, url: str, body: bytes, creds: AwsCredentials, region: str, host: str) -> dict[str, str]:
    """The headers of a SigV4-signed JSON request (botocore's signer, time now).

    The URL must be the one sent on the wire (see `wire_url`): the signature covers its path.
    `host` (Endpoint.host) is given rather than derived from the URL on every request: it
    is about a third of the signer's time.
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    headers = {
        "Host": host,
        "Content-Type": "application/json",
        "X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest(),
    }
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(*creds), SERVICE, region).add_auth(request)
    return dict(request.headers.items())


def wire_url(root: str, model_id: str, stream: bool) -> str:
    """The request URL as aiohttp will send it (yarl's normal form), so the signed path is the sent one.

    The model id is one path segment: an inference-profile ARN's `/` stays encoded.
    """
    path = f"/model/{quote(model_id, safe='')}/{'converse-stream' if stream else 'converse'}"
    return str(URL(root + path))


def bedrock_failure(
    status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
) -> UpstreamFailure:
    """Classify one Bedrock error (HTTP or in-stream) like every upstream error, by status."""
    status = _PROVIDER_FAULTS.get(error_type, status)
    body = orjson.dumps({"error": {"message": message, "type": error_type, "code": None, "param": None}})
    return failure_from_response(status, headers or {}, body)


class BedrockDialect(Dialect):
    name = "bedrock"

    def build_request(
        self,
        kind: str,
        body: dict[str, Any],
        model: ModelSpec,
        base_url: str,
        api_key: str | None,
        stream: bool,
    ) -> PreparedRequest:
        if kind != "chat":
            raise unsupported(self.name, kind, model)
        endpoint = endpoint_of(base_url)
        creds = credentials_of(api_key)
        if creds is None or endpoint.region is None:
            raise _cannot_sign(model, "AWS credentials" if creds is None else "AWS region")
        dropped = gaps(body, model)
        payload = encode(converse_request(body, model))
        url = wire_url(endpoint.root, model.upstream_model, stream)
        headers = sign("POST", url, payload, creds, endpoint.region, endpoint.host)
        return PreparedRequest("POST", url, headers, payload, None, dropped)

    def parse_response(self, kind: str, body: bytes, model: ModelSpec, context: Any = None) -> ParsedResponse:
        out, prompt, completion = chat_completion_of(load_json(body, model), model.upstream_model)
        return ParsedResponse(orjson.dumps(out), (prompt, completion), token_classes(out.get("usage")))

    def translate_stream(self, chunks: AsyncIterator[bytes], model: ModelSpec) -> AsyncIterator[bytes]:
        return translate_events(chunks, model.upstream_model, _stream_failure)

    def failure(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamFailure:
        """Bedrock's error: its type from `x-amzn-ErrorType` (`Name:namespace`), its text from `message`."""
        raw = headers.get("x-amzn-ErrorType") or headers.get("X-Amzn-ErrorType") or ""
        error_type = raw.split(":", 1)[0].strip()
        try:
            data = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            data = None
        message = data.get("message") or data.get("Message") if isinstance(data, dict) else None
        if not error_type and isinstance(data, dict):
            error_type = str(data.get("__type") or "").rsplit("#", 1)[-1]
        if not error_type and not message:
            return failure_from_response(status, headers, body)
        text = str(message or f"Bedrock answered HTTP {status}")
        return bedrock_failure(status, error_type or f"HTTP{status}", text, headers)

    def health_url(self, provider: ProviderSpec) -> str:
        """ListAsyncInvokes, the runtime's one cheap signed GET (health_check_path overrides it)."""
        return str(URL(endpoint_of(provider.base_url).root + (provider.health_check_path or HEALTH_PATH)))

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {}  # every request is signed on its own (build_request, probe_headers)

    def probe_headers(self, provider: ProviderSpec) -> dict[str, str]:
        """The probe is signed like a request, so wrong credentials show as "down" (403) before traffic."""
        creds, endpoint = credentials_of(provider.api_key), endpoint_of(provider.base_url)
        if creds is None or endpoint.region is None:
            return {}
        return sign("GET", self.health_url(provider), b"", creds, endpoint.region, endpoint.host)


def _stream_failure(exception_type: str, message: str) -> UpstreamFailure:
    """An exception event before the stream's first content, classified like its HTTP twin."""
    name = exception_type[:1].upper() + exception_type[1:]
    return bedrock_failure(_STREAM_STATUS.get(exception_type, 502), name, message)
