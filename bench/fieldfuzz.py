"""`python -m bench.fieldfuzz`: every field path of every endpoint's valid bodies, set to hostile values.

`bench.fuzz` mutates bodies at random; this walks them exhaustively. From a valid body
of each endpoint (chat completions, Anthropic messages and count_tokens, embeddings,
rerank, responses), every field path (nested objects and list items, down to the
leaves) is set to each of the hostile values in `HOSTILE` (wrong JSON types, huge and
negative numbers, NaN-like strings, long, empty, NUL, lone-surrogate and other unicode
strings, empty and deeply nested containers) and removed; each case is sent with
`"stream"` off and on, to every model of the endpoint, which includes the other
dialect's upstream (an OpenAI body to an anthropic-dialect model and an Anthropic body
to an openai-dialect one). The answer must never be a 5xx (nor no answer).

Runs against a gateway it starts (the mock upstream and `--server uvicorn|daphne|both`
on a throwaway SQLite database), or `--url/--key` (loopback only). `--count N` sends a
seeded sample of N cases instead of all of them. Exit status 1 on any 5xx, no answer,
traceback in the gateway's log or a /health that stopped answering. docs/testing.md#field-fuzzer.
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bench import fuzz, procs

REMOVED = "<removed>"
# name -> value; every one is sent in place of every field (~30, plus removal).
HOSTILE: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int": 7,
    "negative": -1,
    "huge-int": 2**64,
    "huger-int": 10**40,
    "int64-min": -(2**63),
    "float": 1.5,
    "negative-float": -0.5,
    "float-max": 1.7976931348623157e308,
    "float-min": -1e308,
    "nan-string": "NaN",
    "inf-string": "-Infinity",
    "empty-string": "",
    "short-string": "x",
    "number-string": "12",
    "long-string": "y" * 100_000,
    "nul": "a\u0000b",
    "surrogate": "\ud800",
    "unicode": "é\u202e🙂\ufeff",
    "empty-list": [],
    "list": [1, "a", None],
    "list-of-objects": [{}, {"type": 5}],
    "empty-object": {},
    "object": {"a": 1, "type": ["x"]},
    "typed-object": {"type": {"a": 1}, "text": 5},
    "deep-list": json.loads("[" * 300 + "]" * 300),
    "deep-object": json.loads('{"a":' * 300 + "1" + "}" * 300),
}

_SYSTEM = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
ANTHROPIC_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "42"}],
                "is_error": False,
            },
            {"type": "tool_result", "tool_use_id": "t1", "content": "43"},
        ],
    },
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "and now?"},
]
ANTHROPIC = {
    "system": _SYSTEM,
    "messages": ANTHROPIC_MESSAGES,
    "stop_sequences": ["\n"],
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "metadata": {"user_id": "u1"},
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {"a": {}}}}],
    "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "service_tier": "auto",
}
ANTHROPIC_SHORT = {
    "system": "be brief",
    "messages": [{"role": "user", "content": "hi"}],
    "tool_choice": {"type": "any"},
}

CHAT_MESSAGES = [
    {"role": "developer", "content": [{"type": "text", "text": "be brief"}], "name": "d"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}},
            {"type": "file", "file": {"file_data": "AA", "filename": "a.pdf"}},
        ],
    },
    {
        "role": "assistant",
        "content": "calling",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "custom", "custom": {"name": "g", "input": "x"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}, "refusal": None},
    {"role": "function", "name": "f", "content": "1"},
    {"role": "user", "content": "and now?"},
]
CHAT_MORE = {
    "messages": CHAT_MESSAGES,
    "max_completion_tokens": 30,
    "top_k": 3,
    "presence_penalty": 0.1,
    "frequency_penalty": -0.1,
    "logprobs": True,
    "top_logprobs": 2,
    "stop": "END",
    "tools": [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}, "strict": True}},
        {"type": "custom", "custom": {"name": "g", "description": "d", "format": {"type": "text"}}},
    ],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "functions": [{"name": "f", "parameters": {"type": "object"}}],
    "function_call": {"name": "f"},
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
    },
    "metadata": {"k": "v"},
    "modalities": ["text"],
    "reasoning_effort": "low",
    "service_tier": "auto",
    "verbosity": "low",
    "store": False,
    "prediction": {"type": "content", "content": "x"},
    "audio": {"voice": "alloy", "format": "wav"},
    "web_search_options": {},
    "safety_identifier": "s",
    "prompt_cache_key": "k",
}
RESPONSES = {
    "input": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ],
    "instructions": "x",
    "max_output_tokens": 50,
    "max_tool_calls": 2,
    "temperature": 0.3,
    "top_p": 0.5,
    "top_logprobs": 1,
    "tools": [{"type": "function", "name": "f", "parameters": {}}],
    "tool_choice": {"type": "function", "name": "f"},
    "parallel_tool_calls": True,
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "reasoning": {"effort": "low"},
    "include": ["reasoning.encrypted_content"],
    "metadata": {"k": "v"},
    "previous_response_id": "r1",
    "store": False,
    "background": False,
    "truncation": "auto",
    "user": "u",
}
_CHAT_MODELS = ["f-chat", "f-claude"]  # an openai-dialect and an anthropic-dialect upstream
_EMBED_MODELS = ["f-embed", "f-tei", "f-cohere"]
_RERANK_MODELS = ["f-rerank", "f-tei", "f-cohere"]
# (endpoint path, models, valid body without model); several bodies per endpoint, so that
# every field the gateway reads (or translates) is walked.
BODIES: list[tuple[str, list[str], dict[str, Any]]] = [
    ("/v1/chat/completions", _CHAT_MODELS, fuzz.VALID["/v1/chat/completions"][0][1]),
    ("/v1/chat/completions", _CHAT_MODELS, CHAT_MORE),
    ("/v1/messages", ["f-claude", "f-chat"], {"max_tokens": 20, **ANTHROPIC}),
    ("/v1/messages", ["f-claude", "f-chat"], {"max_tokens": 20, **ANTHROPIC_SHORT}),
    ("/v1/messages/count_tokens", _CHAT_MODELS, ANTHROPIC),
    ("/v1/embeddings", _EMBED_MODELS, fuzz.VALID["/v1/embeddings"][0][1]),
    ("/v1/embeddings", _EMBED_MODELS, {"input": "one", "user": "u", "input_type": "search_query"}),
    ("/v1/embeddings", _EMBED_MODELS, {"input": [[1, 2], [3]], "encoding_format": "base64"}),
    ("/v1/rerank", _RERANK_MODELS, fuzz.VALID["/v1/rerank"][0][1]),
    (
        "/v1/rerank",
        _RERANK_MODELS,
        {"query": "q", "documents": ["a"], "return_documents": True, "max_chunks_per_doc": 2},
    ),
    ("/v1/responses", ["f-resp"], fuzz.VALID["/v1/responses"][0][1]),
    ("/v1/responses", ["f-resp"], RESPONSES),
]


@dataclass(frozen=True, slots=True)
class Case:
    body_index: int
    endpoint: str
    model: str
    stream: bool
    path: tuple
    value: str  # a HOSTILE name or REMOVED

    def label(self) -> str:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path).lstrip(".")
        return f"{self.endpoint} {self.model} stream={self.stream} {where} = {self.value}"

    def body(self) -> bytes:
        body = {"model": self.model, **copy.deepcopy(BODIES[self.body_index][2])}
        if self.stream:
            body["stream"] = True
        target = body
        for step in self.path[:-1]:
            target = target[step]
        if self.value == REMOVED:
            del target[self.path[-1]]
        else:
            target[self.path[-1]] = HOSTILE[self.value]
        return json.dumps(body).encode()  # ensure_ascii: a lone surrogate is sent as its \\ud800 escape


def cases() -> Iterator[Case]:
    """Every case, in a fixed order: endpoint, model, stream, field path, value."""
    for index, (endpoint, models, valid) in enumerate(BODIES):
        for model in models:
            for stream in (False, True):
                body = {"model": model, **valid, **({"stream": True} if stream else {})}
                for path in fuzz.paths(body):
                    for value in (*HOSTILE, REMOVED):
                        yield Case(index, endpoint, model, stream, path, value)


def sample(count: int | None, seed: int) -> list[Case]:
    """All cases, or `count` of them drawn with `seed` (the same ones every time)."""
    every = list(cases())
    if count is None or count >= len(every):
        return every
    return random.Random(seed).sample(every, count)


def send(host: str, port: int, case: Case, key: str, timeout: float) -> tuple[int | str, bytes]:
    """(status or why there was none, the first bytes of the answer)."""
    body = case.body()
    head = (
        f"POST {case.endpoint} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    data = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(head.encode() + body)
            while len(data) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except TimeoutError:
        if not data:
            return "timeout", b""
    except OSError as exc:
        return f"socket error: {exc.__class__.__name__}", data
    try:
        return int(data.split(b"\r\n", 1)[0].split()[1]), data
    except (IndexError, ValueError):
        return "no answer", data


def run(url: str, key: str, chosen: list[Case], timeout: float, workers: int, log: Callable[[str], None]) -> dict:
    """Send every chosen case; log a summary and the failures; return the counts."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "", parsed.port or 80
    if host not in fuzz.LOOPBACK:
        raise SystemExit(f"refusing to fuzz {host!r}: loopback only (127.0.0.1, localhost, ::1)")
    statuses: Counter = Counter()
    bad: list[tuple[Case, Any, bytes]] = []
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = pool.map(lambda case: send(host, port, case, key, timeout), chosen)
        for case, (status, data) in zip(chosen, answers, strict=True):
            statuses[status] += 1
            if not isinstance(status, int) or status >= 500:
                bad.append((case, status, data))
    elapsed = time.monotonic() - started
    alive = fuzz.health(host, port)
    log(f"field-path fuzz of {url}: {len(chosen)} cases in {elapsed:.1f} s")
    log("  statuses: " + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items(), key=str)))
    log(f"  5xx or no answer: {len(bad)}; /health after the run: {'200' if alive else 'NOT ANSWERING'}")
    for case, status, data in bad[:20]:
        answer = data.split(b"\r\n\r\n", 1)[-1][:300]
        log(f"  !! {status} for {case.label()}: {answer!r}")
    return {"cases": len(chosen), "failures": len(bad), "alive": alive, "seconds": round(elapsed, 1)}


