"""Every row of the protocol table against recorded wire frames (docs/translation.md#pairs).

The inputs in tests/fixtures/wire/ are each protocol's own wire: requests, whole answers and
streams as the providers document and send them (Anthropic's and Responses' named events,
OpenAI's chunks, Gemini's `\\r\\n` frames, Bedrock's binary eventstream). The expected outputs in
tests/fixtures/wire/expected/ were produced by the translations before they were split into one
module per pair, so each row must give the same bytes, fed whole or cut into small pieces.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from routing.core.failures import FailureKind, UpstreamFailure
from routing.upstream.translate import table
from routing.upstream.translate.messages_to_chat import Gaps
from routing.upstream.translate.table import TRANSLATORS
from tests.upstream.conftest import model

WIRE = Path(__file__).resolve().parent.parent / "fixtures" / "wire"
EXPECTED = WIRE / "expected"
NOW = 1_700_000_000.0
HELPERS = {
    "__init__",
    "table",
    "shared",
    "openai_request",
    "anthropic_structured",
    "gemini_structured",
    "bedrock_structured",
}  # not a pair of their own


def wire(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def body(name: str) -> dict[str, Any]:
    return orjson.loads(wire(name))


def dump(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def joined(stream: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in stream])


def tapped(tap: Any, data: bytes, size: int) -> bytes:
    out = b"".join(tap.feed(data[i : i + size]) for i in range(0, len(data), size)) + tap.flush()
    usage = {"prompt": tap.prompt_tokens, "completion": tap.completion_tokens, "classes": tap.classes}
    usage["final"], usage["estimated"] = tap.final, tap.estimated_completion_tokens()
    return out + b"\n--- usage\n" + dump(usage)


def _failure(kind: str, message: str) -> UpstreamFailure:
    return UpstreamFailure(FailureKind.STREAM_ERROR, f"{kind}: {message}")


async def outputs(rows: dict[tuple[str, str], Any], size: int) -> dict[str, bytes]:
    """What each row's parts give for the wire fixtures, every stream cut into `size`-byte pieces."""
    spec = model("up-model")
    chat, completion = body("chat_request.json"), body("chat_completion.json")
    out: dict[str, bytes] = {}
    row = rows[("chat", "messages")]
    out["chat_to_anthropic.request"] = dump(row.request(chat, "claude-up", True, None))
    out["chat_to_anthropic.answer"] = dump(row.answer(body("anthropic_message.json"), "claude-up"))
    out["chat_to_anthropic.stream"] = await joined(row.stream(pieces(wire("anthropic_stream.sse"), size), spec))
    row = rows[("chat", "gemini")]
    out["chat_to_gemini.request"] = dump(row.request(chat))
    out["chat_to_gemini.answer"] = dump(row.answer(body("gemini_answer.json"), spec, wire("gemini_answer.json")))
    out["chat_to_gemini.stream"] = await joined(row.stream(pieces(wire("gemini_stream.sse"), size), spec))
    row = rows[("chat", "converse")]
    out["chat_to_bedrock.request"] = dump(row.request(chat))
    out["chat_to_bedrock.answer"] = dump(row.answer(body("converse_answer.json"), "up-model"))
    events = pieces(wire("converse_stream.eventstream"), size)
    out["chat_to_bedrock.stream"] = await joined(row.stream(events, "up-model", _failure))
    row = rows[("messages", "chat")]
    noted = Gaps()
    translated = row.request(body("messages_request.json"), noted)
    out["messages_to_chat.request"] = dump([translated, noted.dropped, noted.refused])
    out["messages_to_chat.answer"] = dump(row.answer(completion))
    out["messages_to_chat.tap"] = tapped(row.tap(), wire("chat_stream.sse"), size)
    row = rows[("messages", "messages")]
    held = await joined(row.stream(pieces(wire("anthropic_stream.sse"), size)))
    out["messages_passthrough.stream"] = held
    out["messages_passthrough.tap"] = tapped(row.tap(), held, size)
    row = rows[("responses", "chat")]
    dropped: list[str] = []
    out["responses_to_chat.request"] = dump([row.request(body("responses_request.json"), dropped), dropped])
    out["responses_to_chat.answer"] = dump(row.answer(completion))
    out["responses_to_chat.tap"] = tapped(row.tap(), wire("chat_stream.sse"), size)
    row = rows[("responses", "responses")]
    held = await joined(row.stream(pieces(wire("responses_stream.sse"), size)))
    out["responses_passthrough.stream"] = held
    out["responses_passthrough.tap"] = tapped(row.tap(), held, size)
    return {name: re.sub(rb"chatcmpl-[0-9A-Za-z_-]{8,}", b"chatcmpl-ID", data) for name, data in out.items()}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW)


@pytest.mark.parametrize("size", [1 << 20, 7])
async def test_every_row_gives_the_recorded_translation_of_the_wire_fixtures(frozen_clock: None, size: int) -> None:
    found = await outputs(TRANSLATORS, size)
    expected = {path.stem: path.read_bytes() for path in EXPECTED.glob("*.out")}
    assert sorted(found) == sorted(expected)
    for name, data in found.items():
        assert data == expected[name], name


def test_every_pair_module_has_its_row_and_every_row_is_one_modules() -> None:
    """Adding a pair is its module and its row: a module without a row, or a row that borrows another
    module's parts, fails here."""
    modules = {path.stem for path in Path(table.__file__).parent.glob("*.py")} - HELPERS
    owners: dict[str, tuple[str, str]] = {}
    for key, row in TRANSLATORS.items():
        parts: list[Callable[..., Any]] = [p for p in (row.request, row.answer, row.stream, row.tap) if p is not None]
        homes = {p.__module__.rsplit(".", 1)[-1] for p in parts}
        assert len(homes) == 1, (key, homes)
        home = homes.pop()
        assert home not in owners, (key, owners.get(home))
        owners[home] = key
        client, upstream = key
        assert home.startswith(f"{client}_"), (key, home)
        assert row.passthrough == (client == upstream) == home.endswith("_passthrough"), (key, home)
    assert sorted(owners) == sorted(modules)


def test_the_gateway_takes_the_passthrough_only_where_the_upstream_speaks_the_protocol() -> None:
    assert table.translator("messages", True) is TRANSLATORS[("messages", "messages")]
    assert table.translator("messages", False) is TRANSLATORS[("messages", "chat")]
    assert table.translator("responses", True).passthrough
    assert not table.translator("responses", False).passthrough
