"""`python -m bench.affinity_bench`: what prompt-cache affinity adds per request (docs/deployments.md#affinity-cost).

Per request, affinity adds the conversation key (`routing.core.affinity.key_of`, in the gateway's
`_admit`) and a pinned pick (`Picker.pick_pinned`) in place of the strategy's pick. This times
both, on realistic agent requests, against the plain pick of a model without affinity:

- `chat-20`: a 20-turn chat (a 2 kB system prompt, short turns), about 9 kB;
- `agent-200k`: a coding agent's 20th turn, about 200 kB: 40 tools with JSON-schema parameters
  (about 40 kB), a 15 kB system prompt, a first message with a pasted file, then tool calls
  and their results;
- `messages-200k`: the same as an Anthropic Messages body arrives here (the turns' content as parts);
- `header`: the same 200 kB body with an `X-Switchboard-Session` header.

Each figure is the minimum over many repeats of the mean of a batch of calls (perf_counter_ns):
on a loaded, shared machine the minimum is the cost without interference (`--callgrind` instead
runs each body's key under valgrind's instruction counter, for a load-independent count).
Target: at most 5 µs added per request with affinity on.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench import summary

TARGET_US = 5.0


def _tool(i: int) -> dict[str, Any]:
    props = {
        f"arg_{j}": {"type": "string", "description": f"Argument {j} of tool {i}: " + "what it means. " * 3}
        for j in range(8)
    }
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Tool {i} does one thing well. " * 12,
            "parameters": {"type": "object", "properties": props, "required": ["arg_0"]},
        },
    }


def chat_body(turns: int = 20, session: int = 0) -> dict[str, Any]:
    """A chat conversation of `turns` turns: a system prompt, a first message, short exchanges."""
    messages: list[Any] = [
        {"role": "system", "content": f"You are assistant {session}. Answer briefly and cite sources. " * 35},
        {"role": "user", "content": f"Session {session}: help me plan a trip to Lisbon in May."},
    ]
    for t in range(turns):
        messages += [
            {"role": "assistant", "content": f"Here is step {t} of the plan, with a few details. " * 3},
            {"role": "user", "content": f"Thanks, now turn {t}: what about the hotels?"},
        ]
    return {"model": "chat", "messages": messages, "stream": True}


def agent_body(turns: int = 20, session: int = 0) -> dict[str, Any]:
    """A coding agent's request after `turns` tool round trips: about 200 kB, tools first."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a coding agent. Follow the repository's conventions. " * 250},
        {"role": "user", "content": f"Session {session}: fix the failing test in this file:\n" + "x = 1\n" * 150},
    ]
    for t in range(turns):
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "tool_1", "arguments": '{"arg_0":"a"}'}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": f"line {t}: some output of the tool\n" * 200},
        ]
    return {"model": "chat", "messages": messages, "tools": [_tool(i) for i in range(40)], "stream": True}


def messages_body(turns: int = 20, session: int = 0) -> dict[str, Any]:
    """`agent_body` as an Anthropic Messages body arrives at the key: chat, its system prompt one string,
    the turns' content text parts."""
    body = agent_body(turns, session)
    for m in body["messages"]:
        if isinstance(m.get("content"), str) and m["role"] != "system":
            m["content"] = [{"type": "text", "text": m["content"]}]
    return body


def _per_call_ns(fn: Callable[[], Any], batch: int, repeats: int) -> float:
    """The minimum over `repeats` of the mean time of `batch` calls of `fn`, in ns."""
    ns = time.perf_counter_ns
    best = float("inf")
    for _ in range(repeats):
        t0 = ns()
        for _ in range(batch):
            fn()
        best = min(best, (ns() - t0) / batch)
    return best


def _pickers() -> tuple[Callable[[], Any], Callable[[str], Callable[[], Any]], list[Any]]:
    """The plain pick of a 3-deployment model, a factory of its pinned pick for one conversation, and the
    chain of that model with affinity."""
    import random

    from bench.deployments_bench import _links
    from routing.core.picking import Picker

    _, multi = _links("weighted")
    targets = multi.deployments[:3]
    pinned = replace(multi, model=replace(multi.model, affinity_s=300.0), deployments=targets)
    bal, draw = Picker(), random.Random(1).random

    def plain() -> Any:
        return bal.pick("weighted", targets, draw)

    def on(key: str) -> Callable[[], Any]:
        return lambda: bal.pick_pinned(pinned, targets, draw, key, lambda _k: True)

    return plain, on, [pinned]


