"""`python -m bench.fuzz`: throw malformed requests at a running gateway over raw sockets; report every 500.

Bad JSON, wrong types in every field of valid bodies of each endpoint and dialect,
deep nesting, odd paths, odd methods and odd headers (duplicate Authorization, bad
Content-Length, chunked bodies, junk request ids). Each request is one connection on
loopback; the count is bounded (--count) and the run is reproducible (--seed).

By default it starts its own mock upstream and a gateway (--server uvicorn|daphne) on
a throwaway SQLite database; `--url http://127.0.0.1:PORT --key KEY` fuzzes a gateway
that is already running instead (loopback only). Exit status 1 when any answer was a
500 or the server stopped answering /health. See docs/request-validation.md#fuzzing.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson

from bench import procs

ORG, AGENT = "fuzz", "fuzzer"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

CONFIG = """
resilience:
  max_retries: 1
  backoff_base_ms: 1
  backoff_max_ms: 5
providers:
  - name: mock
    dialect: openai
    base_url: {mock}/v1
  - name: claude
    dialect: anthropic
    base_url: {mock}/anthropic/v1
  - name: tei
    dialect: tei
    base_url: {mock}/tei
  - name: cohere
    dialect: cohere
    base_url: {mock}/cohere/v2
models:
  - {{id: f-chat, provider: mock, upstream_model: fz-chat, capabilities: [chat, streaming, tools, structured_output, vision], max_output_tokens: 4096}}
  - {{id: f-claude, provider: claude, upstream_model: fz-claude, capabilities: [chat, streaming, tools, vision]}}
  - {{id: f-embed, provider: mock, upstream_model: fz-embed, capabilities: [embeddings]}}
  - {{id: f-tei, provider: tei, upstream_model: fz-tei, capabilities: [embeddings, rerank]}}
  - {{id: f-cohere, provider: cohere, upstream_model: fz-cohere, capabilities: [embeddings, rerank]}}
  - {{id: f-rerank, provider: mock, upstream_model: fz-rerank, capabilities: [rerank]}}
  - {{id: f-resp, provider: mock, upstream_model: fz-resp, capabilities: [responses]}}
orgs:
  - name: fuzz
    agents:
      - name: fuzzer