def one_server(server: str, chosen: list[Case], timeout: float, workers: int) -> dict:
    """Start the mock upstream and a `server` gateway, fuzz it, stop both; the counts plus tracebacks."""
    work = Path(tempfile.mkdtemp(prefix=f"switchboard-fieldfuzz-{server}-"))
    started: list[procs.Proc] = []
    try:
        mock, mock_url = procs.start_mock(work)
        started.append(mock)
        env, key = procs.prepare_database(work, "fuzz", fuzz.CONFIG.format(mock=mock_url), fuzz.ORG, fuzz.AGENT)
        gateway, url = procs.start_gateway(server, "gateway", work, env)
        started.append(gateway)
        print(f"{server} gateway on {url}, mock upstream on {mock_url}, logs in {work}")
        result = run(url, key, chosen, timeout, workers, print)
        result["tracebacks"] = gateway.tail(1_000_000).count("Traceback")
        print(f"  tracebacks in the gateway's log: {result['tracebacks']}")
        return result
    finally:
        for proc in reversed(started):
            proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=("uvicorn", "daphne", "both"), default="both")
    parser.add_argument("--url", help="fuzz this already-running gateway (loopback only) instead of starting one")
    parser.add_argument("--key", help="API key for --url (its agent must see the models of bench.fuzz.CONFIG)")
    parser.add_argument("--count", type=int, help="send a seeded sample of this many cases (default: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each answer")
    parser.add_argument("--workers", type=int, default=4, help="requests in flight at once (1-16)")
    args = parser.parse_args(argv)
    chosen = sample(args.count, args.seed)
    workers = max(1, min(args.workers, 16))
    if args.url:
        if not args.key:
            parser.error("--url needs --key")
        result = run(args.url, args.key, chosen, args.timeout, workers, print)
        return 1 if result["failures"] or not result["alive"] else 0
    servers = ("uvicorn", "daphne") if args.server == "both" else (args.server,)
    results = {server: one_server(server, chosen, args.timeout, workers) for server in servers}
    from bench.summary import save

    save("fieldfuzz", results)
    failed = any(r["failures"] or r["tracebacks"] or not r["alive"] for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