def _admitted(links: list[Any], headers: list[tuple[bytes, bytes]], body: dict[str, Any]) -> Callable[[], Any]:
    """The gateway's part (routing.gateway.app._admit, as it runs with some model having affinity): does the
    chain have a model with it, the key, the per-org conversation set for the executor."""
    from routing.core import affinity

    def admit() -> None:
        pinned = any(link.model.affinity_s for link in links)
        key = affinity.key_of(headers, body, None) if pinned else None
        affinity.conversation.set(None if key is None else f"{'acme'}/{key}")

    return admit


def measure(batch: int, repeats: int) -> dict[str, Any]:
    """Per body: the key, the pinned pick, their sum, and the plain pick it replaces (µs)."""
    from routing.core import affinity

    plain, on, links = _pickers()
    plain_us = _per_call_ns(plain, batch, repeats) / 1000
    cases = {name: _case(name) for name in CASES}
    rows: dict[str, Any] = {"plain_pick_us": round(plain_us, 2)}
    for name, (headers, body) in cases.items():
        key = affinity.key_of(headers, body)
        assert key is not None
        key_us = _per_call_ns(_admitted(links, headers, body), batch, repeats) / 1000
        pick_us = _per_call_ns(on(key), batch, repeats) / 1000
        added = key_us + pick_us - plain_us
        rows[name] = {
            "body_kb": round(len(__import__("orjson").dumps(body)) / 1000, 1),
            "key_us": round(key_us, 2),  # the gateway's part: the key and the conversation set
            "pinned_pick_us": round(pick_us, 2),
            "added_us": round(added, 2),
            "met": added <= TARGET_US,
        }
    return rows


CASES = ("chat-20", "agent-200k", "messages-200k", "header")


# What an SDK sends besides the body (the OpenAI SDK's own x-stainless-* headers): the key looks through them all.
HEADERS = [
    (b"host", b"gateway.internal:8000"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"connection", b"keep-alive"),
    (b"accept", b"application/json"),
    (b"content-type", b"application/json"),
    (b"user-agent", b"OpenAI/Python 1.99.0"),
    (b"x-stainless-lang", b"python"),
    (b"x-stainless-package-version", b"1.99.0"),
    (b"x-stainless-os", b"Linux"),
    (b"x-stainless-arch", b"x64"),
    (b"x-stainless-runtime", b"CPython"),
    (b"x-stainless-runtime-version", b"3.12.3"),
    (b"authorization", b"Bearer sb-0123456789abcdef0123456789abcdef"),
    (b"x-stainless-retry-count", b"0"),
    (b"content-length", b"209123"),
]


def _case(name: str) -> tuple[list[tuple[bytes, bytes]], dict[str, Any]]:
    headers = [*HEADERS, (b"x-switchboard-session", b"conv-1234")] if name == "header" else HEADERS
    return headers, {"chat-20": chat_body, "messages-200k": messages_body}.get(name, agent_body)()


def _instructions(name: str, calls: int) -> int:
    """Instructions valgrind counts for a process that builds body `name` and keys it `calls` times."""
    import re
    import subprocess
    import sys

    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         "-m", "bench.affinity_bench", "--callgrind-one", name, "--calls", str(calls)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-2000:]
    return int(found.group(1))


def _callgrind(calls: int) -> None:
    """Per body, the instructions of one key: (count with `calls` keys - count with none) / calls."""
    for name in CASES:
        per_call = (_instructions(name, calls) - _instructions(name, 0)) / calls
        print(f"{name:<15}{per_call:>10.0f} instructions per key")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=200, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=300, help="batches; the fastest counts")
    parser.add_argument("--callgrind", action="store_true", help="instruction counts instead of times")
    parser.add_argument("--calls", type=int, default=2000, help="keys per callgrind run")
    parser.add_argument("--callgrind-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind:
        _callgrind(args.calls)
        return
    if args.callgrind_one:
        from routing.core import affinity

        headers, body = _case(args.callgrind_one)
        affinity.key_of(headers, body)  # the first call's one-time costs, in both counts
        for _ in range(args.calls):
            affinity.key_of(headers, body)
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")
    import django

    django.setup()  # the snapshot's types import the models (routing.config.secrets)
    rows = measure(args.batch, args.repeats)
    print(f"plain pick (affinity off): {rows['plain_pick_us']:.2f} µs")
    print(f"{'request':<15}{'body kB':>9}{'key µs':>9}{'pinned pick µs':>16}{'added µs':>10}  (target <= 5)")
    for name, row in rows.items():
        if isinstance(row, dict):
            print(
                f"{name:<15}{row['body_kb']:>9}{row['key_us']:>9.2f}{row['pinned_pick_us']:>16.2f}"
                f"{row['added_us']:>10.2f}  {'met' if row['met'] else 'MISSED'}"
            )
    summary.save("affinity", rows)


if __name__ == "__main__":
    main()