"""

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "user", "content": "and now?"},
]
VALID: dict[str, list[tuple[list[str], dict[str, Any]]]] = {
    "/v1/chat/completions": [
        (
            ["f-chat", "f-claude"],
            {
                "messages": MESSAGES,
                "temperature": 0.5,
                "top_p": 0.9,
                "max_tokens": 20,
                "stop": ["\n"],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                "tool_choice": "auto",
                "parallel_tool_calls": False,
                "response_format": {"type": "text"},
                "user": "u1",
                "n": 1,
                "seed": 7,
                "logit_bias": {"50256": -1},
                "stream_options": {"include_usage": True},
            },
        )
    ],
    "/v1/embeddings": [
        (["f-embed", "f-tei", "f-cohere"], {"input": ["a", "b"], "dimensions": 8, "encoding_format": "float"})
    ],
    "/v1/rerank": [(["f-rerank", "f-tei", "f-cohere"], {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1})],
    "/v1/responses": [
        (
            ["f-resp"],
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}], "instructions": "x"},
        )
    ],
}


# --- mutations ---------------------------------------------------------------------------


def deep(rng: random.Random, levels: int) -> bytes:
    if rng.random() < 0.5:
        return b"[" * levels + b"]" * levels
    return b'{"a":' * levels + b"1" + b"}" * levels


def hostile(rng: random.Random) -> Any:
    return rng.choice(
        [
            5,
            -5,
            0,
            1.5,
            -1e308,
            2**63,
            2**64 - 1,
            True,
            False,
            None,
            "",
            "x",
            "\u0000",
            "é" * 50,
            "x" * 5000,
            [],
            {},
            [5],
            [None],
            [{}],
            [[]],
            {"a": 5},
            {"type": 5},
            {"role": "user"},
            ["a"] * 10,
            orjson.loads(deep(rng, rng.choice([100, 253, 254, 300, 900]))),
        ]
    )


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out: list[tuple] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append((*prefix, i))
            out += paths(item, (*prefix, i))
    return out


EXTRA_KEYS = [
    "type",
    "role",
    "content",
    "text",
    "image_url",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "stream",
    "model",
    "format",
    "input",
    "usage",
    "id",
    "messages",
    "tools",
    "response_format",
    "max_output_tokens",
]


def _objects(value: Any) -> list[Any]:
    out = [value]
    if isinstance(value, dict):
        for item in value.values():
            out += _objects(item)
    elif isinstance(value, list):
        for item in value:
            out += _objects(item)
    return out


def mutate(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        choices = paths(body)
        if not choices:
            break
        path = rng.choice(choices)
        target = body
        for step in path[:-1]:
            target = target[step]
        action = rng.random()
        if action < 0.15 and isinstance(target, dict):
            target.pop(path[-1], None)
        elif action < 0.35:  # a field where the API has none (or another object's field): passed through
            objects = [value for value in _objects(body) if isinstance(value, dict)]
            rng.choice(objects)[rng.choice(EXTRA_KEYS)] = hostile(rng)
        else:
            target[path[-1]] = hostile(rng)
    return body


def json_body(rng: random.Random) -> tuple[str, bytes]:
    path = rng.choice(list(VALID))
    models, body = rng.choice(VALID[path])
    body = {"model": rng.choice(models), **body}
    if path == "/v1/chat/completions" and rng.random() < 0.3:
        body["stream"] = True
    return path, json.dumps(mutate(rng, body), ensure_ascii=rng.random() < 0.5).encode()  # orjson stops at 254 levels


def bad_json(rng: random.Random) -> tuple[str, bytes]:
    path = rng.choice(list(VALID))
    valid = orjson.dumps({"model": "f-chat", "messages": [{"role": "user", "content": "hi"}]})
    raw = rng.choice(
        [
            b"",
            b"{",
            b"[]",
            b"null",
            b"5",
            b'"x"',
            b"{not json}",
            b'{"a": NaN}',
            b'{"a": Infinity}',
            b'{"a": 1e999}',
            b'{"a": 1,}',
            b'{"a": "\\ud800"}',
            b"\xff\xfe{}",
            b'{"messages": "\xff"}',
            valid[: rng.randrange(1, len(valid))],
            valid + b"garbage",
            b'{"model": "f-chat", "model": 5, "messages": [{"role": "user", "content": "hi"}]}',
            b'{"model": "f-chat", "messages": [{"role": "user", "content": "hi"}], "messages": 5}',
            b"{" + b'"a":' * 10 + b"1" + b"}" * 10,
            deep(rng, rng.choice([1024, 1025, 2000])),
        ]
    )
    return path, raw


def deep_body(rng: random.Random) -> tuple[str, bytes]:
    path = rng.choice(list(VALID))
    models, body = rng.choice(VALID[path])
    raw = orjson.dumps({"model": rng.choice(models), **body})
    field = rng.choice([b"extra", b"metadata", b"tools", b"input", b"messages", b"documents"])
    nested = deep(rng, rng.choice([250, 253, 254, 255, 400, 1000, 1022]))
    return path, raw[:-1] + b', "' + field + b'": ' + nested + b"}"


ODD_PATHS = [
    "/v1",
    "/v1/",
    "/V1",
    "/V1/chat/completions",
    "//v1/chat/completions",
    "/v1//chat/completions",
    "///v1",
    "/v1/chat/completions/",
    "/v1/chat/completions?x=1",
    "/v1/chat/completions%00",
    "/v1/%2e%2e/admin/",
    "/v1/../admin/",
    "/v1/models/x",
    "/v1/" + "a" * 3000,
    "/v1/chat/completions#frag",
    "/health/",
    "/healthz",
    "/v1/embeddings/",
    "/v1/ré",
]


def build_request(rng: random.Random, key: str) -> tuple[str, bytes]:
    """One raw HTTP/1.1 request and a short label of what kind of oddity it carries."""
    kind = rng.choices(["types", "json", "deep", "path", "headers", "method"], [50, 12, 10, 10, 13, 5])[0]
    method = "POST"
    headers: list[tuple[str, str]] = [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")]
    if kind == "types":
        path, body = json_body(rng)
    elif kind == "json":
        path, body = bad_json(rng)
    elif kind == "deep":
        path, body = deep_body(rng)
    else:
        path, body = (
            json_body(rng)
            if rng.random() < 0.5
            else ("/v1/chat/completions", b'{"model": "f-chat", "messages": [{"role": "user", "content": "hi"}]}')
        )
    if kind == "path":
        path = rng.choice(ODD_PATHS)
    if kind == "method":
        method = rng.choice(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
        path = rng.choice([*VALID, "/v1/models", "/v1"])
    length: str | None = str(len(body))
    chunked = False
    if kind == "headers":
        odd = rng.choice(
            [
                "dup-auth",
                "dup-auth-same",
                "no-auth",
                "empty-bearer",
                "basic",
                "junk-length",
                "short-length",
                "chunked",
                "request-id",
                "idempotency",
                "content-type",
                "huge-header",
                "latin1",
            ]
        )
        if odd == "dup-auth":
            headers.insert(0, ("Authorization", "Bearer sb-wrong"))
        elif odd == "dup-auth-same":
            headers.append(("Authorization", f"Bearer {key}"))
        elif odd == "no-auth":
            headers = headers[1:]
        elif odd == "empty-bearer":
            headers[0] = ("Authorization", "Bearer ")
        elif odd == "basic":
            headers[0] = ("Authorization", "Basic dXNlcjpwYXNz")
        elif odd == "junk-length":
            length = rng.choice(["abc", "-1", "1e3", " 5", "99999999999999999999"])
        elif odd == "short-length":
            length = str(max(0, len(body) - rng.randrange(1, 10)))
        elif odd == "chunked":
            chunked, length = True, None
        elif odd == "request-id":
            headers.append(("X-Request-Id", rng.choice(["", "a" * 5000, "../../etc", "<script>", "id with spaces"])))
        elif odd == "idempotency":
            headers.append(("Idempotency-Key", rng.choice(["", "k" * 3000, "é", "k1"])))
        elif odd == "content-type":
            headers[1] = (
                "Content-Type",
                rng.choice(["text/plain", "application/x-www-form-urlencoded", "", "multipart/form-data"]),
            )
        elif odd == "huge-header":
            headers.append(("X-Filler", "f" * 6000))
        elif odd == "latin1":
            headers.append(("X-Note", "caf\xe9"))
        kind = f"headers:{odd}"
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    head += [f"{name}: {value}" for name, value in headers]
    if chunked:
        head.append("Transfer-Encoding: chunked")
        half = len(body) // 2
        payload = (
            b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]) if part) + b"0\r\n\r\n"
        )
    else:
        if length is not None:
            head.append(f"Content-Length: {length}")
        payload = body
    return kind, "\r\n".join(head).encode("latin-1") + b"\r\n\r\n" + payload


def send(host: str, port: int, request: bytes, timeout: float) -> int | str:
    """The answer's status code, or why there was none."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(request)
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    return "closed without an answer"
                data += chunk
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"socket error: {exc.__class__.__name__}"
    parts = data.split(b"\r\n", 1)[0].split()
    try:
        return int(parts[1])
    except (IndexError, ValueError):
        return f"unparseable status line {data[:60]!r}"


