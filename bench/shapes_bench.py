"""`python -m bench.shapes_bench`: what edge shape validation costs a request (docs/request-validation.md#cost).

timeit, best of several repeats, in microseconds per call: `body_schemas.check` on typical
bodies of each endpoint, the depth check on a large body and on a body with many
brackets, and — for scale — the `orjson.loads` every request already pays.
No server and no Django settings needed.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import orjson

from routing.gateway import body_schemas

TYPICAL_CHAT = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France? Answer in one word."},
    ],
    "temperature": 0.7,
    "max_tokens": 256,
    "stream": False,
}
TOOLS_CHAT = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Boston?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Boston"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 22}'},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ],
    "tool_choice": "auto",
    "stream": True,
    "stream_options": {"include_usage": True},
}
EMBEDDINGS = {"model": "text-embedding-3-small", "input": ["first sentence", "second sentence"], "dimensions": 256}
RERANK = {
    "model": "rerank",
    "query": "capital of the USA",
    "documents": ["Carson City", "Washington, D.C."],
    "top_n": 1,
}
RESPONSES = {"model": "gpt-4o", "instructions": "Be brief.", "input": [{"role": "user", "content": "hi"}]}
LONG_CHAT = {"model": "m", "messages": [{"role": "user", "content": "x" * 200}] * 100}
BIG_RAW = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (1 << 20)}]})
BRACKETY = {"model": "e", "input": [[1, 2, 3, 4]] * 2048}  # 2048 token lists: past the gate, checked for depth


def per_call_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    n, r = args.number, args.repeat
    rows: list[tuple[str, float]] = []
    for label, kind, body in (
        ("chat, typical (2 messages)", "chat", TYPICAL_CHAT),
        ("chat, tools + tool round trip", "chat", TOOLS_CHAT),
        ("chat, 100 messages", "chat", LONG_CHAT),
        ("embeddings", "embeddings", EMBEDDINGS),
        ("rerank", "rerank", RERANK),
        ("responses", "responses", RESPONSES),
    ):
        raw = orjson.dumps(body)
        rows.append(
            (
                f"body_schemas.check: {label}",
                per_call_us(lambda k=kind, b=body, w=raw: body_schemas.check(k, b, w), n, r),
            )
        )
        rows.append(
            (f"  (orjson.loads of the same body: {len(raw)} B)", per_call_us(lambda w=raw: orjson.loads(w), n, r))
        )
    big = orjson.loads(BIG_RAW)
    rows += [
        (
            f"body_schemas.check: chat, one 1 MiB message ({len(BIG_RAW)} B)",
            per_call_us(lambda: body_schemas.check("chat", big, BIG_RAW), 200, r),
        ),
        ("  of which the depth check (trial encode)", per_call_us(lambda: body_schemas.check_depth(big), 200, r)),
        ("  (orjson.loads of the same body)", per_call_us(lambda: orjson.loads(BIG_RAW), 200, r)),
        (
            "  (counting brackets instead, for comparison)",
            per_call_us(lambda: BIG_RAW.count(b"[") + BIG_RAW.count(b"{"), 200, r),
        ),
    ]
    brackety_raw = orjson.dumps(BRACKETY)
    rows.append(
        (
            f"body_schemas.check: embeddings of 2048 token lists ({len(brackety_raw)} B, depth checked)",
            per_call_us(lambda: body_schemas.check("embeddings", BRACKETY, brackety_raw), 200, r),
        )
    )
    width = max(len(label) for label, _ in rows)
    for label, us in rows:
        print(f"{label:<{width}}  {us:9.2f} µs")


if __name__ == "__main__":
    main()