def health(host: str, port: int) -> bool:
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    return send(host, port, request, 5.0) == 200


def fuzz(url: str, key: str, count: int, seed: int, timeout: float, log: Callable[[str], None] = print) -> int:
    """Send `count` requests; print a summary; return how many answers were 500 (or no answer at all)."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "", parsed.port or 80
    if host not in LOOPBACK:
        raise SystemExit(f"refusing to fuzz {host!r}: loopback only (127.0.0.1, localhost, ::1)")
    rng = random.Random(seed)
    statuses: Counter = Counter()
    by_kind: dict[str, Counter] = {}
    bad: list[tuple[str, Any, bytes]] = []
    stalled: Counter = Counter()  # the server waited for more bytes than were sent (not a failure)
    started = time.monotonic()
    for _ in range(count):
        kind, request = build_request(rng, key)
        status = send(host, port, request, timeout)
        statuses[status] += 1
        by_kind.setdefault(kind.split(":")[0], Counter())[status] += 1
        if status == 500 or (isinstance(status, str) and status != "timeout"):
            bad.append((kind, status, request))
        elif status == "timeout":
            stalled[kind] += 1
    elapsed = time.monotonic() - started
    alive = health(host, port)
    log(f"fuzzed {url} with {count} requests (seed {seed}) in {elapsed:.1f} s")
    for kind, counter in sorted(by_kind.items()):
        log(f"  {kind:<8} " + ", ".join(f"{s}: {n}" for s, n in sorted(counter.items(), key=str)))
    log("  statuses: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items(), key=str)))
    log(f"  500s: {statuses[500]}; no answer: {sum(n for s, n in statuses.items() if isinstance(s, str))}")
    if stalled:
        log("  timeouts (server still waiting for the body): " + ", ".join(f"{k}: {n}" for k, n in stalled.items()))
    log(f"  /health after the run: {'200' if alive else 'NOT ANSWERING'}")
    for kind, status, request in bad[:10]:
        log(f"  !! {status} for {kind}: {request[:300]!r}")
    return len(bad) + (0 if alive else 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=procs.SERVERS, default="uvicorn", help="server to start (without --url)")
    parser.add_argument("--url", help="fuzz this already-running gateway (loopback only) instead of starting one")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--count", type=int, default=2000, help="requests to send (bounded: at most 100000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each answer")
    args = parser.parse_args(argv)
    count = max(1, min(args.count, 100_000))
    if args.url:
        if not args.key:
            parser.error("--url needs --key")
        return 1 if fuzz(args.url, args.key, count, args.seed, args.timeout) else 0
    work = Path(tempfile.mkdtemp(prefix="switchboard-fuzz-"))
    started: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        env, key = procs.prepare_database(work, "fuzz", CONFIG.format(mock=mock_url), ORG, AGENT)
        gateway, url = procs.start_gateway(args.server, "gateway", work, env)
        started.append(gateway)
        print(f"{args.server} gateway on {url}, mock upstream on {mock_url}, logs in {work}")
        failures = fuzz(url, key, count, args.seed, args.timeout)
        tracebacks = gateway.tail(100000).count("Traceback")
        print(f"  tracebacks in the gateway's log: {tracebacks}")
        return 1 if failures or tracebacks else 0
    finally:
        for proc in reversed(started):
            proc.stop()


if __name__ == "__main__":
    sys.exit(main())
